"""Asking a Ray head from 127.0.0.1 with no token, a wrong one and the right one (the Jobs API:
job submission is code execution)."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

import pytest


def _status(url: str, token: str | None) -> int:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def _wait_until_answers(url: str, token: str, timeout: float = 90.0) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            if _status(url, token) == 200:
                return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.5)
    raise AssertionError(f"the head at {url} did not answer within {timeout:.0f} s")


def assert_refuses_strangers(dashboard: str, token: str) -> None:
    jobs = f"{dashboard}/api/jobs/"
    _wait_until_answers(jobs, token)
    assert _status(jobs, None) == 401  # no token: refused
    assert _status(jobs, "0" * 64) == 403  # a wrong one: refused
    assert _status(jobs, token) == 200
    submit = urllib.request.Request(jobs, data=json.dumps({"entrypoint": "touch /tmp/pwned"}).encode(), method="POST",
                                    headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(submit, timeout=5)
    assert refused.value.code == 401
