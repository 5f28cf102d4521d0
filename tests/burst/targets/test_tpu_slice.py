"""A TPU pod slice driven on a real multi-node Ray cluster (Ray's ``cluster_utils``: four raylets on
this machine), its nodes presenting the resources the slice's startup script gives its hosts
(``TPU_HOST`` on each, ``TPU_SLICE_HEAD`` on host 0). No TPU is reachable, so TensorFlow's client
is stood in for by a function that trains "epochs" as files on the storage and resumes from the
newest, as ``train_on_host`` does with checkpoints; what runs where, with which environment, and
what a lost host does are burst's own code (``burst.runtime.tpu.train``)."""

import json
import os
import sys

import pytest

from tests.support.ray_private import own_ray_tmpdir
from tests.support.scripts import run_script

pytestmark = pytest.mark.slow

SCRIPT = r"""
import json, os, sys, threading, time
from pathlib import Path
import ray
from ray.cluster_utils import Cluster
from burst.runtime import tpu
from burst.runtime.job import JobConfig, RunFiles

out = Path(sys.argv[1])
cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "resources": {"TPU_HOST": 1, "TPU_SLICE_HEAD": 1}})
workers = [cluster.add_node(num_cpus=1, resources={"TPU_HOST": 1}) for _ in range(3)]
ray.init(address=cluster.address)
head_node = ray.get_runtime_context().get_node_id()

def client(cfg_arg, final_dir):
    cfg = JobConfig.from_arg(cfg_arg)
    store = Path(cfg.storage)
    start = len(list(store.glob("epoch_*"))) + 1  # the newest "checkpoint"
    with open(store / "clients.jsonl", "a") as fh:
        fh.write(json.dumps({"start_epoch": start, "node_id": ray.get_runtime_context().get_node_id(),
                             "TPU_NAME": os.environ.get("TPU_NAME"), "TPU_LOAD_LIBRARY": os.environ.get("TPU_LOAD_LIBRARY")}) + "\n")
    for epoch in range(start, cfg.epochs + 1):
        time.sleep(1.5)
        (store / f"epoch_{epoch}").write_text("")
        with open(store / "trained.log", "a") as fh:
            fh.write(f"{epoch}\n")
    Path(final_dir).mkdir(parents=True, exist_ok=True)
    return final_dir

cfg = JobConfig(run_id="slice", storage=str(out), epochs=5, tpu=True, tpu_hosts=4, tpu_name="burst-slice-x")
result = {}
driver = threading.Thread(target=lambda: result.update(zip(("final", "why"), tpu.train(cfg, out / "final", train_fn=client, hosts_wait_s=120))))
driver.start()
while not (out / "epoch_2").exists():
    time.sleep(0.1)
cluster.remove_node(workers[1])  # a host's Ray node dies mid-run
time.sleep(4)
cluster.add_node(num_cpus=1, resources={"TPU_HOST": 1})  # and comes back (the slice's hosts restart): Ray wants the main thread
driver.join(timeout=200)
final, why = result.get("final"), result.get("why", "the driver did not return")
def broken(cfg_arg, final_dir):
    raise ValueError("the data says no")  # an error of the training itself, not of a host

try:
    tpu.train(cfg.model_copy(update={"run_id": "broken"}), out / "final-broken", train_fn=broken, hosts_wait_s=10)
    raised = None
except Exception as exc:
    raised = f"{type(exc).__name__}: {exc}"

# A host lost for good: it never comes back. The slice waits a bounded time, then says so as a
# notice at its newest checkpoint (which the controller of a managed run acts on: this slice down,
# the run on a new one from there) and stops.
def lasting(cfg_arg, final_dir):
    cfg = JobConfig.from_arg(cfg_arg)
    ckpts = Path(RunFiles(cfg.storage, cfg.run_id).tpu_checkpoints)
    for epoch in range(1, cfg.epochs + 1):
        time.sleep(1.5)
        (ckpts / f"epoch_{epoch:04d}").mkdir(parents=True, exist_ok=True)  # as train_on_host names them
    return final_dir

gone = {}
lost_cfg = cfg.model_copy(update={"run_id": "gone", "epochs": 50})
lost_driver = threading.Thread(target=lambda: gone.update(zip(("final", "why"), tpu.train(lost_cfg, out / "final-gone", train_fn=lasting, hosts_wait_s=6))))
lost_driver.start()
ckpt_root = Path(RunFiles(lost_cfg.storage, lost_cfg.run_id).tpu_checkpoints)
while not (ckpt_root / "epoch_0002").exists():
    time.sleep(0.1)
removed_at = time.time()
cluster.remove_node(workers[2])  # and never added again
lost_driver.join(timeout=120)
print(json.dumps({"final": str(final) if final else None, "why": why, "head_node": head_node, "raised": raised,
                  "nodes": [n["NodeID"] for n in ray.nodes() if n["Alive"]], "gone": gone, "removed_at": removed_at,
                  "returned_at": time.time(), "alive": lost_driver.is_alive()}))
ray.shutdown()
cluster.shutdown()
"""


def test_a_pod_slice_runs_its_client_on_host_0_with_the_slice_s_name_holds_every_host_and_restarts_from_its_checkpoint(tmp_path):
    with own_ray_tmpdir() as ray_env:
        proc = run_script([sys.executable, "-c", SCRIPT, str(tmp_path)], timeout=600, env={**os.environ, **ray_env})
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    result = json.loads(lines[-1])
    assert result["why"] is None and result["final"] == str(tmp_path / "final")
    events = [json.loads(line.split("BURST_EVENT ", 1)[1]) for line in lines if "BURST_EVENT " in line]
    said = [e["message"] for e in events if e["type"] == "status"]
    # each attempt holds all four hosts, one sentinel on each Ray node
    holding = [m for m in said if m.startswith("training on 4 TPU host(s)")]
    assert len(holding) == 4 and all(m.count("(Ray node ") == 4 for m in holding)  # two attempts, the broken run's one, the lost host's run's one
    assert len({part.split(")")[0] for part in holding[0].split("(Ray node ")[1:]}) == 4
    assert any("a TPU host left the Ray cluster: the slice starts again from its newest checkpoint" in m and "restart 1 of 3" in m for m in said)
    # TensorFlow's client ran on host 0 (the TPU_SLICE_HEAD), with the slice's name and the library left to the TPU runtime
    clients = [json.loads(line) for line in (tmp_path / "clients.jsonl").read_text().splitlines()]
    assert len(clients) == 2 and all(c["node_id"] == result["head_node"] for c in clients)
    assert all(c["TPU_NAME"] == "burst-slice-x" and c["TPU_LOAD_LIBRARY"] == "0" for c in clients)
    # the second attempt went on from the newest checkpoint: every epoch trained once, in order
    assert clients[0]["start_epoch"] == 1 and clients[1]["start_epoch"] >= 3
    assert [int(x) for x in (tmp_path / "trained.log").read_text().split()] == [1, 2, 3, 4, 5]
    # an error of the training itself ends the run at once, as on one host: no restart
    assert "the data says no" in result["raised"] and sum("restart" in m for m in said) == 2  # the first run's and the lost host's run's

    # a host that never returns: the slice restarts once the others are there, waits its bounded
    # time for the missing one, then says it stopped on notice at its newest checkpoint
    assert result["alive"] is False and result["gone"]["final"] is None
    assert "the TPU slice has 3 of its 4 host(s) in the Ray cluster" in result["gone"]["why"]
    stopped = [e for e in events if e["type"] == "stopped"]
    assert len(stopped) == 1 and stopped[0]["reason"].startswith("notice: a TPU host lost for good")
    assert stopped[0]["time"] - result["removed_at"] < 6 + 30  # the wait (6 s here, 15 min by default) and Ray's own notice
    done = sorted(p.name for p in (tmp_path / "tpu-checkpoints" / "gone").iterdir())
    assert (stopped[0]["epoch"], stopped[0]["step"]) == (len(done) + 1, 0)  # where the newest checkpoint goes on from
    # which the controller of a managed run reads as lost capacity: this slice down, the run moved on from there
    from burst.controller import ending
    from burst.runtime.job import StoppedEvent

    assert ending("FAILED", StoppedEvent(**{k: v for k, v in stopped[0].items() if k != "type"}), budget=False, lease=False) == "notice"


def test_a_single_host_slice_uses_its_local_chips_and_a_pod_slice_needs_its_name():
    from burst.runtime import tpu
    from burst.runtime.job import JobConfig

    assert tpu.host_environment(JobConfig(run_id="r", storage="/s", tpu=True)) == {}
    assert tpu.host_environment(JobConfig(run_id="r", storage="/s", tpu=True, tpu_hosts=16, tpu_name="n")) == {"TPU_NAME": "n", "TPU_LOAD_LIBRARY": "0"}
    with pytest.raises(ValueError, match="needs its name"):
        tpu.host_environment(JobConfig(run_id="r", storage="/s", tpu=True, tpu_hosts=4))
