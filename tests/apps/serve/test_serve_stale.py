"""No data: a stream that stays connected but stops sending is marked stale in ``/api/state``
by the server itself (issue 61, item 1), without any page: real server on 127.0.0.1
(:class:`StreamServer` with ``stale_s=2`` in a :class:`ServerThread`), real WebSocket
clients (:class:`ServeClient`), the shipped ``vitals-ppg`` models and keyword spotter.

A frozen client here is a :class:`ServeClient` that stops sending and keeps its socket
open (its websockets thread still answers the server's pings, so the connection stays
up, as a stuck gateway's or a hung sensor's would). The stated time is the server's
``stale_s``; the margin covers the state cache (0.2 s) and the 50-ms polls.

Dashboard side (the tile reading NO DATA in a real browser): tests/apps/serve/test_dashboard.py.
"""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest
from fixtures_vitals import signals
from test_serve import cut, state, wait_for

from liquid_stream.apps.serve.client import ServeClient
from liquid_stream.apps.serve.server import (
    ServeError,
    ServerThread,
    StreamServer,
    kws_host,
    vitals_host,
)
from liquid_stream.models import shipped

os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")  # before the first session (test_serve)

STALE_S = 2.0
MARGIN_S = 2.0  # state cache, polling, a loaded machine
FS = 125
KWS_SR = 16000
NO_DATA = f"no data for more than {STALE_S:g} s"


def pleth(seconds: float, seed: int) -> list[np.ndarray]:
    """1-s blocks of the fixture's PLETH (HR 70 -> 110 bpm), as (125, 1) rows."""
    return cut(signals(seconds, FS, seed)["PLETH"][:, None], FS)


def views(srv) -> dict[str, dict]:
    return {v["id"]: v for v in state(srv)["streams"]}


@pytest.fixture(scope="module")
def srv():
    hosts = [
        vitals_host("ppg", [shipped("vitals-ppg-hr"), shipped("vitals-ppg-rr")]),
        kws_host(shipped("kws-sc10"), "kws"),
    ]
    with ServerThread(StreamServer(hosts, port=0, stale_s=STALE_S)) as s:
        yield s


@pytest.mark.slow
def test_a_frozen_stream_is_no_data_in_the_state_and_recovers(srv):
    """bed-f (alarm ``hr>40`` active) and a keyword stream stop sending, sockets open, while
    bed-live goes on: within stale_s plus a margin the state marks both stale (never
    before stale_s after their last block), bed-f with no valid vital, no clinical alarm
    and the one technical alarm "no data for more than 2 s"; a stream that opened and
    never sent is stale too; bed-live never is. When they send again they are live, bed-f
    with its alarm back; a closed stream is never stale."""
    st = state(srv)
    assert st["server"]["stale_s"] == STALE_S
    blocks = pleth(120, seed=3)
    live_blocks = pleth(120, seed=4)
    with (
        ServeClient(srv.url, stream_id="bed-f") as bed,
        ServeClient(srv.url, stream_id="bed-live") as live,
        ServeClient(srv.url, stream_id="call-f") as call,
        ServeClient(srv.url, stream_id="bed-mute") as mute,
    ):
        bed.open("ppg", channels=["PLETH"], sample_rate=FS, alarms="hr>40:hold=1", overflow="wait")
        live.open("ppg", channels=["PLETH"], sample_rate=FS, overflow="wait")
        call.open("kws", sample_rate=KWS_SR, scores=False)
        sent = {}  # the time each stream's last block started on its way
        for b in blocks[:40]:
            sent["bed-f"] = time.time()
            bed.send(b)
        rng = np.random.default_rng(0)
        for _ in range(10):  # 1 s of quiet noise in 100-ms blocks
            sent["call-f"] = time.time()
            call.send(rng.normal(0, 0.01, KWS_SR // 10).astype(np.float32))

        stop_live, live_states = threading.Event(), []

        def keep_sending():  # bed-live: a block every 0.2 s all along
            for b in live_blocks:
                if stop_live.is_set():
                    return
                live.send(b)
                stop_live.wait(0.2)

        feeder = threading.Thread(target=keep_sending, daemon=True)
        feeder.start()
        try:
            # bed-f is valid and in alarm before it freezes
            def in_alarm():
                v = views(srv).get("bed-f")
                ok = v and v["stream_time_s"] >= 40 and v["vitals"]["HR"]["valid"]
                return v if ok and [a["name"] for a in v["alarms"]] == ["hr>40"] else None

            before = wait_for(in_alarm, 60, "bed-f valid, in alarm, at 40 s")
            assert not before["stale"] and before["technical"] == []
            sent["bed-mute"] = time.time()
            mute.open("ppg", channels=["PLETH"], sample_rate=FS)  # opens, never sends
            first = {}  # the time each was first seen stale

            def stale_all():
                st = views(srv)
                now = time.time()
                live_states.append(st["bed-live"]["stale"])
                for sid in sent:
                    if st[sid]["stale"]:
                        first.setdefault(sid, now)
                return st if len(first) == len(sent) else None

            st = wait_for(stale_all, STALE_S + MARGIN_S + 1, "bed-f, call-f, bed-mute stale")
            for sid, t0 in sent.items():  # within stale_s + the margin, never before stale_s
                assert STALE_S < first[sid] - t0 <= STALE_S + MARGIN_S, (sid, first[sid] - t0)
            f = st["bed-f"]
            assert f["connected"] and f["health"]["last_data_s"] > STALE_S
            assert f["alarms"] == [] and f["technical"] == [NO_DATA]
            assert not any(v["valid"] for v in f["vitals"].values())
            assert f["vitals"]["HR"]["value"] == before["vitals"]["HR"]["value"]  # kept, invalid
            assert f["health"]["received_s"] == 40.0  # nothing else changed
            c = st["call-f"]
            assert c["task"] == "kws" and c["technical"] == [NO_DATA] and c["alarms"] == []
            assert st["bed-mute"]["technical"] == [NO_DATA]
            assert st["bed-mute"]["health"]["received_s"] == 0.0
            for _ in range(5):  # it lasts while they send nothing
                time.sleep(0.3)
                st = views(srv)
                assert st["bed-f"]["stale"] and st["call-f"]["stale"]
                live_states.append(st["bed-live"]["stale"])

            # data again: live within the margin, bed-f with valid values and its alarm back
            t_back = time.time()
            bed.send(blocks[40])
            call.send(rng.normal(0, 0.01, KWS_SR // 10).astype(np.float32))

            def back():
                st = views(srv)
                live_states.append(st["bed-live"]["stale"])
                f = st["bed-f"]
                ok = not f["stale"] and not st["call-f"]["stale"] and f["stream_time_s"] >= 41
                return st if ok else None

            st = wait_for(back, MARGIN_S + 1, "bed-f and call-f live again")
            assert time.time() - t_back <= MARGIN_S + 0.5
            f = st["bed-f"]
            assert [a["name"] for a in f["alarms"]] == ["hr>40"]
            assert f["vitals"]["HR"]["valid"] and NO_DATA not in f["technical"]
            assert f["health"]["last_data_s"] < STALE_S
            assert st["call-f"]["technical"] == []
        finally:
            stop_live.set()
            feeder.join(10)
        assert live_states and not any(live_states), "bed-live, sending all along, went stale"
        for c in (bed, live, call, mute):
            c.close()
    # a closed stream is never stale, however long ago its last block came
    time.sleep(STALE_S + 0.5)
    st = views(srv)
    for sid in ("bed-f", "call-f", "bed-mute", "bed-live"):
        assert not st[sid]["connected"] and not st[sid]["stale"], sid
        assert NO_DATA not in st[sid]["technical"]


def test_stale_s_must_be_positive():
    host = [kws_host(shipped("kws-sc10"), "kws")]
    for bad in (0, -1, float("nan"), float("inf")):
        with pytest.raises(ServeError, match="stale_s must be a positive"):
            StreamServer(host, stale_s=bad)
