"""liquid="ltc": the exact linear-LTC recurrence (docs/design.md §3, eq. (10)) — scan vs
literal loop, hand-written gradients vs autograd, stability, its relation to KB, streaming and
errors."""

from __future__ import annotations

import pytest
import torch
from reference import recurrence_ltc
from test_layer import randomize

from liquid_stream import LiquidS4, LiquidS4Model
from liquid_stream.nn.layer import LiquidS4Step
from liquid_stream.nn.ltc import LTC_RHO, linear_scan, ltc_scan, ltc_system


def rel(a, b):
    return ((a - b).abs().max() / b.abs().max()).item()


def ltc_layer(H=3, N=8, seed=0, dt_min=0.01, dt_max=0.3, **kw) -> LiquidS4:
    torch.manual_seed(seed)
    layer = LiquidS4(H, d_state=N, mode="diag", liquid="ltc", dt_min=dt_min, dt_max=dt_max, **kw)
    return randomize(layer, seed).double()


def mats_of(layer: LiquidS4, differentiable: bool = False) -> dict:
    """The discrete system; with ``differentiable`` built from the live parameters."""
    if not differentiable:
        return layer.ssm_matrices()
    A, B = layer.kernel.bar(1.0, torch.float64)
    C = torch.view_as_complex(layer.kernel.C)[0].to(torch.complex128)
    return {"A_bar": A, "B_bar": B, "C": C, "D": layer.D, "scale": 2.0}


@pytest.mark.parametrize("L", [1, 63, 64, 65, 1000, 4096])
@pytest.mark.parametrize("disc", ["bilinear", "zoh"])
def test_forward_equals_literal_loop_float64(L, disc):
    layer = ltc_layer(seed=L, disc=disc)
    u = 2 * torch.randn(2, L, 3, dtype=torch.float64)
    ref, _ = recurrence_ltc(mats_of(layer), u)
    assert rel(layer(u), ref) < 1e-9


@pytest.mark.parametrize("block,max_elements", [(4, 1 << 22), (8, 100), (64, 48), (3, 7)])
def test_blocking_and_segments_change_nothing(block, max_elements):
    """Recursive blocks (block ≪ L), many time segments, blocks that do not divide L."""
    layer = ltc_layer()
    u = torch.randn(2, 3, 777, dtype=torch.float64)
    system = ltc_system(layer.kernel, 1.0, torch.float64)
    x0 = torch.randn(2, 3, 4, dtype=torch.complex128)
    y, x = ltc_scan(u, system, x0, block=block, max_elements=max_elements)
    mats = {**mats_of(layer), "D": torch.zeros(3, dtype=torch.float64)}
    y_ref, x_ref = recurrence_ltc(mats, u.transpose(1, 2), x0=x0)
    assert rel(y.transpose(1, 2), y_ref) < 1e-9 and rel(x, x_ref) < 1e-9


@pytest.mark.parametrize("block,max_elements", [(64, 1 << 22), (4, 30)])
def test_gradients_equal_autograd_through_the_loop(block, max_elements):
    """Every parameter, the input and the initial state; final state and outputs both used."""
    layer = ltc_layer(dt_min=0.05, dt_max=0.5)
    u = torch.randn(2, 3, 90, dtype=torch.float64, requires_grad=True)
    x0 = torch.randn(2, 3, 4, dtype=torch.complex128, requires_grad=True)
    params = [p for n, p in layer.named_parameters() if n != "D"]
    w = torch.randn(2, 3, 90, dtype=torch.float64)
    wx = torch.randn(2, 3, 4, dtype=torch.complex128)

    def loss(y, x):
        return (y * w).sum() + (x * wx).real.sum()

    system = ltc_system(layer.kernel, 1.0, torch.float64)
    y, x = ltc_scan(u, system, x0, block=block, max_elements=max_elements)
    ours = torch.autograd.grad(loss(y, x), [u, x0, *params])
    mats = {**mats_of(layer, differentiable=True), "D": torch.zeros(3, dtype=torch.float64)}
    y_ref, x_ref = recurrence_ltc(mats, u.transpose(1, 2), x0=x0)
    ref = torch.autograd.grad(loss(y_ref.transpose(1, 2), x_ref), [u, x0, *params])
    names = ["u", "x0"] + [n for n, _ in layer.named_parameters() if n != "D"]
    for name, a, b in zip(names, ours, ref, strict=True):
        assert b.abs().max() > 0, name
        assert rel(a, b) < 1e-6, name


def test_every_parameter_of_a_model_gets_gradient():
    torch.manual_seed(0)
    m = LiquidS4Model(2, 3, d_model=8, n_layers=2, d_state=8, mode="diag", liquid="ltc")
    m(torch.randn(2, 300, 2)).square().sum().backward()
    for name, p in m.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_causal():
    layer = ltc_layer()
    u = torch.randn(1, 500, 3, dtype=torch.float64)
    v = u.clone()
    v[:, 300:] = 100 * torch.randn(1, 200, 3, dtype=torch.float64)
    assert torch.equal(layer(u)[:, :300], layer(v)[:, :300])


def test_stability_under_extreme_inputs():
    """10⁵ steps of ±1e4 inputs (float32): |x_t| stays under the bound of the module
    docstring, max|B̄u| / ((1 − ρ)(1 − max|Ā|)); the same inputs through the unbounded
    transition Ā + B̄u_t overflow."""
    torch.manual_seed(0)
    layer = LiquidS4(4, d_state=16, mode="diag", liquid="ltc")  # LegS init, Δ ∈ [1e-3, 0.1]
    L = 100_000
    u = 1e4 * torch.sign(torch.randn(1, 4, L))
    system = ltc_system(layer.kernel)
    ut = u.permute(2, 0, 1)[..., None]  # time-first (L, 1, H, 1)
    b = system.B_bar * ut
    with torch.no_grad():
        y, _ = ltc_scan(u, system)
        a = system.A_bar + system.B_liq * torch.tanh(ut)
        x = linear_scan(a, b)
    assert torch.isfinite(y).all() and torch.isfinite(x).all()
    assert a.abs().max() <= 1 - (1 - LTC_RHO) * (1 - system.A_bar.abs().max()) + 1e-6
    bound = (system.B_bar.abs() * 1e4 / ((1 - LTC_RHO) * (1 - system.A_bar.abs()))).max()
    assert x.abs().max() <= bound
    assert (system.B_liq.abs() < system.B_bar.abs() - 1e-9).any()  # the clamp is active here
    with torch.no_grad():
        x_raw = linear_scan(system.A_bar + system.B_bar * ut, b)
    assert not torch.isfinite(x_raw).all()


def test_relation_to_kb_second_order():
    """With B̃ = B̄ (clamp inactive), for inputs εu:

        y_ltc − y_kb = ε² N(u) + O(ε³),  N(u)_t = Σ_{j < i−1, i ≤ t} s·Re(C Ā^{t−j−1} B̄²) u_i u_j

    (KB keeps the consecutive pairs i = j + 1 only). Checked: |y_ltc − y_kb − ε²N| ≤ c ε³
    with the same c at ε = 1e-2 and 1e-3; and for u supported on two consecutive steps,
    N = 0, so y_ltc − y_kb = O(ε³) there."""
    torch.manual_seed(0)
    ltc = ltc_layer(H=2, N=8, dt_min=0.01, dt_max=0.1)
    with torch.no_grad():
        ltc.kernel.B.mul_(0.02)  # |B̄| ≤ ρ(1 − |Ā|): B̃ = B̄
    kb = LiquidS4(2, d_state=8, mode="diag", liquid="kb", liquid_order=5).double()
    kb.load_state_dict(ltc.state_dict())
    mats = ltc.ssm_matrices()
    A = torch.diagonal(mats["A_bar"], dim1=-2, dim2=-1)
    Bb = mats["B_bar"]
    assert (Bb.abs() <= LTC_RHO * (1 - A.abs())).all()
    L = 40
    u = torch.randn(1, L, 2, dtype=torch.float64)
    N = torch.zeros(1, L, 2, dtype=torch.float64)
    for t in range(L):
        for i in range(t + 1):
            for j in range(i - 1):
                k = mats["scale"] * (mats["C"] * A ** (t - j - 1) * Bb**2).sum(-1).real
                N[:, t] += k * u[:, i] * u[:, j]
    err = {}
    for eps in (1e-2, 1e-3):
        d = ltc(eps * u) - kb(eps * u)
        assert (d.abs().max() / eps**2) > 0.5 * N.abs().max()  # a real second-order gap
        err[eps] = (d - eps**2 * N).abs().max().item() / eps**3
    assert err[1e-3] <= 2 * err[1e-2] and err[1e-2] < 10 * u.abs().max() ** 3
    two = torch.zeros(1, L, 2, dtype=torch.float64)
    two[:, 10:12] = torch.randn(1, 2, 2, dtype=torch.float64)
    for eps in (1e-2, 1e-3):
        d = ltc(eps * two) - kb(eps * two)
        assert d.abs().max() <= 10 * eps**3 * two.abs().max() ** 3


@pytest.mark.parametrize("sizes", [1, 7, 160, "mix"])
def test_step_form_is_the_recurrence(sizes):
    from test_streaming import chunk_sizes, stream

    layer = ltc_layer()
    L = 300 if sizes == 1 else 1200
    u = torch.randn(2, L, 3, dtype=torch.float64)
    step = LiquidS4Step(layer, dtype=torch.float64)
    assert step.transition == "ltc" and list(step.init_state(2)) == ["ltc.x"]
    assert rel(stream(step, u, chunk_sizes(sizes, L)), layer(u)) < 1e-9


def test_invalid_configurations():
    with pytest.raises(ValueError, match="mode='diag'"):
        LiquidS4(4, mode="dplr", liquid="ltc")
    with pytest.raises(ValueError, match="bidirectional"):
        LiquidS4(4, mode="diag", liquid="ltc", bidirectional=True)


@pytest.mark.parametrize("N", [7, 64])
def test_inside_init_makes_the_liquid_coefficient_b_bar(N):
    """init="legs-inside": at init B̃ = B̄ for every (h, m) (the model is eq. (10) with the
    paper's coefficient), with margin: |B̄| ≤ ½ρ(1 − |Ā|); the plain LegS init has the clamp
    active for every mode. The scaling touches B only (Λ, Δ, C unchanged), so the linear
    kernel changes by a per-mode factor of B alone."""
    torch.manual_seed(0)
    legs = LiquidS4(16, d_state=N, mode="diag", liquid="ltc", init="legs")
    torch.manual_seed(0)
    inside = LiquidS4(16, d_state=N, mode="diag", liquid="ltc", init="legs-inside")
    s_legs = ltc_system(legs.kernel, 1.0, torch.float64)
    s_in = ltc_system(inside.kernel, 1.0, torch.float64)
    assert (s_legs.B_liq.abs() < s_legs.B_bar.abs() * (1 - 1e-9)).all()  # clamp active
    assert torch.equal(s_in.B_liq, s_in.B_bar)  # clamp inactive: B̃ = B̄
    assert (s_in.B_bar.abs() <= 0.5 * LTC_RHO * (1 - s_in.A_bar.abs()) * (1 + 1e-6)).all()
    torch.testing.assert_close(s_in.A_bar, s_legs.A_bar, rtol=0, atol=0)
    torch.testing.assert_close(s_in.C, s_legs.C, rtol=0, atol=0)
    ratio = s_in.B_bar / s_legs.B_bar  # a positive real factor ≤ 1 per mode
    assert ratio.imag.abs().max() < 1e-6 and (ratio.real > 0).all() and (ratio.real <= 1).all()
    with pytest.raises(ValueError, match="unknown diag init"):
        LiquidS4(4, d_state=8, mode="diag", liquid="ltc", init="legs-outside")
