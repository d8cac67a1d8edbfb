"""A fused CPU kernel for the LTC recurrence (:mod:`liquid_stream.nn.ltc`): forward and backward
of ``_LTCScan`` as one sequential C++ scan per channel, compiled at first use.

Per channel (b, h) and mode m, exactly the recurrence of :mod:`liquid_stream.nn.ltc`:

    a_t = Ā + B̃ g_t,  g_t = tanh(u_t),   x_t = a_t x_{t−1} + B̄ u_t,   y_t = s·Re Σ_m C_m x_t

The C++ source (forward and backward: the algorithm) and its build live in
:mod:`liquid_stream.runtime.ltc_cpp`, which has no torch import (onnxruntime's custom op of
the same scan, :mod:`liquid_stream.runtime.ltc_ort`, compiles it too). This module calls it through
ctypes on the tensors' memory.

**Threads.** Channel groups are shared out over ``torch.get_num_threads()`` threads (one
thread below ~65 k mode-steps); every channel's sums have one owner, so the result does not
depend on the thread count.

**Selection.** ``LIQUID_STREAM_LTC_KERNEL=torch|fused|auto`` (default ``auto``; read at every
call): see :func:`liquid_stream.nn.ltc.ltc_scan`.
"""

from __future__ import annotations

import ctypes
import functools
import os
import subprocess
import warnings

import torch
from torch import Tensor

from ..runtime.ltc_cpp import SEGMENT, SERIAL_BELOW, build, compiler

KERNEL_ENV = "LIQUID_STREAM_LTC_KERNEL"
KERNEL_CHOICES = ("auto", "fused", "torch")
LANES = {torch.float32: 16, torch.float64: 8}  # W: channels per group (one AVX-512 register)


def kernel_choice() -> str:
    """``$LIQUID_STREAM_LTC_KERNEL`` (``auto`` when unset or empty); a clear error otherwise."""
    choice = os.environ.get(KERNEL_ENV, "").strip().lower() or "auto"
    if choice not in KERNEL_CHOICES:
        raise ValueError(
            f"{KERNEL_ENV}={os.environ[KERNEL_ENV]!r}: expected one of {', '.join(KERNEL_CHOICES)}"
        )
    return choice


@functools.cache
def library() -> ctypes.CDLL | None:
    """The compiled kernel (built at the first call of a process, then loaded from the
    cache); None, with one warning, when there is no compiler or the build fails."""
    cxx = compiler()
    if cxx is None:
        warnings.warn(
            f"LTC fused kernel: no C++ compiler ({os.environ.get('CXX') or 'g++'}) "
            "found; using the torch scan",
            RuntimeWarning,
            stacklevel=2,
        )
        return None
    try:
        lib = ctypes.CDLL(str(build(cxx)))
    except (OSError, RuntimeError, subprocess.SubprocessError) as e:
        warnings.warn(
            f"LTC fused kernel unavailable ({e}); using the torch scan",
            RuntimeWarning,
            stacklevel=2,
        )
        return None
    i64, ptr, dbl, i32 = ctypes.c_int64, ctypes.c_void_p, ctypes.c_double, ctypes.c_int
    for t in ("f32", "f64"):
        fwd, bwd = getattr(lib, f"ltc_forward_{t}"), getattr(lib, f"ltc_backward_{t}")
        fwd.argtypes = [ptr] * 10 + [i64] * 5 + [dbl, i32]
        bwd.argtypes = [ptr] * 12 + [i64] * 5 + [dbl, i32]
        fwd.restype = bwd.restype = None
    return lib


def available() -> bool:
    """Whether the fused kernel can run here (builds it on the first call)."""
    return library() is not None


def supports(u: Tensor, A: Tensor, x0: Tensor | None) -> bool:
    """Whether the kernel takes these operands: on the CPU, u float32 with complex64
    coefficients or float64 with complex128, and at least one step."""
    ctype = {torch.float32: torch.complex64, torch.float64: torch.complex128}.get(u.dtype)
    return (
        u.device.type == "cpu"
        and A.dtype == ctype
        and (x0 is None or (x0.dtype == ctype and x0.device.type == "cpu"))
        and u.shape[-1] > 0
    )


def _threads(work: int) -> int:
    return 1 if work < SERIAL_BELOW else torch.get_num_threads()


def _real(z: Tensor) -> Tensor:
    """Contiguous (…, 2) real view of a complex tensor (conjugate views resolved)."""
    return torch.view_as_real(z.detach().resolve_conj().contiguous())


def _ptr(t: Tensor | None) -> int | None:
    return None if t is None else t.data_ptr()


def _forward(u: Tensor, g: Tensor, coefs, x0: Tensor, scale: float, keep: bool):
    """Kernel forward on time-first ``u, g (L, B, H)``: (y (L, B, H), x_last (B, H, M, 2),
    checkpoints (n_seg, B, H, M, 2) or None)."""
    L, B, H = u.shape
    M = coefs[0].shape[1]
    dt = u.dtype
    y = torch.empty_like(u)
    xlast = torch.empty(B, H, M, 2, dtype=dt)
    ckpt = torch.empty(-(-L // SEGMENT), B, H, M, 2, dtype=dt) if keep else None
    fn = library().ltc_forward_f32 if dt == torch.float32 else library().ltc_forward_f64
    fn(
        u.data_ptr(),
        g.data_ptr(),
        *(c.data_ptr() for c in coefs),
        x0.data_ptr(),
        y.data_ptr(),
        xlast.data_ptr(),
        _ptr(ckpt),
        L,
        B * H,
        H,
        M,
        SEGMENT,
        scale,
        _threads(L * B * H * M),
    )
    return y, xlast, ckpt


class _LTCFused(torch.autograd.Function):
    """y, x_last = LTC(u) (time-first ``u (L, B, H)``) by the fused kernel; the same inputs,
    outputs and gradients as :class:`liquid_stream.nn.ltc._LTCScan`."""

    @staticmethod
    def forward(ctx, u, A, Bl, Bb, C, x0, scale):
        u = u.detach().contiguous()
        g = torch.tanh(u)
        coefs = [_real(c) for c in (A, Bl, Bb, C)]
        y, xlast, ckpt = _forward(u, g, coefs, _real(x0), scale, keep=True)
        ctx.save_for_backward(u, g, ckpt, *coefs)
        ctx.scale, ctx.ctype = scale, A.dtype
        return y, torch.view_as_complex(xlast)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, gy, gx_last):
        u, g, ckpt, *coefs = ctx.saved_tensors
        L, B, H = u.shape
        M = coefs[0].shape[1]
        dt = u.dtype
        gy = torch.zeros_like(u) if gy is None else gy.contiguous()
        gxl = torch.zeros(B, H, M, 2, dtype=dt) if gx_last is None else _real(gx_last)
        gu = torch.empty_like(u)
        gx0 = torch.empty(B, H, M, 2, dtype=dt)
        gcoef = torch.empty(B, H, 4, M, 2, dtype=dt)
        fn = library().ltc_backward_f32 if dt == torch.float32 else library().ltc_backward_f64
        fn(
            u.data_ptr(),
            g.data_ptr(),
            gy.data_ptr(),
            *(c.data_ptr() for c in coefs),
            gxl.data_ptr(),
            ckpt.data_ptr(),
            gu.data_ptr(),
            gx0.data_ptr(),
            gcoef.data_ptr(),
            L,
            B * H,
            H,
            M,
            SEGMENT,
            ctx.scale,
            _threads(L * B * H * M),
        )
        gA, gBl, gBb, gC = torch.view_as_complex(gcoef.sum(0)).unbind(1)  # (H, M) each
        return gu, gA, gBl, gBb, gC, torch.view_as_complex(gx0), None


def ltc_fused(
    u: Tensor, A: Tensor, Bl: Tensor, Bb: Tensor, C: Tensor, x0: Tensor, scale: float
) -> tuple[Tensor, Tensor]:
    """The LTC scan by the fused kernel: time-first ``u (L, B, H)``, complex ``(H, M)``
    coefficients Ā, B̃, B̄, C, ``x0 (B, H, M)`` → (y ``(L, B, H)``, x_{L−1} ``(B, H, M)``).
    Differentiable in every tensor argument; without autograd no checkpoints are kept."""
    if torch.is_grad_enabled() and any(t.requires_grad for t in (u, A, Bl, Bb, C, x0)):
        return _LTCFused.apply(u, A, Bl, Bb, C, x0, scale)
    u = u.contiguous()
    coefs = [_real(c) for c in (A, Bl, Bb, C)]
    y, xlast, _ = _forward(u, torch.tanh(u), coefs, _real(x0), scale, keep=False)
    return y, torch.view_as_complex(xlast)
