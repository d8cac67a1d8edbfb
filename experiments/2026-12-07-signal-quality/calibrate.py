"""Signal-quality thresholds, set on simulated records and generated failure cases only.

Question: which share of good seconds does apps/vitals/signal_quality.py flag, and which share of
failure seconds does it pass, per channel kind (PPG, ECG, RESP)?

    python experiments/2026-12-07-signal-quality/calibrate.py --records 40 --minutes 3

Good seconds: every second from 8 s on of domain-randomised records (training/data/
vitals_sim.py, seed 101, never a training seed) whose 8-s window has no sensor-off sample.
Sensor-off seconds: those whose last 2 s are all sensor-off (should be flagged). Failure
cases (generated): zeros, a constant offset, clipping of the record's own signal at 20 %
of its range, +-1 LSB quantisation noise, white / pink / brown Gaussian noise, 50 / 60 Hz
hum alone, hum + white noise at 20 dB.
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from liquid_stream.apps.vitals import signal_quality as sq
from liquid_stream.training.data.vitals.vitals_sim import REC_NAMES, simulate_randomised

FS = 125
CHANNELS = {"PLETH": "ppg", "II": "ecg", "RESP": "resp"}


def colored(rng, n, beta):
    f = np.fft.rfftfreq(n)
    spec = rng.standard_normal(len(f)) + 1j * rng.standard_normal(len(f))
    spec[1:] /= f[1:] ** (beta / 2)
    spec[0] = 0
    return np.fft.irfft(spec, n)


def failures(rng, clean: np.ndarray) -> dict[str, np.ndarray]:
    n = len(clean)
    t = np.arange(n) / FS
    lo, hi = np.percentile(clean, [1, 99])
    mid = (lo + hi) / 2
    w = 0.1 * (hi - lo)
    return {
        "zeros": np.zeros(n),
        "offset": np.full(n, 512.0),
        "clipped": np.clip(clean, mid - w, mid + w),
        "quantised": 512.0 + rng.integers(-1, 2, n).astype(float),
        "white": rng.standard_normal(n),
        "pink": colored(rng, n, 1.0),
        "brown": colored(rng, n, 2.0),
        "hum50": np.sin(2 * np.pi * 50 * t),
        "hum60": 3 + np.sin(2 * np.pi * 60 * t + 1),
        "hum+white": np.sin(2 * np.pi * 50 * t) + 0.1 * rng.standard_normal(n),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=40)
    ap.add_argument("--minutes", type=float, default=3.0)
    ap.add_argument("--seed", type=int, default=101)
    ap.add_argument("--out", default=None, help="JSON of the features")
    a = ap.parse_args()
    L = int(sq.LONG_S * FS)
    good = {k: [] for k in CHANNELS.values()}
    off = {k: [] for k in CHANNELS.values()}
    fail = {k: {} for k in CHANNELS.values()}
    reasons = {k: {} for k in CHANNELS.values()}
    for i in range(a.records):
        rec = simulate_randomised(np.random.default_rng([a.seed, i]), a.minutes)
        sig, so = rec["signals"], rec["truth"]["sensor_off"]
        grp = {"PLETH": "ppg", "II": "ecg", "RESP": "resp"}
        for ch, kname in CHANNELS.items():
            kind = sq.KINDS[kname]
            x = sig[:, REC_NAMES.index(ch + ",")]
            m = so[grp[ch]]
            for end in range(L, len(x), FS):
                w = x[end - L : end]
                if not np.isfinite(w).all():
                    continue
                if not m[end - L : end].any():
                    good[kname].append(sq.judge(w, FS, kind))
                elif m[end - 2 * FS : end].all():
                    off[kname].append(sq.judge(w, FS, kind))
            if i < 10:
                rng = np.random.default_rng([a.seed, i, 7])
                clean = np.nan_to_num(x[: 60 * FS])
                for name, y in failures(rng, clean).items():
                    v = [sq.judge(y[e - L : e], FS, kind) for e in range(L, len(y), FS)]
                    fail[kname].setdefault(name, []).extend(v)
    print(
        "| kind | good s | good flagged | sensor-off s | off flagged | "
        "failure cases passed (of each) |"
    )
    print("|---|---|---|---|---|---|")
    summary = {}
    for k in good:
        g, o = good[k], off[k]
        for r in g:
            if r:
                reasons[k][r] = reasons[k].get(r, 0) + 1
        passed = {n: sum(v is None for v in vs) / len(vs) for n, vs in fail[k].items()}
        worst = ", ".join(f"{n} {p:.0%}" for n, p in passed.items() if p > 0) or "none"
        print(
            f"| {k} | {len(g)} | {np.mean([r is not None for r in g]):.2%} | {len(o)} | "
            f"{np.mean([r is not None for r in o]) if o else float('nan'):.1%} | {worst} |"
        )
        summary[k] = {
            "good": len(g),
            "good_flagged": float(np.mean([r is not None for r in g])),
            "good_reasons": reasons[k],
            "off": len(o),
            "passed": passed,
        }
    print(json.dumps({k: v["good_reasons"] for k, v in summary.items()}))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()
