"""No signal, no number: a causal signal-quality index per channel (numpy only, no torch).

Every second the vital-sign monitor judges each input channel on its trailing samples (at
the models' rate, after resampling, as fed to the models) and gets either ``None`` (a
signal worth reading) or the reason it is not:

=========================  ==========================================  =================
reason                     test (x: the channel's trailing samples)     window
=========================  ==========================================  =================
``flat line``              one value (zeros, a constant offset, a       last 2 s
                           rail), in float32 as the models read it
``quantisation noise``     at most 4 distinct float32 values            last 2 s
``clipped``                >= 30 % of the samples at the window's       last 2 s
                           maximum or at its minimum
``mains hum only``         >= 50 % of the power (mean and linear trend  last 8 s
                           removed, Hann window) within 1.5 Hz of 50
                           or 60 Hz (or their aliases at the rate)
``no pulse`` (PPG),        PPG / RESP: the physiological band's share   last 8 s
``no breathing`` (RESP)    of the power above ``floor_hz`` is below
                           ``band_min`` (PPG 0.5-8 Hz of the power above
                           0.3 Hz, so baseline wander and the step of a
                           returning sensor do not count: 0.25; RESP
                           0.05-2 Hz of all: 0.3)
``no QRS`` (ECG)           neither spikes nor rhythm: the kurtosis of   last 8 s
                           the 5-30 Hz band is below 4 (Gaussian noise:
                           3) and the autocorrelation of the QRS energy
                           (rectified slope, 0.5-8 Hz) has no peak >=
                           0.3 at a lag of 30-240 beats/min
``no pulse`` / ``no        1/f noise (pink, brown; any kind): the   last 8 s (a
breathing`` / ``no QRS``   log power (Hann periodogram) in 24 log-      full 8 s only)
                           spaced bands from 0.25 Hz to 0.4 x the rate
                           (hum bins out) lies on a straight line: the
                           log of the weighted mean squared misfit of a
                           fitted power law is below 1.2
                           (:func:`power_law_misfit`)
=========================  ==========================================  =================

Seconds before 2 s of a channel have been fed are not judged (they are ``warmup`` anyway);
the 8-s tests use what has been fed since the last reset when that is shorter, except the
1/f test, which waits for a full 8 s.

Why the 1/f test: noise whose power falls as 1/f (pink) or 1/f^2 (brown: a drifting,
disconnected electrode or probe) puts most of its power in the physiological bands and
passed the band-share tests (PPG 100 %, RESP 92-100 %, ECG brown 47 % of its seconds). A
periodogram of 1/f^b noise scatters about a straight line in log-log whatever ``b``; a
pulse, a breath or an ECG does not (a fundamental and harmonics, a steep fall, then a noise
floor). Measured on simulated data (experiments/2026-12-08-one-over-f/): pink / brown
noise alone passes <= 1.8 % of its seconds, as floats or at 3-300 LSB on an ADC; noise
added to a clean signal at 20 dB SNR passes >= 98.6 %; good simulated seconds flagged rise
by at most 0.44 points (AF PPG; 21 of the 36 seconds it adds over all sets lie in a
simulated motion burst). Known limits: 1-2 % of the seconds of 1/f noise still pass, so a
noise-only channel's technical alarm can drop for a second (its models stay invalid: their
window still covers judged seconds); RESP with pink noise at 10 dB SNR is flagged 47 % of
its seconds; on a real respiration belt (systole_ecg_resp) 7 of 1529 seconds of shallow,
irregular breathing were flagged.

The index is a pure function of the trailing samples, so it does not depend on how the
stream is cut into chunks; it is scale- and offset-free (every test is relative), like
the models.

The thresholds were set on simulated records and generated failure cases only
(experiments/2026-12-07-signal-quality/ and, for the 1/f test, 2026-12-08-one-over-f/:
the share of good seconds flagged and of failure seconds passed, per channel kind), never
on a real recording (the real check did decide between two spectra for the 1/f test, each
calibrated on simulated data: that study's result.md).

A channel's *kind* comes from its name: PLETH / IR / RED are PPG, RESP respiration, every
other channel an ECG lead (:func:`channel_kind`). The technical alarm text names the
channel: ``"no signal on PLETH (flat line)"``, ``"ECG lead off (II: flat line)"``
(:func:`technical_message`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from liquid_stream.io.bidmc_vocab import channel_key

SHORT_S = 2.0  # window of the flat / quantisation / clipping tests
LONG_S = 8.0  # window of the spectral and periodicity tests
MAX_LEVELS = 4  # at most this many distinct values: quantisation noise only
RAIL_SHARE = 0.30  # this share of samples at the max or at the min: clipped
HUM_SHARE = 0.50  # this share of the power at 50 / 60 Hz: mains hum only
HUM_HZ = (50.0, 60.0)
HUM_HALF_WIDTH_HZ = 1.5
# the 1/f test: a straight line through the log power (Hann periodogram) in log-spaced
# bands from SMOOTH_LO_HZ to SMOOTH_HI * fs (50 Hz at 125 Hz), hum excluded; the window is
# 1/f noise when the line fits too well (the log of the weighted mean squared misfit below
# SMOOTH_MIN)
SMOOTH_LO_HZ = 0.25
SMOOTH_HI = 0.4
SMOOTH_BANDS = 24
SMOOTH_MIN = 1.2


@dataclass(frozen=True)
class Kind:
    """What a channel of one kind must show: the share of its power in its band
    (``band_min``; 0: not tested) or, for an ECG (``spiky``), QRS spikes (kurtosis of
    the 5-30 Hz band >= ``kurt_min``) or a rhythm (an autocorrelation peak of the QRS
    energy >= ``ac_min`` at a lag of a rate in ``rate_per_min``)."""

    name: str
    band_hz: tuple[float, float]
    band_min: float
    absent: str  # the reason when the test fails
    floor_hz: float = 0.0  # the band's share is of the power above this
    spiky: bool = False
    kurt_min: float = 4.0
    ac_min: float = 0.3
    rate_per_min: tuple[float, float] = (30.0, 240.0)


PPG = Kind("ppg", (0.5, 8.0), 0.25, "no pulse", floor_hz=0.3)
ECG = Kind("ecg", (0.5, 40.0), 0.0, "no QRS", spiky=True)
RESP = Kind("resp", (0.05, 2.0), 0.3, "no breathing")
KINDS = {k.name: k for k in (PPG, ECG, RESP)}
_PPG_NAMES = {"pleth", "ir", "red", "ppg"}


def channel_kind(channel: str) -> Kind:
    """PLETH / IR / RED (any case, BIDMC's trailing comma ignored) -> PPG, RESP ->
    respiration, anything else -> an ECG lead."""
    key = channel_key(channel)
    if key in _PPG_NAMES:
        return PPG
    if key == "resp":
        return RESP
    return ECG


def technical_message(channel: str, reason: str) -> str:
    """The technical alarm's text: ``"ECG lead off (II: flat line)"`` for an ECG lead,
    ``"no signal on PLETH (no pulse)"`` otherwise."""
    if channel_kind(channel) is ECG:
        return f"ECG lead off ({channel}: {reason})"
    return f"no signal on {channel} ({reason})"


def _hum_mask(f: np.ndarray, fs: float) -> np.ndarray:
    """Frequencies within HUM_HALF_WIDTH_HZ of 50 / 60 Hz or of their aliases at ``fs``."""
    mask = np.zeros(f.shape, dtype=bool)
    for h in HUM_HZ:
        alias = abs(h - fs * round(h / fs))  # where a sampled h lands in [0, fs / 2]
        mask |= np.abs(f - alias) <= HUM_HALF_WIDTH_HZ
    return mask


def band_pass(y: np.ndarray, fs: float, lo: float, hi: float) -> np.ndarray:
    """Zero-phase FFT brick-wall band-pass of one window (a judgement of a window, not a
    stream filter: causality holds because the window is the past)."""
    spec = np.fft.rfft(y)
    f = np.fft.rfftfreq(len(y), 1.0 / fs)
    spec[(f < lo) | (f > hi)] = 0.0
    return np.fft.irfft(spec, len(y))


def _ac_peak(z: np.ndarray, fs: float, rate_per_min: tuple[float, float]) -> float:
    """Largest normalised autocorrelation of ``z`` at lags of the rates in
    ``rate_per_min`` (biased estimate, so a lag near the window length cannot score
    high on a few samples)."""
    z = z - z.mean()
    energy = float(z @ z)
    if energy <= 0.0:
        return 0.0
    n = len(z)
    spec = np.fft.rfft(z, 2 * n)
    ac = np.fft.irfft(np.abs(spec) ** 2, 2 * n)[:n] / energy
    lo = int(np.floor(60.0 / rate_per_min[1] * fs))
    hi = min(n - 1, int(np.ceil(60.0 / rate_per_min[0] * fs)))
    if hi <= lo:
        return 0.0
    return float(ac[lo : hi + 1].max())


def power_law_misfit(y: np.ndarray, fs: float) -> float:
    """How far the spectrum of ``y`` (mean and trend removed) is from a power law
    ``c f^-b``: its Hann-windowed periodogram, the periodogram's mean in each of
    ``SMOOTH_BANDS`` log-spaced bands from ``SMOOTH_LO_HZ`` to ``SMOOTH_HI * fs`` (hum bins
    left out; empty bands skipped), a straight line fitted to the log of those means
    against the log of the bands' centres, weighted by the number ``m`` of bins in each
    band (the log of a mean of ``m`` periodogram bins of a noise scatters as about
    ``1 / m``), and the log of the weighted mean squared misfit ``mean(m r^2)``. 1/f^b
    noise of any exponent scatters about its line (simulated: median 0.5, 99 % below
    1.3); a pulse, a breath or an ECG has peaks, a steep fall and a noise floor (99 % of
    simulated good windows above 1.4). Scale-free (a gain shifts every log by one
    constant). Fewer than 4 bands: inf (not judged)."""
    n = len(y)
    return periodogram_misfit(np.abs(np.fft.rfft(y * np.hanning(n))) ** 2, fs, n)


def periodogram_misfit(p: np.ndarray, fs: float, n: int) -> float:
    """:func:`power_law_misfit` from a periodogram ``p`` (``n // 2 + 1`` bins of ``n``
    samples at ``fs``)."""
    f = np.fft.rfftfreq(n, 1.0 / fs)
    edges = np.geomspace(SMOOTH_LO_HZ, SMOOTH_HI * fs, SMOOTH_BANDS + 1)
    band = np.searchsorted(edges, f, side="right") - 1
    ok = (band >= 0) & (band < SMOOTH_BANDS) & ~_hum_mask(f, fs)
    m = np.bincount(band[ok], minlength=SMOOTH_BANDS).astype(np.float64)
    s = np.bincount(band[ok], weights=p[ok], minlength=SMOOTH_BANDS)
    used = m > 0
    if used.sum() < 4:
        return float("inf")
    m, s = m[used], s[used]
    mean = s / m
    if mean.max() <= 0:
        return float("inf")
    lp = np.log(np.maximum(mean, 1e-12 * float(mean.max())))
    lf = np.log(np.sqrt(edges[:-1] * edges[1:]))[used]
    r = lp - np.polyval(np.polyfit(lf, lp, 1, w=np.sqrt(m)), lf)
    return float(np.log(max(float(np.mean(m * r**2)), 1e-300)))


def features(x: np.ndarray, fs: float, kind: Kind) -> dict[str, float]:
    """The quantities the tests read, for a window ``x`` (its last ``LONG_S`` s at most):
    ``levels``, ``rail``, ``hum``, ``band``, ``misfit`` (the 1/f test: inf while the
    window is shorter than ``LONG_S``) and, for an ECG, ``kurt`` and ``ac`` (module
    docstring)."""
    x = np.asarray(x, dtype=np.float64)
    short = x[-max(1, int(round(SHORT_S * fs))) :]
    long = x[-max(1, int(round(LONG_S * fs))) :]
    out = {
        "levels": float(len(np.unique(short.astype(np.float32)))),  # as the models read it
        "rail": float(max(np.mean(short == short.max()), np.mean(short == short.min()))),
    }
    t = np.arange(len(long), dtype=np.float64)
    if len(long) > 2:
        y = long - np.polyval(np.polyfit(t, long, 1), t)
    else:
        y = long - long.mean()
    p = np.abs(np.fft.rfft(y * np.hanning(len(y)))) ** 2
    f = np.fft.rfftfreq(len(y), 1.0 / fs)
    total = float(p[1:].sum())
    if total <= 0.0:
        out.update(hum=0.0, band=0.0, misfit=float("inf"), kurt=0.0, ac=0.0)
        return out
    out["hum"] = float(p[1:][_hum_mask(f[1:], fs)].sum()) / total
    lo, hi = kind.band_hz
    above = float(p[(f > 0) & (f >= kind.floor_hz)].sum())
    out["band"] = float(p[(f >= lo) & (f <= hi)].sum()) / above if above > 0 else 0.0
    full = len(long) >= int(round(LONG_S * fs))
    out["misfit"] = power_law_misfit(y, fs) if full else float("inf")
    if kind.spiky:  # QRS spikes: the 5-30 Hz band's kurtosis; rhythm: the QRS energy's
        qrs = band_pass(y, fs, 5.0, 30.0)
        m2 = float(np.mean(qrs**2))
        out["kurt"] = float(np.mean(qrs**4)) / m2**2 if m2 > 0 else 0.0
        energy = band_pass(np.abs(np.diff(band_pass(y, fs, lo, hi), prepend=0.0)), fs, 0.5, 8.0)
        out["ac"] = _ac_peak(energy, fs, kind.rate_per_min)
    return out


def judge(x: np.ndarray, fs: float, kind: Kind) -> str | None:
    """``None`` when the trailing samples ``x`` (one channel at ``fs``) carry a signal of
    ``kind``, else the reason they do not (module docstring). Fewer than ``SHORT_S`` s:
    None (not judged)."""
    if len(x) < int(round(SHORT_S * fs)):
        return None
    q = features(x, fs, kind)
    if q["levels"] <= 1:
        return "flat line"
    if q["levels"] <= MAX_LEVELS:
        return "quantisation noise"
    if q["rail"] >= RAIL_SHARE:
        return "clipped"
    if q["hum"] >= HUM_SHARE:
        return "mains hum only"
    if q["band"] < kind.band_min:
        return kind.absent
    if kind.spiky and q["kurt"] < kind.kurt_min and q["ac"] < kind.ac_min:
        return kind.absent
    if q["misfit"] < SMOOTH_MIN:
        return kind.absent
    return None
