"""The streaming server (liquid_stream.apps.serve: server, client, state, cli):
real servers on 127.0.0.1 (in a thread of this process, or ``liquid-stream serve``
subprocesses), real WebSocket clients, real onnxruntime sessions.

Models: the shipped vital-sign models, and the trained tone spotter of
tests/fixtures_kws.py (a real keyword spotter whose tone "keywords" are detected at known
times, so the detections compared are not empty lists).

Exactness: a stream's events through the server are compared with that stream run alone
with the same chunking, a :class:`KeywordSpotter` or a :class:`VitalsMonitor` fed the
client's blocks: detections (time, label), estimate seconds, statuses, validity and
alarms exactly; model values up to float32 rounding (rtol 1e-5, as tests/apps/batch/test_batch.py:
the batched kernel's summation order can depend on the batch size).
"""

from __future__ import annotations

import http.client
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

# onnxruntime >= 1.29 on Linux sends telemetry (DNS for mobile.events.data.microsoft.com)
# unless this is set before its first session: off, so these tests reach no other address
# (the serve subprocesses inherit it).
os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
from liquid_stream.io import lsl  # noqa: E402

os.environ[lsl.CONFIG_ENV] = str(lsl.write_config(lsl.local_config_path()))  # before liblsl

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from click.testing import CliRunner
from fixtures_kws import (
    EVENTS,
    SR,
    sigint_default,
    tone_signal,
    train_tone_spotter,
    write_tone_wav,
)
from fixtures_vitals import signals, write_record

from liquid_stream.apps.batch.vitals import estimate_event
from liquid_stream.apps.common.audio import stream_resampler
from liquid_stream.apps.kws.spotter import KeywordSpotter
from liquid_stream.apps.serve.cli import stream_to_cmd
from liquid_stream.apps.serve.client import (
    AsyncServeClient,
    ServeClient,
    ServeClientError,
    shard,
    stream_blocks,
)
from liquid_stream.apps.serve.server import (
    ServeError,
    ServerThread,
    StreamServer,
    kws_host,
    vitals_host,
)
from liquid_stream.apps.vitals.monitor import VitalsMonitor
from liquid_stream.models import shipped

RTOL = 1e-5
PPG = ["vitals-ppg-hr", "vitals-ppg-rr"]
PPG_ECG = ["vitals-ppg-ecg-hr", "vitals-ppg-ecg-rr"]
ROOT = Path(__file__).resolve().parents[3]


def close(a, b, what=""):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    atol = RTOL * max(float(np.abs(b).max(initial=0.0)), 1e-30)
    np.testing.assert_allclose(a, b, rtol=RTOL, atol=atol, err_msg=what)


def wait_for(pred, timeout: float = 20.0, what: str = "condition"):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def get(url: str, headers=None) -> tuple[int, dict, bytes]:
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def state(srv, **params) -> dict:
    q = "?" + "&".join(f"{k}={v}" for k, v in params.items()) if params else ""
    status, _, body = get(srv.http + "/api/state" + q)
    assert status == 200, body
    return json.loads(body)


# ------------------------------------------------------------------------ references


class KwsRef:
    """The stream alone: a KeywordSpotter fed the client's blocks (resampled as the bank
    does); per-sample smoothed scores kept, detections with their stream times."""

    def __init__(self, path, rate: int):
        self.sp = KeywordSpotter(path, threads=1)
        self.rs = None if rate == self.sp.sample_rate else stream_resampler(rate, SR)
        self.delay = 0.0 if self.rs is None else self.rs.delay_s
        self.trace, self.detections = [], []

    def push(self, block) -> None:
        y = np.asarray(block, np.float32).reshape(-1)
        y = y if self.rs is None else self.rs.process(y)
        if len(y):
            self.sp.predict(y)
            self.trace.append(self.sp.last_trace)
            self.detections += [
                (max(0.0, d.time_s - self.delay), d.keyword, d.score) for d in self.sp.detections
            ]

    def check(self, events: list[dict], what: str) -> None:
        dets = [e for e in events if e["type"] == "detection"]
        assert [(d["t"], d["label"]) for d in dets] == [(t, k) for t, k, _ in self.detections], what
        close([d["score"] for d in dets], [s for *_, s in self.detections], what)
        trace = np.concatenate(self.trace)
        scores = [e for e in events if e["type"] == "scores"]
        assert scores, what
        for e in scores:
            n = round((e["t"] + self.delay) * SR)
            if e["t"] == 0.0 or n < 1:  # clamped at the stream start by the delay
                continue
            assert list(e["scores"]) == self.sp.keywords
            close(list(e["scores"].values()), trace[n - 1], f"{what}: scores at {e['t']}")


def vitals_ref(models, channels, rate, alarms, blocks) -> list[dict]:
    """The bed alone: a VitalsMonitor fed the client's blocks, as events."""
    mon = VitalsMonitor(
        [shipped(m) for m in models], alarms=alarms, channels=channels, input_rate=rate
    )
    ests = []
    for b in blocks:
        ests += mon.push(np.asarray(b, np.float64))
    ests += mon.flush()
    return [estimate_event(e, mon.units) for e in ests]


def check_vitals(got: list[dict], want: list[dict], what: str) -> None:
    got = [e for e in got if e["type"] == "estimate"]
    assert [e["t"] for e in got] == [e["t"] for e in want], what
    for g, w in zip(got, want, strict=True):
        for key in ("valid", "status", "units", "alarms", "raised", "cleared", "technical"):
            assert g[key] == w[key], (what, g["t"], key)
        for t, v in g["values"].items():
            assert (v is None) == (w["values"][t] is None), (what, g["t"], t)
            if v is not None:
                close(v, w["values"][t], f"{what} {t} at {g['t']} s")


def cut(x: np.ndarray, size: int) -> list[np.ndarray]:
    return [x[i : i + size] for i in range(0, len(x), size)]


def bed(seconds, rate, channels, seed, nan_spans=()) -> np.ndarray:
    sig = signals(seconds, rate, seed)
    x = np.stack([sig[c] for c in channels], 1)
    for ch, s0, dur in nan_spans:
        a = int(round(s0 * rate))
        x[a : a + int(round(dur * rate)), channels.index(ch)] = np.nan
    return x


# -------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def tone(tmp_path_factory) -> Path:
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        info = train_tone_spotter(tmp_path_factory.mktemp("serve") / "tone.onnx")
    finally:
        torch.set_num_threads(threads)
    assert info["accuracy"] > 0.9
    return info["path"]


def hosts(tone: Path) -> list:
    return [
        kws_host(tone, "tone"),
        vitals_host("ppg", [shipped(m) for m in PPG]),
        vitals_host("ppg-ecg", [shipped(m) for m in PPG_ECG]),
    ]


@pytest.fixture(scope="module")
def srv(tone):
    with ServerThread(StreamServer(hosts(tone), port=0, max_streams=64)) as s:
        yield s


def open_ids(srv) -> dict[str, list[str]]:
    """The streams each hosted bank holds (read on the server's loop)."""
    return srv.call(lambda: {n: h.bank.ids() for n, h in srv.server.hosts.items()})


# ========================================================================== exactness


@pytest.mark.slow
def test_streams_through_the_server_equal_each_stream_alone(srv, tone):
    """Three keyword streams (8 and 16 kHz, binary float32 and JSON float64 blocks of 80,
    400 and 1337 samples) and three beds (125 / 250 Hz, their own channel orders, a NaN
    gap, alarms, the model picked by channels), joining at different times and leaving
    after 4 to 45 s of signal, all at once: each stream's events equal the stream run
    alone, whatever the others do; afterwards every stream is reclaimed."""
    k1 = tone_signal(SR, seed=1).astype(np.float32)
    k2 = tone_signal(16000, seed=2).astype(np.float32)
    k3 = tone_signal(SR, seed=3)[: 4 * SR]  # leaves after 4 s; JSON keeps float64
    v1 = bed(45, 125, ["PLETH"], 4).astype(np.float32).astype(np.float64)
    v2_ch = ["II", "RESP", "PLETH"]
    v2 = bed(40, 250, v2_ch, 5, [("PLETH", 10.3, 1.0)]).astype(np.float32).astype(np.float64)
    v3 = bed(20, 125, ["PLETH", "II"], 6)
    plan = {  # id: (model, rate, channels, alarms, blocks, json, join delay s)
        "k1": ("tone", SR, None, None, cut(k1, 400), False, 0.0),
        "k2": ("tone", 16000, None, None, cut(k2, 1337), False, 0.3),
        "k3": ("kws", SR, None, None, cut(k3, 80), True, 0.1),
        "bed-1": ("ppg", 125, ["PLETH"], "hr>85:hold=2", cut(v1, 125), False, 0.0),
        "bed-2": ("ppg-ecg", 250, v2_ch, "rr<30", cut(v2, 175), False, 0.2),
        "bed-3": ("vitals", 125, ["PLETH", "II"], None, cut(v3, 100), True, 0.4),
    }
    got, errors = {}, []

    def client(sid, model, rate, channels, alarms, blocks, as_json, delay):
        try:
            time.sleep(delay)
            r = stream_blocks(
                srv.url,
                blocks,
                model=model,
                sample_rate=rate,
                channels=channels,
                alarms=alarms,
                stream_id=sid,
                json_blocks=as_json,
            )
            got[sid] = r
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append((sid, repr(e)))

    threads = [threading.Thread(target=client, args=(sid, *p)) for sid, p in plan.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert got["bed-3"].opened["model"] == "ppg-ecg"  # "vitals": the set its channels fit
    assert got["k3"].opened["model"] == "tone"
    for sid in ("k1", "k2", "k3"):
        _, rate, _, _, blocks, *_ = plan[sid]
        ref = KwsRef(tone, rate)
        for b in blocks:
            ref.push(b)
        ref.check(got[sid].events, sid)
    assert len(got["k1"].of("detection")) == len(EVENTS)  # the tones were heard
    for sid, models in (("bed-1", PPG), ("bed-2", PPG_ECG), ("bed-3", PPG_ECG)):
        model, rate, channels, alarms, blocks, *_ = plan[sid]
        check_vitals(got[sid].events, vitals_ref(models, channels, rate, alarms, blocks), sid)
    assert got["bed-1"].of("estimate")[-1]["status"] == {"hr": "ok", "rr": "ok"}  # warm
    assert any(e["raised"] for e in got["bed-1"].events)  # the HR ramp raised hr>85
    assert {"bridged"} <= {s for e in got["bed-2"].of("estimate") for s in e["status"].values()}
    for r in got.values():
        assert not r.of("error") and not r.of("dropped")
        assert r.closed["stats"]["dropped_blocks"] == 0
    wait_for(lambda: state(srv)["server"]["streams"] == 0, what="every stream closed")
    assert open_ids(srv) == {"tone": [], "ppg": [], "ppg-ecg": []}


# ============================================================================= faults


def test_killed_client_is_reclaimed_and_the_others_go_on(srv, tone, tmp_path):
    """A client process SIGKILLed mid-stream and a client that drops its socket without a
    close: the server forgets both streams (state, bank slot, count) while another
    stream, running across both faults, gets exactly its own events."""
    script = tmp_path / "client.py"
    script.write_text(
        "import sys, time, numpy as np\n"
        "from liquid_stream.apps.serve.client import ServeClient\n"
        "c = ServeClient(sys.argv[1], stream_id='doomed')\n"
        "c.open('ppg', channels=['PLETH'], sample_rate=125)\n"
        "print('open', flush=True)\n"
        "while True:\n"
        "    c.send(0.5 + 0.1 * np.random.default_rng(0).standard_normal((25, 1)))\n"
        "    time.sleep(0.05)\n"
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, str(script), srv.url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    x = tone_signal(SR, seed=7).astype(np.float32)
    blocks = cut(x, 800)
    try:
        assert proc.stdout.readline().strip() == "open", proc.stderr.read()
        with ServeClient(srv.url, stream_id="steady") as c:
            c.open("tone", sample_rate=SR, overflow="wait")
            events = []
            for i, b in enumerate(blocks):
                c.send(b)
                events += c.drain()
                if i == 3:
                    view = wait_for(
                        lambda: {s["id"]: s for s in state(srv)["streams"]}.get("doomed"),
                        what="the doomed stream to be seen",
                    )
                    wait_for(lambda: state(srv)["streams"][0]["health"]["received_s"] > 0)
                    assert view["connected"] and "doomed" in open_ids(srv)["ppg"]
                    proc.kill()
                    proc.wait(10)
                    wait_for(lambda: "doomed" not in open_ids(srv)["ppg"], what="reclaim")
                if i == 6:
                    d = ServeClient(srv.url, stream_id="dropped")
                    d.open("ppg-ecg", channels=["PLETH", "II"], sample_rate=125)
                    d.send(np.full((125, 2), 0.5))
                    assert "dropped" in wait_for(lambda: open_ids(srv)["ppg-ecg"])
                    d.abort()
                    wait_for(lambda: "dropped" not in open_ids(srv)["ppg-ecg"], what="reclaim")
            events += c.close()
    finally:
        if proc.poll() is None:
            proc.kill()
    st = state(srv)
    assert st["server"]["streams"] == 0
    views = {s["id"]: s for s in st["streams"]}
    assert not views["doomed"]["connected"] and not views["dropped"]["connected"]
    assert open_ids(srv) == {"tone": [], "ppg": [], "ppg-ecg": []}
    ref = KwsRef(tone, SR)
    for b in blocks:
        ref.push(b)
    ref.check(events, "steady")
    assert len([e for e in events if e["type"] == "detection"]) == len(EVENTS)


@pytest.mark.slow
def test_bad_input_is_an_error_on_that_stream_only(srv, tone):
    """Malformed frames, JSON, ops, NaN audio and a sample beyond the model's bound each
    get a one-line error on their own stream, which stays open and loses nothing: its
    events equal the stream of its good blocks alone; a stream beside it is untouched;
    bad opens are refused with the reason and leave no stream behind."""
    x = tone_signal(SR, seed=8).astype(np.float32)
    good = cut(x, 1000)
    with ServeClient(srv.url, stream_id="bad") as bad, ServeClient(srv.url) as other:
        bad.open("tone", sample_rate=SR, overflow="wait")
        other.open("tone", sample_rate=SR, overflow="wait")
        assert other.stream_id.startswith("s")  # an id of the server's
        faults = [
            b"\x00\x01\x02",  # not whole float32 rows
            "not json",
            json.dumps({"op": "dance"}),
            json.dumps({"op": "samples", "data": [[0.1, 0.2], [0.3, 0.4]]}),  # 2 columns
            json.dumps({"op": "samples", "data": "x"}),
            json.dumps({"op": "open", "model": "tone"}),
            np.array([0.1, np.nan, 0.2], "<f4").tobytes(),  # a NaN in audio
            np.array([0.1, 1e30], "<f4").tobytes(),  # beyond the input bound
        ]
        events, other_events = [], []
        for i, b in enumerate(good):
            bad.send(b)
            other.send(b)
            if i < len(faults):
                bad.send_raw(faults[i])
            events += bad.drain()
            other_events += other.drain()
        events += bad.close()
        other_events += other.close()
        assert bad.closed["stats"]["errors"] == len(faults)
    errs = [e["message"] for e in events if e["type"] == "error"]
    assert len(errs) == len(faults), errs
    assert all(m and "\n" not in m for m in errs)
    assert "float32" in errs[0] and "JSON" in errs[1] and "unknown op" in errs[2]
    assert "already open" in errs[5] and "refused" in errs[6] and "refused" in errs[7]
    ref = KwsRef(tone, SR)
    for b in good:
        ref.push(b)
    ref.check(events, "bad")
    ref.check(other_events, "other")
    with ServeClient(srv.url) as quiet:  # scores off: the detections alone
        quiet.open("tone", sample_rate=SR, overflow="wait", scores=False)
        for b in good:
            quiet.send(b)
        quiet_events = quiet.close()
    assert {e["type"] for e in quiet_events} == {"detection"}
    ref.check(quiet_events + [e for e in other_events if e["type"] == "scores"], "quiet")
    assert not [e for e in other_events if e["type"] == "error"]
    refusals = [
        (dict(model="nope"), "no model 'nope'"),
        (dict(model="ppg", sample_rate=125), "channels"),
        (dict(model="ppg", channels=["ECG-ONLY"], sample_rate=125), "no model for channels"),
        (dict(model="tone", alarms="hr>120"), "alarms are for vitals"),
        (dict(model="ppg", channels=["PLETH"], sample_rate=125, alarms="hr>>"), "hr>>"),
        (dict(model="tone", sample_rate=-5), "sample_rate"),
        (dict(model="tone", overflow="maybe"), "overflow"),
        (dict(model="tone", scores="no"), "scores must be true or false"),
    ]
    for kw, why in refusals:
        with ServeClient(srv.url) as c, pytest.raises(ServeClientError, match=why):
            c.open(**kw)
    for sid in ("a b", "-x", "y" * 65):
        with ServeClient(srv.url, stream_id=sid) as c, pytest.raises(ServeClientError, match="id"):
            c.open("tone", sample_rate=SR)
    with ServeClient(srv.url) as c:  # samples before the open
        c.send_raw(np.zeros(4, "<f4").tobytes())
        assert "open the stream first" in c.recv(10)["message"]
        c.open("tone", sample_rate=SR)
        with ServeClient(srv.url, stream_id=c.stream_id) as twin:
            with pytest.raises(ServeClientError, match="already open"):
                twin.open("tone", sample_rate=SR)
        c.close()
    wait_for(lambda: state(srv)["server"]["streams"] == 0)
    assert open_ids(srv) == {"tone": [], "ppg": [], "ppg-ecg": []}


def test_stream_cap_is_a_clear_refusal(tone):
    with ServerThread(StreamServer([kws_host(tone, "tone")], port=0, max_streams=2)) as s:
        a, b, c = ServeClient(s.url), ServeClient(s.url), ServeClient(s.url)
        a.open("tone", sample_rate=SR)
        b.open("tone", sample_rate=SR)
        with pytest.raises(ServeClientError, match="server full: 2 streams"):
            c.open("tone", sample_rate=SR)
        a.close()
        wait_for(lambda: state(s)["server"]["streams"] == 1)
        assert c.open("tone", sample_rate=SR)["type"] == "opened"  # room again
        b.close()
        c.close()


def test_two_banks_of_one_model_share_its_streams(tone):
    """workers: two banks of one model (one name) take the streams in turn, step in their
    own threads, and each stream's events still equal the stream alone."""
    server = StreamServer([kws_host(tone, "tone"), kws_host(tone, "tone")], port=0)
    x = tone_signal(SR, seed=5)[: 4 * SR].astype(np.float32)
    with ServerThread(server) as s:
        clients = [ServeClient(s.url, stream_id=f"w{i}") for i in range(4)]
        for c in clients:
            c.open("tone", sample_rate=SR, overflow="wait")
        banks = s.call(lambda: [sorted(h.bank.ids()) for h in s.server.shards["tone"]])
        assert banks == [["w0", "w2"], ["w1", "w3"]]
        events = {c.stream_id: [] for c in clients}
        for b in cut(x, 800):
            for c in clients:
                c.send(b)
                events[c.stream_id] += c.drain()
        for c in clients:
            events[c.stream_id] += c.close()
        hosts = state(s)["server"]["hosts"]
        assert [(h["name"], h["shard"]) for h in hosts] == [("tone", 0), ("tone", 1)]
        assert all(h["steps"] > 0 for h in hosts)
    ref = KwsRef(tone, SR)
    for b in cut(x, 800):
        ref.push(b)
    for sid, evs in events.items():
        ref.check(evs, sid)


def test_a_client_sending_too_fast_loses_blocks_and_is_told(tone):
    """overflow "drop": a bed that sends 40 s at once into an inbox of 4 blocks (the
    batcher waits up to 1 s while another stream is idle) keeps 4, drops the rest, is
    told how many, and keeps the bed's time: the dropped seconds are a gap, the
    estimates run to second 40."""
    server = StreamServer(
        [vitals_host("ppg", [shipped(m) for m in PPG])], port=0, budget_ms=1000, queue_blocks=4
    )
    with ServerThread(server) as s:
        with ServeClient(s.url) as idle, ServeClient(s.url, stream_id="fast") as c:
            idle.open("ppg", channels=["PLETH"], sample_rate=125)
            c.open("ppg", channels=["PLETH"], sample_rate=125)
            for b in cut(bed(40, 125, ["PLETH"], 9), 125):
                c.send(b)
            events = c.close()
            idle.close()
        told = sum(e["blocks"] for e in events if e["type"] == "dropped")
        dropped = c.closed["stats"]["dropped_blocks"]
        assert 30 <= dropped <= 36 and told == dropped
        est = [e for e in events if e["type"] == "estimate"]
        assert [e["t"] for e in est] == list(range(1, 41))
        assert est[-1]["status"] == {"hr": "gap", "rr": "gap"}


@pytest.mark.slow
def test_a_client_that_does_not_read_does_not_stall_the_others(tone):
    """A client that never reads (its socket buffer full): its scores wait in a bounded
    outbox, the oldest dropped and counted, never its detections; a stream beside it is
    served all along. Once it reads, it gets every detection of its stream."""
    server = StreamServer(
        [kws_host(tone, "tone")],
        port=0,
        budget_ms=0,
        out_queue=8,
        queue_blocks=1,
        send_buffer=4096,
        write_limit=1024,
    )
    x = tone_signal(SR, seed=11).astype(np.float32)
    blocks = cut(x, 80)  # 10 ms blocks, one a step: a scores event every 10 ms
    with ServerThread(server) as s:
        from websockets.sync.client import connect

        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", s.server.port))
        stalled = connect(s.url + "?id=stalled", sock=sock, max_queue=1, legacy=True)
        stalled.send(
            json.dumps(
                {
                    "op": "open",
                    "model": "tone",
                    "sample_rate": SR,
                    "id": "stalled",
                    "overflow": "wait",
                }
            )
        )
        for b in blocks:
            stalled.send(b.astype("<f4").tobytes())

        def stalled_view(key=None):
            v = next(v for v in state(s)["streams"] if v["id"] == "stalled")
            return v if key is None or key(v) else None

        wait_for(
            lambda: stalled_view(lambda v: v["health"]["received_s"] >= len(x) / SR - 1e-9),
            what="all the stalled stream's input",
        )
        view = wait_for(
            lambda: stalled_view(lambda v: v["health"]["dropped_events"] > 0), what="dropped scores"
        )
        outbox = s.call(lambda: len(s.server.streams["stalled"].outbox))
        assert outbox <= 8
        # a stream beside it is served meanwhile, exactly
        r = stream_blocks(s.url, cut(x, 400), model="tone", sample_rate=SR, stream_id="ok")
        ref = KwsRef(tone, SR)
        for b in cut(x, 400):
            ref.push(b)
        ref.check(r.events, "ok")
        assert view["connected"]
        # the stalled client reads at last: every detection is there
        stalled.send(json.dumps({"op": "close"}))
        got = []
        while True:
            ev = json.loads(stalled.recv(20))
            if ev["type"] == "closed":
                break
            got.append(ev)
        stalled.close()
        assert ev["stats"]["dropped_events"] > 0
        dets = [(e["t"], e["label"]) for e in got if e["type"] == "detection"]
        assert dets == [(t, k) for t, k, _ in ref.detections] and len(dets) == len(EVENTS)


def test_token_is_enforced(tone):
    with pytest.raises(ServeError, match="token"):
        StreamServer([kws_host(tone, "tone")], host="0.0.0.0", port=0)
    server = StreamServer([kws_host(tone, "tone")], port=0, token="s3cret")
    with ServerThread(server) as s:
        with ServeClient(s.url) as c:  # no token anywhere: refused, connection closed
            with pytest.raises(ServeClientError, match="unauthorized"):
                c.open("tone", sample_rate=SR)
            with pytest.raises(ServeClientError, match="closed"):
                c.recv(10)
        with pytest.raises(ServeClientError, match="401"):
            ServeClient(s.url, token="wrong")  # a wrong one: refused at the handshake
        with ServeClient(s.url) as c:  # in the open message
            with pytest.raises(ServeClientError, match="unauthorized"):
                c.open("tone", sample_rate=SR, token="nope")
        with ServeClient(s.url) as c:
            assert c.open("tone", sample_rate=SR, token="s3cret")["type"] == "opened"
            with ServeClient(s.url, token="s3cret") as d:  # in the handshake
                assert d.open("tone", sample_rate=SR)["type"] == "opened"
                assert get(s.http + "/api/state")[0] == 401
                assert get(s.http + "/api/state?token=nope")[0] == 401
                assert state(s, token="s3cret")["server"]["streams"] == 2
                h = {"Authorization": "Bearer s3cret"}
                assert get(s.http + "/api/state", h)[0] == 200
                status, headers, _ = get(s.http + "/?token=s3cret")  # the page's cookie
                cookie = headers["Set-Cookie"].split(";")[0]
                assert status == 200 and cookie == "ls_token=s3cret"
                assert get(s.http + "/api/state", {"Cookie": cookie})[0] == 200
                assert "Set-Cookie" not in get(s.http + "/")[1]
                d.close()
            c.close()


# =============================================================================== HTTP


def raw_get(srv, path: str) -> tuple[int, str, bytes]:
    """A GET with the path sent as it is (no client-side normalisation of ``..``)."""
    conn = http.client.HTTPConnection("127.0.0.1", srv.server.port, timeout=10)
    conn.putrequest("GET", path, skip_host=False, skip_accept_encoding=True)
    conn.endheaders()
    r = conn.getresponse()
    out = r.status, r.getheader("Content-Type") or "", r.read()
    conn.close()
    return out


def test_http_dashboard_files_and_state(srv):
    with ServeClient(srv.url, stream_id="bed-9") as c, ServeClient(srv.url) as k:
        c.open("ppg", channels=["PLETH"], sample_rate=125, alarms="hr>60:hold=1", overflow="wait")
        k.open("tone", sample_rate=SR)
        for b in cut(bed(36, 125, ["PLETH"], 12), 125):
            c.send(b)
        k.send(tone_signal(SR, seed=1)[: int(2.5 * SR)].astype(np.float32))
        wait_for(lambda: len(c.drain()) or None, what="an estimate")

        def bed9():
            views = {v["id"]: v for v in state(srv)["streams"]}
            v = views.get("bed-9")
            return v if v and v["stream_time_s"] >= 36 else None

        view = wait_for(bed9, what="36 s of bed-9 on the dashboard")

        def kws_detected():  # the keyword stream is stepped apart from the bed: wait for it too
            views = {v["id"]: v for v in state(srv)["streams"]}
            return views.get(k.stream_id, {}).get("detections")

        wait_for(kws_detected, what="a detection of the keyword stream on the dashboard")
        st = state(srv)
        assert st["server"]["streams"] == 2
        assert set(st["server"]["models"]) == {"tone", "ppg", "ppg-ecg"}
        assert {"time", "uptime_s"} <= set(st["server"])
        ids = {v["id"] for v in st["streams"] if v["connected"]}
        assert ids == {"bed-9", k.stream_id}
        assert view["task"] == "vitals" and view["model"] == "ppg" and view["connected"]
        assert view["health"]["received_s"] == 36.0 and view["health"]["dropped_blocks"] == 0
        assert set(view["health"]) >= {
            "received_s",
            "lag_ms",
            "dropped_blocks",
            "errors",
            "last_seen_s",
        }
        hr = view["vitals"]["HR"]
        assert hr["units"] == "bpm" and hr["valid"] and hr["value"] > 0
        assert len(hr["history"]) == 36 and hr["history"][-1] == [36.0, hr["value"]]
        assert hr["history"][0][1] is None  # warming up: not valid, no value drawn
        assert [(a["name"], a["vital"]) for a in view["alarms"]] == [("hr>60", "HR")]
        assert 32 <= view["alarms"][0]["since_s"] <= 36
        kv = next(v for v in st["streams"] if v["id"] == k.stream_id)
        assert kv["task"] == "kws" and kv["detections"] and kv["vitals"] == {}
        assert set(kv["detections"][0]) == {"t", "label", "score"}
        c.close()
        k.close()
    # the dashboard's files, and nothing outside apps/serve/web
    status, kind, body = raw_get(srv, "/")
    index = ROOT / "apps" / "web" / "index.html"
    assert status == 200 and kind.startswith("text/html")
    if index.is_file():
        assert body == index.read_bytes()
    for name in sorted(p.name for p in (ROOT / "apps" / "web").glob("*.js")):
        status, kind, body = raw_get(srv, f"/web/{name}")
        assert status == 200 and kind.startswith("text/javascript")
    for path in (
        "/web/../pyproject.toml",
        "/web/%2e%2e/pyproject.toml",
        "/web/..%2fserve.py",
        "/web//etc/passwd",
        "/web/./index.html",
    ):
        status, _, body = raw_get(srv, path)
        assert status == 403 and b"project" not in body, path
    assert raw_get(srv, "/../pyproject.toml")[0] == 404
    assert raw_get(srv, "/web/nothing.js")[0] == 404
    st = state(srv)
    assert st["server"]["streams"] == 0
    assert not next(v for v in st["streams"] if v["id"] == "bed-9")["connected"]


# ========================================================================= scale-out


def start_server(args: list[str]) -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "liquid_stream.cli", "serve", "--port", "0", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    ready, _, _ = select.select([proc.stdout], [], [], 60)
    line = proc.stdout.readline() if ready else ""
    if not line.startswith("serving "):
        proc.kill()
        raise AssertionError(f"serve did not start: {line!r} {proc.stderr.read()}")
    return proc, line.split()[1]


@pytest.mark.slow
def test_two_server_processes_behind_a_client_side_shard(tone):
    """Two `liquid-stream serve` processes; eight streams spread over them by a stable
    hash of their ids: each lands where shard() says, on that server only, and its
    events equal the stream alone."""
    args = ["--kws", f"{tone}=tone", "--vitals", "ppg=" + ",".join(PPG)]
    procs = [start_server(args) for _ in range(2)]
    urls = [u for _, u in procs]
    try:
        # two beds and two calls per server, from the first ids that land there: eight fixed
        # ids would all land on one server for 2 in 256 draws of the two (random) ports
        def two_each(prefix: str) -> list[str]:
            ids = [f"{prefix}-{i}" for i in range(64)]
            return [sid for u in urls for sid in [i for i in ids if shard(i, urls) == u][:2]]

        ids = two_each("bed") + two_each("call")
        assert len(ids) == 8
        where = {sid: shard(sid, urls) for sid in ids}
        assert where == {sid: shard(sid, list(reversed(urls))) for sid in ids}  # order-free
        assert set(where.values()) == set(urls)  # both servers get streams
        got, errors = {}, []
        data = {sid: bed(20, 125, ["PLETH"], 20 + i) for i, sid in enumerate(ids[:4])}
        data |= {
            sid: tone_signal(SR, seed=30 + i).astype(np.float32) for i, sid in enumerate(ids[4:])
        }

        def client(sid):
            try:
                vit = sid.startswith("bed")
                got[sid] = stream_blocks(
                    where[sid],
                    cut(data[sid], 125 if vit else 800),
                    model="ppg" if vit else "tone",
                    sample_rate=125 if vit else SR,
                    channels=["PLETH"] if vit else None,
                    stream_id=sid,
                )
            except Exception as e:  # noqa: BLE001
                errors.append((sid, repr(e)))

        threads = [threading.Thread(target=client, args=(sid,)) for sid in ids]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not errors, errors
        for url in urls:
            http = url.replace("ws://", "http://").removesuffix("/stream")
            st = json.loads(get(http + "/api/state")[2])
            assert {v["id"] for v in st["streams"]} == {s for s in ids if where[s] == url}
            assert st["server"]["streams"] == 0
        for sid in ids:
            if sid.startswith("bed"):
                want = vitals_ref(PPG, ["PLETH"], 125, None, cut(data[sid], 125))
                check_vitals(got[sid].events, want, sid)
            else:
                ref = KwsRef(tone, SR)
                for b in cut(data[sid], 800):
                    ref.push(b)
                ref.check(got[sid].events, sid)
    finally:
        for proc, _ in procs:
            proc.send_signal(signal.SIGTERM)
        for proc, _ in procs:
            try:
                assert proc.wait(20) == 0
            finally:
                if proc.poll() is None:
                    proc.kill()


# ========================================================================= stream-to


@pytest.mark.slow
def test_stream_to_prints_the_events(srv, tone, tmp_path):
    wav = write_tone_wav(tmp_path / "tones.wav")
    r = CliRunner().invoke(
        stream_to_cmd, [srv.url, "--input", str(wav), "--fast", "--model", "tone", "--id", "cli-1"]
    )
    assert r.exit_code == 0, r.output
    ref = KwsRef(tone, SR)
    ref.push(tone_signal(SR).astype(np.float32))
    lines = [
        ln.split()
        for ln in r.output.splitlines()
        if ln.endswith(tuple("0123456789")) and " s  " in ln
    ]
    assert [(float(ln[0]), " ".join(ln[2:-1])) for ln in lines] == [
        (round(t, 3), k) for t, k, _ in ref.detections
    ]
    assert "server dropped 0 block(s), 0 error(s)" in r.output
    rec = write_record(tmp_path / "rec", "bidmc07", seconds=40)
    r = CliRunner().invoke(
        stream_to_cmd,
        [srv.url, "--record", str(rec), "--fast", "--json", "--alarm", "hr>80:hold=2"],
    )
    assert r.exit_code == 0, r.output
    events = [json.loads(ln) for ln in r.output.splitlines() if ln.startswith("{")]
    from liquid_stream.apps.vitals.record import RecordSource

    src = RecordSource(rec)
    want = vitals_ref(PPG_ECG, src.channels, src.fs, "hr>80:hold=2", list(src.chunks(None)))
    check_vitals(events, want, "record")
    r = CliRunner().invoke(stream_to_cmd, [srv.url, "--record", str(rec), "--model", "nope"])
    assert r.exit_code == 1 and "no model 'nope'" in r.output


def test_async_client(srv, tone):
    """The asyncio client (the benchmark's): several streams from one loop."""
    import asyncio

    x = tone_signal(SR, seed=3)[: 3 * SR].astype(np.float32)

    async def one(i):
        c = await AsyncServeClient.connect(srv.url, stream_id=f"async-{i}")
        await c.open("tone", sample_rate=SR, overflow="wait")
        for b in cut(x, 1600):
            await c.send(b)
        return await c.close()

    async def main():
        return await asyncio.gather(*(one(i) for i in range(3)))

    ref = KwsRef(tone, SR)
    for b in cut(x, 1600):
        ref.push(b)
    for i, events in enumerate(asyncio.run(main())):
        ref.check(events, f"async-{i}")


# =============================================================================== LSL


def replay_in_background(rec, name: str, speed: float, wait_s: float):
    """Publish WFDB record ``rec`` as the live LSL outlet ``name`` on a daemon thread:
    (thread, stop event, the exceptions it raised)."""
    stop, failed = threading.Event(), []

    def replay():
        try:
            lsl.replay_record(rec, name=name, speed=speed, wait_for_consumer=wait_s, stop=stop)
        except BaseException as e:  # noqa: BLE001 - reported by the caller
            failed.append(e)

    thread = threading.Thread(target=replay, daemon=True)
    thread.start()
    return thread, stop, failed


@pytest.mark.slow
def test_an_lsl_stream_is_a_bed_equal_to_its_record(srv, tmp_path):
    """serve --lsl: a WFDB record replayed as a live LSL outlet (this machine only) feeds
    a bed; its estimates equal the record read from its file (1-s blocks), and the bed
    ends with the stream."""
    from liquid_stream.apps.vitals.record import RecordSource

    rec = write_record(tmp_path, "bidmc05", seconds=40, nan_spans=[("PLETH", 12, 1.0)])
    name = f"lstest-serve-{uuid.uuid4().hex[:8]}"
    thread, stop, failed = replay_in_background(rec, name, speed=20, wait_s=20)
    events: list[dict] = []
    try:
        sid = srv.run(srv.server.add_lsl(name, alarms="hr>80:hold=2", on_event=events.append))
        assert sid == f"lsl-{name}"

        def ended():
            views = [v for v in state(srv)["streams"] if v["id"] == sid]
            return views[0] if views and not views[0]["connected"] else None

        view = wait_for(ended, timeout=60, what="the LSL bed to end with its stream")
    finally:
        stop.set()
        thread.join(20)
    assert not failed, failed
    src = RecordSource(rec)
    want = vitals_ref(PPG_ECG, src.channels, src.fs, "hr>80:hold=2", list(src.chunks(None)))
    check_vitals(srv.call(lambda: list(events)), want, "lsl")
    assert view["model"] == "ppg-ecg" and view["health"]["received_s"] == 40.0
    assert sid not in open_ids(srv)["ppg-ecg"]
    with pytest.raises(ValueError, match="no-such-stream"):
        srv.run(srv.server.add_lsl(f"no-such-stream-{uuid.uuid4().hex[:6]}", timeout=0.5))


@pytest.mark.slow
def test_serve_cli_lsl_flag_opens_a_bed_fed_by_the_stream(tmp_path):
    """`liquid-stream serve --lsl NAME` (the flag, not the API): the server process finds the
    live LSL outlet on this machine, says which bed it feeds, and the bed's state reaches
    the record's length; an --lsl stream that does not exist is a one-line error."""
    rec = write_record(tmp_path, "bidmc06", seconds=30)
    name = f"lstest-cli-{uuid.uuid4().hex[:8]}"
    thread, stop, failed = replay_in_background(rec, name, speed=10, wait_s=30)
    proc, url = start_server(
        [
            "--vitals",
            "ppg-ecg=" + ",".join(PPG_ECG),
            "--lsl",
            name,
            "--lsl-timeout",
            "20",
            "--lsl-alarm",
            "hr>80:hold=2",
        ]
    )
    try:
        http = url.replace("ws://", "http://").removesuffix("/stream")

        def ended():
            views = [
                v
                for v in json.loads(get(http + "/api/state")[2])["streams"]
                if v["id"] == f"lsl-{name}"
            ]
            return views[0] if views and not views[0]["connected"] else None

        view = wait_for(ended, timeout=60, what="the --lsl bed to end with its stream")
    finally:
        stop.set()
        thread.join(20)
        proc.send_signal(signal.SIGTERM)
        try:
            assert proc.wait(20) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
    assert not failed, failed
    assert f"LSL stream {name!r} -> bed lsl-{name}" in proc.stderr.read()
    assert view["model"] == "ppg-ecg" and view["health"]["received_s"] == 30.0
    missing = subprocess.run(
        [
            sys.executable,
            "-m",
            "liquid_stream.cli",
            "serve",
            "--port",
            "0",
            "--vitals",
            "ppg=" + ",".join(PPG),
            "--lsl",
            "no-such-stream-x1",
            "--lsl-timeout",
            "0.5",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert missing.returncode == 1
    errors = [ln for ln in missing.stderr.splitlines() if ln.strip()]
    assert len(errors) == 1 and errors[0].startswith("Error: --lsl no-such-stream-x1: "), errors


@pytest.mark.slow
def test_stream_to_device_streams_a_microphone(srv, tmp_path):
    """`liquid-stream stream-to URL --device pulse`: a PulseAudio virtual microphone (null
    sink + remap source) plays the tone "keywords"; the server's detections come back in
    the played order with the played spacing (the stream's clock starts before playback, so
    gaps are compared), and Ctrl-C ends the stream with the summary line."""
    import shutil

    if shutil.which("pulseaudio") is None or shutil.which("paplay") is None:
        pytest.skip("pulseaudio / paplay not installed (apt-get install pulseaudio-utils)")
    script = ROOT / "scripts" / "virtual-mic.sh"
    wav = write_tone_wav(tmp_path / "mic.wav", SR, events=EVENTS, seconds=EVENTS[-1][0] + 1.2)
    started = subprocess.run([script, "start"], capture_output=True, text=True, timeout=30)
    assert started.returncode == 0, started.stderr
    device = started.stdout.strip().splitlines()[-1]
    proc, err_lines = None, []
    try:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "liquid_stream.cli",
                "stream-to",
                srv.url,
                "--device",
                device,
                "--model",
                "tone",
                "--id",
                "mic-1",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env={**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"},
            preexec_fn=sigint_default,
        )
        opened = threading.Event()

        def read_err():
            for line in proc.stderr:
                err_lines.append(line)
                if line.startswith("stream mic-1 -> tone"):
                    opened.set()

        reader = threading.Thread(target=read_err, daemon=True)
        reader.start()
        assert opened.wait(30), "".join(err_lines)
        subprocess.run([script, "play", str(wav)], check=True, timeout=60)
        time.sleep(1.0)
        proc.send_signal(signal.SIGINT)
        proc.wait(30)  # a few lines of output: the pipe cannot fill
        out = proc.stdout.read()
        reader.join(10)  # the reader thread owns stderr to its end
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
        subprocess.run([script, "stop"], capture_output=True, timeout=30)
    summary = "".join(err_lines)
    assert proc.returncode == 0, out + summary
    assert "server dropped 0 block(s), 0 error(s)" in summary, summary
    lines = [
        ln.split() for ln in out.splitlines() if ln.endswith(tuple("0123456789")) and " s  " in ln
    ]
    dets = [(float(ln[0]), " ".join(ln[2:-1])) for ln in lines]
    assert [k for _, k in dets] == [w for _, _, w in EVENTS], out
    gaps = np.diff([t for t, _ in dets]) - np.diff([s for s, _, _ in EVENTS])
    assert np.abs(gaps).max() < 0.1, dets
