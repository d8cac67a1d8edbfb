"""Step (streaming) form vs the convolutional forward: docs/design.md §5 in float64, every
chunking."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_layer import make, randomize

from liquid_stream import LiquidS4, LiquidS4Model
from liquid_stream.nn.layer import LiquidS4Step


def chunk_sizes(kind, L: int, seed: int = 0) -> list[int]:
    if kind == "mix":
        rng = np.random.default_rng(seed)
        out = []
        while sum(out) < L:
            out.append(int(rng.integers(1, 200)))
        return out
    return [kind] * (-(-L // kind))


def stream(step, x: torch.Tensor, sizes: list[int]) -> torch.Tensor:
    state, ys, pos = step.init_state(x.shape[0]), [], 0
    for c in sizes:
        y, state = step(x[:, pos : pos + c], state)
        ys.append(y)
        pos += c
    return torch.cat(ys, 1)


def rel(a, b):
    return ((a - b).abs().max() / b.abs().max()).item()


@pytest.mark.slow
@pytest.mark.parametrize("mode,N", [("diag", 8), ("dplr", 7), ("dplr", 16)])
@pytest.mark.parametrize("liquid,P,Lt", [(None, 2, 1), ("pb", 2, 1), ("pb", 3, 3), ("kb", 4, 1)])
@pytest.mark.parametrize("sizes", [1, 7, 160, "mix"])
def test_layer_step_equals_forward_float64(mode, N, liquid, P, Lt, sizes):
    layer = make(mode, liquid, P, Lt, N=N)
    L = 200 if sizes == 1 else 700
    u = torch.randn(2, L, 3, dtype=torch.float64)
    step = LiquidS4Step(layer, sub_block=8, max_chunk=64, dtype=torch.float64)
    assert rel(stream(step, u, chunk_sizes(sizes, L)), layer(u)) < 1e-9


@pytest.mark.parametrize("liquid", [None, "kb", "pb"])
def test_dplr_dense_fallback_is_exact(liquid):
    """cond_max = 0 forces the dense real form; HiPPO N=64 at init needs it anyway."""
    layer = make("dplr", liquid, 3, 2, N=8)
    u = torch.randn(2, 300, 3, dtype=torch.float64)
    step = LiquidS4Step(layer, sub_block=4, max_chunk=32, dtype=torch.float64, cond_max=0.0)
    assert step.transition == "dense"
    assert rel(stream(step, u, chunk_sizes("mix", 300)), layer(u)) < 1e-9
    hippo = LiquidS4(3, d_state=64, mode="dplr", liquid=liquid, liquid_order=3).double()
    step = LiquidS4Step(hippo, dtype=torch.float64)
    assert step.transition == "dense"  # its eigenvectors are ill-conditioned (cond ~1e9)
    assert rel(stream(step, u, chunk_sizes(7, 300)), hippo(u)) < 1e-9


def test_rate_streaming_matches_rate_forward():
    layer = make("dplr", "kb", 2)
    u = torch.randn(1, 120, 3, dtype=torch.float64)
    step = LiquidS4Step(layer, dtype=torch.float64, rate=2.0)
    assert rel(stream(step, u, chunk_sizes(7, 120)), layer(u, rate=2.0)) < 1e-9


def small_model(mode="dplr", norm="batch", decoder="window", liquid="pb", prenorm=True, seed=0):
    torch.manual_seed(seed)
    m = LiquidS4Model(
        2,
        5,
        d_model=8,
        n_layers=2,
        d_state=7,
        mode=mode,
        liquid=liquid,
        liquid_order=3,
        liquid_len=2,
        norm=norm,
        prenorm=prenorm,
        decoder=decoder,
        decoder_window=25,
        dt_min=0.01,
        dt_max=0.2,
    )
    for block in m.blocks:
        randomize(block.ssm, seed)
    m.train()
    with torch.no_grad():
        m(torch.randn(4, 64, 2))  # non-trivial BatchNorm running statistics
    return m.eval()


MODEL_CASES = [
    ("dplr", "batch", "window", "pb", True),
    ("diag", "layer", "pool", "kb", True),
    ("dplr", "layer", "last", None, False),
    ("diag", "batch", "window", "kb", False),
    ("diag", "layer", "window", "ltc", True),
    ("diag", "batch", "pool", "ltc", False),
]


@pytest.mark.slow
@pytest.mark.parametrize("mode,norm,decoder,liquid,prenorm", MODEL_CASES)
@pytest.mark.parametrize("sizes", [1, 7, 160, "mix"])
def test_model_step_equals_forward_float64(mode, norm, decoder, liquid, prenorm, sizes):
    m = small_model(mode, norm, decoder, liquid, prenorm).double()
    L = 150 if sizes == 1 else 600
    x = torch.randn(2, L, 2, dtype=torch.float64)
    sm = m.streaming(sub_block=4, max_chunk=64, dtype=torch.float64)
    assert rel(stream(sm, x, chunk_sizes(sizes, L)), m.forward_steps(x)) < 1e-9
    if decoder != "window":  # the model's own output is the last per-step output
        assert rel(stream(sm, x, [L])[:, -1], m(x)) < 1e-9


def test_state_carry_and_reset():
    m = small_model().double()
    sm = m.streaming(dtype=torch.float64)
    a, b = torch.randn(1, 50, 2, dtype=torch.float64), torch.randn(1, 70, 2, dtype=torch.float64)
    y_ab, _ = sm(torch.cat([a, b], 1), sm.init_state(1))
    y_a, st = sm(a, sm.init_state(1))
    y_b, _ = sm(b, st)
    assert rel(torch.cat([y_a, y_b], 1), y_ab) < 1e-12
    y_b_fresh, _ = sm(b, sm.init_state(1))
    assert rel(y_b_fresh, m.forward_steps(b)) < 1e-9


@pytest.mark.parametrize("mode,liquid", [("dplr", "pb"), ("diag", "ltc")])
def test_float32_long_stream_within_contract(mode, liquid):
    m = small_model(mode, "batch", "window", liquid)
    x = torch.randn(1, 16000, 2)
    sm = m.streaming()
    y = stream(sm, x, chunk_sizes(160, 16000))
    ref = m.forward_steps(x)
    assert (y - ref).abs().max() <= 1e-4 * ref.abs().max()


def test_bidirectional_cannot_stream():
    m = LiquidS4Model(2, 3, d_model=4, n_layers=1, d_state=4, bidirectional=True)
    assert not m.is_causal
    with pytest.raises(ValueError, match="bidirectional"):
        m.streaming()
    with pytest.raises(ValueError, match="bidirectional"):
        LiquidS4Step(m.blocks[0].ssm)
