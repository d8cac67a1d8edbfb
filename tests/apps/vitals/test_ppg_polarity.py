"""The PPG's polarity (apps/vitals/ppg_polarity.py): the monitor's answer does not depend on which
way up the sensor reports the pulse. Real onnxruntime sessions with the shipped models on
domain-randomised simulated records (training/data/vitals/vitals_sim.py), the same records turned
upside down; the server's batched path against the monitor."""

from __future__ import annotations

import numpy as np
import pytest

from liquid_stream.apps.vitals.monitor import VitalsMonitor
from liquid_stream.apps.vitals.ppg_polarity import needs_polarity, polarity, slope_skewness
from liquid_stream.models import shipped
from liquid_stream.training.data.vitals.vitals_sim import REC_NAMES, simulate_randomised

FS = 125


def record(seed: int, channels, minutes: float = 1.5) -> np.ndarray:
    rec = simulate_randomised(np.random.default_rng([seed, 5]), minutes)
    return rec["signals"][:, [REC_NAMES.index(c + ",") for c in channels]]


def flipped(x: np.ndarray, col: int) -> np.ndarray:
    y = x.copy()
    y[:, col] = -y[:, col]
    return y


def run(models, channels, x, chunk: int = FS) -> list:
    m = VitalsMonitor([shipped(n) for n in models], channels=channels)
    out = []
    for i in range(0, len(x), chunk):
        out += m.push(x[i : i + chunk])
    return out + m.flush()


def test_slope_skewness_is_odd_and_reads_an_upright_pulse():
    """An upright pulse (fast rise, slow fall) has a positively skewed slope; -x gives
    exactly the opposite number; a flat window gives 0 (upright)."""
    t = np.arange(8 * FS) / FS
    phase = (t * 1.2) % 1.0  # 72 bpm
    pulse = np.where(phase < 0.15, phase / 0.15, np.exp(-(phase - 0.15) / 0.25))
    s = slope_skewness(pulse, FS)
    assert s > 0.5
    assert slope_skewness(-pulse, FS) == -s  # bit for bit
    assert polarity(pulse, FS) == 1 and polarity(-pulse, FS) == -1
    assert polarity(np.full(8 * FS, 3.0), FS) == 1
    assert needs_polarity("PLETH,") and not needs_polarity("IR") and not needs_polarity("II")


@pytest.mark.parametrize(
    "models, channels",
    [
        (["vitals-ppg-hr", "vitals-ppg-rr"], ["PLETH"]),
        (["vitals-ppg-ecg-hr", "vitals-ppg-ecg-rr"], ["PLETH", "II"]),
    ],
)
@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_estimates_do_not_depend_on_the_ppg_polarity(models, channels, seed):
    """Every second of HR and RR is the same for the PPG and for the PPG upside down:
    statuses and technical alarms, and every valid value bit for bit (the models see the
    same samples from the polarity decision on), whatever the chunking."""
    x = record(seed, channels)
    col = channels.index("PLETH")
    up = run(models, channels, x)
    down = run(models, channels, flipped(x, col))
    other = run(models, channels, flipped(x, col), chunk=333)
    for got, rel in ((down, 0.0), (other, 1e-5)):  # float32 rounding of another chunking
        assert [(e.time_s, e.status, e.technical) for e in up] == [
            (e.time_s, e.status, e.technical) for e in got
        ]
        for a, b in zip(up, got, strict=True):  # (warm-up values before the decision differ)
            for t in a.values:
                if a.valid[t]:
                    assert a.values[t] == pytest.approx(b.values[t], rel=rel, abs=0), (a.time_s, t)
    assert sum(all(e.valid.values()) for e in up) >= 10  # something was compared


def test_the_server_path_turns_the_ppg_like_the_monitor():
    """The batched bank (the server's path: deferred monitors, resets and re-fed rows
    queued) gives the monitor's estimates for an upside-down PPG."""
    from liquid_stream.apps.batch.vitals import VitalsBank, estimate_event

    x = -record(4, ["PLETH"])
    models = [shipped("vitals-ppg-hr"), shipped("vitals-ppg-rr")]
    bank = VitalsBank(models)
    bank.open("bed", channels=["PLETH"], sample_rate=FS)
    got = []
    for i in range(0, len(x), 250):
        bank.push("bed", x[i : i + 250])
        got += bank.step().get("bed", [])
    got += bank.close("bed")
    got = [e for e in got if e["type"] == "estimate"]
    mon = VitalsMonitor(models, channels=["PLETH"])
    want = [
        estimate_event(e, mon.units)
        for i in range(0, len(x), 250)
        for e in mon.push(x[i : i + 250])
    ]
    want += [estimate_event(e, mon.units) for e in mon.flush()]
    assert [(e["t"], e["status"], e["technical"]) for e in got] == [
        (e["t"], e["status"], e["technical"]) for e in want
    ]
    for g, w in zip(got, want, strict=True):
        for t, v in g["values"].items():
            assert (v is None) == (w["values"][t] is None)
            if v is not None:
                assert v == pytest.approx(w["values"][t], rel=1e-5)
