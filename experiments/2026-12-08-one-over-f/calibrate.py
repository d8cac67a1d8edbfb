"""The 1/f test's threshold, set on simulated records and generated failures only.

Question: with the 1/f test (apps/vitals/signal_quality.py ``misfit`` < ``SMOOTH_MIN``), which
share of good simulated seconds does the index flag, and which share of each failure case
(pink / brown noise alone at several amplitudes, added to a clean signal at 20 / 10 / 3 dB,
and the 2026-12-07 cases) does it pass, per channel kind, before (``SMOOTH_MIN`` = -inf, the
rule off) and after?

    python experiments/2026-12-08-one-over-f/windows.py --out /tmp/one-over-f.npz
    python experiments/2026-12-08-one-over-f/calibrate.py /tmp/one-over-f.npz [--sweep]

``--sweep`` also prints the rates at other thresholds (the choice). The 2026-12-07 cases are
rebuilt with that study's own ``failures`` (10 records of seed 101, 60 s each).
``--tapers K --threshold T``: the alternative weighed in result.md, the same test on a
multitaper spectrum (the mean of K sine-tapered periodograms instead of one Hann
periodogram) at threshold T.
"""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

import numpy as np

from liquid_stream.apps.vitals import signal_quality as sq
from liquid_stream.training.data.vitals.vitals_sim import REC_NAMES, simulate_randomised

FS = 125
L = 8 * FS
CHANNELS = {"PLETH": "ppg", "II": "ecg", "RESP": "resp"}
OLD = Path(__file__).parents[1] / "2026-12-07-signal-quality" / "calibrate.py"


def old_cases() -> dict[str, np.ndarray]:
    spec = importlib.util.spec_from_file_location("old_calibrate", OLD)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out: dict[str, list] = {}
    for i in range(10):
        rec = simulate_randomised(np.random.default_rng([101, i]), 3.0)
        for ch, k in CHANNELS.items():
            x = rec["signals"][:, REC_NAMES.index(ch + ",")]
            rng = np.random.default_rng([101, i, 7])
            clean = np.nan_to_num(x[: 60 * FS])
            for name, y in mod.failures(rng, clean).items():
                if name in ("pink", "brown"):
                    continue  # in the new table
                w = [y[e - L : e] for e in range(L, len(y), FS)]
                out.setdefault(f"{k}/{name}", []).extend(w)
    return {key: np.stack(v) for key, v in out.items()}


def multitaper_misfit(tapers: int):
    """sq.power_law_misfit with the mean of ``tapers`` sine-tapered periodograms (Riedel &
    Sidorenko 1995) in place of the Hann periodogram."""

    def misfit(y: np.ndarray, fs: float) -> float:
        n = len(y)
        j = np.arange(1, n + 1)
        h = np.sqrt(2.0 / (n + 1)) * np.sin(np.pi * np.arange(1, tapers + 1)[:, None] * j / (n + 1))
        p = np.mean(np.abs(np.fft.rfft(h * y, axis=1)) ** 2, axis=0)
        return sq.periodogram_misfit(p, fs, n)

    return misfit


def verdicts(X: np.ndarray, kind: sq.Kind) -> list:
    return [sq.judge(np.asarray(x, np.float64), FS, kind) for x in X]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("windows", help="windows.py's .npz")
    ap.add_argument("--sweep", action="store_true")
    ap.add_argument("--tapers", type=int, default=0, help="0: the app's Hann periodogram")
    ap.add_argument("--threshold", type=float, default=None, help="default: the app's")
    a = ap.parse_args()
    if a.tapers:
        sq.power_law_misfit = multitaper_misfit(a.tapers)
    if a.threshold is not None:
        sq.SMOOTH_MIN = a.threshold
    data = dict(np.load(a.windows))
    motion = {key: data.pop(key) for key in [k for k in data if k.startswith("motion/")]}
    data.update({f"fail/{k}": v for k, v in old_cases().items()})
    chosen = sq.SMOOTH_MIN
    grid = [0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2, 1.3, 1.4, 1.5]
    thresholds = [-np.inf, chosen] + ([t for t in grid if t != chosen] if a.sweep else [])
    rows = {}
    extra = {}
    for key, X in data.items():
        parts = key.split("/")
        k = parts[2] if parts[0] == "good" else parts[1]
        kind = sq.KINDS[k]
        misfit = np.array([sq.features(np.asarray(x, np.float64), FS, kind)["misfit"] for x in X])
        sq.SMOOTH_MIN = -np.inf
        before = np.array([v is None for v in verdicts(X, kind)])
        sq.SMOOTH_MIN = chosen
        row = {}
        for t in thresholds:
            ok = before & ~(misfit < t)  # the other rules, then the 1/f test
            row[t] = float(np.mean(ok))
        rows[key] = (len(X), row)
        if parts[0] == "good":  # the seconds the 1/f test adds, and how many in motion
            new = before & (misfit < chosen)
            mov = motion["motion/" + "/".join(parts[1:])]
            extra[key] = (int(new.sum()), int((new & mov).sum()))
    head = " | ".join("before" if t == -np.inf else f"{t:g}" for t in thresholds)
    print(f"| set / case | kind | windows | {head} |")
    print("|---|---|---|" + "---|" * len(thresholds))
    for key, (n, row) in rows.items():
        parts = key.split("/")
        good = parts[0] == "good"
        name = f"good: {parts[1]}" if good else parts[2]
        k = parts[2] if good else parts[1]
        what = "flagged" if good else "passed"
        vals = " | ".join(f"{(1 - row[t]) if good else row[t]:.2%}" for t in thresholds)
        print(f"| {name} ({what}) | {k} | {n} | {vals} |")
    print()
    print(
        "Good windows the 1/f test adds at the chosen threshold (of them, inside a motion burst):"
    )
    for key, (n_new, n_mov) in extra.items():
        print(f"- {key}: {n_new} ({n_mov} in motion)")


if __name__ == "__main__":
    main()
