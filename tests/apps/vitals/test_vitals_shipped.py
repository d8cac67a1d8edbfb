"""The shipped vital-sign models (liquid_stream/models/vitals-*.onnx), checked as a user
meets them: their answer does not depend on the signal's units, the HR model follows a rate
ramp 60 → 150 bpm, and `liquid-stream vitals` with no MODEL picks the models that fit a
record's channels. Real onnxruntime sessions on simulated records
(training/data/vitals/vitals_sim.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from liquid_stream.models import ShippedModelMissing, available, card, shipped, vitals_for
from liquid_stream.runtime.onnx_streamer import OnnxStreamer
from liquid_stream.training.data.vitals.bidmc_sim import SIG_NAMES, write_record
from liquid_stream.training.data.vitals.vitals_sim import IR, RED, simulate_randomised

FS = 125
PLETH = SIG_NAMES.index("PLETH,")
II = SIG_NAMES.index("II,")
RESP = SIG_NAMES.index("RESP,")
CLEAN = {  # a record without rhythm or artefact surprises, so the truth is unambiguous
    "ectopic_prob": 0.0,
    "af_episodes": [],
    "motion_bursts": [],
    "sensor_off": [],
    "perfusion": 1.0,
    "hr_sd": 0.0,
    "hr_changes": [],
}


def record(seed: int, minutes: float = 2.0, **force) -> dict:
    return simulate_randomised(
        np.random.default_rng([seed, 7]), minutes, family="param", force={**CLEAN, **force}
    )


def estimates(name: str, x: np.ndarray, chunk: int = 125) -> np.ndarray:
    """Per-second outputs (the last sample of each second) of shipped model ``name``."""
    s = OnnxStreamer(shipped(name))
    ys = [s.process(x[None, i : i + chunk].astype(np.float32)) for i in range(0, len(x), chunk)]
    y = np.concatenate(ys, 1)[0, :, 0]  # (T,)
    return y[FS - 1 :: FS]


def window_truth(x: np.ndarray, n: int) -> np.ndarray:
    """(n,) the mean of ``x`` (a truth series at fs) over the trailing 32 s window at the
    last sample of each second: what the models estimate."""
    ends = np.arange(n) * FS + FS - 1
    return np.array([x[max(0, e - 32 * FS + 1) : e + 1].mean() for e in ends])


@pytest.mark.parametrize(
    "name, cols",
    [
        ("vitals-ppg-hr", [PLETH]),
        ("vitals-ppg-ecg-hr", [PLETH, II]),
        ("vitals-ppg-rr", [PLETH]),
        ("vitals-ppg-ecg-rr", [PLETH, II]),
        ("vitals-ppg-ecg-rr-lite", [PLETH, II]),
        ("vitals-resp-rr", [RESP]),
    ],
)
@pytest.mark.slow
def test_estimate_does_not_depend_on_the_signal_units(name, cols):
    """Gain 0.01-100 and offsets of +-1000 units change no estimate by 1 bpm / breath per
    minute (measured: at most 0.07, the RR model of PLETH alone)."""
    rec = record(1, hr0=85.0)
    x = rec["signals"][:, cols]  # (T, C), in the record's own units
    ref = estimates(name, x)[40:]  # after the 32 s window has filled
    for a, b in [(0.01, 0.0), (100.0, 0.0), (1.0, 1000.0), (1.0, -1000.0), (0.01, -1000.0)]:
        got = estimates(name, a * x + b)[40:]
        assert np.abs(got - ref).max() < 1.0, (a, b)


RAMP_CASES = [("vitals-ppg-hr", [PLETH], 5.0), ("vitals-ppg-ecg-hr", [PLETH, II], 5.0)]


@pytest.mark.parametrize("name, cols, worst", RAMP_CASES)
def test_hr_model_follows_a_rate_ramp_from_60_to_150_bpm(name, cols, worst):
    """Issue 20 asks for every estimate within 5 bpm once the window has filled. Measured
    with the models shipped on 2026-12-01 (scripts/ship-vitals.sh) on 4 clean ramps, seeds
    1-4 (this test: seed 2): the `ppg` model RMSE 1.27-1.45, max 3.25-5.02 bpm (seed 3 just
    over the 5), slope 0.98-1.02; the `ppg+ecg` pair RMSE 0.86-1.23, max 1.46-2.39, slope
    1.02. Earlier `ppg+ecg` models: max 2.6-3.5 (GPU stream-trained on 999 records), 3.8-5.1
    and 2.3-5.1 (CPU-trained on fewer records), up to 8.8 (window-trained)."""
    ramp = [{"kind": "ramp", "at_s": 60.0, "size": 90.0, "dur_s": 120.0}]
    rec = record(2, minutes=4.0, hr0=60.0, hr_changes=ramp)
    est = estimates(name, rec["signals"][:, cols])
    target = window_truth(rec["truth"]["hr"], len(est))  # the mean HR over the 32 s window
    after = np.arange(len(est)) * FS + FS - 1 >= 32 * FS
    e, y = est[after], target[after]
    assert y.min() < 70 and y.max() > 140
    yc = y - y.mean()
    assert 0.9 <= float(yc @ (e - e.mean()) / (yc @ yc)) <= 1.1
    assert np.sqrt(np.mean((e - y) ** 2)) <= 5.0
    assert np.abs(e - y).max() <= worst


@pytest.mark.slow
def test_ppg_ecg_hr_model_reads_the_ecg_when_the_ppg_falls_off():
    """PPG flat (a detached clip) from 90 s on, ECG intact, 4 clean records (HR 65-95): the
    `ppg+ecg` model, trained as a stream with one channel at a time held flat
    (data.channel_off), stays near the truth: bench/vitals_sensor_off.py measures RMSE 1.40
    bpm over 8 such records for the pair shipped on 2026-12-01 (0.54-1.96 per record;
    0.54-1.64 on these 4; NeuroKit2 on the ECG: 0.58). Earlier models: 2.37 (GPU
    stream-trained), 5.36 (CPU-trained); without that augmentation, 73 and 84 bpm off on
    two of them."""
    errs = []
    for seed in (1, 2, 3, 4):
        rec = record(seed, minutes=4.0, hr0=55.0 + 10.0 * seed)
        x = rec["signals"][:, [PLETH, II]].copy()
        off = 90 * FS
        x[off:, 0] = x[:off, 0].min()
        est = estimates("vitals-ppg-ecg-hr", x)
        ends = np.arange(len(est)) * FS + FS - 1
        keep = ends - 32 * FS + 1 >= off  # the whole 32 s window is sensor-off
        errs.append(est[keep] - window_truth(rec["truth"]["hr"], len(est))[keep])
    e = np.concatenate(errs)
    assert len(e) > 300 and np.isfinite(e).all()
    assert np.sqrt(np.mean(e**2)) <= 4.0
    assert max(np.sqrt(np.mean(d**2)) for d in errs) <= 6.0


@pytest.mark.slow
def test_vitals_app_picks_the_shipped_models_matching_the_record(tmp_path):
    from liquid_stream.cli import main

    rec = record(3, minutes=1.0, hr0=75.0)
    write_record(tmp_path, "bidmc01", rec)
    result = CliRunner().invoke(
        main,
        [
            "vitals",
            "--record",
            str(tmp_path / "bidmc01"),
            "--speed",
            "max",
            "--no-ui",
            "--alarm",
            "hr>60,hr>120",
            "--out",
            str(tmp_path / "out"),
        ],
    )
    assert result.exit_code == 0, result.output
    # HR from PLETH + II; RR from the record's respiration channel
    assert "vitals-ppg-ecg-hr" in result.output and "vitals-resp-rr" in result.output
    assert "vitals-oximeter-spo2" in result.output  # the record has the oximeter's IR, RED
    summary = json.loads((tmp_path / "out" / "bidmc01_summary.json").read_text())
    assert set(summary["models"]) == {"hr", "rr", "spo2"}
    # HR ~75 bpm: hr>60 is a true alarm once the window has filled, hr>120 never fires
    check = summary["alarm_check"]
    assert check["hr>60"]["true_s"] > 0 and check["hr>60"]["false_s"] == 0
    assert check["hr>60"]["false_episodes"] == 0 and check["hr>60"]["false_vs_ref_s"] == 0
    assert not any(check["hr>120"].values())  # never on, never breached


def test_resp_model_reads_the_breathing_rate_of_a_respiration_channel():
    """The RESP model on clean simulated breathing at 8, 15 and 30 /min: once its window
    has filled, every second within 2 breaths/min of the trailing-window truth."""
    for k, rr in enumerate((8.0, 15.0, 30.0)):
        rec = record(20 + k, minutes=2.0, rr0=rr, rr_sd=0.5, rr_changes=[])
        got = estimates("vitals-resp-rr", rec["signals"][:, [RESP]])[40:]
        truth = window_truth(rec["truth"]["rr"], len(got) + 40)[40:]
        assert np.abs(got - truth).max() <= 2.0, (rr, np.abs(got - truth).max())


def test_an_ecg_and_belt_record_gets_its_rr_from_the_belt(tmp_path):
    """A record with II and RESP only (an ECG + belt recording, like systole's): the app takes
    RR from the RESP model, valid once warm and near the truth, and says it has no HR model
    for an ECG alone (while none is shipped) instead of stopping."""
    from liquid_stream.cli import main

    if "vitals-ecg-hr" in available():
        pytest.skip(
            "an ECG-only HR model is shipped: tests/apps/vitals/test_ecg_only.py covers the pick"
        )
    rec = record(5, minutes=1.0, rr0=14.0, rr_sd=0.5, rr_changes=[])
    keep = [SIG_NAMES.index("II,"), RESP]
    rec = {
        **rec,
        "signals": rec["signals"][:, keep],
        "sig_names": ["II,", "RESP,"],
        "sig_units": ["mV", "NU"],
    }
    write_record(tmp_path, "bidmc01", rec)
    res = CliRunner().invoke(
        main,
        [
            "vitals",
            "--record",
            str(tmp_path / "bidmc01"),
            "--speed",
            "max",
            "--no-ui",
            "--out",
            str(tmp_path / "out"),
        ],
    )
    assert res.exit_code == 0, res.output
    assert "the shipped models vitals-resp-rr" in res.output and "no HR" in res.output
    summary = json.loads((tmp_path / "out" / "bidmc01_summary.json").read_text())
    m = summary["metrics"]["rr"]
    assert m["valid"] >= 25 and m["rmse_window"] < 2.0, m


def test_picker_prefers_the_richest_sensor_set_and_names_what_is_missing():
    # a respiration channel gives the RR: the RESP model replaces the set's RR model
    assert [p.stem for p in vitals_for(["RESP,", "PLETH,", "V,", "AVR,", "II,"])][-1] == (
        "vitals-resp-rr"
    )
    assert [p.stem for p in vitals_for(["PLETH,", "V,", "II,"])] == [
        "vitals-ppg-ecg-hr",
        "vitals-ppg-ecg-rr",
    ]
    assert [p.stem for p in vitals_for(["pleth", "resp"])] == [
        "vitals-ppg-hr",
        "vitals-resp-rr",
    ]
    assert [p.stem for p in vitals_for(["pleth"])] == [
        "vitals-ppg-hr",
        "vitals-ppg-rr",
    ]
    assert [p.stem for p in vitals_for(["RESP"])] == ["vitals-resp-rr"]
    with pytest.raises(ShippedModelMissing, match="no shipped vital-sign models for channels"):
        vitals_for(["V,", "AVR,"])
    # the oximeter's raw intensities add the SpO2 model, with or without a PLETH set
    assert [p.stem for p in vitals_for(["PLETH,", "II,", "IR,", "RED,"])] == [
        "vitals-ppg-ecg-hr",
        "vitals-ppg-ecg-rr",
        "vitals-oximeter-spo2",
    ]
    assert [p.stem for p in vitals_for(["ir", "red"])] == ["vitals-oximeter-spo2"]


def test_spo2_model_does_not_depend_on_the_gain_of_either_channel():
    """The oximeter channels are intensities: any gain per channel (LED drive, amplifier,
    ADC counts) leaves the estimate within 0.1 % SpO2 (ln removes it exactly; what is left is
    float32 rounding)."""
    rec = record(5, spo2_changes=[])
    x = rec["signals"][:, [IR, RED]]
    ref = estimates("vitals-oximeter-spo2", x)[40:]
    for g in [(0.01, 0.01), (100.0, 100.0), (0.01, 50.0), (30.0, 0.02)]:
        got = estimates("vitals-oximeter-spo2", x * np.asarray(g))[40:]
        assert np.abs(got - ref).max() < 0.1, g


def test_spo2_model_follows_a_desaturation():
    """SpO2 97 % with a step to 87 % at 60 s (a desaturation the `spo2<90` alarm is for),
    against the 32 s window's mean: within 2 % outside the transition and RMSE <= 1.5 %
    over the record once the window has filled; during the transition it lags (measured:
    up to 3.2 % off, and it crosses 90 % 7 s after the window's mean does)."""
    steps = [{"kind": "step", "at_s": 60.0, "size": -10.0, "dur_s": 5.0}]
    rec = record(6, minutes=3.0, spo2_0=97.0, spo2_sd=0.0, spo2_changes=steps)
    est = estimates("vitals-oximeter-spo2", rec["signals"][:, [IR, RED]])
    truth = window_truth(rec["truth"]["spo2"], len(est))
    t = np.arange(len(est))
    after, steady = t >= 32, (t >= 32) & ((t < 55) | (t > 60 + 32 + 15))
    assert truth[after].max() > 96 and truth[after].min() < 88
    err = est - truth
    assert np.abs(err[steady]).max() <= 2.0
    assert np.sqrt(np.mean(err[after] ** 2)) <= 1.5 and np.abs(err[after]).max() <= 4.0
    lag = int(np.argmax(est < 90)) - int(np.argmax(truth < 90))
    assert (est < 90).any() and 0 <= lag <= 10


VITALS_SHIPPED = [n for n in available() if n.startswith("vitals-")]


@pytest.mark.parametrize("name", VITALS_SHIPPED)
def test_every_shipped_vitals_model_has_a_card_with_its_command(name):
    text = card(name)
    baseline = "ratio of ratios" if name.endswith("spo2") else "NeuroKit2"
    assert "liquid-stream train bidmc" in text and baseline in text


@pytest.mark.parametrize(
    "name, cols, tol", [("vitals-oximeter-spo2", [IR, RED], 0.5), ("vitals-ppg-hr", [PLETH], 2.0)]
)
@pytest.mark.slow
def test_a_record_at_another_rate_reads_like_the_125_hz_record(name, cols, tol):
    """The same record at 250 Hz and 100 Hz (what many oximeters and monitors write),
    resampled by the monitor: once the window has filled, every estimate within 0.5 % SpO2 /
    2 bpm of the 125 Hz run. Before the resampler was primed with the first sample (it
    started from a zero past: a step up to the signal's level, which the running
    normalisation kept for minutes) this SpO2 record was 6.7 % off; over 150 records at
    250 Hz SpO2 streamed at 9.58 % and PPG HR at 9.68 bpm (docs/benchmarks.md §5.2)."""
    from scipy.signal import resample_poly

    from liquid_stream.apps.vitals.monitor import VitalsMonitor

    rec = record(8, minutes=2.0)
    x = rec["signals"][:, cols]  # (T, C) at 125 Hz
    target = "spo2" if name.endswith("spo2") else "hr"

    def run(z, rate):
        mon = VitalsMonitor([shipped(name)], input_rate=rate)
        out = [e for a in range(0, len(z), rate) for e in mon.push(z[a : a + rate])]
        return np.array([e.values[target] for e in out if e.time_s >= 40], dtype=float)

    ref = run(x, 125)
    for rate, (up, down) in [(250, (2, 1)), (100, (4, 5))]:
        got = run(resample_poly(x, up, down, axis=0, padtype="line"), rate)
        n = min(len(got), len(ref))
        worst = np.abs(got[:n] - ref[:n]).max()
        assert n > 60 and worst <= tol, (rate, worst)
