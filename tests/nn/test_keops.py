"""KeOps Cauchy backend against a pure-torch broadcast reference.

Reference: out[h, r, l] = Σ_m v[h, r, m] / (z[l] − w[h, m]), computed by broadcasting an
(H, R, Lz, M) block, differentiated by torch autograd (complex128).

The KeOps tests are skipped when pykeops is not importable. If it imports but does not work
(no compiler, a build error, a crash), ``test_keops_available_when_installed`` FAILS with the
probe's output and the numerical tests are skipped rather than crashing the test run (a broken
KeOps build can segfault the process). The first run on a machine compiles 2 formulas per dtype
(≈15 s each); KEOPS_CACHE_FOLDER (set by the Makefile) keeps them for later runs.
"""

from __future__ import annotations

import importlib.util
import sys

import pytest
import torch

from liquid_stream.nn import cauchy_keops as ck

pytestmark = pytest.mark.slow

HAVE_PYKEOPS = importlib.util.find_spec("pykeops") is not None
needs_pykeops = pytest.mark.skipif(
    not HAVE_PYKEOPS, reason="pykeops is not installed (optional: pip install -e '.[keops]')"
)


@pytest.fixture
def keops() -> None:
    """Skip (pykeops missing) or skip-after-loud-failure (pykeops broken) the numerical tests."""
    if not HAVE_PYKEOPS:
        pytest.skip("pykeops is not installed (optional: pip install -e '.[keops]')")
    if not ck.keops_available():
        pytest.skip("pykeops is installed but broken: see test_keops_available_when_installed")


needs_keops = pytest.mark.usefixtures("keops")


def reference(v: torch.Tensor, z: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Broadcast formula: Σ_m v[h, r, m] / (z[l] − w[h, m])."""
    return (v[:, :, None, :] / (z[None, None, :, None] - w[:, None, None, :])).sum(-1)


def make_inputs(
    H: int, R: int, M: int, Lz: int, dtype: torch.dtype = torch.complex64, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """S4-like data: poles w in the left half-plane, nodes z on the imaginary axis."""
    g = torch.Generator().manual_seed(seed)
    real = torch.float64
    v = torch.complex(torch.randn(H, R, M, generator=g), torch.randn(H, R, M, generator=g))
    w = torch.complex(
        -(0.1 + torch.rand(H, M, generator=g, dtype=real)),
        3.0 * torch.randn(H, M, generator=g, dtype=real),
    )
    z = 1j * torch.linspace(-10.0, 10.0, Lz, dtype=real)
    return v.to(dtype), z.to(dtype), w.to(dtype)


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    b = b.to(torch.complex128)
    return ((a.to(torch.complex128) - b).abs().max() / b.abs().max()).item()


@pytest.mark.parametrize(
    "command",
    [
        ["/nonexistent/python", "-c", "pass"],  # cannot start
        [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"],  # crash
        [sys.executable, "-c", "raise SystemExit(3)"],  # fails
        [sys.executable, "-c", "print('no ok marker')"],  # exits 0 without the OK marker
    ],
    ids=["missing", "segfault", "exit3", "no-marker"],
)
def test_keops_available_never_raises(monkeypatch: pytest.MonkeyPatch, command: list[str]) -> None:
    if not HAVE_PYKEOPS:  # the probe is not even started then; covered by the early return
        assert ck.keops_available.__wrapped__() is False
        return
    monkeypatch.setattr(ck, "_probe_command", lambda: command)
    assert ck.keops_available.__wrapped__() is False
    assert ck._probe_detail


@needs_pykeops
def test_keops_available_when_installed() -> None:
    assert ck.keops_available(), ck._probe_detail
    hits = ck.keops_available.cache_info().hits
    assert ck.keops_available() is True
    assert ck.keops_available.cache_info().hits == hits + 1


@needs_keops
@pytest.mark.parametrize(
    "dtype, tol", [(torch.complex64, 1e-5), (torch.complex128, 1e-12)], ids=["c64", "c128"]
)
def test_forward_matches_reference(dtype: torch.dtype, tol: float) -> None:
    v, z, w = make_inputs(4, 3, 16, 257, dtype)
    out = ck.cauchy_keops(v, z, w)
    assert out.shape == (4, 3, 257)
    assert out.dtype == dtype
    ref = reference(*(t.to(torch.complex128) for t in (v, z, w)))
    assert rel_err(out, ref) < tol


@needs_keops
@pytest.mark.parametrize(
    "dtype, tol", [(torch.complex64, 1e-5), (torch.complex128, 1e-12)], ids=["c64", "c128"]
)
def test_gradients_match_reference(dtype: torch.dtype, tol: float) -> None:
    v, z, w = make_inputs(4, 3, 16, 257, dtype, seed=1)
    g = torch.randn(4, 3, 257, dtype=torch.complex128, generator=torch.Generator().manual_seed(2))

    vk, wk = v.clone().requires_grad_(), w.clone().requires_grad_()
    ck.cauchy_keops(vk, z, wk).backward(g.to(dtype))

    vr = v.to(torch.complex128).requires_grad_()
    wr = w.to(torch.complex128).requires_grad_()
    reference(vr, z.to(torch.complex128), wr).backward(g)

    assert vk.grad is not None and wk.grad is not None
    assert vk.grad.dtype == dtype and wk.grad.dtype == dtype
    assert rel_err(vk.grad, vr.grad) < tol
    assert rel_err(wk.grad, wr.grad) < tol


@needs_keops
def test_gradients_match_closed_form() -> None:
    """grad_v = Σ_l g·conj(1/(z−w)), grad_w = Σ_r Σ_l g·conj(v/(z−w)²) (the stated contract)."""
    v, z, w = make_inputs(2, 2, 5, 33, torch.complex128, seed=3)
    g = torch.randn(2, 2, 33, dtype=torch.complex128, generator=torch.Generator().manual_seed(4))
    vk, wk = v.clone().requires_grad_(), w.clone().requires_grad_()
    ck.cauchy_keops(vk, z, wk).backward(g)
    inv = 1.0 / (z[None, None, :, None] - w[:, None, None, :])  # (H, 1, Lz, M)
    grad_v = (g[..., None] * inv.conj()).sum(2)
    grad_w = (g[..., None] * (v[:, :, None, :] * inv**2).conj()).sum((1, 2))
    assert rel_err(vk.grad, grad_v) < 1e-12
    assert rel_err(wk.grad, grad_w) < 1e-12


@needs_keops
def test_gradcheck_complex128() -> None:
    v, z, w = make_inputs(2, 2, 3, 5, torch.complex128, seed=5)
    v.requires_grad_()
    w.requires_grad_()
    assert torch.autograd.gradcheck(lambda a, b: ck.cauchy_keops(a, z, b), (v, w))


@needs_keops
@pytest.mark.parametrize("which", ["v", "w"])
def test_partial_requires_grad(which: str) -> None:
    v, z, w = make_inputs(3, 2, 4, 17, torch.complex128, seed=6)
    (v if which == "v" else w).requires_grad_()
    ck.cauchy_keops(v, z, w).abs().sum().backward()
    assert (v.grad is not None) == (which == "v")
    assert (w.grad is not None) == (which == "w")


@needs_keops
@pytest.mark.parametrize("shape", [(1, 1, 1, 1), (5, 1, 7, 3), (2, 4, 1, 9)])
def test_odd_shapes(shape: tuple[int, int, int, int]) -> None:
    v, z, w = make_inputs(*shape, torch.complex128, seed=7)
    assert rel_err(ck.cauchy_keops(v, z, w), reference(v, z, w)) < 1e-12


@needs_keops
def test_noncontiguous_conj_and_mixed_dtype_inputs() -> None:
    v, z, w = make_inputs(3, 4, 6, 21, torch.complex64, seed=8)
    v_nc = v.transpose(0, 1).contiguous().transpose(0, 1)  # same values, strided
    w_conj = w.conj()  # lazy conjugate view
    z128 = z.to(torch.complex128)  # cast to v's dtype inside
    out = ck.cauchy_keops(v_nc, z128, w_conj)
    assert out.dtype == torch.complex64
    ref = reference(v.to(torch.complex128), z128, w.conj().resolve_conj().to(torch.complex128))
    assert rel_err(out, ref) < 1e-5


def test_shape_validation() -> None:
    v, z, w = make_inputs(2, 2, 3, 4, torch.complex64)
    with pytest.raises(ValueError):
        ck.cauchy_keops(v, z, w[:, :2])
    with pytest.raises(ValueError):
        ck.cauchy_keops(v.real, z, w)
    with pytest.raises(ValueError):
        ck.cauchy_keops(v[0], z, w)


def test_empty_sum_is_zero() -> None:
    v, z, w = make_inputs(2, 3, 0, 4, torch.complex64)
    v.requires_grad_()
    out = ck.cauchy_keops(v, z, w)
    assert out.shape == (2, 3, 4) and bool((out == 0).all())
    out.abs().sum().backward()
