"""Small BIDMC fixtures in the real formats: simulated WFDB record pairs, hand-made WFDB
records (for error paths) and Monash ``.ts`` files."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from liquid_stream.training.data.vitals.bidmc_sim import write_bidmc_sim

SIM_RECORDS = 3
SIM_MINUTES = 1.5
SIM_SEED = 7


def sim_root(path: str | Path):
    """3 simulated records x 1.5 min (11251 samples at 125 Hz, 91 numerics)."""
    return write_bidmc_sim(path, SIM_RECORDS, SIM_MINUTES, SIM_SEED, progress=False)


def write_pair(
    root: str | Path,
    name: str,
    signals: np.ndarray,  # (T, C) physical values, NaN allowed
    sig_names: Sequence[str],
    numerics: np.ndarray,  # (S, K) 1 Hz values, NaN allowed
    num_names: Sequence[str] = ("HR,", "PULSE,", "RESP,", "SpO2,"),
    fs: float = 125,
) -> None:
    """Write WFDB ``name`` (signals) and ``name + "n"`` (numerics, gain 10) in format 16."""
    import wfdb

    wfdb.wrsamp(
        name,
        fs=fs,
        units=["mV"] * signals.shape[1],
        sig_name=list(sig_names),
        p_signal=signals,
        fmt=["16"] * signals.shape[1],
        write_dir=str(root),
    )
    d = np.where(np.isnan(numerics), -32768, np.round(np.nan_to_num(numerics) * 10))
    wfdb.wrsamp(
        f"{name}n",
        fs=1,
        units=["bpm"] * numerics.shape[1],
        sig_name=list(num_names),
        d_signal=d.astype(np.int64),
        fmt=["16"] * numerics.shape[1],
        adc_gain=[10.0] * numerics.shape[1],
        baseline=[0] * numerics.shape[1],
        write_dir=str(root),
    )


def ts_text(x: np.ndarray, y: np.ndarray, name: str = "BIDMC32HR") -> str:
    """Monash TSER .ts text for x (n, C, L) (NaN written as '?') and y (n,) (NaN as '?')."""

    def val(v: float) -> str:
        return "?" if np.isnan(v) else repr(float(v))

    lines = [
        "# The data is a 32 second window of PPG and ECG, sampled at 125 Hz.",
        "# Fixture written by tests/fixtures_bidmc.py",
        f"@problemName {name}",
        "@timeStamps false",
        "@missing true",
        "@univariate false",
        f"@dimensions {x.shape[1]}",
        "@equalLength true",
        f"@seriesLength {x.shape[2]}",
        "@targetlabel true",
        "@data",
    ]
    for xi, yi in zip(x, y, strict=True):
        dims = [",".join(val(v) for v in d) for d in xi]
        lines.append(":".join(dims) + ":" + val(yi))
    return "\n".join(lines) + "\n"
