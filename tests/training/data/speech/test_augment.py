"""Training-time augmentation (training/data/speech/augment.py): each transform measured back."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from scipy.signal import resample_poly, welch

from liquid_stream.training.data.speech.augment import (
    TRANSFORMS,
    AugmentConfig,
    Augmenter,
    AugmentInfo,
    active_mask,
    add_noise_snr,
    apply_gain,
    augment,
    band_limit,
    butter_sos,
    item_rng,
    peaking_eq,
    rational_speed,
    reverberate,
    speed_perturb,
    synth_rir,
    time_shift,
)

SR = 16000


def _rms(x: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.asarray(x, np.float64) ** 2)))


def _speech_like(rng: np.random.Generator, n: int = SR) -> tuple[np.ndarray, np.ndarray]:
    """Three harmonic 'syllables' (f0 110-220 Hz, 10 harmonics with 1/k roll-off, Hann
    envelope, amplitudes 0.8 / 0.4 / 0.25) in silence; returns (x, ground-truth mask)."""
    x = np.zeros(n)
    truth = np.zeros(n, dtype=bool)
    t = np.arange(n) / SR
    for start, dur, amp in ((1600, 2400, 0.8), (5600, 3200, 0.4), (10400, 2880, 0.25)):
        f0 = rng.uniform(110, 220)
        tone = sum(
            np.sin(2 * np.pi * k * f0 * t[:dur] + rng.uniform(0, 2 * np.pi)) / k
            for k in range(1, 11)
        )
        x[start : start + dur] = amp * np.hanning(dur) * tone / np.abs(tone).max()
        truth[start : start + dur] = True
    return x, truth


def _pink(rng: np.random.Generator, n: int) -> np.ndarray:
    spec = np.fft.rfft(rng.standard_normal(n))
    f = np.fft.rfftfreq(n, 1 / SR)
    f[0] = f[1]
    return np.fft.irfft(spec / np.sqrt(f), n)


def _all_on(**kw) -> AugmentConfig:
    return AugmentConfig(**{f"{t}_prob": 1.0 for t in TRANSFORMS}, **kw)


def _peak_hz(y: np.ndarray, sr: int = SR) -> float:
    spec = np.abs(np.fft.rfft(y * np.hanning(len(y)), 2**20))
    return float(np.argmax(spec) * sr / 2**20)


# ---------------------------------------------------------------------------- determinism


def test_deterministic_per_seed_epoch_index():
    rng0 = np.random.default_rng(1)
    x = (0.3 * rng0.standard_normal(SR)).astype(np.float32)
    noise = [_pink(rng0, 3 * SR), _pink(rng0, SR // 2)]
    cfg = _all_on()
    y1, i1 = augment(x, item_rng(7, 0, 3), cfg, noise)
    y2, i2 = augment(x, item_rng(7, 0, 3), cfg, noise)
    assert np.array_equal(y1, y2) and i1 == i2
    assert y1.dtype == np.float32
    assert all(
        getattr(i1, f) is not None
        for f in ("speed", "shift", "rt60_s", "peak_q", "snr_db", "gain_db")
    )
    y3, i3 = augment(x, item_rng(7, 1, 3), cfg, noise)  # next epoch
    y4, i4 = augment(x, item_rng(7, 0, 4), cfg, noise)  # next item
    assert i3 != i1 and i4 != i1
    for y in (y3, y4):
        assert len(y) != len(y1) or not np.allclose(y, y1)
    # the speech.py convention: default_rng([seed, epoch, index])
    assert item_rng(7, 0, 3).random() == np.random.default_rng([7, 0, 3]).random()


def test_transform_streams_are_independent():
    """Switching transforms off does not change what the others draw."""
    x = np.random.default_rng(2).standard_normal(SR) * 0.1
    noise = _pink(np.random.default_rng(3), 2 * SR)
    _, full = augment(x, item_rng(0, 5, 9), _all_on(), noise)
    _, part = augment(x, item_rng(0, 5, 9), _all_on(reverb=False, eq=False), noise)
    assert part.rt60_s is None and part.highpass_hz is None
    for f in ("speed", "shift", "snr_db", "noise_start", "gain_db"):
        assert getattr(part, f) == getattr(full, f), f


# ---------------------------------------------------------------------------- gain


@pytest.mark.parametrize("db", [-20.0, -6.5, 0.0, 3.0, 20.0])
def test_gain_measured_back_exactly(db):
    x = np.random.default_rng(0).standard_normal(4000) * 0.2
    y = apply_gain(x, db)
    assert 20 * math.log10(_rms(y) / _rms(x)) == pytest.approx(db, abs=1e-9)


def test_gain_does_not_clip():
    x = np.full(100, 0.5, dtype=np.float32)
    y = apply_gain(x, 20.0)
    assert y.dtype == np.float32 and np.allclose(y, 5.0)  # beyond full scale, kept


# ---------------------------------------------------------------------------- noise


@pytest.mark.parametrize("snr", [0.0, 5.0, 10.0, 20.0, 30.0])
def test_snr_measured_back(snr):
    rng = np.random.default_rng(int(snr) + 10)
    x, truth = _speech_like(rng)
    noise = _pink(rng, len(x))
    y = add_noise_snr(x, noise, snr)
    added = y - x
    # the documented definition, re-implemented: 10 ms blocks within 40 dB of the loudest
    e = np.array([np.mean(x[i : i + 160] ** 2) for i in range(0, len(x), 160)])
    a = np.repeat(e >= e.max() * 1e-4, 160)[: len(x)]
    assert np.array_equal(a, active_mask(x))
    exact = 10 * math.log10(np.mean(x[a] ** 2) / np.mean(added[a] ** 2))
    assert exact == pytest.approx(snr, abs=1e-6)
    # and over the ground-truth speech samples
    meas = 10 * math.log10(np.mean(x[truth] ** 2) / np.mean(added[truth] ** 2))
    assert abs(meas - snr) < 0.5


def test_augment_noise_snr_recorded_in_info():
    rng = np.random.default_rng(4)
    x, truth = _speech_like(rng)
    noise = _pink(rng, 5 * SR)
    cfg = AugmentConfig(
        speed=False, shift=False, reverb=False, eq=False, gain=False, noise_prob=1.0
    )
    for i in range(5):
        y, info = augment(x, item_rng(1, 0, i), cfg, noise)
        assert info.snr_db is not None and 0.0 <= info.snr_db <= 30.0
        assert np.all(np.isfinite(y))
        added = y - x
        crop = noise[info.noise_start : info.noise_start + len(x)]
        g = added @ crop / (crop @ crop)
        assert g > 0 and np.allclose(added, g * crop)  # a scaled crop of the recording
        meas = 10 * math.log10(np.mean(x[truth] ** 2) / np.mean(added[truth] ** 2))
        assert abs(meas - info.snr_db) < 0.5
    # silence: SNR undefined, nothing added
    z, info = augment(np.zeros(SR), item_rng(1, 0, 0), cfg, noise)
    assert info.snr_db is None and not z.any()
    with pytest.raises(ValueError, match="signal power"):
        add_noise_snr(np.zeros(100), np.ones(100), 10.0)


# ---------------------------------------------------------------------------- reverb


def _edc_db(h: np.ndarray) -> np.ndarray:
    """Schroeder backward integral, dB re its value at 0."""
    edc = np.cumsum((h**2)[::-1])[::-1]
    return 10 * np.log10(edc / edc[0])


def _rt60_t30(h: np.ndarray, sr: int = SR) -> float:
    """RT60 from the least-squares slope of the EDC between -5 and -35 dB."""
    db = _edc_db(h)
    i = np.flatnonzero((db <= -5) & (db >= -35))
    slope = np.polyfit(i / sr, db[i], 1)[0]
    return -60.0 / slope


@pytest.mark.parametrize("drr", [-3.0, 0.0, 6.0, 12.0])
def test_synth_rir_energy_normalised_with_drr(drr):
    h = synth_rir(np.random.default_rng(0), SR, 0.3, drr)
    assert np.sum(h**2) == pytest.approx(1.0, abs=1e-12)  # ‖h‖₂ = 1
    assert len(h) == math.ceil(0.3 * SR) + 1
    assert h[0] > 0 and h[0] ** 2 == pytest.approx(10 ** (drr / 10) / (1 + 10 ** (drr / 10)))
    assert 10 * math.log10(h[0] ** 2 / np.sum(h[1:] ** 2)) == pytest.approx(drr, abs=1e-9)
    h2 = synth_rir(np.random.default_rng(0), SR, 0.3, drr)
    assert np.array_equal(h, h2)


@pytest.mark.parametrize("rt60", [0.1, 0.2, 0.4, 0.8])
@pytest.mark.parametrize("drr", [0.0, 6.0])
def test_synth_rir_rt60_from_schroeder(rt60, drr):
    est = [_rt60_t30(synth_rir(np.random.default_rng(s), SR, rt60, drr)) for s in range(5)]
    assert all(abs(e / rt60 - 1) < 0.10 for e in est), est
    assert abs(np.mean(est) / rt60 - 1) < 0.05


def test_reverberate_causal_same_length():
    rng = np.random.default_rng(5)
    x = rng.standard_normal(3000)
    h = synth_rir(rng, SR, 0.1)
    y = reverberate(x, h)
    assert len(y) == len(x)
    assert np.allclose(y, np.convolve(x, h)[: len(x)], atol=1e-10)
    imp = np.zeros(3000)
    imp[100] = 1.0
    yi = reverberate(imp, h)
    assert np.allclose(yi[:100], 0, atol=1e-12)  # causal: nothing before the input
    assert np.allclose(yi[100 : 100 + len(h)], h, atol=1e-12)
    assert np.allclose(reverberate(x, np.array([1.0])), x)


# ---------------------------------------------------------------------------- EQ


@pytest.mark.parametrize("lo,hi", [(50.0, 3000.0), (200.0, 4000.0), (400.0, 6000.0)])
def test_band_limit_spectrum(lo, hi):
    """White noise in: passband within 1 dB; ≥ 20 dB down beyond the transition bands
    (above 1.25·hi for the order-8 low-pass, below lo/4 for the order-2 high-pass)."""
    x = np.random.default_rng(6).standard_normal(2**17)
    y = band_limit(x, SR, lo, hi)
    f, px = welch(x, SR, nperseg=4096)
    _, py = welch(y, SR, nperseg=4096)
    ratio_db = 10 * np.log10(py / px)
    passband = (f >= 2 * lo) & (f <= 0.8 * hi)
    assert np.all(np.abs(ratio_db[passband]) < 1.0)
    for stop in (f >= 1.25 * hi, (f > 0) & (f <= lo / 4)):
        assert stop.sum() >= 3
        assert 10 * np.log10(py[stop].sum() / px[stop].sum()) <= -20.0
    # -3 dB at the cut-offs
    for fc in (lo, hi):
        assert np.interp(fc, f, ratio_db) == pytest.approx(-3.0, abs=0.5)
    # no low-pass at/above Nyquist, no high-pass for None
    assert np.allclose(band_limit(x[:1000], SR, None, SR / 2), x[:1000])


def test_butter_sos_is_scipys_butterworth():
    """The closed-form design equals scipy.signal.butter's filter (frequency response and
    output) for random orders 1-9, cut-offs 20 Hz-7.9 kHz, low- and high-pass."""
    from scipy.signal import butter, sosfilt, sosfreqz

    rng = np.random.default_rng(7)
    x = rng.standard_normal(4000)
    for i in range(120):
        order = int(rng.integers(1, 10))
        fc = float(np.exp(rng.uniform(np.log(20.0), np.log(7900.0))))
        btype = ("lowpass", "highpass")[i % 2]
        ref = butter(order, fc, btype, fs=SR, output="sos")
        sos = butter_sos(order, fc, SR, btype)
        assert sos.shape == (-(-order // 2), 6)
        _, h_ref = sosfreqz(ref, 2048, fs=SR)
        _, h = sosfreqz(sos, 2048, fs=SR)
        assert np.abs(h - h_ref).max() < 1e-9, (order, fc, btype)
        y_ref = sosfilt(ref, x)
        assert np.abs(sosfilt(sos, x) - y_ref).max() < 1e-9 * np.abs(y_ref).max()
    for bad in [
        (0, 100.0, "lowpass"),
        (2, 0.0, "lowpass"),
        (2, 8000.0, "highpass"),
        (2, 100.0, "bandpass"),
    ]:
        with pytest.raises(ValueError, match="butter_sos"):
            butter_sos(bad[0], bad[1], SR, bad[2])


@pytest.mark.parametrize(
    "f0,gain_db,q", [(300.0, 6.0, 0.7), (1500.0, -6.0, 2.0), (5000.0, 4.0, 1.0)]
)
def test_peaking_eq_gain_at_f0(f0, gain_db, q):
    t = np.arange(SR) / SR
    tone = np.sin(2 * np.pi * f0 * t)
    y = peaking_eq(tone, SR, f0, gain_db, q)
    assert 20 * math.log10(_rms(y[SR // 2 :]) / _rms(tone[SR // 2 :])) == pytest.approx(
        gain_db, abs=0.05
    )
    far = np.sin(2 * np.pi * (f0 / 20 if f0 > 1000 else min(20 * f0, 7500)) * t)
    yf = peaking_eq(far, SR, f0, gain_db, q)
    assert abs(20 * math.log10(_rms(yf[SR // 2 :]) / _rms(far[SR // 2 :]))) < 0.5


# ---------------------------------------------------------------------------- speed, shift


@pytest.mark.parametrize("factor", [0.9, 0.95, 1.05, 1.1])
def test_speed_perturb_duration_and_pitch(factor):
    n = SR
    tone = np.sin(2 * np.pi * 1000.0 * np.arange(n) / SR)
    y = speed_perturb(tone, factor)
    fr = rational_speed(factor)
    assert float(fr) == pytest.approx(factor, abs=1e-4)
    assert len(y) == math.ceil(n * fr.denominator / fr.numerator)
    assert len(y) / n == pytest.approx(1 / factor, rel=1e-3)  # duration ÷ factor
    assert _peak_hz(y) == pytest.approx(1000.0 * factor, rel=1e-3)  # pitch × factor
    assert np.array_equal(speed_perturb(tone, 1.0), tone)


def test_speed_perturb_cached_filter_is_resample_polys_own():
    """The cached anti-alias filter gives bit for bit what resample_poly designs itself,
    also for a factor drawn twice (the cache must not be modified by a call)."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal(4000)
    for factor in [*rng.uniform(0.85, 1.15, 8), 0.93, 0.93]:
        fr = rational_speed(factor)
        assert np.array_equal(
            speed_perturb(x, factor), resample_poly(x, fr.denominator, fr.numerator)
        )


def test_speed_and_shift_label_alignment():
    """An impulse at input sample n lands at info.map_position(n)."""
    cfg = AugmentConfig(
        reverb=False, eq=False, noise=False, gain=False, speed_prob=1.0, shift_prob=1.0
    )
    n = 9000
    x = np.zeros(SR)
    x[n] = 1.0
    seen = set()
    for i in range(8):
        y, info = augment(x, item_rng(3, 2, i), cfg)
        assert isinstance(info, AugmentInfo) and info.speed is not None
        assert info.length_out == len(y) == math.ceil(SR / info.speed - 1e-9)
        assert abs(int(np.argmax(np.abs(y))) - info.map_position(n)) <= 1
        assert np.array_equal(
            info.map_position(np.array([0, n])), [info.shift, info.map_position(n)]
        )
        seen.add(round(info.speed, 3))
    assert len(seen) > 1
    y, info = augment(x, item_rng(3, 2, 0), cfg, length=SR)  # fixed output length
    assert len(y) == SR == info.length_out


@pytest.mark.parametrize("k", [0, 1, 5, -5, 99, 100, -100, 250])
def test_time_shift_exact(k):
    x = np.arange(1, 101, dtype=np.float32)
    y = time_shift(x, k)
    expect = np.array([x[i - k] if 0 <= i - k < 100 else 0.0 for i in range(100)], np.float32)
    assert y.dtype == x.dtype and np.array_equal(y, expect)


# ---------------------------------------------------------------------------- whole chain


def test_output_finite_unclipped_dtype():
    rng = np.random.default_rng(8)
    x, _ = _speech_like(rng)
    x = x.astype(np.float32)
    noise = _pink(rng, 2 * SR).astype(np.float32)
    aug = Augmenter(_all_on(gain_db=(20.0, 20.0)))
    for i in range(6):
        y, info = aug(x, item_rng(0, 0, i), noise)
        assert y.dtype == np.float32 and np.all(np.isfinite(y))
        assert info.gain_db == 20.0 and np.abs(y).max() > 1.0  # beyond full scale, not clipped
    with pytest.raises(ValueError, match="non-finite"):
        aug(np.array([0.0, np.nan]), item_rng(0, 0, 0))


# ---------------------------------------------------------------------------- config


def test_config_from_dict_roundtrip_and_defaults():
    cfg = AugmentConfig()
    assert AugmentConfig.from_dict({}) == cfg
    assert AugmentConfig.from_dict(cfg.to_dict()) == cfg
    c = AugmentConfig.from_dict({"gain_db": [-6, 6], "reverb": False, "noise_prob": 0.25})
    assert c.gain_db == (-6, 6) and c.reverb is False and c.noise_prob == 0.25
    assert dataclasses.replace(c, gain_db=(0.0, 1.0)).gain_db == (0.0, 1.0)


@pytest.mark.parametrize(
    "bad,field",
    [
        ({"gain_db": [6, -6]}, "gain_db"),
        ({"noise_snr_db": [30, 0]}, "noise_snr_db"),
        ({"noise_prob": 1.5}, "noise_prob"),
        ({"reverb_prob": -0.1}, "reverb_prob"),
        ({"speed_prob": float("nan")}, "speed_prob"),
        ({"reverb_rt60_s": [0.0, 0.5]}, "reverb_rt60_s"),
        ({"speed_factor": [-1.0, 1.1]}, "speed_factor"),
        ({"shift_ms": [1, 2, 3]}, "shift_ms"),
        ({"eq_peak_db": [float("inf"), 1]}, "eq_peak_db"),
        ({"eq_lowpass_order": 0}, "eq_lowpass_order"),
        ({"eq_highpass_hz": [50, 5000]}, "eq_highpass_hz"),
        ({"gain": "yes"}, "gain"),
        ({"gian_db": [0, 1]}, "gian_db"),
    ],
)
def test_config_validation_names_field(bad, field):
    with pytest.raises(ValueError, match=field):
        AugmentConfig.from_dict(bad)


def test_augmenter_checks_nyquist():
    with pytest.raises(ValueError, match="eq_peak_hz"):
        Augmenter(AugmentConfig(), sr=8000)
    Augmenter(AugmentConfig(eq=False), sr=8000)
