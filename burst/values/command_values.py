"""Values from a policy or the command line that burst hands to ssh, sbatch or a Kubernetes manifest.

Each is checked against the narrow form its consumer expects, so that a value from a shared policy
file can never become an option of that program (``login: "-oProxyCommand=..."`` would make ssh run
a local command) or an extra line of a manifest. A value that does not fit is one line saying
which key, what was given and what is allowed.
"""

from __future__ import annotations

import re
from typing import Optional

from ..errors import BurstError

# [user@]host: a host name, an ssh config alias or an IPv4 address; nothing ssh could read as an option.
LOGIN_HOST = re.compile(r"(?:[A-Za-z0-9_][A-Za-z0-9._-]{0,63}@)?[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252}[A-Za-z0-9])?")
# Slurm partition, account and QOS names (a partition list is comma-separated).
SLURM_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}(?:,[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})*")
# A container image reference: [registry[:port]/]path[:tag][@digest], as the OCI distribution spec names them.
IMAGE_REF = re.compile(r"[a-z0-9][a-z0-9._-]*(?::[0-9]{1,5})?(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*"
                       r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[a-f0-9]{64})?")
# A Kubernetes object name or label value (DNS-1123 label): namespaces, queues, contexts' safe form.
K8S_NAME = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
# A kubeconfig context name: no leading '-' (kubectl would read an option), no spaces or control characters.
KUBE_CONTEXT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:@/-]{0,252}")
# A label key (optional DNS prefix and '/') and value, for node selectors and tolerations.
LABEL_KEY = re.compile(r"(?:[a-z0-9](?:[a-z0-9.-]{0,251}[a-z0-9])?/)?[A-Za-z0-9](?:[A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?")
LABEL_VALUE = re.compile(r"(?:[A-Za-z0-9](?:[A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?)?")
# An absolute path without control characters, quotes or shell expansions (it is written into a batch script).
PLAIN_PATH = re.compile(r"/[A-Za-z0-9_./+@%=,-]*")


def _check(value: Optional[str], rule: re.Pattern, what: str, allowed: str) -> Optional[str]:
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > 255 or not rule.fullmatch(value):
        shown = repr(value) if len(str(value)) <= 60 else repr(str(value)[:57] + "...")
        raise BurstError(f"{what} {shown} is not allowed: use {allowed}")
    return value


def login_host(value: Optional[str], what: str = "onprem.login") -> Optional[str]:
    return _check(value, LOGIN_HOST, what, "a host name or user@host (letters, digits, '.', '-'; no leading '-')")


def slurm_name(value: Optional[str], what: str) -> Optional[str]:
    return _check(value, SLURM_NAME, what, "a Slurm name of letters, digits, '_', '.' and '-' (a list separated by ',')")


def image(value: Optional[str], what: str = "--image") -> Optional[str]:
    return _check(value, IMAGE_REF, what, "a container image reference such as registry.example.org/group/burst:1.0")


def plain_path(value: Optional[str], what: str) -> Optional[str]:
    return _check(value, PLAIN_PATH, what, "an absolute path of letters, digits and _ . / + @ % = , -")


def k8s_name(value: Optional[str], what: str) -> Optional[str]:
    return _check(value, K8S_NAME, what, "a Kubernetes name: lower-case letters, digits and '-', at most 63, starting and ending alphanumeric")


def kube_context(value: Optional[str], what: str = "--context") -> Optional[str]:
    return _check(value, KUBE_CONTEXT, what, "a kubeconfig context name (letters, digits and _ . : @ / -; no leading '-')")


def label_key(value: Optional[str], what: str) -> Optional[str]:
    return _check(value, LABEL_KEY, what, "a Kubernetes label key such as cloud.google.com/gke-accelerator")


def label_value(value: Optional[str], what: str) -> Optional[str]:
    return _check(value, LABEL_VALUE, what, "a Kubernetes label value (letters, digits, '_', '.', '-'; at most 63)")
