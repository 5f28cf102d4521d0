"""Pre-flight: ask the provider, before anything is created, whether the layout can come up.

Quotas (a new project's GPU quota is 0), whether each zone offers the accelerator, whether the
TPU runtime image exists: each shortfall is one line naming the quota or the fact, what the
layout needs, what the provider allows, and where to fix it. Runs before ``burst up`` creates
anything, and alone with ``burst up --check``.

The provider APIs are read with plain authenticated HTTP (``google-auth``'s ``AuthorizedSession``,
``azure-identity`` for an ARM token): both are ``requests`` sessions, so the tests serve recorded
responses through ``Session.mount``, the seam ``requests`` documents for transports.

This module holds what every cloud's pre-flight shares (the HTTP read, the quota line, the
verdict); the questions themselves are each cloud's (``google_cloud``, ``azure_cloud``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Optional

from ..errors import BurstError

if TYPE_CHECKING:
    import requests


def get_json(session: "requests.Session", url: str, what: str) -> dict:
    import requests

    try:
        response = session.get(url, timeout=30)
    except requests.RequestException as exc:
        raise BurstError(f"pre-flight: could not ask {what} ({exc.__class__.__name__}: {str(exc)[:160]}); "
                         "check the network and try again", exit_code=1) from None
    except Exception as exc:  # noqa: BLE001 - credential refresh errors of google-auth / azure-identity
        raise BurstError(f"pre-flight: the credentials were refused while asking {what} ({str(exc).splitlines()[0][:200]}); "
                         "log in again (`gcloud auth application-default login` / `az login`)", exit_code=1) from None
    if response.status_code in (401, 403):
        raise BurstError(f"pre-flight: {what} answered {response.status_code} (not allowed): the account needs read access "
                         f"to quotas and machine types of the project/subscription", exit_code=1)
    if response.status_code == 404:
        raise BurstError(f"pre-flight: {what} answered 404: the project, subscription or location does not exist "
                         f"({url.split('?')[0]})", exit_code=1)
    if response.status_code >= 400:
        raise BurstError(f"pre-flight: {what} answered HTTP {response.status_code}: {response.text[:200]}", exit_code=1)
    return response.json()


# ---------------------------------------------------------------------- Google Cloud


def quota_line(metric: str, where: str, need: float, limit: float, usage: float, page: str) -> Optional[str]:
    if usage + need <= limit:
        return None
    return (f"quota {metric} in {where}: the layout needs {need:g}, the limit is {limit:g} with {usage:g} in use; "
            f"raise it at {page}")


# ---------------------------------------------------------------------- Azure


def run(check: Callable[[], list[str]], provider: str, report_ok: Callable[[str], None]) -> None:
    """Raise one ``BurstError`` listing every shortfall; else report that the pre-flight passed."""
    problems = check()
    if problems:
        raise BurstError(f"pre-flight for {provider} found {len(problems)} problem{'s' if len(problems) > 1 else ''}, nothing was created: "
                         + " | ".join(problems), exit_code=1)
    report_ok(f"pre-flight: quotas, zones and images of {provider} hold the layout")
