"""Training-time augmentation toward real microphones and rooms (16 kHz mono float audio).

Every transform is a pure numpy / scipy function of its input and its parameters; the
:class:`Augmenter` (or :func:`augment`) draws the parameters from a numpy ``Generator`` and
applies the enabled transforms in the order a recording chain applies them::

    speed → time shift → reverberation → microphone EQ / band-limit → background noise → gain

* **speed** (:func:`speed_perturb`): play the clip ``factor`` times faster (resampling):
  duration ÷ factor, every frequency × factor (tempo and pitch together, like sox ``speed``).
* **time shift** (:func:`time_shift`): delay by ``n`` samples, zero fill.
* **reverberation** (:func:`synth_rir`, :func:`reverberate`): causal convolution with a
  synthetic room impulse response (direct path at lag 0, early reflections, exponentially
  decaying noise tail of reverberation time RT60), energy-normalised ``‖h‖₂ = 1``.
* **EQ** (:func:`band_limit`, :func:`peaking_eq`): causal Butterworth high-pass / low-pass
  (microphone low cut, codec / anti-alias band limit) plus one gentle peaking biquad.
* **noise** (:func:`add_noise_snr`): a background-noise crop at a target SNR measured over
  the active part of the (already reverberant, equalised) signal. It comes after the EQ so
  the SNR is exact at the output; the noise recordings (``_background_noise_``) already
  carry the colouring of the microphone that recorded them.
* **gain** (:func:`apply_gain`): ``10^(dB/20)`` level change, last, like a preamp / AGC.

Nothing is clipped: a positive gain may take samples beyond ±1 full scale, which float
audio represents exactly (the caller standardises afterwards). Outputs of finite inputs are
finite.

Reproducibility: the caller passes a ``Generator`` made from ``(seed, epoch, index)`` (see
:func:`item_rng`, the same convention as ``speech._Augmented._item_rng``). The augmenter
first draws one child seed per transform (always the same number of draws), so each
transform's randomness is its own stream: switching one transform off or changing its
range does not change what the others draw.

Label alignment: speed perturbation and time shift move events in time. Input sample ``n``
lands at output sample ``round(n / speed) + shift`` (:meth:`AugmentInfo.map_position`; the
reverberation's direct path is at lag 0, so it adds no delay; the causal IIR filters add
only their small group delay). Positions past the output's end fall off it. The simplest use
is per clip, before clips are composed into a stream, with each clip's event end rescaled.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
from scipy import fft as scipy_fft
from scipy.signal import firwin, resample_poly, sosfilt

SR = 16000

#: The transforms, in the order they are applied.
TRANSFORMS: tuple[str, ...] = ("speed", "shift", "reverb", "eq", "noise", "gain")

#: Largest denominator of the rational approximation p/q of a speed factor.
SPEED_MAX_DEN = 100

#: A background-noise source: one recording, several (one is picked), or a provider
#: ``(rng, n) -> (n,) array`` that returns a crop of ``n`` samples.
NoiseSource = np.ndarray | Sequence[np.ndarray] | Callable[[np.random.Generator, int], np.ndarray]


# ---------------------------------------------------------------------------- config

# field -> (lower bound, strict) for the (min, max) range fields; None = unbounded.
_RANGES: dict[str, tuple[float | None, bool]] = {
    "speed_factor": (0.0, True),
    "shift_ms": (None, False),
    "reverb_rt60_s": (0.0, True),
    "reverb_drr_db": (None, False),
    "eq_highpass_hz": (0.0, True),
    "eq_lowpass_hz": (0.0, True),
    "eq_peak_hz": (0.0, True),
    "eq_peak_db": (None, False),
    "eq_peak_q": (0.0, True),
    "noise_snr_db": (None, False),
    "gain_db": (None, False),
}
_ORDERS = ("eq_highpass_order", "eq_lowpass_order")


@dataclass(frozen=True)
class AugmentConfig:
    """Which transforms run, how often, and the ranges their parameters are drawn from.

    For each transform ``t`` in :data:`TRANSFORMS`: ``t`` (bool) switches it on,
    ``t_prob`` is the probability it is applied to an item (``u < t_prob``, ``u`` uniform
    in [0, 1)), and the range fields are ``(min, max)`` pairs. Draws are uniform in the
    range, except frequencies (``eq_*_hz``), which are log-uniform
    (``exp(U(log min, log max))``).

    * ``speed_factor``: playback-speed factor (>1 faster: shorter, higher pitched).
    * ``shift_ms``: time shift in ms (>0 delays), rounded to whole samples.
    * ``reverb_rt60_s``: reverberation time (60 dB energy decay) of the synthetic RIR;
      ``reverb_drr_db``: its direct-to-reverberant energy ratio (see :func:`synth_rir`).
    * ``eq_highpass_hz`` / ``eq_lowpass_hz``: Butterworth -3 dB cut-offs of orders
      ``eq_highpass_order`` / ``eq_lowpass_order``; a low-pass draw ≥ sr/2 means no
      low-pass. ``eq_peak_hz`` / ``eq_peak_db`` / ``eq_peak_q``: the peaking biquad.
    * ``noise_snr_db``: SNR of the added background noise (see :func:`add_noise_snr`).
    * ``gain_db``: output level change.

    Build from a config file's mapping with :meth:`from_dict`; invalid values raise
    ``ValueError`` naming the field.
    """

    speed: bool = True
    speed_prob: float = 0.5
    speed_factor: tuple[float, float] = (0.9, 1.1)

    shift: bool = True
    shift_prob: float = 1.0
    shift_ms: tuple[float, float] = (-100.0, 100.0)

    reverb: bool = True
    reverb_prob: float = 0.5
    reverb_rt60_s: tuple[float, float] = (0.1, 0.8)
    reverb_drr_db: tuple[float, float] = (0.0, 12.0)

    eq: bool = True
    eq_prob: float = 0.5
    eq_highpass_hz: tuple[float, float] = (50.0, 400.0)
    eq_highpass_order: int = 2
    eq_lowpass_hz: tuple[float, float] = (3000.0, 8000.0)
    eq_lowpass_order: int = 8
    eq_peak_hz: tuple[float, float] = (200.0, 6000.0)
    eq_peak_db: tuple[float, float] = (-6.0, 6.0)
    eq_peak_q: tuple[float, float] = (0.5, 2.0)

    noise: bool = True
    noise_prob: float = 0.8
    noise_snr_db: tuple[float, float] = (0.0, 30.0)

    gain: bool = True
    gain_prob: float = 1.0
    gain_db: tuple[float, float] = (-20.0, 20.0)

    def __post_init__(self) -> None:
        for t in TRANSFORMS:
            if not isinstance(getattr(self, t), bool):
                raise ValueError(f"AugmentConfig.{t} must be a bool, got {getattr(self, t)!r}")
            p = getattr(self, f"{t}_prob")
            if (
                isinstance(p, bool)
                or not isinstance(p, int | float)
                or not math.isfinite(p)
                or not 0.0 <= p <= 1.0
            ):
                raise ValueError(
                    f"AugmentConfig.{t}_prob must be a probability in [0, 1], got {p!r}"
                )
        for name, (bound, strict) in _RANGES.items():
            r = getattr(self, name)
            if (
                not isinstance(r, tuple)
                or len(r) != 2
                or any(isinstance(v, bool) or not isinstance(v, int | float) for v in r)
            ):
                raise ValueError(
                    f"AugmentConfig.{name} must be a (min, max) pair of numbers, got {r!r}"
                )
            lo, hi = r
            if not (math.isfinite(lo) and math.isfinite(hi)):
                raise ValueError(f"AugmentConfig.{name} must be finite, got {r!r}")
            if lo > hi:
                raise ValueError(f"AugmentConfig.{name}: min {lo} > max {hi}")
            if bound is not None and (lo <= bound if strict else lo < bound):
                op = ">" if strict else ">="
                raise ValueError(f"AugmentConfig.{name} must be {op} {bound}, got {r!r}")
        for name in _ORDERS:
            o = getattr(self, name)
            if isinstance(o, bool) or not isinstance(o, int) or o < 1:
                raise ValueError(f"AugmentConfig.{name} must be an int >= 1, got {o!r}")
        if self.eq_highpass_hz[1] >= self.eq_lowpass_hz[0]:
            raise ValueError(
                f"AugmentConfig.eq_highpass_hz max {self.eq_highpass_hz[1]} must be below "
                f"eq_lowpass_hz min {self.eq_lowpass_hz[0]}"
            )

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> AugmentConfig:
        """Config from a mapping (e.g. a YAML section): missing keys keep the defaults,
        lists become ``(min, max)`` tuples, unknown keys raise ``ValueError``."""
        if not isinstance(d, Mapping):
            raise ValueError(f"AugmentConfig.from_dict expects a mapping, got {type(d).__name__}")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ValueError(f"unknown AugmentConfig field(s): {', '.join(map(str, unknown))}")
        kw = {k: tuple(v) if k in _RANGES and isinstance(v, list) else v for k, v in d.items()}
        return cls(**kw)

    def to_dict(self) -> dict[str, Any]:
        """The fields as a plain dict (ranges as lists), the inverse of :meth:`from_dict`."""
        return {
            k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()
        }

    def check_rate(self, sr: int) -> None:
        """Raise ``ValueError`` if a frequency range does not fit below Nyquist (sr/2)."""
        for name in ("eq_highpass_hz", "eq_peak_hz"):
            if self.eq and getattr(self, name)[1] >= sr / 2:
                raise ValueError(
                    f"AugmentConfig.{name} max {getattr(self, name)[1]} Hz must be below "
                    f"Nyquist ({sr / 2} Hz at sr={sr})"
                )


# ---------------------------------------------------------------------------- helpers


def item_rng(seed: int, epoch: int, index: int) -> np.random.Generator:
    """The Generator of item ``index`` in ``epoch``: ``default_rng([seed, epoch, index])``
    (the convention of ``speech._Augmented._item_rng``)."""
    return np.random.default_rng([int(seed), int(epoch), int(index)])


def _as_float(x: np.ndarray, name: str = "x") -> np.ndarray:
    x = np.asarray(x)
    if x.ndim != 1:
        raise ValueError(f"{name} must be 1-D (mono samples), got shape {x.shape}")
    return x.astype(np.float64, copy=False)


def _out_dtype(x: np.ndarray) -> np.dtype:
    x = np.asarray(x)
    return x.dtype if np.issubdtype(x.dtype, np.floating) else np.dtype(np.float64)


def active_mask(x: np.ndarray, frame: int = 160, rel_db: float = -40.0) -> np.ndarray:
    """Boolean mask of the active samples of ``x``.

    ``x`` is cut into consecutive blocks of ``frame`` samples (the last may be shorter);
    block ``j`` has mean power ``E_j = mean(x[block]²)``. A block is active when
    ``E_j ≥ max_j E_j · 10^(rel_db/10)``, i.e. within ``-rel_db`` dB of the loudest block
    (10 ms blocks and -40 dB by default, as ``speech.speech_end``). All samples are
    active when ``x`` is all zeros (then every block ties with the maximum 0).
    """
    x = _as_float(x)
    n = len(x)
    if n == 0:
        return np.zeros(0, dtype=bool)
    starts = np.arange(0, n, frame)
    e = np.add.reduceat(x * x, starts) / np.diff(np.append(starts, n))
    on = e >= e.max() * 10 ** (rel_db / 10)
    return np.repeat(on, np.diff(np.append(starts, n)))


def crop_noise(rng: np.random.Generator, noise: NoiseSource, n: int) -> tuple[np.ndarray, dict]:
    """``n`` samples of background noise and where they came from.

    ``noise`` is one 1-D recording, a sequence of them (one is picked uniformly:
    ``index``), or a provider ``noise(rng, n)``. A recording shorter than ``n`` is tiled;
    the crop starts at a uniform ``start`` in ``[0, len - n]``.
    """
    if callable(noise):
        out = _as_float(noise(rng, n), "noise")
        if len(out) != n:
            raise ValueError(f"noise provider returned {len(out)} samples, expected {n}")
        return out, {}
    where: dict[str, int] = {}
    if isinstance(noise, np.ndarray) and noise.ndim == 1:
        src = noise
    else:
        if len(noise) == 0:
            raise ValueError("noise: empty sequence of recordings")
        where["noise_index"] = int(rng.integers(len(noise)))
        src = noise[where["noise_index"]]
    src = _as_float(src, "noise")
    if len(src) == 0:
        raise ValueError("noise: empty recording")
    if len(src) < n:
        src = np.tile(src, -(-n // len(src)))
    where["noise_start"] = int(rng.integers(0, len(src) - n + 1))
    return src[where["noise_start"] : where["noise_start"] + n], where


# ---------------------------------------------------------------------------- transforms


def apply_gain(x: np.ndarray, db: float) -> np.ndarray:
    """``y = x · 10^(db/20)``, so ``20·log10(rms(y) / rms(x)) = db``. No clipping: ``|y|``
    may exceed 1 (full scale) in float."""
    return (_as_float(x) * 10 ** (db / 20)).astype(_out_dtype(x))


def add_noise_snr(
    x: np.ndarray,
    noise: np.ndarray,
    snr_db: float,
    frame: int = 160,
    rel_db: float = -40.0,
) -> np.ndarray:
    """``y = x + g·noise`` with ``g`` chosen so the SNR over the active signal is ``snr_db``.

    With ``A = active_mask(x, frame, rel_db)`` (blocks of ``x`` within ``-rel_db`` dB of its
    loudest block, see :func:`active_mask`), power is measured over exactly those samples:
    ``P_signal = mean(x[A]²)``, ``P_noise = mean(noise[A]²)``, and

        ``g = sqrt(P_signal / (P_noise · 10^(snr_db/10)))``,

    so ``10·log10(mean(x[A]²) / mean((g·noise)[A]²)) = snr_db`` exactly. Measuring over the
    active samples keeps the SNR of a short word in a padded 1 s clip independent of the
    padding. ``noise`` must have ``len(x)`` samples; ``ValueError`` if either power is 0.
    """
    xf, nf = _as_float(x), _as_float(noise, "noise")
    if len(nf) != len(xf):
        raise ValueError(f"noise has {len(nf)} samples, signal {len(xf)}")
    a = active_mask(xf, frame, rel_db)
    ps, pn = float(np.mean(xf[a] ** 2)), float(np.mean(nf[a] ** 2))
    if ps == 0.0 or pn == 0.0:
        raise ValueError(
            f"SNR undefined: {'signal' if ps == 0.0 else 'noise'} power is 0 over the active part"
        )
    g = math.sqrt(ps / (pn * 10 ** (snr_db / 10)))
    return (xf + g * nf).astype(_out_dtype(x))


def synth_rir(
    rng: np.random.Generator,
    sr: int = SR,
    rt60: float = 0.4,
    drr_db: float = 6.0,
    n_early: int = 8,
    early_ms: tuple[float, float] = (1.0, 30.0),
    length: int | None = None,
) -> np.ndarray:
    """A synthetic room impulse response ``h`` (float64, ``length`` taps), ``‖h‖₂ = 1``.

    * Decay envelope ``e[k] = 10^(-3k / (sr·rt60))``: the energy ``e²`` falls by 60 dB in
      ``rt60`` seconds, so the Schroeder curve ``EDC(k) = Σ_{m≥k} h[m]²`` of the tail has
      slope -60/rt60 dB/s.
    * Reverberant part ``r[k] = e[k]·(w[k] + Σ_i a_i·δ[k - d_i])`` for ``k ≥ 1``,
      ``r[0] = 0``: ``w`` white Gaussian (the diffuse tail) plus ``n_early`` early
      reflections at delays ``d_i`` uniform in ``early_ms`` with amplitudes ``a_i = ±U(1, 3)``
      (in units of the tail's standard deviation).
    * Direct path at lag 0 (no propagation delay, so labels do not move).
    * Normalisation (energy, not direct path): with ``ρ = 10^(drr_db/10)``,
      ``h[0] = sqrt(ρ / (1 + ρ))`` and ``h[1:] = r[1:] · sqrt(1 / ((1 + ρ)·‖r‖²))``, so
      ``‖h‖₂ = 1`` and the direct-to-reverberant ratio ``h[0]² / Σ_{k≥1} h[k]² = ρ``.
      Convolving white noise with ``h`` keeps its power in expectation.

    ``length`` defaults to ``ceil(rt60·sr) + 1`` (the tail ends at -60 dB).
    """
    if not (rt60 > 0 and math.isfinite(rt60)):
        raise ValueError(f"rt60 must be > 0 seconds, got {rt60!r}")
    if length is None:
        length = math.ceil(rt60 * sr) + 1
    if length < 2:
        raise ValueError(f"RIR length must be >= 2 taps, got {length}")
    k = np.arange(length)
    env = np.exp(k * (-3.0 * math.log(10.0) / (sr * rt60)))  # 10^(−3k/(sr·rt60))
    w = rng.standard_normal(length)
    lo = max(1, round(early_ms[0] * sr / 1000))
    hi = max(lo, min(length - 1, round(early_ms[1] * sr / 1000)))
    if n_early > 0:
        d = rng.integers(lo, hi + 1, size=n_early)
        a = rng.choice([-1.0, 1.0], size=n_early) * rng.uniform(1.0, 3.0, size=n_early)
        np.add.at(w, d, a)
    r = env * w
    r[0] = 0.0
    rho = 10 ** (drr_db / 10)
    h = r * math.sqrt(1.0 / ((1.0 + rho) * float(np.sum(r * r))))
    h[0] = math.sqrt(rho / (1.0 + rho))
    return h


def reverberate(x: np.ndarray, h: np.ndarray) -> np.ndarray:
    """Causal convolution truncated to the input length:
    ``y[n] = Σ_{k=0}^{min(n, K-1)} h[k]·x[n-k]`` for ``n < len(x)`` (the tail past the end
    is dropped)."""
    xf, hf = _as_float(x), _as_float(h, "h")
    if len(xf) == 0:
        return np.asarray(x).astype(_out_dtype(x))
    # real FFTs of a fast length ≥ len(x) + len(h) − 1 (no wrap-around): the same values
    # as scipy's fftconvolve, in half its time for a 2 s crop and a 0.4-0.8 s RIR
    n = scipy_fft.next_fast_len(len(xf) + len(hf) - 1, real=True)
    y = scipy_fft.irfft(scipy_fft.rfft(xf, n) * scipy_fft.rfft(hf, n), n)
    return y[: len(xf)].astype(_out_dtype(x))


def butter_sos(order: int, fc: float, sr: float, btype: str) -> np.ndarray:
    """Digital Butterworth ``(⌈order/2⌉, 6)`` second-order sections, in closed form: the
    design of ``scipy.signal.butter(order, fc, btype, fs=sr, output="sos")`` (the same
    filter; sections may differ in order and gain split, so outputs agree to rounding).

    Analog prototype poles ``p_k = −exp(iπ(2k − 1 − N)/(2N))``, k = 1 … N, on the unit
    circle; pre-warped cut-off ``ω = 2·sr·tan(π·fc/sr)``; low-pass poles ``ω·p_k`` (zeros
    at infinity), high-pass poles ``ω/p_k`` (N zeros at s = 0); the bilinear map
    ``z = (2sr + s)/(2sr − s)`` sends the zeros to z = −1 (low-pass) / z = +1 (high-pass).
    The gain makes ``|H| = 1`` at DC (low-pass) / Nyquist (high-pass). Each conjugate pole
    pair is one section ``(1, ±2, 1 | 1, −2·Re p, |p|²)`` (+2: zeros at −1); an odd order
    adds a first-order one. Why not scipy's: its general zpk-to-sos pairing cost ~1 ms a
    design, more than applying the filter to a 2 s crop (measured in the KWS training
    pipeline, which draws two cut-offs per augmented item).
    """
    if btype not in ("lowpass", "highpass"):
        raise ValueError(f"butter_sos: btype must be 'lowpass' or 'highpass', got {btype!r}")
    if not (isinstance(order, int) and order >= 1):
        raise ValueError(f"butter_sos: order must be an int >= 1, got {order!r}")
    if not 0 < fc < sr / 2:
        raise ValueError(f"butter_sos: need 0 < fc < sr/2, got fc={fc}, sr={sr}")
    n = order
    k = np.arange(1, n // 2 + 1)  # one pole of each conjugate pair (upper half plane)
    p = -np.exp(1j * np.pi * (2 * k - 1 - n) / (2 * n))
    w = 2 * sr * math.tan(math.pi * fc / sr)
    low = btype == "lowpass"
    pa = w * p if low else w / p
    pd = (2 * sr + pa) / (2 * sr - pa)
    z = -1.0 if low else 1.0
    sos = np.zeros((len(pd) + n % 2, 6))
    sos[: len(pd), :3] = (1.0, -2 * z, 1.0)  # (1 − z·z⁻¹)²
    sos[: len(pd), 3:] = np.stack([np.ones(len(pd)), -2 * pd.real, np.abs(pd) ** 2], 1)
    if n % 2:  # the real pole −1 of the prototype: −ω in both cases
        pr = (2 * sr - w) / (2 * sr + w)
        sos[-1] = (1.0, -z, 0.0, 1.0, -pr, 0.0)
    # gain: |H(z0)| = 1 at z0 = 1 (low-pass) or −1 (high-pass), one section at a time
    z0 = 1.0 if low else -1.0
    for row in sos:
        num = row[0] + row[1] / z0 + row[2] / z0**2
        den = row[3] + row[4] / z0 + row[5] / z0**2
        row[:3] *= den / num
    return sos


def band_limit(
    x: np.ndarray,
    sr: int,
    lo: float | None,
    hi: float | None,
    lo_order: int = 2,
    hi_order: int = 8,
) -> np.ndarray:
    """Causal Butterworth band-limit (``sosfilt``, zero initial state).

    High-pass at ``lo`` Hz of order ``lo_order`` (skipped when ``lo`` is None or ≤ 0),
    then low-pass at ``hi`` Hz of order ``hi_order`` (skipped when ``hi`` is None or
    ≥ sr/2). Analog-prototype magnitudes ``|H_hp(f)|² = 1 / (1 + (lo/f)^(2·lo_order))`` and
    ``|H_lp(f)|² = 1 / (1 + (f/hi)^(2·hi_order))``: -3 dB at the cut-offs, 6·order dB per
    octave beyond them (the bilinear transform keeps the cut-offs exact and makes the
    low-pass steeper still near Nyquist).
    """
    xf = _as_float(x)
    nyq = sr / 2
    y = xf
    if lo is not None and lo > 0:
        if lo >= nyq or (hi is not None and hi < nyq and lo >= hi):
            raise ValueError(f"band_limit: need 0 < lo < hi and lo < sr/2, got lo={lo}, hi={hi}")
        y = sosfilt(butter_sos(lo_order, lo, sr, "highpass"), y)
    if hi is not None and 0 < hi < nyq:
        y = sosfilt(butter_sos(hi_order, hi, sr, "lowpass"), y)
    elif hi is not None and hi <= 0:
        raise ValueError(f"band_limit: hi must be > 0, got {hi}")
    return np.asarray(y).astype(_out_dtype(x))


def peaking_eq(x: np.ndarray, sr: int, f0: float, gain_db: float, q: float) -> np.ndarray:
    """Causal peaking biquad (RBJ audio-EQ cookbook): gain ``gain_db`` at ``f0``, 0 dB far
    from it, bandwidth set by ``q``.

    ``A = 10^(gain_db/40)``, ``ω₀ = 2π·f0/sr``, ``α = sin ω₀ / (2q)``;
    ``H(z) = (1 + αA - 2cos ω₀ z⁻¹ + (1 - αA) z⁻²) / (1 + α/A - 2cos ω₀ z⁻¹ + (1 - α/A) z⁻²)``,
    so ``|H(e^{jω₀})| = A² = 10^(gain_db/20)``.
    """
    if not 0 < f0 < sr / 2 or q <= 0:
        raise ValueError(f"peaking_eq: need 0 < f0 < sr/2 and q > 0, got f0={f0}, q={q}")
    a_ = 10 ** (gain_db / 40)
    w0 = 2 * math.pi * f0 / sr
    alpha = math.sin(w0) / (2 * q)
    c = math.cos(w0)
    b = np.array([1 + alpha * a_, -2 * c, 1 - alpha * a_])
    a = np.array([1 + alpha / a_, -2 * c, 1 - alpha / a_])
    sos = np.concatenate([b / a[0], a / a[0]])[None, :]
    return np.asarray(sosfilt(sos, _as_float(x))).astype(_out_dtype(x))


def rational_speed(factor: float, max_den: int = SPEED_MAX_DEN) -> Fraction:
    """The speed factor actually applied by :func:`speed_perturb`: the closest fraction
    ``p/q`` to ``factor`` with ``q ≤ max_den``."""
    if not (factor > 0 and math.isfinite(factor)):
        raise ValueError(f"speed factor must be > 0, got {factor!r}")
    return Fraction(factor).limit_denominator(max_den)


@functools.lru_cache(maxsize=1024)
def _resample_filter(up: int, down: int) -> np.ndarray:
    """``resample_poly``'s own anti-alias filter for (up, down) (its default design:
    ``firwin(20·m + 1, 1/m, kaiser 5.0)``, m = max(up, down)), cached: for the speed
    factors drawn (q ≤ 100, ~2000 taps) designing it cost more than applying it."""
    m = max(up, down)
    h = firwin(20 * m + 1, 1.0 / m, window=("kaiser", 5.0))
    h.setflags(write=False)
    return h


def speed_perturb(x: np.ndarray, factor: float, max_den: int = SPEED_MAX_DEN) -> np.ndarray:
    """Play ``x`` ``factor`` times faster by band-limited resampling.

    With ``p/q = rational_speed(factor, max_den)``, ``y = resample_poly(x, up=q, down=p)``:
    ``y[m] ≈ x(m·p/q)`` (``x(t)`` the band-limited interpolation of the samples, with an
    anti-alias low-pass at ``(sr/2)·min(1, q/p)``), so the output has ``ceil(len(x)·q/p)``
    samples (duration ÷ factor), a tone at ``f`` comes out at ``f·p/q`` (pitch × factor)
    and input sample ``n`` lands at output sample ``n·q/p``.
    """
    fr = rational_speed(factor, max_den)
    xf = _as_float(x)
    if fr == 1 or len(xf) == 0:
        return xf.astype(_out_dtype(x))
    up, down = fr.denominator, fr.numerator
    h = _resample_filter(up, down)  # resample_poly copies the filter it is given
    return resample_poly(xf, up, down, window=h).astype(_out_dtype(x))


def time_shift(x: np.ndarray, n: int) -> np.ndarray:
    """Shift by ``n`` samples with zero fill: ``y[i] = x[i - n]`` where ``0 ≤ i - n <
    len(x)``, else 0 (``n > 0`` delays, ``n < 0`` advances; same length)."""
    x = np.asarray(x)
    y = np.zeros_like(x)
    n = int(n)
    if n >= 0:
        if n < len(x):
            y[n:] = x[: len(x) - n]
    elif -n < len(x):
        y[:n] = x[-n:]
    return y


def fit_length(x: np.ndarray, length: int) -> np.ndarray:
    """Zero-pad or truncate ``x`` at its end to ``length`` samples (positions unchanged)."""
    x = np.asarray(x)
    if len(x) >= length:
        return x[:length]
    return np.concatenate([x, np.zeros(length - len(x), dtype=x.dtype)])


# ---------------------------------------------------------------------------- augmenter


@dataclass(frozen=True)
class AugmentInfo:
    """The parameters drawn for one item; ``None`` where a transform was not applied.

    ``speed``: the applied factor ``p/q`` (see :func:`rational_speed`); ``shift``: samples;
    ``rt60_s`` / ``drr_db``: the RIR; ``highpass_hz`` / ``lowpass_hz`` (≥ sr/2: no
    low-pass) / ``peak_hz`` / ``peak_db`` / ``peak_q``: the EQ; ``snr_db``: the noise
    (``noise_index`` / ``noise_start``: the crop, when the noise was given as arrays);
    ``gain_db``: the gain. ``length_in`` / ``length_out``: input and output samples.
    """

    length_in: int
    length_out: int
    speed: float | None = None
    shift: int | None = None
    rt60_s: float | None = None
    drr_db: float | None = None
    highpass_hz: float | None = None
    lowpass_hz: float | None = None
    peak_hz: float | None = None
    peak_db: float | None = None
    peak_q: float | None = None
    snr_db: float | None = None
    noise_index: int | None = None
    noise_start: int | None = None
    gain_db: float | None = None

    @property
    def speed_factor(self) -> float:
        """The applied speed factor (1.0 when speed perturbation was not applied)."""
        return 1.0 if self.speed is None else self.speed

    def map_position(self, n: int | np.ndarray) -> int | np.ndarray:
        """Output sample of input sample ``n``: ``round(n / speed) + shift`` (may lie outside
        ``[0, length_out)`` when the shift or a ``length`` cut pushed it off the item)."""
        m = np.rint(np.asarray(n, dtype=np.float64) / self.speed_factor).astype(np.int64)
        m = m + (self.shift or 0)
        return int(m) if m.ndim == 0 else m

    def to_dict(self) -> dict[str, Any]:
        """The fields as a plain dict (for logging)."""
        return dataclasses.asdict(self)


def _log_uniform(rng: np.random.Generator, r: tuple[float, float]) -> float:
    return float(math.exp(rng.uniform(math.log(r[0]), math.log(r[1]))))


class Augmenter:
    """Applies an :class:`AugmentConfig` at sample rate ``sr``; see :meth:`__call__`."""

    def __init__(self, cfg: AugmentConfig | None = None, sr: int = SR):
        self.cfg = AugmentConfig() if cfg is None else cfg
        self.sr = int(sr)
        self.cfg.check_rate(self.sr)

    def __call__(
        self,
        x: np.ndarray,
        rng: np.random.Generator,
        noise: NoiseSource | None = None,
        length: int | None = None,
    ) -> tuple[np.ndarray, AugmentInfo]:
        """Augment one 1-D float clip: ``(y, info)``, ``y`` of ``x``'s float dtype.

        First draws ``len(TRANSFORMS)`` child seeds from ``rng`` (one stream per transform);
        each enabled transform then applies with its probability, drawing its parameters
        from its own stream, in the order speed → shift → reverb → EQ → noise → gain.
        After speed perturbation the clip has ``ceil(len(x) / speed)`` samples; with
        ``length`` it is then zero-padded / truncated at the end to ``length`` samples
        (positions unchanged). Noise is skipped when ``noise`` is None or the signal (or the
        noise crop) is silent over its active part (``info.snr_db`` None then).
        """
        cfg, sr = self.cfg, self.sr
        x = np.asarray(x)
        xf = _as_float(x)
        if not np.all(np.isfinite(xf)):
            raise ValueError("augment: input has non-finite samples")
        seeds = rng.integers(0, 2**63 - 1, size=len(TRANSFORMS))
        g = {t: np.random.default_rng(int(s)) for t, s in zip(TRANSFORMS, seeds, strict=True)}

        def on(t: str) -> bool:
            return bool(getattr(cfg, t)) and g[t].random() < getattr(cfg, f"{t}_prob")

        info: dict[str, Any] = {"length_in": len(xf)}
        y = xf
        if on("speed"):
            fr = rational_speed(g["speed"].uniform(*cfg.speed_factor))
            info["speed"] = float(fr)
            y = speed_perturb(y, float(fr))
        if length is not None:
            y = fit_length(y, int(length))
        if on("shift"):
            lo, hi = (round(v * sr / 1000) for v in cfg.shift_ms)
            info["shift"] = int(g["shift"].integers(lo, hi + 1))
            y = time_shift(y, info["shift"])
        if on("reverb"):
            gr = g["reverb"]
            info["rt60_s"] = float(gr.uniform(*cfg.reverb_rt60_s))
            info["drr_db"] = float(gr.uniform(*cfg.reverb_drr_db))
            y = reverberate(y, synth_rir(gr, sr, info["rt60_s"], info["drr_db"]))
        if on("eq"):
            ge = g["eq"]
            info["highpass_hz"] = _log_uniform(ge, cfg.eq_highpass_hz)
            info["lowpass_hz"] = _log_uniform(ge, cfg.eq_lowpass_hz)
            info["peak_hz"] = _log_uniform(ge, cfg.eq_peak_hz)
            info["peak_db"] = float(ge.uniform(*cfg.eq_peak_db))
            info["peak_q"] = float(ge.uniform(*cfg.eq_peak_q))
            y = band_limit(
                y,
                sr,
                info["highpass_hz"],
                info["lowpass_hz"],
                cfg.eq_highpass_order,
                cfg.eq_lowpass_order,
            )
            y = peaking_eq(y, sr, info["peak_hz"], info["peak_db"], info["peak_q"])
        if on("noise") and noise is not None and len(y) > 0:
            gn = g["noise"]
            snr = float(gn.uniform(*cfg.noise_snr_db))
            crop, where = crop_noise(gn, noise, len(y))
            a = active_mask(y)
            if np.any(y[a] != 0) and np.any(crop[a] != 0):
                y = add_noise_snr(y, crop, snr)
                info.update(where, snr_db=snr)
        if on("gain"):
            info["gain_db"] = float(g["gain"].uniform(*cfg.gain_db))
            y = apply_gain(y, info["gain_db"])
        info["length_out"] = len(y)
        return np.asarray(y).astype(_out_dtype(x)), AugmentInfo(**info)


def augment(
    x: np.ndarray,
    rng: np.random.Generator,
    cfg: AugmentConfig | None = None,
    noise: NoiseSource | None = None,
    sr: int = SR,
    length: int | None = None,
) -> tuple[np.ndarray, AugmentInfo]:
    """``Augmenter(cfg, sr)(x, rng, noise, length)``: one augmented clip and its draws."""
    return Augmenter(cfg, sr)(x, rng, noise, length)
