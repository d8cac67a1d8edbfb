"""The server's hand-written HTTP side: the shared token (header, cookie or query), the
dashboard's files and ``/api/state`` (:class:`HttpMixin` of
:class:`~.server.StreamServer`)."""

from __future__ import annotations

import email.utils
import hmac
import ipaddress
import json
import time
from http import HTTPStatus
from urllib.parse import parse_qs, urlsplit

from liquid_stream.apps.serve.state import json_safe, static_file

from .defaults import COOKIE, KEEP_CLOSED, KEEP_CLOSED_S, STATE_EVERY_S, ServeError


def check_token(host: str, token: str | None) -> None:
    """Refuse an empty token, and listening beyond the loopback without one (ServeError);
    cheap, so ``serve`` checks it before loading any model."""
    if token is not None and not token:
        raise ServeError("--token must not be empty")
    if not is_loopback(host) and not token:
        raise ServeError(
            f"listening on {host} (beyond this machine) needs a shared --token "
            "(or the LIQUID_STREAM_TOKEN environment variable)"
        )


def is_loopback(host: str) -> bool:
    """True for localhost / 127.x / ::1 (a server there needs no token)."""
    if host in ("localhost", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class HttpMixin:
    """HTTP requests on the WebSocket port (the methods of :class:`~.server.StreamServer`
    that answer them)."""

    def _token_ok(self, request, query: dict) -> bool | None:
        """True: a right token came with the request; False: a wrong one; None: none."""
        if not self.token:
            return True
        given = None
        auth = request.headers.get("Authorization", "")
        if auth.lower().startswith("bearer "):
            given = auth[7:].strip()
        given = given or (query.get("token") or [None])[0]
        if given is None:
            for part in request.headers.get("Cookie", "").split(";"):
                k, _, v = part.strip().partition("=")
                if k == COOKIE:
                    given = v
        if given is None:
            return None
        return hmac.compare_digest(given.encode(), self.token.encode())

    def _http(self, conn, request):
        """``process_request``: answer plain HTTP, let ``/stream`` through to the handshake."""
        from websockets.datastructures import Headers
        from websockets.http11 import Response

        parts = urlsplit(request.path)
        query = parse_qs(parts.query)
        ok = self._token_ok(request, query)

        def respond(status: int, kind: str, body: bytes, extra=()) -> Response:
            headers = Headers(
                [
                    ("Date", email.utils.formatdate(usegmt=True)),
                    ("Connection", "close"),
                    ("Content-Length", str(len(body))),
                    ("Content-Type", kind),
                    ("Cache-Control", "no-store"),
                    ("X-Content-Type-Options", "nosniff"),
                    *extra,
                ]
            )
            return Response(status, HTTPStatus(status).phrase, headers, body)

        if parts.path == "/stream":
            if ok is False:
                return respond(401, "text/plain; charset=utf-8", b"wrong token\n")
            return None  # the WebSocket handshake goes on
        if parts.path == "/api/state":
            if not ok:
                return respond(401, "text/plain; charset=utf-8", b"token required\n")
            return respond(200, "application/json", self.state_text().encode())
        status, kind, body = static_file(request.path, self.web_dir)
        extra = ()
        if parts.path in ("/", "/index.html") and self.token and ok:  # let the page fetch
            extra = (("Set-Cookie", f"{COOKIE}={self.token}; HttpOnly; SameSite=Strict; Path=/"),)
        return respond(status, kind, body, extra)

    def state(self) -> dict:
        """The ``/api/state`` JSON (schema in :mod:`.state`), as a dict."""
        return json.loads(self.state_text())

    def state_text(self) -> str:
        """The ``/api/state`` JSON text; rebuilt at most every ``STATE_EVERY_S`` (many
        dashboards polling a big ward cost one build), and at once after a stream opened
        or ended."""
        now = time.time()
        if self._state_cache is not None and now - self._state_cache[0] < STATE_EVERY_S:
            return self._state_cache[1]
        self._forget_closed(now)
        streams = []
        for sid, view in self.views.items():
            s = self.streams.get(sid)
            if s is not None and s.view is view:
                view.lag_ms = 1000 * (
                    time.monotonic() - s.inbox[0][0] if s.inbox else s.last_latency
                )
                view.waiting = bool(s.inbox)  # blocks not stepped yet: data, not silence
            streams.append(view.to_text(now))
        server = json_safe(
            {
                "time": now,
                "uptime_s": now - self.started,
                "streams": len(self.streams),
                "max_streams": self.max_streams,
                "models": list(self.hosts),
                "hosts": [
                    {**h.describe(), "shard": i, **h.stats.to_json()}
                    for banks in self.shards.values()
                    for i, h in enumerate(banks)
                ],
                "budget_ms": self.budget * 1000,
                "bulk_ms": self.bulk_ms,
                "bulk_share": self.bulk_share,
                "stale_s": self.stale_s,
            }
        )
        text = '{"server":' + json.dumps(server) + ',"streams":[' + ",".join(streams) + "]}"
        self._state_cache = (now, text)
        return text

    def _forget_closed(self, now: float) -> None:
        closed = [sid for sid, v in self.views.items() if not v.connected]
        drop = set(closed[: max(0, len(closed) - KEEP_CLOSED)])
        drop |= {sid for sid in closed if now - (self.views[sid].closed_at or now) > KEEP_CLOSED_S}
        for sid in drop:
            del self.views[sid]
