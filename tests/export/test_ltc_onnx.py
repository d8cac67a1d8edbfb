"""The LTC layer's ONNX graph (export/emit_ltc.py ``ltc_layer``: a blocked scan with Q-step
sub-blocks, an ONNX Scan across them and one over the last sub-block's steps) against the
float64 recurrence, for every sub-block size and chunking that exercises a different path:
T < Q, T not a multiple of Q, one sub-block, many, a chunk of exactly the graph's
``max_chunk``, two streams in a batch."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_layer import randomize

from liquid_stream import LiquidS4Model, OnnxStreamer
from liquid_stream.export import to_onnx
from liquid_stream.export.pipeline import export_model


def ltc_model(seed=0) -> LiquidS4Model:
    torch.manual_seed(seed)
    m = LiquidS4Model(
        2,
        3,
        d_model=8,
        n_layers=2,
        d_state=8,
        mode="diag",
        liquid="ltc",
        norm="layer",
        decoder="window",
        decoder_window=20,
        dt_min=0.005,
        dt_max=0.3,
    )
    for block in m.blocks:
        randomize(block.ssm, seed)
    return m.eval()


def stream(path, x: np.ndarray, sizes: list[int]) -> tuple[np.ndarray, dict]:
    s = OnnxStreamer(path, batch=x.shape[0], threads=1)
    out, pos = [], 0
    for c in sizes:
        out.append(s.process(x[:, pos : pos + c]))
        pos += c
    return np.concatenate(out, 1), s.state


@pytest.mark.slow
@pytest.mark.parametrize("Q", [1, 2, 3, 8, 16])
@pytest.mark.parametrize("sizes", ["small", "mixed", "max"])
def test_blocked_scan_equals_float64_recurrence(tmp_path, monkeypatch, Q, sizes):
    """float32 graph within docs/design.md §5's contract (1e-4·max|y|) of the float64 model
    (whose LTC scan tests/nn/test_ltc.py checks against the literal loop to 1e-9), outputs and
    final states, for any chunking."""
    monkeypatch.setattr(to_onnx, "default_ltc_sub_block", lambda steps: Q)
    m = ltc_model()
    info = export_model(m, tmp_path / "m.onnx", chunk=40)
    assert info["ltc_sub_block"] == Q
    mc = info["max_chunk"]
    plan = {
        "small": [1, Q - 1 or 1, Q, Q + 1, 7, 2 * Q + 3],  # inside and across one sub-block
        "mixed": [37, 5, mc, 1, 13, mc - 1, 40],
        "max": [mc] * 4,  # every call as long as the graph takes: n_b at its most
    }[sizes]
    L = sum(plan)
    rng = np.random.default_rng(Q)
    x = rng.standard_normal((2, L, 2)).astype(np.float32)
    x[1] *= 3.0  # the second stream larger: tanh(u) near saturation
    y, state = stream(tmp_path / "m.onnx", x, plan)
    m64 = ltc_model().double()
    ref = m64.forward_steps(torch.from_numpy(x).double()).detach().numpy()
    assert np.abs(y - ref).max() <= 1e-4 * np.abs(ref).max()
    # the carried LTC states equal the float64 recurrence's last states
    sm = m64.streaming(dtype=torch.float64)
    _, st = sm.step(torch.from_numpy(x).double(), sm.init_state(2))
    for i in range(2):
        got = state[f"state.block{i}.ltc.x"]  # (B, 2, M, H)
        want = st[f"block{i}.ltc.x"].detach().numpy().transpose(0, 3, 2, 1)
        assert np.abs(got - want).max() <= 1e-4 * np.abs(want).max()


@pytest.mark.slow
def test_extreme_inputs_keep_the_state_bounded(tmp_path):
    """|u| up to 1e4 (tanh saturated, b huge): outputs and states finite and within the
    contract of the float64 model — the blocked scan multiplies numbers of modulus < 1 only."""
    m = ltc_model(1)
    export_model(m, tmp_path / "m.onnx", chunk=160)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 800, 2)) * 10.0 ** rng.integers(-3, 5, (1, 800, 1))
    x = x.astype(np.float32)
    y, state = stream(tmp_path / "m.onnx", x, [160] * 5)
    assert all(np.isfinite(v).all() for v in state.values())
    ref = ltc_model(1).double().forward_steps(torch.from_numpy(x).double()).detach().numpy()
    assert np.abs(y - ref).max() <= 1e-4 * np.abs(ref).max()


def test_a_mode_without_input_streams_exactly(tmp_path):
    """B̄ = 0 for some modes (B = 0): the graph's coordinate z = x / B̄ takes B̄ = 1e-20 there;
    outputs and carried states stay within the contract of the float64 model, finite, and
    a state begun in torch with those modes non-zero carries through."""
    m = ltc_model(2)
    with torch.no_grad():
        m.blocks[0].ssm.kernel.B[:, 0] = 0.0  # mode 0 of every channel: no input
        m.blocks[1].ssm.kernel.B[3] = 0.0  # channel 3: no input to any mode
    export_model(m, tmp_path / "m.onnx", chunk=40)
    rng = np.random.default_rng(2)
    x = rng.standard_normal((1, 300, 2)).astype(np.float32)
    m64 = ltc_model(2).double()
    m64.load_state_dict(m.double().state_dict())
    sm = m64.streaming(dtype=torch.float64)
    with torch.no_grad():
        _, st = sm.step(torch.from_numpy(x[:, :50]).double(), sm.init_state(1))
    for i in range(2):  # a started state: those modes hold values the input cannot reach
        st[f"block{i}.ltc.x"] = st[f"block{i}.ltc.x"] + 0.5
    s = OnnxStreamer(tmp_path / "m.onnx", threads=1)
    s.state = {f"state.{k}": v for k, v in to_onnx.onnx_state_from_torch(st, s.state_spec).items()}
    y = np.concatenate([s.process(x[:, k : k + 25]) for k in range(50, 300, 25)], 1)
    with torch.no_grad():
        ref, st = sm.step(torch.from_numpy(x[:, 50:]).double(), st)
    ref = ref.numpy()
    assert np.abs(y - ref).max() <= 1e-4 * np.abs(ref).max()
    for i in range(2):
        got = s.state[f"state.block{i}.ltc.x"]
        want = st[f"block{i}.ltc.x"].numpy().transpose(0, 3, 2, 1)
        assert np.isfinite(got).all()
        assert np.abs(got - want).max() <= 1e-4 * np.abs(want).max()
