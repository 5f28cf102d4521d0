"""The run's TensorBoard log reads back as TensorBoard reads it: every epoch's figures by epoch,
the validation's summary at the last epoch."""

import math


def _scalars(log_dir) -> dict[str, list[tuple[int, float]]]:
    import tensorflow as tf

    found: dict[str, list[tuple[int, float]]] = {}
    for path in sorted(log_dir.glob("events.out.tfevents.*")):
        for record in tf.data.TFRecordDataset(str(path)):
            event = tf.compat.v1.Event.FromString(record.numpy())
            for value in event.summary.value:
                number = value.simple_value if value.WhichOneof("value") == "simple_value" else float(tf.make_ndarray(value.tensor))
                found.setdefault(value.tag, []).append((event.step, number))
    return found


def test_every_epoch_s_figures_and_the_validation_summary_are_scalars_by_epoch(tmp_path):
    from burst.runtime import tensorboard_log

    history = [{"epoch": 1, "d_loss": 6.42, "g_loss": 21.8, "samples_per_s": 39.9, "stopped": False},
               {"epoch": 2, "d_loss": 4.91, "g_loss": 20.3, "samples_per_s": 49.2, "fpd": float("nan")}]
    tensorboard_log.write(tmp_path / "tb", history, {"sf_rel_error": 0.04, "optimisation_metric": 0.4, "verdict": "pass"})
    found = _scalars(tmp_path / "tb")
    assert [(s, round(v, 2)) for s, v in found["train/d_loss"]] == [(1, 6.42), (2, 4.91)]
    assert [s for s, _ in found["train/samples_per_s"]] == [1, 2]
    assert [(s, round(v, 2)) for s, v in found["validation/sf_rel_error"]] == [(2, 0.04)]
    assert "train/stopped" not in found and "train/fpd" not in found and "validation/verdict" not in found  # numbers only, finite
    assert all(math.isfinite(v) for series in found.values() for _, v in series)


def test_the_cluster_s_utilisation_is_scalars_by_sample_at_the_time_it_was_taken(tmp_path):
    from burst.runtime import tensorboard_log

    rows = [{"time": 1000.0 + 5 * k, "nodes": [{"node": "10.0.0.1", "head": True, "cpu_percent": 50.0 + k, "gpu_percent": 90.0}],
             "workers": [{"node": "10.0.0.1", "rank": "0", "samples_per_s": 40.0 + k, "input_wait_fraction": 0.1}]} for k in range(3)]
    tensorboard_log.write(tmp_path / "tb", [{"epoch": 1, "d_loss": 1.0}], None, tuple(rows))
    found = _scalars(tmp_path / "tb")
    assert [(s, round(v, 1)) for s, v in found["usage/10.0.0.1/cpu_percent"]] == [(0, 50.0), (1, 51.0), (2, 52.0)]
    assert [(s, round(v, 1)) for s, v in found["usage/worker-0/samples_per_s"]] == [(0, 40.0), (1, 41.0), (2, 42.0)]
    assert "usage/10.0.0.1/head" not in found
