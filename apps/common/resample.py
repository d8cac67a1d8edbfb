"""Causal, stateful polyphase resampling of a stream, exact for any chunking (no torch).

    from liquid_stream.apps.common.resample import StreamResampler

    r = StreamResampler(250, 125)        # fs_in -> fs_out, up/down = 1/2
    r = StreamResampler(250, 125, prime="edge")   # the past is the first sample, not zeros
    for block in blocks:                 # 1-D (T,) or multi-channel (T, C) blocks
        y = r.process(block)             # same layout as the block; C fixed per stream
    r.delay_s, r.reset()

The maths. ``up / down = fs_out / fs_in`` in lowest terms (exact for integer rates; other
rates are approximated by a fraction with ``down <= 1000``). The filter ``h`` is
:func:`scipy.signal.resample_poly`'s: a Kaiser (beta = 5) windowed-sinc FIR of
``2 * half_len + 1`` taps, ``half_len = 10 * max(up, down)``, cutoff ``1 / max(up, down)``
of Nyquist on the upsampled grid, gain ``up`` (:func:`kaiser_lowpass`: ``firwin``'s
design in numpy, equal to it within 2e-18, so the runtime needs no scipy). Output ``n`` is

    y[n] = sum_k h[n * down - k * up] * x[k]     (0 <= n * down - k * up < len(h))

so it uses the inputs up to ``floor(n * down / up)``, and ``process`` returns every
output whose inputs have all arrived: after N inputs, ``ceil(N * up / down)`` outputs in
all. The concatenated outputs equal ``scipy.signal.upfirdn(h, x, up, down)`` of the
whole signal (cut to that length) for any chunking. ``x[k]`` for k < 0 (the past before
the stream) is 0 with ``prime="zero"`` (audio, centred on 0) and ``x[0]`` with
``prime="edge"``. A biosignal has an offset (raw ADC counts, an oximeter's intensity):
from a zero past its first outputs ramp up from 0 over the filter's length, a step that
a running normalisation keeps in its variance for minutes (the shipped SpO2 model over
150 records at 250 Hz: 9.58 % RMSE from a zero past, 0.755 % from the first sample, as
at 125 Hz; ``python bench/vitals_stream.py … --rate 250``, docs/benchmarks.md §5.2). With
``"edge"`` the outputs equal ``upfirdn`` of the signal preceded by ``K - 1`` copies of
its first sample. Unlike ``resample_poly`` the filter
is applied causally, without delay compensation: the output lags the input by
``delay_s = half_len / (up * fs_in)`` seconds. Equal rates pass the signal through
(``h = [1]``, no delay).

The factors are bounded: ``max(up, down) <=`` :data:`MAX_FACTOR` (10⁵, a filter of at most
2·10⁶ + 1 taps, 16 MB), so that a wrong rate (a model's metadata claiming 10¹² Hz, a record
header's 10⁹ Hz) is a :class:`ResampleError` naming both rates, not an attempt to build a
filter of terabytes. Audio and biosignal rates are far inside it (44.1 kHz -> 16 kHz is
160/441; 100 kHz -> 125 Hz is 1/800).

Computation is vectorised over outputs and channels (``h`` split into its ``up`` phases
of ``K = ceil(len(h) / up)`` taps, the last ``K - 1`` inputs kept as history) in float64;
float32 blocks give float32 output, other blocks float64.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

# The largest up or down factor a resampler is built for (module docstring).
MAX_FACTOR = 10**5


class ResampleError(ValueError):
    """Bad sampling rates (not finite and positive, or too far apart: :data:`MAX_FACTOR`)
    or a block of another channel count."""


def _ratio(fs_in: float, fs_out: float) -> Fraction:
    if not all(math.isfinite(f) and f > 0 for f in (fs_in, fs_out)):
        raise ResampleError(f"resampling needs positive finite rates, got {fs_in} -> {fs_out}")
    if int(fs_in) == fs_in and int(fs_out) == fs_out:
        ratio = Fraction(int(fs_out), int(fs_in))
    else:
        ratio = Fraction(fs_out).limit_denominator(10**6) / Fraction(fs_in).limit_denominator(10**6)
        ratio = ratio.limit_denominator(1000)
    if max(ratio.numerator, ratio.denominator) > MAX_FACTOR:
        raise ResampleError(
            f"cannot resample {fs_in:g} Hz -> {fs_out:g} Hz: a factor of {ratio.numerator}/"
            f"{ratio.denominator}, beyond the limit of {MAX_FACTOR:g} either way (is one of the "
            "rates wrong?)"
        )
    return ratio


def kaiser_lowpass(numtaps: int, cutoff: float, beta: float = 5.0) -> np.ndarray:
    """Linear-phase low-pass FIR, unit gain at DC: the windowed sinc

        h[i] = c * sinc(c * m_i) * kaiser_beta[i] / sum(...),   m_i = i - (numtaps - 1) / 2,

    ``c`` = ``cutoff`` as a fraction of Nyquist — ``scipy.signal.firwin(numtaps, cutoff,
    window=("kaiser", beta))`` (the same formula; numpy's Bessel ``i0`` differs from
    scipy's by a few ulp)."""
    m = np.arange(numtaps) - 0.5 * (numtaps - 1)
    h = cutoff * np.sinc(cutoff * m) * np.kaiser(numtaps, beta)
    return h / h.sum()


class StreamResampler:
    """Resamples a stream from ``fs_in`` to ``fs_out`` Hz, block by block (module docstring).

    ``process(block)`` takes ``(T,)`` or ``(T, C)`` blocks (the first block fixes the
    layout until ``reset()``) and returns the outputs that the input seen so far
    determines, in the same layout. Attributes: ``up``, ``down``, ``h``, ``delay_s``.
    Raises :class:`ResampleError` (a ``ValueError``) for rates that are not positive.
    """

    def __init__(self, fs_in: float, fs_out: float, prime: str = "zero"):
        if prime not in ("zero", "edge"):
            raise ResampleError(f"prime must be 'zero' or 'edge', got {prime!r}")
        self.prime = prime
        ratio = _ratio(fs_in, fs_out)
        self.fs_in, self.fs_out = fs_in, fs_out
        self.up, self.down = ratio.numerator, ratio.denominator
        max_rate = max(self.up, self.down)
        half_len = 10 * max_rate if self.up != self.down else 0
        self.h = (
            kaiser_lowpass(2 * half_len + 1, 1.0 / max_rate) * self.up if half_len else np.ones(1)
        )
        self.delay_s = half_len / self.up / fs_in
        K = -(-len(self.h) // self.up)
        hp = np.zeros(K * self.up)
        hp[: len(self.h)] = self.h
        self._H = hp.reshape(K, self.up).T  # _H[p, k] = h[p + k*up]
        self._K = K
        self.reset()

    def reset(self) -> None:
        """Start a new stream: zero past, no inputs or outputs yet, layout free again."""
        self._hist: np.ndarray | None = None  # the last K-1 inputs, (K-1, C)
        self._flat: bool | None = None  # the stream's blocks are 1-D
        self.n_in = self.n_out = 0

    def process(self, block: np.ndarray) -> np.ndarray:
        block = np.asarray(block)
        dtype = np.float32 if block.dtype == np.float32 else np.float64
        x = block.astype(np.float64)
        flat = x.ndim == 1
        if flat:
            x = x[:, None]
        if self._hist is None:
            if self.prime == "edge" and not len(x):  # nothing to prime with yet
                return block.astype(dtype, copy=True)
            past = x[:1] if self.prime == "edge" else np.zeros((1, x.shape[1]))
            self._hist = np.repeat(past, self._K - 1, axis=0)  # (K-1, C): the past
            self._flat = flat
        elif flat != self._flat or x.shape[1] != self._hist.shape[1]:
            raise ResampleError(
                f"block of shape {block.shape} in a stream of "
                + ("1-D blocks" if self._flat else f"{self._hist.shape[1]}-channel blocks")
            )
        buf = np.concatenate([self._hist, x])  # buf[0] is input sample n_in - (K-1)
        n_in = self.n_in + len(x)
        n_out = (n_in * self.up + self.down - 1) // self.down
        m = np.arange(self.n_out, n_out) * self.down
        base, phase = m // self.up, m % self.up
        idx = base[:, None] - np.arange(self._K)[None, :] - (self.n_in - (self._K - 1))
        y = np.einsum("nk,nkc->nc", self._H[phase], buf[idx])
        self._hist = buf[len(buf) - (self._K - 1) :]
        self.n_in, self.n_out = n_in, n_out
        return (y[:, 0] if flat else y).astype(dtype, copy=False)
