"""scripts/checkpoint_from_onnx.py: a model's weights recovered from its exported graph.

The round trip model → ONNX → recovered model must give back the same discrete system
(Ā, B̄, C, D of every layer, to float32 rounding), the same linear weights (exactly) and
the same outputs; a re-export of the recovered checkpoint carries the new graph's own
metadata, not the old graph's copies kept in the recovered meta."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

from liquid_stream.export.pipeline import export_checkpoint
from liquid_stream.nn.checkpoint import model_from_checkpoint, save_checkpoint
from liquid_stream.nn.model import LiquidS4Model

ROOT = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location(
        "checkpoint_from_onnx", ROOT / "scripts" / "checkpoint_from_onnx.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _model(seed: int, **kw) -> LiquidS4Model:
    """A small S4D PB model with every weight random (no two tables alike: the exporter
    stores equal tables once)."""
    torch.manual_seed(seed)
    args = dict(
        d_model=16,
        n_layers=2,
        d_state=8,
        mode="diag",
        liquid="pb",
        liquid_order=2,
        norm="layer",
        prenorm=True,
        decoder="window",
    )
    model = LiquidS4Model(**(args | kw))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("ssm.D"):
                p.add_(0.3 * torch.randn_like(p))
    return model.eval()


def _spotter(seed: int = 0) -> LiquidS4Model:
    """A log-mel spotter."""
    return _model(
        seed, d_input=1, d_output=3, decoder_window=5, frontend={"kind": "logmel", "n_mels": 12}
    )


def _vital(seed: int = 3) -> LiquidS4Model:
    """A scale-norm vital-sign model with a folded output scale and shift."""
    return _model(
        seed,
        d_input=2,
        d_output=1,
        decoder_window=50,
        frontend={"kind": "scalenorm", "tau_s": 8.0, "hop": 5},
        output_scale=30.0,
        output_shift=100.0,
    )


def _assert_same_system(model: LiquidS4Model, rec: LiquidS4Model, rtol: float) -> None:
    """Every layer's discrete system (Ā, B̄, C, D, pb_coef) equal within ``rtol``."""
    for a, b in zip(model.blocks, rec.blocks, strict=True):
        ma, mb = a.ssm.ssm_matrices(), b.ssm.ssm_matrices()
        for key in ("A_bar", "B_bar", "C", "D", "pb_coef"):
            x, y = ma[key].detach(), mb[key].detach()
            assert (x - y).abs().max() <= rtol * x.abs().max(), key


META = {
    "task": "speech-stream",
    "labels": ["a", "b", "_silence_"],
    "sample_rate": 16000,
    "silence_class": 2,
    "d_input": 1,
    "d_output": 3,
    "input_mean": [0.0],
    "input_std": [1.0],
}


def _export(model, tmp_path: Path, name: str, chunk: int, sub_block: int = 1) -> Path:
    ckpt = tmp_path / f"{name}.pt"
    save_checkpoint(ckpt, model, META)
    out = tmp_path / f"{name}.onnx"
    export_checkpoint(ckpt, out, chunk=chunk, sub_block=sub_block)
    return out


def test_recovered_model_is_the_exported_one(tmp_path):
    script = _script()
    model = _spotter()
    graph = _export(model, tmp_path, "orig", chunk=2400)
    rec, meta = script.recover(graph)
    _assert_same_system(model, rec, 2e-6)
    for a, b in zip(model.blocks, rec.blocks, strict=True):
        assert torch.equal(a.out.weight, b.out.weight) and torch.equal(a.out.bias, b.out.bias)
        assert torch.equal(a.norm.norm.weight, b.norm.norm.weight)
    assert torch.equal(model.head.weight, rec.head.weight)
    assert torch.equal(model.encoder.weight, rec.encoder.weight)
    x = 0.1 * torch.randn(2, 8000, 1)
    with torch.no_grad():
        ya, yb = model(x), rec(x)
    assert (ya - yb).abs().max() <= 1e-5 * ya.abs().max()
    assert script.compare(rec, graph, meta) <= 1e-5  # and against the graph itself
    assert meta["labels"] == META["labels"] and meta["max_chunk"] == 2400


def test_reexport_takes_the_new_graphs_metadata(tmp_path):
    script = _script()
    graph = _export(_spotter(1), tmp_path, "orig", chunk=2400)
    rec, meta = script.recover(graph)
    ckpt = tmp_path / "rec.pt"
    save_checkpoint(ckpt, rec, meta)  # meta holds the old graph's max_chunk, state_spec
    out = tmp_path / "new.onnx"
    info, report = export_checkpoint(ckpt, out, chunk=1600, sub_block=1, verify=True)
    props = {p.key: p.value for p in onnx.load(str(out)).metadata_props}
    assert report.ok
    assert int(props["max_chunk"]) == info["max_chunk"] == 1600
    assert props["labels"] == json.dumps(META["labels"])
    # the two graphs compute one model
    from liquid_stream.runtime.onnx_streamer import OnnxStreamer

    x = (0.1 * np.random.default_rng(0).standard_normal(4800)).astype(np.float32)
    ya = OnnxStreamer(str(graph)).process(x)
    yb = OnnxStreamer(str(out)).process(x)
    assert np.abs(ya - yb).max() <= 1e-5 * np.abs(ya).max()


VITAL_META = {
    "task": "bidmc",
    "target": "hr",
    "units": "bpm",
    "channels": ["PLETH", "II"],
    "sample_rate": 125,
    "window": 250,
    "labels": ["hr"],
    "d_input": 2,
    "d_output": 1,
    "input_mean": [0.0, 0.0],
    "input_std": [1.0, 1.0],
    "target_mean": 0.0,
    "target_std": 1.0,
}


@pytest.mark.parametrize("sub_block", [1, 4])
def test_vital_graph_of_any_sub_block_recovers(tmp_path, sub_block):
    """Sub-blocks of 4 (G and [K_locᵀ; Eᵀ] stored transposed, a table of powers) and 1,
    a scale-norm front end, and the head's folded output scale and shift."""
    script = _script()
    model = _vital()
    ckpt = tmp_path / "v.pt"
    save_checkpoint(ckpt, model, VITAL_META)
    graph = tmp_path / "v.onnx"
    export_checkpoint(ckpt, graph, chunk=125, sub_block=sub_block)
    rec, meta = script.recover(graph)
    _assert_same_system(model, rec, 2e-5)
    assert torch.allclose(model.head.weight, rec.head.weight, rtol=1e-6, atol=1e-7)
    assert torch.allclose(model.head.bias, rec.head.bias, rtol=1e-5, atol=1e-5)
    assert script.compare(rec, graph, meta) <= 1e-4


@pytest.mark.parametrize(
    "name",
    [
        "kws-sc10",
        "vitals-ppg-hr",
        "vitals-ppg-rr",
        "vitals-ppg-ecg-hr",
        "vitals-ppg-ecg-rr",
        "vitals-oximeter-spo2",
    ],
)
@pytest.mark.slow
def test_every_shipped_graph_recovers(name):
    """The shipped graphs themselves (several exporter versions): each recovered model
    streams as its graph within the exactness contract; an ensemble graph's members are
    recovered one by one, and their mean streams as the graph."""
    from liquid_stream.models import shipped

    script = _script()
    k = script.members(shipped(name))
    if not k:
        rec, meta = script.recover(shipped(name))
        assert script.compare(rec, shipped(name), meta) <= 1e-4
        return
    with pytest.raises(ValueError, match=f"an ensemble of {k} members"):
        script.recover(shipped(name))
    got = [script.recover(shipped(name), m) for m in range(k)]
    assert "ensemble" not in got[0][1] and "state_spec" not in got[0][1]
    assert script.compare_members([m for m, _ in got], shipped(name), got[0][1]) <= 1e-4


def test_unsupported_graph_is_refused(tmp_path):
    script = _script()
    torch.manual_seed(0)
    kb = LiquidS4Model(
        d_input=1,
        d_output=3,
        d_model=8,
        n_layers=1,
        d_state=4,
        mode="diag",
        liquid="kb",
        liquid_order=2,
        norm="layer",
        decoder="window",
        decoder_window=5,
    )
    ckpt = tmp_path / "kb.pt"
    save_checkpoint(ckpt, kb.eval(), META)
    export_checkpoint(ckpt, tmp_path / "kb.onnx", chunk=160)
    with pytest.raises(ValueError, match="only PB"):
        script.recover(tmp_path / "kb.onnx")
    graph = _export(_spotter(2), tmp_path, "s8", chunk=1600, sub_block=8)  # S = 2M: ambiguous
    with pytest.raises(ValueError, match="sub-block 8 with 8 states"):
        script.recover(graph)
    assert model_from_checkpoint(tmp_path / "s8.pt")[0] is not None  # the checkpoint intact
