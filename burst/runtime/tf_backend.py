"""TensorFlow's cluster description (``TF_CONFIG``) for Ray Train's workers, without TensorFlow.

Ray's ``TensorflowConfig`` does exactly this, but it lives in ``ray.train.tensorflow``, whose
package imports TensorFlow: the job's driver and Ray Train's controller, neither of which runs a
TensorFlow operation, each paid a TensorFlow import (5 to 8 s on a 2-core machine) before the
first worker could start. This backend sets the same ``TF_CONFIG`` on each worker (every
worker's address, its own index) as ``ray.train.tensorflow.config._TensorflowBackend`` does, from
a module the controller can load with Ray alone. ``MultiWorkerMirroredStrategy`` reads it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

import ray
from ray._common.network_utils import build_address
from ray.train._internal.utils import get_address_and_port
from ray.train.backend import Backend, BackendConfig
from ray.train.v2._internal.util import TrainingFramework


def tf_config(worker_addresses: list[str], index: int) -> dict:
    """The ``TF_CONFIG`` of worker ``index`` of a cluster of ``worker_addresses``."""
    return {"cluster": {"worker": list(worker_addresses)}, "task": {"type": "worker", "index": index}}


def _address() -> str:
    return build_address(*get_address_and_port())


def _set_tf_config(worker_addresses: list[str], index: int) -> None:
    os.environ["TF_CONFIG"] = json.dumps(tf_config(worker_addresses, index))


class _TfConfigBackend(Backend):
    def on_start(self, worker_group, backend_config: "TfConfig") -> None:
        addresses = worker_group.execute(_address)
        ray.get([worker_group.execute_single_async(i, _set_tf_config, worker_addresses=addresses, index=i) for i in range(len(worker_group))])


@dataclass
class TfConfig(BackendConfig):
    """The backend of burst's Ray Train runs: ``TF_CONFIG`` on every worker."""

    @property
    def backend_cls(self):
        return _TfConfigBackend

    @property
    def framework(self):
        return TrainingFramework.TENSORFLOW
