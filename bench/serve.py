"""How many live streams one ``liquid-stream serve`` holds in real time, batched vs one
``OnnxStreamer`` per stream, and where the time goes.

    python bench/serve.py                          # the default sweep (a few minutes)
    python bench/serve.py --beds 250 500 1000 --kws100 25 50 --kws10 10 25 --workers 1
    python bench/serve.py --quick                  # one short point per workload
    python bench/serve.py --servers 2 --workers 1  # two server processes (scale-out)
    python bench/serve.py --bulk 2 --beds 200 --kws100 10 --kws10 10   # fairness (below)

Workloads (each a separate phase against one server subprocess, or ``--servers K`` of
them, the streams spread round-robin as a client with stream affinity does):

- **beds**: vital-sign beds at 125 Hz, PLETH + II, 1-s blocks, 3 models per bed: the
  shipped ``vitals-ppg-ecg-hr`` and ``vitals-ppg-ecg-rr`` (``--bed-models``: e.g. the
  lighter ``vitals-ppg-ecg-rr-lite``, a quarter of the RR cost) and, as the third, an
  *untrained* SpO2 model exported here with the HR model's architecture (the shipped
  ``vitals-oximeter-spo2``, 4 × 64 as well, reads IR and red channels, which these beds
  do not carry; weights do not change the cost). The server hosts them as one
  ``--vitals ward=...`` set.
- **kws100 / kws10**: the shipped spotter ``kws-sc10`` on 16 kHz audio in 100 ms and
  10 ms blocks (the bank steps the shipped model in 160-sample calls either way;
  ``--kws-model`` with a graph exported for longer calls takes a 100 ms block in one).

A point "holds in real time" when every stream sends its blocks at the real pace (phases
spread over a block period), the server drops nothing, (nearly) every block's result
comes back, and the p95 *block latency* is at most 100 ms. Block latency: from the
client sending a block to the client receiving its result (vitals: the estimate of the
second the block ends; kws: the first ``scores`` event at or past the block's end),
through the real transport (WebSocket on 127.0.0.1, JSON events). The load generator is
this process (asyncio, one connection per stream) on the same machine: its CPU time is
reported beside the server's.

"Batched vs one OnnxStreamer per stream", measured in this run on the same models: the
CPU time to advance N streams by one block (the bank's chunk T0: 1 s of a bed, 10 ms of
audio) with one batched session call per model (``BatchedSession.step``), vs N
``OnnxStreamer.process`` calls of batch 1 (one streamer per model, each stream's state
swapped in: the compute of one streamer per stream without the memory), and the capacity
each implies on one core. Where the time goes: from the server's own counters
(``/api/state`` server.hosts: input push, ``bank.step`` = session calls + per-stream python
(monitor, tracker), routing), the session-call share of a step measured here, and the
rest of the server's CPU (WebSocket, JSON, asyncio: transport).

**Fairness** (``--bulk N``, issue 61): each point runs twice in the same run against the
same server, first alone, then with N *bulk* keyword clients next to it: separate
processes that each open a ``kws-sc10`` stream with overflow ``"wait"`` and send 100 ms
blocks of audio as fast as the server takes them (what ``stream-to --fast`` does), for
the whole phase. The table "live streams with and without bulk clients" gives the live
streams' p95 both ways and their ratio (the goal: <= 1.25x with 2 bulk clients), and the
bulk audio the server got through meanwhile (x real time, all bulk clients together).

Every phase opens its streams under ids of its own (``kws1600-3-0``...), so a phase
never collides with the streams of one before it still closing; a stream whose open
fails is counted and named in the table ("opens failed"), and a point without any
latency shows ``-``, never a number it did not measure.

The machine: 2 cores shared with other work; the load average before and after each
phase is printed, so a loaded run can be told from a quiet one.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from collections import deque
from pathlib import Path

import numpy as np

os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")

from liquid_stream.models import shipped

ROOT = Path(__file__).resolve().parents[1]

FS = 125
SR = 16000
BED_MODELS = ["vitals-ppg-ecg-hr", "vitals-ppg-ecg-rr"]
P95_LIMIT_MS = 100.0


# ------------------------------------------------------------------------------ models


def export_spo2(path: Path) -> Path:
    """An untrained SpO2 model with the shipped HR model's architecture and metadata
    (target spo2, %): the third model of a bed. Torch is needed here only."""
    import torch

    from liquid_stream import LiquidS4Model
    from liquid_stream.export.pipeline import export_model
    from liquid_stream.runtime.meta import ModelMeta
    from liquid_stream.runtime.onnx_streamer import OnnxStreamer

    hr = OnnxStreamer(shipped("vitals-ppg-ecg-hr"), providers=["CPUExecutionProvider"])
    config = json.loads(hr.metadata["model_config"])
    meta = ModelMeta.from_onnx_props(hr.metadata).to_dict()
    keep = (
        "task",
        "sample_rate",
        "input_mean",
        "input_std",
        "channels",
        "window",
        "format",
        "protocol",
    )
    meta = {k: meta[k] for k in keep if meta.get(k) is not None}
    meta |= {
        "target": "spo2",
        "units": "%",
        "labels": ["spo2"],
        "target_mean": 96.0,
        "target_std": 2.0,
    }
    torch.manual_seed(0)
    model = LiquidS4Model(**config).eval()
    export_model(
        model,
        path,
        chunk=int(hr.metadata["chunk"]),
        sub_block=int(hr.metadata["sub_block"]),
        meta=meta,
    )
    return path


# ------------------------------------------------------------------------------ server


def summed(parts: list[dict]) -> dict:
    """Step counters (``steps``, ``cpu_s``, ``streams_per_step``) of several banks or
    servers as one: sums, and the step-weighted mean batch."""
    steps = sum(p["steps"] for p in parts)
    return {
        "steps": steps,
        "bulk_s": sum(p.get("bulk_s", p.get("bulk", {}).get("input_s", 0.0)) for p in parts),
        "cpu_s": {k: sum(p["cpu_s"][k] for p in parts) for k in parts[0]["cpu_s"]},
        "streams_per_step": sum(p["streams_per_step"] * p["steps"] for p in parts) / max(1, steps),
    }


class Server:
    """``liquid-stream serve`` in a subprocess: its URL, CPU time and /api/state."""

    def __init__(self, args: list[str]):
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        self.cmd = [sys.executable, "-m", "liquid_stream.cli", "serve", "--port", "0", *args]
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT)
        line = self.proc.stdout.readline()
        if not line.startswith("serving "):
            self.proc.kill()
            raise SystemExit(f"serve did not start: {line!r}")
        self.url = line.split()[1]
        self.http = self.url.replace("ws://", "http://").removesuffix("/stream")

    def cpu_s(self) -> float:
        """User + system CPU seconds of the server process."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def state(self) -> dict:
        import urllib.request

        with urllib.request.urlopen(self.http + "/api/state", timeout=30) as r:
            return json.loads(r.read())

    def host(self, name: str) -> dict:
        """The counters of the model ``name``, summed over its banks (``--workers``)."""
        return summed([h for h in self.state()["server"]["hosts"] if h["name"] == name])

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


# ------------------------------------------------------------------------ load generator


class Tally:
    """Latencies and counts of one phase (only blocks sent after the warm-up count)."""

    def __init__(self):
        self.lat: list[float] = []
        self.expected = self.received = self.dropped = self.errors = 0
        self.sent_s = 0.0  # stream seconds sent (all blocks)
        self.open_failures: list[str] = []


async def run_stream(
    url, sid, kind, model, block, period, data, t0, t_measure, t_end, tally: Tally, open_sem
) -> None:
    """One stream: open, send ``block``-sample blocks every ``period`` s from ``t0`` (its
    phase), measure each block's latency until ``t_end``, close."""
    from websockets.asyncio.client import connect

    loop = asyncio.get_running_loop()
    ws = None
    try:
        async with open_sem:
            ws = await connect(
                f"{url}?id={sid}",
                max_size=1 << 22,
                ping_interval=None,
                open_timeout=120,
                max_queue=None,
            )
            req = {"op": "open", "model": model, "id": sid, "overflow": "drop"}
            if kind == "bed":
                req |= {"channels": ["PLETH", "II"], "sample_rate": FS}
            else:
                req |= {"sample_rate": SR}
            await ws.send(json.dumps(req))
            reply = json.loads(await ws.recv())
    except Exception as e:  # noqa: BLE001 - a failed open is counted, not a crash
        reply = {"type": "error", "message": f"{type(e).__name__}: {e}"}
    if reply.get("type") != "opened":
        tally.open_failures.append(f"{sid}: {reply.get('message', str(reply))}")
        if ws is not None:
            await ws.close()
        return
    pending: deque[tuple[float, float, bool]] = deque()  # (end time s, send time, counted)
    counted = reply.get("framing") == "counted"  # each frame after its channel count
    head = np.shape(data)[1].to_bytes(4, "little") if counted else b""
    frames = [
        head + np.ascontiguousarray(data[i : i + block], "<f4").tobytes()
        for i in range(0, len(data) - block + 1, block)
    ]

    async def receive():
        async for msg in ws:
            if '"scores"' in msg or '"estimate"' in msg:
                t = json.loads(msg)["t"]
                now = loop.time()
                while pending and pending[0][0] <= t + 1e-9:
                    _, sent, counted = pending.popleft()
                    if counted:
                        tally.lat.append(now - sent)
                        tally.received += 1
            elif '"dropped"' in msg:
                tally.dropped += json.loads(msg)["blocks"]
            elif '"error"' in msg:
                tally.errors += 1

    rx = asyncio.create_task(receive())
    k = 0
    while True:
        due = t0 + k * period
        if due > t_end:
            break
        wait = due - loop.time()
        if wait > 0:
            await asyncio.sleep(wait)
        sent = loop.time()
        counted = sent >= t_measure
        await ws.send(frames[k % len(frames)])
        k += 1
        pending.append((k * block / (FS if kind == "bed" else SR), sent, counted))
        tally.expected += counted
        tally.sent_s += period
    await asyncio.sleep(1.0)  # the last results
    rx.cancel()
    await ws.close()


async def load(urls, kind, model, n, block, seconds, warmup, phase) -> tuple[Tally, float]:
    """N streams for ``warmup`` + ``seconds``, stream i to ``urls[i % len(urls)]`` under
    the id ``{kind}{block}-{phase}-{i}`` (ids of its own per phase); returns the tally
    and the load's CPU s."""
    rate = FS if kind == "bed" else SR
    period = block / rate
    rng = np.random.default_rng(0)
    if kind == "bed":
        t = np.arange(20 * FS) / FS
        data = np.stack(
            [
                0.5 + 0.2 * np.sin(2 * np.pi * 1.2 * t),
                0.1 + 0.8 * np.maximum(0, np.cos(2 * np.pi * 1.2 * t)) ** 20,
            ],
            1,
        )
        data = data + rng.normal(0, 0.01, data.shape)
    else:
        data = (0.05 * rng.standard_normal((2 * SR, 1))).astype(np.float32)
    tally = Tally()
    loop = asyncio.get_running_loop()
    sem = asyncio.Semaphore(64)
    cpu0 = time.process_time()
    ramp = max(2.0, n / 400)  # the opens
    start = loop.time() + ramp
    t_measure, t_end = start + warmup, start + warmup + seconds
    tasks = [
        run_stream(
            urls[i % len(urls)],
            f"{kind}{block}-{phase}-{i}",
            kind,
            model,
            block,
            period,
            data,
            start + period * i / n,
            t_measure,
            t_end,
            tally,
            sem,
        )
        for i in range(n)
    ]
    await asyncio.gather(*tasks)
    return tally, time.process_time() - cpu0


async def bulk_client(url: str, sid: str) -> None:
    """``--bulk-client``: one keyword stream sent flat out (overflow "wait", 100 ms blocks
    of audio as fast as the server takes them, its events read and dropped) until
    killed; prints ``open`` once opened."""
    from websockets.asyncio.client import connect

    rng = np.random.default_rng(abs(hash(sid)) % 2**32)
    data = (0.05 * rng.standard_normal(2 * SR)).astype("<f4")
    frames = [data[i : i + 1600].tobytes() for i in range(0, len(data), 1600)]
    async with connect(f"{url}?id={sid}", max_size=1 << 22, ping_interval=None) as ws:
        req = {"op": "open", "model": "kws-sc10", "id": sid, "sample_rate": SR}
        await ws.send(json.dumps(req | {"overflow": "wait", "framing": "raw"}))
        reply = json.loads(await ws.recv())
        if reply.get("type") != "opened":
            print(f"refused {reply.get('message')}", flush=True)
            return
        print("open", flush=True)

        async def drain():
            async for _ in ws:
                pass

        rx = asyncio.create_task(drain())  # noqa: F841 - runs until the process is killed
        k = 0
        while True:
            await ws.send(frames[k % len(frames)])
            k += 1


class Bulk:
    """N ``--bulk-client`` processes on ``urls`` (round-robin) for one phase."""

    def __init__(self, urls: list[str], n: int, phase: int):
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        self.procs = [
            subprocess.Popen(
                [
                    sys.executable,
                    __file__,
                    "--bulk-client",
                    urls[i % len(urls)],
                    f"bulk-{phase}-{i}",
                ],
                stdout=subprocess.PIPE,
                text=True,
                env=env,
                cwd=ROOT,
            )
            for i in range(n)
        ]
        for p in self.procs:
            line = p.stdout.readline().strip()
            if line != "open":
                self.stop()
                raise SystemExit(f"a bulk client did not open: {line!r}")

    def stop(self) -> None:
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()


class Cluster:
    """``--servers K`` server processes with the same models (scale-out, docs/serving.md §6):
    the load generator spreads the streams over them round-robin (stream i to server
    i mod K), as a client with stream affinity does; CPU time and counters are summed."""

    def __init__(self, args: list[str], k: int):
        self.servers = [Server(args) for _ in range(k)]
        self.cmd = self.servers[0].cmd
        self.urls = [s.url for s in self.servers]

    def cpu_s(self) -> float:
        return sum(s.cpu_s() for s in self.servers)

    def host(self, name: str) -> dict:
        return summed([s.host(name) for s in self.servers])

    def stop(self) -> None:
        for s in self.servers:
            s.stop()


# ------------------------------------------------------------------------- batched vs one


def batched_vs_single(paths: list[Path], n: int, T0: int, reps: int = 2) -> dict:
    """CPU ms to advance ``n`` streams by T0 samples through every model in ``paths``:
    batched (one ``BatchedSession.step`` per model) vs ``n`` batch-1 ``process`` calls
    per model (one streamer, each stream's state swapped in)."""
    from liquid_stream.apps.batch import BatchedSession
    from liquid_stream.runtime.onnx_streamer import OnnxStreamer

    batched = single = 0.0
    for p in paths:
        s = OnnxStreamer(p, providers=["CPUExecutionProvider"], threads=1)
        x = 0.5 + 0.1 * np.random.default_rng(0).standard_normal((T0, s.d_input))
        x = (x * (0.1 if s.d_input == 1 else 1.0)).astype(np.float32)
        bs = BatchedSession.from_streamer(s, max_streams=n)
        for i in range(n):
            bs.add(i)
        blocks = dict.fromkeys(range(n), x)
        bs.step(blocks)
        t = time.process_time()
        for _ in range(reps):
            bs.step(blocks)
        batched += (time.process_time() - t) / reps
        states = [dict(s.state) for _ in range(min(n, 64))]  # the state swap of n streams
        s.process(x)
        t = time.process_time()
        for _ in range(reps):
            for i in range(n):
                s.state = states[i % len(states)]
                s.process(x)
                states[i % len(states)] = s.state
        single += (time.process_time() - t) / reps
    return {"batched_ms": 1000 * batched, "single_ms": 1000 * single, "ratio": single / batched}


def session_share(paths: list[Path], n: int, T0: int) -> float:
    """The fraction of ``BatchedSession.step`` spent inside onnxruntime's ``run`` for n
    streams of one chunk (the rest: gather, checks, scatter in python/numpy)."""
    from liquid_stream.apps.batch import BatchedSession
    from liquid_stream.runtime.onnx_streamer import OnnxStreamer

    tot = inner = 0.0
    for p in paths:
        s = OnnxStreamer(p, providers=["CPUExecutionProvider"], threads=1)
        bs = BatchedSession.from_streamer(s, max_streams=n)
        for i in range(n):
            bs.add(i)
        x = (0.1 * np.random.default_rng(0).standard_normal((T0, s.d_input))).astype(np.float32)
        sess = bs.streamer.session if hasattr(bs, "streamer") else s.session
        run = sess.run
        spent = [0.0]

        def timed(*a, _run=run, _spent=spent, **k):
            t = time.process_time()
            try:
                return _run(*a, **k)
            finally:
                _spent[0] += time.process_time() - t

        sess.run = timed
        blocks = dict.fromkeys(range(n), x)
        bs.step(blocks)
        spent[0] = 0.0
        t = time.process_time()
        for _ in range(3):
            bs.step(blocks)
        tot += time.process_time() - t
        inner += spent[0]
        sess.run = run
    return inner / tot if tot else float("nan")


# ---------------------------------------------------------------------------------- main


def fmt(ms: float) -> str:
    """A latency in ms, or ``-`` where nothing was measured."""
    return f"{ms:.1f}" if np.isfinite(ms) else "-"


def run_point(server, args, kind, model, block, n, n_bulk, phase) -> dict:
    """One point: n live streams for warmup + seconds, with n_bulk bulk clients beside."""
    host = "ward" if kind == "bed" else "kws-sc10"
    bulk = Bulk(server.urls, n_bulk, phase) if n_bulk else None
    try:
        before, bulk0 = server.host(host), server.host("kws-sc10")["bulk_s"]
        cpu_s0, la0, w0 = server.cpu_s(), loadavg(), time.perf_counter()
        tally, client_cpu = asyncio.run(
            load(server.urls, kind, model, n, block, args.seconds, args.warmup, phase)
        )
        wall = time.perf_counter() - w0
        server_cpu = server.cpu_s() - cpu_s0
        after, bulk1 = server.host(host), server.host("kws-sc10")["bulk_s"]
    finally:
        if bulk is not None:
            bulk.stop()
    lat = np.array(tally.lat) * 1000 if tally.lat else np.array([np.nan])
    got = tally.received / max(1, tally.expected)
    p95 = float(np.percentile(lat, 95))
    ok = (
        bool(tally.lat)
        and p95 <= P95_LIMIT_MS
        and tally.dropped == 0
        and got >= 0.99
        and not tally.open_failures
        and not tally.errors
    )
    steps = after["steps"] - before["steps"]
    per = {k: after["cpu_s"][k] - before["cpu_s"][k] for k in after["cpu_s"]}
    return {
        "n": n,
        "bulk": n_bulk,
        "held": ok,
        "lat_n": len(tally.lat),
        "p50_ms": float(np.percentile(lat, 50)),
        "p95_ms": p95,
        "max_ms": float(np.max(lat)),
        "results": got,
        "dropped": tally.dropped,
        "errors": tally.errors,
        "open_failures": tally.open_failures,
        "wall_s": wall,
        "server_cpu_cores": server_cpu / wall,
        "client_cpu_cores": client_cpu / wall,
        "steps": steps,
        "streams_per_step": after["streams_per_step"],
        "server_push_s": per["push"],
        "server_step_s": per["step"],
        "server_route_s": per["route"],
        "server_cpu_s": server_cpu,
        "server_cpu_ms_per_stream_s": 1000 * server_cpu / max(tally.sent_s, 1e-9),
        "bulk_x_realtime": (bulk1 - bulk0) / wall,
        "load_before": la0,
        "load_after": loadavg(),
    }


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--beds", type=int, nargs="*", default=[200, 400, 550, 700, 1000])
    ap.add_argument("--kws100", type=int, nargs="*", default=[10, 20, 30, 50])
    ap.add_argument("--kws10", type=int, nargs="*", default=[10, 20, 30, 50])
    ap.add_argument(
        "--kws-model",
        default=None,
        metavar="ONNX",
        help="the spotter to host (default: the shipped kws-sc10), e.g. one "
        "exported --chunk 1600 --sub-block 1 for 100 ms calls",
    )
    ap.add_argument(
        "--bed-models",
        nargs=2,
        default=BED_MODELS,
        metavar="NAME",
        help="the shipped HR and RR models of a bed (default: %(default)s; "
        "e.g. vitals-ppg-ecg-hr vitals-ppg-ecg-rr-lite)",
    )
    ap.add_argument("--seconds", type=float, default=12.0, help="measured seconds per point")
    ap.add_argument("--warmup", type=float, default=4.0, help="seconds before measuring")
    ap.add_argument("--budget-ms", type=float, default=20.0)
    ap.add_argument("--threads", type=int, default=1, help="serve --threads (per model)")
    ap.add_argument("--workers", type=int, default=2, help="serve --workers (banks per model)")
    ap.add_argument(
        "--servers",
        type=int,
        default=1,
        help="server processes, the streams spread over them (scale-out)",
    )
    ap.add_argument("--all", action="store_true", help="go on past the first failing N")
    ap.add_argument("--quick", action="store_true", help="one short point per workload")
    ap.add_argument(
        "--bulk",
        type=int,
        default=0,
        metavar="N",
        help="run every point also with N bulk keyword clients flat out "
        "beside it (fairness: live p95 with and without, one run)",
    )
    ap.add_argument(
        "--no-compute", action="store_true", help="skip the batched-vs-one-streamer table"
    )
    ap.add_argument("--bulk-client", nargs=2, metavar=("URL", "ID"), help=argparse.SUPPRESS)
    ap.add_argument("--json", default=None, help="write the results here")
    args = ap.parse_args()
    if args.bulk_client:
        asyncio.run(bulk_client(*args.bulk_client))
        return
    if args.quick:
        args.beds, args.kws100, args.kws10, args.seconds = [100], [10], [10], 6.0

    tmp = Path(tempfile.mkdtemp(prefix="bench-serve-"))
    spo2 = export_spo2(tmp / "vitals-untrained-spo2.onnx")
    bed_paths = [shipped(m) for m in args.bed_models] + [spo2]
    kws_path = Path(args.kws_model) if args.kws_model else shipped("kws-sc10")
    server_args = [
        "--kws",
        f"{kws_path}=kws-sc10",
        "--vitals",
        "ward=" + ",".join(map(str, bed_paths)),
        "--budget-ms",
        f"{args.budget_ms:g}",
        "--max-streams",
        "8192",
        "--queue-s",
        "5",
        "--threads",
        str(args.threads),
        "--workers",
        str(args.workers),
    ]
    server = Cluster(server_args, args.servers)
    print("command: " + shlex.join([sys.executable, *sys.argv]))
    print(f"server:  {args.servers} x " + shlex.join(server.cmd))
    print(f"cores: {os.cpu_count()}, load average at start: {loadavg()}\n")
    results: dict = {
        "command": shlex.join(sys.argv),
        "server": f"{args.servers} x " + shlex.join(server.cmd),
        "points": [],
        "compute": {},
    }
    rows = []
    phase = 0
    try:
        for kind, model, block, ns in (
            ("bed", "ward", FS, args.beds),
            ("kws", "kws-sc10", 1600, args.kws100),
            ("kws", "kws-sc10", 160, args.kws10),
        ):
            label = "beds (3 models, 1 s)" if kind == "bed" else f"kws {block // 16} ms"
            for n in ns:
                for n_bulk in (0, args.bulk) if args.bulk else (0,):
                    phase += 1
                    point = run_point(server, args, kind, model, block, n, n_bulk, phase)
                    point["workload"] = label
                    results["points"].append(point)
                    rows.append(point)
                    p95 = point["p95_ms"]
                    failed = point["open_failures"]
                    print(
                        f"{label:22s} N={n:5d} bulk {n_bulk}  "
                        f"{'HELD' if point['held'] else 'not held':8s}  p50 "
                        f"{fmt(point['p50_ms'])}  p95 {fmt(p95)}  max {fmt(point['max_ms'])} ms"
                        f"  results {100 * point['results']:5.1f} %  dropped {point['dropped']}"
                        f"  opens failed {len(failed)}  server "
                        f"{point['server_cpu_cores']:.2f} cores  load gen "
                        f"{point['client_cpu_cores']:.2f}  bulk {point['bulk_x_realtime']:.1f}x"
                        f" real time  load {point['load_before']} -> {point['load_after']}",
                        flush=True,
                    )
                    for msg in failed[:3]:
                        print(f"    OPEN FAILED: {msg}", flush=True)
                if not rows[-1 - bool(args.bulk)]["held"] and not args.all:
                    break
        # batched vs one streamer per stream, and the session share, in the same run
        for label, paths, T0, ns in (
            (
                ("beds (3 models, 1 s)", bed_paths, FS, (10, 100, 1000)),
                ("kws (160-sample chunk)", [kws_path], 160, (10, 50)),
            )
            if not args.no_compute
            else ()
        ):
            for n in ns:
                c = batched_vs_single(paths, n, T0)
                c["session_share"] = session_share(paths, n, T0)
                stream_s = T0 / (FS if "beds" in label else SR)
                c["capacity_batched_per_core"] = n * stream_s / (c["batched_ms"] / 1000)
                c["capacity_single_per_core"] = n * stream_s / (c["single_ms"] / 1000)
                results["compute"][f"{label} N={n}"] = c
    finally:
        server.stop()
    print(f"\nload average at the end: {loadavg()}")
    print("\n## Streams held in real time (p95 block latency <= 100 ms, nothing dropped)\n")
    print(
        "| workload | N | bulk clients | held | opens failed | p50 ms | p95 ms | max ms | "
        "results | server cores | load-gen cores | server CPU ms per stream-s | streams/step | "
        "push / step / route (CPU s) | other server CPU (s) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for p in rows:
        other = p["server_cpu_s"] - p["server_push_s"] - p["server_step_s"] - p["server_route_s"]
        print(
            f"| {p['workload']} | {p['n']} | {p['bulk']} | {'yes' if p['held'] else 'no'} | "
            f"{len(p['open_failures'])} of {p['n']} | {fmt(p['p50_ms'])} | "
            f"{fmt(p['p95_ms'])} | {fmt(p['max_ms'])} | {100 * p['results']:.1f} % | "
            f"{p['server_cpu_cores']:.2f} | {p['client_cpu_cores']:.2f} | "
            f"{p['server_cpu_ms_per_stream_s']:.2f} | {p['streams_per_step']:.0f} | "
            f"{p['server_push_s']:.1f} / {p['server_step_s']:.1f} / "
            f"{p['server_route_s']:.1f} | {other:.1f} |"
        )
    print(
        "\n## One block of N streams: batched session call vs N OnnxStreamer calls "
        "(CPU, one thread)\n"
    )
    print(
        "| workload | N | batched ms | one streamer per stream ms | ratio | in session.run | "
        "streams / core batched | streams / core one each |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for key, c in results["compute"].items():
        label, n = key.rsplit(" N=", 1)
        print(
            f"| {label} | {n} | {c['batched_ms']:.1f} | {c['single_ms']:.1f} | "
            f"{c['ratio']:.1f}x | {100 * c['session_share']:.0f} % | "
            f"{c['capacity_batched_per_core']:.0f} | {c['capacity_single_per_core']:.0f} |"
        )
    if args.bulk:
        print(
            f"\n## Live streams with and without {args.bulk} bulk keyword clients flat out "
            "(same run, same server)\n"
        )
        print(
            "| workload | N | p95 ms alone | p95 ms with bulk | ratio | opens failed "
            "(alone / with) | bulk audio x real time |"
        )
        print("|---|---|---|---|---|---|---|")
        for a, b in zip(rows[::2], rows[1::2], strict=True):
            ok = a["lat_n"] and b["lat_n"]
            ratio = f"{b['p95_ms'] / a['p95_ms']:.2f}x" if ok else "-"
            print(
                f"| {a['workload']} | {a['n']} | {fmt(a['p95_ms'])} | {fmt(b['p95_ms'])} | "
                f"{ratio} | {len(a['open_failures'])} / {len(b['open_failures'])} | "
                f"{b['bulk_x_realtime']:.1f} |"
            )
    held = {}
    for p in rows:
        if p["held"] and not p["bulk"]:
            held[p["workload"]] = max(held.get(p["workload"], 0), p["n"])
    print("\nlargest N held: " + (", ".join(f"{k}: {v}" for k, v in held.items()) or "none"))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
