"""The on-prem site as a policy describes it: what the ``ray`` and ``slurm`` targets are handed
(through their placement) and keep on the cluster's handle, and what the planner prices.

It lives with the targets, which consume it; the policy (``burst.placement.policy``) holds one.
"""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator

from . import command_values
from ..errors import BurstError


class StrictModel(BaseModel):
    # strict: `true` is not a number and "3" is not an int; finite: `.inf`/`.nan` are not amounts.
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


HOURS_PER_YEAR = 8760.0


def amortised_hourly_usd(hardware_usd: float, lifetime_years: float, watts: float, usd_per_kwh: float, pue: float = 1.0) -> float:
    """Hardware written off over its lifetime, plus the power it draws (times the machine room's PUE)."""
    return hardware_usd / (lifetime_years * HOURS_PER_YEAR) + watts / 1000 * pue * usd_per_kwh


def amortised_basis(hardware_usd: float, lifetime_years: float, watts: float, usd_per_kwh: float, per: str, pue: Optional[float] = None) -> str:
    """How a derived price was made, for the plan's notes."""
    price = amortised_hourly_usd(hardware_usd, lifetime_years, watts, usd_per_kwh, pue or 1.0)
    return (f"${price:.3f}/{per} derived: ${hardware_usd:g} over {lifetime_years:g} years + "
            f"{watts:g} W{f' x PUE {pue:g}' if pue is not None else ''} at ${usd_per_kwh:g}/kWh")


def _as_value_error(check, value):
    """A ``command_values`` check inside a pydantic validator (its one line becomes the field's error)."""
    try:
        return check(value, "value")
    except BurstError as exc:
        raise ValueError(str(exc)) from None


class Toleration(StrictModel):
    """A Kubernetes toleration, as a pod spec writes it."""

    key: Optional[str] = Field(None, description="taint key, e.g. nvidia.com/gpu (absent with operator Exists: every taint)")
    operator: Literal["Exists", "Equal"] = "Exists"
    value: Optional[str] = None
    effect: Optional[Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]] = None

    @field_validator("key")
    @classmethod
    def _key(cls, v: Optional[str]) -> Optional[str]:
        return _as_value_error(lambda k, what: command_values.label_key(k, "onprem.tolerations key"), v)

    @field_validator("value")
    @classmethod
    def _value(cls, v: Optional[str]) -> Optional[str]:
        return _as_value_error(lambda x, what: command_values.label_value(x, "onprem.tolerations value"), v)

    def manifest(self) -> dict:
        return {k: v for k, v in self.model_dump().items() if v is not None}


class OnPrem(StrictModel):
    """The group's own cluster: an existing Ray cluster (provider ``ray``) or a Slurm batch system
    (provider ``slurm``) on which burst starts Ray inside an allocation."""

    name: str = Field("onprem", description="how plans and reports name the on-prem site")
    accelerator: str = Field(description="accelerator name as in the catalog, e.g. V100")
    gpus: int = Field(gt=0, le=100_000, description="GPUs this run may use on-prem")
    queue_wait_hours: float = Field(0.0, ge=0, le=8760, description="expected wait before the job starts (at most a year)")
    usd_per_gpu_hour: Optional[float] = Field(None, ge=0, le=1000, description="amortised price: hardware, power, operations (at most $1000/GPU-hour); absent: derived from the four fields below")
    hardware_usd_per_gpu: float = Field(10_000.0, ge=0, le=1e7, description="purchase price of the site's hardware per GPU (or per CPU node), for the derived price")
    lifetime_years: float = Field(4.0, gt=0, le=20, description="years the hardware is written off over (4: Cloud Carbon Footprint's server lifespan)")
    usd_per_kwh: float = Field(0.15, ge=0, le=10, description="what the site pays for electricity")
    pue: float = Field(1.4, ge=1, le=5, description="the machine room's power usage effectiveness (facility power / IT power)")
    grid_gco2_per_kwh: float = Field(300.0, ge=0, le=2000, description="the site's grid carbon intensity; 300 is burst's placeholder, not a measurement: set yours")
    ray_address: Optional[str] = Field(None, description="Ray dashboard URL of the on-prem cluster, e.g. http://ray-head:8265")
    token_file: Optional[str] = Field(None, description="file holding the cluster's Ray auth token, if it uses token authentication")
    storage: Optional[str] = Field(None, description="directory or bucket URI that the cluster and this machine can both read")
    scheduler: Literal["ray", "slurm", "kubernetes"] = Field("ray", description="ray: an existing Ray cluster at ray_address; slurm: a Slurm batch system; kubernetes: a Kubernetes cluster burst did not create (KubeRay)")
    partition: Optional[str] = Field(None, description="Slurm partition for burst's jobs (default: the cluster's default partition)")
    account: Optional[str] = Field(None, description="Slurm account to charge, if the site requires one")
    qos: Optional[str] = Field(None, description="Slurm quality of service, if the site uses them")
    login: Optional[str] = Field(None, description="Slurm: login host to run the Slurm commands on with ssh (absent: this machine has them)")
    gpus_per_node: int = Field(0, ge=0, le=64, description="Slurm: GPUs per node requested as --gpus-per-node; Kubernetes: GPUs per Ray worker pod (0: CPU nodes, whole nodes or one pod per node)")
    container: Optional[str] = Field(None, description="Slurm: a Charliecloud image directory to run the job in with ch-run (burst installed in it at /opt/burst/venv)")
    notice_seconds: int = Field(120, ge=10, le=3600, description="Slurm: seconds before the walltime at which the job is signalled (sbatch --signal) to checkpoint and end; keep it above the site's KillWait")

    # Kubernetes (scheduler: kubernetes): where in the cluster, on which nodes, through which queue
    context: Optional[str] = Field(None, description="Kubernetes: kubeconfig context of the cluster (absent: the current context; --context overrides)")
    namespace: str = Field("burst", description="Kubernetes: namespace of burst's RayCluster, created if missing (--namespace overrides)")
    node_selector: dict[str, str] = Field(default_factory=dict, description="Kubernetes: node labels the Ray worker pods require, e.g. {nvidia.com/gpu.product: NVIDIA-A100-SXM4-40GB}")
    tolerations: list[Toleration] = Field(default_factory=list, description="Kubernetes: taints the Ray pods tolerate (GPU nodes are often tainted)")
    local_queue: Optional[str] = Field(None, description="Kubernetes: Kueue LocalQueue the RayCluster is submitted through (its admission state is the plan's queue wait)")
    pvc_size_gi: int = Field(50, ge=1, le=100_000, description="Kubernetes: size of the PersistentVolumeClaim burst creates for the run's storage when storage is not a bucket")
    storage_class: Optional[str] = Field(None, description="Kubernetes: storage class of that claim (absent: the cluster's default; it must be ReadWriteMany for more than one pod)")
    pod_monitor: bool = Field(False, description="Kubernetes: also create a PodMonitor (Prometheus Operator, monitoring.coreos.com/v1) that scrapes every Ray pod's metrics port")

    @field_validator("login")
    @classmethod
    def _login_is_a_host(cls, v: Optional[str]) -> Optional[str]:
        return _as_value_error(command_values.login_host, v)

    @field_validator("partition", "account", "qos")
    @classmethod
    def _slurm_names(cls, v: Optional[str]) -> Optional[str]:
        return _as_value_error(command_values.slurm_name, v)

    @field_validator("namespace", "local_queue", "storage_class")
    @classmethod
    def _k8s_names(cls, v: Optional[str], info) -> Optional[str]:
        return _as_value_error(lambda value, what: command_values.k8s_name(value, f"onprem.{info.field_name}"), v)

    @field_validator("context")
    @classmethod
    def _kube_context(cls, v: Optional[str]) -> Optional[str]:
        return _as_value_error(command_values.kube_context, v)

    @field_validator("node_selector")
    @classmethod
    def _labels(cls, v: dict) -> dict:
        for key, value in v.items():
            _as_value_error(lambda k, what: command_values.label_key(k, "onprem.node_selector key"), key)
            _as_value_error(lambda x, what: command_values.label_value(x, f"onprem.node_selector[{key}]"), value)
        return v

    @field_validator("container")
    @classmethod
    def _container_is_a_plain_path(cls, v: Optional[str]) -> Optional[str]:
        return _as_value_error(command_values.plain_path, v)

    def hourly_usd_per_device(self, watts: float) -> float:
        """The policy's price, or hardware amortisation plus power (``watts`` per GPU or CPU node, times the PUE)."""
        if self.usd_per_gpu_hour is not None:
            return self.usd_per_gpu_hour
        return amortised_hourly_usd(self.hardware_usd_per_gpu, self.lifetime_years, watts, self.usd_per_kwh, self.pue)

    def price_basis(self, watts: float) -> str:
        if self.usd_per_gpu_hour is not None:
            return f"${self.usd_per_gpu_hour:g}/GPU-h from the policy"
        return amortised_basis(self.hardware_usd_per_gpu, self.lifetime_years, watts, self.usd_per_kwh, "device-h", self.pue)


