"""GET a price list's JSON answer, every failure one line naming the host: shared by the price
lists ``burst catalog refresh`` reads (Azure's Retail Prices API, Google's Cloud Billing Catalog)."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Optional

from ..errors import BurstError


def fetch_json(url: str, headers: Optional[dict[str, str]] = None, hint: str = "", timeout: float = 30) -> dict:
    """GET ``url`` and parse its JSON. ``hint`` ends the line said when the host cannot be reached."""
    host = urllib.parse.urlsplit(url).netloc
    request = urllib.request.Request(url, headers={"Accept": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return json.loads(answer.read().decode("utf-8"))
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403):
            raise BurstError(f"{host} refused the credentials (HTTP {exc.code} {exc.reason}); the catalog is unchanged: {hint or 'check them'}") from None
        raise BurstError(f"{host} answered HTTP {exc.code} ({exc.reason}); the catalog is unchanged: try again later") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise BurstError(f"could not reach {host} ({reason}); the catalog is unchanged: check the network or proxy"
                         + (f" ({hint})" if hint else "")) from None
    except (ValueError, UnicodeDecodeError):
        raise BurstError(f"{host} did not answer with JSON; the catalog is unchanged: try again later") from None
