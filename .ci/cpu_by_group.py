"""CPU-seconds by kind of process over a CI run, from the kernel's process accounting (`accton`,
Debian's acct; `dump-acct` prints one line per process that ended: its command name, user and
system ticks). A record names a process by the thread that ended last (a Ray daemon often by its
jemalloc or gRPC thread, a TensorFlow process by a tf_ thread); Ray renames its workers (ray::...).
CLI calls, job drivers and pytest's own workers are all `python`: accounting cannot tell them apart."""

import os
import subprocess
import sys
from collections import Counter

GROUPS = (("Ray workers (training, trials, actors: ray::...)", ("ray::",)),
          ("Python (pytest workers, CLI calls, job drivers, Ray's Python helpers)", ("python",)),
          ("Ray's daemons and processes ending in a Ray, gRPC or jemalloc thread", (
              "raylet", "gcs_server", "jemalloc_bg_thd", "grpc", "event_engine", "default-executo", "resolver-execut",
              "gcs_client_io", "timer_manager", "client.poll", "PipeReaderThd", "PipeDumpThd", "nexting_thread", "core_worker",
              "io_service", "dashboard", "agent")),
          ("processes ending in a TensorFlow thread (workers, drivers, in-process tests)", ("tf_", "tf-")),
          ("site servers (Slurm, munge, PostgreSQL, Prometheus, Chromium, Azurite)",
           ("slurm", "munged", "postgres", "prometheus", "chrom", "node", "sbatch", "srun", "squeue", "sacct", "scancel", "initdb", "pg_")),
          ("compilers and tools (pip, gcc, git, ...)", ("pip", "cc1", "gcc", "ld", "git", "as", "ch-", "npm")))


def main(path: str) -> int:
    ticks = os.sysconf("SC_CLK_TCK")
    dumped = subprocess.run(["dump-acct", path], capture_output=True, text=True, check=True).stdout.splitlines()
    seconds: Counter[str] = Counter()
    for line in dumped:
        fields = [f.strip() for f in line.split("|")]
        if len(fields) < 4:
            continue
        command, cpu = fields[0], (float(fields[2]) + float(fields[3])) / ticks
        group = next((name for name, prefixes in GROUPS if command.startswith(prefixes)), "other")
        seconds[group] += cpu
    total = sum(seconds.values())
    print(f"CPU-seconds by kind of process, every process that ended during the run ({total:,.0f} s in all):")
    for group, value in seconds.most_common():
        print(f"  {value:9,.0f} s  {value / total:5.1%}  {group}")
    return 0 if total else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
