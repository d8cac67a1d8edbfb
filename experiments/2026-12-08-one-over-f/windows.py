"""The 8-s windows of the study (simulated records and generated failures only).

    python experiments/2026-12-08-one-over-f/windows.py --out /tmp/one-over-f.npz

Good windows (every second from 8 s on whose window has no sensor-off sample), per channel
kind (PLETH ppg, II ecg, RESP resp), from three sets of domain-randomised records
(training/data/vitals/vitals_sim.py, never a training seed):

- ``default``: 40 records x 3 min, seed 101 (the set of experiments/2026-12-07-signal-quality);
- ``rich``: 20 ectopy-rich records (``ectopy="rich"``) x 3 min, seed 102;
- ``af``: 20 records x 3 min, seed 103, atrial fibrillation throughout
  (``force={"af_episodes": [[-1, 1e4]]}``).

Failure windows (60-s segments, 8-s windows at a 1-s stride), 30 segments per case:

- ``pink`` / ``brown``: 1/f and 1/f^2 Gaussian noise alone, as floats (the index is
  scale-free, so one amplitude stands for all) and as an ADC would give it: ``2048 +
  round(a * noise)`` with the noise's SD ``a`` = 3, 30, 300 LSB (``pink@3`` ...);
- ``pulse+pink@SNR`` / ``pulse+brown@SNR``: the noise added to the channel of a clean
  simulated record (no ectopy, AF, motion or sensor-off: a real-looking pulse / breath /
  ECG) at SNR 20, 10 and 3 dB (the noise's variance over the 60 s against the clean
  channel's): the 20- and 10-dB cases carry a signal and must pass.
"""

from __future__ import annotations

import argparse

import numpy as np

from liquid_stream.training.data.vitals.vitals_sim import REC_NAMES, simulate_randomised

FS = 125
L = 8 * FS
CHANNELS = {"PLETH": "ppg", "II": "ecg", "RESP": "resp"}
CLEAN = {
    "ectopic_prob": 0.0,
    "af_episodes": [],
    "motion_bursts": [],
    "sensor_off": [],
    "perfusion": 1.0,
}
SETS = {  # name: (seed, records, simulate_randomised's keywords)
    "default": (101, 40, {}),
    "rich": (102, 20, {"ectopy": "rich"}),
    "af": (103, 20, {"force": {"af_episodes": [[-1.0, 1e4]]}}),
}


def colored(rng, n, beta):
    """Gaussian noise with a 1/f^beta power spectrum (as the 2026-12-07 calibrate.py)."""
    f = np.fft.rfftfreq(n)
    spec = rng.standard_normal(len(f)) + 1j * rng.standard_normal(len(f))
    spec[1:] /= f[1:] ** (beta / 2)
    spec[0] = 0
    return np.fft.irfft(spec, n)


def windows(x):
    return np.stack([x[e - L : e] for e in range(L, len(x) + 1, FS)])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="/tmp/one-over-f.npz")
    ap.add_argument("--minutes", type=float, default=3.0)
    ap.add_argument("--segments", type=int, default=30)
    a = ap.parse_args()
    out = {}
    for sname, (seed, n, kw) in SETS.items():
        acc = {k: [] for k in CHANNELS.values()}
        moving = {k: [] for k in CHANNELS.values()}
        for i in range(n):
            rec = simulate_randomised(np.random.default_rng([seed, i]), a.minutes, **kw)
            sig, so = rec["signals"], rec["truth"]["sensor_off"]
            bursts = rec["params"].get("motion_bursts", [])
            for ch, k in CHANNELS.items():
                x = sig[:, REC_NAMES.index(ch + ",")]
                m = so[k]
                for end in range(L, len(x), FS):
                    w = x[end - L : end]
                    if np.isfinite(w).all() and not m[end - L : end].any():
                        acc[k].append(w.astype(np.float32))
                        t0, t1 = (end - L) / FS, end / FS
                        moving[k].append(
                            any(
                                k in b["groups"]
                                and b["start_s"] < t1
                                and b["start_s"] + b["dur_s"] > t0
                                for b in bursts
                            )
                        )
        for k, v in acc.items():
            out[f"good/{sname}/{k}"] = np.stack(v)
            out[f"motion/{sname}/{k}"] = np.array(moving[k])
        print(sname, {k: len(v) for k, v in acc.items()}, flush=True)
    fail: dict[str, list] = {}
    for i in range(a.segments):
        rng = np.random.default_rng([104, i])
        rec = simulate_randomised(np.random.default_rng([105, i]), 1.0, family=None, force=CLEAN)
        for ch, k in CHANNELS.items():
            clean = rec["signals"][: 60 * FS, REC_NAMES.index(ch + ",")]
            for beta, name in ((1.0, "pink"), (2.0, "brown")):
                z = colored(rng, 60 * FS, beta)
                z /= z.std()
                fail.setdefault(f"{k}/{name}", []).append(windows(z))
                for amp in (3, 30, 300):
                    fail.setdefault(f"{k}/{name}@{amp}", []).append(
                        windows(2048.0 + np.round(amp * z))
                    )
                for snr in (20, 10, 3):
                    y = clean + z * clean.std() * 10 ** (-snr / 20)
                    fail.setdefault(f"{k}/pulse+{name}@{snr}dB", []).append(windows(y))
            fail.setdefault(f"{k}/clean", []).append(windows(clean))
    for key, v in fail.items():
        out[f"fail/{key}"] = np.concatenate(v).astype(np.float32)
    np.savez(a.out, **out)
    print({k: v.shape for k, v in out.items()})


if __name__ == "__main__":
    main()
