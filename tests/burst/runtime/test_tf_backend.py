"""burst's Ray Train backend gives each worker the TF_CONFIG MultiWorkerMirroredStrategy reads
(tests/workloads/gan3d/test_train.py trains under that strategy from such a TF_CONFIG)."""

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow

# Two workers of a real Ray Train run (a fresh local Ray instance): each reports its TF_CONFIG and
# whether TensorFlow was imported in its process; the driver says whether it imported TensorFlow.
SCRIPT = r"""
import json, os, sys, tempfile
import ray
from ray import train
from ray.train import RunConfig, ScalingConfig
from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer
from burst.runtime.tf_backend import TfConfig

def loop(config):
    seen = {"tf_config": json.loads(os.environ["TF_CONFIG"]), "rank": train.get_context().get_world_rank()}
    with open(os.path.join(config["out"], f"{seen['rank']}.json"), "w") as fh:
        json.dump(seen, fh)

ray.init(address="local", num_cpus=2, include_dashboard=False)  # its own Ray, whatever else runs on the machine
out = tempfile.mkdtemp()
DataParallelTrainer(loop, train_loop_config={"out": out}, backend_config=TfConfig(),
                    scaling_config=ScalingConfig(num_workers=2, resources_per_worker={"CPU": 1}),
                    run_config=RunConfig(name="tfc", storage_path=tempfile.mkdtemp())).fit()
ray.shutdown()
print(json.dumps({"workers": [json.load(open(os.path.join(out, f))) for f in sorted(os.listdir(out))],
                  "driver_imported_tensorflow": "tensorflow" in sys.modules}))
"""


def test_each_worker_gets_every_address_and_its_own_index_and_no_tensorflow_is_imported_to_set_it():
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    workers = result["workers"]
    assert [w["rank"] for w in workers] == [0, 1]
    addresses = workers[0]["tf_config"]["cluster"]["worker"]
    assert len(addresses) == 2 and len(set(addresses)) == 2 and all(a.rsplit(":", 1)[1].isdigit() for a in addresses)
    for w in workers:
        assert w["tf_config"] == {"cluster": {"worker": addresses}, "task": {"type": "worker", "index": w["rank"]}}
    assert result["driver_imported_tensorflow"] is False
