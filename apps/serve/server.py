"""``liquid-stream serve``: many live streams over WebSocket, each model's streams
micro-batched into one onnxruntime call per step (asyncio; no torch).

    server = StreamServer(default_hosts(), port=8765)      # kws-sc10 + the shipped vitals
    asyncio.run(server.run())                               # until cancelled
    with ServerThread(StreamServer(hosts, port=0)) as srv:  # or in a background thread
        print(srv.url)                                      # ws://127.0.0.1:PORT/stream

The server is one class, :class:`StreamServer` (its settings, start and stop), whose
methods live in one module per concern: :mod:`.http` (the token, the dashboard's files,
``/api/state``), :mod:`.protocol` (connections, streams, inbox bounds and outbox
back-pressure), :mod:`.scheduler` (the batchers and their steps), :mod:`.lsl` (streams fed
by an LSL inlet); :mod:`.hosts` holds the hosted models and :mod:`.defaults` the defaults
and limits. This module gives them all as one API.

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
import itertools
import math
import threading
import time
from pathlib import Path

from liquid_stream.apps.serve.state import DEFAULT_STALE_S, WEB_DIR, StreamView

from .defaults import (
    COOKIE,
    DEFAULT_BUDGET_MS,
    DEFAULT_BULK_MS,
    DEFAULT_BULK_SHARE,
    DEFAULT_MAX_BATCH,
    DEFAULT_OPEN_TIMEOUT_S,
    DEFAULT_OUT_HARD,
    DEFAULT_OUT_QUEUE,
    DEFAULT_PING_S,
    DEFAULT_PORT,
    DEFAULT_QUEUE_BLOCKS,
    DEFAULT_QUEUE_S,
    FRAMINGS,
    ID_RE,
    KEEP_CLOSED,
    KEEP_CLOSED_S,
    MAX_MESSAGE,
    QRS_TOP_HZ,
    STATE_EVERY_S,
    ServeError,
    log,
)
from .hosts import (
    HostedModel,
    default_hosts,
    kws_host,
    needed_rate,
    parse_kws_spec,
    parse_vitals_spec,
    vitals_host,
)
from .http import HttpMixin, check_token, is_loopback
from .lsl import LslMixin
from .protocol import ProtocolMixin, _Stream
from .scheduler import SchedulerMixin

__all__ = [
    "ServeError",
    "StreamServer",
    "ServerThread",
    "HostedModel",
    "default_hosts",
    "kws_host",
    "vitals_host",
    "parse_kws_spec",
    "parse_vitals_spec",
    "needed_rate",
    "check_token",
    "is_loopback",
    "DEFAULT_PORT",
    "DEFAULT_BUDGET_MS",
    "DEFAULT_QUEUE_BLOCKS",
    "DEFAULT_QUEUE_S",
    "DEFAULT_OUT_QUEUE",
    "DEFAULT_OUT_HARD",
    "DEFAULT_MAX_BATCH",
    "DEFAULT_BULK_MS",
    "DEFAULT_BULK_SHARE",
    "MAX_MESSAGE",
    "DEFAULT_OPEN_TIMEOUT_S",
    "DEFAULT_PING_S",
    "FRAMINGS",
    "QRS_TOP_HZ",
    "KEEP_CLOSED",
    "KEEP_CLOSED_S",
    "STATE_EVERY_S",
    "ID_RE",
    "COOKIE",
]


class StreamServer(HttpMixin, ProtocolMixin, LslMixin, SchedulerMixin):
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
