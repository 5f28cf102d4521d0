"""Ray's Jobs API over its documented REST endpoints, read without importing Ray.

Why: Ray's own ``JobSubmissionClient`` imports the whole of Ray (its core, gRPC, protobuf) before
it sends one request, about a CPU-second on a 2-core EPYC; every ``burst status``, ``burst logs``,
cancel and web-view look paid it to read a status and a log. Reading is three GETs and a POST
(https://docs.ray.io/en/latest/cluster/running-applications/job-submission/rest.html), so this
client sends them itself, with Ray's own semantics: the version asked at construction (a head
that does not answer is a ``ConnectionError``), any other refusal a ``RuntimeError`` worded as
Ray words it ("Request failed with status code 404: ... does not exist ..."), which callers read.
Submitting a job stays Ray's (``submit_job``): it packages and uploads a runtime env's local
directories, which is Ray's to get right; Ray is imported then, once per submission.

Unlike Ray's client, a request has a timeout (a head that accepts and never answers would hold
a controller's loop for ever), and a token the head refuses is a ``JobsAuthError`` (a
``RuntimeError``, so it is said in one line where any other refusal is), not Ray's
``AuthenticationError``, whose import is all of Ray.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

__all__ = ["JobsAPI", "JobSummary", "JobsAuthError", "token_headers"]

# a log read can be long (a whole run's output, read in one answer); a head that takes longer is not answering
REQUEST_TIMEOUT_S = 120.0


class JobsAuthError(RuntimeError):
    """The head asked for a token (401) or refused the one sent (403)."""


@dataclass(frozen=True)
class JobSummary:
    """One job as ``GET /api/jobs/`` lists it (the fields burst reads; times in ms, as Ray gives them)."""

    submission_id: Optional[str]
    status: str
    end_time: Optional[int] = None


def token_headers(headers: dict[str, str]) -> dict[str, str]:
    """The token header Ray's own client would add: none when the caller sent an Authorization
    header or token authentication is off (``RAY_AUTH_MODE`` not ``token``); else the token from
    ``RAY_AUTH_TOKEN``, the file ``RAY_AUTH_TOKEN_PATH`` names, or ``~/.ray/auth_token``, in
    Ray's order. A ``RAY_AUTH_TOKEN_PATH`` that cannot be read is an error, as it is to Ray."""
    if os.environ.get("RAY_AUTH_MODE", "").lower() != "token" or any(k.lower() == "authorization" for k in headers):
        return {}
    token = os.environ.get("RAY_AUTH_TOKEN", "").strip()
    if not token and os.environ.get("RAY_AUTH_TOKEN_PATH"):
        path = Path(os.environ["RAY_AUTH_TOKEN_PATH"]).expanduser()
        try:
            token = path.read_text().strip()
        except OSError as exc:
            raise JobsAuthError(f"RAY_AUTH_TOKEN_PATH names {path}, which cannot be read ({exc.strerror})") from None
        if not token:
            raise JobsAuthError(f"RAY_AUTH_TOKEN_PATH names {path}, which is empty")
    if not token:
        default = Path.home() / ".ray" / "auth_token"
        token = default.read_text().strip() if default.is_file() else ""
    return {"Authorization": f"Bearer {token}"} if token else {}


class JobsAPI:
    """The Jobs API of one Ray head (its dashboard address), as Ray's ``JobSubmissionClient``
    offers it: ``get_job_status``, ``get_job_info``, ``get_job_logs``, ``stop_job``,
    ``list_jobs`` and ``submit_job``."""

    def __init__(self, address: str, headers: Optional[dict[str, str]] = None, verify: bool | str = True,
                 timeout_s: float = REQUEST_TIMEOUT_S):
        import requests  # Ray's own client speaks through it too (proxies, CA bundles as there)

        self.address = address.rstrip("/")
        if "://" not in self.address:
            self.address = f"http://{self.address}"  # Ray's default scheme
        given = dict(headers or {})
        self.headers = {**given, **token_headers(given)}
        self.verify = verify
        self.timeout_s = timeout_s
        self._requests = requests  # a connection per request, as Ray's client makes (no stale keep-alive after a head's restart)
        self._submitter = None
        self._check_connection()

    def _request(self, method: str, endpoint: str):
        response = self._requests.request(method, self.address + endpoint, headers=self.headers, verify=self.verify,
                                         timeout=self.timeout_s)
        if response.status_code in (401, 403):
            said = "Authentication required" if response.status_code == 401 else "Authentication failed"
            raise JobsAuthError(f"{said} by the Ray head at {self.address}: {response.text.strip()[:200]}")
        return response

    @staticmethod
    def _refused(response) -> RuntimeError:
        return RuntimeError(f"Request failed with status code {response.status_code}: {response.text}.")

    def _answer(self, method: str, endpoint: str) -> Any:
        """The head's JSON answer; any status but 200 refused in Ray's words."""
        response = self._request(method, endpoint)
        if response.status_code != 200:
            raise self._refused(response)
        return response.json()

    def _check_connection(self) -> None:
        """``GET /api/version``, as Ray's client asks it before anything else."""
        try:
            response = self._request("GET", "/api/version")
        except self._requests.RequestException:
            raise ConnectionError(f"Failed to connect to Ray at address: {self.address}.") from None
        if response.status_code == 404:
            raise RuntimeError("Version check returned 404. Jobs API is not supported on the Ray cluster. "
                               "Please ensure the cluster is running Ray 2.0 or higher.")
        if response.status_code != 200:
            raise self._refused(response)

    def get_job_info(self, job_id: str) -> dict[str, Any]:
        """The job's details as the head gives them (``GET /api/jobs/{id}``)."""
        return self._answer("GET", f"/api/jobs/{job_id}")

    def get_job_status(self, job_id: str) -> str:
        """PENDING, RUNNING, STOPPED, SUCCEEDED or FAILED."""
        return str(self.get_job_info(job_id)["status"])

    def get_job_logs(self, job_id: str) -> str:
        """Everything the job's driver has printed so far (``GET /api/jobs/{id}/logs``)."""
        return self._answer("GET", f"/api/jobs/{job_id}/logs")["logs"]

    def stop_job(self, job_id: str) -> bool:
        """Ask the job to stop (``POST /api/jobs/{id}/stop``); True when it was running."""
        return bool(self._answer("POST", f"/api/jobs/{job_id}/stop")["stopped"])

    def list_jobs(self) -> list[JobSummary]:
        """Every job the head knows, running or ended (``GET /api/jobs/``)."""
        return [JobSummary(submission_id=j.get("submission_id"), status=str(j["status"]), end_time=j.get("end_time"))
                for j in self._answer("GET", "/api/jobs/")]

    def submit_job(self, **job) -> str:
        """Ray's own ``submit_job`` (it uploads a runtime env's local directories), through a
        client made on first use with this one's address and headers."""
        if self._submitter is None:
            from ray.job_submission import JobSubmissionClient

            self._submitter = JobSubmissionClient(self.address, headers=dict(self.headers), verify=self.verify)
        return self._submitter.submit_job(**job)
