"""Tone bursts in noise, labelled sample by sample: the toy task of the trainer (``toy``)
and of the end-to-end tour (``python -m liquid_stream.demo``). Numpy only.

    x, y = tone_bursts(np.random.default_rng(0), n=16, length=2000, sr=8000, noise=0.3)

``x`` (n, length, 1) float32 is Gaussian noise of std ``noise`` with non-overlapping sine
bursts (class 1 = 440 Hz, 2 = 880 Hz, random amplitude 0.3-1 and phase); ``y`` (n, length)
int64 labels every sample 0 (no tone) / 1 / 2 (:data:`TONE_LABELS`). Lengths are drawn
uniformly (``rng.integers``, high end excluded): the first burst starts in ``start``
samples, each lasts ``dur`` samples, the gap after it ``gap`` samples; by default they
scale with ``length`` (start ``[0, length/8)``, bursts ``[length/8, length/2)``, gaps
``[length/16, length/2)``). The same ``rng`` state gives the same signal.
"""

from __future__ import annotations

import numpy as np

TONE_LABELS = ("silence", "440 Hz", "880 Hz")


def tone_bursts(
    rng: np.random.Generator,
    n: int,
    length: int,
    sr: int,
    noise: float,
    start: tuple[int, int] | None = None,
    dur: tuple[int, int] | None = None,
    gap: tuple[int, int] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Noise with non-overlapping tone bursts (440/880 Hz); per-sample labels 0/1/2."""
    lo, hi = max(8, length // 8), max(16, length // 2)
    start, dur, gap = start or (0, lo), dur or (lo, hi), gap or (lo // 2, hi)
    x = noise * rng.standard_normal((n, length))
    y = np.zeros((n, length), np.int64)
    t = np.arange(length) / sr
    for b in range(n):
        pos = int(rng.integers(*start))
        while pos < length:
            end = min(pos + int(rng.integers(*dur)), length)
            cls = int(rng.integers(1, 3))
            amp = rng.uniform(0.3, 1.0)
            phase = rng.uniform(0, 6.3)
            x[b, pos:end] += amp * np.sin(2 * np.pi * 440.0 * cls * t[pos:end] + phase)
            y[b, pos:end] = cls
            pos = end + int(rng.integers(*gap))
    return x.astype(np.float32)[..., None], y
