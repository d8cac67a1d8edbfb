"""The BIDMC vocabulary (standard library only): vital-sign targets, their numerics channels
and units, and how BIDMC channel names are cleaned and matched.

    VITALS              ("hr", "rr", "spo2"): the targets, in display order
    NUMERICS_CHANNEL    target -> channel of the 1 Hz ``<record>n`` numerics record
    UNITS               target -> physical unit of the estimate
    TARGETS             target -> (numerics channel, unit)
    strip_name("PLETH,") == "PLETH"      BIDMC channel names end with a comma
    channel_key("PLETH,") == "pleth"     names are matched ignoring that comma, blanks, case

Used by the training data (``training/data/bidmc.py``), the task's checkpoint metadata, the
vital-sign monitor and its alarms, and the main job.
"""

from __future__ import annotations

VITALS: tuple[str, ...] = ("hr", "rr", "spo2")
NUMERICS_CHANNEL: dict[str, str] = {"hr": "HR", "rr": "RESP", "spo2": "SpO2"}
UNITS: dict[str, str] = {"hr": "bpm", "rr": "breaths/min", "spo2": "%"}
TARGETS: dict[str, tuple[str, str]] = {t: (NUMERICS_CHANNEL[t], UNITS[t]) for t in VITALS}


# Agreement tolerances of the evaluation (the issue-20 targets' "within" columns): HR
# ±5 bpm, RR ±2 breaths/min, SpO2 ±2 % (the usual pulse-oximeter accuracy class).
WITHIN = {"hr": 5.0, "rr": 2.0, "spo2": 2.0}


def strip_name(name: str) -> str:
    """``"PLETH,"`` -> ``"PLETH"`` (BIDMC channel names end with a comma)."""
    return name.strip().rstrip(",").strip()


def channel_key(name: str) -> str:
    """``"PLETH,"`` -> ``"pleth"``: the key two channel names are matched by."""
    return strip_name(name).lower()
