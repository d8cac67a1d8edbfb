"""The LiquidS4 layer against the design's recurrences (float64), causality, gradients."""

from __future__ import annotations

import copy
import io

import pytest
import torch
from reference import liquid_literal, recurrence_s4

from liquid_stream import LiquidS4, SSMConfig
from liquid_stream.nn.kernel_base import complex_param


def randomize(layer: LiquidS4, seed: int = 0) -> LiquidS4:
    """Move every parameter away from its init (keeping Re Λ < 0 by construction)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in layer.named_parameters():
            noise = torch.randn(p.shape, generator=g, dtype=p.dtype)
            p.add_((0.3 if "log_dt" in name or "Lambda" in name else 0.2) * noise)
    return layer


def make(mode="diag", liquid=None, P=2, Lt=1, H=3, N=8, seed=0, **kw) -> LiquidS4:
    torch.manual_seed(seed)
    layer = LiquidS4(
        H,
        d_state=N,
        mode=mode,
        liquid=liquid,
        liquid_order=P,
        liquid_len=Lt,
        dt_min=0.05,
        dt_max=0.3,
        **kw,
    )
    return randomize(layer, seed).double()


def rel(a, b):
    return ((a - b).abs().max() / b.abs().max()).item()


@pytest.mark.parametrize("mode", ["diag", "dplr"])
@pytest.mark.parametrize("L", [1, 31, 64])
def test_s4_part_equals_recurrence(mode, L):
    layer = make(mode, N=9 if mode == "dplr" else 8)
    u = torch.randn(2, L, 3, dtype=torch.float64)
    assert rel(layer(u), recurrence_s4(layer.ssm_matrices(), u)) < 1e-9


@pytest.mark.parametrize("mode", ["diag", "dplr"])
@pytest.mark.parametrize(
    "liquid,P,Lt",
    [
        ("pb", 2, 1),
        ("pb", 3, 3),
        ("pb", 4, 1),
        ("pb", 4, 3),
        ("kb", 2, 1),
        ("kb", 3, 1),
        ("kb", 4, 1),
    ],
)
def test_liquid_layer_equals_literal(mode, liquid, P, Lt):
    layer = make(mode, liquid, P, Lt, seed=P + Lt)
    u = torch.randn(2, 40, 3, dtype=torch.float64)
    mats = layer.ssm_matrices()
    y_liq = liquid_literal(mats, u)
    expected = recurrence_s4(mats, u) + y_liq
    assert rel(layer(u), expected) < 1e-9
    # The liquid part on its own (same parameters, liquid switched off) matches as well.
    plain = LiquidS4(3, d_state=8, mode=mode).double()
    plain.load_state_dict(layer.state_dict())
    assert y_liq.abs().max() > 1e-3
    assert rel(layer(u) - plain(u), y_liq) < 1e-9


@pytest.mark.parametrize("mode", ["diag", "dplr"])
def test_rate_rescales_dt(mode):
    layer = make(mode, "kb", 3)
    u = torch.randn(1, 33, 3, dtype=torch.float64)
    mats = layer.ssm_matrices(rate=2.0)
    assert rel(layer(u, rate=2.0), recurrence_s4(mats, u) + liquid_literal(mats, u)) < 1e-9
    assert rel(layer(u, rate=2.0), layer(u)) > 1e-3


def continuous_A(layer: LiquidS4) -> torch.Tensor:
    """A written from the raw parameters (independently of the kernel classes)."""
    k = layer.kernel
    Lam = torch.complex(-torch.exp(k.Lambda_re_log), k.Lambda_im).detach()
    if layer.mode == "diag":
        return torch.diag_embed(Lam)
    P = complex_param(k.P).detach()
    Lf, Pf = torch.cat([Lam, Lam.conj()], -1), torch.cat([P, P.conj()], -1)
    return torch.diag_embed(Lf) - Pf[:, :, None] * Pf[:, None, :].conj()


@pytest.mark.parametrize("mode", ["diag", "dplr"])
@pytest.mark.parametrize("rate", [1.0, 2.0])
def test_A_bar_is_bilinear_transform(mode, rate):
    layer = make(mode)
    A = continuous_A(layer)
    dt = (torch.exp(layer.kernel.log_dt.detach()) * rate)[:, None, None]
    eye = torch.eye(A.shape[-1], dtype=A.dtype)
    expected = torch.linalg.inv(eye - dt / 2 * A) @ (eye + dt / 2 * A)
    got = layer.ssm_matrices(rate)["A_bar"]
    assert got.dtype == torch.complex128
    assert (got - expected).abs().max() < 1e-12
    if mode == "dplr":  # B̄ = (I − Δ/2·A)⁻¹ Δ B, from the raw parameters
        Bf = complex_param(layer.kernel.B).detach()
        Bf = torch.cat([Bf, Bf.conj()], -1)
        B_bar = torch.linalg.solve(eye - dt / 2 * A, (dt[..., 0] * Bf)[..., None])[..., 0]
        assert (layer.ssm_matrices(rate)["B_bar"] - B_bar).abs().max() < 1e-12


@pytest.mark.parametrize("L", [1, 2, 31, 100])
def test_dplr_structured_power_equals_dense_and_the_recurrence(monkeypatch, L):
    """C Āᴸ by O(Mf) structured steps (checkpointed segments, the path for large N) gives
    the same forward — equal to the literal recurrence — and the same gradient for every
    parameter as the dense repeated squaring."""
    from liquid_stream.nn import dplr

    u = torch.randn(2, L, 3, dtype=torch.float64)
    runs = []
    for budget in (2**40, 0):  # dense, then structured
        monkeypatch.setattr(dplr, "DENSE_POWER_BYTES", {"cpu": budget})
        layer = make("dplr", liquid="pb", P=3, N=10, seed=1)
        y = layer(u)
        y.square().sum().backward()
        runs.append((y.detach(), {k: p.grad.clone() for k, p in layer.named_parameters()}))
        with torch.no_grad():
            mats = layer.ssm_matrices()
            assert rel(y, recurrence_s4(mats, u) + liquid_literal(mats, u)) < 1e-9
    (y0, g0), (y1, g1) = runs
    assert rel(y1, y0) < 1e-12
    for k in g0:
        assert (g1[k] - g0[k]).abs().max() <= 1e-9 * g0[k].abs().max().clamp_min(1e-30), k


def test_zoh_diag_matches_recurrence_and_exp():
    layer = make("diag", "kb", 2, disc="zoh")
    mats = layer.ssm_matrices()
    A = continuous_A(layer)
    dt = torch.exp(layer.kernel.log_dt.detach())[:, None, None]
    assert (mats["A_bar"] - torch.linalg.matrix_exp(dt * A)).abs().max() < 1e-12
    u = torch.randn(2, 30, 3, dtype=torch.float64)
    assert rel(layer(u), recurrence_s4(mats, u) + liquid_literal(mats, u)) < 1e-9


@pytest.mark.parametrize("init", ["legs", "lin", "inv"])
def test_diag_inits(init):
    layer = LiquidS4(4, d_state=16, mode="diag", init=init).double()
    Lam = layer.kernel.Lambda()
    assert Lam.shape == (4, 8) and (Lam.real < 0).all()
    u = torch.randn(1, 20, 4, dtype=torch.float64)
    assert rel(layer(u), recurrence_s4(layer.ssm_matrices(), u)) < 1e-9


@pytest.mark.parametrize("mode", ["diag", "dplr"])
@pytest.mark.parametrize("liquid", ["pb", "kb"])
def test_causal(mode, liquid):
    layer = make(mode, liquid, 3, 2)
    u = torch.randn(2, 50, 3, dtype=torch.float64)
    v = u.clone()
    t0 = 20
    v[:, t0:] += torch.randn_like(v[:, t0:]) * 3
    y, yv = layer(u), layer(v)
    assert layer.is_causal
    assert torch.equal(y[:, :t0], yv[:, :t0]) or (y[:, :t0] - yv[:, :t0]).abs().max() < 1e-12
    assert (y[:, t0:] - yv[:, t0:]).abs().max() > 1e-3


@pytest.mark.parametrize("mode", ["diag", "dplr"])
def test_bidirectional_is_non_causal(mode):
    layer = make(mode, "pb", bidirectional=True)
    assert not layer.is_causal
    u = torch.randn(1, 30, 3, dtype=torch.float64)
    v = u.clone()
    v[:, 20:] += 1.0
    assert (layer(u)[:, :20] - layer(v)[:, :20]).abs().max() > 1e-6
    with pytest.raises(ValueError, match="bidirectional"):
        layer.ssm_matrices()


@pytest.mark.parametrize("mode", ["diag", "dplr"])
@pytest.mark.parametrize("liquid", ["pb", "kb"])
def test_every_parameter_gets_gradient(mode, liquid):
    layer = make(mode, liquid, 3).float()
    u = torch.randn(2, 40, 3)
    (layer(u) * torch.randn(2, 40, 3)).sum().backward()
    for name, p in layer.named_parameters():
        assert p.grad is not None and p.grad.abs().max() > 0, name
    # The liquid term alone reaches every parameter it is built from.
    layer.zero_grad()
    plain = LiquidS4(3, d_state=8, mode=mode)
    plain.load_state_dict(layer.state_dict())
    for p in plain.parameters():
        p.requires_grad_(False)
    ((layer(u) - plain(u)) * torch.randn(2, 40, 3)).sum().backward()
    names = ["log_dt", "Lambda_re_log", "Lambda_im", "B", "C"] + (["P"] if mode == "dplr" else [])
    for name in names:
        g = getattr(layer.kernel, name).grad
        assert g is not None and g.abs().max() > 0, name


@pytest.mark.parametrize("mode", ["diag", "dplr"])
def test_state_dict_roundtrip_and_dtype_moves(mode):
    layer = make(mode, "pb", 3).float()
    u = torch.randn(2, 25, 3)
    buf = io.BytesIO()
    torch.save(layer.state_dict(), buf)
    buf.seek(0)
    other = LiquidS4(3, d_state=8, mode=mode, liquid="pb", liquid_order=3)
    other.load_state_dict(torch.load(buf, weights_only=True))
    assert torch.equal(layer(u), other(u))
    # .double() / .to() keep the liquid term tied to the (converted) parameters.
    d = copy.deepcopy(layer).to(torch.float64)
    ud = u.double()
    before = d(ud)
    with torch.no_grad():
        d.kernel.B.mul_(1.5)
    after = d(ud)
    mats = d.ssm_matrices()
    assert rel(after, recurrence_s4(mats, ud) + liquid_literal(mats, ud)) < 1e-9
    assert (after - before).abs().max() > 1e-3


def test_bad_input_and_arguments():
    layer = LiquidS4(4, d_state=8)
    with pytest.raises(ValueError, match=r"shape \(B, L, 4\)"):
        layer(torch.randn(10, 4))
    with pytest.raises(ValueError, match=r"shape \(B, L, 4\)"):
        layer(torch.randn(2, 10, 5))
    bad = torch.randn(2, 10, 4)
    bad[0, 3, 1] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        layer(bad)
    bad[0, 3, 1] = float("inf")
    with pytest.raises(ValueError, match="NaN or infinite"):
        layer(bad)
    with pytest.raises(ValueError, match="liquid_order"):
        LiquidS4(4, liquid="pb", liquid_order=1)
    with pytest.raises(ValueError, match="liquid_order"):
        LiquidS4(4, liquid="kb", liquid_order=11)
    with pytest.raises(ValueError, match="liquid must be"):
        LiquidS4(4, liquid="xx")
    with pytest.raises(ValueError, match="liquid_len"):
        LiquidS4(4, liquid="pb", liquid_len=0)
    with pytest.raises(ValueError, match="mode"):
        LiquidS4(4, mode="s5")
    with pytest.raises(ValueError, match="backend"):
        LiquidS4(4, backend="cuda-magic")


FLAT_CONFIGS = [
    dict(
        d_state=8,
        mode="diag",
        liquid="pb",
        liquid_order=3,
        liquid_len=2,
        init="lin",
        disc="zoh",
        dt_min=0.01,
        dt_max=0.2,
    ),
    dict(d_state=6, mode="dplr", liquid="kb", liquid_order=2, bidirectional=True),
    dict(d_state=4, mode="diag", liquid="ltc"),
]


@pytest.mark.parametrize("flat", FLAT_CONFIGS)
def test_config_object_is_the_flat_keywords(flat):
    """LiquidS4(H, config=cfg) is the same layer as LiquidS4(H, **flat): same config, same
    parameters from the same seed, same output; fields given beside config replace its own."""
    torch.manual_seed(0)
    a = LiquidS4(5, **flat)
    torch.manual_seed(0)
    b = LiquidS4(5, config=SSMConfig(**flat))
    torch.manual_seed(0)
    c = LiquidS4(
        5,
        config=SSMConfig(**{**flat, "d_state": 2, "dt_max": 0.5}),
        d_state=flat["d_state"],
        dt_max=flat.get("dt_max", 0.1),
    )
    u = torch.randn(2, 40, 5)
    for other in (b, c):
        assert other.config == a.config == SSMConfig(**flat)
        sa, so = a.state_dict(), other.state_dict()
        assert sa.keys() == so.keys()
        assert all(torch.equal(sa[k], so[k]) for k in sa)
        assert torch.equal(a(u), other(u))


HAVE_PYKEOPS = __import__("importlib").util.find_spec("pykeops") is not None


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_PYKEOPS, reason="pykeops is not installed (pip install -e '.[keops]')")
def test_keops_backend_agrees_with_torch():
    from liquid_stream.nn.cauchy_keops import keops_available

    assert keops_available(), "pykeops is installed but does not work here"
    torch.manual_seed(0)
    a = randomize(LiquidS4(8, d_state=16, mode="dplr", liquid="kb", backend="torch"))
    b = LiquidS4(8, d_state=16, mode="dplr", liquid="kb", backend="keops")
    b.load_state_dict(a.state_dict())
    u = torch.randn(2, 500, 8)
    ya, yb = a(u), b(u)
    assert rel(yb, ya) < 1e-5
    g = torch.randn_like(ya)
    ga = torch.autograd.grad((ya * g).sum(), a.kernel.B)[0]
    gb = torch.autograd.grad((yb * g).sum(), b.kernel.B)[0]
    assert rel(gb, ga) < 1e-4


def test_keops_fallback_warns_once_and_matches_torch(monkeypatch):
    import warnings

    from liquid_stream.nn import cauchy

    monkeypatch.setattr(cauchy, "_keops", lambda: None)  # as if pykeops were missing
    monkeypatch.setattr(cauchy, "_KEOPS_WARNED", False)
    torch.manual_seed(0)
    a = LiquidS4(4, d_state=8, mode="dplr", backend="torch")
    b = LiquidS4(4, d_state=8, mode="dplr", backend="keops")
    b.load_state_dict(a.state_dict())
    u = torch.randn(1, 64, 4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yb = b(u)
        b(u)
    assert sum("falling back" in str(w.message) for w in caught) == 1
    assert torch.equal(yb, a(u))
