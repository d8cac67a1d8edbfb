"""Colored (1/f) noise passes the signal-quality check: which periodicity feature separates
it from real pulses and breaths without blanking irregular rhythms (AF)?

    python experiments/2026-12-07-colored-noise/explore.py --records 40 --minutes 3

Feature per window (8 s, as apps/vitals/signal_quality.py): the highest *peak* of the normalised
autocorrelation of the band-passed signal at the lags of the kind's rates: a local maximum
whose height above the lowest value at shorter lags (its prominence) is reported. Good
windows: domain-randomised records (seed 101, never a training seed), split by AF; noise:
white / pink / brown Gaussian, 10 draws of 60 s. Simulated records and generated noise
only.
"""

from __future__ import annotations

import argparse

import numpy as np

from liquid_stream.apps.vitals import signal_quality as sq
from liquid_stream.training.data.vitals.vitals_sim import REC_NAMES, simulate_randomised

FS = 125
L = int(sq.LONG_S * FS)
BANDS = {
    "ppg": ((0.5, 8.0), (30.0, 240.0)),
    "resp": ((0.05, 2.0), (4.0, 60.0)),
    "ecg": (None, (30.0, 240.0)),
}


def colored(rng, n, beta):
    f = np.fft.rfftfreq(n)
    spec = rng.standard_normal(len(f)) + 1j * rng.standard_normal(len(f))
    spec[1:] /= f[1:] ** (beta / 2)
    spec[0] = 0
    return np.fft.irfft(spec, n)


def prominence(x: np.ndarray, kind: str) -> float:
    band, rates = BANDS[kind]
    t = np.arange(len(x), dtype=np.float64)
    y = x - np.polyval(np.polyfit(t, x, 1), t)
    if band is None:  # ECG: the QRS energy, as the index's rhythm test
        y = sq.band_pass(np.abs(np.diff(sq.band_pass(y, FS, 0.5, 40.0), prepend=0.0)), FS, 0.5, 8.0)
    else:
        y = sq.band_pass(y, FS, *band)
    y = y - y.mean()
    e = float(y @ y)
    if e <= 0:
        return 0.0
    n = len(y)
    ac = np.fft.irfft(np.abs(np.fft.rfft(y, 2 * n)) ** 2, 2 * n)[:n] / e
    lo = max(1, int(np.floor(60.0 / rates[1] * FS)))
    hi = min(n - 2, int(np.ceil(60.0 / rates[0] * FS)))
    best = 0.0
    for k in range(lo, hi + 1):
        if ac[k] >= ac[k - 1] and ac[k] >= ac[k + 1]:
            best = max(best, float(ac[k] - ac[1:k].min()))
    return best


def slope_skew(x: np.ndarray, kind: str) -> float:
    """|skewness| of the slope of the band-passed window (a pulse rises faster than it
    falls; Gaussian noise of any colour is symmetric)."""
    band, _ = BANDS[kind]
    if band is None:
        band = (0.5, 40.0)
    t = np.arange(len(x), dtype=np.float64)
    y = sq.band_pass(x - np.polyval(np.polyfit(t, x, 1), t), FS, *band)
    d = np.diff(y)
    d = d - d.mean()
    m2 = float(np.mean(d**2))
    return abs(float(np.mean(d**3)) / m2**1.5) if m2 > 0 else 0.0


def feature(x: np.ndarray, kind: str) -> tuple[float, float]:
    return prominence(x, kind), slope_skew(x, kind)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=40)
    ap.add_argument("--minutes", type=float, default=3.0)
    ap.add_argument("--seed", type=int, default=101)
    a = ap.parse_args()
    sets = ("good", "good_ectopic", "good_af", "white", "pink", "brown")
    out = {k: {s: [] for s in sets} for k in BANDS}
    names = {"ppg": "PLETH,", "resp": "RESP,", "ecg": "II,"}
    for i in range(a.records):
        rec = simulate_randomised(np.random.default_rng([a.seed, i]), a.minutes)
        sig, truth = rec["signals"], rec["truth"]
        prm = rec["params"]
        af_spans = [
            (e["start_s"], e["start_s"] + e["dur_s"]) if isinstance(e, dict) else tuple(e)
            for e in prm.get("af_episodes", [])
        ]
        irregular = prm.get("ectopic_prob", 0.0) > 0
        for kind, ch in names.items():
            x = sig[:, REC_NAMES.index(ch)]
            so = truth["sensor_off"][kind]
            for end in range(L, len(x), 2 * FS):
                w = x[end - L : end]
                if not np.isfinite(w).all() or so[end - L : end].any():
                    continue
                if sq.judge(w, FS, sq.KINDS[kind]) is not None:
                    continue  # already flagged: not this test's business
                t0, t1 = (end - L) / FS, end / FS
                af = any(a < t1 and b > t0 for a, b in af_spans)
                key = "good_af" if af else "good_ectopic" if irregular else "good"
                out[kind][key].append(feature(w, kind))
    rng = np.random.default_rng([a.seed, 99])
    for kind in BANDS:
        for name, beta in (("white", 0.0), ("pink", 1.0), ("brown", 2.0)):
            for _ in range(10):
                y = colored(rng, 60 * FS, beta)
                for end in range(L, len(y), 2 * FS):
                    w = y[end - L : end]
                    if sq.judge(w, FS, sq.KINDS[kind]) is None:  # only what passes today
                        out[kind][name].append(feature(w, kind))
    qs = (0, 1, 5, 50, 95, 99, 100)
    for j, fname in enumerate(("prominence", "|slope skew|")):
        print(f"\n{fname}\n")
        print("| kind | set | windows | " + " | ".join(f"p{q}" for q in qs) + " |")
        print("|---|---|---|" + "---|" * len(qs))
        for kind, sets in out.items():
            for s, v in sets.items():
                if v:
                    p = np.percentile([x[j] for x in v], qs)
                    cells = " | ".join(f"{x:.2f}" for x in p)
                    print(f"| {kind} | {s} | {len(v)} | {cells} |")
    print("\nrule: flag when prominence < P and |slope skew| < S (share flagged)\n")
    for kind, sets in out.items():
        for P, S in ((0.5, 0.3), (0.6, 0.3), (0.7, 0.3), (0.7, 0.4), (0.8, 0.4), (0.9, 0.5)):
            row = []
            for s, v in sets.items():
                if v:
                    row.append(f"{s} {np.mean([a < P and b < S for a, b in v]):.1%}")
            print(f"| {kind} | P {P} S {S} | " + ", ".join(row) + " |")


if __name__ == "__main__":
    main()
