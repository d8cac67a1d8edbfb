"""The pulse-shape augmentation (training/data/vitals/pulse_eq.py): the filter is the H(f) of its
docstring (gain and phase at every knot, real at DC, back to 0 dB far above the band), a
sinusoid comes out scaled and shifted by exactly H at its frequency, a periodic pulse train
stays periodic with its period (the beats do not move, so the rate label holds) while its
shape changes, and the crops' augmentation is a function of (seed, epoch, index) that
leaves the labels and the channel-off draws alone. Real WFDB files
(tests/fixtures_vitals.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from fixtures_vitals import write_record

from liquid_stream.training.config import load_config
from liquid_stream.training.data.vitals.bidmc_crops import CropDataset, load_wfdb_crops
from liquid_stream.training.data.vitals.pulse_eq import (
    F_HI,
    F_LO,
    GAIN_DB,
    KNOTS,
    draw,
    equalise,
    pulse_eq,
    response,
)

FS, W = 125.0, 4000


def test_response_is_the_knots_gain_and_phase_real_at_dc_and_flat_far_above():
    g, ph = draw(np.random.default_rng(0))
    knots = np.geomspace(F_LO, F_HI, KNOTS)
    h = response(knots, g, ph)
    np.testing.assert_allclose(20 * np.log10(np.abs(h)), g, atol=1e-9)
    np.testing.assert_allclose(np.angle(h), ph, atol=1e-9)
    assert response(np.array([0.0]), g, ph)[0].imag == 0  # a real filter at DC
    far = response(np.array([100 * F_HI]), g, ph)[0]  # gain g_K · F_HI / f in dB
    assert abs(20 * np.log10(abs(far)) - g[-1] / 100) < 1e-9
    # between two knots, gain (dB) and phase are linear in log f
    mid = response(np.array([np.sqrt(knots[1] * knots[2])]), g, ph)[0]
    assert abs(20 * np.log10(abs(mid)) - (g[1] + g[2]) / 2) < 1e-9
    assert abs(np.angle(mid) - (ph[1] + ph[2]) / 2) < 1e-9


def test_a_sinusoid_is_scaled_and_shifted_by_h_at_its_frequency():
    rng = np.random.default_rng(1)
    g, ph = draw(rng)
    n = int(120 * FS)
    t = np.arange(n) / FS
    for f in (0.8, 1.7, 3.3, 7.1):
        y = equalise(np.sin(2 * np.pi * f * t), FS, g, ph)
        h = response(np.array([f]), g, ph)[0]
        want = abs(h) * np.sin(2 * np.pi * f * t + np.angle(h))
        mid = slice(int(20 * FS), n - int(20 * FS))  # away from the mirrored ends
        assert np.abs(y[mid] - want[mid]).max() < 0.02 * abs(h)


def test_a_pulse_train_stays_periodic_with_its_period_and_changes_shape():
    period = 0.75  # 80 bpm
    n = int(96 * FS)
    t = np.arange(n) / FS
    phase = (t % period) / period
    pulse = np.exp(-(((phase - 0.2) / 0.06) ** 2)) + 0.5 * np.exp(-(((phase - 0.55) / 0.1) ** 2))
    lag = int(round(period * FS * 4))  # 4 periods = 375 samples exactly
    assert abs(period * FS * 4 - lag) < 1e-9
    mid = slice(int(16 * FS), n - int(16 * FS) - lag)
    for seed in range(5):
        y = equalise(pulse, FS, *draw(np.random.default_rng(seed)))
        span = y[mid].max() - y[mid].min()
        shifted = y[int(16 * FS) + lag : n - int(16 * FS)]
        assert np.abs(y[mid] - shifted).max() < 1e-3 * span  # the same beats, 4 periods on
        a = (pulse[mid] - pulse[mid].mean()) / pulse[mid].std()
        b = (y[mid] - y[mid].mean()) / y[mid].std()
        assert np.abs(a - b).max() > 0.2  # another shape (not just a gain)


def test_probability_zero_is_the_identity_and_the_input_is_not_modified():
    x = np.random.default_rng(2).standard_normal((2000, 2)).astype(np.float32)
    keep = x.copy()
    assert pulse_eq(x, np.random.default_rng(0), 0.0, FS) is x
    y = pulse_eq(x, np.random.default_rng(0), 1.0, FS)
    np.testing.assert_array_equal(x, keep)
    assert y.dtype == np.float32 and y.shape == x.shape and np.isfinite(y).all()
    assert not np.allclose(y[:, 0], x[:, 0]) and not np.allclose(y[:, 1], x[:, 1])


def test_crops_reshaped_per_seed_and_epoch_with_labels_and_channel_off_draws_unchanged(
    tmp_path,
):
    write_record(tmp_path, "bidmc03", seconds=150, seed=5)
    crops = load_wfdb_crops(
        tmp_path,
        "hr",
        ["bidmc03"],
        ["PLETH", "II"],
        crop=100 * int(FS),
        hop=25 * int(FS),
        window=W,
        sample_rate=FS,
    )
    mean, std = [0.5, -0.2], [2.0, 0.5]
    plain = CropDataset(crops, mean, std)
    eq = CropDataset(crops, mean, std, seed=7, sample_rate=FS, pulse_eq=1.0)
    for epoch in range(3):
        eq.set_epoch(epoch)
        for i in range(len(crops)):
            x, y = eq[i]
            torch.testing.assert_close(y, plain[i][1], equal_nan=True)  # labels unchanged
            assert torch.equal(x, eq[i][0])  # a function of (seed, epoch, index)
            assert (x != plain[i][0]).any(dim=0).all()  # every channel re-shaped
    eq.set_epoch(0)
    a = eq[0][0]
    eq.set_epoch(1)
    assert not torch.equal(a, eq[0][0])  # another filter every epoch
    # turning pulse_eq on moves no channel-off stretch: the same channel, the same samples
    off = CropDataset(crops, mean, std, channel_off=1.0, seed=7, sample_rate=FS)
    both = CropDataset(crops, mean, std, channel_off=1.0, seed=7, sample_rate=FS, pulse_eq=1.0)
    for i in range(len(crops)):
        x_off, x_both = off[i][0], both[i][0]
        changed = (x_off != plain[i][0]).any(dim=0).tolist()
        c = changed.index(True)
        diff = torch.nonzero(x_off[:, c] != plain[i][0][:, c]).flatten()
        a, b = int(diff[0]), int(diff[-1]) + 1  # the flat stretch without the equaliser
        assert b - a > 4 * FS and (x_both[a:b, c] == x_both[a, c]).all()  # flat with it too
        assert not (x_both[:, 1 - c] == x_both[a, 1 - c]).all()  # and the other channel not


def test_pulse_eq_without_crops_is_a_one_line_error(tmp_path):
    """The equaliser acts on the train crops only: on windows it would silently do nothing."""
    from liquid_stream.training.tasks import build_bidmc

    for i in range(1, 4):
        write_record(tmp_path, f"bidmc{i:02d}", seconds=60, seed=i)
    over = [f"data.root={tmp_path}", "data.pulse_eq=0.5"]
    with pytest.raises(ValueError, match="data.pulse_eq re-shapes the train crops"):
        build_bidmc(load_config("bidmc", "ppg", over))
    sets = build_bidmc(load_config("bidmc", "ppg", [*over, "data.crop_s=40"]))
    assert sets[0].pulse_eq == 0.5 and sets[1].pulse_eq == 0.0  # train crops only
    assert sets[0].pulse_eq_db == GAIN_DB  # null: the module's bound
    sets = build_bidmc(load_config("bidmc", "ppg", [*over, "data.crop_s=40", "data.pulse_eq_db=4"]))
    assert sets[0].pulse_eq_db == 4.0


def test_the_gain_bound_is_the_callers():
    """``gain_db`` bounds every knot's gain; 0 dB leaves each harmonic's amplitude alone
    (a pure phase equaliser: same power at every frequency of a sinusoid in the band)."""
    for bound in (0.0, 3.0, GAIN_DB):
        g = np.concatenate([draw(np.random.default_rng(s), bound)[0] for s in range(50)])
        assert np.abs(g).max() <= bound and np.abs(g).max() >= 0.9 * bound
    t = np.arange(int(60 * FS)) / FS
    for f0 in (1.0, 2.5, 6.0):
        x = np.sin(2 * np.pi * f0 * t)[:, None]
        for s in range(5):
            y = pulse_eq(x, np.random.default_rng(s), 1.0, FS, gain_db=0.0)[:, 0]
            mid = slice(len(t) // 4, 3 * len(t) // 4)  # away from the mirror-padded ends
            assert np.std(y[mid]) == pytest.approx(np.std(x[mid, 0]), rel=1e-3)
