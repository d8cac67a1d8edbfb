"""Why a tile shows no number, and the configured alarm limits (issue 61, item 4): through
``/api/state`` and in a real headless browser, against the real server.

``liquid-stream serve`` in-process (:class:`StreamServer` in a :class:`ServerThread` on
127.0.0.1) hosting the shipped ``vitals-ppg-ecg`` set (HR and RR models reading PLETH +
II, 32-s windows); beds fed by real clients (:class:`ServeClient`) with the synthetic
PLETH and II of tests/fixtures_vitals.py, one 1-s block at a time, the test waiting for
each second's estimate before it looks:

    bed-w  hr>120, rr<8:hold=3   warming up: "warming up, N s left", N = 32 s minus the
                                 seconds fed, counting down; then a number
    bed-l  hr>40:hold=1          36 s of good signal (valid, in alarm), then its II a
                                 flat line: "ECG lead off (II: flat line)" and no number,
                                 then II back: "recovering, N s left"
    bed-g  (none)                a 5-s gap on both channels: "no data (PLETH, II)",
                                 then warming up again from the gap
    bed-r  hr>120, rr<8:hold=3   the limits "> 120" / "< 8" on the tile and in the state

and, on a server of its own with ``stale_s=1.5``, a bed with no alarm rules that stops
sending: "no data". The browser and helpers are tests/apps/serve/test_dashboard.py's.
"""

from __future__ import annotations

import math
import os
import re
import time

import numpy as np
import pytest
from fixtures_vitals import signals
from test_dashboard import _browser_missing, css, get_state, one, wait_for
from test_dashboard import browser as chromium  # noqa: F401 - the page's fixture

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(_browser_missing() is not None, reason=str(_browser_missing())),
]

os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")

FS = 125
WINDOW_S = 32.0  # the shipped vitals models' window
LEAD_OFF = "ECG lead off (II: flat line)"
RULES_W = "hr>120,rr<8:hold=3"
WARMING = re.compile(r"^warming up, (\d+) s left$")


def bed_signal(seconds: int, seed: int, flat_ii=None) -> list[np.ndarray]:
    """1-s blocks of (PLETH, II); II held at 0.1 (a detached lead) over ``flat_ii`` s."""
    sig = signals(seconds, FS, seed)
    x = np.stack([sig["PLETH"], sig["II"]], 1)
    if flat_ii is not None:
        x[flat_ii[0] * FS : flat_ii[1] * FS, 1] = 0.1
    return [x[i : i + FS] for i in range(0, len(x), FS)]


def stream(base: str, sid: str) -> dict:
    return next(s for s in get_state(base)["streams"] if s["id"] == sid)


def at_second(base: str, sid: str, t: int) -> dict:
    """The stream's /api/state entry once its estimate of second ``t`` is in."""
    return wait_for(
        lambda: (s := stream(base, sid))["stream_time_s"] >= t and s, 20, f"{sid} at {t} s"
    )


def tile_vital(driver, sid: str, vital: str):
    tile = wait_for(lambda: css(driver, f'#beds .bed[data-id="{sid}"]'), 10, f"the {sid} tile")
    return one(tile[0], f'.vital[data-vital="{vital}"]')


def shown_reason(box) -> str:
    """The reason text the page shows under a vital ("" when hidden)."""
    r = one(box, ".reason")
    return r.text if r.is_displayed() else ""


@pytest.fixture(scope="module")
def ward():
    from liquid_stream.apps.serve.server import ServerThread, StreamServer, vitals_host
    from liquid_stream.models import shipped

    hosts = [vitals_host("ppg-ecg", [shipped("vitals-ppg-ecg-hr"), shipped("vitals-ppg-ecg-rr")])]
    with ServerThread(StreamServer(hosts, port=0, stale_s=60)) as srv:
        yield srv


@pytest.fixture(scope="module")
def page(ward, request):
    """The browser (test_dashboard's, here ``chromium``) showing the ward's page."""
    driver = request.getfixturevalue("chromium")
    driver.get(ward.http + "/")
    body = driver.find_element("tag name", "body")
    wait_for(lambda: body.get_attribute("data-state") == "live", 10, "the first good poll")
    return driver


def test_warming_up_counts_down_then_a_number(ward, page):
    """Before the window is full each vital says "warming up, N s left" (N = its window
    minus the seconds fed, in /api/state and on the page), N decreases as signal comes,
    no number is shown meanwhile although the model already outputs one; once 32 s are
    in, the number replaces the reason. The alarm limits are on the tile all along."""
    from liquid_stream.apps.serve.client import ServeClient

    blocks = bed_signal(40, seed=3)
    with ServeClient(ward.url, stream_id="bed-w") as c:
        c.open("ppg-ecg", channels=["PLETH", "II"], sample_rate=FS, alarms=RULES_W, overflow="wait")
        s = stream(ward.http, "bed-w")  # open, nothing sent: the whole window to go
        for name in ("HR", "RR"):
            v = s["vitals"][name]
            assert v["status"] == "warmup" and not v["valid"] and v["window_s"] == WINDOW_S
            assert v["reason"] == "warming up, 32 s left" and v["left_s"] == 32
        hr = tile_vital(page, "bed-w", "HR")
        wait_for(lambda: shown_reason(hr) == "warming up, 32 s left", 5, "32 s left, at once")

        seen = []  # (second, N on the page)
        sent = 0
        for upto in (4, 10, 17):
            for b in blocks[sent:upto]:
                c.send(b)
            sent = upto
            s = at_second(ward.http, "bed-w", upto)
            left = int(WINDOW_S) - upto
            for name in ("HR", "RR"):
                v = s["vitals"][name]
                assert v["reason"] == f"warming up, {left} s left", (upto, name, v)
                assert v["left_s"] == left and v["status"] == "warmup" and not v["valid"]
                assert v["value"] is not None  # the model has a value: it is not shown
            want = f"warming up, {left} s left"
            wait_for(lambda w=want: shown_reason(hr) == w, 3, f"'{want}' on the page")
            assert one(hr, ".value").text == "---" and hr.get_attribute("data-valid") == "false"
            assert hr.get_attribute("data-status") == "warmup"
            rr = tile_vital(page, "bed-w", "RR")
            assert shown_reason(rr) == want and one(rr, ".value").text == "---"
            seen.append((upto, int(WARMING.match(shown_reason(hr)).group(1))))
        counts = [n for _, n in seen]
        assert counts == sorted(counts, reverse=True) and len(set(counts)) == len(counts), seen

        for b in blocks[sent:34]:  # the window is full at 32 s: a number, no reason
            c.send(b)
        s = at_second(ward.http, "bed-w", 34)
        v = s["vitals"]["HR"]
        assert v["valid"] and v["status"] == "ok" and v["reason"] is None and v["left_s"] is None
        shown = str(math.floor(v["value"] + 0.5))  # Math.round
        wait_for(lambda: one(hr, ".value").text == shown, 3, f"HR {shown} on the page")
        assert hr.get_attribute("data-valid") == "true" and hr.get_attribute("data-status") == "ok"
        assert shown_reason(hr) == "" and hr.get_attribute("data-reason") == ""
        c.close()


def test_alarm_limits_on_the_tile_and_in_the_state(ward, page):
    """bed-w's rules (hr>120, rr<8:hold=3) are in /api/state (alarm_rules, and each vital's
    limits) and on its tile next to the value they watch: HR "> 120", RR "< 8"."""
    from liquid_stream.apps.serve.client import ServeClient

    with ServeClient(ward.url, stream_id="bed-r") as c:
        c.open("ppg-ecg", channels=["PLETH", "II"], sample_rate=FS, alarms=RULES_W)
        s = stream(ward.http, "bed-r")
        assert s["alarm_rules"] == [
            {
                "name": "hr>120",
                "vital": "HR",
                "op": ">",
                "threshold": 120.0,
                "hold_s": 5,
                "clear_level": 115.0,
                "units": "bpm",
                "text": "hr>120 (hold 5 s, clears < 115 bpm)",
            },
            {
                "name": "rr<8",
                "vital": "RR",
                "op": "<",
                "threshold": 8.0,
                "hold_s": 3,
                "clear_level": 11.0,
                "units": "breaths/min",
                "text": "rr<8 (hold 3 s, clears > 11 breaths/min)",
            },
        ]
        assert s["vitals"]["HR"]["limits"] == [{"name": "hr>120", "op": ">", "threshold": 120}]
        assert s["vitals"]["RR"]["limits"] == [{"name": "rr<8", "op": "<", "threshold": 8}]
        assert s["alarms"] == []  # configured, not active
        for name, want in (("HR", ("hr>120", "> 120")), ("RR", ("rr<8", "< 8"))):
            box = tile_vital(page, "bed-r", name)
            wait_for(lambda b=box: css(b, ".limit"), 3, f"the {name} limit on the tile")
            limits = css(box, ".limit")
            assert [(e.get_attribute("data-alarm"), e.text) for e in limits] == [want]
            assert limits[0].is_displayed() and "active" not in limits[0].get_attribute("class")
            # next to the value: in the vital's row, left of the number, on its lines
            lim, val = limits[0].rect, one(box, ".value").rect
            assert lim["x"] + lim["width"] <= val["x"] + 1, (lim, val)
            assert lim["y"] < val["y"] + val["height"] and lim["y"] + lim["height"] > val["y"]
        c.close()


def test_flat_ii_is_lead_off_and_no_number(ward, page):
    """bed-l valid and in alarm (hr>40) at 36 s; then its II a flat line: the technical
    alarm "ECG lead off (II: flat line)" is each vital's reason, in /api/state and on
    the page, never with a number; the active limit "> 40" is marked. II back: the
    window still covers the flat seconds, "recovering, N s left", still no number."""
    from liquid_stream.apps.serve.client import ServeClient

    blocks = bed_signal(48, seed=4, flat_ii=(36, 44))
    with ServeClient(ward.url, stream_id="bed-l") as c:
        c.open(
            "ppg-ecg",
            channels=["PLETH", "II"],
            sample_rate=FS,
            alarms="hr>40:hold=1",
            overflow="wait",
        )
        for b in blocks[:36]:
            c.send(b)
        s = at_second(ward.http, "bed-l", 36)
        assert s["vitals"]["HR"]["valid"] and s["vitals"]["HR"]["reason"] is None
        assert [a["name"] for a in s["alarms"]] == ["hr>40"] and s["technical"] == []
        hr = tile_vital(page, "bed-l", "HR")
        wait_for(lambda: hr.get_attribute("data-valid") == "true", 3, "bed-l HR valid")
        limit = one(hr, '.limit[data-alarm="hr>40"]')
        assert limit.text == "> 40"
        wait_for(lambda: "active" in limit.get_attribute("class").split(), 3, "> 40 active")

        for b in blocks[36:42]:
            c.send(b)
        s = at_second(ward.http, "bed-l", 42)
        assert s["technical"] == [LEAD_OFF]
        for name in ("HR", "RR"):
            v = s["vitals"][name]
            assert v["status"] == "nosignal" and not v["valid"], (name, v)
            assert v["reason"] == LEAD_OFF and v["left_s"] is None
        tile = one(page, '#beds .bed[data-id="bed-l"]')
        wait_for(lambda: shown_reason(hr) == LEAD_OFF, 3, "the lead-off reason on the page")
        for _ in range(6):  # while it lasts, no number
            for name in ("HR", "RR"):
                box = one(tile, f'.vital[data-vital="{name}"]')
                assert shown_reason(box) == LEAD_OFF
                assert one(box, ".value").text == "---"
                assert box.get_attribute("data-valid") == "false"
                assert box.get_attribute("data-status") == "nosignal"
            time.sleep(0.2)

        statuses = {}  # II back at 44 s: the window still covers flat seconds
        for t in range(43, 49):
            c.send(blocks[t - 1])
            statuses[t] = at_second(ward.http, "bed-l", t)["vitals"]["HR"]
        bad = max(t for t, v in statuses.items() if v["status"] == "nosignal")
        assert bad in (44, 45), {t: v["status"] for t, v in statuses.items()}
        after = [(t, v) for t, v in statuses.items() if t > bad]
        assert after, statuses
        for t, v in after:  # N: the window minus the seconds since the last flat one
            left = int(WINDOW_S) - (t - bad)
            assert v["status"] == "recovering" and not v["valid"], (t, v)
            assert v["left_s"] == left and v["reason"] == f"recovering, {left} s left", (t, v)
        want = after[-1][1]["reason"]
        wait_for(lambda: shown_reason(hr) == want, 3, f"'{want}' on the page")
        assert one(hr, ".value").text == "---" and hr.get_attribute("data-status") == "recovering"
        c.close()


def test_a_long_gap_is_no_data_then_warming_up_again(ward, page):
    """bed-g valid at 34 s, then 5 s with no samples on either channel (a long gap: the
    models are reset): "no data (PLETH, II)" and no number; then the count-down starts
    again from the gap, N = 32 s minus the seconds fed since it."""
    from liquid_stream.apps.serve.client import ServeClient

    blocks = bed_signal(44, seed=6)
    for b in blocks[34:39]:
        b[:] = np.nan
    with ServeClient(ward.url, stream_id="bed-g") as c:
        c.open("ppg-ecg", channels=["PLETH", "II"], sample_rate=FS, overflow="wait")
        for b in blocks[:39]:
            c.send(b)
        s = at_second(ward.http, "bed-g", 39)
        for name in ("HR", "RR"):
            v = s["vitals"][name]
            assert v["status"] == "gap" and not v["valid"] and v["reason"] == "no data (PLETH, II)"
        hr = tile_vital(page, "bed-g", "HR")
        wait_for(lambda: shown_reason(hr) == "no data (PLETH, II)", 3, "no data on the page")
        assert one(hr, ".value").text == "---" and hr.get_attribute("data-status") == "gap"
        for t in range(40, 44):
            c.send(blocks[t - 1])
            v = at_second(ward.http, "bed-g", t)["vitals"]["HR"]
            left = int(WINDOW_S) - (t - 39)
            assert v["status"] == "warmup" and v["reason"] == f"warming up, {left} s left", (t, v)
        wait_for(lambda: shown_reason(hr) == "warming up, 28 s left", 3, "28 s left on the page")
        assert one(hr, ".value").text == "---"
        c.close()


def test_a_stale_bed_says_no_data(page):
    """A bed with no alarm rules that stops sending, on a server with stale_s=1.5: its
    vitals say "no data" (not "warming up") in /api/state and on the page, no number,
    no limit on the tile; sending again brings the count-down back."""
    from liquid_stream.apps.serve.client import ServeClient
    from liquid_stream.apps.serve.server import ServerThread, StreamServer, vitals_host
    from liquid_stream.models import shipped

    hosts = [vitals_host("ppg", [shipped("vitals-ppg-hr"), shipped("vitals-ppg-rr")])]
    main = page.current_window_handle
    blocks = bed_signal(10, seed=5)
    with ServerThread(StreamServer(hosts, port=0, stale_s=1.5)) as srv:
        page.switch_to.new_window("tab")
        try:
            page.get(srv.http + "/")
            with ServeClient(srv.url, stream_id="bed-s") as c:
                c.open("ppg", channels=["PLETH"], sample_rate=FS, overflow="wait")
                for b in blocks[:5]:
                    c.send(b[:, :1])
                s = at_second(srv.http, "bed-s", 5)
                assert s["alarm_rules"] == [] and s["vitals"]["HR"]["limits"] == []
                s = wait_for(lambda: (x := stream(srv.http, "bed-s"))["stale"] and x, 5, "stale")
                for name in ("HR", "RR"):
                    v = s["vitals"][name]
                    assert v["reason"] == "no data" and not v["valid"] and v["left_s"] is None
                hr = tile_vital(page, "bed-s", "HR")
                wait_for(lambda: shown_reason(hr) == "no data", 3, "no data on the page")
                assert hr.get_attribute("data-status") == "nodata"
                assert one(hr, ".value").text == "---" and not css(hr, ".limit")
                for b in blocks[5:7]:
                    c.send(b[:, :1])
                s = at_second(srv.http, "bed-s", 7)
                assert not s["stale"] and s["vitals"]["HR"]["reason"] == "warming up, 25 s left"
                wait_for(lambda: shown_reason(hr) == "warming up, 25 s left", 3, "counting again")
                c.close()
        finally:
            page.close()
            page.switch_to.window(main)
