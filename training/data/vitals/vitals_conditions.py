"""Which windows of a domain-randomised record set (:mod:`.vitals_sim`) carry which hard
condition, from the set's ``params.json``: the per-condition rows of ``evaluate --baseline``
(where the learned model beats the classical one, and where it loses).

A window of ``window`` samples starting at sample ``start`` of record ``r`` covers the
seconds ``[t0, t1) = [start / fs, (start + window) / fs)``. Its conditions:

==================  ==============================================================
``AF``              an AF episode ``[a, b)`` of the record overlaps ``[t0, t1)``
``ectopic beats``   the record's premature-beat probability is above 0 (record level:
                    the beat list itself is not in params.json)
``motion (PPG)``    a motion burst acting on the ``ppg`` group overlaps the window
``motion (ECG)``    the same for the ``ecg`` group
``sensor-off (PPG)`` a PLETH sensor-off stretch overlaps the window
``low perfusion``   the record's perfusion factor is below 1 (drawn U(0.05, 0.3))
``HR > 140``        the window's target (mean HR numeric) is above 140 bpm
``family nk2`` / ``family param``   the record's pulse / ECG morphology family
``none of these``   no AF, ectopic beats, motion, sensor-off or low perfusion
==================  ==============================================================
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from .vitals_sim import PARAMS_NAME


def _overlaps(spans: list[tuple[float, float]], t0: float, t1: float) -> bool:
    return any(a < t1 and b > t0 for a, b in spans)


def window_conditions(
    root: str | Path,
    records: np.ndarray,
    starts: np.ndarray,
    window: int,
    fs: float,
    y: np.ndarray | None = None,
    target: str = "hr",
) -> dict[str, np.ndarray] | None:
    """Condition name -> ``(n,)`` bool mask over the windows ``(records, starts)`` (module
    docstring), or None when ``root`` has no params.json (not a randomised set)."""
    path = Path(root) / PARAMS_NAME
    if not path.is_file():
        return None
    per = json.loads(path.read_text())["per_record"]
    rows: dict[str, list[bool]] = {
        k: []
        for k in (
            "AF",
            "ectopic beats",
            "motion (PPG)",
            "motion (ECG)",
            "sensor-off (PPG)",
            "low perfusion",
            "family nk2",
            "family param",
        )
    }
    for r, s in zip(records, starts, strict=True):
        p = per[str(r)]
        t0, t1 = float(s) / fs, (float(s) + window) / fs
        bursts = p.get("motion_bursts") or []

        def moved(group: str, bursts=bursts, t0=t0, t1=t1) -> bool:
            spans = [
                (m["start_s"], m["start_s"] + m["dur_s"]) for m in bursts if group in m["groups"]
            ]
            return _overlaps(spans, t0, t1)

        off = [
            (o["start_s"], o["start_s"] + o["dur_s"])
            for o in p.get("sensor_off") or []
            if o["group"] == "ppg"
        ]
        rows["AF"].append(_overlaps([tuple(a) for a in p.get("af_episodes") or []], t0, t1))
        rows["ectopic beats"].append(float(p.get("ectopic_prob", 0.0)) > 0)
        rows["motion (PPG)"].append(moved("ppg"))
        rows["motion (ECG)"].append(moved("ecg"))
        rows["sensor-off (PPG)"].append(_overlaps(off, t0, t1))
        rows["low perfusion"].append(float(p.get("perfusion", 1.0)) < 1)
        rows["family nk2"].append(p.get("family") == "nk2")
        rows["family param"].append(p.get("family") == "param")
    out = {k: np.asarray(v, bool) for k, v in rows.items()}
    if y is not None and target == "hr":
        out["HR > 140"] = np.asarray(y) > 140
    hard = (
        "AF",
        "ectopic beats",
        "motion (PPG)",
        "motion (ECG)",
        "sensor-off (PPG)",
        "low perfusion",
    )
    out["none of these"] = ~np.any([out[k] for k in hard], axis=0)
    return out
