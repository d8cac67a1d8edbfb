"""The scale-normalisation front end (liquid_stream/scalenorm.py): an O(L²) weighted-sum
oracle in float64, the step form in any chunking, exact invariance to x → a·x + b, and
bounded, finite outputs through sensor-off stretches and returns."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from liquid_stream.scalenorm import ScaleNorm, ScaleNormConfig, ScaleNormStep, ema


def oracle(x: np.ndarray, cfg: ScaleNormConfig) -> np.ndarray:
    """Frames from the definitions as weighted sums (no recurrence): μ_t and σ²_t are the
    β^{t−k}-weighted mean of x_k and of d_k², k ≤ t, divided by their total weight."""
    B, L, C = x.shape
    beta = cfg.beta
    z = np.zeros_like(x)
    d = np.zeros_like(x)
    for t in range(L):
        wts = beta ** np.arange(t, -1, -1, dtype=np.float64)  # β^{t−k}, k = 0..t
        mu = np.einsum("k,bkc->bc", wts, x[:, : t + 1]) / wts.sum()
        d[:, t] = x[:, t] - mu
        var = np.einsum("k,bkc->bc", wts, d[:, : t + 1] ** 2) / wts.sum()
        z[:, t] = np.clip(d[:, t] / np.sqrt(var + cfg.eps), -cfg.clip, cfg.clip)
    n = L // cfg.hop
    return z[:, : n * cfg.hop].reshape(B, n, cfg.hop, C).mean(2)


def signal(B: int = 2, L: int = 600, C: int = 2, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    t = torch.arange(L, dtype=torch.float64)[None, :, None] / 125
    pulse = torch.sin(2 * math.pi * 1.3 * t) + 0.3 * torch.sin(2 * math.pi * 2.6 * t + 1)
    return pulse + 0.1 * torch.randn(B, L, C, generator=g, dtype=torch.float64)


def run_steps(step: ScaleNormStep, x: torch.Tensor, sizes) -> torch.Tensor:
    state, out, i = step.init_state(x.shape[0]), [], 0
    for T in sizes:
        if i >= x.shape[1]:
            break
        y, state = step(x[:, i : i + T], state)
        out.append(y)
        i += T
    return torch.cat(out, 1)


CFG = ScaleNormConfig(sample_rate=125, channels=2, tau_s=0.7, hop=5)


def test_forward_equals_weighted_sum_oracle_in_float64():
    x = signal(L=400) * 37 + 900
    want = oracle(x.numpy(), CFG)
    got = ScaleNorm(CFG)(x).numpy()
    assert got.shape == (2, 80, 2)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-10)


@pytest.mark.parametrize("sizes", [[1] * 600, [7] * 100, [5] * 120, [600], "random"])
def test_step_equals_forward_in_any_chunking(sizes):
    x = signal() * 3 - 40
    if sizes == "random":
        rng = np.random.default_rng(1)
        sizes = rng.integers(1, 23, size=200).tolist()
    want = ScaleNorm(CFG)(x)
    got = run_steps(ScaleNormStep(ScaleNorm(CFG), torch.float64), x, sizes)
    assert got.shape == want.shape
    assert (got - want).abs().max().item() <= 1e-9


def test_float32_step_within_contract_of_float64_forward():
    x = signal(L=2000) * 1000 + 3e4  # ADC-like units and offset
    want = ScaleNorm(CFG)(x)
    got = run_steps(ScaleNormStep(ScaleNorm(CFG), torch.float32), x.float(), [160] * 13)
    assert (got.double() - want).abs().max().item() <= 1e-4 * want.abs().max().item()


@pytest.mark.parametrize("a, b", [(0.01, 0.0), (100.0, 0.0), (1.0, 1000.0), (0.01, -1000.0)])
def test_invariant_to_gain_and_offset(a, b):
    x = signal(L=1000)
    f = ScaleNorm(CFG)  # exact but for ε = 1e-12 (squared units): 2e-6 at a = 0.01
    assert (f(a * x + b) - f(x)).abs().max().item() < 1e-5


def test_negative_gain_flips_the_sign():
    x = signal(L=500)
    f = ScaleNorm(CFG)
    assert (f(-x) + f(x)).abs().max().item() < 1e-9


def test_flat_stretch_and_return_stay_bounded_and_finite():
    x = signal(L=3000, C=1)
    x[:, 500:2000] = 0.0  # sensor off (flat zeros), then back at 100× the gain
    x[:, 2000:] *= 100
    y = run_steps(ScaleNormStep(ScaleNorm(ScaleNormConfig(channels=1)), torch.float32),
                  x.float(), [125] * 24)  # fmt: skip
    assert torch.isfinite(y).all()
    assert y.abs().max().item() <= 8.0
    # on the flat stretch d and σ decay together: |z| small and falling, no blow-up
    flat = y[0, 110:390, 0].abs()
    assert flat.max().item() < 0.05 and flat[-1] < flat[0] / 2


def test_ema_blocks_equal_the_recurrence():
    x = torch.randn(2, 301, 3, dtype=torch.float64)
    beta = 0.97
    s, want = torch.zeros(2, 3, dtype=torch.float64), []
    for t in range(301):
        s = beta * s + (1 - beta) * x[:, t]
        want.append(s)
    for block in (1, 7, 64, 400):
        assert (ema(x, beta, block) - torch.stack(want, 1)).abs().max().item() < 1e-13


def test_gradient_reaches_the_input_and_is_finite():
    x = (signal(L=300) * 5).float().requires_grad_()
    ScaleNorm(CFG)(x).square().sum().backward()
    assert torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0


@pytest.mark.parametrize(
    "field, value", [("hop", 0), ("channels", 1.5), ("tau_s", -1.0), ("eps", float("nan"))]
)
def test_bad_config_is_refused_with_the_field_named(field, value):
    with pytest.raises(ValueError, match=f"frontend.{field}"):
        ScaleNormConfig(**{field: value})


# ------------------------------------------------------------------ as a model's front end


def sn_model(dtype=torch.float32, decoder: str = "window") -> torch.nn.Module:
    from liquid_stream.model import LiquidS4Model

    torch.manual_seed(0)
    m = LiquidS4Model(
        d_input=2, d_output=1, d_model=16, n_layers=2, d_state=8, mode="diag", liquid="pb",
        liquid_order=2, norm="layer", decoder=decoder, decoder_window=10,
        frontend={"kind": "scalenorm", "tau_s": 0.5, "hop": 5},
    )  # fmt: skip
    return m.to(dtype).eval()


@pytest.mark.parametrize("decoder", ["window", "last", "pool"])
def test_model_streams_exactly_in_float64(decoder):
    m = sn_model(torch.float64, decoder)
    x = signal(L=900) * 30 + 500
    want = m.forward_steps(x)
    got = run_steps_model(m.streaming(dtype=torch.float64), x, [1, 3, 4, 97, 5, 300, 490])
    assert want.shape == (2, 900, 1)
    assert (got - want).abs().max().item() <= 1e-9


def run_steps_model(sm, x: torch.Tensor, sizes) -> torch.Tensor:
    state, out, i = sm.init_state(x.shape[0]), [], 0
    for T in sizes:
        y, state = sm(x[:, i : i + T], state)
        out.append(y)
        i += T
    assert i == x.shape[1]
    return torch.cat(out, 1)


def test_model_checks_its_channels():
    from liquid_stream.model import LiquidS4Model

    with pytest.raises(ValueError, match="frontend.channels 3 differs from d_input 2"):
        LiquidS4Model(d_input=2, d_output=1, frontend={"kind": "scalenorm", "channels": 3})


@pytest.mark.parametrize("chunk", [1, 7, 125, "random"])
def test_onnx_graph_equals_the_forward_in_any_chunking_and_units(tmp_path, chunk):
    """A real onnxruntime session over 3000 samples in ADC-like units with a large offset:
    within the contract 1e-4·max|y| of the float64 forward, and the same answer (to float32
    rounding) for the signal in other units."""
    from liquid_stream.export.pipeline import export_model
    from liquid_stream.onnx_streamer import OnnxStreamer

    m = sn_model()
    path = tmp_path / "sn.onnx"
    export_model(m, path, chunk=125)
    rng = np.random.default_rng(3)
    x = (signal(B=1, L=3000).numpy() * 50 + 3e4).astype(np.float32)
    sizes = rng.integers(1, 126, 200).tolist() if chunk == "random" else [chunk] * 3000
    with torch.no_grad():
        ref = m.double().forward_steps(torch.from_numpy(x).double()).numpy()

    def stream(xs: np.ndarray) -> np.ndarray:
        s, ys, i = OnnxStreamer(path), [], 0
        for T in sizes:
            if i >= xs.shape[1]:
                break
            ys.append(s.process(xs[:, i : i + T]))
            i += T
        return np.concatenate(ys, 1)

    y = stream(x)
    assert np.abs(y - ref).max() <= 1e-4 * np.abs(ref).max()
    y_units = stream(((x.astype(np.float64) - 3e4) * 0.01 - 700).astype(np.float32))
    assert np.abs(y_units - ref).max() <= 1e-4 * np.abs(ref).max()
