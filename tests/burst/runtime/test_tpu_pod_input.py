"""A TPU pod slice's input in the pod's shape: two hosts, each a Ray node in its own mount
namespace with its own disk (a private tmpfs over one path, as every TPU VM has its own /tmp), the
training data in the emulated ``gs://`` store, burst's own driver (``tpu.train``: the shards made
once in the store, every host's sentinel copying its own), and one client on host 0 that builds
each host's input pipeline and runs it on that host, as TPUStrategy does on a pod.

What stands in (no TPU here): each host's TPU runtime is a TensorFlow server in the host's
namespace, and the client, instead of TPUStrategy, places pipeline ``i`` on host ``i``'s CPU and
reads it there. A pipeline that read host 0's disk, or ran Python on the client, would find host
1's shards missing: the test checks that such a read fails.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.support.ray_private import own_ray_tmpdir
from tests.support.scripts import run_script
from tests.support.storage_servers import gcs_server, new_bucket  # noqa: F401 (fixture)

pytestmark = pytest.mark.slow

SCRIPT = r"""
import json, os, socket, subprocess, sys, tempfile, time
from pathlib import Path

out, bucket = Path(sys.argv[1]), sys.argv[2]
os.environ["RAY_DISABLE_USAGE_STATS"] = "1"
(out / "ray-token").write_text(os.urandom(32).hex())  # token authentication, as every burst Ray cluster has (read when Ray is imported)
os.environ.update({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(out / "ray-token")})
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
from burst.runtime import storage, tpu
from burst.runtime.job import JobConfig
from burst.runtime.ray_head import free_port
from workloads.gan3d import synthetic

HOSTS = 2
disk = Path(tempfile.mkdtemp(prefix="pod-disk-", dir=out))  # each host mounts its own tmpfs here (inside the test's directory)
port = free_port()
hosts = []
for i in range(HOSTS):
    resources = {"TPU_HOST": 1, **({"TPU_SLICE_HEAD": 1} if i == 0 else {})}
    args = ["ray", "start", "--block", "--num-cpus", "1", "--resources", json.dumps(resources), "--disable-usage-stats"]
    args += ["--head", f"--port={port}", "--include-dashboard=false"] if i == 0 else [f"--address=127.0.0.1:{port}"]
    env = {**os.environ, "TMPDIR": str(disk), tpu.WORKER_ENV: str(i)}  # RAY_TMPDIR: the test's own, outside the hosts' disks
    log = open(out / f"host{i}.log", "w")
    hosts.append(subprocess.Popen(["unshare", "-m", "--propagation", "private", "sh", "-c",
                                   f'mount -t tmpfs -o size=256m,mode=0700 burst-host{i} "$0" && exec "$@"', str(disk), *args],
                                  env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
    if i == 0:
        for _ in range(120):
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.5)
try:
    ray.init(address=f"127.0.0.1:{port}")
    for _ in range(120):
        if ray.cluster_resources().get("TPU_HOST", 0) >= HOSTS:
            break
        time.sleep(0.5)
    nodes = {n["Resources"].get("TPU_SLICE_HEAD", 0) > 0: n["NodeID"] for n in ray.nodes() if n["Alive"]}
    node_of = [nodes[True], nodes[False]]

    # each host's TPU runtime: a TensorFlow server in the host's namespace
    tf_ports = [free_port() for _ in range(HOSTS)]
    spec = {"worker": [f"127.0.0.1:{p}" for p in tf_ports]}
    (out / "tf_cluster.json").write_text(json.dumps(spec))

    @ray.remote(num_cpus=0)
    class Runtime:
        def start(self, spec, index):
            import tensorflow as tf
            self.server = tf.distribute.Server(tf.train.ClusterSpec(spec), job_name="worker", task_index=index, start=True)
            return index

    runtimes = [Runtime.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node_of[i], soft=False)).remote() for i in range(HOSTS)]
    ray.get([r.start.remote(spec, i) for i, r in enumerate(runtimes)])

    def client(cfg_arg, final_dir):
        # host 0's TensorFlow client: TPUStrategy's place for pipeline i is host i
        import tensorflow as tf
        from burst import workloads
        cfg = JobConfig.from_arg(cfg_arg)
        cluster = tf.train.ClusterSpec(json.loads((out / "tf_cluster.json").read_text()))
        tf.config.experimental_connect_to_cluster(tf.distribute.cluster_resolver.SimpleClusterResolver(cluster, rpc_layer="grpc"),
                                                  make_master_device_default=False)
        files = tpu.pod_files(cfg)
        trainer, dataset_fn, steps = workloads.get(cfg.workload).prepare_training(files, cfg.preset, 4, seed=0, steps_per_epoch=3,
                                                                                 pod_hosts=cfg.tpu_hosts)
        read = {}
        for i in range(cfg.tpu_hosts):
            ctx = tf.distribute.InputContext(num_input_pipelines=cfg.tpu_hosts, input_pipeline_id=i, num_replicas_in_sync=cfg.tpu_hosts)
            with tf.device(f"/job:worker/replica:0/task:{i}/device:CPU:0"):
                read[i] = sorted(round(float(v), 5) for batch in dataset_fn(ctx, 0) for v in batch["y"].numpy())
        # a pipeline that read another host's disk: host 1 asked for host 0's own shard
        mine = sorted(p.name for p in tpu.pod_dir(cfg.run_id).iterdir())
        try:
            with tf.device("/job:worker/replica:0/task:1/device:CPU:0"):
                [r for r in tf.data.TFRecordDataset(str(tpu.pod_dir(cfg.run_id) / next(n for n in mine if n.startswith("shard-")))).take(1)]
            crossed = "read"
        except tf.errors.NotFoundError:
            crossed = "not found"
        # the energy calibration's training events: host 0's own shards, from host 0's disk
        reference = sorted(round(float(v) / 100.0, 5) for v in trainer.reference.energy_gev)
        Path(final_dir).mkdir(parents=True, exist_ok=True)
        (Path(final_dir) / "read.json").write_text(json.dumps({"read": read, "reference": reference, "steps": steps, "events": trainer.global_batch,
                                                               "host0_disk": mine, "crossed": crossed, "TPU_NAME": os.environ.get("TPU_NAME")}))
        return final_dir

    def disk_of_host(run_id):
        return sorted(p.name for p in tpu.pod_dir(run_id).iterdir())

    data = synthetic.write_dataset(out / "h5", 120, seed=3, events_per_file=60)
    storage.copy_dir(str(out / "h5"), f"{bucket}/data")
    cfg = JobConfig(workload="gan3d", preset="small", epochs=1, batch_per_replica=4, run_id="pod-run", storage=bucket, tpu=True,
                    tpu_hosts=HOSTS, tpu_name="pod-slice", train_files=tuple(f"{bucket}/data/{p.name}" for p in sorted(data)))
    final, why = tpu.train(cfg, out / "final", train_fn=client, hosts_wait_s=60)
    host1 = ray.get(ray.remote(num_cpus=0)(disk_of_host).options(scheduling_strategy=NodeAffinitySchedulingStrategy(node_of[1], soft=False)).remote("pod-run"))
    storage.copy_dir(f"{bucket}/pod-input/pod-run", str(out / "shards"))
    print("RESULT " + json.dumps({"final": str(final) if final else None, "why": why, "host1_disk": host1,
                                  "outer_disk": sorted(p.name for p in disk.iterdir())}), flush=True)
finally:
    ray.shutdown()
    for p in hosts:
        try:
            os.killpg(p.pid, 15)
        except ProcessLookupError:
            pass
    for p in hosts:
        p.wait(timeout=60)
"""


def _unshare_missing() -> str | None:
    if not shutil.which("unshare"):
        return "unshare (util-linux) is not installed"
    probe = subprocess.run(["unshare", "-m", "--propagation", "private", "true"], capture_output=True)
    return None if probe.returncode == 0 else "this machine cannot make mount namespaces (unshare -m needs root)"


def _energies_by_shard(shards_dir) -> dict[str, list[float]]:
    import tensorflow as tf

    out = {}
    for path in sorted(shards_dir.glob("*.tfrecords")):
        ys = []
        for record in tf.data.TFRecordDataset(str(path)):
            ex = tf.train.Example.FromString(record.numpy())
            ys.append(round(ex.features.feature["Y"].float_list.value[0], 5))
        out[path.name] = ys
    return out


def test_every_host_of_a_pod_slice_reads_its_own_shards_from_its_own_disk(gcs_server, tmp_path):
    missing = _unshare_missing()
    if missing:
        if os.environ.get("BURST_REQUIRE_SITE_TESTS"):
            pytest.fail(missing)
        pytest.skip(missing)
    bucket = new_bucket("gs", gcs_server.env)
    env = {**os.environ, **gcs_server.env, "PATH": os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])}
    with own_ray_tmpdir() as ray_env:
        proc = run_script([sys.executable, "-c", SCRIPT, str(tmp_path), bucket], timeout=900, env={**env, **ray_env})
    said = proc.stdout + proc.stderr
    assert proc.returncode == 0, said[-4000:]
    result = json.loads(next(line for line in said.splitlines() if line.startswith("RESULT "))[7:])
    assert result["why"] is None and result["final"], result
    client = json.loads((tmp_path / "final" / "read.json").read_text())
    assert client["TPU_NAME"] == "pod-slice"  # the client's environment on a pod (TPUClusterResolver's slice name)

    # the shards in the store: made once by the driver, two (one a host), every event in one of them
    by_shard = _energies_by_shard(tmp_path / "shards")
    names = sorted(by_shard)
    assert names == ["shard-00000-of-00002.tfrecords", "shard-00001-of-00002.tfrecords"]
    assert sum(len(v) for v in by_shard.values()) > 0
    # each host's disk holds its own shard and the meta file, nothing else; the outer machine's holds none
    assert client["host0_disk"] == ["meta.json", names[0]]
    assert result["host1_disk"] == ["meta.json", names[1]]
    assert result["outer_disk"] == []
    # each host's pipeline ran there, on its own shard: 3 steps of 4 events
    for host in (0, 1):
        read = client["read"][str(host)]
        assert len(read) == 3 * 4 and set(read) <= set(by_shard[names[host]]), (host, read)
    # the calibration's reference is every event of host 0's shard, read on host 0
    assert client["reference"] == sorted(by_shard[names[0]]), client["reference"]
    # and the disks are private: host 1 cannot read a shard only host 0 holds
    assert client["crossed"] == "not found"
