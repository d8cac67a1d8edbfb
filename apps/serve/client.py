"""Clients of ``liquid-stream serve``: a blocking one, an asyncio one, and helpers that
stream a WAV file, a WFDB record or a microphone (no torch).

    with ServeClient("ws://127.0.0.1:8765") as c:              # /stream is added
        c.open("vitals", channels=["PLETH", "II"], sample_rate=125, alarms="hr>120")
        for chunk in chunks:                                      # (T, C) samples, any T
            c.send(chunk)
            for ev in c.drain():                                   # events received so far
                print(ev)
        rest = c.close()                                           # last events; c.closed

    result = stream_wav("ws://127.0.0.1:8765", "talk.wav")          # kws, as fast as it goes
    result = stream_record(url, "bidmc/bidmc01", speed=None)        # vitals, 1-s blocks
    url = shard("bed-3", ["ws://a:8765", "ws://b:8765"])            # stream affinity

Protocol: :mod:`liquid_stream.apps.serve.server` (docs/serving.md). Blocks go as binary
float32 little-endian ``(T, C)`` frames, each after its channel count C (a uint32: the
``"counted"`` framing these clients open with, so the server refuses a block of the wrong
channels; :meth:`ServeClient.send`), or as float64 JSON (:meth:`ServeClient.send_json`).
When the server ends the connection (it shuts down: code 1001; a keepalive ping went
unanswered: 1011; the client sent no open in time: 1008) every call raises
:class:`ServeClientError` saying so in one line, never websockets' own exception.

A stream's id travels in the URL query too (``?id=``), so a load balancer can route by
it (:func:`shard` is the same idea in the client: rendezvous hashing, stable when a
server is added or removed: only the streams of that server move).
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

import numpy as np

DEFAULT_URL = "ws://127.0.0.1:8765/stream"
MAX_MESSAGE = 1 << 22


class ServeClientError(RuntimeError):
    """The server refused (the message is its reason) or the connection failed."""


def stream_url(url: str, stream_id: str | None = None) -> str:
    """``url`` with the ``/stream`` path when it has none, and ``?id=stream_id``."""
    if "://" not in url:
        url = "ws://" + url
    parts = urlsplit(url)
    scheme = {"http": "ws", "https": "wss"}.get(parts.scheme, parts.scheme)
    path = parts.path if parts.path not in ("", "/") else "/stream"
    query = parts.query
    if stream_id is not None:
        query = "&".join(q for q in (query, f"id={quote(stream_id, safe='')}") if q)
    return urlunsplit((scheme, parts.netloc, path, query, ""))


def shard(stream_id: str, urls: Sequence[str]) -> str:
    """The server of ``urls`` that serves ``stream_id``: the highest hash of (server,
    id) (rendezvous hashing: stable across processes and runs, and adding or removing a
    server moves only the streams that land on or came from it)."""
    if not urls:
        raise ValueError("no servers to shard over")

    def score(u: str) -> bytes:
        return hashlib.blake2b(f"{u}\0{stream_id}".encode(), digest_size=8).digest()

    return max(urls, key=score)


def encode_block(block, columns: int | None = None, counted: bool = False) -> bytes:
    """A ``(T, C)`` (or mono ``(T,)``) block as the binary frame: float32 little-endian,
    row-major, after C as a uint32 little-endian when ``counted`` (the ``"counted"``
    framing). int16 audio is scaled by 1/32768 first."""
    x = np.asarray(block)
    if x.dtype == np.int16:
        x = x.astype(np.float32) / 32768.0
    if x.ndim == 1:
        x = x[:, None]
    if x.ndim != 2 or (columns is not None and x.shape[1] != columns):
        raise ValueError(f"expected a (T, {columns or 'C'}) block, got shape {np.shape(block)}")
    head = int(x.shape[1]).to_bytes(4, "little") if counted else b""
    return head + np.ascontiguousarray(x, dtype="<f4").tobytes()


CLOSE_MEANING = {
    1001: "the server is shutting down",
    1008: "the server ended it (policy)",
    1011: "the server closed it (an internal error, or its keepalive ping went unanswered)",
}


def closed_message(e: Exception) -> str:
    """One line for websockets' ``ConnectionClosed`` ``e``: who closed, the code, its
    meaning and the server's reason."""
    rcvd = getattr(e, "rcvd", None)
    if rcvd is None:
        return "connection lost (no close frame from the server)"
    meaning = CLOSE_MEANING.get(rcvd.code, "")
    reason = f": {rcvd.reason}" if rcvd.reason else ""
    return f"connection closed by the server, code {rcvd.code}{reason}" + (
        f" ({meaning})" if meaning else ""
    )


def open_message(
    model=None,
    *,
    sample_rate=None,
    channels=None,
    alarms=None,
    stream_id=None,
    overflow="drop",
    token=None,
    scores=None,
    framing="counted",
) -> dict:
    """The ``open`` request (fields left out when None)."""
    msg = {
        "op": "open",
        "model": model,
        "sample_rate": sample_rate,
        "channels": None if channels is None else list(channels),
        "alarms": alarms,
        "id": stream_id,
        "overflow": overflow,
        "token": token,
        "scores": scores,
        "framing": framing,
    }
    return {k: v for k, v in msg.items() if v is not None}


def _headers(token: str | None) -> dict:
    return {"Authorization": f"Bearer {token}"} if token else {}


class ServeClient:
    """One stream on a ``liquid-stream serve`` server, blocking (websockets' sync client:
    a background thread receives, so events wait in a queue until read).

    Args:
        url: the server (``ws://HOST:PORT`` or ``.../stream``).
        token: the server's shared token, sent with the handshake.
        stream_id: the stream's id (also sent in the URL, for a load balancer).
        timeout: seconds to wait for the connection and the server's answers.
        max_queue: received messages buffered before the client stops reading its socket.
    """

    def __init__(
        self,
        url: str = DEFAULT_URL,
        *,
        token: str | None = None,
        stream_id: str | None = None,
        timeout: float = 10.0,
        max_queue: int = 4096,
    ):
        from websockets.sync.client import connect

        self.url = stream_url(url, stream_id)
        self.stream_id, self.timeout = stream_id, timeout
        self.opened: dict | None = None
        self.closed: dict | None = None
        self.columns = 1
        self.counted = False  # binary frames start with their channel count (the reply's)
        try:
            self.ws = connect(
                self.url,
                additional_headers=_headers(token),
                open_timeout=timeout,
                max_size=MAX_MESSAGE,
                max_queue=max_queue,
                close_timeout=timeout,
                legacy=True,
            )
        except (OSError, TimeoutError) as e:
            raise ServeClientError(f"cannot connect to {self.url}: {e}") from None
        except Exception as e:  # noqa: BLE001 - websockets' InvalidStatus, InvalidURI, ...
            raise ServeClientError(f"{self.url}: {e}") from None

    def open(
        self,
        model: str | None = None,
        *,
        sample_rate: float | None = None,
        channels: Sequence[str] | None = None,
        alarms: str | None = None,
        overflow: str = "drop",
        token: str | None = None,
        scores: bool | None = None,
    ) -> dict:
        """Open the stream; returns the server's ``opened`` message. ServeClientError with
        the server's reason when it refuses. ``scores=False``: no kws ``scores`` events
        (detections only: less traffic)."""
        self._send(
            json.dumps(
                open_message(
                    model,
                    sample_rate=sample_rate,
                    channels=channels,
                    alarms=alarms,
                    stream_id=self.stream_id,
                    overflow=overflow,
                    token=token,
                    scores=scores,
                )
            )
        )
        reply = self.recv(self.timeout)
        if reply is None:
            raise ServeClientError(f"{self.url}: no answer to open in {self.timeout:g} s")
        if reply.get("type") != "opened":
            raise ServeClientError(reply.get("message", f"open refused: {reply}"))
        self.opened = reply
        self.stream_id = reply["id"]
        self.columns = int(reply["columns"])
        self.counted = reply.get("framing") == "counted"
        return reply

    def _send(self, message: str | bytes) -> None:
        from websockets.exceptions import ConnectionClosed

        try:
            self.ws.send(message)
        except ConnectionClosed as e:
            raise ServeClientError(closed_message(e)) from None

    def send(self, block) -> None:
        """Send a ``(T, C)`` block (binary float32)."""
        self._send(encode_block(block, self.columns, self.counted))

    def send_json(self, block) -> None:
        """Send a ``(T, C)`` block as JSON (float64; NaN as null)."""
        x = np.asarray(block, dtype=np.float64)
        if x.ndim == 1:
            x = x[:, None]
        data = [[None if not np.isfinite(v) else float(v) for v in row] for row in x]
        self._send(json.dumps({"op": "samples", "data": data}))

    def send_raw(self, message: str | bytes) -> None:
        """Send a message as it is (tests, custom ops)."""
        self._send(message)

    def recv(self, timeout: float | None = None) -> dict | None:
        """The next message (a dict), or None after ``timeout`` s. ServeClientError when
        the connection is closed."""
        from websockets.exceptions import ConnectionClosed

        try:
            msg = self.ws.recv(timeout)
        except TimeoutError:
            return None
        except ConnectionClosed as e:
            raise ServeClientError(closed_message(e)) from None
        return json.loads(msg)

    def drain(self) -> list[dict]:
        """Every message already received (never waits)."""
        out = []
        while (ev := self.recv(0)) is not None:
            out.append(ev)
        return out

    def close(self, timeout: float = 60.0) -> list[dict]:
        """End the stream: the server runs what it holds and sends the last events and
        ``closed`` (kept in :attr:`closed`); returns the events received since the last
        read, ``closed`` left out."""
        from websockets.exceptions import ConnectionClosed

        out: list[dict] = []
        try:
            self._send(json.dumps({"op": "close"}))
            end = time.monotonic() + timeout
            while self.closed is None:
                left = end - time.monotonic()
                if left <= 0:
                    raise ServeClientError(f"no 'closed' from the server in {timeout:g} s")
                ev = self.recv(left)
                if ev is None:
                    continue
                if ev.get("type") == "closed":
                    self.closed = ev
                else:
                    out.append(ev)
        except (ConnectionClosed, ServeClientError) as e:
            if self.closed is None:
                if isinstance(e, ConnectionClosed):
                    raise ServeClientError(closed_message(e)) from None
                raise
        finally:
            self.ws.close()
        return out

    def abort(self) -> None:
        """Drop the connection without a close handshake (as a crashed client would)."""
        sock = self.ws.socket
        try:
            sock.setsockopt(
                socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
            )
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        sock.close()

    def __enter__(self) -> ServeClient:
        return self

    def __exit__(self, *exc) -> None:
        self.ws.close()


class AsyncServeClient:
    """:class:`ServeClient` for asyncio (many streams from one process: the benchmark).

    c = await AsyncServeClient.connect(url, stream_id="bed-1")
    await c.open("vitals-ppg", channels=["PLETH"], sample_rate=125)
    await c.send(block); ev = await c.recv(); await c.close()
    """

    def __init__(self, ws, url: str, stream_id: str | None, timeout: float):
        self.ws, self.url, self.stream_id, self.timeout = ws, url, stream_id, timeout
        self.opened: dict | None = None
        self.closed: dict | None = None
        self.columns = 1
        self.counted = False

    @classmethod
    async def connect(
        cls,
        url: str = DEFAULT_URL,
        *,
        token: str | None = None,
        stream_id: str | None = None,
        timeout: float = 30.0,
        max_queue: int = 4096,
    ) -> AsyncServeClient:
        from websockets.asyncio.client import connect

        full = stream_url(url, stream_id)
        try:
            ws = await connect(
                full,
                additional_headers=_headers(token),
                open_timeout=timeout,
                max_size=MAX_MESSAGE,
                max_queue=max_queue,
                ping_interval=None,
            )
        except (OSError, TimeoutError) as e:
            raise ServeClientError(f"cannot connect to {full}: {e}") from None
        return cls(ws, full, stream_id, timeout)

    async def open(self, model: str | None = None, **kw) -> dict:
        """As :meth:`ServeClient.open`."""
        import asyncio

        await self.ws.send(json.dumps(open_message(model, stream_id=self.stream_id, **kw)))
        try:
            reply = json.loads(await asyncio.wait_for(self.ws.recv(), self.timeout))
        except TimeoutError:
            raise ServeClientError(f"{self.url}: no answer to open") from None
        if reply.get("type") != "opened":
            raise ServeClientError(reply.get("message", f"open refused: {reply}"))
        self.opened, self.stream_id = reply, reply["id"]
        self.columns = int(reply["columns"])
        self.counted = reply.get("framing") == "counted"
        return reply

    async def send(self, block) -> None:
        await self.ws.send(encode_block(block, self.columns, self.counted))

    async def recv(self) -> dict:
        return json.loads(await self.ws.recv())

    async def close(self, timeout: float = 60.0) -> list[dict]:
        """As :meth:`ServeClient.close`."""
        import asyncio

        out = []
        await self.ws.send(json.dumps({"op": "close"}))
        try:
            async with asyncio.timeout(timeout):
                while self.closed is None:
                    ev = await self.recv()
                    if ev.get("type") == "closed":
                        self.closed = ev
                    else:
                        out.append(ev)
        finally:
            await self.ws.close()
        return out


# ------------------------------------------------------------------------- streaming


@dataclass
class StreamResult:
    """What a streamed source got back: the ``opened`` reply, every event in order, the
    ``closed`` message, blocks and seconds sent, and wall time."""

    opened: dict
    events: list[dict] = field(default_factory=list)
    closed: dict | None = None
    blocks: int = 0
    seconds: float = 0.0
    wall_s: float = 0.0

    def of(self, kind: str) -> list[dict]:
        """The events of one type (``estimate``, ``detection``, ...)."""
        return [e for e in self.events if e.get("type") == kind]


def stream_blocks(
    url: str,
    blocks: Iterable[np.ndarray],
    *,
    model: str | None = None,
    sample_rate: float,
    channels: Sequence[str] | None = None,
    alarms: str | None = None,
    stream_id: str | None = None,
    token: str | None = None,
    overflow: str = "wait",
    on_event: Callable[[dict], None] | None = None,
    json_blocks: bool = False,
) -> StreamResult:
    """Open a stream, send ``blocks`` (``(T, C)`` each), close it; every event the server
    sent, in order (``on_event`` sees each as it arrives)."""
    t0 = time.perf_counter()
    with ServeClient(url, token=token, stream_id=stream_id) as c:
        opened = c.open(
            model, sample_rate=sample_rate, channels=channels, alarms=alarms, overflow=overflow
        )
        result = StreamResult(opened)

        def take(evs):
            for ev in evs:
                result.events.append(ev)
                if on_event is not None:
                    on_event(ev)

        for block in blocks:
            (c.send_json if json_blocks else c.send)(block)
            result.blocks += 1
            result.seconds += len(block) / sample_rate
            take(c.drain())
        take(c.close())
        result.closed = c.closed
    result.wall_s = time.perf_counter() - t0
    return result


def stream_wav(
    url: str,
    path: str | os.PathLike,
    *,
    model: str | None = None,
    block_ms: float = 100.0,
    realtime: bool = False,
    **kw,
) -> StreamResult:
    """Stream a WAV file (mono, channel 0) to a keyword-spotting model (default: the
    server's first), paced to real time or as fast as the server takes it."""
    from liquid_stream.apps.common.audio import WavSource

    src = WavSource(path, block_ms=block_ms, realtime=realtime)
    kw.setdefault("overflow", "drop" if realtime else "wait")
    return stream_blocks(url, src.blocks(), model=model or "kws", sample_rate=src.rate, **kw)


def stream_record(
    url: str,
    record: str | Path,
    *,
    model: str | None = None,
    block_s: float = 1.0,
    speed: float | None = None,
    **kw,
) -> StreamResult:
    """Stream a WFDB record (all its channels; the server's models pick theirs) to a
    vital-sign model (default: the server's best fit for the record's channels), in
    ``block_s`` blocks, paced at ``speed`` times real time (None: as fast as it goes)."""
    from liquid_stream.apps.vitals.record import RecordSource

    src = RecordSource(record)
    kw.setdefault("overflow", "drop" if speed else "wait")
    return stream_blocks(
        url,
        src.chunks(speed, block_s),
        model=model or "vitals",
        sample_rate=src.fs,
        channels=src.channels,
        **kw,
    )
