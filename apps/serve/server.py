"""``liquid-stream serve``: many live streams over WebSocket, each model's streams
micro-batched into one onnxruntime call per step (asyncio; no torch).

    server = StreamServer(default_hosts(), port=8765)      # kws-sc10 + the shipped vitals
    asyncio.run(server.run())                               # until cancelled
    with ServerThread(StreamServer(hosts, port=0)) as srv:  # or in a background thread
        print(srv.url)                                      # ws://127.0.0.1:PORT/stream

**Hosted models.** Each :class:`HostedModel` is a named bank of
:mod:`liquid_stream.apps.batch`: a :class:`~liquid_stream.apps.batch.kws.KwsBank` (one keyword
spotter) or a :class:`~liquid_stream.apps.batch.vitals.VitalsBank` (one set of 1..3 vital-sign
models, one per target).
Its streams are stepped together, on its own worker thread (every call into a bank runs
there, so a bank is never used by two threads, and onnxruntime runs while the event loop
goes on receiving). Several hosted models of one name (``workers``) are banks that
share its streams (a new stream goes to the bank with fewest) and step in parallel
threads: onnxruntime releases the GIL, so a model can use more than one core.

**Protocol** (``ws://HOST:PORT/stream``; docs/serving.md has it in full). One stream per
connection. The client sends a JSON text message ``{"op": "open", "model": NAME,
"sample_rate": Hz, "channels": [...], "alarms": "hr>120", "id": "bed-3", "token": ...,
"overflow": "drop"|"wait", "framing": "counted"|"raw"}`` and gets ``{"type": "opened",
"id", "model", "task", "info", ...}`` or ``{"type": "error", "message"}``; a connection
that has opened no stream ``open_timeout_s`` (10 s) after it connected is told so and
closed (code 1008), so idle sockets cannot pile up. Then sample blocks: binary frames of
float32 little-endian ``(T, C)`` samples (row-major, any T), or ``{"op": "samples",
"data": [[...], ...]}`` (float64, ``null`` for a missing sample; its shape is checked).
With ``"framing": "counted"`` (the default of a vitals stream, and what
:class:`~.client.ServeClient` asks for) each binary frame starts with its channel
count C as a uint32 little-endian: a block of the wrong channels is refused even when its
size happens to be whole rows of the stream's C (a frame cannot say its shape otherwise);
``"raw"`` (the default of a keyword stream, whose one channel is mono audio) sends the
samples alone. A vitals stream's ``sample_rate`` must carry what its models read: at least
twice the top of the band of each channel (:func:`needed_rate`: PPG 16 Hz, RESP 4 Hz, an
ECG lead 60 Hz), or the open is refused with that reason. And finally
``{"op": "close"}``, answered by the stream's last events and ``{"type": "closed",
"stats"}``. The server sends the bank's events as JSON text messages, one per message:
``estimate``, ``detection``, ``scores``, ``error``, plus ``dropped`` (input blocks the
server dropped). Model ``"kws"`` / ``"vitals"`` (or none) picks the first hosted model of
that task (for vitals the first whose channels the stream has).

**Scheduling.** A received block goes into its stream's inbox. Per hosted model a batcher
task steps the bank when every open stream of it has input waiting or when the oldest
waiting block has waited ``budget_ms``, whichever is first: in the worker thread it
pushes every waiting block (``bank.push``; a refused block is an ``error`` event for its
stream only, nothing changed) and runs ``bank.step()``; then it routes the events to
their streams' outboxes, from which one sender task per connection writes them.
That rule is the live streams'. Bulk streams (opened with ``"overflow": "wait"`` by a
client: a file sent as fast as it goes) run in steps of their own between the live ones,
each bounded to about ``bulk_ms`` of model time (whole blocks, at least one) and, while
live streams are open, paced to ``bulk_share`` of one core; opens and closes run between
steps, so none waits behind seconds of bulk input (docs/serving.md §4).

**Back-pressure and faults.**

- Input: a stream's inbox holds at most ``queue_blocks`` blocks and ``queue_s`` seconds.
  With ``"overflow": "drop"`` (the default: a live source) a block arriving at a full
  inbox is dropped and counted; the client is told (``{"type": "dropped", "blocks",
  "samples", "total_blocks"}``); for a vitals stream the dropped samples become a NaN
  gap of the same length (the monitor's gap rules bridge or reset it), so the stream's
  time stays the bed's time. With ``"overflow": "wait"`` (a file sent as fast as it goes)
  the server stops reading that connection until its inbox has room: TCP pushes back
  on the client, nothing is lost, no other stream waits.
- Output: a stream's outbox holds ``out_queue`` messages; past that the oldest
  ``scores`` message is dropped (counted, ``dropped_events``), never an estimate,
  detection, error or notice. A client that reads nothing at all is disconnected (close
  code 1008) once ``out_hard`` messages wait.
- A client that vanishes (socket closed, process killed) ends its stream: the bank
  forgets it (``bank.close``), the stream count drops; the others go on. A malformed
  message or block is an ``error`` for that stream only, which stays open.
- A finite sample of a vitals stream beyond its models' input bound (a corrupt value:
  :mod:`liquid_stream.runtime.validate`) is made a NaN, i.e. a gap the monitor's gap rules
  bridge or reset, as ``vitals --record`` does; the rest of the block is used and the
  client gets one ``error`` event per such block (channel, value, stream time, count).
  Before, the bank refused the whole block (a second of every channel lost for one
  sample).
- ``max_streams`` caps the open streams (and each bank its own): the ``open`` is refused
  with ``server full``. A ``token`` (required when listening beyond the loopback
  interface) must come with the handshake (``Authorization: Bearer T`` or ``?token=T``)
  or in the ``open`` message; the dashboard's ``/api/state`` needs it too
  (header, query, or the cookie set by ``GET /?token=T``).

**HTTP** on the same port: ``GET /`` the dashboard (``apps/serve/web/index.html``), ``GET
/web/<file>`` its files, ``GET /api/state`` the JSON of :mod:`.state`. There a
connected stream whose client has sent no samples for more than ``stale_s`` (5 s), with
none of its blocks waiting here, is marked ``"stale": true`` (no data): no valid vital, its
clinical alarms replaced by the technical alarm "no data for more than 5 s", until its
next block.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import email.utils
import hmac
import ipaddress
import itertools
import json
import logging
import math
import re
import socket
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http import HTTPStatus
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import numpy as np

from liquid_stream.apps.serve.state import (
    DEFAULT_STALE_S,
    WEB_DIR,
    StreamView,
    json_safe,
    static_file,
)

DEFAULT_PORT = 8765
DEFAULT_BUDGET_MS = 20.0
DEFAULT_QUEUE_BLOCKS = 256
DEFAULT_QUEUE_S = 10.0
DEFAULT_OUT_QUEUE = 256
DEFAULT_OUT_HARD = 8192
DEFAULT_MAX_BATCH = 256  # streams per step (more wait for the next, at once)
DEFAULT_BULK_MS = 10.0  # model time (CPU ms) one step of bulk streams may take, estimated
DEFAULT_BULK_SHARE = 0.5  # of one core bulk steps (all banks) take while live streams are open
MAX_MESSAGE = 1 << 22  # bytes of one WebSocket message
DEFAULT_OPEN_TIMEOUT_S = 10.0  # a connection must open a stream within this
DEFAULT_PING_S = 20.0  # WebSocket keepalive: ping interval, and how long a pong may take
FRAMINGS = ("counted", "raw")
QRS_TOP_HZ = 30.0  # top of the QRS band signal_quality tests on an ECG lead (5-30 Hz)
KEEP_CLOSED = 200  # closed streams kept on the dashboard (connected: false)
KEEP_CLOSED_S = 300.0
STATE_EVERY_S = 0.2  # /api/state is rebuilt at most this often
ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@+-]{0,63}$")
COOKIE = "ls_token"
log = logging.getLogger("liquid_stream.serve")


class ServeError(ValueError):
    """A server setting that cannot be used (message says what and why)."""


@dataclass
class HostedModel:
    """One named bank the server hosts.

    ``task`` is ``"kws"`` or ``"vitals"``; ``channels`` the input channels a stream of
    it may send (vitals: every channel one of its models reads; kws: ``["audio"]``);
    ``needs`` (vitals) the channels of each model; ``sample_rate`` the models' rate."""

    name: str
    task: str
    bank: object
    paths: list[Path]
    sample_rate: float
    channels: list[str]
    needs: list[list[str]] = field(default_factory=list)

    def __post_init__(self):
        self.executor = ThreadPoolExecutor(1, thread_name_prefix=f"bank-{self.name}")
        self.streams: dict[str, _Stream] = {}  # open streams of this bank
        self.pending: dict[_Stream, None] = {}  # live streams with input waiting (ordered set)
        self.bulk: dict[_Stream, None] = {}  # bulk streams with input waiting (round robin)
        self.live = 0  # open live streams of this bank (the others are bulk)
        self.wake = asyncio.Event()  # the batcher has something new to decide on
        self.bulk_cost = 0.0  # CPU s of a bulk step per input s (running mean; 0: unknown)
        self.stats = _HostStats()
        self.opening = 0  # streams being opened on this bank

    def describe(self) -> dict:
        """What ``/api/state`` and the open reply say about this model."""
        return {
            "name": self.name,
            "task": self.task,
            "files": [p.name for p in self.paths],
            "sample_rate": self.sample_rate,
            "channels": list(self.channels),
            "streams": len(self.streams),
        }

    def fits(self, channels: list[str]) -> tuple[int, int]:
        """How well a stream with ``channels`` fits (vitals): (2 every model of the set
        runs, 1 some do, 0 none; then the number of the stream's channels they read)."""
        have = {c.upper().rstrip(",").strip() for c in channels}
        ok = [set(c.upper() for c in need) <= have for need in self.needs]
        used = {c.upper() for need, fit in zip(self.needs, ok, strict=True) if fit for c in need}
        return (2 if ok and all(ok) else int(any(ok))), len(used)


class _HostStats:
    """Timing of one bank's steps: where the time goes (``/api/state`` server.hosts)."""

    def __init__(self):
        self.steps = 0
        self.blocks = 0
        self.bulk_steps = 0  # steps of bulk streams (overflow "wait"), counted in steps too
        self.bulk_s = 0.0  # input seconds those steps carried
        self.bulk_cpu_s = 0.0  # CPU seconds (push + step) they took
        self.push_s = 0.0  # CPU seconds (thread time) of pushing input into the bank
        self.step_s = 0.0  # of bank.step (session calls + per-stream python)
        self.route_s = 0.0  # of routing the events (JSON encoding included), loop thread
        self.step_wall_s = 0.0
        self.latency = deque(maxlen=4096)  # live blocks: s from arrival to events routed
        self.batch = deque(maxlen=256)  # streams per step

    def to_json(self) -> dict:
        lat = np.array(self.latency) * 1000 if self.latency else np.zeros(1)
        n = max(1, self.steps)
        return {
            "steps": self.steps,
            "blocks": self.blocks,
            "bulk": {
                "steps": self.bulk_steps,
                "input_s": self.bulk_s,
                "cpu_s": self.bulk_cpu_s,
                "cpu_ms_per_step": 1000 * self.bulk_cpu_s / max(1, self.bulk_steps),
            },
            "cpu_s": {"push": self.push_s, "step": self.step_s, "route": self.route_s},
            "push_ms_per_step": 1000 * self.push_s / n,
            "step_ms_per_step": 1000 * self.step_s / n,
            "step_wall_ms_per_step": 1000 * self.step_wall_s / n,
            "route_ms_per_step": 1000 * self.route_s / n,
            "streams_per_step": float(np.mean(self.batch)) if self.batch else 0.0,
            "block_latency_ms": {
                "p50": float(np.percentile(lat, 50)),
                "p95": float(np.percentile(lat, 95)),
                "max": float(lat.max()),
            },
        }


# ------------------------------------------------------------------------------ hosts


def kws_host(
    path: str | Path,
    name: str | None = None,
    threads: int = 1,
    max_streams: int = 256,
    threshold: float | None = None,
) -> HostedModel:
    """Host the keyword spotter ``path`` as ``name`` (default: the file's stem)."""
    from liquid_stream.apps.batch import KwsBank

    path = Path(path)
    bank = KwsBank(path, threshold=threshold, threads=threads, max_streams=max_streams)
    return HostedModel(name or path.stem, "kws", bank, [path], float(bank.sample_rate), ["audio"])


def vitals_host(name: str, paths, threads: int = 1, max_streams: int = 2048) -> HostedModel:
    """Host the vital-sign model set ``paths`` (1..3 models, one per target) as ``name``."""
    from liquid_stream.apps.batch import VitalsBank

    paths = [Path(p) for p in paths]
    bank = VitalsBank(paths, threads=threads, max_streams=max_streams)
    needs = [list(m.channels) for m in bank.models]
    channels = list(dict.fromkeys(c for n in needs for c in n))
    return HostedModel(name, "vitals", bank, paths, float(bank.sample_rate), channels, needs)


def default_hosts(threads: int = 1, max_streams: int = 2048, workers: int = 1) -> list[HostedModel]:
    """The shipped models: the spotter ``kws-sc10`` and each shipped vital-sign set
    (``vitals-ppg-ecg``, ``vitals-ppg``; :data:`liquid_stream.models.VITALS_TARGETS`),
    ``workers`` banks each."""
    from liquid_stream.models import KWS, VITALS_TARGETS, available, shipped

    have = set(available())
    hosts = []
    for _ in range(workers):
        if KWS in have:
            hosts.append(kws_host(shipped(KWS), KWS, threads, min(max_streams, 1024)))
        for name, targets in VITALS_TARGETS.items():
            if all(t in have for t in targets):
                paths = [shipped(t) for t in targets]
                hosts.append(vitals_host(f"vitals-{name}", paths, threads, max_streams))
    if not hosts:
        raise ServeError("no shipped models installed: give --kws / --vitals")
    return hosts


def parse_kws_spec(spec: str) -> tuple[Path, str | None]:
    """``PATH[=NAME]`` (or a shipped model's name) -> (path, name)."""
    path, _, name = spec.partition("=")
    return _model_path(path), (name or None)


def parse_vitals_spec(spec: str) -> tuple[str, list[Path]]:
    """``NAME=PATH,PATH,...`` (a path may be a shipped model's name) -> (name, paths)."""
    name, sep, rest = spec.partition("=")
    if not sep or not name or not rest:
        raise ServeError(f"--vitals takes NAME=MODEL,MODEL,..., got {spec!r}")
    return name, [_model_path(p) for p in rest.split(",") if p]


def _model_path(spec: str) -> Path:
    from liquid_stream.models import available, shipped

    p = Path(spec)
    if p.is_file():
        return p
    if spec in available():
        return shipped(spec)
    raise ServeError(
        f"model {spec!r} is neither a file nor a shipped model ({', '.join(available())})"
    )


def needed_rate(channel: str) -> float:
    """The lowest sampling rate in Hz at which ``channel`` still carries what the vitals
    monitor reads in it: twice the top of the band its signal-quality judge tests
    (:mod:`.signal_quality`: a PPG's pulse band 0.5-8 Hz -> 16 Hz, RESP 0.05-2 Hz -> 4 Hz,
    an ECG lead's QRS band 5-30 Hz -> 60 Hz). Below it the pulse, the breaths or the QRS
    complexes are aliased away and the models would read noise as a signal."""
    from liquid_stream.apps.vitals.signal_quality import channel_kind

    kind = channel_kind(channel)
    return 2.0 * (QRS_TOP_HZ if kind.spiky else kind.band_hz[1])


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


class StreamServer:
    """The WebSocket + HTTP server of the module docstring.

    Args:
        hosts: the hosted models (:func:`default_hosts`, :func:`kws_host`,
            :func:`vitals_host`); names must differ.
        host, port: where to listen (port 0: a free one, see :attr:`port`).
        token: shared secret clients must give; required unless ``host`` is loopback.
        max_streams: most open streams over all models.
        budget_ms: longest a waiting block waits for its step to start.
        queue_blocks, queue_s: a stream's inbox bound (blocks, and seconds of input).
        out_queue: a stream's outbox bound before ``scores`` messages are dropped;
            ``out_hard``: the bound past which a non-reading client is disconnected.
        web_dir: the dashboard's files.
        max_batch: most streams one step takes (the longest waiting first); the rest
            are stepped right after.
        send_buffer: the kernel send buffer of each connection in bytes (None: the OS
            default); with ``write_limit`` (websockets' high-water mark of a
            connection's write buffer) it bounds the bytes a stalled client holds in
            transit, past which its messages wait in the bounded outbox.
        open_timeout_s: a connection that has opened no stream this long after it
            connected is sent an error and closed (code 1008).
        ping_s: WebSocket keepalive: a ping every ``ping_s`` seconds; a peer that does not
            answer within ``ping_s`` is closed (code 1011).
        stale_s: a connected stream with no samples for longer is shown as no data in
            ``/api/state`` (:mod:`.state`).
        bulk_ms: the model time (CPU ms, estimated from the bank's previous bulk steps)
            one step of bulk streams (overflow ``"wait"``) may carry: at least one block.
        bulk_share: while any live stream is open, the most of one core's time the bulk
            steps of all banks take together (after a bulk step of c CPU s, no bulk step
            starts for c (1 - share) / share s; 1: no pause).
    """

    def __init__(
        self,
        hosts: list[HostedModel],
        *,
        host: str = "127.0.0.1",
        port: int = DEFAULT_PORT,
        token: str | None = None,
        max_streams: int = 4096,
        budget_ms: float = DEFAULT_BUDGET_MS,
        queue_blocks: int = DEFAULT_QUEUE_BLOCKS,
        queue_s: float = DEFAULT_QUEUE_S,
        out_queue: int = DEFAULT_OUT_QUEUE,
        out_hard: int = DEFAULT_OUT_HARD,
        web_dir: Path = WEB_DIR,
        send_buffer: int | None = None,
        write_limit: int = 1 << 15,
        max_batch: int = DEFAULT_MAX_BATCH,
        open_timeout_s: float = DEFAULT_OPEN_TIMEOUT_S,
        ping_s: float = DEFAULT_PING_S,
        stale_s: float = DEFAULT_STALE_S,
        bulk_ms: float = DEFAULT_BULK_MS,
        bulk_share: float = DEFAULT_BULK_SHARE,
    ):
        if not hosts:
            raise ServeError("no models to serve")
        self.shards: dict[str, list[HostedModel]] = {}  # name -> its banks (--workers)
        for h in hosts:
            same = self.shards.setdefault(h.name, [])
            if same and (same[0].task, same[0].paths) != (h.task, h.paths):
                raise ServeError(f"two different hosted models are named {h.name!r}")
            same.append(h)
        check_token(host, token)
        for what, v in (
            ("max_streams", max_streams),
            ("queue_blocks", queue_blocks),
            ("out_queue", out_queue),
            ("out_hard", out_hard),
            ("max_batch", max_batch),
        ):
            if int(v) < 1:
                raise ServeError(f"{what} must be >= 1, got {v}")
        if not (budget_ms >= 0 and math.isfinite(budget_ms)) or not queue_s > 0:
            raise ServeError("budget_ms must be >= 0 and queue_s > 0")
        for what, v in (
            ("open_timeout_s", open_timeout_s),
            ("ping_s", ping_s),
            ("stale_s", stale_s),
        ):
            if not (v > 0 and math.isfinite(v)):
                raise ServeError(f"{what} must be a positive number of seconds, got {v}")
        if not (bulk_ms > 0 and math.isfinite(bulk_ms)) or not 0 < bulk_share <= 1:
            raise ServeError(
                f"bulk_ms must be > 0 and bulk_share in (0, 1], got {bulk_ms}, {bulk_share}"
            )
        self.bulk_ms, self.bulk_share = float(bulk_ms), float(bulk_share)
        self.open_timeout_s, self.ping_s = float(open_timeout_s), float(ping_s)
        self.stale_s = float(stale_s)
        self.hosts = {name: banks[0] for name, banks in self.shards.items()}
        self.banks = [h for banks in self.shards.values() for h in banks]
        self.bind, self.port, self.token = host, int(port), token
        self.max_streams = int(max_streams)
        self.budget = budget_ms / 1000
        self.queue_blocks, self.queue_s = int(queue_blocks), float(queue_s)
        self.out_queue, self.out_hard = int(out_queue), max(int(out_hard), int(out_queue))
        self.web_dir = Path(web_dir)
        self.send_buffer, self.write_limit = send_buffer, int(write_limit)
        self.max_batch = int(max_batch)
        self.streams: dict[str, _Stream] = {}  # open streams by id
        self.views: dict[str, StreamView] = {}  # open and recently closed, by id
        self.started = time.time()
        self._ids = itertools.count(1)
        self._reserved: set[str] = set()  # ids being opened
        self._state_cache: tuple[float, str] | None = None
        self._server = None
        self._tasks: list[asyncio.Task] = []
        self._batchers: dict[int, asyncio.Task] = {}  # id(bank) -> its batcher task
        self._bulk_next = 0.0  # monotonic time before which no bulk step starts (the share)
        self.ready = threading.Event()

    # ------------------------------------------------------------------ lifecycle

    @property
    def url(self) -> str:
        """The stream endpoint, ``ws://HOST:PORT/stream``."""
        host = f"[{self.bind}]" if ":" in self.bind else self.bind
        return f"ws://{host}:{self.port}/stream"

    async def start(self) -> None:
        """Listen (the port is known after this) and start the batchers."""
        from websockets.asyncio.server import serve

        for h in self.banks:  # events made outside a running loop: rebind
            h.wake = asyncio.Event()
        self._server = await serve(
            self._handle,
            self.bind,
            self.port,
            process_request=self._http,
            max_size=MAX_MESSAGE,
            write_limit=self.write_limit,
            max_queue=64,
            ping_interval=self.ping_s,
            ping_timeout=self.ping_s,
            logger=log,
            server_header="liquid-stream",
            # no permessage-deflate: blocks are float32 samples and events short JSON;
            # compressing them cost ~5 % of the server's CPU at 1000 beds (py-spy)
            compression=None,
        )
        self.port = self._server.sockets[0].getsockname()[1]
        self._tasks = [asyncio.create_task(self._batcher(h)) for h in self.banks]
        self._batchers = {id(h): t for h, t in zip(self.banks, self._tasks, strict=True)}
        self.ready.set()

    async def stop(self) -> None:
        """Close every connection and stop the batchers and worker threads."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        for h in self.banks:
            h.executor.shutdown(wait=True)

    async def run(self, stop: asyncio.Event | None = None) -> None:
        """Serve until ``stop`` is set (or the task is cancelled)."""
        await self.start()
        try:
            await (stop.wait() if stop is not None else asyncio.Future())
        finally:
            await self.stop()

    # ------------------------------------------------------------------ HTTP

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

    # ------------------------------------------------------------------ connections

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

    # ------------------------------------------------------------------ LSL sources

    async def add_lsl(
        self,
        name: str,
        *,
        model: str | None = None,
        alarms: str | None = None,
        timeout: float = 5.0,
        block_s: float = 1.0,
        sid: str | None = None,
        on_event=None,
    ) -> str:
        """Open a vitals stream fed by the live LSL stream ``name``
        (:class:`liquid_stream.io.lsl.LslReader`: channels mapped to PLETH / II / RESP, its
        nominal rate resampled by the bed) and return its id (default ``lsl-NAME``). Its
        estimates go to the dashboard (no client reads them) and to ``on_event(event)``
        (called on the server's loop); it ends when the LSL source does. Blocks are
        ``block_s`` seconds of the stream (sample ``round(k * fs)`` starts block k: the
        chunks of ``vitals --record``); when the bed's inbox is full the pump waits (the
        inlet buffers meanwhile), so nothing is dropped. ValueError (one line) when the
        stream cannot be found or used."""
        from liquid_stream.io.lsl import LslError, LslReader

        loop = asyncio.get_running_loop()
        try:
            reader = await loop.run_in_executor(None, lambda: LslReader(name, timeout))
        except LslError as e:
            raise ValueError(str(e)) from None
        req = {
            "op": "open",
            "model": model or "vitals",
            "channels": list(reader.channels),
            "sample_rate": reader.rate,
            "alarms": alarms,
            "id": sid or f"lsl-{name}",
        }
        try:
            host, sid, kwargs, columns, rate, _ = self._open_request(req, {})
            self._reserved.add(sid)
            host.opening += 1
            try:
                info = await loop.run_in_executor(
                    host.executor, lambda: host.bank.open(sid, **kwargs)
                )
            finally:
                self._reserved.discard(sid)
                host.opening -= 1
        except ValueError:
            reader.close()
            raise
        view = StreamView(sid, host.task, host.name, rate, stale_s=self.stale_s)
        view.configure(info, getattr(host.bank, "models", ()))  # windows, alarm limits
        stream = _Stream(sid, host, None, columns, rate, "wait", view)
        self._set_bound(stream, kwargs.get("channels"))
        stream.open = False  # nobody to send to: the events feed the view (and on_event)
        stream.listener = on_event
        self.streams[sid] = host.streams[sid] = stream
        host.live += 1
        self.views.pop(sid, None)
        self.views[sid] = view
        self._state_cache = None  # a stream more: /api/state shows it at once
        threading.Thread(
            target=self._pump_lsl,
            args=(loop, stream, reader, block_s),
            name=f"lsl-{name}",
            daemon=True,
        ).start()
        return sid

    def _pump_lsl(self, loop, s: _Stream, reader, block_s: float, poll_s: float = 0.02) -> None:
        """Thread: pull the LSL inlet, hand whole blocks to the loop; end the stream with
        the source (the server stopping ends it too)."""
        fs, k, buf, n = reader.rate, 1, [], 0  # n: samples handed on
        try:
            while not reader.ended and not loop.is_closed() and s.id in self.streams:
                x = reader.pull()
                if len(x):
                    buf.append(x)
                    have, used = np.concatenate(buf), 0
                    if not block_s:
                        self._hand(loop, s, have)
                        n, used = n + len(have), len(have)
                    while block_s and (b := int(round(k * block_s * fs))) <= n + len(have) - used:
                        size = b - n  # one block: samples round((k-1) fs) .. round(k fs)
                        self._hand(loop, s, have[used : used + size])
                        n, used, k = b, used + size, k + 1
                    buf = [have[used:]] if used < len(have) else []
                else:
                    time.sleep(poll_s)
            if buf and not loop.is_closed():
                self._hand(loop, s, np.concatenate(buf))
        except (RuntimeError, concurrent.futures.CancelledError):  # the server stopped
            return
        finally:
            reader.close()
        with contextlib.suppress(RuntimeError):
            asyncio.run_coroutine_threadsafe(self._end(s, False, None), loop)

    def _hand(self, loop, s: _Stream, block: np.ndarray) -> None:
        """Thread: give a source's block to the loop, waiting while its inbox is full
        (the LSL inlet buffers meanwhile: nothing is dropped)."""

        async def put():
            await s.room.wait()
            self._receive(s, block)

        asyncio.run_coroutine_threadsafe(put(), loop).result()

    # ------------------------------------------------------------------ batching

    def _batching(self, host: HostedModel) -> bool:
        """Whether ``host``'s batcher runs (not before start, nor once the server stops)."""
        task = self._batchers.get(id(host))
        return task is not None and not task.done()

    async def _batcher(self, host: HostedModel) -> None:
        """Step ``host``'s bank whenever input waits (module docstring: scheduling).

        Live streams first: a step of the live streams' waiting blocks runs as soon as
        every live stream has input or the oldest live block has waited ``budget``.
        Meanwhile (and whenever no live step is due) bulk streams (overflow "wait") run
        in their own steps, each bounded to ``bulk_ms`` of model time (at least one
        block), and, while live streams are open, paced to ``bulk_share`` of one core
        (all banks together): a live block waits behind at most one bounded bulk step,
        and so do opens and closes (they run in the same worker thread, between steps)."""
        while True:
            host.wake.clear()
            now = time.monotonic()
            timeout = None
            if host.pending:  # in arrival order: the first holds the oldest block
                first = next(iter(host.pending))
                oldest = first.inbox[0][0] if first.inbox else now
                wait = oldest + self.budget - now
                if wait <= 0 or len(host.pending) >= host.live:
                    await self._step(host, self._take_live(host), bulk=False)
                    continue
                timeout = wait
            if host.bulk:
                wait = self._bulk_next - now
                if wait <= 0 or not any(h.live for h in self.banks):
                    await self._step(host, self._take_bulk(host), bulk=True)
                    continue
                timeout = wait if timeout is None else min(timeout, wait)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(host.wake.wait(), timeout)

    def _take_live(self, host: HostedModel) -> list:
        """The waiting blocks of the live streams (at most ``max_batch``, longest waiting
        first), their inboxes emptied."""
        work = []
        for s in list(itertools.islice(host.pending, self.max_batch)):
            del host.pending[s]
            if s.inbox and s.id in host.streams:
                work.append((s, list(s.inbox)))
            s.inbox.clear()
            s.queued_blocks = s.queued_samples = 0
            s.room.set()
        return work

    def _take_bulk(self, host: HostedModel) -> list:
        """A bounded share of the bulk streams' waiting blocks: whole blocks, about
        ``bulk_ms`` of model time in all at the bank's measured cost per input second,
        split evenly over the waiting bulk streams (round robin: a stream with blocks
        left goes to the back), at least one block. Their order within a stream is kept,
        so a stream's input reaches its bank as it would in one step."""
        budget = self.bulk_ms / 1000 / host.bulk_cost if host.bulk_cost else 0.0
        streams = list(itertools.islice(host.bulk, self.max_batch))
        share = budget / len(streams)
        work, total = [], 0.0
        for s in streams:
            if work and total >= budget:
                break
            del host.bulk[s]
            blocks, got = [], 0.0
            while s.inbox and (not blocks or got < share):
                arrival, block = s.inbox.popleft()
                if isinstance(block, int):
                    n = block
                else:
                    n = len(block)
                    s.queued_blocks -= 1
                    s.queued_samples -= n
                blocks.append((arrival, block))
                got += n / s.rate
            total += got
            if s.queued_blocks < self.queue_blocks and s.queued_samples < self.queue_s * s.rate:
                s.room.set()
            if s.inbox:
                host.bulk[s] = None
            elif s.drained is not None:
                s.drained.set()
            if blocks and s.id in host.streams:
                work.append((s, blocks))
        return work

    async def _step(self, host: HostedModel, work: list, bulk: bool) -> None:
        """Run one step of ``work`` [(stream, [(arrival, block), ...])] in the bank's
        worker; route the events and refusals; count."""
        if not work:
            return
        loop = asyncio.get_running_loop()
        try:
            errors, events, t_push, t_step, wall = await loop.run_in_executor(
                host.executor, self._step_in_worker, host, work
            )
        except Exception:  # noqa: BLE001 - a bank bug must not end the server
            log.exception("step of %s failed", host.name)
            for s, _ in work:
                self._error(s, "internal error while stepping this model; see the server log")
            return
        t0 = time.thread_time()
        now = time.monotonic()
        for s, blocks in work:
            for msg in errors.get(s, ()):
                self._error(s, msg)
            s.last_latency = now - blocks[0][0]
            if not bulk:
                host.stats.latency.extend(now - a for a, _ in blocks)
        stepped = {s.id: s for s, _ in work}
        for sid, evs in events.items():
            s = stepped.get(sid) or host.streams.get(sid)
            if s is None:
                continue
            for ev in evs:
                self._post(s, ev)
        for s, _ in work:
            if s.new_drops[0]:
                self._notice_drops(s)
        st = host.stats
        st.steps += 1
        st.blocks += sum(len(b) for _, b in work)
        st.batch.append(len(work))
        st.push_s += t_push
        st.step_s += t_step
        st.step_wall_s += wall
        st.route_s += time.thread_time() - t0
        if bulk:
            seconds = sum(
                (b if isinstance(b, int) else len(b)) / s.rate
                for s, blocks in work
                for _, b in blocks
            )
            cpu = t_push + t_step
            st.bulk_steps += 1
            st.bulk_s += seconds
            st.bulk_cpu_s += cpu
            if seconds > 0:
                cost = cpu / seconds
                host.bulk_cost = cost if not host.bulk_cost else 0.7 * host.bulk_cost + 0.3 * cost
            # one clock for every bank: bulk steps take at most bulk_share of one core
            # in all (the banks' threads share the machine's cores with the live steps)
            self._bulk_next = time.monotonic() + cpu * (1 - self.bulk_share) / self.bulk_share

    def _step_in_worker(self, host: HostedModel, work):
        """In the worker: push the waiting blocks, step the bank; (refusals, events, push
        and step CPU seconds of this thread, step wall seconds)."""
        t0 = time.thread_time()
        errors = {}
        for s, blocks in work:
            errs = self._push_blocks(s, blocks)
            if errs:
                errors[s] = errs
        t1, w1 = time.thread_time(), time.perf_counter()
        events = host.bank.step()
        return errors, events, t1 - t0, time.thread_time() - t1, time.perf_counter() - w1

    def _notice_drops(self, s: _Stream) -> None:
        blocks, samples = s.new_drops
        s.new_drops = [0, 0]
        self._post(
            s,
            {
                "type": "dropped",
                "blocks": blocks,
                "samples": samples,
                "total_blocks": s.view.dropped_blocks,
            },
        )


# ------------------------------------------------------------------------- in a thread


class ServerThread:
    """Run a :class:`StreamServer` on its own event loop in a daemon thread.

    with ServerThread(StreamServer(hosts, port=0)) as srv:
        client = ServeClient(srv.url)
    """

    def __init__(self, server: StreamServer):
        self.server = server
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="serve", daemon=True)

    def _main(self) -> None:
        async def main():
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            await self.server.run(self._stop)

        try:
            asyncio.run(main())
        except BaseException as e:  # noqa: BLE001 - reported by start()
            self._error = e
            self.server.ready.set()

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def http(self) -> str:
        """``http://HOST:PORT``."""
        return self.server.url.replace("ws://", "http://").removesuffix("/stream")

    def start(self) -> ServerThread:
        self._thread.start()
        self.server.ready.wait(60)
        if self._error is not None:
            raise self._error
        return self

    def run(self, coro, timeout: float = 60.0):
        """Run the coroutine ``coro`` on the server's loop; its result."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def call(self, fn, timeout: float = 10.0):
        """Run ``fn()`` on the server's loop (thread-safe read of its state)."""
        fut: concurrent.futures.Future = concurrent.futures.Future()

        def run():
            try:
                fut.set_result(fn())
            except BaseException as e:  # noqa: BLE001
                fut.set_exception(e)

        self._loop.call_soon_threadsafe(run)
        return fut.result(timeout)

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
