"""Whether the accelerators are busy: every node's utilisation and every worker's throughput while
a run trains, read from Ray's own metrics.

Each Ray node's metrics agent serves its figures in Prometheus' text format (what Ray's Grafana
dashboards and a Prometheus read: CPU, memory, GPU and its memory, TPU duty cycle, network), and
each training worker publishes its samples/s and its time waiting for input there as ``burst_*``
gauges. The job's driver runs a ``UsageSampler`` beside training: every few seconds it reads every
node, appends what it read to the run's usage log (``report/usage.jsonl``), and every half minute
says a summary as a ``usage`` event (the live line of `burst train` and `burst status`). After the
run, ``summarise`` and ``figure`` make the report's utilisation section: utilisation and throughput
over time per node, and what the idle accelerator time cost.
"""

from __future__ import annotations

import html
import json
import threading
import time
import urllib.request
from pathlib import Path
from typing import Optional

from .job import UsageEvent, emit

SAMPLE_EVERY_S = 5.0
SAY_EVERY_S = 30.0
SCRAPE_TIMEOUT_S = 3.0
USAGE_LOG = "usage.jsonl"

# A TPU VM's chips, as each host publishes them from libtpu (``TpuGauges``).
TPU_DUTY_GAUGE = "burst_tpu_duty_cycle_percent"
TPU_HBM_GAUGE = "burst_tpu_hbm_used_bytes"

# Ray's node gauges (ray.dashboard.modules.reporter.reporter_agent, exported with Ray's "ray_"
# prefix) -> (burst's field, how a node's several series combine: per GPU, per TPU chip)
NODE_GAUGES: dict[str, tuple[str, str]] = {
    "ray_node_cpu_utilization": ("cpu_percent", "mean"),
    "ray_node_cpu_count": ("cpus", "sum"),
    "ray_node_mem_used": ("mem_used_bytes", "sum"),
    "ray_node_mem_total": ("mem_total_bytes", "sum"),
    "ray_node_gpus_utilization": ("gpu_percent", "mean"),
    "ray_node_gpus_available": ("gpus", "sum"),
    "ray_node_gram_used": ("gpu_mem_used_mb", "sum"),
    "ray_node_gram_available": ("gpu_mem_free_mb", "sum"),
    "ray_tpu_duty_cycle": ("tpu_percent", "mean"),          # GKE's TPU device plugin only
    "ray_tpu_memory_used": ("tpu_mem_used_bytes", "sum"),
    f"ray_{TPU_DUTY_GAUGE}": ("tpu_percent", "mean"),  # a TPU VM's hosts: libtpu's own (TpuGauges)
    f"ray_{TPU_HBM_GAUGE}": ("tpu_mem_used_bytes", "sum"),
    "ray_node_network_send_speed": ("net_send_bytes_s", "sum"),
    "ray_node_network_receive_speed": ("net_recv_bytes_s", "sum"),
}
# Which field says how busy the devices a cluster pays for are, by what it pays for (``accelerator_kind``).
BUSY_FIELD = {"GPU": "gpu_percent", "TPU": "tpu_percent", "CPU": "cpu_percent"}
# Where that field comes from, for the report: a busy TPU is never judged by its host's CPU load.
BUSY_SOURCE = {"GPU": "the GPUs' utilisation (Ray's node metrics, from NVML)",
               "TPU": "the TPU chips' duty cycle (libtpu's monitoring SDK on each host, or GKE's TPU device plugin)",
               "CPU": "the nodes' CPU utilisation"}


def pays_for(tpu: bool, gpus_per_worker: int) -> str:
    """What a job's cluster pays for, from what the job was told (not guessed from the metrics: a TPU
    VM's Ray publishes no TPU figure of its own, and its host CPUs are not what the price buys)."""
    return "TPU" if tpu else "GPU" if gpus_per_worker else "CPU"
# What each training worker publishes (``WorkerGauges``), by run and rank.
SAMPLES_GAUGE = "burst_samples_per_second"
INPUT_WAIT_GAUGE = "burst_input_wait_fraction"
WORKER_GAUGES = (f"ray_{SAMPLES_GAUGE}", f"ray_{INPUT_WAIT_GAUGE}")  # the names Ray's exporter gives them


class WorkerGauges:
    """A training worker's throughput and input wait, published as Ray metrics (a Prometheus
    scraping the cluster reads them as ``ray_burst_samples_per_second{run=..., rank=...}``)."""

    def __init__(self, run_id: str, rank: int):
        from ray.util.metrics import Gauge

        self._tags = {"run": run_id, "rank": str(rank)}
        self._samples = Gauge(SAMPLES_GAUGE, description="samples a second this training worker processes", tag_keys=("run", "rank"))
        self._wait = Gauge(INPUT_WAIT_GAUGE, description="fraction of this worker's epoch spent waiting for input", tag_keys=("run", "rank"))

    @classmethod
    def for_this_worker(cls, run_id: str, rank: int) -> Optional["WorkerGauges"]:
        """Gauges when this process is a Ray worker (none in a test or a standalone run)."""
        try:
            import ray

            return cls(run_id, rank) if ray.is_initialized() else None
        except ImportError:
            return None

    def set(self, samples_per_s: float, input_wait_fraction: float) -> None:
        self._samples.set(samples_per_s, tags=self._tags)
        self._wait.set(input_wait_fraction, tags=self._tags)



def libtpu_monitoring():
    """libtpu's monitoring SDK (``libtpu.sdk.tpumonitoring``: ``get_metric(name).data()``, one value a
    chip, as Cloud TPU's "TPU Monitoring Library" documents it), or None where libtpu is not installed."""
    try:
        from libtpu.sdk import tpumonitoring
    except ImportError:
        return None
    return tpumonitoring


def read_tpu_chips(monitoring) -> dict[str, list[float]]:
    """This host's chips as libtpu reports them: ``duty_cycle_pct`` (the share of time the
    TensorCores computed) and ``hbm_capacity_usage`` (bytes of HBM in use), one value a chip; a
    metric this libtpu does not support is left out."""
    supported = set(monitoring.list_supported_metrics())
    chips = {}
    for name in ("duty_cycle_pct", "hbm_capacity_usage"):
        if name in supported:
            chips[name] = [float(v) for v in monitoring.get_metric(name).data()]
    return chips


class TpuGauges:
    """A TPU host's chips, read from libtpu every ``every_s`` and published as Ray gauges
    (``ray_burst_tpu_duty_cycle_percent{chip=...}``, ``ray_burst_tpu_hbm_used_bytes``) on the node's
    metrics page, where ``UsageSampler`` reads every node. Ray exports TPU figures only through GKE's
    TPU device plugin; on a TPU VM this is the signal. Runs in the run's sentinel on each host."""

    def __init__(self, monitoring, every_s: float = SAMPLE_EVERY_S):
        from ray.util.metrics import Gauge

        self._monitoring, self.every_s = monitoring, every_s
        self._duty = Gauge(TPU_DUTY_GAUGE, description="TPU chip duty cycle (libtpu)", tag_keys=("chip",))
        self._hbm = Gauge(TPU_HBM_GAUGE, description="TPU chip HBM in use (libtpu)", tag_keys=("chip",))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="burst-tpu-gauges", daemon=True)

    @classmethod
    def start_here(cls) -> Optional["TpuGauges"]:
        """Gauges of this host's chips, started, or None where libtpu is not there to ask."""
        monitoring = libtpu_monitoring()
        if monitoring is None:
            return None
        gauges = cls(monitoring)
        gauges._thread.start()
        return gauges

    def publish_once(self) -> dict[str, list[float]]:
        chips = read_tpu_chips(self._monitoring)
        for i, value in enumerate(chips.get("duty_cycle_pct", [])):
            self._duty.set(value, tags={"chip": str(i)})
        for i, value in enumerate(chips.get("hbm_capacity_usage", [])):
            self._hbm.set(value, tags={"chip": str(i)})
        return chips

    def _loop(self) -> None:
        while True:
            try:
                self.publish_once()
            except Exception as exc:  # noqa: BLE001 - a metrics hiccup never ends a training run
                print(f"burst: TPU metrics skipped ({exc.__class__.__name__}: {exc})", flush=True)
            if self._stop.wait(self.every_s):
                return

    def stop(self) -> None:
        self._stop.set()


def parse_node(text: str, run_id: str) -> tuple[dict, list[dict]]:
    """One node's metrics page as (its utilisation fields, this run's workers on it: a scan's
    trials are runs named after it, ``<scan>-<trial>``)."""
    from prometheus_client.parser import text_string_to_metric_families

    series: dict[str, list[float]] = {}
    workers: dict[str, dict] = {}
    # A node's page holds every metric of Ray's; the parser is pure Python, so only the lines of the
    # gauges read here are handed to it (a local node's page, 286 kB in 1,035 lines: 61 ms whole, 1 ms so).
    text = "\n".join(line for line in text.splitlines() if line.startswith((*NODE_GAUGES, *WORKER_GAUGES)))
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in NODE_GAUGES:
                series.setdefault(sample.name, []).append(float(sample.value))
            elif sample.name in WORKER_GAUGES and _ours(sample.labels.get("run", ""), run_id):
                key = "samples_per_s" if sample.name.endswith(SAMPLES_GAUGE) else "input_wait_fraction"
                run, rank = sample.labels["run"], sample.labels.get("rank", "?")
                name = rank if run == run_id else f"{run[len(run_id) + 1:]}/{rank}"  # a scan's trial: trial/rank
                workers.setdefault(name, {"rank": name})[key] = float(sample.value)
    node = {}
    for name, values in series.items():
        field, combine = NODE_GAUGES[name]
        node[field] = sum(values) / len(values) if combine == "mean" else sum(values)
    return node, list(workers.values())


def _ours(label: str, run_id: str) -> bool:
    return label == run_id or label.startswith(f"{run_id}-")


def cluster_nodes() -> list[dict]:
    """Every live node of the Ray cluster this process is connected to: its address and metrics port."""
    import ray

    return [{"node": n["NodeManagerAddress"], "port": n["MetricsExportPort"], "head": bool(n.get("Resources", {}).get("node:__internal_head__"))}
            for n in ray.nodes() if n.get("Alive") and n.get("MetricsExportPort")]


def read_page(address: str, port: int) -> str:
    with urllib.request.urlopen(f"http://{address}:{port}/metrics", timeout=SCRAPE_TIMEOUT_S) as resp:
        return resp.read().decode()


class UsageSampler:
    """Reads every node of the cluster every ``every_s`` seconds into ``log`` (one JSON line per
    sample) and says a ``usage`` event every ``say_every_s``; a thread of the job's driver."""

    def __init__(self, run_id: str, log: Path, hourly_usd: float = 0.0, every_s: float = SAMPLE_EVERY_S, say_every_s: float = SAY_EVERY_S,
                 paid_for: Optional[str] = None):
        self.run_id, self.log, self.hourly_usd, self.paid_for = run_id, Path(log), hourly_usd, paid_for
        self.every_s, self.say_every_s = every_s, say_every_s
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._started = time.time()
        self._said = 0.0

    def __enter__(self) -> "UsageSampler":
        self.log.parent.mkdir(parents=True, exist_ok=True)
        self._started = time.time()
        self._thread = threading.Thread(target=self._loop, name="burst-usage", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=SCRAPE_TIMEOUT_S * 2 + self.every_s)

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                row = self.sample()
            except Exception as exc:  # noqa: BLE001 - a metrics hiccup never ends a training run
                print(f"burst: usage sample skipped ({exc.__class__.__name__}: {exc})", flush=True)
                continue
            if row["time"] - self._said >= self.say_every_s:
                self._said = row["time"]
                emit(self.event(row))

    def sample(self) -> dict:
        """Read every node once; append the row to the log and return it."""
        nodes, workers = [], []
        for n in cluster_nodes():
            try:
                fields, on_node = parse_node(read_page(n["node"], n["port"]), self.run_id)
            except OSError:
                continue  # a node going away or its agent restarting: the next sample has it again
            nodes.append({"node": n["node"], "head": n["head"], **fields})
            workers += [{"node": n["node"], **w} for w in on_node]
        row = {"time": time.time(), "nodes": nodes, "workers": sorted(workers, key=lambda w: str(w["rank"]))}
        with self.log.open("a") as fh:
            fh.write(json.dumps(row) + "\n")
        return row

    def event(self, row: dict) -> UsageEvent:
        """What one sample says in a line: the cluster's mean utilisation, its throughput, and money.
        Where the devices paid for give no signal, their use is unknown ("TPU -") and no idle cost is said."""
        kind = self.paid_for or accelerator_kind(row["nodes"])
        busy = busy_fraction(row["nodes"], kind)
        elapsed_h = (row["time"] - self._started) / 3600
        waits = [w["input_wait_fraction"] for w in row["workers"] if "input_wait_fraction" in w]
        return UsageEvent(
            nodes=len(row["nodes"]), cpu_percent=_mean(n.get("cpu_percent") for n in row["nodes"]),
            accelerator=kind, accelerator_percent=round(100 * busy, 1) if busy is not None else None,
            mem_percent=_mean(100 * n["mem_used_bytes"] / n["mem_total_bytes"] for n in row["nodes"] if n.get("mem_total_bytes")),
            samples_per_s=round(sum(w.get("samples_per_s", 0.0) for w in row["workers"]), 2) if row["workers"] else None,
            input_wait_percent=round(100 * sum(waits) / len(waits), 1) if waits else None,
            spent_usd=round(self.hourly_usd * elapsed_h, 4), hourly_usd=self.hourly_usd,
            idle_usd_per_h=round(self.hourly_usd * (1 - busy), 4) if busy is not None else None)


def _mean(values) -> Optional[float]:
    values = [float(v) for v in values if v is not None]
    return round(sum(values) / len(values), 1) if values else None


def accelerator_kind(nodes: list[dict]) -> str:
    """What the cluster pays for: GPUs or TPUs where any node has them, else its CPUs."""
    if any(n.get("gpus") for n in nodes) or any("gpu_percent" in n for n in nodes):
        return "GPU"
    if any("tpu_percent" in n for n in nodes):
        return "TPU"
    return "CPU"


def busy_fraction(nodes: list[dict], kind: Optional[str] = None) -> Optional[float]:
    """How busy the devices the cluster pays for are, 0..1: the mean GPU (or TPU duty cycle, or
    CPU) utilisation over the nodes that have them. ``kind``: what the cluster pays for, where the
    caller knows it from more than these nodes (a whole run's samples)."""
    field = BUSY_FIELD[kind or accelerator_kind(nodes)]
    values = [n[field] for n in nodes if n.get(field) is not None]
    return min(1.0, max(0.0, sum(values) / len(values) / 100)) if values else None


def read_log(path: Path) -> list[dict]:
    """The samples of a usage log (a line cut short by a killed driver is left out)."""
    rows = []
    for line in Path(path).read_text().splitlines() if Path(path).exists() else []:
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue
    return rows


def summarise(rows: list[dict], history: list[dict], hourly_usd: float, paid_for: Optional[str] = None) -> dict:
    """The report's figures of a run's usage: per node, its mean and peak utilisation; for the run,
    how busy its accelerators were, the share of step time spent waiting for input, and what the
    idle accelerator time cost at the cluster's price. ``paid_for``: what the cluster's price buys
    (``pays_for``); where those devices gave no signal, busy and idle are None (unknown)."""
    if not rows:
        return {}
    per_node: dict[str, dict] = {}
    for row in rows:
        for n in row["nodes"]:
            per_node.setdefault(n["node"], []).append(n)
    kind = paid_for or accelerator_kind([n for row in rows for n in row["nodes"]])
    field = BUSY_FIELD[kind]
    nodes = {}
    for name, samples in per_node.items():
        mem = [s["mem_used_bytes"] for s in samples if "mem_used_bytes" in s]
        nodes[name] = {"samples": len(samples), "cpu_percent_mean": _mean(s.get("cpu_percent") for s in samples),
                       f"{kind.lower()}_percent_mean": _mean(s.get(field) for s in samples),
                       "mem_used_gb_peak": round(max(mem) / 1e9, 2) if mem else None}
    busy = [b for b in (busy_fraction(row["nodes"], kind) for row in rows) if b is not None]
    wall_s = rows[-1]["time"] - rows[0]["time"] if len(rows) > 1 else 0.0
    busy_mean = sum(busy) / len(busy) if busy else None
    seconds = sum(float(h.get("seconds") or 0) for h in history)
    waited = sum(float(h.get("input_wait_s") or 0) for h in history)
    throughput = [sum(w.get("samples_per_s", 0.0) for w in row["workers"]) for row in rows if row["workers"]]
    idle_h = wall_s / 3600 * (1 - busy_mean) if busy_mean is not None else None
    return {
        "accelerator": kind, "busy_source": BUSY_SOURCE[kind] if busy_mean is not None else "none: unknown, and no idle cost charged", "nodes": nodes, "sampled_s": round(wall_s, 1), "samples": len(rows),
        "busy_percent": round(100 * busy_mean, 1) if busy_mean is not None else None,
        "input_wait_percent": round(100 * waited / seconds, 1) if seconds > 0 else None,
        "samples_per_s_mean": round(sum(throughput) / len(throughput), 2) if throughput else None,
        "hourly_usd": hourly_usd,
        "idle_cluster_hours": round(idle_h, 4) if idle_h is not None else None,
        "idle_usd": round(hourly_usd * idle_h, 4) if idle_h is not None else None,
    }


def figure(rows: list[dict], out: Path) -> Optional[Path]:
    """Utilisation (CPU and accelerator, per node), memory and throughput over the run."""
    if len(rows) < 2:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t0 = rows[0]["time"]
    fig, (util, mem, speed) = plt.subplots(3, 1, figsize=(9, 8), sharex=True)
    names = sorted({n["node"] for row in rows for n in row["nodes"]})
    for name in names:
        points = [((row["time"] - t0) / 60, n) for row in rows for n in row["nodes"] if n["node"] == name]
        minutes = [p[0] for p in points]
        util.plot(minutes, [p[1].get("cpu_percent") for p in points], label=f"{name} CPU")
        for field, label in (("gpu_percent", "GPU"), ("tpu_percent", "TPU duty cycle")):
            if any(field in p[1] for p in points):
                util.plot(minutes, [p[1].get(field) for p in points], linestyle="--", label=f"{name} {label}")
        mem.plot(minutes, [p[1].get("mem_used_bytes", 0) / 1e9 for p in points], label=name)
    ranks = sorted({str(w["rank"]) for row in rows for w in row["workers"]})
    for rank in ranks:
        points = [((row["time"] - t0) / 60, w["samples_per_s"]) for row in rows for w in row["workers"] if str(w["rank"]) == rank and "samples_per_s" in w]
        speed.plot([p[0] for p in points], [p[1] for p in points], label=f"worker {rank}")
    util.set_ylabel("utilisation (%)")
    util.set_ylim(0, 105)
    mem.set_ylabel("host memory used (GB)")
    speed.set_ylabel("samples/s")
    speed.set_xlabel("minutes since training started")
    for ax in (util, mem, speed):
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="lower right")
        ax.grid(alpha=0.3)
    fig.subplots_adjust(left=0.08, right=0.98, top=0.98, bottom=0.07, hspace=0.08)  # fixed: tight_layout measured every label, in every run
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=90)
    plt.close(fig)
    return out


def report_section(summary: dict, figure_path: Optional[Path]) -> str:
    """The report's utilisation section (HTML, the figure inlined as the rest of the report is)."""
    import base64

    if not summary:
        return "<h2>Utilisation</h2><p>No utilisation was sampled (the run ended before its first sample).</p>"
    kind = summary["accelerator"]
    busy = f"{summary['busy_percent']} %" if summary.get("busy_percent") is not None else "unknown"
    rows = [("devices paid for", kind), ("busy (mean utilisation)", busy), ("measured from", summary.get("busy_source", "-")),
            ("step time waiting for input", f"{summary['input_wait_percent']} %"),
            ("samples/s (all workers)", summary["samples_per_s_mean"]), ("sampled", f"{summary['sampled_s']} s, {summary['samples']} samples"),
            ("cluster price", f"${summary['hourly_usd']:,.2f}/h"),
            ("idle time, in cluster-hours", summary["idle_cluster_hours"]), ("idle time's cost", f"${summary['idle_usd']:,.4f}" if summary["idle_usd"] is not None else "-")]
    table = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(str(v))}</td></tr>" for k, v in rows)
    node_rows = "".join(f"<tr><th>{html.escape(name)}</th>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in n.values()) + "</tr>"
                        for name, n in summary["nodes"].items())
    head = "".join(f"<th>{html.escape(k)}</th>" for k in next(iter(summary["nodes"].values())).keys())
    image = ""
    if figure_path is not None and figure_path.exists():
        image = f"<img alt='utilisation' src='data:image/png;base64,{base64.b64encode(figure_path.read_bytes()).decode()}'>"
    return (f"<h2>Utilisation</h2><p>Sampled from Ray's metrics every {SAMPLE_EVERY_S:g} s while the run trained "
            f"(burst.runtime.usage); idle time is priced at the cluster's hourly price.</p><table>{table}</table>"
            f"<table><tr><th>node</th>{head}</tr>{node_rows}</table>{image}")


def add_to_report(report_dir: Path, rows: list[dict], history: list[dict], hourly_usd: float, paid_for: Optional[str] = None) -> dict:
    """Write ``usage.json`` and ``usage.png`` of the run's samples (``read_log``) into the report and
    its utilisation section into ``report.html``; return the summary."""
    summary = summarise(rows, history, hourly_usd, paid_for)
    (report_dir / "usage.json").write_text(json.dumps(summary, indent=1))
    section = report_section(summary, figure(rows, report_dir / "usage.png"))
    page = report_dir / "report.html"
    if page.exists():
        text = page.read_text()
        page.write_text(text.replace("</body>", section + "</body>", 1) if "</body>" in text else text + section)
    return summary
