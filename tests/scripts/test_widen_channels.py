"""scripts/widen_channels.py: a checkpoint widened to more input channels.

The widened model must give the old model's outputs on the old channels whatever the new
channels carry (float64, every step), read the channels in the order asked for, and leave
a checkpoint a ``train.init`` of the wider task loads (meta channels / d_input updated,
the output affine kept)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from liquid_stream.nn.checkpoint import load_checkpoint, model_from_checkpoint, save_checkpoint
from liquid_stream.nn.model import LiquidS4Model

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "widen_channels.py"


def _script():
    spec = importlib.util.spec_from_file_location("widen_channels", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _ppg_model() -> tuple[LiquidS4Model, dict]:
    torch.manual_seed(0)
    model = LiquidS4Model(
        d_input=1,
        d_output=1,
        d_model=16,
        n_layers=2,
        d_state=8,
        mode="diag",
        liquid="pb",
        liquid_order=2,
        decoder="window",
        decoder_window=40,
        output_scale=8.0,
        output_shift=21.0,
        frontend={"kind": "scalenorm", "tau_s": 8.0, "hop": 5},
    )
    meta = {
        "task": "bidmc",
        "channels": ["PLETH"],
        "d_input": 1,
        "target": "rr",
        "target_mean": 21.0,
        "target_std": 8.0,
        "sample_rate": 125,
        "input_mean": [0.0],
        "input_std": [1.0],
    }
    return model.eval(), meta


@pytest.mark.slow
def test_widened_model_is_the_old_one_on_the_old_channels(tmp_path):
    model, meta = _ppg_model()
    src = tmp_path / "ppg.pt"
    save_checkpoint(src, model, meta)
    out = tmp_path / "wide.pt"
    res = subprocess.run(
        [sys.executable, str(SCRIPT), str(src), str(out), "--channels", "II,PLETH"],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stderr
    wide, wmeta = model_from_checkpoint(out)
    assert wmeta["channels"] == ["II", "PLETH"] and wmeta["d_input"] == 2
    assert wmeta["target_mean"] == 21.0 and wmeta["input_std"] == [1.0, 1.0]
    assert wide.config["d_input"] == 2 and load_checkpoint(out)["model_config"]["d_input"] == 2
    w = wide.encoder.weight.detach()
    assert torch.equal(w[:, 0], torch.zeros_like(w[:, 0]))  # the new channel: zero
    assert torch.equal(w[:, 1], model.encoder.weight.detach()[:, 0])
    torch.manual_seed(1)
    x = torch.randn(2, 900, 2, dtype=torch.float64) * 30 + 5  # (B, L, [II, PLETH])
    with torch.no_grad():
        y_old = model.to(torch.float64)(x[..., 1:])
        y_new = wide.to(torch.float64)(x)
        y_other = wide(torch.cat([torch.randn_like(x[..., :1]) * 1e3, x[..., 1:]], -1))
    assert torch.allclose(y_new, y_old, rtol=0, atol=1e-5)  # float32 weights, same values
    assert torch.equal(y_new, y_other)  # whatever II carries


def test_channels_must_keep_the_old_ones():
    model, meta = _ppg_model()
    with pytest.raises(SystemExit, match="must name each of"):
        _script().widen(model, meta, ["II"])
    with pytest.raises(SystemExit, match="must name each of"):
        _script().widen(model, meta, ["PLETH", "II", "II"])
