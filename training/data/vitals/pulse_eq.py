"""A random equaliser of the cardiac band: another pulse morphology, the same beats.

A pulse train of rate f_h is, over a stretch where the rate holds, Σ_k c_k e^{j2π k f_h t}.
Its *shape* (rise time, dicrotic notch, the size and delay of the reflected wave; for an ECG
the QRS width and the T wave) is the amplitudes and phases of the harmonics c_k relative to
one another, its *rate* their spacing f_h. A linear filter H(f) maps c_k → H(k f_h) c_k: a
smooth random H draws another shape and leaves every beat where it was, up to the filter's
group delay (below), so the crop's labels stay true. This is the augmentation toward
morphologies the simulator does not draw: a model trained on one pulse family and scored
on the other loses about 3× (docs/benchmarks.md §5.2, cross-generator).

The filter, per channel and item (applied to the whole crop in the frequency domain):

    H(f) = 10^{g(f) r(f) / 20} · e^{j φ(f) s(f)},   s(f) = min(1, f / F_LO),
                                                r(f) = min(1, F_HI / f)

with g and φ linear in log f between K = :data:`KNOTS` control points log-spaced over
[F_LO, F_HI] = [0.5, 12] Hz (g_k ~ U(−G, G) dB, φ_k ~ U(−Φ, Φ) rad; constant beyond the
end points). s makes φ vanish at DC (H real there, as a real filter's must be) and tapers
the phase below the cardiac band, where respiration lives; r brings the gain back towards
0 dB above the band, so that a boost at F_HI does not amplify all the sensor noise above
it. The group delay −dφ/dω is at most 2Φ / (2π f Δ) at frequency f, Δ = ln(F_HI / F_LO) /
(K − 1) the knots' spacing in log f: with Φ = π/3, 0.84 s at 0.5 Hz, 0.42 s at 1 Hz (HR
60) and falling as 1/f: while the rate changes slowly against that, the labels (1 Hz means
over windows) stay true. The crop is extended at
both ends by its mirror image (:data:`PAD_S` s) so that the circular convolution of the FFT
does not wrap one end onto the other. Draws are a function of ``rng`` only (the caller
seeds it from (seed, epoch, index)).
"""

from __future__ import annotations

import numpy as np

F_LO, F_HI = 0.5, 12.0  # Hz: the band whose harmonics are re-weighted (HR 30 … 240 bpm)
KNOTS = 5  # control points, log-spaced over [F_LO, F_HI]
GAIN_DB = 12.0  # g_k ~ U(−G, G), G = GAIN_DB unless the caller gives another (data.pulse_eq_db)
PHASE = np.pi / 3  # φ_k ~ U(−PHASE, PHASE)
PAD_S = 8.0  # mirror padding at each end, seconds


def response(f: np.ndarray, gains_db: np.ndarray, phases: np.ndarray) -> np.ndarray:
    """H(f) of the module docstring at frequencies ``f`` (Hz, ≥ 0) for knot gains (dB) and
    phases (rad), complex128."""
    knots = np.log(np.geomspace(F_LO, F_HI, KNOTS))
    lf = np.log(np.clip(f, F_LO, F_HI))
    g = np.interp(lf, knots, gains_db) * (F_HI / np.maximum(f, F_HI))
    phi = np.interp(lf, knots, phases) * np.minimum(1.0, f / F_LO)
    return 10.0 ** (g / 20.0) * np.exp(1j * phi)


def gain_bound_db(value: float | None) -> float:
    """The knot-gain bound (dB) of a ``data.pulse_eq_db`` value: null means :data:`GAIN_DB`."""
    return GAIN_DB if value is None else float(value)


def draw(rng: np.random.Generator, gain_db: float = GAIN_DB) -> tuple[np.ndarray, np.ndarray]:
    """One filter's knot gains (dB, within ±``gain_db``) and phases (rad)."""
    return rng.uniform(-gain_db, gain_db, KNOTS), rng.uniform(-PHASE, PHASE, KNOTS)


def equalise(x: np.ndarray, fs: float, gains_db: np.ndarray, phases: np.ndarray) -> np.ndarray:
    """``x`` (n,) filtered by H (module docstring), float64, the same length; mirror-padded
    by ``PAD_S`` seconds (at most n − 1 samples) at each end."""
    x = np.asarray(x, np.float64)
    n = len(x)
    pad = min(int(round(PAD_S * fs)), n - 1)
    xp = np.pad(x, pad, mode="reflect")  # the mirror image, the end samples not repeated
    spec = np.fft.rfft(xp)
    f = np.fft.rfftfreq(len(xp), 1.0 / fs)
    h = response(f, gains_db, phases)
    if len(xp) % 2 == 0:  # the Nyquist bin of a real signal is real
        h[-1] = h[-1].real
    return np.fft.irfft(spec * h, len(xp))[pad : pad + n]


def pulse_eq(
    x: np.ndarray, rng: np.random.Generator, p: float, fs: float, gain_db: float = GAIN_DB
) -> np.ndarray:
    """``x`` (crop, C) with, with probability ``p``, every channel through its own random H
    (knot gains within ±``gain_db``); ``x`` itself is not modified (float32 out when it is
    float32)."""
    if p <= 0 or rng.random() >= p:
        return x
    out = np.empty_like(x)
    for c in range(x.shape[1]):
        out[:, c] = equalise(x[:, c], fs, *draw(rng, gain_db))
    return out
