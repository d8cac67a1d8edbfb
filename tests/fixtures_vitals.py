"""Small real fixtures for the vital-sign monitor: tiny exported models and WFDB records.

``export_vital_model(path, "hr")`` exports an untrained (tiny) LiquidS4Model with the
``bidmc`` task metadata; ``write_record(dir, "bidmc01", seconds=...)`` writes a BIDMC-style
125 Hz signal record (RESP, PLETH, II with trailing commas) and its 1 Hz numerics record.
"""

from __future__ import annotations

import inspect
import os
from pathlib import Path

import numpy as np

UNITS = {"hr": "bpm", "rr": "breaths/min", "spo2": "%"}
SHIFT = {"hr": 75.0, "rr": 15.0, "spo2": 96.0}
CHANNELS = {"hr": ("PLETH", "II"), "rr": ("RESP", "PLETH"), "spo2": ("PLETH", "II")}
# per-channel mean/std of write_record's signals (folded into the graph)
STATS = {
    "RESP": (0.5, 0.2),
    "PLETH": (0.5, 0.2),
    "II": (0.1, 0.3),
    "V": (0.0, 0.3),
    "AVR": (0.0, 0.3),
}


def tiny_model(d_input: int = 2, window: int = 250, seed: int = 0, shift: float = 0.0, **kw):
    import torch

    from liquid_stream.nn.model import LiquidS4Model

    torch.manual_seed(seed)
    args = dict(
        d_input=d_input,
        d_output=1,
        d_model=8,
        n_layers=1,
        d_state=4,
        mode="diag",
        decoder="window",
        decoder_window=window,
    )
    args.update(kw)
    if shift and "output_shift" in inspect.signature(LiquidS4Model).parameters:
        args["output_shift"] = shift
    return LiquidS4Model(**args).eval()


def vital_meta(target: str, channels, window: int, sample_rate: float = 125, **extra) -> dict:
    return {
        "task": "bidmc",
        "target": target,
        "units": UNITS.get(target, ""),
        "channels": list(channels),
        "sample_rate": sample_rate,
        "window": window,
        "labels": [target],
        "input_mean": [STATS[c][0] for c in channels],
        "input_std": [STATS[c][1] for c in channels],
        **extra,
    }


def export_vital_model(
    path: str | Path,
    target: str = "hr",
    channels=None,
    window: int = 250,
    sample_rate: float = 125,
    seed: int = 0,
    model=None,
    **meta_extra,
):
    """Export a tiny untrained model for ``target``; returns (torch model, meta)."""
    from liquid_stream.export.pipeline import export_model

    channels = tuple(channels or CHANNELS.get(target, ("PLETH", "II")))
    if model is None:
        model = tiny_model(len(channels), window, seed, SHIFT.get(target, 0.0))
    meta = vital_meta(target, channels, window, sample_rate, **meta_extra)
    export_model(model, path, chunk=125, meta=meta)
    return model, meta


def signals(seconds: float, fs: float = 125, seed: int = 0) -> dict[str, np.ndarray]:
    """Simple synthetic RESP / PLETH / II / V / AVR at ``fs`` (HR drifting 70 -> 110 bpm)."""
    rng = np.random.default_rng(seed)
    n = int(round(seconds * fs))
    t = np.arange(n) / fs
    hr = 70 + 40 * t / max(seconds, 1)  # bpm
    phase = 2 * np.pi * np.cumsum(hr / 60) / fs
    rr = 15 + 3 * np.sin(2 * np.pi * t / 60)
    rphase = 2 * np.pi * np.cumsum(rr / 60) / fs
    noise = rng.normal(0, 0.01, (5, n))
    return {
        "RESP": 0.5 + 0.2 * np.sin(rphase) + noise[0],
        "PLETH": 0.5 + 0.2 * np.sin(phase) + 0.05 * np.sin(2 * phase) + noise[1],
        "II": 0.1 + 0.8 * np.maximum(0, np.cos(phase)) ** 20 + noise[2],
        "V": 0.6 * np.maximum(0, np.cos(phase)) ** 20 + noise[3],
        "AVR": -0.4 * np.maximum(0, np.cos(phase)) ** 20 + noise[4],
    }


def numerics(seconds: int, seed: int = 0, nan_seconds=()) -> dict[str, np.ndarray]:
    """1 Hz HR / PULSE / RESP / SpO2 (readings i at i s), NaN at ``nan_seconds``."""
    rng = np.random.default_rng(seed + 1)
    t = np.arange(seconds + 1, dtype=np.float64)
    hr = 70 + 40 * t / max(seconds, 1) + rng.normal(0, 1, len(t))
    out = {
        "HR": hr,
        "PULSE": hr + rng.normal(0, 1, len(t)),
        "RESP": 15 + 3 * np.sin(2 * np.pi * t / 60),
        "SpO2": 96 + rng.normal(0, 0.5, len(t)),
    }
    for v in out.values():
        v[list(nan_seconds)] = np.nan
    return out


def write_record(
    root: str | Path,
    name: str = "bidmc01",
    seconds: float = 120,
    fs: float = 125,
    channels=("RESP", "PLETH", "II"),
    nan_spans=(),
    with_numerics: bool = True,
    numerics_nan_seconds=(),
    seed: int = 0,
    flat_spans=(),
) -> Path:
    """Write ``root/name`` (+ ``root/name``n) with BIDMC channel names; returns the path.

    ``nan_spans``: ``[(channel, start_s, duration_s), ...]`` set to NaN (written as WFDB
    invalid samples); ``flat_spans``: ``[(channel, start_s, duration_s, value), ...]`` set
    to a constant (a detached sensor)."""
    import wfdb

    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    sig = signals(seconds, fs, seed)
    x = np.stack([sig[c] for c in channels], 1)
    for ch, s0, dur in nan_spans:
        a = int(round(s0 * fs))
        x[a : a + int(round(dur * fs)), list(channels).index(ch)] = np.nan
    for ch, s0, dur, value in flat_spans:
        a = int(round(s0 * fs))
        x[a : a + int(round(dur * fs)), list(channels).index(ch)] = value
    wfdb.wrsamp(
        name,
        fs=fs,
        units=["NU" if c in ("RESP", "PLETH") else "mV" for c in channels],
        sig_name=[f"{c}," for c in channels],
        p_signal=x,
        fmt=["16"] * len(channels),
        adc_gain=[10000.0] * len(channels),
        baseline=[0] * len(channels),
        write_dir=str(root),
    )
    if with_numerics:
        num = numerics(int(seconds), seed, numerics_nan_seconds)
        names = list(num)
        wfdb.wrsamp(
            name + "n",
            fs=1,
            units=["bpm", "bpm", "bpm", "%"],
            sig_name=[f"{c}," for c in names],
            p_signal=np.stack([num[c] for c in names], 1),
            fmt=["16"] * 4,
            adc_gain=[100.0] * 4,
            baseline=[0] * 4,
            write_dir=str(root),
        )
    return root / name


def truncate_record(record: str | Path, keep_fraction: float = 0.5) -> None:
    """Cut ``record``'s .dat to ``keep_fraction`` of its bytes (plus one odd byte)."""
    dat = Path(str(record) + ".dat")
    os.truncate(dat, int(dat.stat().st_size * keep_fraction) + 1)
