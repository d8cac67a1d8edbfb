"""The stream protocol: a connection's messages (open, binary or text blocks, close), a
stream's inbox bound and outbox back-pressure, its end (:class:`ProtocolMixin` of
:class:`~.server.StreamServer`; docs/serving.md)."""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import math
import socket
import time
from collections import deque
from urllib.parse import parse_qs, urlsplit

import numpy as np

from liquid_stream.apps.serve.state import StreamView, json_safe

from .defaults import FRAMINGS, ID_RE, MAX_MESSAGE
from .hosts import HostedModel, needed_rate

# ---------------------------------------------------------------------------- streams


class _Stream:
    """One open stream: its connection, inbox of blocks, outbox of messages, view."""

    def __init__(
        self,
        sid: str,
        host: HostedModel,
        conn,
        columns: int,
        rate: float,
        overflow: str,
        view: StreamView,
    ):
        self.id, self.host, self.conn = sid, host, conn
        self.columns, self.rate, self.overflow, self.view = columns, rate, overflow, view
        self.inbox: deque[tuple[float, np.ndarray | int]] = deque()  # (arrival, block | gap T)
        self.queued_blocks = 0
        self.queued_samples = 0
        self.room = asyncio.Event()  # set while the inbox has room ("wait" mode)
        self.room.set()
        self.outbox: deque[tuple[str, str | None]] = deque()  # (type, JSON text | None = end)
        self.out_ready = asyncio.Event()
        self.new_drops = [0, 0]  # blocks, samples not yet reported
        self.last_latency = 0.0
        self.open = True
        self.listener = None  # called with every event of the stream (a source's owner)
        self.scores = True  # send the kws scores events (false: detections only)
        self.framing = "raw"  # binary frames: "counted" (a uint32 channel count first) or not
        self.bound: tuple[np.ndarray, np.ndarray] | None = None  # vitals: (lo, hi) per column
        self.names: list[str] = []  # the columns' channel names
        # bulk: a client's file sent as fast as it goes (overflow "wait"; a server-side
        # source such as an LSL bed waits too but is live): stepped in bounded shares
        self.bulk = overflow == "wait" and conn is not None
        self.drained: asyncio.Event | None = None  # set once a closing bulk stream's inbox ran

    def __hash__(self) -> int:
        return id(self)


class ProtocolMixin:
    """Connections and their streams (the methods of :class:`~.server.StreamServer` that
    speak the protocol)."""

    async def _handle(self, conn) -> None:
        """One connection: the open, then blocks and ops until it closes or is lost."""
        from websockets.exceptions import ConnectionClosed

        if self.send_buffer:
            sock = conn.transport.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, int(self.send_buffer))
        query = parse_qs(urlsplit(conn.request.path).query)
        authed = self._token_ok(conn.request, query) is True
        stream: _Stream | None = None
        sender: asyncio.Task | None = None
        graceful = False
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.open_timeout_s
        try:
            while stream is None:  # the open, within open_timeout_s of connecting
                try:
                    msg = await asyncio.wait_for(conn.recv(), max(0.0, deadline - loop.time()))
                except TimeoutError:
                    why = f"no stream opened within {self.open_timeout_s:g} s of connecting"
                    await self._send_now(conn, {"type": "error", "message": f"{why}; closing"})
                    await conn.close(1008, why)
                    return
                stream, fatal = await self._open(conn, msg, query, authed)
                if fatal:
                    await conn.close(1008, fatal)
                    return
                if stream is not None:
                    sender = asyncio.create_task(self._sender(stream))
            async for msg in conn:
                if isinstance(msg, bytes):
                    block = self._binary_block(stream, msg)
                else:
                    block, graceful = self._text(stream, msg)
                    if graceful:
                        break
                if block is not None:
                    self._receive(stream, block)
                    if stream.overflow == "wait" and not stream.room.is_set():
                        await stream.room.wait()  # TCP pushes back on this client only
        except ConnectionClosed:
            pass
        finally:
            if stream is not None:
                await self._end(stream, graceful, sender)

    async def _send_now(self, conn, ev: dict) -> None:
        from websockets.exceptions import ConnectionClosed

        with contextlib.suppress(ConnectionClosed):
            await conn.send(json.dumps(json_safe(ev)))

    async def _open(self, conn, msg, query: dict, authed: bool):
        """Handle the first message; returns (stream or None, fatal close reason or None)."""
        try:
            req = json.loads(msg) if isinstance(msg, str) else None
        except json.JSONDecodeError:
            req = None
        if not isinstance(req, dict) or req.get("op") != "open":
            await self._send_now(
                conn,
                {"type": "error", "message": 'open the stream first: {"op": "open", "model": ...}'},
            )
            return None, None
        if self.token and not authed:
            given = req.get("token")
            if not (
                isinstance(given, str) and hmac.compare_digest(given.encode(), self.token.encode())
            ):
                await self._send_now(
                    conn, {"type": "error", "message": "unauthorized: wrong or missing token"}
                )
                return None, "unauthorized"
        try:
            host, sid, kwargs, columns, rate, overflow = self._open_request(req, query)
        except ValueError as e:
            await self._send_now(conn, {"type": "error", "message": str(e)})
            return None, None
        framing = req.get("framing", "counted" if host.task == "vitals" else "raw")
        self._reserved.add(sid)
        host.opening += 1
        try:
            info = await asyncio.get_running_loop().run_in_executor(
                host.executor, lambda: host.bank.open(sid, **kwargs)
            )
        except ValueError as e:
            await self._send_now(conn, {"type": "error", "message": str(e)})
            return None, None
        finally:
            self._reserved.discard(sid)
            host.opening -= 1
        view = StreamView(sid, host.task, host.name, rate, stale_s=self.stale_s)
        view.configure(info, getattr(host.bank, "models", ()))  # windows, alarm limits
        stream = _Stream(sid, host, conn, columns, rate, overflow, view)
        stream.scores = req.get("scores", True)
        stream.framing = framing
        self._set_bound(stream, kwargs.get("channels"))
        self.streams[sid] = stream
        host.streams[sid] = stream
        host.live += not stream.bulk
        self.views.pop(sid, None)
        self.views[sid] = view
        self._state_cache = None  # a stream more: /api/state shows it at once
        await self._send_now(
            conn,
            {
                "type": "opened",
                "id": sid,
                "model": host.name,
                "task": host.task,
                "channels": kwargs.get("channels", ["audio"]),
                "columns": columns,
                "sample_rate": rate,
                "overflow": overflow,
                "framing": framing,
                "info": info,
                "limits": {
                    "queue_blocks": self.queue_blocks,
                    "queue_s": self.queue_s,
                    "max_message_bytes": MAX_MESSAGE,
                },
            },
        )
        return stream, None

    def _open_request(self, req: dict, query: dict):
        """Check an open request; (host, id, bank.open kwargs, columns, rate, overflow)."""
        unknown = set(req) - {
            "op",
            "model",
            "sample_rate",
            "channels",
            "alarms",
            "id",
            "token",
            "overflow",
            "scores",
            "framing",
        }
        if unknown:
            raise ValueError(f"unknown open field(s): {', '.join(sorted(unknown))}")
        channels = req.get("channels")
        if channels is not None and (
            not isinstance(channels, list) or not all(isinstance(c, str) for c in channels)
        ):
            raise ValueError(f"channels must be a list of names, got {channels!r}")
        host = self._pick_host(req.get("model"), channels)
        qid = (query.get("id") or [None])[0]
        sid = req.get("id", qid)
        if qid is not None and sid != qid:
            raise ValueError(f"the open's id {sid!r} differs from the URL's id {qid!r}")
        if sid is None:
            sid = f"s{next(self._ids)}"
            while sid in self.streams or sid in self._reserved:
                sid = f"s{next(self._ids)}"
        if not isinstance(sid, str) or not ID_RE.match(sid):
            raise ValueError(
                f"stream id must be 1-64 characters A-Z a-z 0-9 . _ : @ + - (not starting "
                f"with a sign), got {sid!r}"
            )
        if sid in self.streams or sid in self._reserved:
            raise ValueError(f"stream {sid!r} is already open")
        if len(self.streams) + len(self._reserved) >= self.max_streams:
            raise ValueError(f"server full: {self.max_streams} streams open; try later")
        if not isinstance(req.get("scores", True), bool):
            raise ValueError(f"scores must be true or false, got {req['scores']!r}")
        overflow = req.get("overflow", "drop")
        if overflow not in ("drop", "wait"):
            raise ValueError(f'overflow must be "drop" or "wait", got {overflow!r}')
        if req.get("framing", "raw") not in FRAMINGS:
            raise ValueError(f'framing must be "counted" or "raw", got {req["framing"]!r}')
        rate = req.get("sample_rate", host.sample_rate)
        if (
            isinstance(rate, bool)
            or not isinstance(rate, (int, float))
            or not rate > 0
            or not math.isfinite(rate)
        ):
            raise ValueError(f"sample_rate must be a positive number of Hz, got {rate!r}")
        alarms = req.get("alarms")
        if host.task == "kws":
            if channels is not None and len(channels) != 1:
                raise ValueError(f"a keyword stream is mono: 1 channel, got {len(channels)}")
            if alarms:
                raise ValueError("alarms are for vitals streams")
            return self._shard(host), sid, {"sample_rate": rate}, 1, float(rate), overflow
        if not channels:
            raise ValueError(
                f"give the stream's channels (model {host.name} reads {', '.join(host.channels)})"
            )
        if alarms is not None and not isinstance(alarms, str):
            raise ValueError(f'alarms must be a string like "hr>120,spo2<90", got {alarms!r}')
        self._check_vitals_rate(host, channels, float(rate))
        kwargs = {"channels": channels, "sample_rate": rate, "alarms": alarms}
        return self._shard(host), sid, kwargs, len(channels), float(rate), overflow

    def _shard(self, host: HostedModel) -> HostedModel:
        """The bank of ``host``'s model that takes a new stream: the one with fewest."""
        return min(self.shards[host.name], key=lambda h: len(h.streams) + h.opening)

    @staticmethod
    def _used_models(host: HostedModel, channels: list[str]) -> list[int]:
        """The indices of ``host``'s models whose channels the stream has (those it runs)."""
        from liquid_stream.io.bidmc_vocab import strip_name

        have = {strip_name(c) for c in channels if isinstance(c, str)}
        return [i for i, need in enumerate(host.needs) if set(need) <= have]

    def _check_vitals_rate(self, host: HostedModel, channels: list[str], rate: float) -> None:
        """Refuse a vitals stream whose rate cannot carry a channel its models read
        (:func:`needed_rate`, at most the models' own rate)."""
        used = self._used_models(host, channels)
        read = list(dict.fromkeys(c for i in used for c in host.needs[i]))
        if not read:
            return  # no model fits: the bank refuses the open, naming the channels
        need = {c: min(needed_rate(c), host.sample_rate) for c in read}
        worst = max(read, key=lambda c: need[c])
        if rate < need[worst] - 1e-9:
            raise ValueError(
                f"sample_rate {rate:g} Hz is too low for {host.name}: its {worst} channel "
                f"needs at least {need[worst]:g} Hz (twice the top of the band the monitor "
                f"reads in it; the models run at {host.sample_rate:g} Hz)"
            )

    def _set_bound(self, s: _Stream, channels: list[str] | None) -> None:
        """A vitals stream's accepted range per column: within the input bound of every
        model it runs that reads that channel (:mod:`liquid_stream.runtime.validate`)."""
        if s.host.task != "vitals" or not channels:
            return
        from liquid_stream.io.bidmc_vocab import strip_name

        s.names = [strip_name(c) for c in channels]
        lo = np.full(len(channels), -np.inf)
        hi = np.full(len(channels), np.inf)
        models = s.host.bank.models
        for i in self._used_models(s.host, channels):
            m = models[i]
            center = np.broadcast_to(
                np.asarray(m.streamer.input_center, np.float64).reshape(-1), (len(m.channels),)
            )
            half = np.broadcast_to(
                np.asarray(m.streamer.input_half_width, np.float64).reshape(-1), (len(m.channels),)
            )
            for j, c in enumerate(m.channels):
                k = s.names.index(c)
                lo[k] = max(lo[k], center[j] - half[j])
                hi[k] = min(hi[k], center[j] + half[j])
        s.bound = (lo, hi)

    def _pick_host(self, model, channels) -> HostedModel:
        if model is not None and not isinstance(model, str):
            raise ValueError(f"model must be a name, got {model!r}")
        if model in self.hosts:
            return self.hosts[model]
        task = model or ("vitals" if channels and channels != ["audio"] else "kws")
        if task not in ("kws", "vitals"):
            raise ValueError(f"no model {model!r} here (models: {', '.join(self.hosts)})")
        hosts = [h for h in self.hosts.values() if h.task == task]
        if not hosts:
            raise ValueError(f"no {task} model here (models: {', '.join(self.hosts)})")
        if task == "vitals" and channels:
            best = max(hosts, key=lambda h: h.fits(channels))  # first of the best fit
            if best.fits(channels)[0]:
                return best
        return hosts[0]

    def _binary_block(self, s: _Stream, msg: bytes) -> np.ndarray | None:
        size = 4 * s.columns
        if s.framing == "counted":
            got = int.from_bytes(msg[:4], "little") if len(msg) >= 4 else None
            if got != s.columns:
                what = "no channel count" if got is None else f"a count of {got} channels"
                self._error(
                    s,
                    f"binary block has {what}, the stream has {s.columns} "
                    f"({', '.join(s.names) or 'audio'}): each frame starts with its channel "
                    "count (uint32 little-endian), then the float32 rows; block refused",
                )
                return None
            msg = memoryview(msg)[4:]
        if len(msg) % size:
            self._error(
                s,
                f"binary block of {len(msg)} bytes is not whole rows of {s.columns} "
                "float32 samples; block refused",
            )
            return None
        return np.frombuffer(msg, "<f4").reshape(-1, s.columns)

    def _text(self, s: _Stream, msg: str) -> tuple[np.ndarray | None, bool]:
        """A text message: (block or None, True when it closes the stream)."""
        try:
            req = json.loads(msg)
        except json.JSONDecodeError as e:
            self._error(s, f"message is not JSON ({e.msg})")
            return None, False
        op = req.get("op") if isinstance(req, dict) else None
        if op == "close":
            return None, True
        if op == "samples":
            try:
                x = np.array(req.get("data"), dtype=np.float64)
            except (TypeError, ValueError):
                self._error(s, "samples data must be numbers (null for a missing sample)")
                return None, False
            if x.ndim == 1 and s.columns == 1:
                x = x[:, None]
            if x.ndim != 2 or x.shape[1] != s.columns:
                self._error(
                    s,
                    f"samples data must be (T, {s.columns}) rows, got shape "
                    f"{x.shape}; block refused",
                )
                return None, False
            return x, False
        if op == "open":
            self._error(s, f"stream {s.id!r} is already open on this connection")
        else:
            self._error(s, f'unknown op {op!r} (ops: "samples", "close")')
        return None, False

    def _error(self, s: _Stream, message: str) -> None:
        self._post(s, {"type": "error", "message": message})

    def _receive(self, s: _Stream, block: np.ndarray) -> None:
        """Queue a block in the stream's inbox, or drop it when the inbox is full."""
        n = len(block)
        s.view.seen(n)
        if n == 0:
            return
        if n > self.queue_s * s.rate:
            self._error(
                s,
                f"block of {n} samples is longer than {self.queue_s:g} s; "
                "send shorter blocks; block refused",
            )
            return
        if s.bound is not None:
            block = self._out_of_range_as_gaps(s, block)
        host = s.host
        full = s.queued_blocks >= self.queue_blocks or (
            s.queued_samples + n > self.queue_s * s.rate
        )
        if full and s.overflow == "drop":
            s.view.dropped_blocks += 1
            s.view.dropped_samples += n
            s.new_drops[0] += 1
            s.new_drops[1] += n
            if host.task == "vitals":  # keep the bed's time: the dropped samples are a gap
                if s.inbox and isinstance(s.inbox[-1][1], int):
                    s.inbox[-1] = (s.inbox[-1][0], s.inbox[-1][1] + n)
                else:
                    s.inbox.append((time.monotonic(), n))
                self._mark_pending(s)
            return
        s.inbox.append((time.monotonic(), block))
        s.queued_blocks += 1
        s.queued_samples += n
        if s.queued_blocks >= self.queue_blocks or s.queued_samples >= self.queue_s * s.rate:
            s.room.clear()
        self._mark_pending(s)

    def _out_of_range_as_gaps(self, s: _Stream, block: np.ndarray) -> np.ndarray:
        """A vitals block with each finite sample beyond its column's bound made NaN (a
        gap for the monitor, as ``vitals --record`` does), the client told once."""
        lo, hi = s.bound
        with np.errstate(invalid="ignore"):
            bad = (block < lo) | (block > hi)  # NaN compares False; ±inf is a gap already
        bad &= np.isfinite(block)
        if not bad.any():
            return block
        t, c = (int(i) for i in np.argwhere(bad)[0])
        at = (s.view.received_samples - len(block) + t) / s.rate
        count = int(bad.sum())
        self._error(
            s,
            f"{s.names[c]} sample value {float(block[t, c]):.4g} at {at:.3f} s is outside the "
            f"accepted range {lo[c]:.4g} … {hi[c]:.4g} of the models' input (a corrupt value): "
            f"{count} sample(s) of this block made a gap, the rest used",
        )
        return np.where(bad, np.nan, block)

    def _mark_pending(self, s: _Stream) -> None:
        """The stream has input waiting: the batcher is woken when that changes what it
        would do (a first live stream waiting, every live stream waiting, a bulk stream
        waiting), not for every block."""
        host = s.host
        if s.bulk:
            if s not in host.bulk:
                host.bulk[s] = None
                host.wake.set()
            return
        if s not in host.pending:
            host.pending[s] = None
            if len(host.pending) == 1 or len(host.pending) >= host.live:
                host.wake.set()

    def _post(self, s: _Stream, ev: dict) -> None:
        """Queue an event for the stream's client (bounded: module docstring)."""
        kind = ev.get("type", "")
        s.view.on_event(ev)
        if s.listener is not None:
            s.listener(ev)
        if (not s.open and kind != "closed") or (kind == "scores" and not s.scores):
            return
        if len(s.outbox) >= self.out_queue:
            for i, (k, _) in enumerate(s.outbox):
                if k == "scores":
                    del s.outbox[i]
                    s.view.dropped_events += 1
                    break
            else:
                if kind == "scores":
                    s.view.dropped_events += 1
                    return
                if len(s.outbox) >= self.out_hard:
                    s.view.dropped_events += 1
                    if s.open:
                        s.open = False
                        asyncio.create_task(
                            s.conn.close(
                                1008, f"client not reading: {len(s.outbox)} messages unsent"
                            )
                        )
                    return
        s.outbox.append((kind, json.dumps(json_safe(ev))))
        s.out_ready.set()

    async def _sender(self, s: _Stream) -> None:
        """Write the stream's outbox to its connection, in order, until the end mark."""
        from websockets.exceptions import ConnectionClosed

        try:
            while True:
                while not s.outbox:
                    s.out_ready.clear()
                    await s.out_ready.wait()
                _, text = s.outbox.popleft()
                if text is None:
                    return
                await s.conn.send(text)
        except ConnectionClosed:
            s.open = False

    async def _end(self, s: _Stream, graceful: bool, sender: asyncio.Task | None) -> None:
        """The stream ends: its waiting blocks and ``bank.close`` run (in order after any
        step in flight); a client that asked to close gets the last events and
        ``closed``; the bank, the counts and the dashboard forget or mark it."""
        host = s.host
        if s.bulk and s.inbox and s.id in host.streams:
            # a bulk stream's waiting input runs in bounded shares of the batcher's steps
            # first (not all of it in one worker call that opens and steps would wait
            # behind); then its close is one short call
            s.drained = asyncio.Event()
            self._mark_pending(s)
            while s.inbox and self._batching(host):
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(s.drained.wait(), 1.0)
        host.pending.pop(s, None)
        host.bulk.pop(s, None)
        if host.streams.pop(s.id, None) is not None and not s.bulk:
            host.live -= 1
        if host.pending and len(host.pending) >= host.live:
            host.wake.set()
        blocks = list(s.inbox)
        s.inbox.clear()
        s.room.set()
        if not graceful:
            s.open = False
        loop = asyncio.get_running_loop()
        try:
            errors, events = await loop.run_in_executor(
                host.executor, self._close_in_worker, s, blocks
            )
        finally:
            self.streams.pop(s.id, None)
            s.view.close()
            self._state_cache = None
        for msg in errors:
            self._error(s, msg)
        for ev in events:
            self._post(s, ev)
        if s.new_drops[0]:
            self._notice_drops(s)
        if graceful and s.open:
            self._post(s, {"type": "closed", "id": s.id, "stats": s.view.health()})
            s.outbox.append(("end", None))
            s.out_ready.set()
            if sender is not None:
                with contextlib.suppress(asyncio.TimeoutError, Exception):
                    await asyncio.wait_for(asyncio.shield(sender), 30)
            with contextlib.suppress(Exception):
                await s.conn.close()
        s.open = False
        if sender is not None and not sender.done():
            sender.cancel()

    def _close_in_worker(self, s: _Stream, blocks) -> tuple[list[str], list[dict]]:
        errors = self._push_blocks(s, blocks)
        try:
            events = s.host.bank.close(s.id)
        except ValueError as e:
            errors.append(str(e))
            events = []
        return errors, events

    def _push_blocks(self, s: _Stream, blocks) -> list[str]:
        """In the worker: push a stream's waiting blocks (a gap as NaN rows); the refusals."""
        errors = []
        for _, block in blocks:
            if isinstance(block, int):
                block = np.full((block, s.columns), np.nan)
            try:
                s.host.bank.push(s.id, block)
            except ValueError as e:
                errors.append(f"{e}")
        return errors
