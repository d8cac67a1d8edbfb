"""Blocks, the model, decoders, the optimiser helper and checkpoints."""

from __future__ import annotations

import dataclasses
import inspect

import pytest
import torch

from liquid_stream import LiquidS4, LiquidS4Model, SSMConfig, make_optimizer
from liquid_stream.nn.checkpoint import (
    CheckpointError,
    load_checkpoint,
    model_from_checkpoint,
    save_checkpoint,
    split_records,
)
from liquid_stream.nn.kernel_base import SSM_PARAMETER_NAMES


def model(**kw) -> LiquidS4Model:
    torch.manual_seed(0)
    cfg = dict(d_input=3, d_output=5, d_model=8, n_layers=2, d_state=8, liquid="pb")
    cfg.update(kw)
    return LiquidS4Model(**cfg)


@pytest.mark.parametrize(
    "decoder,shape", [("pool", (2, 5)), ("last", (2, 5)), ("window", (2, 30, 5))]
)
@pytest.mark.parametrize("norm,prenorm", [("batch", True), ("layer", False)])
def test_output_shapes(decoder, shape, norm, prenorm):
    m = model(decoder=decoder, decoder_window=4, norm=norm, prenorm=prenorm)
    assert m(torch.randn(2, 30, 3)).shape == shape


def test_window_decoder_is_causal_window_mean():
    m = model(decoder="window", decoder_window=5).eval().double()
    x = torch.randn(2, 20, 3, dtype=torch.float64)
    h = m.features(x)
    expected = torch.stack([m.head(h[:, max(0, t - 4) : t + 1].mean(1)) for t in range(20)], 1)
    assert torch.allclose(m(x), expected, atol=1e-12)


@pytest.mark.parametrize("decoder", ["window", "last", "pool"])
def test_model_is_causal_in_eval(decoder):
    m = model(decoder=decoder, liquid="kb").eval()
    x = torch.randn(1, 40, 3)
    y = x.clone()
    y[:, 25:] += 5.0
    a, b = m.forward_steps(x), m.forward_steps(y)
    assert torch.allclose(a[:, :25], b[:, :25], atol=1e-6)
    assert (a[:, 25:] - b[:, 25:]).abs().max() > 1e-3


def test_gradients_reach_every_parameter():
    m = model(mode="dplr", liquid="kb", liquid_order=3)
    loss = m(torch.randn(4, 50, 3)).square().mean()
    loss.backward()
    for name, p in m.named_parameters():
        assert p.grad is not None and p.grad.abs().max() > 0, name


def test_optimizer_groups():
    m = model(mode="dplr")
    opt = make_optimizer(m, lr=0.01, weight_decay=0.05)
    groups = {g["name"]: g for g in opt.param_groups}
    assert groups["ssm"]["lr"] == 1e-3 and groups["ssm"]["weight_decay"] == 0.0
    assert groups["default"]["lr"] == 0.01 and groups["default"]["weight_decay"] == 0.05
    ssm_ids = {id(p) for p in groups["ssm"]["params"]}
    expected = {
        id(p)
        for blk in m.blocks
        for n, p in blk.ssm.kernel.named_parameters()
        if n in SSM_PARAMETER_NAMES
    }
    assert ssm_ids == expected and len(expected) == 2 * 5  # log_dt, Λ (2), B, P per layer
    all_ids = [id(p) for g in opt.param_groups for p in g["params"]]
    assert sorted(all_ids) == sorted(id(p) for p in m.parameters())  # each exactly once


def test_rate_changes_the_model():
    m = model().eval()
    x = torch.randn(1, 64, 3)
    assert (m(x, rate=2.0) - m(x)).abs().max() > 1e-4


def test_bad_input_and_config():
    m = model()
    with pytest.raises(ValueError, match=r"\(B, L, 3\)"):
        m(torch.randn(2, 10, 4))
    with pytest.raises(ValueError, match="NaN"):
        m(torch.full((1, 10, 3), float("nan")))
    with pytest.raises(ValueError, match="decoder"):
        model(decoder="mean")
    with pytest.raises(ValueError, match="norm"):
        model(norm="group")


def test_checkpoint_roundtrip_and_errors(tmp_path):
    m = model(decoder="window", decoder_window=3).eval()
    m.blocks[0].norm.norm.running_mean.add_(0.5)
    path = tmp_path / "m.pt"
    save_checkpoint(path, m, meta={"labels": ["a", "b"], "sample_rate": 16000})
    assert not list(tmp_path.glob(".*.tmp"))  # atomic write left no temporary file
    raw = torch.load(path, weights_only=True)
    assert raw["format"] == "liquid-stream/checkpoint"
    m2, meta = model_from_checkpoint(path)
    x = torch.randn(2, 20, 3)
    assert torch.equal(m(x), m2(x)) and meta["labels"] == ["a", "b"]
    with pytest.raises(CheckpointError, match="lists no test recordings"):
        split_records(path)  # no record split in its meta: nothing to call held out
    for bad in (b"", b"not a checkpoint", path.read_bytes()[:200]):
        p = tmp_path / "bad.pt"
        p.write_bytes(bad)
        with pytest.raises(CheckpointError):
            load_checkpoint(p)
    with pytest.raises(CheckpointError, match="not found"):
        load_checkpoint(tmp_path / "nope.pt")
    torch.save({"something": torch.zeros(1)}, tmp_path / "other.pt")
    with pytest.raises(CheckpointError, match="not a liquid-stream checkpoint"):
        load_checkpoint(tmp_path / "other.pt")


def test_mixed_precision_autocast_runs_ssm_in_float32():
    """Under bf16 autocast (CPU here; bf16/fp16 on CUDA) the SSM and its FFTs run in fp32."""
    m = model(decoder="window", decoder_window=4).eval()
    x = torch.randn(2, 64, 3)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = m(x)
    ref = m(x)
    assert torch.isfinite(y).all()
    assert (y.float() - ref).abs().max() < 0.1 * ref.abs().max()


@pytest.mark.parametrize("decoder", ["pool", "last", "window"])
def test_output_affine_in_forward_streaming_and_checkpoint(decoder, tmp_path):
    """y = scale · head(·) + shift: the same in forward, the step form (folded into the
    head) and a model rebuilt from a checkpoint; the affine is config, not a parameter."""
    m = (
        model(
            decoder=decoder,
            decoder_window=6,
            d_output=2,
            output_scale=[15.0, 2.0],
            output_shift=[75.0, -3.0],
        )
        .double()
        .eval()
    )
    plain = model(decoder=decoder, decoder_window=6, d_output=2).double().eval()
    x = torch.randn(2, 40, 3, dtype=torch.float64)
    scale = torch.tensor([15.0, 2.0], dtype=torch.float64)
    shift = torch.tensor([75.0, -3.0], dtype=torch.float64)
    assert torch.allclose(m(x), plain(x) * scale + shift, atol=1e-12)
    sm = m.streaming(dtype=torch.float64)
    state = sm.init_state(2)
    y1, state = sm(x[:, :13], state)
    y2, _ = sm(x[:, 13:], state)
    assert torch.allclose(torch.cat([y1, y2], 1), m.forward_steps(x), atol=1e-10)
    names = {n for n, _ in m.named_parameters()}
    assert not any("output_" in n for n in names) and "output_scale" not in m.state_dict()
    save_checkpoint(tmp_path / "c.pt", m)
    m2, _ = model_from_checkpoint(tmp_path / "c.pt")
    assert torch.allclose(m2.double().eval()(x), m(x), atol=1e-12)
    with pytest.raises(ValueError, match="output_scale"):
        model(output_scale=0.0)


def test_pair_decoder_is_the_retrieval_head_on_shared_encodings(tmp_path):
    """``pair``: both sequences through the same blocks, mean-pooled to a, b; the head on
    [a, b, a·b, a − b]. Checked against that composition written out, in eval mode."""
    m = model(decoder="pair", bidirectional=True).eval().double()
    x = torch.randn(3, 2, 25, 3, dtype=torch.float64)
    a, b = m.features(x[:, 0]).mean(1), m.features(x[:, 1]).mean(1)
    z = torch.nn.functional.gelu(m.pair_mlp[0](torch.cat([a, b, a * b, a - b], -1)))
    assert torch.allclose(m(x), m.head(z), atol=1e-12)
    assert not torch.allclose(m(x.flip(1)), m(x), atol=1e-6)  # [a − b] is ordered
    m.train().float()
    m(x.float()).square().sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in m.parameters())
    with pytest.raises(ValueError, match=r"\(B, 2, L, d_input\)"):
        m(torch.randn(3, 25, 3))
    with pytest.raises(ValueError, match="no per-step"):
        m(x.float(), steps=True)
    causal = model(decoder="pair")
    with pytest.raises(ValueError, match="cannot be streamed"):
        causal.streaming()
    from liquid_stream.export.pipeline import export_model

    with pytest.raises(ValueError, match="cannot be streamed"):  # export needs the step form
        export_model(causal, tmp_path / "pair.onnx")
    path = tmp_path / "pair.pt"
    save_checkpoint(path, m)
    m2, _ = model_from_checkpoint(path)
    assert torch.allclose(m2(x.float()), m.eval()(x.float()), atol=1e-6)


@pytest.mark.parametrize("norm", ["batch", "layer"])
def test_checkpointed_blocks_change_memory_not_results(norm):
    """Activation checkpointing: same loss, same gradients, same BatchNorm running stats
    (the backward recomputation must not update them a second time), same dropout masks."""
    x, y = torch.randn(4, 40, 3), torch.randint(0, 5, (4,))
    results = []
    for ckpt in (False, True):
        m = model(norm=norm, dropout=0.3, n_layers=3)
        m.checkpoint_blocks = ckpt
        torch.manual_seed(1)
        loss = torch.nn.functional.cross_entropy(m(x), y)
        loss.backward()
        grads = {k: p.grad.clone() for k, p in m.named_parameters()}
        results.append((loss.detach(), grads, {k: v.clone() for k, v in m.state_dict().items()}))
    (l0, g0, s0), (l1, g1, s1) = results
    assert torch.equal(l0, l1)
    for k in g0:
        assert torch.allclose(g0[k], g1[k], rtol=1e-5, atol=1e-7), k
    for k in s0:  # parameters and buffers (running_mean / running_var / num_batches_tracked)
        assert torch.equal(s0[k], s1[k]), k
    assert norm == "layer" or any("running_var" in k for k in s0)


@pytest.mark.parametrize("cls", [LiquidS4Model, LiquidS4])
def test_signature_lists_every_ssm_field(cls):
    """The published signature (training/config.py reads the model's keys and defaults
    from it) has every SSMConfig field, with SSMConfig's default, in its order."""
    params = inspect.signature(cls.__init__).parameters
    fields = dataclasses.fields(SSMConfig)
    assert [f.name for f in fields] == [n for n in params if n in {f.name for f in fields}]
    for f in fields:
        assert params[f.name].default == f.default, f.name


def test_model_blocks_take_the_flat_keywords_as_one_config():
    flat = dict(d_state=6, mode="diag", liquid="kb", liquid_order=3, init="inv")
    m = model(**flat)
    assert {b.ssm.config for b in m.blocks} == {SSMConfig(**flat)}
    assert LiquidS4Model(**m.config).config == m.config
