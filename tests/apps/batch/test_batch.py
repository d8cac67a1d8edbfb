"""Batched multi-stream engines (liquid_stream.apps.batch): BatchedSession, KwsBank and
VitalsBank against the single-stream runtimes, in real onnxruntime sessions.

Models: the shipped spotter and vital-sign models (states with the batch axis first,
second and absent), the trained tone spotter (tests/fixtures_kws.py), and liquid-order-8
models (tests/runtime/test_stream_input_guard.py's ``small_model``; tests/fixtures_vitals.py's
``tiny_model``) whose in-range inputs overflow inside the model: the faults only a step
can find.

Tolerance: a stream's outputs through a batch equal its own OnnxStreamer's up to float32
rounding (a kernel's summation order may depend on the batch size; measured ≤ 6e-7
relative on the shipped models). The tests allow rtol 1e-5 (about 80 float32 ulps),
with an absolute floor of 1e-5 of the compared array's largest magnitude for values
near zero; events must agree exactly in everything else (times, labels, statuses,
alarms).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from fixtures_kws import EVENTS, SR, tone_signal, train_tone_spotter
from fixtures_vitals import export_vital_model, signals, tiny_model
from test_stream_input_guard import MEAN, STD, small_model

from liquid_stream.apps.batch import BatchedSession, KwsBank, VitalsBank
from liquid_stream.apps.batch.vitals import estimate_event
from liquid_stream.apps.common.audio import stream_resampler
from liquid_stream.apps.kws.spotter import KeywordSpotter, KwsInputError, mono_frame
from liquid_stream.apps.vitals.monitor import VitalsInputError, VitalsMonitor
from liquid_stream.export.pipeline import export_model
from liquid_stream.models import shipped
from liquid_stream.runtime.onnx_streamer import OnnxStreamer

RTOL = 1e-5


def close(a, b, what=""):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    atol = RTOL * max(float(np.abs(b).max(initial=0.0)), 1e-30)
    np.testing.assert_allclose(a, b, rtol=RTOL, atol=atol, err_msg=what)


def one_line(e: BaseException) -> str:
    msg = str(e)
    assert msg and "\n" not in msg, msg
    return msg


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("batch")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        tone = train_tone_spotter(d / "tone.onnx")
        assert tone["accuracy"] > 0.9
        kws8 = d / "pb8_kws.onnx"  # a spotter that overflows on loud in-range input
        meta = {
            "input_mean": [MEAN],
            "input_std": [STD],
            "labels": ["silence", "a", "b"],
            "sample_rate": SR,
            "silence_class": 0,
        }
        export_model(small_model(8), kws8, chunk=32, meta=meta)
        hr8 = d / "pb8_hr.onnx"  # a vital-sign model that does; sub-blocks of 16 frames
        export_vital_model(
            hr8, "hr", model=tiny_model(2, 250, 0, 75.0, liquid="pb", liquid_order=8)
        )
    finally:
        torch.set_num_threads(threads)
    return {"tone": tone["path"], "kws8": kws8, "hr8": hr8}


# ====================================================================== BatchedSession


def streamer(path) -> OnnxStreamer:
    return OnnxStreamer(path, providers=["CPUExecutionProvider"], threads=1)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["kws-sc10", "vitals-ppg-hr"])
def test_session_equals_one_streamer_per_stream(name):
    """Streams joining and leaving at different rounds: every output and every state (batch
    axis first, second or absent) equals the stream's own OnnxStreamer; the spotter's
    streams of any age share one call."""
    path = shipped(name)
    bs = BatchedSession(path, max_streams=8)
    spec = {s["name"]: s["shape"] for s in bs.streamer.state_spec}
    assert {s.index("batch") if "batch" in s else None for s in spec.values()} >= {0, 1, None}
    T = bs.chunk
    rng = np.random.default_rng(0)
    sig = {k: (0.3 * rng.standard_normal((T * 10, 1))).astype(np.float32) for k in range(5)}
    join, leave = {0: 0, 1: 0, 2: 2, 3: 3, 4: 6}, {1: 4}  # rounds
    refs, pos = {}, dict.fromkeys(sig, 0)
    for r in range(16):
        for k in sig:
            if join[k] == r:
                bs.add(k)
                refs[k] = streamer(path)
            if leave.get(k) == r:
                bs.remove(k)
        blocks = {k: sig[k][pos[k] : pos[k] + T] for k in bs.keys() if pos[k] + T <= len(sig[k])}
        if not blocks:
            break
        out = bs.step(blocks)
        assert not bs.errors and out.keys() == blocks.keys()
        if name == "kws-sc10":
            assert bs.calls == 1  # phase and fill are constant at its chunk: one group
        for k, x in blocks.items():
            close(out[k], refs[k].process(x), f"{name} stream {k} round {r}")
            pos[k] += T
            mine = bs.state(k)
            for s, v in refs[k].state.items():
                assert mine[s].shape == v.shape and mine[s].dtype == v.dtype, s
                close(mine[s], v, s)
    assert len(bs) == 4 and 1 not in bs


@pytest.mark.slow
def test_session_groups_by_shared_state_and_splits_long_blocks(models):
    """A model whose sub-block fill (16 frames) differs between streams of different ages:
    one call per distinct fill, each exact; a block longer than max_chunk runs in pieces."""
    bs = BatchedSession(models["hr8"])
    T = bs.chunk  # 125: the fill advances by 125 mod 16 per step
    rng = np.random.default_rng(1)
    refs = {}
    for r in range(4):
        bs.add(r)
        refs[r] = streamer(models["hr8"])
        blocks = {k: (0.5 + 0.2 * rng.standard_normal((T, 2))).astype(np.float32) for k in refs}
        out = bs.step(blocks)
        fills = {int(bs.state(k)["state.ssm.fill"][0]) for k in refs}
        assert bs.calls == r + 1 and len(fills) == r + 1  # ages 1..r+1 chunks: all distinct
        for k, x in blocks.items():
            close(out[k], refs[k].process(x))
    long = {k: (0.5 + 0.2 * rng.standard_normal((3 * bs.max_chunk + 7, 2))) for k in refs}
    out = bs.step(long)
    for k, x in long.items():
        close(out[k], refs[k].process(x))
        close(bs.state(k)["state.block0.ssm.z"], refs[k].state["state.block0.ssm.z"])


def test_session_refuses_per_stream_and_keeps_state(models):
    """Bad blocks (shape, dtype, NaN, beyond the bound, an overflow inside the model) are
    refused for their stream only, state unchanged; the others commit as if alone."""
    path = models["kws8"]
    bs = BatchedSession(path, max_streams=8)
    rng = np.random.default_rng(2)
    good = lambda: (MEAN + STD * rng.standard_normal((32, 1))).astype(np.float32)  # noqa: E731
    keys = ["ok", "shape", "dtype", "nan", "big", "loud"]
    refs = {k: streamer(path) for k in keys}
    for k in keys:
        bs.add(k)
    warm = {k: good() for k in keys}
    for k, y in bs.step(warm).items():
        close(y, refs[k].process(warm[k]))
    before = {k: bs.state(k) for k in keys}
    loud = good()
    loud[10:30] = MEAN + 0.9e6 * STD  # within the bound; its 8-fold products overflow
    nan, big = good(), good()
    nan[3, 0], big[7, 0] = np.nan, 1e30
    x_ok = good()
    blocks = {
        "ok": x_ok,
        "shape": np.zeros((32, 2), np.float32),
        "dtype": np.ones((32, 1), bool),
        "nan": nan,
        "big": big,
        "loud": loud,
    }
    out = bs.step(blocks)
    assert list(out) == ["ok"]
    close(out["ok"], refs["ok"].process(x_ok))
    needles = {
        "shape": "input channel",
        "dtype": "numeric",
        "nan": "NaN or infinite",
        "big": "outside the accepted range",
        "loud": "non-finite",
    }
    assert bs.errors.keys() == needles.keys()
    for k, needle in needles.items():
        assert needle in one_line(bs.errors[k]), bs.errors[k]
        after = bs.state(k)
        for s in before[k]:
            assert np.array_equal(after[s], before[k][s]), (k, s)
    assert bs.errors["nan"].index == 3 and bs.errors["big"].index == 7
    # they go on as if the refused blocks had never been sent
    nxt = {k: good() for k in keys}
    for k, y in bs.step(nxt).items():
        close(y, refs[k].process(nxt[k]), k)
    # caller errors: nothing changes
    snap = {k: bs.state(k) for k in keys}
    with pytest.raises(ValueError, match="different lengths"):
        bs.step({"ok": good(), "nan": good()[:20]})
    with pytest.raises(KeyError, match="no open stream 'zz'"):
        bs.step({"ok": good(), "zz": good()})
    for k in keys:
        assert all(np.array_equal(bs.state(k)[s], snap[k][s]) for s in snap[k])


def test_session_cap_remove_and_slot_reuse(models):
    bs = BatchedSession(models["kws8"], max_streams=2)
    bs.add("a")
    bs.add("b")
    with pytest.raises(ValueError, match="already open"):
        bs.add("a")
    with pytest.raises(ValueError, match=r"^session full: 2 streams$"):
        bs.add("c")
    x = (MEAN + STD * np.random.default_rng(3).standard_normal((32, 1))).astype(np.float32)
    bs.step({"a": x, "b": x})
    bs.remove("a")
    bs.add("c")  # a's slot, reclaimed: a fresh zero state
    ref = streamer(models["kws8"])
    assert all(np.array_equal(bs.state("c")[s], v) for s, v in ref.state.items())
    close(bs.step({"c": x})["c"], ref.process(x))
    bs.reset("b")
    fresh = streamer(models["kws8"]).state
    assert all(np.array_equal(bs.state("b")[s], v) for s, v in fresh.items())
    with pytest.raises(KeyError):
        bs.remove("a")


# ============================================================================= KwsBank


class KwsReference:
    """One stream run alone the way the bank cuts it: resampled as ``liquid-stream kws``
    does, fed to a KeywordSpotter in T0-sample chunks, the rest at close."""

    def __init__(self, path, rate: int, T0: int):
        self.sp = KeywordSpotter(path)
        self.rs = (
            None if rate == self.sp.sample_rate else stream_resampler(rate, self.sp.sample_rate)
        )
        self.delay = 0.0 if self.rs is None else self.rs.delay_s
        self.T0, self.pending = T0, np.zeros(0, np.float32)
        self.detections, self.scores = [], {}  # scores: model sample count → scores

    def push(self, block) -> None:
        y = mono_frame(block).astype(np.float32)
        y = y if self.rs is None else self.rs.process(y)
        self.pending = np.concatenate([self.pending, y])
        while len(self.pending) >= self.T0:
            self._feed(self.T0)

    def _feed(self, n: int) -> None:
        self.sp.predict(self.pending[:n])
        self.pending = self.pending[n:]
        self.detections += [
            (max(0.0, d.time_s - self.delay), d.keyword, d.score) for d in self.sp.detections
        ]
        self.scores[round(self.sp.time_s * self.sp.sample_rate)] = dict(self.sp.scores)

    def close(self) -> None:
        if len(self.pending):
            self._feed(len(self.pending))


def check_kws_events(events: list[dict], ref: KwsReference, sr: int) -> None:
    dets = [e for e in events if e["type"] == "detection"]
    assert [(d["t"], d["label"]) for d in dets] == [(t, k) for t, k, _ in ref.detections]
    close([d["score"] for d in dets], [s for _, _, s in ref.detections])
    scores = [e for e in events if e["type"] == "scores"]
    assert scores and not [e for e in events if e["type"] == "error"]
    for e in scores:
        n = round((e["t"] + ref.delay) * sr)
        assert e["scores"].keys() == ref.scores[n].keys()
        close(list(e["scores"].values()), list(ref.scores[n].values()), f"scores at {e['t']}")


@pytest.mark.slow
@pytest.mark.parametrize("chunk", [None, 16])
def test_kws_bank_equals_spotter_per_stream(models, chunk):
    """Streams at 8 / 16 / 11.025 kHz (resampled), int16 or float blocks of odd sizes,
    joining late and closing early: each stream's detections and scores equal a
    KeywordSpotter's on that stream alone, whatever the others do. With chunk = 16 the graph
    (max_chunk 97) takes up to 6 chunks a call: a stream steps all its waiting whole chunks
    at once, and streams with different numbers of them go in different calls."""
    bank = KwsBank(models["tone"], max_streams=8, chunk=chunk)
    T0 = bank.chunk
    assert bank.max_chunks == (1 if chunk is None else 6)
    lengths = set()
    run = bank.session.step

    def counting(blocks):
        lengths.update(len(b) for b in blocks.values())
        return run(blocks)

    bank.session.step = counting
    plan = {  # sid: (rate, join round, close round, block size, int16)
        "a": (8000, 0, None, 400, False),
        "b": (16000, 10, None, 1337, False),
        "c": (11025, 3, 60, 250, False),
        "d": (8000, 5, 100, 320, True),
    }
    signal = {sid: tone_signal(rate, seed=i) for i, (sid, (rate, *_)) in enumerate(plan.items())}
    signal["b"] = tone_signal(16000, EVENTS[:3], 5.5, seed=1)  # shorter: leaves early
    refs, events, pos = {}, {sid: [] for sid in plan}, dict.fromkeys(plan, 0)
    for r in range(400):
        for sid, (rate, join, leave, size, as_int) in plan.items():
            if r == join:
                info = bank.open(sid, sample_rate=rate)
                assert (
                    info["chunk"] == T0 and info["sample_rate"] == SR and info["input_rate"] == rate
                )
                refs[sid] = KwsReference(models["tone"], rate, T0)
            if sid not in bank.ids():
                continue
            if r == leave or pos[sid] >= len(signal[sid]):
                events[sid] += bank.close(sid)
                refs[sid].close()
                continue
            x = signal[sid][pos[sid] : pos[sid] + size]
            x = np.round(x * 32767).astype(np.int16) if as_int else x.astype(np.float32)
            pos[sid] += size
            bank.push(sid, x)
            refs[sid].push(x)
        for sid, ev in bank.step().items():
            assert sum(e["type"] == "scores" for e in ev) == 1
            events[sid] += ev
        if not bank.ids():
            break
    assert not bank.ids() and len(bank.session) == 0
    for sid in plan:
        check_kws_events(events[sid], refs[sid], SR)
    # the tone keywords were heard (the comparison above is not between empty lists)
    assert sum(e["type"] == "detection" for e in events["a"]) == 5
    assert sum(e["type"] == "detection" for e in events["b"]) == 3
    if chunk is not None:  # calls of several chunks, up to what the graph takes
        assert max(lengths) == 6 * T0 and {2 * T0, 3 * T0} & lengths


def test_kws_bank_refuses_bad_blocks_and_bad_opens(models):
    """A refused push raises a one-line ValueError and changes nothing: the stream then
    equals a spotter that never saw it; the other streams are untouched."""
    bank = KwsBank(models["tone"], max_streams=2)
    bank.open("x", sample_rate=16000)
    bank.open("y", sample_rate=8000)
    refs = {
        "x": KwsReference(models["tone"], 16000, bank.chunk),
        "y": KwsReference(models["tone"], 8000, bank.chunk),
    }
    ev = {"x": [], "y": []}
    one = EVENTS[:1]
    sig = {"x": tone_signal(16000, one, 3.0), "y": tone_signal(8000, one, 3.0, seed=5)}
    nan = np.full(50, 0.1)
    nan[20] = np.nan
    big = np.full(50, 0.1)
    big[30] = 1e30
    bad = [  # (block, message needle)
        (nan, "input refused at 0.201 s: sample value nan"),
        (big, "at 0.202 s: sample value 1e+30 is outside the accepted range"),
        (np.zeros((50, 2)), "mono frame"),
        (np.zeros(50, bool), "numeric"),
        (np.array(["a", "b"]), "numeric"),
        (np.zeros(50, complex), "complex"),
    ]
    step = {"x": 1600, "y": 800}
    for i in range(3):
        for sid in ("x", "y"):
            x = sig[sid][i * step[sid] : (i + 1) * step[sid]].astype(np.float32)
            bank.push(sid, x)
            refs[sid].push(x)
        if i == 1:
            for block, needle in bad:
                with pytest.raises(ValueError) as err:
                    bank.push("x", block)
                assert needle in one_line(err.value), err.value
                assert isinstance(err.value, KwsInputError) == ("sample value" in needle)
        for sid, e in bank.step().items():
            ev[sid] += e
    for sid in ("x", "y"):
        ev[sid] += bank.close(sid)
        refs[sid].close()
        check_kws_events(ev[sid], refs[sid], SR)
    # opens
    bank.open("a", sample_rate=8000)
    bank.open("b", sample_rate=44100)
    with pytest.raises(ValueError, match="already open"):
        bank.open("a", sample_rate=8000)
    with pytest.raises(ValueError, match=r"^server full: 2 streams$"):
        bank.open("c")
    with pytest.raises(ValueError, match="no open stream 'c'"):
        bank.push("c", np.zeros(10, np.float32))
    bank.close("a")
    for rate, needle in [
        (0, "whole positive"),
        (-8000, "whole positive"),
        (float("nan"), "whole positive"),
        (8000.5, "whole positive"),
        ("fast", "number of Hz"),
        (44101, "simple ratio"),
    ]:
        with pytest.raises(ValueError, match=needle) as err:
            bank.open("c", sample_rate=rate)
        one_line(err.value)
    assert bank.ids() == ["b"]
    bank.open("a", sample_rate=8000)  # reopened after close: a fresh stream
    ref = KwsReference(models["tone"], 8000, bank.chunk)
    x = sig["y"][:2000].astype(np.float32)
    bank.push("a", x)
    ref.push(x)
    got = bank.step()["a"] + bank.close("a")
    ref.close()
    check_kws_events(got, ref, SR)


def test_kws_bank_overflow_is_an_error_event_for_that_stream(models):
    """A chunk that overflows inside the model (found only by the step) is an error event
    for its stream, whose state and time stay as before it; the others go on."""
    bank = KwsBank(models["kws8"])
    T0 = bank.chunk
    rng = np.random.default_rng(4)
    good = lambda n=T0: (MEAN + STD * rng.standard_normal(n)).astype(np.float32)  # noqa: E731
    refs = {sid: KwsReference(models["kws8"], SR, T0) for sid in ("ok", "bad")}
    for sid in refs:
        bank.open(sid, sample_rate=SR)
    ev = {sid: [] for sid in refs}
    for r in range(6):
        for sid in refs:
            x = good(T0 * 2)
            if sid == "bad" and r == 3:  # one chunk, overflowing; the reference never sees it
                loud = x[:T0]
                loud[5:25] = MEAN + 0.9e6 * STD
                before = bank.session.state("bad")
                bank.push(sid, loud)
                continue
            bank.push(sid, x)
            refs[sid].push(x)
        out = bank.step()
        if r == 3:
            errors = [e for e in out["bad"] if e["type"] == "error"]
            assert len(errors) == 1 and "non-finite" in one_line(Exception(errors[0]["message"]))
            with pytest.raises(KwsInputError) as alone:  # the spotter alone says the same
                refs["bad"].sp.predict(loud)
            assert errors[0]["message"] == str(alone.value)
            after = bank.session.state("bad")
            assert all(np.array_equal(after[s], before[s]) for s in before)  # as before it
            out["bad"] = [e for e in out["bad"] if e["type"] != "error"]
        for sid, e in out.items():
            ev[sid] += e
    for sid in refs:
        ev[sid] += bank.close(sid)
        refs[sid].close()
        check_kws_events(ev[sid], refs[sid], SR)


# =========================================================================== VitalsBank

VITALS = ["vitals-ppg-hr", "vitals-ppg-ecg-rr"]  # hr from PLETH, rr from PLETH + II


def vitals_signal(seconds: float, rate: float, channels, seed: int, nan_spans=()) -> np.ndarray:
    sig = signals(seconds, rate, seed)
    x = np.stack([sig[c] for c in channels], 1)
    for ch, s0, dur in nan_spans:
        a = int(round(s0 * rate))
        x[a : a + int(round(dur * rate)), list(channels).index(ch)] = np.nan
    return x


def check_vitals_events(got: list[dict], want: list[dict], what: str) -> None:
    assert [e["type"] for e in got] == ["estimate"] * len(got), what
    assert [e["t"] for e in got] == [e["t"] for e in want], what
    for g, w in zip(got, want, strict=True):
        for key in ("valid", "status", "units", "alarms", "raised", "cleared"):
            assert g[key] == w[key], (what, g["t"], key)
        assert g["values"].keys() == w["values"].keys()
        for t, v in g["values"].items():
            assert (v is None) == (w["values"][t] is None), (what, g["t"], t)
            if v is not None:
                close(v, w["values"][t], f"{what} {t} at {g['t']} s")


@pytest.mark.slow
def test_vitals_bank_equals_monitor_per_bed():
    """Beds at 125 / 250 / 100 Hz (resampled), channel orders of their own, short (bridged)
    and long (reset) gaps, a gap at the start, alarms, joining late and closing early, a bed
    that skips steps: each bed's events equal a VitalsMonitor's on that bed alone; a bed
    runs the models its channels allow."""
    models = [shipped(n) for n in VITALS]
    bank = VitalsBank(models, max_streams=8)
    plan = {  # sid: (channels, rate, seconds, join round, close round, nan spans, alarms)
        "p1": (["PLETH"], 125, 40, 0, None, (), None),
        "p2": (
            ["II", "RESP", "PLETH"],
            250,
            55,
            2,
            None,
            [("PLETH", 10.3, 1.0), ("II", 20.0, 4.0)],
            "hr>85:hold=2,rr>14:hold=2",
        ),
        "p3": (["PLETH", "II"], 100, 40, 4, 25, [("PLETH", 0.0, 2.5), ("II", 0.0, 2.5)], None),
        "p4": (["PLETH", "II"], 125, 50, 9, None, [("PLETH", 33.0, 3.0)], "rr<30"),
    }
    refs, want, events, pos, data = {}, {}, {}, {}, {}
    for r in range(200):
        for i, (sid, (chans, rate, secs, join, leave, gaps, alarms)) in enumerate(plan.items()):
            if r == join:
                info = bank.open(sid, channels=chans, sample_rate=rate, alarms=alarms)
                mons = [m for m in models if sid != "p1" or "ecg" not in m.name]
                assert info["targets"] == (["hr"] if sid == "p1" else ["hr", "rr"])
                assert info["channels"] == chans and info["input_rate"] == rate
                refs[sid] = VitalsMonitor(mons, alarms=alarms, channels=chans, input_rate=rate)
                data[sid] = vitals_signal(secs, rate, chans, seed=i, nan_spans=gaps)
                events[sid], want[sid], pos[sid] = [], [], 0
            if sid not in bank.ids():
                continue
            ref = refs[sid]
            if r == leave or pos[sid] >= len(data[sid]):
                events[sid] += bank.close(sid)
                want[sid] += ref.flush()
                continue
            if sid == "p4" and r % 3 == 1:  # sends nothing to this step (a step's beds: the pushed)
                continue
            n = int(rate * (1.3 if r % 2 else 0.7))  # block sizes not tied to the chunk
            x = data[sid][pos[sid] : pos[sid] + n]
            pos[sid] += n
            if sid == "p4" and r == 12:  # a dict of channels is a chunk too
                x = {c: x[:, j] for j, c in enumerate(chans)}
            bank.push(sid, x)
            want[sid] += ref.push(x)
        for sid, ev in bank.step().items():
            events[sid] += ev
        if not bank.ids():
            break
    assert not bank.ids() and all(len(s) == 0 for s in bank.sessions)
    for sid, ref in refs.items():
        check_vitals_events(events[sid], [estimate_event(e, ref.units) for e in want[sid]], sid)
    statuses = {s for e in events["p2"] for s in e["status"].values()}
    assert {"ok", "bridged", "gap", "warmup"} <= statuses  # the gap rule was exercised
    assert events["p2"][-1]["alarms"] and any(e["raised"] for e in events["p2"])
    assert events["p3"][0]["status"] == {"hr": "gap", "rr": "gap"}  # the gap at the start
    assert len(events["p3"]) < 30 and len(events["p4"]) == 50


@pytest.mark.slow
def test_vitals_bank_adds_the_oximeter_model_for_beds_that_send_ir_and_red():
    """A ward host with HR, RR and the SpO2 model (docs/serving.md): a bed sending PLETH,
    II, IR and RED (in an order of its own) gets all three, one sending PLETH and II gets HR
    and RR; each bed's events equal a VitalsMonitor's on that bed alone."""
    from liquid_stream.training.data.vitals.vitals_sim import REC_NAMES, simulate_randomised

    names = ["vitals-ppg-ecg-hr", "vitals-ppg-ecg-rr", "vitals-oximeter-spo2"]
    models = [shipped(n) for n in names]
    bank = VitalsBank(models, max_streams=4)
    rec = simulate_randomised(np.random.default_rng([21, 0]), 0.75, force={"sensor_off": []})
    cols = {c.rstrip(","): i for i, c in enumerate(REC_NAMES)}
    plan = {"ox": ["IR", "II", "RED", "PLETH"], "plain": ["PLETH", "II"]}
    refs, events, want = {}, {}, {}
    for sid, chans in plan.items():
        info = bank.open(sid, channels=chans, sample_rate=125)
        n = 3 if sid == "ox" else 2
        assert info["targets"] == ["hr", "rr", "spo2"][:n]
        assert info["models"] == [m.name for m in models[:n]]
        refs[sid] = VitalsMonitor(models[:n], channels=chans, input_rate=125)
        events[sid], want[sid] = [], []
    x = {sid: rec["signals"][:, [cols[c] for c in chans]] for sid, chans in plan.items()}
    for a in range(0, len(rec["signals"]), 150):  # blocks not tied to the 125-sample chunk
        for sid in plan:
            bank.push(sid, x[sid][a : a + 150])
            want[sid] += refs[sid].push(x[sid][a : a + 150])
        for sid, ev in bank.step().items():
            events[sid] += ev
    for sid in plan:
        events[sid] += bank.close(sid)
        want[sid] += refs[sid].flush()
        check_vitals_events(
            events[sid], [estimate_event(e, refs[sid].units) for e in want[sid]], sid
        )
    last = events["ox"][-1]
    assert last["status"]["spo2"] == "ok" and 80 <= last["values"]["spo2"] <= 100


@pytest.mark.slow
def test_vitals_bank_refuses_bad_blocks_and_bad_opens():
    models = [shipped(n) for n in VITALS]
    bank = VitalsBank(models, max_streams=2)
    chans = ["PLETH", "II"]
    bank.open("x", channels=chans, sample_rate=125)
    ref = VitalsMonitor(models, channels=chans, input_rate=125)
    x = vitals_signal(12, 125, chans, seed=3)
    spike = x[:125].copy()
    spike[60, 0] = 1e9  # beyond the shipped model's bound (|x| ≤ 1e6)
    bad = [
        (np.zeros((125, 3)), "expected (T, 2) samples"),
        (np.full((125, 2), "a"), "integer or floating"),
        (np.zeros((125, 2), bool), "integer or floating"),
        (np.zeros((125, 2), complex), "integer or floating"),
        ({"PLETH": x[:10, 0]}, "no channel 'II'"),
        (spike, "PLETH sample value 1e+09 is outside the accepted range"),
    ]
    got, want = [], []
    for k in range(12):
        block = x[k * 125 : (k + 1) * 125]
        bank.push("x", block)
        want += ref.push(block)
        if k == 4:
            for b, needle in bad:
                with pytest.raises(ValueError) as err:
                    bank.push("x", b)
                assert needle in one_line(err.value), err.value
            with pytest.raises(VitalsInputError, match=r"input refused at 5\.480 s"):
                bank.push("x", spike)
        for ev in bank.step().values():
            got += ev
    got += bank.close("x")
    want += ref.flush()
    check_vitals_events(got, [estimate_event(e, ref.units) for e in want], "x")
    # opens
    bank.open("a", channels=chans, sample_rate=125)
    cases = [
        ({"channels": chans, "sample_rate": 125}, "already open", "a"),
        ({"channels": ["RESP"], "sample_rate": 125}, "no model for channels", "b"),
        ({"channels": ["PLETH", "PLETH"], "sample_rate": 125}, "repeat", "b"),
        ({"channels": "PLETH", "sample_rate": 125}, "list of 1 to", "b"),
        ({"channels": [], "sample_rate": 125}, "list of 1 to", "b"),
        ({"channels": chans, "sample_rate": 0}, "positive number", "b"),
        ({"channels": chans, "sample_rate": 44101}, "simple ratio", "b"),
        ({"channels": chans, "sample_rate": 125, "alarms": "hr>>1"}, "bad alarm", "b"),
        ({"channels": ["PLETH"], "sample_rate": 125, "alarms": "rr>30"}, "needs a rr model", "b"),
    ]
    for kw, needle, sid in cases:
        with pytest.raises(ValueError, match=needle) as err:
            bank.open(sid, **kw)
        one_line(err.value)
    bank.open("b", channels=["PLETH"], sample_rate=125)
    with pytest.raises(ValueError, match=r"^server full: 2 streams$"):
        bank.open("c", channels=chans, sample_rate=125)
    bank.close("a")
    bank.open("c", channels=chans, sample_rate=125)  # a's room is free again
    assert bank.ids() == ["b", "c"] and all(len(s) <= 2 for s in bank.sessions)


def test_vitals_bank_overflow_is_an_error_event_for_that_bed(models):
    """A chunk that overflows inside a model (in-range input, liquid order 8) is an error
    event for its bed: the seconds ending in it have no value (status gap), the model's
    state is as before it, later estimates go on; the other bed is unaffected."""
    bank = VitalsBank([models["hr8"]])
    chans = ["PLETH", "II"]
    refs = {}
    x = {sid: vitals_signal(8, 125, chans, seed=i) for i, sid in enumerate(("ok", "bad"))}
    for sid in x:
        bank.open(sid, channels=chans, sample_rate=125)
        refs[sid] = VitalsMonitor([models["hr8"]], channels=chans, input_rate=125)
    ev = {sid: [] for sid in x}
    want_ok = []
    center = bank.sessions[0].streamer.input_center
    half = bank.sessions[0].streamer.input_half_width
    for k in range(8):
        for sid in x:
            block = x[sid][k * 125 : (k + 1) * 125]
            if sid == "bad" and k == 5:
                block = block.copy()
                block[10:40] = center + 0.9 * half  # in range, overflows in the model
                before = bank.sessions[0].state("bad")
            bank.push(sid, block)
            if sid == "ok":
                want_ok += refs[sid].push(block)
        out = bank.step()
        if k == 5:
            after = bank.sessions[0].state("bad")
            assert all(np.array_equal(after[s], before[s]) for s in before)
        for sid, e in out.items():
            ev[sid] += e
    for sid in x:
        ev[sid] += bank.close(sid)
    want_ok += refs["ok"].flush()
    check_vitals_events(ev["ok"], [estimate_event(e, refs["ok"].units) for e in want_ok], "ok")
    errors = [e for e in ev["bad"] if e["type"] == "error"]
    assert len(errors) == 1
    assert "non-finite" in one_line(Exception(errors[0]["message"]))
    assert "refused the input at 5.000 s" in errors[0]["message"]
    est = {e["t"]: e for e in ev["bad"] if e["type"] == "estimate"}
    assert sorted(est) == list(range(1, 9))
    assert est[6]["values"] == {"hr": None} and est[6]["status"] == {"hr": "gap"}
    assert all(est[t]["values"]["hr"] is not None for t in (5, 7, 8))
