"""Fallback to a model on fewer channels (apps/vitals/monitor.py, "fallback"): when the ECG
lead of a PPG + ECG record comes off, the HR comes from the PPG-only model, warm beside the
PPG + ECG one, exactly as that model reads the record alone; the ECG's technical alarm stays
raised; when the lead comes back, the PPG + ECG model takes over again once its window is
clean. The shipped models on onnxruntime, simulated physiology, real WFDB files, the CLI.
"""

from __future__ import annotations

import csv

import numpy as np
import pytest
from click.testing import CliRunner

import liquid_stream.models as models
from liquid_stream.apps.vitals.model import VitalsError
from liquid_stream.apps.vitals.monitor import VitalsMonitor
from liquid_stream.models import shipped, vitals_backups
from liquid_stream.training.data.vitals.bidmc_sim import write_record
from liquid_stream.training.data.vitals.vitals_sim import NO_ARTEFACTS, simulate_randomised

FS = 125
KEEP = ("PLETH,", "II,")
OFF = (50, 80)  # the ECG lead is off (II flat) over these seconds of a 2-min record


def lead_off_record(seed: int = 5) -> dict:
    rec = simulate_randomised(
        np.random.default_rng([seed, 11]), 2.0, family="param", force=NO_ARTEFACTS
    )
    cols = [rec["sig_names"].index(c) for c in KEEP]
    sig = rec["signals"][:, cols].copy()
    sig[OFF[0] * FS : OFF[1] * FS, 1] = 0.0
    return {
        **rec,
        "signals": sig,
        "sig_names": list(KEEP),
        "sig_units": [rec["sig_units"][c] for c in cols],
    }


def run(mon: VitalsMonitor, x: np.ndarray) -> list:
    out = [e for k in range(len(x) // FS) for e in mon.push(x[k * FS : (k + 1) * FS])]
    return out + mon.flush()


@pytest.fixture(scope="module")
def streams():
    """The lead-off record through the PPG + ECG HR model with the PPG-only one as its
    backup, through each alone (the PPG-only one on PLETH)."""
    x = lead_off_record()["signals"]
    both = run(
        VitalsMonitor(
            [shipped("vitals-ppg-ecg-hr")],
            channels=["PLETH", "II"],
            backups=[shipped("vitals-ppg-hr")],
        ),
        x,
    )
    alone = run(VitalsMonitor([shipped("vitals-ppg-ecg-hr")], channels=["PLETH", "II"]), x)
    ppg = run(VitalsMonitor([shipped("vitals-ppg-hr")]), x[:, :1])
    return both, alone, ppg


@pytest.mark.slow
def test_lead_off_seconds_take_the_ppg_models_value_with_the_alarm_raised(streams):
    both, alone, ppg = streams
    assert len(both) == len(alone) == len(ppg) == 120
    off = [e.time_s for e in alone if e.status["hr"] in ("nosignal", "recovering")]
    assert off and min(off) <= OFF[0] + 3  # the primary loses the lead within 3 s ...
    for k in off:
        e, p = both[k - 1], ppg[k - 1]
        assert p.status["hr"] == "ok"  # (the PPG model alone is warm and valid here)
        assert e.status["hr"] == "ok" and e.source == {"hr": "vitals-ppg-hr"}, k
        assert e.values["hr"] == p.values["hr"]  # ... the backup's number, bit for bit
    for k in range(OFF[0] + 3, OFF[1]):
        assert both[k - 1].technical == ["ECG lead off (II: flat line)"], k
    assert max(off) > OFF[1]  # recovering after the lead is back, then the primary again
    for e, a in zip(both, alone, strict=True):
        if e.time_s not in off:
            assert e.source == {} and e.status == a.status
            assert e.values["hr"] == a.values["hr"] or e.status["hr"] != "ok"
    assert both[-1].source == {} and both[-1].status["hr"] == "ok"


@pytest.mark.slow
def test_without_a_valid_backup_the_second_stays_invalid(streams):
    """The first seconds: both models warm up, so no backup can stand in."""
    both, _, _ = streams
    assert all(e.status["hr"] == "warmup" and not e.source for e in both[:10])


@pytest.mark.slow
def test_backups_are_checked():
    ppg_ecg, ppg = shipped("vitals-ppg-ecg-hr"), shipped("vitals-ppg-rr")
    with pytest.raises(VitalsError, match="estimates rr: no model does"):
        VitalsMonitor([ppg_ecg], backups=[ppg])
    with pytest.raises(VitalsError, match="not deferred"):
        VitalsMonitor([ppg_ecg], backups=[shipped("vitals-ppg-hr")], deferred=True)
    with pytest.raises(VitalsError, match="its own backup"):
        VitalsMonitor([ppg_ecg], backups=[ppg_ecg])
    with pytest.raises(VitalsError, match="'II' needed by vitals-ppg-ecg-hr.onnx"):
        VitalsMonitor([shipped("vitals-ppg-hr")], channels=["PLETH"], backups=[ppg_ecg])


def fake_install(monkeypatch, tmp_path, names) -> None:
    for n in names:
        (tmp_path / f"{n}.onnx").write_bytes(b"")
    monkeypatch.setattr(models, "HERE", tmp_path)


EVERY = [
    "vitals-ppg-ecg-hr",
    "vitals-ppg-ecg-rr",
    "vitals-ppg-hr",
    "vitals-ppg-rr",
    "vitals-ecg-hr",
    "vitals-resp-rr",
    "vitals-oximeter-spo2",
]


@pytest.mark.parametrize(
    ("channels", "want"),
    [
        (["PLETH", "II"], ["vitals-ppg-hr", "vitals-ecg-hr", "vitals-ppg-rr"]),
        (
            ["PLETH", "II", "RESP"],
            ["vitals-ppg-hr", "vitals-ecg-hr", "vitals-ppg-ecg-rr", "vitals-ppg-rr"],
        ),
        (["PLETH"], []),
        (["II"], []),
        (["PLETH", "IR", "RED"], []),
    ],
)
def test_the_backups_picked_for_each_sensor_set(monkeypatch, tmp_path, channels, want):
    fake_install(monkeypatch, tmp_path, EVERY)
    picked = models.vitals_for(channels)
    assert [p.stem for p in vitals_backups(channels, picked)] == want


@pytest.mark.slow
def test_the_cli_falls_back_and_says_so_in_the_csv(tmp_path):
    from liquid_stream.cli import main

    write_record(tmp_path, "off", lead_off_record())
    rows = {}
    for flag in ([], ["--no-fallback"]):
        out = tmp_path / ("plain" if flag else "fallback")
        r = CliRunner().invoke(
            main,
            ["vitals", "--record", str(tmp_path / "off"), "--speed", "max", "--no-ui"]
            + ["--out", str(out), *flag],
        )
        assert r.exit_code == 0, r.output
        with open(out / "off_vitals.csv") as f:
            rows[bool(flag)] = list(csv.DictReader(f))
        assert ("backup hr: vitals-ppg-hr.onnx <- PLETH" in r.output) is not bool(flag)
    fb, plain = rows[False], rows[True]
    k = OFF[0] + 10
    assert fb[k - 1]["hr_source"] == "vitals-ppg-hr" and fb[k - 1]["hr_valid"] == "1"
    assert fb[k - 1]["rr_source"] == "vitals-ppg-rr" and fb[k - 1]["rr_valid"] == "1"
    assert "hr_source" not in plain[0] and plain[k - 1]["hr_status"] == "nosignal"
    assert fb[k - 1]["technical"] == plain[k - 1]["technical"] == "ECG lead off (II: flat line)"
    assert fb[20]["hr_source"] == "" and fb[20]["hr"] == plain[20]["hr"]
