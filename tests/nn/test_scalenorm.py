"""The scale-normalisation front end (liquid_stream/nn/scalenorm.py): an O(L²) weighted-sum
oracle in float64, the step form in any chunking, exact invariance to x → a·x + b, and
bounded, finite outputs through sensor-off stretches and returns; with the oximeter
options (``log``, ``shared_scale``): invariance to a gain per channel, the ratio of the
channels' log-modulation depths kept, finite through zero, negative and tiny samples."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from liquid_stream.nn.ema import ema
from liquid_stream.nn.scalenorm import ScaleNorm, ScaleNormConfig, ScaleNormStep


def oracle(x: np.ndarray, cfg: ScaleNormConfig) -> np.ndarray:
    """Frames from the definitions as weighted sums (no recurrence): μ_t and σ²_t are the
    β^{t−k}-weighted mean of u_k and of d_k², k ≤ t, divided by their total weight; u = x,
    or with ``log`` ln(clip(max(x, φ)/max(x₀, φ), 1e−30, 1e30)), φ = 1e−30; with
    ``shared_scale`` every channel divided by channel 0's σ."""
    B, L, C = x.shape
    beta = cfg.beta
    if cfg.log:
        x = np.log(np.clip(np.maximum(x, 1e-30) / np.maximum(x[:, :1], 1e-30), 1e-30, 1e30))
    z = np.zeros_like(x)
    d = np.zeros_like(x)
    for t in range(L):
        wts = beta ** np.arange(t, -1, -1, dtype=np.float64)  # β^{t−k}, k = 0..t
        mu = np.einsum("k,bkc->bc", wts, x[:, : t + 1]) / wts.sum()
        d[:, t] = x[:, t] - mu
        var = np.einsum("k,bkc->bc", wts, d[:, : t + 1] ** 2) / wts.sum()
        if cfg.shared_scale:
            var = var[:, :1]
        z[:, t] = np.clip(d[:, t] / np.sqrt(var + cfg.eps), -cfg.clip, cfg.clip)
    n = L // cfg.hop
    f = z[:, : n * cfg.hop].reshape(B, n, cfg.hop, C).mean(2)
    if not cfg.slope:
        return f
    slope = np.zeros_like(z)  # |z_t − z_{t−1}|, z_{−1} = 0, sample by sample
    for t in range(L):
        slope[:, t] = np.abs(z[:, t] - (z[:, t - 1] if t else 0.0))
    return np.concatenate([f, slope[:, : n * cfg.hop].reshape(B, n, cfg.hop, C).mean(2)], -1)


def signal(B: int = 2, L: int = 600, C: int = 2, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    t = torch.arange(L, dtype=torch.float64)[None, :, None] / 125
    pulse = torch.sin(2 * math.pi * 1.3 * t) + 0.3 * torch.sin(2 * math.pi * 2.6 * t + 1)
    return pulse + 0.1 * torch.randn(B, L, C, generator=g, dtype=torch.float64)


def intensity(B: int = 2, L: int = 1500, C: int = 3, seed: int = 0, depth=None) -> torch.Tensor:
    """Oximeter-like raw intensities (float64): x_c = DC_c·exp(−k_c·p(t)) + noise with
    DC_c in 1e3–1e5, modulation depths k_c (default 0.02, 0.012, 0.03, ...) and white
    noise of 1e-4·DC_c; every sample positive."""
    g = torch.Generator().manual_seed(seed)
    t = torch.arange(L, dtype=torch.float64)[None, :, None] / 125
    pulse = torch.sin(2 * math.pi * 1.2 * t) + 0.4 * torch.sin(2 * math.pi * 2.4 * t + 1)
    k = torch.tensor(depth or [0.02, 0.012, 0.03, 0.015][:C], dtype=torch.float64)
    dc = 10 ** (3 + 2 * torch.rand(B, 1, C, generator=g, dtype=torch.float64))
    noise = torch.randn(B, L, C, generator=g, dtype=torch.float64)
    return dc * torch.exp(-k * pulse) + 1e-4 * dc * noise


def run_steps(step: ScaleNormStep, x: torch.Tensor, sizes, final: bool = False):
    state, out, i = step.init_state(x.shape[0]), [], 0
    for T in sizes:
        if i >= x.shape[1]:
            break
        y, state = step(x[:, i : i + T], state)
        out.append(y)
        i += T
    return (torch.cat(out, 1), state) if final else torch.cat(out, 1)


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
    y = run_steps(
        ScaleNormStep(ScaleNorm(ScaleNormConfig(channels=1)), torch.float32), x.float(), [125] * 24
    )
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
    "field, value",
    [
        ("hop", 0),
        ("channels", 1.5),
        ("tau_s", -1.0),
        ("eps", float("nan")),
        ("log", 1),
        ("shared_scale", "yes"),
        ("slope", 0),
    ],
)
def test_bad_config_is_refused_with_the_field_named(field, value):
    with pytest.raises(ValueError, match=f"frontend.{field}"):
        ScaleNormConfig(**{field: value})


# ------------------------------------------------------ the oximeter options: log, shared_scale

OPTIONS = [
    {"log": True},
    {"shared_scale": True},
    {"log": True, "shared_scale": True},
    {"slope": True},
    {"log": True, "shared_scale": True, "slope": True},
]


def cfg3(**opts) -> ScaleNormConfig:
    return ScaleNormConfig(sample_rate=125, channels=3, tau_s=0.7, hop=5, **opts)


def test_options_default_off_and_round_trip():
    assert not ScaleNormConfig().log and not ScaleNormConfig().shared_scale
    assert not ScaleNormConfig().slope and ScaleNormConfig(channels=3).n_features == 3
    cfg = cfg3(log=True, shared_scale=True, slope=True)
    assert cfg.n_features == 6
    assert ScaleNormConfig.from_dict(cfg.to_dict()) == cfg
    assert ScaleNormConfig.from_dict({"kind": "scalenorm", "log": True}).log
    with pytest.raises(ValueError, match="unknown field"):
        ScaleNormConfig.from_dict({"kind": "scalenorm", "logs": True})


@pytest.mark.parametrize("opts", OPTIONS, ids=lambda o: "+".join(o))
def test_forward_with_options_equals_weighted_sum_oracle(opts):
    cfg = cfg3(**opts)
    x = intensity(L=400)
    want = oracle(x.numpy(), cfg)
    got = ScaleNorm(cfg)(x).numpy()
    assert np.abs(want).max() > 0.5  # not trivially zero
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-10)


def hostile(x: torch.Tensor, first: float | None = None) -> torch.Tensor:
    """``x`` with stretches of zeros, negative values, 1e-38 and 3e38 (and optionally a
    non-positive or tiny first sample), then the signal again."""
    x = x.clone()
    x[:, 100:200] = 0.0
    x[:, 200:300] = -50.0
    x[:, 300:400] = 1e-38
    x[:, 400:420] = 3e38
    x[:, 430:440] = -3e38
    if first is not None:
        x[:, 0] = first
    return x


@pytest.mark.parametrize("first", [None, 0.0, -7.0])
def test_log_on_non_positive_and_huge_samples_equals_the_oracle(first):
    """The floor φ and the clamp of the ratio as the oracle states them: zeros, negative
    values, 1e-38 and ±3e38 (and a first sample ≤ 0, the origin then at φ)."""
    cfg = cfg3(log=True, shared_scale=True)
    x = hostile(intensity(L=600), first)
    np.testing.assert_allclose(ScaleNorm(cfg)(x).numpy(), oracle(x.numpy(), cfg), atol=1e-10)


@pytest.mark.parametrize("sizes", [[1] * 1500, [7] * 215, [1500], "random"])
@pytest.mark.parametrize("opts", OPTIONS, ids=lambda o: "+".join(o))
def test_step_with_options_equals_forward_in_any_chunking(opts, sizes):
    cfg = cfg3(**opts)
    x = intensity()
    if sizes == "random":  # mostly not multiples of the hop
        sizes = np.random.default_rng(2).integers(1, 23, size=300).tolist()
    want = ScaleNorm(cfg)(x)
    got = run_steps(ScaleNormStep(ScaleNorm(cfg), torch.float64), x, sizes)
    assert got.shape == want.shape == (2, 300, cfg.n_features)
    assert (got - want).abs().max().item() <= 1e-9


GAINS = [(0.01, 0.01, 0.01), (100.0, 100.0, 100.0), (0.01, 1.0, 100.0), (100.0, 0.01, 3.0)]


@pytest.mark.parametrize("gains", GAINS)
@pytest.mark.parametrize("shared", [False, True])
def test_log_is_invariant_to_a_gain_per_channel_not_to_an_offset(shared, gains):
    f = ScaleNorm(cfg3(log=True, shared_scale=shared))
    x = intensity(L=1000)
    y = f(x)
    assert y.std().item() > 0.3
    assert (f(x * torch.tensor(gains, dtype=x.dtype)) - y).abs().max().item() < 1e-6
    if shared:  # an intensity has a physical zero: an offset on channel 0 (the reference)
        # halves its modulation depth in u, and so doubles the other channels' frames
        b = x[:, :1] * torch.tensor([1.0, 0.0, 0.0], dtype=x.dtype)
        assert (f(x + b) - y).abs().max().item() > 0.1


def test_shared_scale_alone_is_invariant_to_a_common_gain_and_offsets_per_channel():
    f = ScaleNorm(cfg3(shared_scale=True))
    x = intensity(L=1000)
    b = torch.tensor([1e3, -5.0, 3e4], dtype=x.dtype)
    assert (f(0.01 * x + b) - f(x)).abs().max().item() < 1e-5


@pytest.mark.parametrize("R", [0.5, 1.8])
def test_shared_scale_keeps_the_ratio_of_log_modulation_depths(R):
    """Channel 0 (IR) DC_ir·exp(−k·p(t)), channel 1 (RED) DC_red·exp(−R·k·p(t)), R the
    oximeter's ratio of ratios: with ``log`` and ``shared_scale`` the frames' pulsatile
    amplitudes are in the ratio R, with ``log`` alone ≈ 1 (each channel at its own RMS:
    R lost)."""
    L, k = 125 * 30, 0.02
    t = torch.arange(L, dtype=torch.float64)[None, :, None] / 125
    pulse = torch.sin(2 * math.pi * 1.2 * t) + 0.4 * torch.sin(2 * math.pi * 2.4 * t + 1)
    depth = torch.tensor([k, R * k], dtype=torch.float64)
    dc = torch.tensor([5e4, 2e3], dtype=torch.float64)
    noise = torch.randn(1, L, 2, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    x = dc * torch.exp(-depth * pulse) * (1 + 2e-4 * noise)

    def ratio(shared: bool) -> float:
        cfg = ScaleNormConfig(sample_rate=125, channels=2, tau_s=2.0, log=True, shared_scale=shared)
        y = ScaleNorm(cfg)(x)[0, 125:]  # after 5 s (2.5τ) of warm-up
        return (y[:, 1].std() / y[:, 0].std()).item()

    assert abs(ratio(True) / R - 1) < 0.03
    assert abs(ratio(False) - 1) < 0.03


@pytest.mark.parametrize("first", [None, 0.0, -7.0, 1e-38])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_log_stays_finite_on_non_positive_and_tiny_samples(first, dtype):
    cfg = cfg3(log=True, shared_scale=True)
    x = hostile(intensity(L=900), first).to(dtype)
    sizes = np.random.default_rng(5).integers(1, 40, size=100).tolist()
    y, state = run_steps(ScaleNormStep(ScaleNorm(cfg), dtype), x, sizes, final=True)
    assert y.shape == (2, 180, 3)
    assert torch.isfinite(y).all() and y.abs().max().item() <= cfg.clip
    assert all(torch.isfinite(v).all() for v in state.values())
    if dtype == torch.float64:
        assert (ScaleNorm(cfg)(x) - y).abs().max().item() <= 1e-9


@pytest.mark.parametrize("opts", OPTIONS, ids=lambda o: "+".join(o))
def test_gradient_with_options_is_finite(opts):
    x = intensity(L=300).float().requires_grad_()
    ScaleNorm(cfg3(**opts))(x).square().sum().backward()
    assert torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0


@pytest.mark.parametrize(("a", "b"), [(1000.0, 5000.0), (-10.0, 3.0)])
def test_slope_frames_are_invariant_to_gain_and_offset_and_see_a_sharp_beat(a, b):
    """g keeps z's invariance (x → a·x + b, a > 0; a < 0 flips f and leaves g); on a
    spike train it is large in the frames that hold a spike, where f nearly cancels. (Frame
    0 differs by ε = 1e-12 against a variance of a few samples: compared from frame 1.)"""
    cfg = ScaleNormConfig(sample_rate=125, channels=1, tau_s=2.0, hop=10, slope=True)
    x = torch.zeros(1, 2500, 1, dtype=torch.float64)
    x[0, 5::100, 0] = 1.0  # a 1-sample up then a down, every 0.8 s, at the start of a frame
    x[0, 6::100, 0] = -1.0
    x = x + 0.01 * torch.randn(1, 2500, 1, generator=torch.Generator().manual_seed(0))
    y = ScaleNorm(cfg)(x)
    y2 = ScaleNorm(cfg)(a * x + b)
    sign = torch.tensor([1.0 if a > 0 else -1.0, 1.0], dtype=torch.float64)
    assert (y2 - y * sign)[:, 1:].abs().max().item() <= 1e-9
    f, g = y[0, 50:, 0], y[0, 50:, 1]
    beat = torch.zeros_like(g, dtype=torch.bool)
    beat[::10] = True  # frame k holds the spike when k ≡ 0 (mod 10)
    assert g[beat].min() > 5 * g[~beat].max()
    assert f[beat].abs().max() < g[beat].min()


# ------------------------------------------------------------------ as a model's front end


def sn_model(dtype=torch.float32, decoder: str = "window", **opts) -> torch.nn.Module:
    """A small model on the scale-norm front end (``opts``: more front-end fields)."""
    from liquid_stream.nn.model import LiquidS4Model

    torch.manual_seed(0)
    m = LiquidS4Model(
        d_input=2,
        d_output=1,
        d_model=16,
        n_layers=2,
        d_state=8,
        mode="diag",
        liquid="pb",
        liquid_order=2,
        norm="layer",
        decoder=decoder,
        decoder_window=10,
        frontend={"kind": "scalenorm", "tau_s": 0.5, "hop": 5, **opts},
    )
    return m.to(dtype).eval()


@pytest.mark.parametrize("hop", [5, 10])  # the presets pool by 5, the main job by 10
@pytest.mark.parametrize("decoder", ["window", "last", "pool"])
def test_model_streams_exactly_in_float64(decoder, hop):
    m = sn_model(torch.float64, decoder, hop=hop)
    x = signal(L=900) * 30 + 500
    want = m.forward_steps(x)
    got = run_steps_model(m.streaming(dtype=torch.float64), x, [1, 3, 4, 97, 5, 300, 490])
    assert want.shape == (2, 900, 1)
    assert (got - want).abs().max().item() <= 1e-9


def test_model_with_slope_streams_exactly_in_float64():
    """The slope features (two more state tensors) through the model's step form."""
    m = sn_model(torch.float64, hop=10, slope=True, channels=2)
    x = signal(L=900) * 30 + 500
    want = m.forward_steps(x)
    got = run_steps_model(m.streaming(dtype=torch.float64), x, [1, 3, 4, 97, 5, 300, 490])
    assert (got - want).abs().max().item() <= 1e-9
    assert want.abs().max().item() > 0


def run_steps_model(sm, x: torch.Tensor, sizes) -> torch.Tensor:
    state, out, i = sm.init_state(x.shape[0]), [], 0
    for T in sizes:
        y, state = sm(x[:, i : i + T], state)
        out.append(y)
        i += T
    assert i == x.shape[1]
    return torch.cat(out, 1)


def test_model_checks_its_channels():
    from liquid_stream.nn.model import LiquidS4Model

    with pytest.raises(ValueError, match="frontend.channels 3 differs from d_input 2"):
        LiquidS4Model(d_input=2, d_output=1, frontend={"kind": "scalenorm", "channels": 3})


@pytest.mark.slow
@pytest.mark.parametrize("hop", [5, 10])
@pytest.mark.parametrize("chunk", [1, 7, 125, "random"])
def test_onnx_graph_equals_the_forward_in_any_chunking_and_units(tmp_path, chunk, hop):
    """A real onnxruntime session over 3000 samples in ADC-like units with a large offset:
    within the contract 1e-4·max|y| of the float64 forward, and the same answer (to float32
    rounding) for the signal in other units."""
    from liquid_stream.export.pipeline import export_model

    m = sn_model(hop=hop)
    path = tmp_path / "sn.onnx"
    export_model(m, path, chunk=125)
    rng = np.random.default_rng(3)
    x = (signal(B=1, L=3000).numpy() * 50 + 3e4).astype(np.float32)
    sizes = rng.integers(1, 126, 200).tolist() if chunk == "random" else [chunk] * 3000
    with torch.no_grad():
        ref = m.double().forward_steps(torch.from_numpy(x).double()).numpy()

    y = onnx_stream(path, x, sizes)
    assert np.abs(y - ref).max() <= 1e-4 * np.abs(ref).max()
    y_units = onnx_stream(
        path, ((x.astype(np.float64) - 3e4) * 0.01 - 700).astype(np.float32), sizes
    )
    assert np.abs(y_units - ref).max() <= 1e-4 * np.abs(ref).max()


def onnx_stream(path, xs: np.ndarray, sizes, graph: bool = False):
    """``xs`` through an :class:`OnnxStreamer` of ``path`` in chunks of ``sizes`` → the
    outputs; ``graph``: straight through its session (no input range check, no finite
    check, chunks ≤ the graph's max_chunk) → the outputs and the last state."""
    from liquid_stream.runtime.onnx_streamer import OnnxStreamer

    s, ys, i = OnnxStreamer(path, batch=xs.shape[0]), [], 0
    state = s.state
    for T in sizes:
        if i >= xs.shape[1]:
            break
        if graph:
            out = s.session.run(s._outputs, {"x": xs[:, i : i + T], **state})
            state = {f"state.{e['name']}": v for e, v in zip(s.state_spec, out[1:], strict=True)}
            ys.append(out[0])
        else:
            ys.append(s.process(xs[:, i : i + T]))
        i += T
    y = np.concatenate(ys, 1)
    return (y, state) if graph else y


@pytest.mark.slow
@pytest.mark.parametrize("chunk", [1, 7, 125, "random"])
def test_onnx_graph_with_log_and_shared_scale_equals_the_forward(tmp_path, chunk):
    """The oximeter options through the exporter: within 1e-4·max|y| of the float64
    forward on raw intensities in any chunking, and the same answer (to float32 rounding)
    with a different gain on each channel."""
    from liquid_stream.export.pipeline import export_model

    m = sn_model(log=True, shared_scale=True, channels=2)
    path = tmp_path / "ox.onnx"
    export_model(m, path, chunk=125)
    x = intensity(B=1, L=3000, C=2, seed=6).numpy().astype(np.float32)
    rng = np.random.default_rng(7)
    sizes = rng.integers(1, 126, 200).tolist() if chunk == "random" else [chunk] * 3000
    with torch.no_grad():
        ref = m.double().forward_steps(torch.from_numpy(x).double()).numpy()
    assert np.abs(ref).max() > 0
    y = onnx_stream(path, x, sizes)
    assert np.abs(y - ref).max() <= 1e-4 * np.abs(ref).max()
    gains = np.array([0.01, 5.0], dtype=np.float32)  # the streamer accepts |x| ≤ 1e6
    assert np.abs(onnx_stream(path, x * gains, sizes) - ref).max() <= 1e-4 * np.abs(ref).max()


@pytest.mark.slow
@pytest.mark.parametrize("chunk", [1, 7, 125, "random"])
def test_onnx_graph_with_slope_equals_the_forward(tmp_path, chunk):
    """The slope features through the exporter (pooled by 10, as the ECG models): within
    1e-4·max|y| of the float64 forward in any chunking, and the same for other units."""
    from liquid_stream.export.pipeline import export_model

    m = sn_model(hop=10, slope=True, channels=2)
    assert m.encoder.weight.shape[1] == 4
    path = tmp_path / "slope.onnx"
    export_model(m, path, chunk=125)
    x = (signal(B=1, L=3000).numpy() * 50 + 3e4).astype(np.float32)
    rng = np.random.default_rng(8)
    sizes = rng.integers(1, 126, 200).tolist() if chunk == "random" else [chunk] * 3000
    with torch.no_grad():
        ref = m.double().forward_steps(torch.from_numpy(x).double()).numpy()
    assert np.abs(ref).max() > 0
    y = onnx_stream(path, x, sizes)
    assert np.abs(y - ref).max() <= 1e-4 * np.abs(ref).max()
    y_units = onnx_stream(path, ((x.astype(np.float64) - 3e4) * 0.01).astype(np.float32), sizes)
    assert np.abs(y_units - ref).max() <= 1e-4 * np.abs(ref).max()


@pytest.mark.parametrize("first", [None, 0.0, -7.0, 1e-38])
def test_onnx_log_stays_finite_on_non_positive_and_tiny_samples(tmp_path, first):
    from liquid_stream.export.pipeline import export_model

    m = sn_model(log=True, shared_scale=True, channels=2)
    path = tmp_path / "ox.onnx"
    export_model(m, path, chunk=125)
    x = hostile(intensity(B=2, L=900, C=2, seed=8), first).numpy().astype(np.float32)
    sizes = np.random.default_rng(9).integers(1, 126, 40).tolist()
    y, state = onnx_stream(path, x, sizes, graph=True)  # ±3e38: past the streamer's range
    assert y.shape == (2, 900, 1) and np.isfinite(y).all()
    with torch.no_grad():  # and the floor and clamp as the forward's
        ref = m.double().forward_steps(torch.from_numpy(x).double()).numpy()
    assert np.abs(y - ref).max() <= 1e-4 * np.abs(ref).max()
    assert len([k for k in state if k.startswith("state.frontend.")]) == 7  # and the stack's
    assert all(np.isfinite(v).all() for v in state.values())


def test_log_front_end_takes_raw_adc_counts_and_refuses_beyond_1e30(tmp_path):
    """A 22-bit oximeter's raw counts (~4e6) pass the input guard of a log scale-norm model
    (torch step form and ONNX alike; the default front end refuses them beyond 1e6), and
    1e31 is refused with the one-line error, leaving the state as it was."""
    from liquid_stream.export.pipeline import export_model
    from liquid_stream.nn.model import StreamingModel
    from liquid_stream.runtime.onnx_streamer import OnnxStreamer, StreamInputError

    m = sn_model(log=True, shared_scale=True, channels=2)
    path = tmp_path / "ox.onnx"
    export_model(m, path, chunk=125)
    x = (4e6 / 1e5 * intensity(B=1, L=250, C=2, seed=8)).numpy().astype(np.float32)
    assert x.max() > 1e6
    bad = x[:, :10].copy()
    bad[0, 3, 1] = 1e31
    sm = StreamingModel(m)
    state = sm.init_state(1)
    for stream in (OnnxStreamer(path), sm):
        if stream is sm:
            with torch.no_grad():
                y, state = sm.step(torch.from_numpy(x), state)
            with pytest.raises(StreamInputError, match="outside the accepted range"):
                sm.step(torch.from_numpy(bad), state)
        else:
            y = stream.process(x)
            before = {k: v.copy() for k, v in stream.state.items()}
            with pytest.raises(StreamInputError, match="outside the accepted range"):
                stream.process(bad)
            assert all(np.array_equal(before[k], v) for k, v in stream.state.items())
        assert np.isfinite(np.asarray(y)).all()
    plain = sn_model(channels=2)
    with pytest.raises(StreamInputError, match="outside the accepted range"):
        StreamingModel(plain).step(torch.from_numpy(x), StreamingModel(plain).init_state(1))
