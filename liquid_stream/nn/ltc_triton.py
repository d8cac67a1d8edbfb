"""A fused GPU kernel for the LTC recurrence (:mod:`liquid_stream.nn.ltc`), written in Triton:
forward and backward of ``_LTCScan`` as one sequential scan over time per block of channels.

Per channel c = b·H + h and mode m, exactly the recurrence of :mod:`liquid_stream.nn.ltc`:

    a_t = Ā + B̃ g_t,  g_t = tanh(u_t),   x_t = a_t x_{t−1} + B̄ u_t,   y_t = s·Re Σ_m C_m x_t

**Why.** The torch scan runs the recurrence as ~20 elementwise kernels per block position,
each writing and reading every state (B·H·M·L complex numbers) through GPU memory; measured
on an H200 (docs/benchmarks.md §1.4) LTC cost 16× PB. Here one program owns a tile of
``BC`` channels × ``BM`` modes, keeps its states in registers while it loops over time, and
touches memory only for u_t, g_t (read) and y_t (written): B·H·L numbers instead of
B·H·M·L states per pass.

**Forward.** Time is cut into segments of ``K`` steps; the state entering each segment is
stored (``(n_seg, B·H, M, 2)``, 1/K of the states) for the backward pass.

**Backward.** Segments in reverse: recompute the segment's K states from its checkpoint into
a per-program scratch buffer (global memory, written and read back by the same threads), then
run the adjoint backwards in time,

    λ_t = s·ȳ_t conj(C) + conj(a_{t+1}) λ_{t+1}   (for the last step: + ∂ℓ/∂x_{L−1})

and accumulate in registers exactly the gradients of ``_LTCScan.backward`` (PyTorch's
convention for complex gradients): with ga_t = λ_t conj(x_{t−1}),

    ∂ℓ/∂Ā = Σ ga_t,  ∂ℓ/∂B̃ = Σ ga_t g_t,  ∂ℓ/∂B̄ = Σ λ_t u_t,  ∂ℓ/∂C = s Σ ȳ_t conj(x_t),
    ∂ℓ/∂u_t = (1 − g_t²) Re Σ_m ga_t conj(B̃) + Re Σ_m λ_t conj(B̄),  ∂ℓ/∂x_{−1} = conj(a_0) λ_0,

summed over time per channel in the kernel, over the batch by torch. The same products and
sums of numbers of modulus < 1 as the torch path (no divisions, no reversed recurrence):
nothing new can overflow. float32 and float64 alike (the arithmetic is that of the inputs).

**When.** :func:`liquid_stream.nn.ltc.ltc_path` picks it for CUDA tensors when Triton imports
(``LIQUID_STREAM_LTC_KERNEL=torch|fused|auto``: ``fused`` means this kernel on a GPU and the
C++ kernel of :mod:`liquid_stream.nn.ltc_kernel` on the CPU). Triton is never a dependency:
without it the torch scan runs. ``TRITON_INTERPRET=1`` runs the same kernels on the CPU
through Triton's interpreter (slow; the tests use it where Triton is installed).
"""

from __future__ import annotations

import functools
import os

import torch
from torch import Tensor

from .ltc_kernel import _real  # contiguous (…, 2) real view of a complex tensor

SEGMENT = 128  # K: steps per checkpointed segment
BLOCK_ELEMENTS = 64  # BC·BM: channel-mode pairs per program (BC a power of two ≥ 1)
NUM_WARPS = 1


@functools.cache
def _triton():
    """The kernels module (``forward_kernel``, ``backward_kernel``), or None where Triton
    does not import."""
    try:
        from . import _ltc_triton_kernels
    except ImportError:
        return None
    return _ltc_triton_kernels


def available() -> bool:
    """Whether Triton imports here (the kernels compile at their first call)."""
    return _triton() is not None


def supports(u: Tensor, A: Tensor, x0: Tensor | None) -> bool:
    """Whether the kernel takes these operands: CUDA tensors (any device under
    ``TRITON_INTERPRET=1``), u float32 with complex64 coefficients or float64 with
    complex128, at least one step, and element offsets that fit int32 (B·H·L, the
    checkpoints' B·H·M·2·⌈L/K⌉ and the backward's scratch ≈ B·H·M·2·K, M padded)."""
    ctype = {torch.float32: torch.complex64, torch.float64: torch.complex128}.get(u.dtype)
    on_device = u.device.type == "cuda" or os.environ.get("TRITON_INTERPRET") == "1"
    B, H, L = u.shape
    M = A.shape[-1]
    return (
        on_device
        and A.dtype == ctype
        and (x0 is None or (x0.dtype == ctype and x0.device == u.device))
        and L > 0
        and max(B * H * L, (B * H + 64) * _blocks(M)[1] * 2 * (-(-L // SEGMENT) + SEGMENT)) < 2**31
    )


def _blocks(M: int) -> tuple[int, int]:
    """(BC, BM): modes padded to a power of two, channels to fill BLOCK_ELEMENTS."""
    bm = 1 << max(M - 1, 0).bit_length()
    return max(1, BLOCK_ELEMENTS // bm), bm


def _coefs(A: Tensor, Bl: Tensor, Bb: Tensor, C: Tensor) -> Tensor:
    """(4, H, M, 2) real: Ā, B̃, B̄, C (conjugate views resolved)."""
    return torch.view_as_real(torch.stack([t.detach().resolve_conj() for t in (A, Bl, Bb, C)]))


def _forward(u: Tensor, g: Tensor, coef: Tensor, x0: Tensor, scale: float, keep: bool):
    """Kernel forward on channel-major ``u, g (B, H, L)``: (y (B, H, L), x_last (B, H, M, 2),
    checkpoints (n_seg, B, H, M, 2) or None)."""
    fwd = _triton().forward_kernel
    B, H, L = u.shape
    M = coef.shape[2]
    bc, bm = _blocks(M)
    y = torch.empty_like(u)
    xlast = torch.empty(B, H, M, 2, dtype=u.dtype, device=u.device)
    n_seg = -(-L // SEGMENT)
    ckpt = torch.empty(n_seg if keep else 1, B, H, M, 2, dtype=u.dtype, device=u.device)
    grid = (-(-(B * H) // bc),)
    fwd[grid](
        u,
        g,
        coef,
        x0,
        y,
        xlast,
        ckpt,
        L,
        B * H,
        H,
        M,
        scale,
        K=SEGMENT,
        KEEP=keep,
        BC=bc,
        BM=bm,
        num_warps=NUM_WARPS,
    )
    return y, xlast, ckpt if keep else None


class _LTCTriton(torch.autograd.Function):
    """y, x_last = LTC(u) (channel-major ``u (B, H, L)``) by the Triton kernels; the same
    outputs and gradients as :class:`liquid_stream.nn.ltc._LTCScan` (which is time-first)."""

    @staticmethod
    def forward(ctx, u, A, Bl, Bb, C, x0, scale):
        u = u.detach().contiguous()
        g = torch.tanh(u)
        coef = _coefs(A, Bl, Bb, C).contiguous()
        y, xlast, ckpt = _forward(u, g, coef, _real(x0), scale, keep=True)
        ctx.save_for_backward(u, g, ckpt, coef)
        ctx.scale = scale
        return y, torch.view_as_complex(xlast)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, gy, gx_last):
        u, g, ckpt, coef = ctx.saved_tensors
        bwd = _triton().backward_kernel
        B, H, L = u.shape
        M = coef.shape[2]
        bc, bm = _blocks(M)
        kw = {"dtype": u.dtype, "device": u.device}
        gy = torch.zeros_like(u) if gy is None else gy.contiguous()
        gxl = torch.zeros(B, H, M, 2, **kw) if gx_last is None else _real(gx_last)
        gu = torch.empty_like(u)
        gx0 = torch.empty(B, H, M, 2, **kw)
        gcoef = torch.empty(B, H, 4, M, 2, **kw)
        grid = (-(-(B * H) // bc),)
        scratch = torch.empty(grid[0], SEGMENT, bc, bm, 2, **kw)
        bwd[grid](
            u,
            g,
            gy,
            coef,
            gxl,
            ckpt,
            scratch,
            gu,
            gx0,
            gcoef,
            L,
            B * H,
            H,
            M,
            ctx.scale,
            K=SEGMENT,
            BC=bc,
            BM=bm,
            num_warps=NUM_WARPS,
        )
        gA, gBl, gBb, gC = torch.view_as_complex(gcoef.sum(0)).unbind(1)  # (H, M) each
        return gu, gA, gBl, gBb, gC, torch.view_as_complex(gx0), None


def ltc_triton(
    u: Tensor, A: Tensor, Bl: Tensor, Bb: Tensor, C: Tensor, x0: Tensor, scale: float
) -> tuple[Tensor, Tensor]:
    """The LTC scan by the Triton kernels: channel-major ``u (B, H, L)``, complex ``(H, M)``
    coefficients Ā, B̃, B̄, C, ``x0 (B, H, M)`` → (y ``(B, H, L)``, x_{L−1} ``(B, H, M)``).
    Differentiable in every tensor argument; without autograd no checkpoints are kept."""
    if torch.is_grad_enabled() and any(t.requires_grad for t in (u, A, Bl, Bb, C, x0)):
        return _LTCTriton.apply(u, A, Bl, Bb, C, x0, scale)
    u = u.contiguous()
    coef = _coefs(A, Bl, Bb, C).contiguous()
    y, xlast, _ = _forward(u, torch.tanh(u), coef, _real(x0), scale, keep=False)
    return y, torch.view_as_complex(xlast)
