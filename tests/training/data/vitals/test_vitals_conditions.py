"""The per-condition rows of `evaluate` on randomised record sets: each condition's window
mask follows its definition (training/data/vitals/vitals_conditions.py), checked on a hand-written
params.json, and on a real generated set against the simulator's own event lists."""

from __future__ import annotations

import json

import numpy as np

from liquid_stream.training.data.vitals.vitals_conditions import window_conditions
from liquid_stream.training.data.vitals.vitals_sim import PARAMS_NAME, ensure_vitals_sim

FS, WIN = 125, 32 * 125


def _record(**kw) -> dict:
    base = {
        "family": "param",
        "af_episodes": [],
        "motion_bursts": [],
        "sensor_off": [],
        "ectopic_prob": 0.0,
        "perfusion": 1.0,
    }
    return {**base, **kw}


def test_masks_follow_the_definitions(tmp_path):
    per = {
        "bidmc01": _record(af_episodes=[[40.0, 50.0]]),
        "bidmc02": _record(
            motion_bursts=[
                {"start_s": 100.0, "dur_s": 5.0, "groups": ["ppg"]},
                {"start_s": 10.0, "dur_s": 2.0, "groups": ["ecg"]},
            ]
        ),
        "bidmc03": _record(
            sensor_off=[
                {"group": "ppg", "start_s": 64.0, "dur_s": 3.0},
                {"group": "resp", "start_s": 0.0, "dur_s": 99.0},
            ]
        ),
        "bidmc04": _record(family="nk2", perfusion=0.1, ectopic_prob=0.05),
    }
    (tmp_path / PARAMS_NAME).write_text(json.dumps({"per_record": per}))
    # windows [t0, t0 + 32) s
    rec = np.array(
        [
            "bidmc01",
            "bidmc01",
            "bidmc01",
            "bidmc02",
            "bidmc02",
            "bidmc02",
            "bidmc03",
            "bidmc03",
            "bidmc04",
        ]
    )
    t0 = np.array([8.0, 18.0, 50.0, 80.0, 105.0, 0.0, 40.0, 67.0, 0.0])
    y = np.array([60, 60, 60, 150, 150, 150, 90, 90, 141.0])
    m = window_conditions(tmp_path, rec, (t0 * FS).astype(int), WIN, FS, y, "hr")
    # half-open spans: [40, 50) does not touch [8, 40) nor [50, 82)
    assert m["AF"].tolist() == [False, True, False, False, False, False, False, False, False]
    assert m["motion (PPG)"].tolist() == [False] * 3 + [True, False, False] + [False] * 3
    assert m["motion (ECG)"].tolist() == [False] * 5 + [True] + [False] * 3
    assert m["sensor-off (PPG)"].tolist() == [False] * 6 + [True, False, False]  # resp ignored
    assert m["low perfusion"].tolist() == [False] * 8 + [True]
    assert m["ectopic beats"].tolist() == [False] * 8 + [True]
    assert m["family nk2"].tolist() == [False] * 8 + [True]
    assert (m["family param"] == ~m["family nk2"]).all()
    assert m["HR > 140"].tolist() == [False] * 3 + [True] * 3 + [False] * 2 + [True]
    hard = [
        "AF",
        "ectopic beats",
        "motion (PPG)",
        "motion (ECG)",
        "sensor-off (PPG)",
        "low perfusion",
    ]
    assert (m["none of these"] == ~np.any([m[k] for k in hard], axis=0)).all()
    assert m["none of these"].tolist() == [
        True,
        False,
        True,
        False,
        True,
        False,
        False,
        True,
        False,
    ]
    assert "HR > 140" not in window_conditions(tmp_path, rec, t0.astype(int), WIN, FS, y, "rr")


def test_not_a_randomised_set_gives_none(tmp_path):
    assert window_conditions(tmp_path, np.array(["bidmc01"]), np.array([0]), WIN, FS) is None


def test_masks_on_a_generated_set_agree_with_its_events():
    root = ensure_vitals_sim(6, 2.0, 11, ("nk2", "param"))
    per = json.loads((root / PARAMS_NAME).read_text())["per_record"]
    names = sorted(per)
    rec = np.repeat(names, 12)
    starts = np.tile(np.arange(12) * 7 * FS, len(names))
    m = window_conditions(root, rec, starts, WIN, FS)
    for i, (r, s) in enumerate(zip(rec, starts, strict=True)):
        t0, t1 = s / FS, s / FS + 32
        p = per[r]
        assert m["AF"][i] == any(a < t1 and b > t0 for a, b in p["af_episodes"])
        assert m["low perfusion"][i] == (p["perfusion"] < 1)
        assert m[f"family {p['family']}"][i]
