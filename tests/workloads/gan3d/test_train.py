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


LABEL_SPY = r"""
import json, sys
import numpy as np
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
from workloads.gan3d import data
from workloads.gan3d.presets import SMALL
from workloads.gan3d.train import GAN3DTrainer

seen = []


class Spy(GAN3DTrainer):
    # Records the labels and latent vectors the real training step hands to its updates.
    def _discriminator_update(self, images, labels, y, ang, ecal, step=None):
        replica = tf.distribute.get_replica_context().replica_id_in_sync_group
        tf.py_function(lambda r, s, l: seen.append(("d", int(r), int(s), l.numpy().tolist())), [replica, self.step, labels], [])
        return super()._discriminator_update(images, labels, y, ang, ecal, step)

    def _generator_update(self, latent, y, ang, ecal, real, step=None):
        replica = tf.distribute.get_replica_context().replica_id_in_sync_group
        tf.py_function(lambda r, s, z: seen.append(("g", int(r), int(s), z.numpy()[:, :2].tolist(), float(z.numpy()[:, 2:].sum()))),
                       [replica, self.step, latent], [])
        return super()._generator_update(latent, y, ang, ecal, real, step)


spec = data.InputSpec.discover(sys.argv[1], SMALL)
batch, steps = int(sys.argv[2]), int(sys.argv[3])
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
t = Spy(SMALL, batch, strategy=strategy, seed=int(sys.argv[4]))
before = [w.copy() for w in t.generator.get_weights()]
hist = t.fit(data.make_dataset_fn(spec, SMALL, batch, steps, seed=0), 1, steps)
changed = any((a != b).any() for a, b in zip(before, t.generator.get_weights()))
print(json.dumps({"seen": seen, "replicas": strategy.num_replicas_in_sync, "global_batch": t.global_batch, "hist": hist,
                  "changed": bool(changed)}))
"""


def _spy_run(h5_dir, batch, steps, seed) -> dict:
    proc = subprocess.run([sys.executable, "-c", LABEL_SPY, str(h5_dir), str(batch), str(steps), str(seed)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def wide_h5(tmp_path_factory):
    from workloads.gan3d.synthetic import write_dataset

    out = tmp_path_factory.mktemp("wide_h5")
    write_dataset(out, 256, seed=12, events_per_file=128)
    return out


@pytest.mark.slow
def test_the_loop_runs_on_two_replicas_and_its_label_flips_and_noise_differ_between_steps_and_replicas(wide_h5):
    """The training loop under MirroredStrategy on two replicas, recording what the step feeds its
    updates: the batch is per replica, the weights move, and about 5 % of the labels are flipped,
    with a new pattern and new noise every step and on every replica. (That the draws repeat for
    the same seed is what the exact-resume tests check. One run for both: a second TensorFlow
    process that only trained on two replicas cost the suite 14 to 16 CPU-s.)"""
    batch, steps = 32, 2
    run = _spy_run(wide_h5, batch, steps, seed=7)
    assert run["replicas"] == 2 and run["global_batch"] == 2 * batch and run["changed"]
    assert run["hist"][0]["samples"] == steps * 2 * batch and np.isfinite(run["hist"][0]["g_loss"])
    seen = run["seen"]
    d = [(r, s, labels) for kind, r, s, labels in (e[:4] for e in seen) if kind == "d"]
    # per (replica, step): first update on real (labels mostly 1), second on fake (mostly 0)
    by_key: dict = {}
    for r, s, labels in d:
        by_key.setdefault((r, s), []).append(np.array(labels))
    assert sorted(by_key) == [(0, 1), (0, 2), (1, 1), (1, 2)]
    real = {k: v[0] for k, v in by_key.items()}
    fake = {k: v[1] for k, v in by_key.items()}
    flipped = sum(int((x == 0).sum()) for x in real.values()) + sum(int((x == 1).sum()) for x in fake.values())
    total = 2 * 2 * steps * batch
    assert 0.02 < flipped / total < 0.09  # 5 % expected: 26 of 512 (binomial sd ≈ 5)
    assert set(np.unique(np.concatenate(list(real.values())))) <= {0.0, 1.0}
    for pattern in (real, fake):
        assert not np.array_equal(pattern[(0, 1)], pattern[(1, 1)])  # replicas differ
        assert not np.array_equal(pattern[(0, 1)], pattern[(0, 2)])  # steps differ
    g = [e for e in seen if e[0] == "g"]
    assert sorted((r, s) for _, r, s, _c, _n in g) == [(0, 1), (0, 1), (0, 2), (0, 2), (1, 1), (1, 1), (1, 2), (1, 2)]
    assert len({total_noise for *_, total_noise in g}) == 8  # both generator updates, every replica and step: new noise


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


def test_a_checkpoint_taken_inside_an_epoch_resumes_at_its_step_as_if_never_stopped(spec, tmp_path):
    # What a notice (walltime, preemption) or the step interval saves: the weights after step 3 of
    # 4, the epoch's metric sums and its seconds so far. Resumed, training goes on at step 4 of the
    # same data order, and the epoch's record covers all four steps.
    steps = 4
    fn = data.make_dataset_fn(spec, SMALL, BATCH, steps, seed=0)
    straight = _trainer(seed=5)
    whole = straight.fit(fn, 2, steps)

    first = _trainer(seed=5)
    saved = []
    first.fit(fn, 2, steps, on_checkpoint=lambda pos: saved.append((pos, first.save(tmp_path / f"at{pos['epoch']}-{pos['step']}"))),
              checkpoint_every=3, should_stop=lambda: first.epoch_step == 3 and first.epoch.numpy() == 1, stop_check_every=1)
    assert [pos for pos, _ in saved] == [{"epoch": 1, "step": 3, "steps": 4}, {"epoch": 2, "step": 3, "steps": 4}]
    assert first.stopped == {"epoch": 2, "step": 3, "steps": 4}
    meta = json.loads((saved[-1][1] / "history.json").read_text())
    assert meta["position"]["step"] == 3 and len(meta["history"]) == 1

    resumed = _trainer(seed=77)
    assert resumed.restore(saved[-1][1]) == 1 and resumed.epoch_step == 3
    stepped = []
    history = resumed.fit(fn, 2, steps, on_step=stepped.append)
    assert [s["step"] for s in stepped] == [4]  # one step left of epoch 2, none repeated
    assert [h["epoch"] for h in resumed.history] == [1, 2]
    assert history[0]["steps"] == steps and history[0]["samples"] == steps * BATCH
    assert history[0]["d_loss"] == pytest.approx(whole[1]["d_loss"], rel=1e-4)  # the sums of steps 1-3 came back
    for x, y in zip(_weights(straight), _weights(resumed)):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)
    assert resumed.position() is None  # between epochs again: a checkpoint now holds whole epochs


def test_restore_refuses_another_preset(spec, tmp_path):
    from workloads.gan3d.presets import PAPER
    from workloads.gan3d.train import GAN3DTrainer

    t = _trainer()
    t.save(tmp_path / "c")
    with pytest.raises(ValueError, match="preset 'small'"):
        GAN3DTrainer(PAPER, 2).restore(tmp_path / "c")


def test_restore_names_an_older_checkpoint_format(spec, tmp_path):
    """A checkpoint from before the generator's first block became one layer cannot be matched
    variable by variable; the error says so instead of TensorFlow's list of unbound objects."""
    t = _trainer()
    meta_file = t.save(tmp_path / "c") / "history.json"
    meta = json.loads(meta_file.read_text())
    del meta["format"]  # what burst wrote before formats were numbered
    meta_file.write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="format 1, this burst reads format 2"):
        _trainer().restore(tmp_path / "c")


def test_generated_showers_are_in_stored_units(tiny_h5):
    """``generate`` undoes the pipeline's transform: a generator that outputs the training-domain
    images of real events must give back those events' cells in stored units (50 x GeV)."""
    import keras

    from workloads.gan3d.data import load, load_raw
    from workloads.gan3d.features import rebin
    from workloads.gan3d.presets import NOISE_SIZE
    from workloads.gan3d.train import generate_showers

    train_domain = load(tiny_h5, SMALL, limit=3).x  # what D sees and G learns to produce
    stored = rebin(load_raw(tiny_h5, limit=3)["ECAL"], SMALL.rebin)
    assert not np.allclose(train_domain, stored, rtol=0.05)  # the transform is not the identity
    images = keras.ops.convert_to_tensor(train_domain[..., None])
    replay = keras.Sequential([keras.Input((2 + NOISE_SIZE,)),
                               keras.layers.Lambda(lambda z: images[: keras.ops.shape(z)[0]])])
    showers = generate_showers(replay, np.array([150.0, 120.0, 180.0]), np.radians([90.0, 70.0, 100.0]), power=SMALL.power, batch=3)
    assert showers.shape == (3, 17, 17, 25)
    np.testing.assert_allclose(showers, stored, rtol=1e-4, atol=1e-4)


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


@pytest.mark.slow
def test_same_loop_runs_under_multi_worker_mirrored_strategy_from_tf_config(tiny_h5):
    """Two real worker processes on loopback: synchronous updates keep their weights identical."""
    import os
    import socket

    # Hold each port for the whole test (bound to 127.0.0.1 with SO_REUSEADDR, never listening),
    # so no other process is handed it between our choice and the workers' bind; Linux lets
    # gRPC's own SO_REUSEADDR socket bind the wildcard address on the same port beside it.
    holders = []
    for _ in range(2):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", 0))
        holders.append(s)
    ports = [h.getsockname()[1] for h in holders]
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    procs = []
    for index in range(2):
        env = {**os.environ, "TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})}
        procs.append(subprocess.Popen([sys.executable, "-c", MULTI_WORKER, str(tiny_h5)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env))
    outs = []
    try:
        for p in procs:
            stdout, stderr = p.communicate(timeout=300)
            assert p.returncode == 0, stderr[-2000:]
            outs.append(json.loads(stdout.strip().splitlines()[-1]))
    finally:
        for h in holders:
            h.close()
    assert [o["replicas"] for o in outs] == [2, 2]
    assert outs[0]["hist"][0]["samples"] == 2 * 2 * 4  # steps × (per-replica batch × replicas)
    assert outs[0]["checksum"] == pytest.approx(outs[1]["checksum"], rel=1e-6)


def test_restore_refuses_a_checkpoint_trained_on_another_power(spec, tmp_path):
    """Small-preset checkpoints from before its power became 0.5 were trained on x ** 0.85: the
    generator would be read with the wrong inverse transform, so the restore says so."""
    t = _trainer()
    meta_file = t.save(tmp_path / "c") / "history.json"
    meta = json.loads(meta_file.read_text())
    del meta["power"]  # what burst wrote while every preset used the paper's power
    meta_file.write_text(json.dumps(meta))
    with pytest.raises(ValueError, match=r"trained on images \*\* 0.85; preset 'small' now trains on \*\* 0.5"):
        _trainer().restore(tmp_path / "c")


def test_restore_refuses_a_checkpoint_that_read_the_angle_with_another_gain(spec, tmp_path):
    """A generator trained reading the angle widened would be asked for angles twenty times too
    close to 90° by one that reads it plain, and the other way round: the restore says so."""
    from workloads.gan3d.presets import tuned
    from workloads.gan3d.train import GAN3DTrainer

    widened = tuned(SMALL, {"angle_gain": 20.0})
    meta_file = GAN3DTrainer(widened, BATCH).save(tmp_path / "c") / "history.json"
    meta = json.loads(meta_file.read_text())
    assert meta["angle_gain"] == 20.0
    del meta["angle_gain"]  # what burst wrote before the gain: every generator read the plain angle
    meta_file.write_text(json.dumps(meta))
    with pytest.raises(ValueError, match=r"with gain 1.0; preset 'small' now reads it with gain 20.0"):
        GAN3DTrainer(widened, BATCH).restore(tmp_path / "c")


def test_the_profile_term_is_zero_for_matching_batches_and_grows_with_wider_tails():
    import tensorflow as tf

    from workloads.gan3d.presets import PAPER
    from workloads.gan3d.train import profile_mismatch

    assert PAPER.profile_weight == 0.0  # the paper preset trains with the authors' four losses only
    rng = np.random.default_rng(0)
    core = np.zeros((4, 17, 17, 25, 1), np.float32)
    core[:, 8, 8] = rng.uniform(0.5, 1.0, (4, 25, 1))
    core[:, 7:10, 7:10] += 0.01
    wide = core.copy()
    wide[:, 5:12, 5:12] += 0.01  # the same core with ten times the deposits two and three cells out
    same = float(profile_mismatch(tf.constant(core), tf.constant(core), 0.5))
    wider = float(profile_mismatch(tf.constant(wide), tf.constant(core), 0.5))
    assert same == 0.0 and wider > 0.5
    fake = tf.Variable(wide)
    with tf.GradientTape() as tape:
        loss = profile_mismatch(fake, tf.constant(core), 0.5)
    grad = tape.gradient(loss, fake).numpy()
    assert grad[:, 5, 8].mean() > 0  # descending the gradient lowers the excess tail


def test_the_hit_channel_marks_cells_above_the_validation_threshold():
    import dataclasses

    import tensorflow as tf

    from workloads.gan3d.model import HitMap, build_discriminator
    from workloads.gan3d.validate import HIT_THRESHOLD_GEV

    stored = np.array([0.0, 0.8, 1.0, 1.1, 3.0]) * HIT_THRESHOLD_GEV * 50.0  # 50 stored units per GeV
    marks = HitMap(0.5)(tf.constant(stored ** 0.5, tf.float32)).numpy()
    assert marks[0] < 0.01 and marks[1] < 0.1 and abs(marks[2] - 0.5) < 1e-3 and marks[3] > 0.7 and marks[4] > 0.99
    plain = build_discriminator(SMALL)
    seeing = build_discriminator(dataclasses.replace(SMALL, hit_channel=True))
    assert plain.get_layer("d_conv0").kernel.shape[-2] == 1 and seeing.get_layer("d_conv0").kernel.shape[-2] == 2


def test_the_feature_term_trains_on_what_the_validation_measures():
    """The generator's feature term computes the validation's own high-level features (layer
    energies, total, barycentres, widths; hits as a soft count), is zero for identical batches,
    and its gradient moves a too-faint, too-narrow batch towards the real one."""
    import tensorflow as tf

    from workloads.gan3d.distances import high_level_features
    from workloads.gan3d.synthetic import STORED_PER_GEV
    from workloads.gan3d.train import feature_mismatch, shower_features
    from workloads.gan3d.validate import HIT_THRESHOLD_GEV

    rng = np.random.default_rng(1)

    def showers(n):
        out = rng.gamma(0.3, 0.02, (n, 17, 17, 25)) * np.exp(-((np.arange(17) - 8.0) ** 2))[None, :, None, None]
        out[:, 8, 8] += rng.uniform(1.0, 3.0, (n, 25))
        return out

    stored = showers(6)
    energy = np.full(6, 150.0)
    power = SMALL.power
    ours = shower_features(tf.constant((stored ** power)[..., None], tf.float32), power).numpy()
    theirs = high_level_features(stored / STORED_PER_GEV, energy, HIT_THRESHOLD_GEV)
    layers = stored.shape[-1]
    np.testing.assert_allclose(ours[:, :layers] / STORED_PER_GEV, theirs[:, :layers], rtol=1e-4)  # energy per layer
    np.testing.assert_allclose(ours[:, layers] / STORED_PER_GEV / energy, theirs[:, layers], rtol=1e-4)  # E_sum / Ep
    np.testing.assert_allclose(ours[:, layers + 1:layers + 7:2], theirs[:, layers + 1:layers + 4], rtol=1e-4)  # barycentres x, y, z
    np.testing.assert_allclose(ours[:, layers + 2:layers + 7:2], theirs[:, layers + 4:layers + 7], rtol=1e-3)  # widths x, y, z
    np.testing.assert_allclose(ours[:, -1], theirs[:, -1], rtol=0.1)  # hits: a soft count near the threshold

    real = tf.constant((stored ** power)[..., None], tf.float32)
    assert float(feature_mismatch(real, real, power)) < 1e-6
    faint = tf.Variable((0.5 * showers(6) ** power)[..., None].astype(np.float32))  # other showers, half as bright
    with tf.GradientTape() as tape:
        loss = feature_mismatch(faint, real, power)
    assert float(loss) > 1.0
    grad = tape.gradient(loss, faint)
    stepped = faint - 1e-5 * grad / tf.reduce_max(tf.abs(grad))  # a small step down the gradient
    assert float(feature_mismatch(stepped, real, power)) < float(loss)
    energy = lambda images: float(tf.reduce_sum(tf.nn.relu(images) ** (1 / power)))  # noqa: E731
    assert energy(stepped) > energy(faint)  # more energy, as the real batch has


def test_the_feature_term_per_unit_of_energy_sees_a_sampling_fraction_a_few_per_cent_off_in_a_batch_of_mixed_energies():
    """In a batch of 2 to 500 GeV showers the raw totals spread over two orders of magnitude, so a
    generator 5 % short in every shower is a small fraction of a standard deviation; per unit of
    primary energy (what the training step passes) the total is the validation's E_sum/Ep, and the
    same 5 % is several of its standard deviations."""
    import tensorflow as tf

    from workloads.gan3d.distances import high_level_features
    from workloads.gan3d.synthetic import STORED_PER_GEV
    from workloads.gan3d.train import feature_mismatch, shower_features
    from workloads.gan3d.validate import HIT_THRESHOLD_GEV

    rng = np.random.default_rng(2)
    energy = rng.uniform(2.0, 500.0, 32)
    profile = np.exp(-((np.arange(17) - 8.0) ** 2))[None, :, None, None] * np.exp(-((np.arange(17) - 8.0) ** 2))[None, None, :, None]
    stored = energy[:, None, None, None] * profile * rng.gamma(50.0, 1 / 50.0, (32, 1, 1, 25)) * 1e-3 * STORED_PER_GEV
    power = SMALL.power
    real = tf.constant((stored ** power)[..., None], tf.float32)
    short = tf.constant(((0.95 * stored) ** power)[..., None], tf.float32)
    ep = tf.constant(energy / 100.0, tf.float32)  # the step's y: Ep / 100

    ours = shower_features(real, power, ep).numpy()
    theirs = high_level_features(stored / STORED_PER_GEV, energy, HIT_THRESHOLD_GEV)
    layers = stored.shape[-1]
    np.testing.assert_allclose(ours[:, layers] / STORED_PER_GEV / 100.0, theirs[:, layers], rtol=1e-4)  # E_sum / Ep itself

    def total_gap(per) -> float:  # how far the short batch's mean total is, in the real batch's standard deviations
        r, s = shower_features(real, power, per).numpy()[:, layers], shower_features(short, power, per).numpy()[:, layers]
        return float(abs(s.mean() - r.mean()) / r.std())

    assert total_gap(None) < 0.2 and total_gap(ep) > 1.5, (total_gap(None), total_gap(ep))  # measured: 0.09 and 2.05
    per_energy, raw = float(feature_mismatch(short, real, power, ep)), float(feature_mismatch(short, real, power))
    assert per_energy > 3 * raw, (per_energy, raw)  # the whole term too (measured: 0.37 and 0.11)
    assert float(feature_mismatch(real, real, power, ep)) < 1e-3  # zero but for the spreads' epsilon


def test_the_feature_term_sees_layers_that_rise_and_fall_together_less_than_the_real_ones():
    """A batch whose every feature has the real batch's values, shuffled feature by feature across
    showers, has the real means and spreads but none of their correlations (a shower deep in one
    layer is deep in the next): the term must see it, and its gradient must bring them back."""
    import tensorflow as tf

    from workloads.gan3d.train import feature_distance

    rng = np.random.default_rng(3)
    depth = rng.normal(size=(32, 1))  # one shared cause per shower, as a late start moves every layer
    real = tf.constant(np.concatenate([depth + 0.3 * rng.normal(size=(32, 25)), rng.normal(size=(32, 8))], axis=1), tf.float32)
    shuffled = np.stack([rng.permutation(column) for column in real.numpy().T], axis=1)
    np.testing.assert_allclose(shuffled.mean(0), real.numpy().mean(0), atol=1e-5)
    np.testing.assert_allclose(shuffled.std(0), real.numpy().std(0), rtol=1e-5)
    assert float(feature_distance(real, real)) < 1e-5
    fake = tf.Variable(shuffled)
    apart = float(feature_distance(fake, real))
    assert apart > 0.3, apart
    for _ in range(100):  # plain gradient descent on the term alone (its gradients are small: a mean over 33 × 33)
        with tf.GradientTape() as tape:
            distance = feature_distance(fake, real)
        fake.assign_sub(20.0 * tape.gradient(distance, fake))
    assert float(feature_distance(fake, real)) < apart / 2, (float(feature_distance(fake, real)), apart)
    layer_corr = lambda x: float(np.mean(np.corrcoef(np.asarray(x)[:, :25].T)[np.triu_indices(25, 1)]))  # noqa: E731
    assert layer_corr(real) > 0.8 and layer_corr(shuffled) < 0.1 and layer_corr(fake) > 0.5, (layer_corr(shuffled), layer_corr(fake))
