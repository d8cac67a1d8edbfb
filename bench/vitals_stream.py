"""Streamed error of exported vital-sign models over whole records, as the monitor runs them.

    python bench/vitals_stream.py MODEL.onnx [MODEL.onnx ...] (--records ROOT | --checkpoint
        RUN/best.pt [--split test]) [--rate HZ] [--flat CHANNEL] [--worst K] [--bands E,E,...]

Each record is streamed from its start through ``liquid-stream vitals``' own code path
(``open_record`` + ``run_record``: 1 s chunks, unpaced, one model at a time), and every
emitted second whose status is ``ok`` or ``bridged`` is scored against the record's
reference over the model's trailing window (the mean of the 1 Hz numerics, as
``evaluate`` streams it). Records: every record pair under ``--records`` (e.g. a set of
``liquid-stream data bidmc-sim --randomised`` that no compared model trained on: a fair
judge of models trained on different sets), or the ``--split`` records of
``--checkpoint``'s record split. Prints one row per model: seconds scored, RMSE, MAE, bias,
share within ±5 bpm (HR) / ±2 breaths/min (RR) / ±2 % (SpO2), and the least-squares slope of
estimate on truth; with the command. ``--worst K`` adds, under each model, the K records that
hold the most of its squared error, with what the simulator drew for them (``params.json``).
``--bands 8,12,35`` adds, under each model, one row per band of the reference (below 8, 8-12,
12-35, 35 and above): its share of the scored seconds and of the squared error, RMSE, bias.

``--rate HZ``: each record's signals are first resampled from their rate to HZ
(``scipy.signal.resample_poly``; a NaN widens by the filter's length) and written as a
record of that rate, with the same numerics, so the monitor resamples them back to the
models' rate, as it does for a monitor or oximeter that writes another rate.
``--flat CHANNEL``: the records are rewritten with that channel reading its median
throughout (a PPG+ECG model read on the ECG alone, with ``--flat PLETH``), the rest as is;
since the monitor marks a flat channel as no signal (design §12), its models then have no
valid second to score (the row says so).
"""

from __future__ import annotations

import argparse
import math
import shlex
import sys
from pathlib import Path

import numpy as np

from liquid_stream.apps.vitals.run import open_record, run_record
from liquid_stream.io.bidmc_vocab import WITHIN, channel_key, strip_name
from liquid_stream.nn.checkpoint import split_records
from liquid_stream.training.data.vitals.bidmc import list_records, wfdb_dir


def streamed(model: Path, records: list[Path]) -> tuple[str, np.ndarray, np.ndarray, np.ndarray]:
    """(target, estimates, references, record index) over every scored second of
    ``records``."""
    est, ref, which, target = [], [], [], ""
    for i, rec in enumerate(records):
        monitor, source = open_record([model], rec)
        res = run_record(monitor, source, speed=None)
        target = res.targets[0]
        for e in res.estimates:
            v, r = e.values.get(target, math.nan), e.ref.get(target, math.nan)
            if e.status.get(target) in ("ok", "bridged") and v == v and r == r:
                est.append(v)
                ref.append(r)
                which.append(i)
    return target, np.asarray(est), np.asarray(ref), np.asarray(which, np.int64)


# what a randomised record's draws say about it (params.json "per_record"), for --worst
DRAWS = (
    ("family", "{}"),
    ("hr0", "HR₀ {:.0f}"),
    ("rr0", "RR₀ {:.0f}"),
    ("n_ectopic", "{} ectopic"),
    ("af_episodes", "AF ×{}"),
    ("motion_per_min", "motion {:.1f}/min"),
    ("perfusion", "perfusion {:.2f}"),
    ("sensor_off", "sensor-off ×{}"),
    ("ppg_refl_ratio", "PPG reflected wave ×{:.2f}"),
    ("ppg_late_ratio", "late wave ×{:.2f}"),
)


def describe(draw: dict) -> str:
    """A record's draws in a few words (lists count their episodes; zero counts left out)."""
    words = []
    for key, fmt in DRAWS:
        v = draw.get(key)
        v = len(v) if isinstance(v, list) else v
        if v not in (None, 0):
            words.append(fmt.format(v))
    return ", ".join(words)


def simulator_draws(records: list[Path]) -> dict:
    """``params.json``'s per-record draws of a simulated set (next to the records or one
    folder up); empty for other records."""
    import json

    for folder in (records[0].parent, records[0].parent.parent) if records else ():
        if (folder / "params.json").is_file():
            return json.loads((folder / "params.json").read_text()).get("per_record", {})
    return {}


def worst_rows(
    records: list[Path], d: np.ndarray, which: np.ndarray, k: int, draws: dict
) -> list[str]:
    """The ``k`` records with the largest share of the squared error: per-record RMSE, that
    share, and (for a randomised set) the record's ``draws``."""
    sq = np.bincount(which, weights=d**2, minlength=len(records))
    n = np.bincount(which, minlength=len(records))
    rows = []
    for i in np.argsort(-sq)[:k]:
        if n[i] == 0:
            break
        name = records[i].name
        share, about = 100 * sq[i] / sq.sum(), describe(draws.get(name, {}))
        rows.append(
            f"|   {name} | {n[i]} s | RMSE {math.sqrt(sq[i] / n[i]):.2f} | "
            f"{share:.1f} % of Σd² | {about} |"
        )
    return rows


def band_rows(y: np.ndarray, d: np.ndarray, edges: list[float]) -> list[str]:
    """One row per band of the reference ``y`` cut at ``edges``: share of the seconds and of
    the squared error ``d**2``, RMSE and bias in the band."""
    bounds = [-math.inf, *edges, math.inf]
    rows, se = [], float(np.sum(d**2))
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        m = (y >= lo) & (y < hi)
        name = f"{lo:g}–{hi:g}"
        name = f"< {hi:g}" if lo == -math.inf else f"≥ {lo:g}" if hi == math.inf else name
        if not m.any():
            rows.append(f"|   truth {name} | | 0 | | | | | |")
            continue
        share = 100 * np.sum(d[m] ** 2) / se
        rows.append(
            f"|   truth {name} | {100 * m.mean():.1f} % of s, {share:.1f} % of sq. err "
            f"| {int(m.sum())} | {np.sqrt(np.mean(d[m] ** 2)):.3f} | "
            f"{np.mean(np.abs(d[m])):.3f} | {d[m].mean():+.3f} | | |"
        )
    return rows


def rewrite(records: list[Path], out: Path, rate: int | None, flat: str | None) -> list[Path]:
    """``records`` rewritten into ``out``: at ``rate`` Hz (``--rate``) and/or with the
    channel ``flat`` reading its median all along (``--flat``); the numerics as they are."""
    import shutil
    from fractions import Fraction

    import wfdb
    from scipy.signal import resample_poly

    paths = []
    for rec in records:
        r = wfdb.rdrecord(str(rec))
        x, fs = r.p_signal, r.fs
        if rate is not None:
            f = Fraction(int(rate), int(r.fs))
            x = resample_poly(x, f.numerator, f.denominator, axis=0, padtype="line")
            fs = rate
        if flat is not None:
            keys = [channel_key(n) for n in r.sig_name]
            if channel_key(flat) not in keys:
                have = ", ".join(strip_name(n) for n in r.sig_name)
                raise SystemExit(f"error: {rec}: no channel {flat} (it has {have})")
            k = keys.index(channel_key(flat))
            x = x.copy()
            x[:, k] = np.nanmedian(x[:, k])
        wfdb.wrsamp(
            rec.name,
            fs=fs,
            units=r.units,
            sig_name=r.sig_name,
            p_signal=x,
            fmt=["16"] * len(r.sig_name),
            write_dir=str(out),
        )
        for suffix in ("n.hea", "n.dat"):  # the numerics, as they are (1 Hz)
            shutil.copy(rec.parent / f"{rec.name}{suffix}", out / f"{rec.name}{suffix}")
        paths.append(out / rec.name)
    return paths


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="+", type=Path, help="exported vital-sign models (.onnx)")
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--records", type=Path, help="a folder of WFDB record pairs")
    src.add_argument("--checkpoint", type=Path, help="a run whose record split names them")
    ap.add_argument("--split", default="test", choices=("val", "test"))
    ap.add_argument("--rate", type=int, default=None, help="rewrite the records at this rate")
    ap.add_argument(
        "--flat",
        default=None,
        metavar="CHANNEL",
        help="rewrite the records with CHANNEL (e.g. PLETH) flat",
    )
    ap.add_argument(
        "--worst",
        type=int,
        default=0,
        metavar="K",
        help="also list each model's K records of most squared error",
    )
    ap.add_argument(
        "--bands",
        default=None,
        metavar="E,E,...",
        help="also score each model by bands of the reference",
    )
    args = ap.parse_args()
    try:
        edges = sorted(float(v) for v in args.bands.split(",")) if args.bands else []
    except ValueError:
        sys.exit(f"error: --bands takes numbers separated by commas, got {args.bands!r}")
    command = "python " + shlex.join(["bench/vitals_stream.py", *sys.argv[1:]])
    records = (
        [wfdb_dir(args.records) / n for n in list_records(args.records)]
        if args.records is not None
        else split_records(args.checkpoint, args.split)
    )
    if not records:
        sys.exit(f"error: no records under {args.records}")
    draws = simulator_draws(records)  # before any rewrite
    if args.rate is not None or args.flat is not None:
        import tempfile

        tmp = tempfile.TemporaryDirectory()
        records = rewrite(records, Path(tmp.name), args.rate, args.flat)
    print(
        f"{len(records)} records"
        + (f" at {args.rate} Hz" if args.rate else "")
        + (f", {args.flat} flat" if args.flat else ""),
        flush=True,
    )
    rows = [
        "| model | target | seconds | RMSE | MAE | bias | within | slope |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for m in args.models:
        t, e, y, which = streamed(m, records)
        d, tol = e - y, WITHIN[t]
        if not len(d):  # e.g. --flat PLETH: the monitor shows no number for a flat line
            rows.append(f"| {m} | {t} | 0 | no valid second (no signal) | | | | |")
            print(rows[-1], flush=True)
            continue
        slope = float(np.polyfit(y, e, 1)[0])
        rows.append(
            f"| {m} | {t} | {len(d)} | {np.sqrt(np.mean(d**2)):.3f} | "
            f"{np.mean(np.abs(d)):.3f} | {d.mean():+.3f} | ±{tol:g}: "
            f"{100 * np.mean(np.abs(d) <= tol):.1f} % | {slope:.3f} |"
        )
        print(rows[-1], flush=True)
        if args.worst:
            worst = worst_rows(records, d, which, args.worst, draws)
            rows += worst
            print("\n".join(worst), flush=True)
        if edges:
            rows += band_rows(y, d, edges)
            print("\n".join(rows[-len(edges) - 1 :]), flush=True)
    print("\n" + "\n".join(rows) + f"\n\nCommand: `{command}`")


if __name__ == "__main__":
    main()
