"""How long a managed run takes from the loss of its cluster to the judgement, and to the first
training step on the next target, for each kind of loss this machine can stage, both directions.

    python benchmarks/lost_cluster.py [--only KIND ...]

Starts a Slurm site of its own (``tests/support/slurm_site.py``: root and Debian's slurm-wlm +
munge), then for each kind a managed run of gan3d (``burst run --managed --detach``, a small
synthetic dataset, the policy's defaults for every grace) whose recovery may go only to the other
target; after its first epoch the cluster is lost:

- local -> slurm: the head's gcs_server SIGKILLed; its raylet SIGKILLed; every process of the
  cluster SIGKILLed (a crash of the machine's Ray);
- slurm -> local: the allocation cancelled (``scancel``); its node set DOWN (what slurmctld does to
  a node that stops answering; the running job ends NODE_FAIL, as ``scontrol(1)`` documents);
- kubernetes -> local: your own Kubernetes as the tests stand it in (the kubectl stand-in over a
  real Ray head here), its head pod deleted (``kubectl delete pod``: KubeRay makes a new one) and
  the real head's processes killed with it, as a pod's containers are.

Printed, one row per kind: loss -> judged (the attempt's end), loss -> the next cluster up, loss ->
its first step, and the judgement's words; then the run's timeline as `burst status RUN` shows it.
The run is stopped once the next target has trained its first step.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support import slurm_site  # noqa: E402

TRAIN = ["--synthetic", "200", "--val-events", "100", "--batch-per-replica", "8", "--epochs", "30", "--steps", "8"]
KINDS = {  # kind -> (first target, the target it moves to)
    "gcs_server": ("local", "slurm"), "raylet": ("local", "slurm"), "every process": ("local", "slurm"),
    "scancel": ("slurm", "local"), "node down": ("slurm", "local"),
    "head pod deleted": ("kubernetes", "local"),
}
FAKES = ROOT / "tests" / "fakes" / "kube"


def burst(env: dict, cwd: Path, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "burst.cli", *args], capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)


def policy(site: slurm_site.SlurmSite, path: Path, moves_to: str) -> Path:
    """The test site's policy with the shipped recovery graces, moving only to ``moves_to``."""
    text = site.policy(path).read_text().split("recovery:")[0]
    path.write_text(text + f"recovery:\n  max_restarts: 1\n  allow_providers: [{moves_to}]\n")
    return path


def stop_controller(run_id: str) -> None:
    """The run's controller and what it started (a tunnel's port-forward), ended: the case is over."""
    import psutil

    for proc in psutil.process_iter(["cmdline"]):
        if f"burst.controller run {run_id}" in " ".join(proc.info["cmdline"] or []):
            for child in proc.children(recursive=True) + [proc]:
                try:
                    child.kill()
                except psutil.Error:
                    pass


def kubernetes_site(root: Path, env: dict, moves_to: str) -> tuple[dict, Path, list[str]]:
    """Your own Kubernetes as the tests stand it in (``tests/fakes/kube``: kubectl's documented
    behaviour over recorded objects) whose RayCluster head is a real Ray head on this machine, up
    and holding the head's token: (the environment, the policy, the run's placement flags)."""
    from tests.support.kube_site import site_operator

    fake, head_home = root / "kube", root / "head-home"
    fake.mkdir()
    path = f"{Path(sys.executable).parent}:{FAKES}:{os.environ['PATH']}"
    proc = burst({**env, "BURST_HOME": str(head_home), "PATH": path}, root, "up", "--provider", "local", "--name", "rayhead", "--cpus", "2")
    if proc.returncode != 0:
        raise SystemExit(f"the stand-in's Ray head did not start: {proc.stderr[-1000:]}")
    head = json.loads((head_home / "clusters" / "rayhead.json").read_text())
    site_operator(fake)
    (fake / "namespaces.json").write_text(json.dumps(["physics"]))
    rules = root / "k8s.yaml"
    rules.write_text(f"providers: [kubernetes, local]\nmax_slowdown: 1000\nonprem: {{scheduler: kubernetes, name: lab-k8s, "
                     f"accelerator: skylake-48c, gpus: 1, usd_per_gpu_hour: 0.5, context: lab, namespace: physics, "
                     f"storage: 'file://{root / 'bucket'}'}}\nrecovery:\n  max_restarts: 1\n  allow_providers: [{moves_to}]\n")
    env = {**env, "FAKE_KUBE": str(fake), "FAKE_KUBE_HEAD": head["dashboard_url"].rsplit(":", 1)[1], "PATH": path}
    up = burst(env, root, "up", "--provider", "kubernetes", "--policy", str(rules), "--name", "lost", "--image", "registry.example.org/burst:1",
               "--json")
    if up.returncode != 0:
        raise SystemExit(f"the stand-in Kubernetes cluster did not come up: {up.stderr[-1000:]}")
    Path(json.loads(up.stdout)["token_path"]).write_text(Path(head["token_path"]).read_text())  # the Secret's token is the head's
    return env, rules, ["--cluster", "lost"]


def lose(kind: str, handle: dict, site: slurm_site.SlurmSite, env: dict) -> None:
    import psutil

    from burst.runtime.ray_head import cluster_processes

    if kind in ("gcs_server", "raylet"):
        (proc,) = [p for p in cluster_processes(handle["cluster_id"], handle["temp_dir"]) if p.name() == kind]
        proc.kill()
    elif kind == "every process":
        for proc in cluster_processes(handle["cluster_id"], handle["temp_dir"]):
            try:
                proc.kill()
            except psutil.Error:
                pass
    elif kind == "scancel":
        site.slurm("scancel", handle["outputs"]["job_id"])
    elif kind == "node down":
        site.slurm("scontrol", "update", f"NodeName={site.host}", "State=DOWN", "Reason=burst-benchmark-node-lost")
    elif kind == "head pod deleted":  # the pod goes, and its containers' processes with it: here the real head behind the stand-in
        rc = handle["outputs"]["ray_cluster"]
        subprocess.run(["kubectl", "--context=lab", "delete", "pod", f"{rc}-head-0", "-n", "physics"], check=True, capture_output=True, env=env)
        head = json.loads((Path(handle["outputs"]["bench_head_home"]) / "clusters" / "rayhead.json").read_text())
        for proc in cluster_processes(head["cluster_id"], head["temp_dir"]):
            try:
                proc.kill()
            except psutil.Error:
                pass
    else:
        raise SystemExit(f"unknown kind {kind!r}")


def one(kind: str, site: slurm_site.SlurmSite, work: Path) -> dict:
    first, then = KINDS[kind]
    root = work / re.sub(r"\W", "-", kind)
    root.mkdir()
    env = {**site.env, "BURST_HOME": str(root / "home")}
    rules = policy(site, root / "policy.yaml", then)
    where = ["--provider", "local", "--cpus", "2"] if first == "local" else ["--provider", "slurm", "--hours", "1"]
    if first == "kubernetes":
        env, rules, where = kubernetes_site(root, env, then)
    verb = ["train", "gan3d"] if first == "kubernetes" else ["run", "gan3d", "--name", "lost"]  # a site's cluster is up already
    started = burst(env, root, *verb, *where, "--managed", "--detach", "--policy", str(rules), *TRAIN)
    if started.returncode != 0:
        raise SystemExit(f"{kind}: burst run failed: {started.stderr[-2000:]}")
    run_id = re.search(r"(gan3d-[0-9a-z-]+)", started.stdout + started.stderr).group(1)
    record, managed = root / "home" / "runs" / f"{run_id}.json", root / "home" / "managed" / f"{run_id}.json"
    try:  # whatever fails from here, nothing of the case outlives it
        deadline = time.time() + 900
        while ((json.loads(record.read_text()).get("progress") or {}).get("epoch") or 0) < 1:
            if time.time() > deadline or json.loads(managed.read_text())["phase"] == "finished":
                raise SystemExit(f"{kind}: no epoch trained: {json.loads(record.read_text()).get('message')}")
            time.sleep(1)
        handle = json.loads((root / "home" / "clusters" / "lost.json").read_text())
        handle["outputs"]["bench_head_home"] = str(root / "head-home")
        lose(kind, handle, site, env)
        lost_at = time.time()
        deadline = lost_at + 1200
        while True:
            m = json.loads(managed.read_text())
            if len(m["attempts"]) > 1 and m["attempts"][1].get("first_step") or m["phase"] == "finished" or time.time() > deadline:
                break
            time.sleep(1)
        shown = burst(env, root, "status", run_id).stdout
    finally:
        stop_controller(run_id)
        burst(env, root, "down", "--all", timeout=600)
        if first == "kubernetes":
            burst({**env, "BURST_HOME": str(root / "head-home")}, root, "down", "--all", timeout=600)
        if kind == "node down":
            site.slurm("scontrol", "update", f"NodeName={site.host}", "State=RESUME", check=False)
    lost, nxt = m["attempts"][0], (m["attempts"][1] if len(m["attempts"]) > 1 else {})

    def since(at):
        return f"{at - lost_at:.1f}" if at else "-"

    return {"kind": kind, "direction": f"{first} -> {then}", "judged": since(lost.get("ended")), "up": since(nxt.get("cluster_up")),
            "first_step": since(nxt.get("first_step")), "how": lost.get("how") or "not judged",
            "timeline": [line for line in shown.splitlines() if line.startswith("moved: ")]}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", nargs="*", choices=sorted(KINDS), help="these kinds of loss alone")
    args = parser.parse_args()
    if slurm_site.missing():
        raise SystemExit(slurm_site.missing())
    site = slurm_site.start()
    work = Path(tempfile.mkdtemp(prefix="burst-lost-"))
    rows = []
    try:
        for kind in args.only or KINDS:
            rows.append(one(kind, site, work))
            print(f"{rows[-1]['kind']}: judged {rows[-1]['judged']} s, first step {rows[-1]['first_step']} s", flush=True)
    finally:
        slurm_site.stop(site)
    import psutil

    cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    model = next((line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if line.startswith("model name")), platform.machine())
    print(f"\nthis machine: {model}, {psutil.cpu_count()} CPUs; the policy's default graces")
    print(f"{'loss':15s} {'direction':16s} {'loss->judged':>13s} {'loss->up':>9s} {'loss->1st step':>15s}  judged as")
    for r in rows:
        print(f"{r['kind']:15s} {r['direction']:16s} {r['judged']:>11s} s {r['up']:>7s} s {r['first_step']:>13s} s  {r['how']}")
    for r in rows:
        for line in r["timeline"]:
            print(f"{r['kind']}: {line}")
    return 0 if all(r["first_step"] != "-" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
