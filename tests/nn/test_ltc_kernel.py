"""The fused CPU kernel of the LTC recurrence (liquid_stream/nn/ltc_kernel.py): forward and
gradients against the literal loop in float64, against the torch scan, float32 accuracy over
16 000 steps, the shapes at the edges of its blocking, extreme inputs, and the switch that
selects it (``LIQUID_STREAM_LTC_KERNEL``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
import torch
from reference import recurrence_ltc
from test_ltc import ltc_layer, mats_of

from liquid_stream import LiquidS4
from liquid_stream.nn import ltc_kernel as lk
from liquid_stream.nn.ltc import LTC_RHO, LTCSystem, ltc_path, ltc_scan, ltc_system

pytestmark = pytest.mark.skipif(
    shutil.which(os.environ.get("CXX") or "g++") is None,
    reason="no C++ compiler (g++ or $CXX): the fused LTC kernel cannot be built here",
)

K = lk.SEGMENT


@pytest.fixture(scope="module", autouse=True)
def built():
    """Build (or load) the kernel once; with a compiler present, a failed build fails."""
    assert lk.available(), "the fused LTC kernel did not build (see the warning)"


@pytest.fixture
def fused(monkeypatch):
    monkeypatch.setenv(lk.KERNEL_ENV, "fused")


def rel(a, b):
    return ((a - b).abs().max() / b.abs().max()).item()


def literal(u, A, Bl, Bb, C, x0, s):
    """x_t = (Ā + B̃ tanh u_t) x_{t−1} + B̄ u_t, y_t = s·Re Σ C x_t, one autograd step per t:
    ``u (B, H, L)`` → (y (B, H, L), x_{L−1} (B, H, M))."""
    x, ys = x0, []
    for t in range(u.shape[-1]):
        ut = u[..., t, None]
        x = (A + Bl * torch.tanh(ut)) * x + Bb * ut
        ys.append(s * (C * x).sum(-1).real)
    return torch.stack(ys, -1), x


def random_system(H, M, seed=0, dtype=torch.complex128):
    """Coefficients as the layer makes them (|Ā| < 1, B̃ clamped), but random."""
    g = torch.Generator().manual_seed(seed)
    r = 0.5 + 0.49 * torch.rand(H, M, generator=g, dtype=torch.float64)
    A = r * torch.exp(1j * 3 * torch.rand(H, M, generator=g, dtype=torch.float64))
    Bb = 0.3 * torch.randn(H, M, generator=g, dtype=torch.complex128)
    Bl = Bb * torch.clamp(LTC_RHO * (1 - A.abs()) / Bb.abs(), max=1.0)
    C = torch.randn(H, M, generator=g, dtype=torch.complex128)
    return LTCSystem(*(t.to(dtype) for t in (A, Bl, Bb, C)), scale=2.0)


def coefs(system):
    return [system.A_bar, system.B_liq, system.B_bar, system.C]


# (B, H, M, L): L < K, L = K, L not a multiple of K, several segments; B·H = 1; B·H not a
# multiple of the lane count; more than one lane group.
SHAPES = [
    (1, 1, 3, 50),
    (2, 3, 4, K),
    (2, 3, 4, 3 * K + 17),
    (1, 1, 5, 2 * K + 1),
    (3, 7, 2, 300),
    (2, 11, 3, 140),
]


@pytest.mark.parametrize("with_x0", [False, True])
@pytest.mark.parametrize("shape", SHAPES)
def test_forward_equals_literal_loop_float64(shape, with_x0, fused):
    B, H, M, L = shape
    layer = ltc_layer(H=H, N=2 * M, seed=L)
    system = ltc_system(layer.kernel, 1.0, torch.float64)
    u = 2 * torch.randn(B, H, L, dtype=torch.float64)
    x0 = torch.randn(B, H, M, dtype=torch.complex128) if with_x0 else None
    assert ltc_path(u, system, x0) == "fused"
    y, x = ltc_scan(u, system, x0)
    mats = {**mats_of(layer), "D": torch.zeros(H, dtype=torch.float64)}
    y_ref, x_ref = recurrence_ltc(mats, u.transpose(1, 2), x0=x0)
    assert rel(y.transpose(1, 2), y_ref) < 1e-9 and rel(x, x_ref) < 1e-9
    y_t, x_t = ltc_scan(u, system, x0, block=8)  # the torch scan
    assert rel(y, y_t) < 1e-12 and rel(x, x_t) < 1e-12


@pytest.mark.parametrize("shape", [(2, 3, 4, 3 * K + 17), (1, 1, 3, 40), (3, 7, 2, K)])
def test_gradients_equal_autograd_through_the_loop(shape):
    """∂ of every input (u, Ā, B̃, B̄, C, x0), through outputs and the final state."""
    B, H, M, L = shape
    system = random_system(H, M, seed=L)
    g = torch.Generator().manual_seed(1)
    u = 2 * torch.randn(B, H, L, generator=g, dtype=torch.float64)
    x0 = torch.randn(B, H, M, generator=g, dtype=torch.complex128)
    wy = torch.randn(B, H, L, generator=g, dtype=torch.float64)
    wx = torch.randn(B, H, M, generator=g, dtype=torch.complex128)
    names = ["u", "A", "Bl", "Bb", "C", "x0"]

    def grads(run):
        ins = [t.clone().requires_grad_() for t in (u, *coefs(system), x0)]
        y, x = run(*ins)
        return torch.autograd.grad((y * wy).sum() + (x * wx).real.sum(), ins)

    def fused_run(u, A, Bl, Bb, C, x0):
        y, x = lk.ltc_fused(u.permute(2, 0, 1).contiguous(), A, Bl, Bb, C, x0, 2.0)
        return y.permute(1, 2, 0), x

    ours = grads(fused_run)
    ref = grads(lambda *ins: literal(*ins, 2.0))
    for name, a, b in zip(names, ours, ref, strict=True):
        assert b.abs().max() > 0, name
        assert rel(a, b) < 1e-9, name


def test_gradcheck_tiny():
    system = random_system(2, 2, seed=3)
    u = torch.randn(7, 1, 2, dtype=torch.float64, requires_grad=True)  # (L, B, H)
    ins = [t.clone().requires_grad_() for t in coefs(system)]
    x0 = torch.randn(1, 2, 2, dtype=torch.complex128, requires_grad=True)
    assert torch.autograd.gradcheck(lambda *a: lk.ltc_fused(*a, 2.0), (u, *ins, x0))


def test_layer_gradients_equal_the_torch_scan(monkeypatch):
    """Through the layer (the float64 coefficients' own graph), fused vs torch scan."""
    layer = ltc_layer(H=5, N=6, dt_min=0.05, dt_max=0.5)
    u = torch.randn(2, 3 * K + 5, 5, dtype=torch.float64)

    def grads(kernel):
        monkeypatch.setenv(lk.KERNEL_ENV, kernel)
        layer.zero_grad(set_to_none=True)
        v = u.clone().requires_grad_()
        layer(v).sin().sum().backward()
        return [v.grad] + [p.grad for p in layer.parameters()]

    for a, b in zip(grads("fused"), grads("torch"), strict=True):
        assert rel(a, b) < 1e-10


def test_float32_within_1e5_of_float64_over_16000_steps(fused):
    """The same coefficients (float32-representable) and inputs; only the arithmetic differs.
    LegS init with Δ down to 1e-3: modes with 1 − |Ā| ≈ 3e-5 sum ~10⁴ steps."""
    torch.manual_seed(0)
    layer = LiquidS4(4, d_state=64, mode="diag", liquid="ltc", dt_min=1e-3, dt_max=0.1)
    with torch.no_grad():
        s32 = ltc_system(layer.kernel, 1.0, torch.float32)
    s64 = LTCSystem(*(c.to(torch.complex128) for c in coefs(s32)), scale=s32.scale)
    u = torch.randn(2, 4, 16000)
    u32, u64 = u.clone().requires_grad_(), u.double().requires_grad_()
    y32, x32 = ltc_scan(u32, s32)
    y64, x64 = ltc_scan(u64, s64)
    assert ltc_path(u32, s32) == ltc_path(u64, s64) == "fused"
    assert rel(y32, y64) < 1e-5 and rel(x32, x64) < 1e-5
    w = torch.randn(2, 4, 16000)
    (y32 * w).sum().backward()
    (y64 * w.double()).sum().backward()
    assert rel(u32.grad, u64.grad) < 1e-5


def test_no_grad_inference_and_thread_count_change_nothing(fused):
    """Without autograd no checkpoints are kept; 1 or 2 threads: bit for bit the same."""
    system = random_system(16, 8, seed=5, dtype=torch.complex64)
    u = torch.randn(2, 16, 700)  # B·H·M·L above the serial threshold: threads are used
    assert u.numel() * 8 >= lk.SERIAL_BELOW
    n = torch.get_num_threads()
    try:
        outs = []
        for threads in (1, 2):
            torch.set_num_threads(threads)
            v = u.clone().requires_grad_()
            y, x = ltc_scan(v, system)
            y.square().sum().backward()
            with torch.no_grad():
                y_ng, x_ng = ltc_scan(u, system)
            outs.append((y.detach(), x.detach(), v.grad, y_ng, x_ng))
    finally:
        torch.set_num_threads(n)
    (y1, x1, g1, yn1, xn1), (y2, x2, g2, yn2, xn2) = outs
    assert torch.equal(y1, yn1) and torch.equal(x1, xn1)
    assert torch.equal(y1, y2) and torch.equal(x1, x2) and torch.equal(g1, g2)
    assert torch.equal(yn1, yn2) and torch.equal(xn1, xn2)


def test_chunks_carry_the_state(fused):
    """The step form's use: chunks with x0 = the previous chunk's last state."""
    system = random_system(3, 4, seed=6)
    u = torch.randn(2, 3, 1000, dtype=torch.float64)
    y, x = ltc_scan(u, system)
    ys, xc = [], None
    for c in torch.split(u, [1, 7, 160, 300, 532], dim=-1):
        yc, xc = ltc_scan(c, system, xc)
        ys.append(yc)
    assert rel(torch.cat(ys, -1), y) < 1e-12 and rel(xc, x) < 1e-12


def test_extreme_inputs_stay_finite(fused):
    """±1e4 inputs over 10⁵ steps (float32): finite, within the module bound of
    liquid_stream.nn.ltc, and gradients finite."""
    torch.manual_seed(0)
    layer = LiquidS4(4, d_state=16, mode="diag", liquid="ltc")
    system = ltc_system(layer.kernel)
    u = (1e4 * torch.sign(torch.randn(1, 4, 100_000))).requires_grad_()
    y, x = ltc_scan(u, system)
    bound = (system.B_bar.abs() * 1e4 / ((1 - LTC_RHO) * (1 - system.A_bar.abs()))).max()
    assert torch.isfinite(y).all() and torch.isfinite(x).all()
    assert x.abs().max() <= bound
    y.square().mean().backward()
    grads = [u.grad] + [p.grad for p in layer.parameters() if p.grad is not None]
    assert grads[1:] and all(torch.isfinite(g).all() for g in grads)


def backward_node(y):
    """The autograd node that produced ``ltc_scan``'s output (under its permute)."""
    return type(y.grad_fn.next_functions[0][0]).__name__


NODE = {"fused": "_LTCFusedBackward", "torch": "_LTCScanBackward"}


@pytest.mark.parametrize(
    "choice,path", [("fused", "fused"), ("torch", "torch"), ("auto", "fused"), ("", "fused")]
)
def test_switch_selects_the_path(monkeypatch, choice, path):
    monkeypatch.setenv(lk.KERNEL_ENV, choice)
    system = random_system(2, 3)
    u = torch.randn(1, 2, 20, dtype=torch.float64, requires_grad=True)
    assert ltc_path(u, system) == path
    y, _ = ltc_scan(u, system)
    assert backward_node(y) == NODE[path]


def test_auto_keeps_explicit_torch_scan_parameters_and_unsupported_dtypes(monkeypatch):
    """Under auto, ``block``/``max_elements`` (the torch scan's parameters) and operands the
    kernel does not take (float32 u with complex128 coefficients) run the torch scan."""
    monkeypatch.setenv(lk.KERNEL_ENV, "auto")
    system = random_system(2, 3)
    u = torch.randn(1, 2, 20, dtype=torch.float64, requires_grad=True)
    assert backward_node(ltc_scan(u, system, block=4)[0]) == NODE["torch"]
    assert backward_node(ltc_scan(u, system, max_elements=64)[0]) == NODE["torch"]
    assert ltc_path(u.float(), system) == "torch"
    monkeypatch.setenv(lk.KERNEL_ENV, "fused")
    assert backward_node(ltc_scan(u, system, block=4)[0]) == NODE["fused"]


def test_bad_switch_value_is_a_clear_error(monkeypatch):
    monkeypatch.setenv(lk.KERNEL_ENV, "cuda")
    with pytest.raises(ValueError, match="LIQUID_STREAM_LTC_KERNEL='cuda': expected one of"):
        ltc_scan(torch.randn(1, 2, 5, dtype=torch.float64), random_system(2, 3))


@pytest.mark.slow
def test_a_failed_build_warns_once_and_runs_the_torch_scan(tmp_path):
    """A compiler that fails (``CXX=false``): one warning, then the torch scan, no error, even
    when the kernel is asked for explicitly."""
    code = (
        "import warnings, torch\n"
        "from liquid_stream.nn.ltc import ltc_path, ltc_scan, ltc_system\n"
        "from liquid_stream import LiquidS4\n"
        "layer = LiquidS4(3, d_state=8, mode='diag', liquid='ltc')\n"
        "u = torch.randn(1, 3, 50)\n"
        "with warnings.catch_warnings(record=True) as w:\n"
        "    warnings.simplefilter('always')\n"
        "    for _ in range(3):\n"
        "        y = layer(u.transpose(1, 2))\n"
        "        y.sum().backward()\n"
        "    path = ltc_path(u, ltc_system(layer.kernel))\n"
        "print(path, len(w), str(w[0].message))\n"
    )
    env = {**os.environ, "CXX": "false", lk.KERNEL_ENV: "fused", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    path, n_warnings, message = done.stdout.strip().split(" ", 2)
    assert (path, n_warnings) == ("torch", "1")
    assert message.startswith("LTC fused kernel unavailable") and "\n" not in message
