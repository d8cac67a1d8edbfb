"""Feature augmentation (training/data/speech/spec_augment.py): the vocal-tract warp against its
definition S_α(f) = S(f / α) on the front end's band centres, the masks against theirs, the
hook acting in training mode only, and a CLI run that records and exports it."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from fixtures_speech import tiny_root

from liquid_stream.nn.checkpoint import load_checkpoint, model_from_checkpoint
from liquid_stream.nn.frontend import LogMelConfig, mel_filterbank
from liquid_stream.nn.model import LiquidS4Model
from liquid_stream.training.cli import train_cmd
from liquid_stream.training.data.speech.spec_augment import (
    SpecAugment,
    SpecAugmentConfig,
    install,
    mel_centres,
    warp_bands,
    warp_positions,
)

FE = LogMelConfig()
OFF = {"warp": (1.0, 1.0), "freq_masks": 0, "time_masks": 0}


def test_band_centres_are_the_filterbank_peaks():
    n_fft = 1 << 16  # a fine frequency grid: 0.24 Hz between bins
    fb = mel_filterbank(n_fft, FE.n_mels, FE.sample_rate, FE.fmin, FE.fmax)
    c = mel_centres(FE.n_mels, FE.fmin, FE.fmax)
    peak = fb.argmax(1).double() * FE.sample_rate / n_fft  # a bin next to each centre
    assert (peak - c).abs().max() <= FE.sample_rate / n_fft


def test_warp_reads_the_envelope_at_f_over_alpha():
    M = FE.n_mels
    c = mel_centres(M, FE.fmin, FE.fmax)
    # an envelope linear in Hz between band centres is read back exactly
    g = torch.sin(c / 900.0)  # band values of the envelope at the centres
    z = g.expand(3, 5, M).clone()  # (B, F, M), every frame the same
    alpha = torch.tensor([0.9, 1.0, 1.13], dtype=torch.float64)
    out = warp_bands(z, warp_positions(alpha, c))
    for b, a in enumerate(alpha.tolist()):
        f = c / a
        inside = (f >= c[0]) & (f <= c[-1])
        # piecewise linear in Hz between centres: the definition, by numpy
        want = torch.from_numpy(np.interp(f.numpy(), c.numpy(), g.numpy()))
        assert torch.allclose(out[b, :, inside], want[inside].expand(5, -1), atol=1e-12)
        # outside the band range: the edge band
        lo, hi = f < c[0], f > c[-1]
        assert torch.allclose(out[b, :, lo], g[0].expand(5, int(lo.sum())), atol=0)
        assert torch.allclose(out[b, :, hi], g[-1].expand(5, int(hi.sum())), atol=0)
    assert torch.equal(out[1], z[1])  # α = 1: the identity, exactly
    # α > 1 (shorter vocal tract) moves a formant peak to higher bands
    peak = torch.zeros(1, 1, M, dtype=torch.float64)
    peak[0, 0, 15] = 1.0
    up = warp_bands(peak, warp_positions(torch.tensor([1.1], dtype=torch.float64), c))
    assert int(up[0, 0].argmax()) > 15


def test_masks_zero_whole_bands_and_frames_within_their_widths():
    cfg = SpecAugmentConfig(warp=(1.0, 1.0), freq_masks=2, freq_width=4, time_masks=3, time_width=5)
    aug = SpecAugment(cfg, FE.n_mels, FE.fmin, FE.fmax)
    z = torch.randn(64, 200, FE.n_mels).abs() + 1.0  # no zero of its own
    torch.manual_seed(0)
    out = aug(z)
    zero = out == 0
    assert torch.equal(out[~zero], z[~zero])  # the rest untouched
    bands = zero.all(1)  # (B, M): masked in every frame
    frames = zero.all(2)  # (B, F): masked in every band
    assert torch.equal(zero, bands[:, None, :] | frames[:, :, None])  # nothing else
    assert int(bands.sum(1).max()) <= 2 * 4 and int(frames.sum(1).max()) <= 3 * 5
    assert bands.any() and frames.any()
    widths = {int(r.sum()) for r in bands}
    assert max(widths) >= 5  # two masks can exceed one width
    torch.manual_seed(0)
    assert torch.equal(aug(z), out)  # deterministic for a seed
    off = SpecAugment(SpecAugmentConfig(**OFF), FE.n_mels, FE.fmin, FE.fmax)
    assert torch.equal(off(z), z)


def test_config_checks():
    with pytest.raises(ValueError, match="spec_augment: unknown"):
        SpecAugmentConfig.from_dict({"freq_mask": 1})
    with pytest.raises(ValueError, match="freq_width"):
        SpecAugmentConfig.from_dict({"freq_width": -1})
    with pytest.raises(ValueError, match="warp"):
        SpecAugmentConfig.from_dict({"warp": [1.1, 0.9]})
    cfg = SpecAugmentConfig.from_dict({"warp": [0.8, 1.2], "time_masks": 0})
    assert SpecAugmentConfig.from_dict(cfg.to_dict()) == cfg


def _logmel_model() -> LiquidS4Model:
    torch.manual_seed(1)
    return LiquidS4Model(
        1,
        3,
        d_model=8,
        n_layers=1,
        d_state=4,
        mode="diag",
        frontend={"kind": "logmel"},
        decoder="window",
        decoder_window=5,
    )


def test_hook_acts_in_training_only_and_passes_gradients():
    model = _logmel_model()
    x = torch.randn(2, 3200, 1) * 0.1
    model.eval()
    with torch.no_grad():
        before = model(x)
    install(model, SpecAugmentConfig())
    with torch.no_grad():
        assert torch.equal(model(x), before)  # eval: unchanged (export, streaming, scoring)
    model.train()
    torch.manual_seed(3)
    y = model(x)
    assert not torch.allclose(y, before)
    y.square().sum().backward()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)
    raw = LiquidS4Model(1, 3, d_model=8, n_layers=1, d_state=4, mode="diag")
    with pytest.raises(ValueError, match="log-mel front end"):
        install(raw, SpecAugmentConfig())


def test_cli_run_records_it_changes_training_and_exports(tmp_path):
    from liquid_stream.export.pipeline import export_model, verify_onnx

    root = tiny_root(tmp_path / "sc")
    base = ["speech-stream", "--preset", "cpu", "--max-steps", "2", "--data", str(root)]
    small = [
        "data.subset=sc10",
        "data.length=6000",
        "data.n_train=8",
        "data.n_val=4",
        "data.n_test=4",
        "model.d_model=8",
        "model.n_layers=1",
        "model.decoder_window=5",
        "optim.batch_size=4",
        "train.progress=false",
    ]
    sets = [a for s in small for a in ("--set", s)]
    runs = {}
    for name, extra in (("off", []), ("on", ["--set", "data.spec_augment={}"])):
        out = tmp_path / name
        r = CliRunner().invoke(train_cmd, [*base, "--out", str(out), *sets, *extra])
        assert r.exit_code == 0, r.output + repr(r.exception)
        runs[name] = load_checkpoint(out / "last.pt")
    assert "spec_augment" not in runs["off"]["meta"]
    assert runs["on"]["meta"]["spec_augment"] == SpecAugmentConfig().to_dict()
    w_off, w_on = runs["off"]["model"], runs["on"]["model"]
    assert any(not torch.equal(w_off[k], w_on[k]) for k in w_off)  # it acted on training
    model, meta = model_from_checkpoint(runs["on"])
    path = tmp_path / "kws.onnx"
    export_model(model, path, chunk=160, meta=meta)
    report = verify_onnx(model, path, length=3200, meta=meta)
    assert report.ok and math.isfinite(report.rel), str(report)
    bad = CliRunner().invoke(
        train_cmd,
        [*base, "--out", str(tmp_path / "bad"), *sets, "--set", "data.spec_augment.freq_width=-2"],
    )
    assert bad.exit_code != 0 and "spec_augment" in bad.output
    assert "Traceback" not in bad.output and not (tmp_path / "bad").exists()
