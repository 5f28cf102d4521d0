import json
import subprocess
import sys

import numpy as np
import pytest

from workloads.gan3d import data
from workloads.gan3d.presets import SMALL

BATCH = 8
STEPS = 2


@pytest.fixture(scope="module")
def spec(tiny_h5):
    return data.InputSpec.discover(tiny_h5, SMALL)


def _trainer(seed=0):
    from workloads.gan3d.train import GAN3DTrainer

    return GAN3DTrainer(SMALL, BATCH, seed=seed)


def _weights(trainer):
    return [w.copy() for w in trainer.generator.get_weights() + trainer.discriminator.get_weights()]


def _fit(trainer, spec, epochs):
    fn = data.make_dataset_fn(spec, SMALL, BATCH, STEPS, seed=0)
    return trainer.fit(fn, epochs, STEPS)


def test_step_changes_weights_and_is_deterministic_under_a_seed(spec):
    a = _trainer(seed=1)
    initial = _weights(a)
    hist_a = _fit(a, spec, 1)
    after = _weights(a)
    assert any(not np.array_equal(x, y) for x, y in zip(initial, after))
    b = _trainer(seed=1)
    np.testing.assert_array_equal(_weights(b)[0], initial[0])  # same seed, same initialisation
    hist_b = _fit(b, spec, 1)
    for x, y in zip(after, _weights(b)):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)
    assert hist_a[0]["d_loss"] == pytest.approx(hist_b[0]["d_loss"], rel=1e-4)
    assert hist_a[0]["epoch"] == 1 and hist_a[0]["steps"] == STEPS and hist_a[0]["samples"] == STEPS * BATCH


def test_label_flips_and_noise_differ_between_steps_and_replicas():
    """Flips and noise come from TF random ops keyed by the step, not trace-time NumPy."""
    import tensorflow as tf

    from workloads.gan3d.presets import LABEL_FLIP

    t = _trainer(seed=2)

    @tf.function
    def draw(step):
        flips = tf.where(tf.random.stateless_uniform([4000], seed=t._seed(step, 1)) < LABEL_FLIP, 0.0, 1.0)
        return flips, t._latent(tf.ones([2]), tf.ones([2]), t._seed(step, 0))

    flips1, z1 = draw(tf.constant(1, tf.int64))
    flips2, z2 = draw(tf.constant(2, tf.int64))
    again, _ = draw(tf.constant(1, tf.int64))
    assert not np.array_equal(flips1.numpy(), flips2.numpy())
    assert not np.array_equal(z1.numpy()[:, 2:], z2.numpy()[:, 2:])
    np.testing.assert_array_equal(flips1.numpy(), again.numpy())  # a function of the step: resumable
    rate = 1 - flips1.numpy().mean()
    assert 0.03 < rate < 0.07  # about 5 % of labels flipped
    np.testing.assert_array_equal(z1.numpy()[:, :2], np.ones((2, 2)))  # conditioning [Ep/100, θ] first
    assert int(t.step.numpy()) == 0


def test_checkpoint_restore_continue_equals_uninterrupted_run(spec, tmp_path):
    straight = _trainer(seed=3)
    _fit(straight, spec, 2)

    first = _trainer(seed=3)
    _fit(first, spec, 1)
    first.save(tmp_path / "ckpt")

    resumed = _trainer(seed=99)  # a different seed: everything must come from the checkpoint
    assert resumed.restore(tmp_path / "ckpt") == 1
    history = _fit(resumed, spec, 2)
    assert [h["epoch"] for h in history] == [2]
    assert [h["epoch"] for h in resumed.history] == [1, 2]
    for x, y in zip(_weights(straight), _weights(resumed)):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)
    for a, b in zip(straight.g_opt.variables, resumed.g_opt.variables):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)


def test_restore_refuses_another_preset(spec, tmp_path):
    from workloads.gan3d.presets import PAPER
    from workloads.gan3d.train import GAN3DTrainer

    t = _trainer()
    t.save(tmp_path / "c")
    with pytest.raises(ValueError, match="preset 'small'"):
        GAN3DTrainer(PAPER, 2).restore(tmp_path / "c")


def test_generated_showers_are_in_stored_units(spec):
    t = _trainer()
    showers = t.generate(np.array([150.0, 120.0]), np.radians([90.0, 70.0]))
    assert showers.shape == (2, 17, 17, 25)
    assert (showers >= 0).all()


MIRRORED = r"""
import json, sys
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
from workloads.gan3d import data
from workloads.gan3d.presets import SMALL
from workloads.gan3d.train import GAN3DTrainer
spec = data.InputSpec.discover(sys.argv[1], SMALL)
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
t = GAN3DTrainer(SMALL, 4, strategy=strategy, seed=0)
fn = data.make_dataset_fn(spec, SMALL, 4, 2, seed=0)
before = [w.copy() for w in t.generator.get_weights()]
hist = t.fit(fn, 1, 2)
changed = any((a != b).any() for a, b in zip(before, t.generator.get_weights()))
print(json.dumps({"replicas": strategy.num_replicas_in_sync, "global_batch": t.global_batch, "hist": hist, "changed": bool(changed)}))
"""


def test_same_loop_runs_under_mirrored_strategy_with_two_replicas(tiny_h5):
    proc = subprocess.run([sys.executable, "-c", MIRRORED, str(tiny_h5)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["replicas"] == 2 and out["global_batch"] == 8 and out["changed"]
    assert out["hist"][0]["samples"] == 2 * 8
    assert np.isfinite(out["hist"][0]["g_loss"])


MULTI_WORKER = r"""
import json, os, sys
import tensorflow as tf
from workloads.gan3d import data
from workloads.gan3d.presets import SMALL
from workloads.gan3d.train import GAN3DTrainer
strategy = tf.distribute.MultiWorkerMirroredStrategy()  # cluster from TF_CONFIG
spec = data.InputSpec.discover(sys.argv[1], SMALL)
t = GAN3DTrainer(SMALL, 4, strategy=strategy, seed=0)
hist = t.fit(data.make_dataset_fn(spec, SMALL, 4, 2, seed=0), 1, 2)
# trainable weights only: BatchNorm moving statistics are per replica by design (not synced)
checksum = float(sum(abs(v.numpy()).sum() for v in t.generator.trainable_variables + t.discriminator.trainable_variables))
print(json.dumps({"replicas": strategy.num_replicas_in_sync, "hist": hist, "checksum": checksum}))
"""


def test_same_loop_runs_under_multi_worker_mirrored_strategy_from_tf_config(tiny_h5):
    """Two real worker processes on loopback: synchronous updates keep their weights identical."""
    import os
    import socket

    ports = []
    for _ in range(2):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    procs = []
    for index in range(2):
        env = {**os.environ, "TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})}
        procs.append(subprocess.Popen([sys.executable, "-c", MULTI_WORKER, str(tiny_h5)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env))
    outs = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=300)
        assert p.returncode == 0, stderr[-2000:]
        outs.append(json.loads(stdout.strip().splitlines()[-1]))
    assert [o["replicas"] for o in outs] == [2, 2]
    assert outs[0]["hist"][0]["samples"] == 2 * 2 * 4  # steps × (per-replica batch × replicas)
    assert outs[0]["checksum"] == pytest.approx(outs[1]["checksum"], rel=1e-6)
