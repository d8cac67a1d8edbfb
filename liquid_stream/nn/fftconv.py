"""Causal convolution by FFT, with a real-to-real backward.

For R kernels ``K_r (H, L)`` and R input signals ``s_r (B, H, L)`` (R = 1, or 1 + the KB
orders), per channel h:

    y[b, h, t] = Σ_r Σ_{j≤t} K_r[h, j] · s_r[b, h, t − j],        t = 0 … L − 1

evaluated as ``irfft(Σ_r rfft(K_r, n) · rfft(s_r, n), n)[:L]`` with ``n = 2L`` (no
circular wrap-around: both operands live on [0, L)). The gradients are correlations,
again evaluated with real FFTs of the same length (``ĝ = rfft(∂ℓ/∂y, n)``):

    ∂ℓ/∂s_r[b, h, m] = Σ_{t≥m} g[b, h, t] K_r[h, t − m]  = irfft(conj(K̂_r) · ĝ, n)[:L]
    ∂ℓ/∂K_r[h, j]    = Σ_b Σ_{t≥j} g[b, h, t] s_r[b, h, t − j]
                                                      = irfft(Σ_b conj(ŝ_r) · ĝ, n)[:L]

(a negative lag t − m wraps to n + t − m ≥ L + 1, where the zero-padded operand is 0, so
the circular correlation is the linear one on [0, L)).

Why a custom backward (torch profiler, one CPU thread, the KWS cpu preset: B = 16,
H = 128, L = 200, four layers): autograd's backward of ``rfft(·, n)`` zero-fills a
full-length complex spectrum and runs a complex-to-complex FFT over it, 21 ms (the FFT) +
11 ms (the fill) of a ~260 ms training step, more than the forward's FFTs together; here
the backward is one rfft of ``g`` and two irffts (docs/benchmarks.md §3: the step ~10 %
faster). The forward is the plain rfft / product / irfft expression.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable


class _CausalFFTConv(torch.autograd.Function):
    @staticmethod
    def forward(ctx, K: Tensor, s: Tensor) -> Tensor:  # K (R, H, L), s (R, B, H, L)
        L = s.shape[-1]
        n = 2 * L
        K_f = torch.fft.rfft(K, n=n)  # (R, H, F), F = L + 1
        s_f = torch.fft.rfft(s, n=n)  # (R, B, H, F)
        y = torch.fft.irfft(torch.einsum("rhf,rbhf->bhf", K_f, s_f), n=n)[..., :L]
        ctx.save_for_backward(K_f, s_f)
        ctx.L = L
        return y  # (B, H, L)

    @staticmethod
    @once_differentiable
    def backward(ctx, g: Tensor) -> tuple[Tensor | None, Tensor | None]:
        K_f, s_f = ctx.saved_tensors
        L, n = ctx.L, 2 * ctx.L
        g_f = torch.fft.rfft(g, n=n)  # (B, H, F)
        dK = ds = None
        if ctx.needs_input_grad[0]:
            # an elementwise product and a sum over b: einsum made this a (H·F)-batched
            # matmul of 1 × B by B × 1, 3× slower here
            dK = torch.fft.irfft((s_f.conj() * g_f).sum(1), n=n)[..., :L]
        if ctx.needs_input_grad[1]:
            ds = torch.fft.irfft(K_f.conj()[:, None] * g_f, n=n)[..., :L]
        return dK, ds


def causal_fft_conv(K: Tensor, s: Tensor) -> Tensor:
    """``y[b, h, t] = Σ_r Σ_{j≤t} K[r, h, j] · s[r, b, h, t − j]``.

    Shapes: ``K (R, H, L)`` real, ``s (R, B, H, L)`` of the same dtype → ``y (B, H, L)``.
    Differentiable in both (see the module docstring for the backward).
    """
    if (
        K.dim() != 3
        or s.dim() != 4
        or K.shape[0] != s.shape[0]
        or K.shape[1:]
        != (
            s.shape[2],
            s.shape[3],
        )
    ):
        raise ValueError(
            f"causal_fft_conv: need K (R, H, L) and s (R, B, H, L), got {tuple(K.shape)} and "
            f"{tuple(s.shape)}"
        )
    return _CausalFFTConv.apply(K, s)
