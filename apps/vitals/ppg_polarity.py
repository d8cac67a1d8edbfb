"""Which way up is a PPG? The sign that makes a pulse wave rise fast and fall slowly.

Sensors differ in polarity: a transmitted-light photodiode reads *less* light with more
blood (the raw wave is upside down), an absorbance or "pleth" output reads more. The
shipped models were trained on upright pulses only, and an upside-down PPG can read tens
of bpm off (experiments/2026-12-07-ppg-polarity/: one simulated record in 16 read
25.5 bpm RMSE inverted against 3.0 upright). So the monitor turns each PPG the right way
up before its models see it.

The cue is the shape of the beat: the systolic upstroke is steeper and shorter than the
fall after the peak, so the slope of an upright pulse has a few large positive values and
many small negative ones: its skewness is positive. For a window ``x`` (8 s)::

    y = band-pass(x, 0.5 - 8 Hz)       (the cardiac band; FFT of the window)
    d = diff(y)                        (the slope)
    skew = mean(d^3) / mean(d^2)^(3/2)
    sign = -1 if skew < 0 else +1      (the PPG fed to the models: sign * x)

``skew(-x) = -skew(x)``, so ``sign(-x) * (-x) = sign(x) * x`` exactly: the models see the
same samples whichever way the sensor reports, and their answers are bit-identical (a
window with ``skew`` exactly 0 is the only exception: a flat line, which the signal
quality index already marks). On 76 simulated records (seeds 202 and 303, not training
seeds) 91 % of the 8-s windows of the upright PPG had positive skewness; the records where
it is near 0 have symmetric systolic waves (the ``param`` family's Gaussian shape with a
small dicrotic wave), where polarity matters least. The measured effect on the models is in
docs/benchmarks.md (polarity) and the experiment above.

Used by :class:`~liquid_stream.apps.vitals.monitor.VitalsMonitor`: the decision is taken
on the first 8 s window of a PLETH channel that the signal-quality index passes, with no
interpolated or refused sample in it, after each model reset; the model is then reset and
re-fed that window with the sign, so nothing it saw before the decision (the samples of the
warm-up) depends on the polarity.
"""

from __future__ import annotations

import numpy as np

from liquid_stream.apps.vitals.signal_quality import band_pass
from liquid_stream.io.bidmc_vocab import channel_key

BAND_HZ = (0.5, 8.0)
CHANNELS = ("pleth",)  # channel keys turned the right way up (IR / RED keep their sign:
# the SpO2 model reads their DC levels)


def needs_polarity(channel: str) -> bool:
    """Whether ``channel`` (BIDMC style, any case) is a PPG whose sign is decided."""
    return channel_key(channel) in CHANNELS


def slope_skewness(x: np.ndarray, fs: float) -> float:
    """The skewness of the slope of ``x`` in the cardiac band (module docstring); 0 for a
    window with no slope at all."""
    x = np.asarray(x, dtype=np.float64)
    d = np.diff(band_pass(x - x.mean(), fs, *BAND_HZ))
    m2 = float(np.mean(d**2))
    if m2 <= 0.0:
        return 0.0
    return float(np.mean(d**3)) / m2**1.5


def polarity(x: np.ndarray, fs: float) -> int:
    """+1 when ``x`` is upright (its slope's skewness is >= 0), else -1."""
    return -1 if slope_skewness(x, fs) < 0 else 1
