"""ECG-only records (issue 64 item 3): the picker's `ecg` sensor set (HR only: its RR model is
optional), and, when vitals-ecg-hr is installed, `liquid-stream vitals` on a record whose only
channel is II, and the model counting every beat of a bigeminy (ectopic ones included) as a
bedside monitor does."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

import liquid_stream.models as models
from liquid_stream.models import ShippedModelMissing, available, vitals_for
from liquid_stream.training.data.vitals.bidmc_sim import write_record
from liquid_stream.training.data.vitals.vitals_sim import REC_NAMES, simulate_randomised

FS = 125
II = REC_NAMES.index("II,")
ECG_HR = "vitals-ecg-hr"
shipped_ecg = pytest.mark.skipif(ECG_HR not in available(), reason=f"{ECG_HR} not shipped")


def fake_install(monkeypatch, tmp_path, names) -> None:
    """A models folder holding (empty) graphs of ``names`` only."""
    for n in names:
        (tmp_path / f"{n}.onnx").write_bytes(b"")
    monkeypatch.setattr(models, "HERE", tmp_path)


def picked(channels) -> list[str]:
    return [p.stem for p in vitals_for(channels)]


def test_ecg_set_is_picked_without_its_rr_model(monkeypatch, tmp_path):
    every = [
        "vitals-ppg-ecg-hr",
        "vitals-ppg-ecg-rr",
        "vitals-ppg-hr",
        "vitals-ppg-rr",
        "vitals-oximeter-spo2",
        ECG_HR,
    ]
    fake_install(monkeypatch, tmp_path, every)
    assert picked(["II,"]) == [ECG_HR]
    assert picked(["II,", "RESP,", "V,"]) == [ECG_HR]
    assert picked(["ii", "IR", "RED"]) == [ECG_HR, "vitals-oximeter-spo2"]
    # the sets before are picked as they were: the richest first, all their models
    assert picked(["PLETH,", "II,"]) == ["vitals-ppg-ecg-hr", "vitals-ppg-ecg-rr"]
    assert picked(["PLETH,"]) == ["vitals-ppg-hr", "vitals-ppg-rr"]
    # an ECG RR model, once installed, joins its set
    (tmp_path / "vitals-ecg-rr.onnx").write_bytes(b"")
    assert picked(["II,"]) == [ECG_HR, "vitals-ecg-rr"]


def test_other_sets_still_need_all_their_models(monkeypatch, tmp_path):
    fake_install(monkeypatch, tmp_path, ["vitals-ppg-ecg-hr", "vitals-ppg-hr", "vitals-ppg-rr"])
    assert picked(["PLETH,", "II,"]) == ["vitals-ppg-hr", "vitals-ppg-rr"]  # no PPG+ECG RR
    with pytest.raises(ShippedModelMissing, match=r"channels \['ii'\]: they need PLETH or ") as e:
        vitals_for(["II,"])  # no ECG HR model installed: the message names the sets that are
    need = str(e.value).split("they need ")[1].split(" (installed")[0].split(" or ")
    assert "II" not in need and "PLETH+II" not in need


def ecg_record(seed: int, minutes: float, **force) -> dict:
    """A randomised record cut down to its II channel (the numerics kept as the reference)."""
    rec = simulate_randomised(
        np.random.default_rng([seed, 3]), minutes, family="param", ectopy="rich", force=force
    )
    return {**rec, "signals": rec["signals"][:, [II]], "sig_names": ("II,",), "sig_units": ("mV",)}


BIGEMINY = {
    "ectopy_pattern": "bigeminy",
    "ectopy_episodes": [[-20.0, 400.0]],
    "ectopic_kind": "pvc",
    "af_episodes": [],
    "motion_bursts": [],
    "sensor_off": [],
    "hr0": 78.0,
    "hr_sd": 0.0,
    "hr_changes": [],
}


@shipped_ecg
def test_vitals_cli_on_an_ecg_only_record_picks_the_ecg_model(tmp_path):
    from liquid_stream.cli import main

    write_record(tmp_path, "bidmc01", ecg_record(4, 1.5, **BIGEMINY))
    result = CliRunner().invoke(
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
    assert result.exit_code == 0, result.output
    assert ECG_HR in result.output and "ppg" not in result.output.lower().replace("-", "")
    summary = json.loads((tmp_path / "out" / "bidmc01_summary.json").read_text())
    assert set(summary["models"]) == {"hr"}


@shipped_ecg
def test_ecg_model_counts_every_beat_of_a_bigeminy():
    """PVC bigeminy at a sinus rate of 78: every other beat ectopic, each with its full
    compensatory pause, so 60 / mean interval over all beats is ~78 while the normal beats
    alone give ~39. Once the 32 s window has filled, the estimate is within 3 bpm of the
    window's mean label on average and within 6 bpm every second, so never near the ~39 of
    counting the normal beats alone. (Written with a bound of 5 on every second before any
    ECG model existed; the shipped one reads this record at 2.1 bpm on average, 5.1 at
    worst.)"""
    from liquid_stream.models import shipped
    from liquid_stream.runtime.onnx_streamer import OnnxStreamer

    rec = ecg_record(5, 3.0, **BIGEMINY)
    x = rec["signals"].astype(np.float32)
    s = OnnxStreamer(shipped(ECG_HR))
    y = np.concatenate([s.process(x[None, i : i + FS]) for i in range(0, len(x), FS)], 1)
    est = y[0, FS - 1 :: FS, 0]
    ends = np.arange(len(est)) * FS + FS - 1
    hr = rec["truth"]["hr"]
    truth = np.array([hr[max(0, e - 32 * FS + 1) : e + 1].mean() for e in ends])
    after = np.arange(len(est)) >= 40
    assert 70 < truth[after].mean() < 86
    err = np.abs(est[after] - truth[after])
    assert err.mean() <= 3.0 and err.max() <= 6.0
