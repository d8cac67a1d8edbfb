"""The streaming polyphase resampler (liquid_stream.apps.common.resample) shared by kws and
vitals."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.signal import upfirdn

from liquid_stream.apps.common.audio import AudioError, stream_resampler
from liquid_stream.apps.common.resample import ResampleError, StreamResampler

RATES = [(16000, 8000), (11025, 8000), (8000, 16000), (250, 125), (100, 125), (128, 125)]


def _chunked(r: StreamResampler, x: np.ndarray, sizes) -> np.ndarray:
    ys, a = [], 0
    for n in sizes:
        ys.append(r.process(x[a : a + n]))
        a += n
    assert a >= len(x)
    return np.concatenate(ys)


def _random_sizes(rng: np.random.Generator, n: int, hi: int) -> list[int]:
    sizes = []
    while sum(sizes) < n:
        sizes.append(int(rng.integers(0, hi)))  # empty blocks too
    return sizes


@pytest.mark.parametrize("fs_in,fs_out", RATES)
@pytest.mark.parametrize("channels", [None, 2])
def test_chunked_equals_upfirdn_of_whole(fs_in, fs_out, channels):
    rng = np.random.default_rng([fs_in, fs_out])
    n = 3 * fs_in + 17 if fs_in < 1000 else 12000
    x = rng.standard_normal(n if channels is None else (n, channels))
    cols = x[:, None] if channels is None else x
    r = StreamResampler(fs_in, fs_out)
    g = math.gcd(fs_in, fs_out)
    assert (r.up, r.down) == (fs_out // g, fs_in // g)
    ref = np.stack([upfirdn(r.h, cols[:, c], r.up, r.down) for c in range(cols.shape[1])], 1)
    if channels is None:
        ref = ref[:, 0]
    for sizes in ([1, 7, fs_in, 3, 50, 10**6], _random_sizes(rng, n, 400), [n]):
        r.reset()
        y = _chunked(r, x, sizes)
        assert y.shape[1:] == x.shape[1:] and y.dtype == np.float64
        # every output whose inputs (up to floor(k * down / up)) have arrived: all of them
        assert len(y) == math.ceil(n * r.up / r.down) == r.n_out
        np.testing.assert_allclose(y, ref[: len(y)], atol=1e-12)


@pytest.mark.parametrize("fs_in,fs_out", [(250, 125), (100, 125), (11025, 8000)])
def test_edge_prime_equals_upfirdn_after_copies_of_the_first_sample(fs_in, fs_out):
    """``prime="edge"``: the past before the stream is its first sample, in any chunking
    (empty first blocks included); a signal with an offset starts at its level instead of
    ramping up from 0 as with the zero past."""
    rng = np.random.default_rng([fs_in, 3])
    n = 2 * fs_in + 5
    x = 1000.0 + rng.standard_normal((n, 2))  # an offset, as raw sensor units have
    r = StreamResampler(fs_in, fs_out, prime="edge")
    pad = r._K - 1  # the history the filter keeps: K - 1 inputs
    ext = np.concatenate([np.repeat(x[:1], pad, 0), x])
    full = np.stack([upfirdn(r.h, ext[:, c], r.up, r.down) for c in range(2)], 1)
    skip = pad * r.up // r.down  # the outputs of the invented past (whole when it divides)
    for sizes in ([0, 0, 1, 7, fs_in, 10**6], _random_sizes(rng, n, 300), [n]):
        r.reset()
        y = _chunked(r, x, sizes)
        if pad * r.up % r.down == 0:
            np.testing.assert_allclose(y, full[skip : skip + len(y)], atol=1e-9)
        # the first output is at the signal's level (from a zero past: ~0)
        assert abs(y[0, 0] / x[0, 0] - 1) < 0.01
    zero = StreamResampler(fs_in, fs_out).process(x)
    assert abs(zero[0, 0]) < 0.01 * x[0, 0]
    with pytest.raises(ResampleError, match="prime"):
        StreamResampler(fs_in, fs_out, prime="mean")


def test_outputs_as_soon_as_their_inputs_arrive():
    r = StreamResampler(8000, 16000)  # up 2, down 1: output k needs input floor(k / 2)
    assert len(r.process(np.zeros(1))) == 2
    r = StreamResampler(11025, 8000)
    x = np.random.default_rng(1).standard_normal(500)
    for i in range(len(x)):
        r.process(x[i : i + 1])
        # outputs so far use inputs <= i; the next one needs input i + 1
        assert (r.n_out - 1) * r.down // r.up <= i < r.n_out * r.down // r.up


def test_filter_delay_and_passband():
    # resample_poly's filter, applied causally: a sine well inside both bands comes through
    # delayed by delay_s = half_len / (up * fs_in)
    for fs_in, fs_out in [(250, 125), (100, 125), (128, 125), (16000, 8000)]:
        r = StreamResampler(fs_in, fs_out)
        half_len = 10 * max(r.up, r.down)
        assert len(r.h) == 2 * half_len + 1
        assert r.delay_s == pytest.approx(half_len / (r.up * fs_in))
        t = np.arange(4 * fs_in) / fs_in
        f = fs_in / 125  # 2 Hz at 250 Hz
        assert r.h.sum() == pytest.approx(r.up) and np.allclose(r.h, r.h[::-1])
        y = r.process(np.sin(2 * np.pi * f * t))
        to = np.arange(len(y)) / fs_out - r.delay_s
        mid = slice(len(y) // 4, -len(y) // 4)
        np.testing.assert_allclose(y[mid], np.sin(2 * np.pi * f * to[mid]), atol=2e-3)


def test_dtype_equal_rates_float_rates_and_layout():
    x32 = np.random.default_rng(2).standard_normal(1000).astype(np.float32)
    y = StreamResampler(16000, 8000).process(x32)
    assert y.dtype == np.float32 and y.ndim == 1
    same = StreamResampler(8000, 8000.0)
    assert (same.up, same.down, same.delay_s) == (1, 1, 0.0)
    np.testing.assert_array_equal(same.process(x32), x32)
    odd = StreamResampler(62.5, 125)  # non-integer rate: a nearby fraction
    assert (odd.up, odd.down) == (2, 1)
    r = StreamResampler(250, 125)
    r.process(np.zeros((10, 3)))
    with pytest.raises(ResampleError, match="3-channel"):
        r.process(np.zeros((10, 2)))
    with pytest.raises(ResampleError):
        r.process(np.zeros(10))
    r.reset()
    assert r.process(np.zeros(10)).shape == (5,)


@pytest.mark.parametrize("bad", [(0, 8000), (8000, -1), (math.nan, 8000), (8000, math.inf)])
def test_bad_rates(bad):
    with pytest.raises(ResampleError, match="positive finite rates"):
        StreamResampler(*bad)
    assert issubclass(ResampleError, ValueError)


def test_audio_stream_resampler_needs_integer_rates():
    r = stream_resampler(16000.0, 8000)
    assert isinstance(r, StreamResampler) and (r.up, r.down) == (1, 2)
    for bad in [(0, 8000), (8000, -1), (44100.5, 16000)]:
        with pytest.raises(AudioError, match="positive integer rates"):
            stream_resampler(*bad)


@pytest.mark.parametrize("numtaps, cutoff", [(41, 0.5), (201, 0.1), (2561, 1 / 128), (20001, 1e-3)])
def test_the_numpy_filter_design_is_scipys_firwin(numtaps, cutoff):
    """The runtime designs its anti-aliasing filter without scipy: equal to
    ``scipy.signal.firwin(…, window=("kaiser", 5))`` to rounding."""
    from scipy.signal import firwin

    from liquid_stream.apps.common.resample import kaiser_lowpass

    ref = firwin(numtaps, cutoff, window=("kaiser", 5.0))
    np.testing.assert_allclose(kaiser_lowpass(numtaps, cutoff), ref, rtol=0, atol=1e-15)
