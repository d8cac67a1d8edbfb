"""The Triton kernel of the LTC recurrence (liquid_stream/nn/ltc_triton.py): forward and
gradients against the literal loop in float64 (shapes at the edges of its tiling and
segments), float32 accuracy over 16 000 steps, chunks carrying the state, and the dispatch.

On a CUDA device with Triton the compiled kernels run; on the CPU, where Triton is installed,
the same kernels run through Triton's interpreter (``TRITON_INTERPRET=1``, in a subprocess
so that the compiled and interpreted kernels never meet in one process). Without Triton
(CI) everything here is skipped: Triton is never a dependency."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from test_ltc_kernel import coefs, literal, random_system, rel

from liquid_stream.nn import ltc_triton as lt
from liquid_stream.nn.ltc import LTCSystem, ltc_path, ltc_scan

HAS_TRITON = importlib.util.find_spec("triton") is not None
CUDA = HAS_TRITON and torch.cuda.is_available()
K = lt.SEGMENT
# (B, H, M, L): one step; L < K; several segments with a partial last one; B·H above one
# program's channels; M not a power of two; M = 1.
SHAPES = [(1, 1, 3, 1), (1, 1, 3, 50), (2, 5, 3, 2 * K + 7), (3, 70, 4, 40), (2, 3, 1, K)]


def _kernel(u, A, Bl, Bb, C, x0):
    return lt.ltc_triton(u, A, Bl, Bb, C, x0, 2.0)


def _outputs_and_grads(fn, device, inputs, wy, wx):
    """[y, x_{L−1}, ∂ℓ/∂(u, Ā, B̃, B̄, C, x0)] of ℓ = Σ y·wy + Re Σ x·wx."""
    ins = [t.to(device).requires_grad_() for t in inputs]
    y, x = fn(*ins)
    loss = (y * wy.to(device)).sum() + (x * wx.to(device)).real.sum()
    return [y, x, *torch.autograd.grad(loss, ins)]


def check_against_literal(device: str, shapes=SHAPES) -> None:
    """y, x_{L−1} and the gradients of every input equal autograd through the literal loop
    (float64, relative 1e-9)."""
    names = ["y", "x_last", "u", "A", "Bl", "Bb", "C", "x0"]
    for B, H, M, L in shapes:
        system = random_system(H, M, seed=L + H)
        g = torch.Generator().manual_seed(1)
        u = 2 * torch.randn(B, H, L, generator=g, dtype=torch.float64)
        x0 = torch.randn(B, H, M, generator=g, dtype=torch.complex128)
        wy = torch.randn(B, H, L, generator=g, dtype=torch.float64)
        wx = torch.randn(B, H, M, generator=g, dtype=torch.complex128)
        inputs = (u, *coefs(system), x0)
        ours = _outputs_and_grads(_kernel, device, inputs, wy, wx)
        ref = _outputs_and_grads(lambda *ins: literal(*ins, 2.0), "cpu", inputs, wy, wx)
        for name, a, b in zip(names, ours, ref, strict=True):
            assert rel(a.detach().cpu(), b.detach()) < 1e-9, ((B, H, M, L), name)


def _interpreter_runs_loops() -> bool:
    """Whether this Triton's interpreter runs a loop with a runtime bound (Triton 3.6's
    interpreter cannot under numpy ≥ 2.3: ``int()`` of a 1-element array)."""
    code = (
        "import torch, triton, triton.language as tl\n"
        "@triton.jit\n"
        "def k(x, n):\n"
        "    for t in range(0, n):\n"
        "        tl.store(x + t, t)\n"
        "x = torch.zeros(3, dtype=torch.int32)\n"
        "k[(1,)](x, 3)\n"
        "assert x.tolist() == [0, 1, 2]\n"
    )
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True)
    return done.returncode == 0


@pytest.mark.skipif(not HAS_TRITON, reason="Triton is not installed (never a dependency)")
def test_interpreted_kernels_equal_the_literal_loop():
    """The kernels' arithmetic, checked on the CPU through Triton's interpreter."""
    if not _interpreter_runs_loops():
        pytest.skip("this Triton's interpreter cannot run loops with a runtime bound here")
    tests = Path(__file__).resolve().parent
    code = (
        f"import sys; sys.path[:0] = [{str(tests)!r}, {str(tests.parents[1])!r}]\n"
        "from test_ltc_triton import check_against_literal\n"
        "check_against_literal('cpu')\n"
    )
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]


cuda = pytest.mark.skipif(not CUDA, reason="needs Triton and a CUDA device")


@cuda
def test_cuda_kernels_equal_the_literal_loop():
    check_against_literal("cuda")


@cuda
def test_cuda_dispatch_and_float32_over_16000_steps(monkeypatch):
    """On CUDA, ``auto`` and ``fused`` pick the Triton kernel; float32 is within 1e-5 of
    float64 over 16 000 steps (LegS init, Δ down to 1e-3), forward and gradient."""
    from liquid_stream import LiquidS4
    from liquid_stream.nn.ltc import ltc_system

    torch.manual_seed(0)
    layer = LiquidS4(4, d_state=64, mode="diag", liquid="ltc", dt_min=1e-3, dt_max=0.1)
    with torch.no_grad():
        s32 = ltc_system(layer.kernel, 1.0, torch.float32)
    s32 = LTCSystem(*(c.cuda() for c in coefs(s32)), scale=s32.scale)
    s64 = LTCSystem(*(c.to(torch.complex128) for c in coefs(s32)), scale=s32.scale)
    u = torch.randn(2, 4, 16000, device="cuda")
    for choice in ("auto", "fused"):
        monkeypatch.setenv("LIQUID_STREAM_LTC_KERNEL", choice)
        assert ltc_path(u, s32) == ltc_path(u.double(), s64) == "triton"
    monkeypatch.setenv("LIQUID_STREAM_LTC_KERNEL", "torch")
    assert ltc_path(u, s32) == "torch"
    monkeypatch.delenv("LIQUID_STREAM_LTC_KERNEL")
    u32, u64 = u.clone().requires_grad_(), u.double().requires_grad_()
    y32, x32 = ltc_scan(u32, s32)
    y64, x64 = ltc_scan(u64, s64)
    assert rel(y32, y64) < 1e-5 and rel(x32, x64) < 1e-5
    w = torch.randn(2, 4, 16000, device="cuda")
    (y32 * w).sum().backward()
    (y64 * w.double()).sum().backward()
    assert rel(u32.grad, u64.grad) < 1e-5


@cuda
def test_cuda_kernel_equals_the_torch_scan_through_the_layer(monkeypatch):
    """A float64 layer on CUDA: Triton kernel vs the torch scan, output and every gradient;
    chunks with the carried state equal the whole sequence."""
    from test_ltc import ltc_layer

    layer = ltc_layer(H=5, N=6, dt_min=0.05, dt_max=0.5).cuda()
    u = torch.randn(2, 3 * K + 5, 5, dtype=torch.float64, device="cuda")

    def grads(kernel):
        monkeypatch.setenv("LIQUID_STREAM_LTC_KERNEL", kernel)
        layer.zero_grad(set_to_none=True)
        v = u.clone().requires_grad_()
        y = layer(v)
        y.sin().sum().backward()
        return [y.detach(), v.grad] + [p.grad for p in layer.parameters()]

    for a, b in zip(grads("fused"), grads("torch"), strict=True):
        assert rel(a, b) < 1e-10
    system = random_system(3, 4, seed=6)
    system = LTCSystem(*(c.cuda() for c in coefs(system)), scale=system.scale)
    v = torch.randn(2, 3, 1000, dtype=torch.float64, device="cuda")
    y, x = ltc_scan(v, system)
    ys, xc = [], None
    for c in torch.split(v, [1, 7, 160, 300, 532], dim=-1):
        yc, xc = ltc_scan(c, system, xc)
        ys.append(yc)
    assert rel(torch.cat(ys, -1), y) < 1e-12 and rel(xc, x) < 1e-12
