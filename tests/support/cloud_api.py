"""The providers' HTTP APIs answered from files, through ``requests``' transport-adapter seam.

The pre-flight reads Google Cloud and Azure through ``requests`` sessions; a session with
``RecordedApi`` mounted answers from ``tests/fakes/cloud_api/*.json`` (responses in each API's
documented shape: Compute Engine acceleratorTypes/regions/projects, Cloud TPU v2
acceleratorTypes/runtimeVersions/nodes, ARM Microsoft.Compute skus/usages) and notes every URL asked.
Nothing leaves the process; an unknown URL is a 404, as the real APIs answer for a missing zone.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import requests
from requests.adapters import BaseAdapter

FILES = Path(__file__).resolve().parents[1] / "fakes" / "cloud_api"
ROUTES = (  # URL pattern -> file name pattern
    (r"compute\.googleapis\.com/compute/v1/projects/[^/]+/zones/([^/]+)/acceleratorTypes", "gcp-zone-{0}-acceleratorTypes"),
    (r"compute\.googleapis\.com/compute/v1/projects/[^/]+/regions/([^/?]+)$", "gcp-region-{0}"),
    (r"compute\.googleapis\.com/compute/v1/projects/[^/?]+$", "gcp-project"),
    (r"tpu\.googleapis\.com/v2/projects/[^/]+/locations/([^/]+)/acceleratorTypes", "tpu-{0}-acceleratorTypes"),
    (r"tpu\.googleapis\.com/v2/projects/[^/]+/locations/([^/]+)/runtimeVersions", "tpu-{0}-runtimeVersions"),
    (r"tpu\.googleapis\.com/v2/projects/[^/]+/locations/([^/]+)/nodes/([^/?]+)$", "tpu-{0}-node-{1}"),
    (r"management\.azure\.com/subscriptions/[^/]+/providers/Microsoft\.Compute/locations/([^/]+)/usages", "azure-usages-{0}"),
    (r"management\.azure\.com/subscriptions/[^/]+/providers/Microsoft\.Compute/skus\?.*location(?: |%20)eq(?: |%20)(?:'|%27)([a-z0-9]+)", "azure-skus-{0}"),
)


class RecordedApi(BaseAdapter):
    """Serves ``FILES/<name>.json`` (or ``overrides[name]``) for the URLs in ``ROUTES``."""

    def __init__(self, overrides: dict | None = None):
        super().__init__()
        self.overrides = overrides or {}
        self.asked: list[str] = []

    def send(self, request, **kwargs):
        self.asked.append(request.url)
        response = requests.Response()
        response.request, response.url = request, request.url
        for pattern, name in ROUTES:
            m = re.search(pattern, request.url)
            if m:
                key = name.format(*m.groups())
                body = self.overrides.get(key)
                if body is None and (FILES / f"{key}.json").exists():
                    body = json.loads((FILES / f"{key}.json").read_text())
                if body is not None:
                    response.status_code, response._content = 200, json.dumps(body).encode()
                    return response
        response.status_code, response._content = 404, b'{"error": {"code": 404, "message": "not found"}}'
        return response

    def close(self):
        pass


def session(overrides: dict | None = None) -> tuple[requests.Session, RecordedApi]:
    api = RecordedApi(overrides)
    s = requests.Session()
    s.mount("https://", api)
    return s, api
