"""Pretrained models shipped with the package (ONNX, with a model card each).

    from liquid_stream.models import shipped
    path = shipped("kws-sc10")          # …/liquid_stream/models/kws-sc10.onnx

Each ``NAME.onnx`` here has a ``NAME.md`` model card beside it: the data, the exact
command that trained it, the git commit, the metrics on held-out data and the known
limits. Torch-free (the apps import this).
"""

from __future__ import annotations

from pathlib import Path

from liquid_stream.io.bidmc_vocab import channel_key

HERE = Path(__file__).resolve().parent
KWS = "kws-sc10"  # the keyword spotter `liquid-stream kws` uses when no MODEL is given
# The vital-sign models `liquid-stream vitals` uses when no MODEL is given, by sensor set
# (richest first): vitals-<set>-<target>. SpO2 needs the oximeter's raw IR and red
# intensities (a single PLETH carries no SpO2 cue): SPO2_MODEL, added whenever the record
# has both, with or without the HR / RR models of a set. A set fits when every model of it
# that is not in VITALS_OPTIONAL is installed (the optional ones join when they are): the ECG
# set ships HR only (no RR model from II alone yet).
VITALS_SETS: dict[str, tuple[str, ...]] = {
    "ppg-ecg": ("PLETH", "II"),
    "ppg": ("PLETH",),
    "ecg": ("II",),
}
VITALS_TARGETS: dict[str, tuple[str, ...]] = {
    "ppg-ecg": ("vitals-ppg-ecg-hr", "vitals-ppg-ecg-rr"),
    "ppg": ("vitals-ppg-hr", "vitals-ppg-rr"),
    "ecg": ("vitals-ecg-hr", "vitals-ecg-rr"),
}
VITALS_OPTIONAL: frozenset[str] = frozenset({"vitals-ecg-rr"})
OXIMETER: tuple[str, ...] = ("IR", "RED")
SPO2_MODEL = "vitals-oximeter-spo2"
# RR where the breaths are measured: a record with a respiration channel (impedance
# pneumography, a belt) gets its RR from RESP_RR_MODEL instead of the set's RR model.
RESP: tuple[str, ...] = ("RESP",)
RESP_RR_MODEL = "vitals-resp-rr"


class ShippedModelMissing(FileNotFoundError):
    """The named model is not in this installation."""


def available() -> list[str]:
    """Names of the shipped models (``NAME`` of every ``NAME.onnx`` here)."""
    return sorted(p.stem for p in HERE.glob("*.onnx"))


def shipped(name: str) -> Path:
    """Path of the shipped model ``name`` (``ShippedModelMissing`` if absent)."""
    path = HERE / f"{name}.onnx"
    if not path.is_file():
        raise ShippedModelMissing(
            f"no shipped model {name!r} in {HERE} (available: {', '.join(available()) or 'none'})"
        )
    return path


def _keys(channels) -> set[str]:
    """The channel names as :func:`~liquid_stream.io.bidmc_vocab.channel_key` compares them."""
    return {channel_key(c) for c in channels}


def vitals_for(channels) -> list[Path]:
    """The shipped vital-sign models for a record with these channel names (BIDMC style,
    ``"PLETH,"`` or ``"pleth"``): those of the richest sensor set the record carries whose
    files are all installed (those in VITALS_OPTIONAL when they are), with RR from the RESP
    model instead when it has RESP, and the SpO2 model if it has IR and RED;
    ``ShippedModelMissing`` (naming what the record has and what would be
    needed) when none fits."""
    have = _keys(channels)
    found: list[Path] = []
    for name, needs in VITALS_SETS.items():
        paths = [HERE / f"{m}.onnx" for m in VITALS_TARGETS[name]]
        needed = [p for p in paths if p.stem not in VITALS_OPTIONAL]
        if _keys(needs) <= have and all(p.is_file() for p in needed):
            found = [p for p in paths if p.is_file()]
            break
    resp = HERE / f"{RESP_RR_MODEL}.onnx"
    if _keys(RESP) <= have and resp.is_file():
        found = [p for p in found if not p.stem.endswith("-rr")] + [resp]
    spo2 = HERE / f"{SPO2_MODEL}.onnx"
    if _keys(OXIMETER) <= have and spo2.is_file():
        found.append(spo2)
    if found:
        return found
    sets = [
        v
        for k, v in VITALS_SETS.items()  # the sets whose models are installed
        if all(
            (HERE / f"{m}.onnx").is_file() for m in VITALS_TARGETS[k] if m not in VITALS_OPTIONAL
        )
    ]
    if (HERE / f"{RESP_RR_MODEL}.onnx").is_file():
        sets.append(RESP)
    wanted = " or ".join("+".join(v) for v in (*sets, OXIMETER))
    raise ShippedModelMissing(
        f"no shipped vital-sign models for channels {sorted(have) or 'none'}: they need "
        f"{wanted} (installed: {', '.join(available()) or 'none'})"
    )


def vitals_backups(channels, models) -> list[Path]:
    """The fallback models of a record with these channels, for the ``models`` picked by
    :func:`vitals_for`: for each HR or RR model, every other installed model of its
    target that the record's channels can feed, in the order the monitor tries them (RR
    from RESP first, then the sensor sets richest first): a PPG + ECG record's HR falls
    back to the PPG-only model, then to the ECG-only one (``VitalsMonitor(backups=...)``)."""
    have = _keys(channels)
    picked = {Path(m).resolve() for m in models}
    out: list[Path] = []
    for m in map(Path, models):
        target = m.stem.rsplit("-", 1)[-1]
        if target not in ("hr", "rr"):  # (SpO2 has one model)
            continue
        names = [RESP_RR_MODEL] if target == "rr" and _keys(RESP) <= have else []
        names += [
            n
            for k, needs in VITALS_SETS.items()
            if _keys(needs) <= have
            for n in VITALS_TARGETS[k]
            if n.endswith(f"-{target}")
        ]
        for n in names:
            p = HERE / f"{n}.onnx"
            if p.is_file() and p.resolve() not in picked and p not in out:
                out.append(p)
    return out


def card(name: str) -> str:
    """The model card (markdown) of the shipped model ``name``."""
    return (HERE / f"{name}.md").read_text()
