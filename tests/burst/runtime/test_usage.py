"""Whether the accelerators are busy (``burst.runtime.usage``): a real Ray node's metrics read by the
sampler while a worker with a deliberately slow input publishes its throughput, the usage line and
what idle time costs, and the report's utilisation section."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from burst.runtime import usage
from burst.runtime.job import UsageEvent, parse_events

SCRIPT = r"""
import json, os, sys, time
from pathlib import Path
import ray
from burst.runtime.ray_head import free_port
from burst.runtime.usage import UsageSampler, WorkerGauges

out = Path(sys.argv[1])
sys.path.insert(0, sys.argv[2])  # a stand-in for libtpu's monitoring SDK (this machine has no TPU), for the workers too
os.environ["PYTHONPATH"] = os.pathsep.join([sys.argv[2], os.environ.get("PYTHONPATH", "")])
from burst.runtime.tpu import HostSentinel
ray.init(address="local", num_cpus=2, _metrics_export_port=free_port())  # its own Ray, whatever else runs on the machine

@ray.remote
class SlowInput:
    def train(self, seconds):
        # a training worker whose next batch comes late: 80 ms waiting for input, 20 ms computing
        gauges = WorkerGauges("slow-run", 0)
        start, waited, samples, set_at = time.perf_counter(), 0.0, 0, []
        while time.perf_counter() - start < seconds:
            asked = time.perf_counter()
            time.sleep(0.08)
            waited += time.perf_counter() - asked
            step = time.perf_counter()
            while time.perf_counter() - step < 0.02:
                pass
            samples += 8
            elapsed = time.perf_counter() - start
            gauges.set(samples / elapsed, waited / elapsed)
            set_at.append((time.time(), samples / elapsed, waited / elapsed))
        return {"seconds": time.perf_counter() - start, "input_wait_s": waited, "samples": samples, "set": set_at}

worker = SlowInput.remote()
# beside it, the sentinel a TPU run holds on each host, publishing its chips from libtpu; a second
# sampler prices the same node as a TPU VM whose chips are what the price buys
sentinel = ray.remote(num_cpus=0)(HostSentinel).remote()
ray.get(sentinel.describe.remote())
with UsageSampler("slow-run", out / "usage.jsonl", hourly_usd=36.0, every_s=1.0, say_every_s=4.0, paid_for="CPU"), \
        UsageSampler("tpu-run", out / "tpu.jsonl", hourly_usd=32.0, every_s=1.0, say_every_s=4.0, paid_for="TPU"):
    epoch = ray.get(worker.train.remote(18))
ray.get(sentinel.release.remote())
(out / "epoch.json").write_text(json.dumps(epoch))
ray.shutdown()
"""


@pytest.mark.slow
def test_a_slow_input_is_seen_in_ray_s_metrics_and_its_idle_time_priced(tmp_path):
    fake = tmp_path / "fake-libtpu" / "libtpu" / "sdk"
    fake.mkdir(parents=True)
    (fake.parent / "__init__.py").write_text("")
    (fake / "__init__.py").write_text("")
    (fake / "tpumonitoring.py").write_text(LIBTPU_MONITORING)
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path), str(tmp_path / "fake-libtpu")], capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = usage.read_log(tmp_path / "usage.jsonl")
    assert len(rows) >= 10
    for row in rows:  # the node as Ray's metrics agent reports it
        (node,) = row["nodes"]
        assert 0 <= node["cpu_percent"] <= 100 and node["cpus"] >= 1 and 0 < node["mem_used_bytes"] < node["mem_total_bytes"]
    published = [w for row in rows for w in row["workers"]]
    assert published and {w["rank"] for w in published} == {"0"}  # the worker's own gauges, this run's only
    # What the worker measured on its own clock over the whole epoch: 80 ms of every ~100 waiting when
    # the machine is idle, less when a busy machine stretches the rest of its step (a CI run saw 55 %).
    epoch = json.loads((tmp_path / "epoch.json").read_text())
    own_rate, own_wait = epoch["samples"] / epoch["seconds"], epoch["input_wait_s"] / epoch["seconds"]
    assert own_wait > 0.3 and own_rate > 20
    # Ray's workers export their gauges every `metrics_report_interval_ms` (10 s) and the agent serves
    # the last export, so a sample shows what the worker set up to one interval earlier (two at most:
    # the agent drops a gauge older than that). On a machine whose load changes during the epoch, that
    # is not the epoch's final figure (a CI run: 0.675 shown, 0.730 at the end), so each worker row
    # must be a pair the worker set, together, within that time before the sample.
    with_workers = [row for row in rows if row["workers"]]
    assert with_workers[-1]["time"] > epoch["set"][-1][0] - 12  # the last export of the epoch was seen
    for row in with_workers:
        (shown,) = row["workers"]
        assert any(row["time"] - 20 <= at <= row["time"] + 0.5 and shown["samples_per_s"] == pytest.approx(rate, rel=0.02)
                   and shown["input_wait_fraction"] == pytest.approx(wait, abs=0.01) for at, rate, wait in epoch["set"]), (row["time"], shown)

    events = [e for e in parse_events(proc.stdout) if isinstance(e, UsageEvent)]
    tpu_events = [e for e in events if e.accelerator == "TPU"]
    events = [e for e in events if e.accelerator != "TPU"]
    assert len(events) >= 3  # every 4 s
    said = events[-1]
    assert said.accelerator == "CPU" and said.nodes == 1 and said.hourly_usd == 36.0
    assert any(said.samples_per_s == round(row["workers"][0]["samples_per_s"], 2)  # the line says a sample's figures
               and said.input_wait_percent == round(100 * row["workers"][0]["input_wait_fraction"], 1) for row in with_workers)
    assert said.idle_usd_per_h == pytest.approx(36.0 * (1 - said.accelerator_percent / 100), abs=0.01)
    assert 0 < said.spent_usd < 36.0 * 60 / 3600  # less than a minute at $36/h
    assert "samples/s, input wait" in said.line() and "/h idle" in said.line()

    summary = usage.summarise(rows, [epoch], 36.0, "CPU")  # what the job says it pays for (entry.py: usage.pays_for)
    assert summary["accelerator"] == "CPU" and summary["samples"] == len(rows)
    assert summary["input_wait_percent"] == round(100 * own_wait, 1)  # from the epoch's own clock, as the history holds it
    idle_h = summary["sampled_s"] / 3600 * (1 - summary["busy_percent"] / 100)
    assert summary["idle_usd"] == pytest.approx(36.0 * idle_h, abs=0.001)
    assert usage.figure(rows, tmp_path / "usage.png").stat().st_size > 10_000

    # The TPU VM: its chips' duty cycle, from libtpu through the sentinel's gauges, is what its price is judged by
    tpu_rows = [row for row in usage.read_log(tmp_path / "tpu.jsonl") if "tpu_percent" in row["nodes"][0]]
    assert tpu_rows and all(row["nodes"][0]["tpu_percent"] == pytest.approx(75.0) for row in tpu_rows)  # mean of 60 and 90
    assert all(row["nodes"][0]["tpu_mem_used_bytes"] == pytest.approx(3e9) for row in tpu_rows)
    assert tpu_events and tpu_events[-1].accelerator_percent == 75.0 and tpu_events[-1].idle_usd_per_h == pytest.approx(8.0)
    assert "TPU 75 %" in tpu_events[-1].line()
    tpu_summary = usage.summarise(usage.read_log(tmp_path / "tpu.jsonl"), [epoch], 32.0, "TPU")
    assert tpu_summary["accelerator"] == "TPU" and "duty cycle" in tpu_summary["busy_source"]


LIBTPU_MONITORING = '''"""Stand-in for libtpu.sdk.tpumonitoring as Cloud TPU's TPU Monitoring Library documents it:
list_supported_metrics() names the metrics; get_metric(name).data() is one value a chip, as strings."""
_VALUES = {"duty_cycle_pct": ["60.00", "90.00"], "hbm_capacity_usage": ["1000000000", "2000000000"],
           "hbm_capacity_total": ["17179869184", "17179869184"]}


class _Metric:
    def __init__(self, name):
        self._name = name

    def description(self):
        return self._name

    def data(self):
        return list(_VALUES[self._name])


def list_supported_metrics():
    return list(_VALUES)


def get_metric(name):
    if name not in _VALUES:
        raise ValueError(f"unsupported metric {name}")
    return _Metric(name)
'''


def test_a_tpu_vm_whose_chips_give_no_signal_is_unknown_and_never_priced_idle_from_its_cpu():
    """Ray exports no TPU figure on a TPU VM; a busy v3-32 whose hosts' CPUs are 20 % loaded once
    showed about $25/h idle. Without libtpu's figures the chips' use is unknown and nothing is charged."""
    rows = [{"time": 1000.0 + 10 * k, "nodes": [{"node": f"10.0.0.{i}", "head": i == 0, "cpu_percent": 20.0} for i in range(4)],
             "workers": []} for k in range(10)]
    summary = usage.summarise(rows, [], 32.0, usage.pays_for(tpu=True, gpus_per_worker=0))
    assert summary["accelerator"] == "TPU" and summary["busy_percent"] is None and summary["idle_usd"] is None
    assert summary["busy_source"].startswith("none")
    sampler = usage.UsageSampler("r", Path("/nonexistent/usage.jsonl"), hourly_usd=32.0, paid_for="TPU")
    said = sampler.event(rows[-1])
    assert said.accelerator == "TPU" and said.accelerator_percent is None and said.idle_usd_per_h is None
    assert said.line().startswith("CPU 20 %, TPU - on 4 node(s); ") and "idle" not in said.line()
    assert "unknown" in usage.report_section(summary, None)
    # the same nodes bought as CPUs are judged by their CPUs, as before
    assert usage.summarise(rows, [], 32.0, "CPU")["busy_percent"] == 20.0


def _row(t: float, gpus: list[float], samples: float) -> dict:
    nodes = [{"node": f"10.0.0.{i}", "head": i == 0, "cpu_percent": 20.0, "gpus": 8.0, "gpu_percent": g, "mem_used_bytes": 4e9,
              "mem_total_bytes": 16e9} for i, g in enumerate(gpus)]
    return {"time": t, "nodes": nodes, "workers": [{"node": "10.0.0.0", "rank": "0", "samples_per_s": samples, "input_wait_fraction": 0.5}]}


def test_gpu_clusters_are_judged_by_their_gpus_and_the_report_gains_a_utilisation_section(tmp_path):
    """On a GPU cluster the idle time is the GPUs' (the CPUs being busy does not make the GPUs earn
    their price); the section goes into the workload's report, before its end."""
    rows = [_row(1000.0 + 10 * k, [50.0, 30.0], 100.0) for k in range(37)]  # 6 minutes, GPUs 40 % busy
    history = [{"seconds": 300.0, "input_wait_s": 150.0}]
    summary = usage.summarise(rows, history, 300.0)
    assert summary["accelerator"] == "GPU" and summary["busy_percent"] == 40.0 and summary["input_wait_percent"] == 50.0
    assert summary["idle_usd"] == pytest.approx(300.0 * 0.1 * 0.6, abs=0.001)  # $300/h, 6 min, 60 % idle
    assert summary["nodes"]["10.0.0.1"]["gpu_percent_mean"] == 30.0
    (tmp_path / "report.html").write_text("<html><body><h1>physics</h1></body></html>")
    log = tmp_path / "usage.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"time": 13')  # the last line cut short by a killed driver
    assert usage.add_to_report(tmp_path, usage.read_log(log), history, 300.0) == summary
    page = (tmp_path / "report.html").read_text()
    assert page.index("<h1>physics</h1>") < page.index("<h2>Utilisation</h2>") < page.index("</body>")
    assert "$18.0000" in page and "data:image/png;base64," in page
    assert json.loads((tmp_path / "usage.json").read_text())["idle_usd"] == summary["idle_usd"]


def test_the_usage_line_says_money_in_a_few_characters():
    cheap = UsageEvent(nodes=1, cpu_percent=98.6, mem_percent=12, samples_per_s=18.7, input_wait_percent=4, spent_usd=0.00167,
                       hourly_usd=0.05, idle_usd_per_h=0.0007)
    assert cheap.line() == "CPU 99 %, memory 12 %, 18.7 samples/s, input wait 4 % on 1 node(s); $0.0017 spent, $0.0007/h idle"
    big = UsageEvent(nodes=16, cpu_percent=30, accelerator="GPU", accelerator_percent=41.3, samples_per_s=1832.4, spent_usd=412.5,
                     hourly_usd=300, idle_usd_per_h=176.1)
    assert big.line() == "CPU 30 %, GPU 41 %, 1,832 samples/s on 16 node(s); $412.50 spent, $176.10/h idle"
    free = UsageEvent(nodes=1, cpu_percent=88.0, samples_per_s=42.5, input_wait_percent=0.0, idle_usd_per_h=0.0)
    assert free.line() == "CPU 88 %, 42.5 samples/s, input wait 0 % on 1 node(s)"  # no price set: no money said
