"""The BIDMC vocabulary (standard library only): vital-sign targets, their numerics channels
and units, and how BIDMC channel names are cleaned and matched.

    VITALS              ("hr", "rr", "spo2"): the targets, in display order
    NUMERICS_CHANNEL    target -> channel of the 1 Hz ``<record>n`` numerics record
    UNITS               target -> physical unit of the estimate
    TARGETS             target -> (numerics channel, unit)
    strip_name("PLETH,") == "PLETH"      BIDMC channel names end with a comma
    channel_key("PLETH,") == "pleth"     names are matched ignoring that comma, blanks, case
    SIGNALS             ("PLETH", "II", "RESP", "IR", "RED"): the waveform channels the
                        models read (IR, RED: the oximeter's raw intensities, for SpO2)
    signal_channel("PPG") == "PLETH"     a device's channel label -> one of SIGNALS (or None)

Signal labels (:data:`SIGNAL_ALIASES`): a label names a channel of :data:`SIGNALS` when its
:func:`label_key` (case, blanks, ``_ - . ,`` and a trailing comma ignored) is the channel's
own name or one of its aliases: PLETH (``PPG``, ``BVP``, ...), II (``ECG``, ``ECG II``,
``Lead II``, ``EKG``, ...: a single-lead ECG is taken as lead II), RESP (``Resp``,
``Respiration``, ``RSP``, ...), IR (``Infrared``, ``SpO2 IR``, ...), RED (``Red intensity``,
``SpO2 red``, ...). Live inputs (:mod:`liquid_stream.io.lsl`) map their labels this
way.

Used by the training data (``training/data/vitals/bidmc.py``), the task's checkpoint metadata, the
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


# The waveform channels the vital-sign models read (BIDMC names, plus IR and RED: a pulse
# oximeter's raw intensities, which its SpO2 comes from; PLETH is its display waveform), and
# the other labels devices and tools give them besides those names (compared by
# label_key). A single-lead ECG ("ECG", "EKG") is taken as lead II: the lead BIDMC records
# and the models were trained on.
SIGNALS: tuple[str, ...] = ("PLETH", "II", "RESP", "IR", "RED")
SIGNAL_ALIASES: dict[str, tuple[str, ...]] = {
    "PLETH": (
        "ppg",
        "plethysmogram",
        "photoplethysmogram",
        "bvp",
        "ppg green",
        "ppg ir",
        "ppg red",
        "spo2 pleth",
    ),
    "II": ("ecg", "ekg", "ecg ii", "ekg ii", "lead ii", "ecg lead ii", "ii lead", "mlii"),
    "RESP": (
        "respiration",
        "rsp",
        "breathing",
        "resp belt",
        "respiratory effort",
        "impedance pneumography",
    ),
    "IR": ("infrared", "ir intensity", "ir raw", "oximeter ir", "spo2 ir"),
    "RED": ("red intensity", "red raw", "oximeter red", "spo2 red"),
}


def label_key(label: str) -> str:
    """``"ECG_II,"`` -> ``"ecg ii"``: a device's channel label, compared ignoring case, a
    trailing comma and the separators ``_ - .`` (each read as one blank)."""
    text = strip_name(label).lower()
    for sep in "_-.":
        text = text.replace(sep, " ")
    return " ".join(text.split())


_ALIAS_INDEX = {label_key(a): ch for ch, names in SIGNAL_ALIASES.items() for a in (ch, *names)}


def signal_channel(label: str) -> str | None:
    """The channel of :data:`SIGNALS` a device's label names (``"PPG"`` -> ``"PLETH"``,
    ``"ECG"`` -> ``"II"``, ``"Respiration"`` -> ``"RESP"``), None for any other label."""
    return _ALIAS_INDEX.get(label_key(label))
