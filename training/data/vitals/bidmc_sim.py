"""Simulated BIDMC: real WFDB record pairs with known, slowly varying HR / RR / SpO2.

Writes the PhysioNet BIDMC layout (read by :mod:`.bidmc`)::

    OUT/bidmcNN.hea + .dat    125 Hz, format 16: "RESP," "PLETH," (NU), "V," "AVR," "II," (mV)
    OUT/bidmcNNn.hea + .dat   1 Hz, format 16, gain 1: "HR," "PULSE," (bpm) "RESP," (bpm =
                              breaths/min, as BIDMC's numerics header writes it) "SpO2," (%)
    OUT/RECORDS               one record name a line (bidmc01, bidmc01n, ...)
    OUT/.bidmc-sim-stamp.json what was generated

Each record has ``minutes * 60 * fs + 1`` samples (BIDMC: 8 min, 60001) and
``minutes * 60 + 1`` numerics. Everything is a pure function of ``(seed, record index)``.

**Trajectories.** Per record, baselines HR ~ U(55, 120) bpm, RR ~ U(8, 30) breaths/min,
SpO2 ~ U(88, 99.5) %; around them slow random trajectories (Gaussian-smoothed noise,
time scale ~40-60 s, SD 5 bpm / 2 breaths/min / 1 %), plus with probability 0.4 an HR step
(±5-15 bpm over ~20 s) and with probability 0.3 an SpO2 desaturation dip (3-8 % for 30-90 s).
The numerics are these TRUE values averaged over each second and rounded to integers (like
the monitor); PULSE = HR + N(0, 0.7) rounded. With probability 0.2 a record gets a 5-20 s
NaN gap in SpO2 and PULSE (probe dropout), as real numerics have.

**Waveforms** are NeuroKit2 simulations at a fixed reference rate, *phase-warped* onto the
trajectories: the cardiac phase is ``phi_c(t) = integral(hr_inst / 60)`` with
``hr_inst = hr + RSA * resp(t)`` (respiratory sinus arrhythmia, 1-4 bpm), and the ECG/PPG
templates (``ecg_simulate(method="simple")``, ``ppg_simulate`` at 60 bpm: one beat per
second) are sampled at template time ``phi_c``; the respiration template
(``rsp_simulate(method="breathmetrics")`` at 15/min) is sampled so that its detected breath
peaks fall on integer respiratory phases ``phi_r = integral(rr / 60)``. So the beats and
breaths in the signals happen exactly at the numerics' rates. ECG: II (R ≈ 1 mV x gain),
AVR ≈ -0.55 II, V ≈ 0.8 II delayed 8 ms, each with its own noise. The PPG lags the ECG by a
pulse transit time of 0.15-0.3 s.

**RR in PLETH and ECG** (so RR is learnable from the PLETH + II model input, as in real
data): respiratory amplitude modulation of the PPG pulse (10-25 %) and of the ECG (5-15 %),
respiratory baseline modulation of both, and RSA.

**SpO2 model** (no simulator exists; invented but documented). With the textbook
ratio-of-ratios calibration ``R = (110 - SpO2) / 25`` (R 0.4 at 100 %, 0.88 at 88 %),
PLETH is modelled as a red-channel pleth: its pulse amplitude is ``a_rec * R / 0.6``
(a_rec ~ U(0.8, 1.2) per record: perfusion and gain spread) and its morphology carries a
reflected wave ``pulse(phi) + rho * pulse(phi - 0.3)`` with ``rho = 0.15 + 0.6 * (R - 0.4) / 0.48``
(gain-independent cue). Honest caveat: a real monitor's single PLETH channel is auto-gained
and carries little SpO2 information, so SpO2 on this simulator is much easier than on BIDMC;
results on it only check the pipeline.

**Noise and artefacts.** Baseline wander (0.05-0.3 Hz) on all channels, white noise, a
faint 60 Hz on the ECG, and motion bursts (Poisson, ~1 per 2 min, 1-6 s) of large
low-frequency noise on PLETH, ECG and RESP; the numerics are not affected (they are the truth).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import cache

SIM_REVISION = 1  # bump when the same arguments would give different records
STAMP_NAME = ".bidmc-sim-stamp.json"
FS = 125
SIG_NAMES = ("RESP,", "PLETH,", "V,", "AVR,", "II,")
SIG_UNITS = ("NU", "NU", "mV", "mV", "mV")
NUM_NAMES = ("HR,", "PULSE,", "RESP,", "SpO2,")
NUM_UNITS = ("bpm", "bpm", "bpm", "%")
REF_FS = 250  # template sampling rate (60 bpm ECG/PPG, 15/min respiration)


@dataclass
class SimReport:
    root: str
    records: int
    minutes: float
    seed: int
    seconds: float  # generation time
    hr_range: tuple[float, float]
    rr_range: tuple[float, float]
    spo2_range: tuple[float, float]


# ---------------------------------------------------------------------------- pieces


def _smooth(rng: np.random.Generator, n: int, sigma: float) -> np.ndarray:
    """(n,) zero-mean unit-SD Gaussian-smoothed noise (sigma in samples)."""
    from scipy.ndimage import gaussian_filter1d

    pad = int(4 * sigma)
    z = gaussian_filter1d(rng.standard_normal(n + 2 * pad), sigma, mode="wrap")[pad : pad + n]
    z -= z.mean()
    return z / (z.std() + 1e-12)


def _to_fs(v: np.ndarray, n: int, fs: int) -> np.ndarray:
    """1 Hz values (S,) -> (n,) at fs (linear interpolation, value k at t = k s)."""
    return np.interp(np.arange(n) / fs, np.arange(len(v)), v)


def _wander(rng: np.random.Generator, n: int, fs: int) -> np.ndarray:
    """(n,) baseline wander: sum of a few 0.05-0.3 Hz sinusoids, unit-ish amplitude."""
    t = np.arange(n) / fs
    out = np.zeros(n)
    for _ in range(3):
        out += rng.uniform(0.3, 1.0) * np.sin(
            2 * np.pi * rng.uniform(0.05, 0.3) * t + rng.uniform(0, 2 * np.pi)
        )
    return out / 2


def _bursts(rng: np.random.Generator, n: int, fs: int, minutes: float) -> np.ndarray:
    """(n,) motion-artefact envelope x noise: ~1 burst per 2 min, 1-6 s, low-frequency."""
    from scipy.ndimage import gaussian_filter1d

    out = np.zeros(n)
    for _ in range(rng.poisson(minutes / 2)):
        length = int(rng.uniform(1, 6) * fs)
        s = int(rng.integers(0, max(1, n - length)))
        noise = gaussian_filter1d(rng.standard_normal(length), fs * 0.03)
        noise /= noise.std() + 1e-12
        out[s : s + length] += noise * np.hanning(length) * rng.uniform(1, 3)
    return out


def _templates(rng: np.random.Generator, beats: float, breaths: float):
    """NeuroKit2 templates at REF_FS: ECG and PPG at 60 bpm, respiration at 15/min."""
    import neurokit2 as nk

    seed = lambda: int(rng.integers(2**31))  # noqa: E731
    dur_c = int(np.ceil(beats)) + 4
    ecg = nk.ecg_simulate(
        duration=dur_c,
        sampling_rate=REF_FS,
        heart_rate=60,
        noise=0,
        method="simple",
        random_state=seed(),
    )
    ppg = nk.ppg_simulate(
        duration=dur_c,
        sampling_rate=REF_FS,
        heart_rate=60,
        frequency_modulation=0,
        ibi_randomness=0,
        drift=0,
        motion_amplitude=0,
        powerline_amplitude=0,
        burst_number=0,
        random_state=seed(),
    )
    dur_r = int(np.ceil(breaths * 4)) + 24
    rsp = nk.rsp_simulate(
        duration=dur_r,
        sampling_rate=REF_FS,
        respiratory_rate=15,
        noise=0,
        method="breathmetrics",
        random_state=seed(),
    )
    ecg = np.asarray(ecg, np.float64)
    ecg = (ecg - np.median(ecg)) / (np.percentile(ecg, 99.5) - np.median(ecg) + 1e-12)
    ppg = np.asarray(ppg, np.float64)
    lo, hi = np.percentile(ppg, [1, 99])
    ppg = (ppg - lo) / (hi - lo + 1e-12)
    rsp = np.asarray(rsp, np.float64)
    rsp = (rsp - rsp.mean()) / (np.abs(rsp - rsp.mean()).max() + 1e-12)
    # breath peaks of the template define integer respiratory phases
    _, info = nk.rsp_peaks(nk.rsp_clean(rsp, sampling_rate=REF_FS), sampling_rate=REF_FS)
    peaks = np.asarray(info["RSP_Peaks"], np.float64) / REF_FS
    d = np.diff(peaks)
    if len(peaks) < breaths + 2 or (d < 1.5).any() or (d > 8).any():
        peaks = 2.0 + 4.0 * np.arange(int(breaths) + 4)  # fall back to the nominal period
    return ecg, ppg, rsp, peaks


def _sample(template: np.ndarray, t_ref: np.ndarray) -> np.ndarray:
    return np.interp(t_ref * REF_FS, np.arange(len(template)), template)


def simulate_record(rng: np.random.Generator, minutes: float, fs: int = FS) -> dict:
    """One record (see the module docstring).

    Returns ``signals`` (T, 5) float64 in SIG_NAMES order, ``numerics`` (S, 4) float64 in
    NUM_NAMES order (integers, NaN gaps), ``truth`` {"hr", "rr", "spo2"} (T,) at fs, and
    ``params`` (the record's baselines), with T = minutes*60*fs + 1, S = minutes*60 + 1.
    """
    secs = int(round(minutes * 60))
    n = secs * fs + 1
    n_num = secs + 1
    s1 = n_num + 2  # 1 Hz grid for trajectories (covers t = 0 .. secs + 1)
    hr0, rr0, sp0 = rng.uniform(55, 120), rng.uniform(8, 30), rng.uniform(88, 99.5)
    hr1 = hr0 + 5 * _smooth(rng, s1, 40)
    if rng.random() < 0.4:
        at, size = rng.uniform(0.2, 0.8) * secs, rng.choice([-1, 1]) * rng.uniform(5, 15)
        hr1 += size / (1 + np.exp(-(np.arange(s1) - at) / 5))
    rr1 = rr0 + 2 * _smooth(rng, s1, 50)
    sp1 = sp0 + 1.0 * _smooth(rng, s1, 60)
    if rng.random() < 0.3:
        at, w = rng.uniform(0.1, 0.9) * secs, rng.uniform(15, 45)
        sp1 -= rng.uniform(3, 8) * np.exp(-0.5 * ((np.arange(s1) - at) / w) ** 2)
    hr1 = np.clip(hr1, 40, 160)
    rr1 = np.clip(rr1, 5, 40)
    sp1 = np.clip(sp1, 80, 100)
    hr, rr, sp = (_to_fs(v, n, fs) for v in (hr1, rr1, sp1))  # (T,) each

    # respiration: phase, template warped so that breath peaks sit on integer phases
    phi_r = np.cumsum(rr / 60) / fs  # breaths
    beats_est = float(np.sum(hr) / 60 / fs) * 1.2 + 10
    ecg_t, ppg_t, rsp_t, rpk = _templates(rng, beats_est, phi_r[-1] + 2)
    k = np.arange(len(rpk), dtype=np.float64)
    resp_wave = _sample(rsp_t, np.interp(phi_r + 1.0, k, rpk))  # (T,) ~[-1, 1]
    rn = resp_wave / (np.abs(resp_wave).max() + 1e-12)

    # cardiac phase with RSA; ECG and (delayed) PPG
    hr_inst = hr + rng.uniform(1, 4) * rn
    phi_c = np.cumsum(hr_inst / 60) / fs  # beats
    ecg = _sample(ecg_t, phi_c + 1.0)
    ptt = int(rng.uniform(0.15, 0.3) * fs)
    phi_p = np.concatenate([np.zeros(ptt), phi_c[:-ptt]]) if ptt else phi_c
    ppg1 = _sample(ppg_t, phi_p + 1.5)
    R = (110 - sp) / 25  # ratio of ratios
    rho = 0.15 + 0.6 * np.clip((R - 0.4) / 0.48, 0, 1.2)
    ppg2 = _sample(ppg_t, np.maximum(phi_p + 1.5 - 0.3, 0))
    pulse = (ppg1 + rho * ppg2) / (1 + rho)

    t = np.arange(n) / fs
    # PLETH (NU, roughly 0..1)
    a_rec = rng.uniform(0.8, 1.2)
    am_p = rng.uniform(0.10, 0.25)
    perf = 1 + 0.05 * _to_fs(_smooth(rng, s1, 30), n, fs)  # slow perfusion drift
    amp = 0.35 * a_rec * (R / 0.6) * (1 + am_p * rn) * perf
    motion = _bursts(rng, n, fs, minutes)
    pleth = (
        0.35
        + amp * pulse
        + rng.uniform(0.02, 0.06) * rn
        + 0.03 * _wander(rng, n, fs)
        + 0.08 * motion
        + 0.004 * rng.standard_normal(n)
    )
    # ECG leads (mV)
    g = rng.uniform(0.6, 1.4)
    am_e = rng.uniform(0.05, 0.15)
    core = g * ecg * (1 + am_e * rn) + 0.05 * rn
    emg = motion * rng.standard_normal(n) * 0.15
    line = 0.01 * np.sin(2 * np.pi * 60 * t)

    def lead(scale: float, delay: int) -> np.ndarray:
        c = np.roll(core, delay) * scale
        return (
            c
            + 0.08 * _wander(rng, n, fs)
            + 0.015 * rng.standard_normal(n)
            + emg * abs(scale)
            + line
            + 0.2 * motion
        )

    ii = lead(1.0, 0)
    avr = lead(-0.55, 0)
    v = lead(0.8, 1)
    # RESP (impedance, NU): breathing + cardiogenic oscillation + drift + noise
    resp = (
        0.5
        + rng.uniform(0.15, 0.3) * resp_wave
        + 0.01 * pulse
        + 0.03 * _wander(rng, n, fs)
        + 0.1 * motion
        + 0.003 * rng.standard_normal(n)
    )
    signals = np.stack([resp, pleth, v, avr, ii], axis=1)  # (T, 5)

    # numerics: mean of the true values over each second, rounded (monitor-like integers)
    def per_second(x: np.ndarray) -> np.ndarray:
        m = x[: secs * fs].reshape(secs, fs).mean(axis=1)
        return np.concatenate([m, x[-1:]])  # (S,)

    hr_n = np.round(per_second(hr))
    pulse_n = np.round(per_second(hr) + 0.7 * rng.standard_normal(n_num))
    rr_n = np.round(per_second(rr))
    sp_n = np.minimum(np.round(per_second(sp)), 100)
    if rng.random() < 0.2:
        length = int(rng.integers(5, 21))
        s = int(rng.integers(0, n_num - length))
        sp_n[s : s + length] = np.nan
        pulse_n[s : s + length] = np.nan
    numerics = np.stack([hr_n, pulse_n, rr_n, sp_n], axis=1)  # (S, 4)
    return {
        "signals": signals,
        "numerics": numerics,
        "truth": {"hr": hr, "rr": rr, "spo2": sp},
        "params": {"hr0": hr0, "rr0": rr0, "spo2_0": sp0},
    }


# ---------------------------------------------------------------------------- writing


def write_record(out: str | os.PathLike, name: str, rec: dict, fs: int = FS) -> None:
    """Write ``rec`` (from :func:`simulate_record`) as WFDB ``name`` and ``name + "n"``;
    its channels are SIG_NAMES unless ``rec["sig_names"]`` / ``rec["sig_units"]`` name them."""
    import wfdb

    out = str(out)
    names = list(rec.get("sig_names", SIG_NAMES))  # a record may carry more channels
    wfdb.wrsamp(
        name,
        fs=fs,
        units=list(rec.get("sig_units", SIG_UNITS)),
        sig_name=names,
        p_signal=rec["signals"],
        fmt=["16"] * len(names),
        write_dir=out,
    )
    num = rec["numerics"]
    d = np.where(np.isnan(num), -32768, np.nan_to_num(num)).astype(np.int64)  # fmt 16 NaN
    wfdb.wrsamp(
        f"{name}n",
        fs=1,
        units=list(NUM_UNITS),
        sig_name=list(NUM_NAMES),
        d_signal=d,
        fmt=["16"] * len(NUM_NAMES),
        adc_gain=[1.0] * len(NUM_NAMES),
        baseline=[0] * len(NUM_NAMES),
        write_dir=out,
    )


def record_name(i: int) -> str:
    """0 -> 'bidmc01'."""
    return f"bidmc{i + 1:02d}"


def _make_one(args: tuple[str, int, int, float]) -> tuple[float, float, float]:
    out, seed, i, minutes = args
    rng = np.random.default_rng([seed, i])
    rec = simulate_record(rng, minutes)
    write_record(out, record_name(i), rec)
    p = rec["params"]
    return p["hr0"], p["rr0"], p["spo2_0"]


def _stamp(records: int, minutes: float, seed: int) -> dict:
    """What a simulated set's stamp records (besides the report): the set's identity."""
    return {"revision": SIM_REVISION, "records": records, "minutes": float(minutes), "seed": seed}


def write_bidmc_sim(
    out: str | os.PathLike,
    records: int = 24,
    minutes: float = 8,
    seed: int = 0,
    workers: int = 1,
    progress: bool = True,
    overwrite: bool = False,
) -> SimReport:
    """Generate ``records`` simulated BIDMC record pairs into ``out`` (module docstring).

    Written into a temporary sibling folder renamed into place at the end, so ``out`` is
    complete or absent. An existing non-empty ``out`` is replaced only with ``overwrite``
    and only if it is a previous simulated set (has the stamp file).
    """
    if records < 1 or records > 99:
        raise ValueError(f"records must be in 1..99 (bidmcNN names), got {records}")
    if minutes * 60 * FS < 1:
        raise ValueError(f"minutes must be positive, got {minutes}")
    out = Path(out).expanduser().resolve()
    cache.check_replaceable(out, STAMP_NAME, overwrite, "a simulated BIDMC folder")
    with cache.atomic_dir(out) as tmp:
        import neurokit2  # noqa: F401  (imported before the clock starts; ~4 s)

        t0 = time.perf_counter()
        jobs = [(str(tmp), seed, i, float(minutes)) for i in range(records)]
        bar = dict(total=records, desc="bidmc-sim", unit="record") if progress else None
        results = cache.map_jobs(_make_one, jobs, workers, bar)
        seconds = time.perf_counter() - t0
        names = [record_name(i) for i in range(records)]
        (tmp / "RECORDS").write_text("".join(f"{n}\n{n}n\n" for n in names))
        arr = np.asarray(results)
        report = SimReport(
            root=str(out),
            records=records,
            minutes=float(minutes),
            seed=seed,
            seconds=seconds,
            hr_range=(float(arr[:, 0].min()), float(arr[:, 0].max())),
            rr_range=(float(arr[:, 1].min()), float(arr[:, 1].max())),
            spo2_range=(float(arr[:, 2].min()), float(arr[:, 2].max())),
        )
        cache.write_stamp(tmp, STAMP_NAME, _stamp(records, minutes, seed), report)
    return report


def default_sim_root(records: int = 24, minutes: float = 8, seed: int = 0) -> Path:
    """``$LIQUID_STREAM_CACHE/bidmc-sim-r{records}-m{minutes}-s{seed}``."""
    return cache.cache_dir() / f"bidmc-sim-r{records}-m{minutes:g}-s{seed}"


def ensure_bidmc_sim(
    records: int = 24,
    minutes: float = 8,
    seed: int = 0,
    root: str | os.PathLike | None = None,
    workers: int = 1,
    progress: bool = True,
) -> Path:
    """The cached simulated set for these arguments, generated (atomically, under a file
    lock) if missing or made by another simulator revision."""
    root = Path(root).expanduser() if root is not None else default_sim_root(records, minutes, seed)

    want = _stamp(records, minutes, seed)
    return cache.ensure_built(
        root,
        lambda: cache.matching_stamp(root, STAMP_NAME, want) is not None,
        lambda: write_bidmc_sim(
            root, records, minutes, seed, workers=workers, progress=progress, overwrite=True
        ),
    )
