"""KeOps backend for the Cauchy sum of the DPLR (S4-LegS) kernel.

Contract (same as :func:`liquid_stream.nn.cauchy.cauchy_torch`)::

    out[h, r, l] = Σ_m v[h, r, m] / (z[l] − w[h, m])

with ``v (H, R, M)``, ``z (Lz,)``, ``w (H, M)`` complex; the result is ``(H, R, Lz)`` with the
dtype of ``v`` (complex64 or complex128; ``z`` and ``w`` are cast to it).

Gradients follow torch's complex autograd convention (conjugate Wirtinger derivative: for a
holomorphic map, ``grad_in = grad_out · conj(∂out/∂in)``). With ``g = grad_out``::

    grad_v[h, r, m] = Σ_l g[h, r, l] · conj(1 / (z_l − w_hm))
    grad_w[h, m]    = Σ_r Σ_l g[h, r, l] · conj(v_hrm / (z_l − w_hm)²)
                    = Σ_r conj(v_hrm) · A[h, r, m]
    A[h, r, m]      = Σ_l g[h, r, l] / conj(z_l − w_hm)²

``z`` receives no gradient (it is a fixed set of evaluation nodes).

Implementation: two KeOps ``Genred`` sum reductions on ``view_as_real`` data, with ``(H, R)`` as
KeOps batch dimensions (``z`` and ``w`` broadcast over them), so the compiled formulas do not
depend on ``R``, ``M`` or ``Lz`` and each dtype compiles exactly one forward and one backward
formula (≈15 s each, once per machine; later processes load them from the KeOps cache, see
``KEOPS_CACHE_FOLDER``):

* forward, ``i = l`` (Lz), ``j = m`` (M):  ``Σ_j v_j / (z_i − w_j)``
* backward, ``i = m``, ``j = l``, one pass giving both ``Σ_j g_j q_ij`` and ``Σ_j g_j q_ij²``
  with ``q_ij = 1 / conj(z_j − w_i) = (z_j − w_i) / |z_j − w_i|²``.

Memory is O(H·R·(M + Lz)): no ``(H, M, Lz)`` block is ever materialised.

KeOps console output (including the "CUDA libraries not found" warning on CPU-only machines) is
silenced unless ``PYKEOPS_VERBOSE=1`` is set in the environment.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import io
import os
import subprocess
import sys
from typing import Any

import torch
from torch import Tensor

__all__ = ["cauchy_keops", "keops_available"]

_FWD_FORMULA = "ComplexDivide(v, z - w)"
# q = 1 / conj(z - w) = (z - w) / |z - w|^2 ; outputs [Σ g·q, Σ g·q²] (each a complex scalar).
_Q = "ComplexRealScal(Inv(ComplexSquareAbs(z - w)), z - w)"
_BWD_FORMULA = f"Concat(ComplexMult(g, {_Q}), ComplexMult(ComplexMult(g, {_Q}), {_Q}))"


def _import_pykeops() -> Any:
    """Import pykeops quietly (unless ``PYKEOPS_VERBOSE=1``) and return the module."""
    verbose = os.environ.get("PYKEOPS_VERBOSE") == "1"
    sink = contextlib.nullcontext() if verbose else contextlib.redirect_stdout(io.StringIO())
    with sink:
        import pykeops  # optional dependency, imported lazily

        if not verbose:
            pykeops.set_verbose(False)
    return pykeops


@functools.cache
def _reductions() -> tuple[Any, Any]:
    """The (forward, backward) KeOps reductions; built once (compilation happens on first call)."""
    _import_pykeops()
    from pykeops.torch import Genred

    fwd = Genred(
        _FWD_FORMULA,
        ["v = Vj(2)", "z = Vi(2)", "w = Vj(2)"],
        reduction_op="Sum",
        axis=1,
    )
    bwd = Genred(
        _BWD_FORMULA,
        ["g = Vj(2)", "z = Vj(2)", "w = Vi(2)"],
        reduction_op="Sum",
        axis=1,
    )
    return fwd, bwd


def _as_real(x: Tensor) -> Tensor:
    """Contiguous real view ``(..., 2)`` of a complex tensor (resolving lazy conj/neg bits)."""
    return torch.view_as_real(x.resolve_conj().resolve_neg().contiguous())


def _quiet_call(fn: Any, *args: Tensor) -> Tensor:
    """Call a KeOps reduction on the device of its inputs, hiding compile chatter.

    The backend is explicit: KeOps' ``"auto"`` runs CPU tensors on the GPU whenever it finds
    CUDA, which would make the CPU path depend on a working KeOps CUDA build.
    """
    backend = "CPU" if args[0].device.type == "cpu" else "GPU"
    if os.environ.get("PYKEOPS_VERBOSE") == "1":
        return fn(*args, backend=backend)
    with contextlib.redirect_stdout(io.StringIO()):
        return fn(*args, backend=backend)


class _CauchyKeOps(torch.autograd.Function):
    """Cauchy sum with a KeOps forward and a single-pass KeOps backward."""

    @staticmethod
    def forward(ctx: Any, v: Tensor, z: Tensor, w: Tensor) -> Tensor:  # type: ignore[override]
        H, R, M = v.shape
        Lz = z.shape[0]
        fwd, _ = _reductions()
        zr = _as_real(z).reshape(1, 1, Lz, 2)
        wr = _as_real(w).reshape(H, 1, M, 2)
        out = _quiet_call(fwd, _as_real(v), zr, wr)  # (H, R, Lz, 2)
        ctx.save_for_backward(v, z, w)
        return torch.view_as_complex(out)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, g: Tensor) -> tuple[Tensor | None, None, Tensor | None]:  # type: ignore[override]
        v, z, w = ctx.saved_tensors
        need_v, _, need_w = ctx.needs_input_grad
        if not (need_v or need_w):
            return None, None, None
        H, R, M = v.shape
        Lz = z.shape[0]
        _, bwd = _reductions()
        zr = _as_real(z).reshape(1, 1, Lz, 2)
        wr = _as_real(w).reshape(H, 1, M, 2)
        out = _quiet_call(bwd, _as_real(g.to(v.dtype)), zr, wr)  # (H, R, M, 4)
        grad_v = torch.view_as_complex(out[..., :2].contiguous()) if need_v else None
        grad_w = None
        if need_w:
            acc = torch.view_as_complex(out[..., 2:].contiguous())  # Σ_l g / conj(z − w)²
            grad_w = (acc * v.conj()).sum(1)
        return grad_v, None, grad_w


def cauchy_keops(v: Tensor, z: Tensor, w: Tensor) -> Tensor:
    """Cauchy sum ``out[h, r, l] = Σ_m v[h, r, m] / (z[l] − w[h, m])`` on KeOps.

    Args:
        v: ``(H, R, M)`` complex64 or complex128; differentiable.
        z: ``(Lz,)`` complex evaluation nodes; cast to ``v.dtype``; receives no gradient.
        w: ``(H, M)`` complex poles; cast to ``v.dtype``; differentiable.

    Returns:
        ``(H, R, Lz)`` tensor with the dtype and device of ``v``.

    Raises:
        ValueError: on wrong ranks/shapes or a non-complex ``v``.
        ImportError: if pykeops is not installed (check :func:`keops_available` first).
    """
    if v.dim() != 3 or z.dim() != 1 or w.dim() != 2:
        raise ValueError(
            f"expected v (H, R, M), z (Lz,), w (H, M); got {tuple(v.shape)}, "
            f"{tuple(z.shape)}, {tuple(w.shape)}"
        )
    H, R, M = v.shape
    if tuple(w.shape) != (H, M):
        raise ValueError(f"w must have shape (H, M) = {(H, M)}, got {tuple(w.shape)}")
    if v.dtype not in (torch.complex64, torch.complex128):
        raise ValueError(f"v must be complex64 or complex128, got {v.dtype}")
    z = z.detach().to(device=v.device, dtype=v.dtype)
    w = w.to(device=v.device, dtype=v.dtype)
    Lz = z.shape[0]
    if H == 0 or R == 0 or Lz == 0 or M == 0:
        # Empty sum or empty output: zeros, still connected to v and w for autograd.
        return v.new_zeros(H, R, Lz) + 0 * (v.sum() + w.sum())
    return _CauchyKeOps.apply(v, z, w)


_PROBE_OK = "LIQUID_STREAM_KEOPS_PROBE_OK"
_PROBE_TIMEOUT_S = 600.0
_probe_detail = ""  # why the last probe failed (for error messages); "" when it passed


def _probe_in_this_process(device: str) -> None:
    """Raise unless a tiny complex64 forward+backward on ``device`` matches the broadcast formula.

    Compiles (or loads from the KeOps cache) both complex64 formulas for that device.
    """
    _import_pykeops()
    gen = torch.Generator().manual_seed(0)
    v = torch.randn(2, 2, 3, dtype=torch.complex64, generator=gen)
    w = torch.complex(-0.5 - torch.rand(2, 3, generator=gen), torch.randn(2, 3, generator=gen))
    z = torch.exp(2j * torch.pi * torch.arange(5) / 5).to(torch.complex64)
    z = z.to(device)
    v = v.to(device).requires_grad_()
    w = w.to(device).requires_grad_()
    out = cauchy_keops(v, z, w)
    out.abs().square().sum().backward()
    vr, wr = v.detach().requires_grad_(), w.detach().requires_grad_()
    ref = (vr[:, :, None, :] / (z[None, None, :, None] - wr[:, None, None, :])).sum(-1)
    ref.abs().square().sum().backward()
    for a, b in ((out, ref), (v.grad, vr.grad), (w.grad, wr.grad)):
        if a is None or not torch.allclose(a, b, rtol=1e-4, atol=1e-4):
            raise RuntimeError(f"KeOps Cauchy sum on {device} disagrees with the torch formula")


def _probe_main() -> None:
    """Entry point of the probe subprocess: check every available device, then print OK."""
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    for device in devices:
        _probe_in_this_process(device)
    print(_PROBE_OK, flush=True)


def _probe_command() -> list[str]:
    """Command running :func:`_probe_main` from this file, without importing the package."""
    code = (
        "import importlib.util as u, sys; "
        "s = u.spec_from_file_location('_liquid_stream_keops_probe', sys.argv[1]); "
        "m = u.module_from_spec(s); s.loader.exec_module(m); m._probe_main()"
    )
    return [sys.executable, "-c", code, os.path.abspath(__file__)]


@functools.cache
def keops_available() -> bool:
    """True when pykeops imports, compiles and computes a tiny Cauchy sum (value and gradients)
    correctly on the CPU and, if torch sees CUDA, on the GPU too.

    Evaluated once per process and cached. Never raises, and never crashes the caller: the check
    runs in a subprocess, because a broken KeOps build can kill the process outright (seen: the
    KeOps 2.3 CUDA JIT segfaults with CUDA 13). Any failure (pykeops missing, no C++ compiler, a
    build error, a crash, a timeout) gives ``False``; the reason is kept in ``_probe_detail``.
    The first check on a machine compiles the two complex64 formulas per device (≈15 s each on
    CPU; later runs load them from the KeOps cache, ``KEOPS_CACHE_FOLDER``).
    """
    global _probe_detail
    try:
        if importlib.util.find_spec("pykeops") is None:
            _probe_detail = "pykeops is not installed"
            return False
        res = subprocess.run(
            _probe_command(),
            capture_output=True,
            text=True,
            timeout=_PROBE_TIMEOUT_S,
            env=os.environ.copy(),
            stdin=subprocess.DEVNULL,
        )
    except (Exception, SystemExit) as exc:  # "not available" for any failure
        _probe_detail = f"KeOps probe could not run: {exc!r}"
        return False
    if res.returncode == 0 and _PROBE_OK in res.stdout:
        _probe_detail = ""
        return True
    tail = (res.stdout + res.stderr).strip()[-2000:]
    _probe_detail = f"KeOps probe failed (exit code {res.returncode}):\n{tail}"
    return False
