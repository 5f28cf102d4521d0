"""A profile derived from `burst profile`'s measurement of a workload on this machine (pure
placement: the measurement is given, as the measuring process prints it)."""

import datetime

import pytest

from burst.errors import BurstError
from burst.placement import derive
from burst.placement.profile import Profile

# two batches timed on a 2-core machine: 1,000 events an epoch; 0.25 ms an event and 2 ms a step
PER_EVENT, PER_STEP = 0.25e-3, 2e-3


def measured(batches=(16, 64, 256), matmul=50.0, events=1000) -> dict:
    rows = []
    for b in batches:
        epoch_s = events / b * (PER_EVENT * b + PER_STEP)
        rows.append({"batch": b, "epoch_s": [epoch_s * 3, epoch_s * 1.1, epoch_s], "samples": float(events),
                     "samples_reported": True, "samples_per_s": events / epoch_s})
    return {"workload": "mine", "framework": "torch", "preset": "small", "events": events, "batches": rows,
            "flops": 2.7e7, "flops_by": "PyTorch's FlopCounterMode", "parameters": 4801, "flops_per_event": 27008.0,
            "checkpoint_bytes": 64_000, "data_bytes": 150_000, "matmul_gflops": matmul,
            "machine": {"cpu_model": "AMD EPYC 7B13", "cores": 2, "simd": ["avx2", "fma"], "onednn_enabled": None, "threads": 2}}


def test_this_machine_is_the_measured_table_and_each_gpu_is_its_peak_over_this_machine_s_rate():
    written = derive.profile_of(measured(), events=4000, default_batch=64, today=datetime.date(2026, 12, 4))
    profile = Profile.model_validate(written)
    here = derive.machine_name(measured())
    assert here == "amd-epyc-7b13-2c" and profile.accelerators[here].kind == "cpu-node"
    # the fit gives back the per-event and per-step costs the epochs were timed with, scaled to the profile's 4000 events
    fit = profile.fit()
    assert fit.per_event[here] == pytest.approx(PER_EVENT, rel=1e-6) and fit.per_step == pytest.approx(PER_STEP, rel=1e-6)
    assert profile.epoch_seconds(here, 1, batch=64) == pytest.approx(4000 / 64 * (PER_EVENT * 64 + PER_STEP), rel=1e-6)
    facts = derive.accelerator_facts().gpus
    for name, gpu in facts.items():  # every GPU family the catalog sells, and no TPU (the public interface cannot train on one)
        assert profile.per_event_s(name) == pytest.approx(PER_EVENT / (gpu.fp32_tflops * 1000 / 50.0), rel=1e-3)
        assert not profile.measured_accelerator(name) and "± a factor of 3" in profile.basis(name)
    assert set(profile.accelerators) == {here, *facts} and not profile.knows("tpu-v3-8")
    assert profile.local_default.events_per_s == pytest.approx(measured()["batches"][1]["samples_per_s"])  # the workload's batch
    assert "burst profile" in profile.local_default.basis
    assert profile.dataset_gb == pytest.approx(150_000 * 4 / 1e9) and profile.checkpoint_gb == pytest.approx(64_000 / 1e9)


def test_one_batch_cannot_separate_the_per_event_from_the_per_step_cost():
    with pytest.raises(BurstError, match="two batches or more"):
        derive.profile_of(measured(batches=(64,)), events=1000, default_batch=64)


def test_the_header_says_what_was_counted_and_how_fast_it_ran_against_this_machine_s_rate():
    text = derive.header(measured())
    assert "27,008 FLOPs per training event (PyTorch's FlopCounterMode)" in text and "4,801 trainable parameters" in text
    assert all(line.startswith("# ") for line in text.splitlines())
    keras = {**measured(), "flops": None, "flops_per_event": None, "flops_by": "not counted: TensorFlow ...", "parameters": 1732}
    assert "FLOPs not counted" in derive.header(keras) and "1,732 trainable parameters" in derive.header(keras)


def test_epochs_where_a_small_batch_s_steps_came_out_slower_than_a_large_one_s_still_make_a_profile():
    """On a busy machine the small batch's epoch can come out so slow that its steps take longer than
    the large batch's (seen here: 615 samples/s at batch 16, 14,170 at 64): the unconstrained fit
    then gives a negative per-event time. The per-step cost is pinned at 0 instead (every
    accelerator spends time per event), not the per-event one, which no profile can do without."""
    noisy = measured(batches=(16, 128))
    noisy["batches"][0]["samples_per_s"] = noisy["batches"][1]["samples_per_s"] / 10  # a step of 16 slower than a step of 128
    profile = Profile.model_validate(derive.profile_of(noisy, events=1000, default_batch=64))
    fit = profile.fit()
    here = derive.machine_name(noisy)
    assert fit.per_step == 0.0 and fit.per_event[here] > 0
    assert profile.epoch_seconds("V100", 1, batch=64) > 0
