"""What the server takes from anyone before it knows who they are: request bodies no larger than
their path needs (refused before a route, authentication included, reads them), a few sign-in
attempts a minute from one address, and sign-in forms posted only from the server's own pages."""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from typing import Optional
from urllib.parse import urlsplit

#: (path prefix, most bytes a request body may have), first match wins; the default after
BODY_CAPS = (("/signin", 16 * 1024), ("/ui/", 2 * 1024 * 1024), ("/v1/verbs/", 5 * 1024 * 1024))
DEFAULT_BODY_CAP = 1024 * 1024
SIGN_INS_PER_MINUTE = 10


class _TooLarge(Exception):
    pass


def body_cap(path: str) -> int:
    return next((cap for prefix, cap in BODY_CAPS if path.startswith(prefix)), DEFAULT_BODY_CAP)


class BodyLimit:
    """ASGI middleware: a body over its path's cap (``Content-Length`` said, or counted as it
    streams) is answered 413 and read no further."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        cap = body_cap(scope.get("path", ""))
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > cap):
            return await _refuse(send, cap)
        seen = 0
        started = False

        async def counted():
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > cap:
                    raise _TooLarge()
            return message

        async def sending(message):
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, sending)
        except _TooLarge:
            if not started:
                await _refuse(send, cap)


async def _refuse(send, cap: int) -> None:
    body = json.dumps({"detail": f"the request's body is over {cap // 1024} KiB, more than this path takes"}).encode()
    await send({"type": "http.response.start", "status": 413,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


class StrictTransport:
    """ASGI middleware: every answer tells browsers to come back over HTTPS only (a server that
    serves TLS itself, or behind a TLS proxy its admin names)."""

    HEADER = (b"strict-transport-security", b"max-age=31536000")

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def sending(message):
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), self.HEADER]}
            await send(message)

        await self.app(scope, receive, sending)


class SignInLimit:
    """At most ``SIGN_INS_PER_MINUTE`` sign-in attempts a minute from one address (in this server)."""

    def __init__(self, per_minute: int = SIGN_INS_PER_MINUTE):
        self.per_minute = per_minute
        self._seen: dict[str, deque] = {}
        self._lock = threading.Lock()

    def allows(self, address: str, now: Optional[float] = None) -> bool:
        now = time.monotonic() if now is None else now
        with self._lock:
            recent = self._seen.setdefault(address, deque())
            while recent and now - recent[0] > 60:
                recent.popleft()
            if len(recent) >= self.per_minute:
                return False
            recent.append(now)
            if len(self._seen) > 10_000:  # addresses that came once do not pile up
                self._seen = {a: q for a, q in self._seen.items() if q and now - q[-1] <= 60}
            return True


def same_origin(headers, host: str) -> bool:
    """Whether a form post comes from the server's own pages: a browser's ``Sec-Fetch-Site`` or
    ``Origin`` says where the page that posted it was (a post with neither is no browser's)."""
    site = headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        return False
    origin = headers.get("origin")
    return origin is None or (origin == "null" and site == "same-origin") or urlsplit(origin).netloc == host
