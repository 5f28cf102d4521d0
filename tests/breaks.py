"""Does each test catch the regression its name promises? Break the code on purpose and see.

Each entry below is one deliberate regression (a text replacement in one source file) and the
tests that must fail because of it. ``python -m tests.breaks [NAME ...]`` copies the working tree
(tracked and untracked, not ignored files) into a temporary directory once per break, applies the
break there, runs the named tests from that copy (``PYTHONPATH`` points every subprocess, Ray's
included, at the copy) and prints, per break, whether the tests caught it. Nothing in the working
tree is touched. The slow ones start a real local Ray cluster: run on an otherwise idle machine (Ray
processes a break leaves behind are killed afterwards).

Not collected by pytest (the file name does not start with ``test_``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tests import census

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Break:
    name: str
    file: str
    edits: tuple[tuple[str, str], ...]  # (text, its replacement), each text found exactly once
    tests: tuple[str, ...]
    what: str


BREAKS = [
    Break("no-label-flips", "workloads/gan3d/train.py",
          (("seed=self._seed(step, 1)) < self.preset.label_flip, 0.0, 1.0)", "seed=self._seed(step, 1)) < 0.0, 0.0, 1.0)"),),
          ("tests/gan3d/test_train.py::test_label_flips_and_noise_in_the_real_step_differ_between_steps_and_replicas",),
          "the training step stops flipping real labels"),
    Break("same-draws-on-every-replica", "workloads/gan3d/train.py",
          (("(step * 4096 + replica) * 8 + draw", "(step * 4096 + 0 * replica) * 8 + draw"),),
          ("tests/gan3d/test_train.py::test_label_flips_and_noise_in_the_real_step_differ_between_steps_and_replicas",),
          "every replica draws the same flips and noise"),
    Break("no-inverse-power-transform", "workloads/gan3d/train.py",
          (("return tf.pow(tf.nn.relu(img), 1.0 / power)", "return tf.nn.relu(img)"),),
          ("tests/gan3d/test_train.py::test_generated_showers_are_in_stored_units",),
          "generated showers are left in the training domain"),
    Break("spot-priced-on-demand", "burst/placement/catalog.py",
          (("return self.price_spot", "return self.price_od"),),
          ("tests/infra/test_stacks.py::test_dry_run_cli_json_for_every_provider",),
          "a preemptible cluster is priced at the on-demand rate"),
    Break("undescribed-nested-field", "burst/placement/policy.py",
          (('description="GPUs this run may use on-prem"', 'description=""'),),
          ("tests/burst/test_policy.py::test_schema_describes_every_field",),
          "a nested policy field loses its description"),
    Break("budget-never-stops-hard", "burst/runtime/budget.py",
          (("            stop_job()\n", "            pass\n"),),
          ("tests/burst/test_budget.py::test_workers_that_ignore_the_stop_request_are_stopped_hard_once",),
          "workers that ignore the stop request are never stopped"),
    Break("resume-repeats-an-epoch", "workloads/gan3d/train.py",
          (('        self.history = list(meta["history"])\n        return int(self.epoch.numpy())', '        self.history = list(meta["history"])[:-1]\n        self.epoch.assign_sub(1)\n        return int(self.epoch.numpy())'),),
          ("tests/burst/test_local_cluster.py::test_detached_cli_and_preempted_worker_resume_exactly",),
          "a resumed run trains its last checkpointed epoch again"),
    Break("down-keeps-a-killed-up", "burst/targets/local.py",
          (("        raise BurstError(f\"cluster {handle.name!r}: processes {survivors} did not stop; kill them and run `burst down {handle.name}` again\", exit_code=1)\n    with state.locked():\n        _forget(handle)",
            "        raise BurstError(f\"cluster {handle.name!r}: processes {survivors} did not stop; kill them and run `burst down {handle.name}` again\", exit_code=1)\n    with state.locked():\n        pass"),),
          ("tests/burst/test_local_cluster.py::test_killed_up_is_reported_truthfully_and_down_cleans_up",),
          "`burst down` of a cluster whose `up` was killed stops it but keeps its record"),
    Break("down-stops-nothing", "burst/targets/local.py",
          (("    survivors = stop_processes(handle.cluster_id, handle.temp_dir)\n    if survivors:", "    survivors = []\n    if survivors:"),),
          ("tests/burst/test_local_cluster.py::test_up_is_secure_and_idempotent",),
          "`burst down` forgets a running cluster without stopping its processes"),
    Break("cancel-detaches", "burst/runs.py",
          (("            jobs.client(handle).stop_job(run.job_id)\n", "            pass\n"),),
          ("tests/burst/test_local_cluster.py::test_ctrl_c_with_cancel_stops_the_job",),
          "Ctrl-C with --cancel leaves the job running"),
    Break("bad-data-retried", "burst/runtime/ray_train.py",
          (('        if world > 1 or not line.startswith("bad input data: "):', '        if True:'),),
          ("tests/burst/test_local_cluster.py::test_a_failing_job_is_one_line_a_failed_run_and_no_cluster_left",),
          "a worker that met a bad file is restarted by Ray Train to read it again"),
    Break("run-keeps-its-cluster", "burst/api.py",
          (("    _down_quietly(result.handle, report, raise_errors=True)\n    return record", "    return record"),),
          ("tests/burst/test_local_cluster.py::test_headline_run_trains_validates_reports_and_leaves_nothing",),
          "`burst run` does not take its cluster down after success"),
]


def _copy_tree(dest: Path) -> None:
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, check=True).stdout.split(b"\0")
    for name in filter(None, files):
        src = ROOT / name.decode()
        if src.is_symlink():  # `policies` links to burst/policies
            (dest / name.decode()).parent.mkdir(parents=True, exist_ok=True)
            (dest / name.decode()).symlink_to(os.readlink(src))
        elif src.is_file():
            (dest / name.decode()).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name.decode())


def _kill_leftovers(before: set, copy: Path) -> None:
    """A break in teardown leaves Ray clusters running (that is what the test caught): stop them."""
    import psutil

    for line in census.survivors(before):
        pid, name = line.split()[:2]
        if str(copy) in line or name.startswith(("ray", "raylet", "gcs_server")):
            try:
                psutil.Process(int(pid)).kill()
            except psutil.Error:
                pass


def check(item: Break) -> tuple[str, float]:
    """Apply one break in a fresh copy and run its tests there; 'caught', 'MISSED' or why not run."""
    with tempfile.TemporaryDirectory(prefix="burst-break-") as tmp:
        copy = Path(tmp)
        _copy_tree(copy)
        target = copy / item.file
        text = target.read_text()
        for old, new in item.edits:
            if text.count(old) != 1:
                return f"not applied: the text to replace occurs {text.count(old)} times in {item.file}", 0.0
            text = text.replace(old, new)
        target.write_text(text)
        env = {**os.environ, "PYTHONPATH": str(copy)}
        which = subprocess.run([sys.executable, "-c", "import burst, workloads; print(burst.__file__, workloads.__file__)"],
                               cwd=copy, env=env, capture_output=True, text=True)
        if not all(path.startswith(str(copy)) for path in which.stdout.split()):
            return f"not run: the copy's packages do not shadow the installed ones ({which.stdout.strip()})", 0.0
        before = census.snapshot()
        start = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *item.tests],
                              cwd=copy, env=env, capture_output=True, text=True)
        took = time.monotonic() - start
        _kill_leftovers(before, copy)
        if proc.returncode == 1:
            # a test's own failure first; an ERROR is a fixture's teardown tripping over the same break
            failed = sorted((line for line in proc.stdout.splitlines() if line.startswith(("FAILED", "ERROR"))), key=lambda line: not line.startswith("FAILED"))
            return "caught: " + ("; ".join(failed)[:300] or "tests failed"), took
        if proc.returncode == 0:
            return "MISSED: the tests passed with the break in place", took
        return f"not run: pytest exited {proc.returncode}: {proc.stdout[-500:]}", took


def main(names: list[str]) -> int:
    chosen = [b for b in BREAKS if not names or b.name in names]
    unknown = set(names) - {b.name for b in BREAKS}
    if unknown:
        print(f"unknown break(s): {', '.join(sorted(unknown))}; known: {', '.join(b.name for b in BREAKS)}")
        return 2
    missed = 0
    for item in chosen:
        verdict, took = check(item)
        missed += not verdict.startswith("caught")
        print(f"{item.name:30s} {item.what}\n    {item.file}: {verdict} ({took:.0f} s)", flush=True)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
