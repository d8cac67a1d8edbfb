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
=========================  ==========================================  =================

Seconds before 2 s of a channel have been fed are not judged (they are ``warmup`` anyway);
the 8-s tests use what has been fed since the last reset when that is shorter. The index
is a pure function of the trailing samples, so it does not depend on how the stream is cut
into chunks; it is scale- and offset-free (every test is relative), like the models.

The thresholds were set on simulated records and generated failure cases only
(experiments/2026-12-07-signal-quality/: the share of good seconds flagged and of failure
seconds passed, per channel kind), never on a real recording.

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


def features(x: np.ndarray, fs: float, kind: Kind) -> dict[str, float]:
    """The quantities the tests read, for a window ``x`` (its last ``LONG_S`` s at most):
    ``levels``, ``rail``, ``hum``, ``band`` and, for an ECG, ``kurt`` and
    ``ac`` (module docstring)."""
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
        out.update(hum=0.0, band=0.0, kurt=0.0, ac=0.0)
        return out
    out["hum"] = float(p[1:][_hum_mask(f[1:], fs)].sum()) / total
    lo, hi = kind.band_hz
    above = float(p[(f > 0) & (f >= kind.floor_hz)].sum())
    out["band"] = float(p[(f >= lo) & (f <= hi)].sum()) / above if above > 0 else 0.0
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
    return None
