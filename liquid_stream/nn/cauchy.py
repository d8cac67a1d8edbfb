"""Cauchy and Vandermonde reductions, the two inner loops of S4 kernels.

Cauchy (DPLR kernels, evaluated at the nodes z_l of the generating function):

    cauchy(v, z, w)[h, r, l] = Σ_m v[h, r, m] / (z_l − w[h, m])

Vandermonde (diagonal kernels, evaluated directly in time):

    vandermonde(v, log_lam, L)[h, r, j] = Re Σ_m v[h, r, m] · exp(j · log_lam[h, m])

Both are memory-bounded: the torch Cauchy never holds more than one
``(H, M, chunk)`` block (a custom autograd function recomputes it in the
backward pass), and the Vandermonde splits j = c·T + i so the work is one
batched matrix product of ``(H, L/T, M) × (H, M, T)`` with T ≈ √L.

Backends: ``"torch"`` (always available), ``"keops"`` (pykeops, optional) and
``"auto"`` (keops for CUDA tensors when it imports and works, else torch). A
missing or broken pykeops falls back to torch with a single warning.
"""

from __future__ import annotations

import math
import warnings

import torch
from torch import Tensor

# Bytes of complex scratch per Cauchy block; (H, M, chunk) is sized to fit.
_CHUNK_BYTES = 8 * 2**20


def _chunk_len(H: int, M: int, Lz: int, itemsize: int) -> int:
    return max(1, min(Lz, _CHUNK_BYTES // max(1, H * M * itemsize)))


class _CauchyTorch(torch.autograd.Function):
    """Chunked Cauchy sum with a recomputing backward pass (O(H·M·chunk) memory).

    Per block Q = 1/(z − w) (H, M, l): out = v @ Q; grad_v = g @ Q̄ᵀ and
    grad_w = Σ_r v̄ ∘ (g @ (Q̄²)ᵀ) (conjugate Wirtinger convention of torch).
    """

    @staticmethod
    def forward(ctx, v: Tensor, z: Tensor, w: Tensor) -> Tensor:  # type: ignore[override]
        H, R, M = v.shape
        Lz = z.shape[0]
        out = v.new_empty(H, R, Lz)
        step = _chunk_len(H, M, Lz, v.element_size())
        for s in range(0, Lz, step):
            Q = torch.reciprocal(z[None, None, s : s + step] - w[:, :, None])  # (H, M, l)
            out[:, :, s : s + step] = torch.bmm(v, Q)
        ctx.save_for_backward(v, z, w)
        return out

    @staticmethod
    def backward(ctx, g: Tensor):  # type: ignore[override]
        v, z, w = ctx.saved_tensors
        H, R, M = v.shape
        Lz = z.shape[0]
        need_v, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[2]
        grad_v = torch.zeros_like(v) if need_v else None
        acc_w = torch.zeros_like(v) if need_w else None
        zc, wc = z.conj().resolve_conj(), w.conj().resolve_conj()
        step = _chunk_len(H, M, Lz, v.element_size())
        for s in range(0, Lz, step):
            Qc = torch.reciprocal(zc[None, None, s : s + step] - wc[:, :, None])  # Q̄ (H, M, l)
            gs = g[:, :, s : s + step]  # (H, R, l)
            if need_v:
                grad_v.baddbmm_(gs, Qc.transpose(1, 2))
            if need_w:
                acc_w.baddbmm_(gs, Qc.mul_(Qc).transpose(1, 2))
        grad_w = (acc_w * v.conj()).sum(1) if need_w else None
        return grad_v, None, grad_w


def cauchy_torch(v: Tensor, z: Tensor, w: Tensor) -> Tensor:
    """Pure-torch Cauchy sum. ``v (H, R, M)``, ``z (Lz,)``, ``w (H, M)`` → ``(H, R, Lz)``."""
    return _CauchyTorch.apply(v, z, w)


BACKENDS = ("auto", "torch", "keops")
_KEOPS_WARNED = False


def _keops():
    """Return the keops Cauchy function, or None (never raises)."""
    try:
        from .cauchy_keops import cauchy_keops, keops_available
    except Exception:  # noqa: BLE001 - any import problem means "not available"
        return None
    return cauchy_keops if keops_available() else None


def resolve_backend(backend: str, device: torch.device | None = None) -> str:
    """Map ``"auto" | "torch" | "keops"`` to the backend that will actually run.

    ``auto`` picks KeOps only for CUDA tensors: on CPU the chunked torch kernel measured
    as fast as KeOps (and far less sensitive to load), so CPU runs never pay KeOps'
    compile/probe cost. ``keops`` without a working pykeops falls back with one warning.
    """
    global _KEOPS_WARNED
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; expected 'auto', 'torch' or 'keops'")
    if backend == "torch" or (backend == "auto" and (device is None or device.type != "cuda")):
        return "torch"
    if _keops() is not None:
        return "keops"
    if backend == "keops" and not _KEOPS_WARNED:
        warnings.warn(
            "backend='keops' requested but pykeops is not installed or does not work here; "
            "falling back to the pure-torch Cauchy kernel",
            RuntimeWarning,
            stacklevel=3,
        )
        _KEOPS_WARNED = True
    return "torch"


def cauchy(v: Tensor, z: Tensor, w: Tensor, backend: str = "torch") -> Tensor:
    """Cauchy sum on the resolved backend (see :func:`resolve_backend`)."""
    if resolve_backend(backend, v.device) == "keops":
        return _keops()(v, z, w)  # type: ignore[misc]
    return cauchy_torch(v, z, w)


def vandermonde(v: Tensor, log_lam: Tensor, L: int) -> Tensor:
    """K[h, r, j] = Re Σ_m v[h, r, m] · λ[h, m]^j for j < L, with λ = exp(log_lam).

    Two-level evaluation: j = c·T + i, λ^j = λ^{cT} · λ^i, so the whole kernel is
    ``(v ∘ λ^{cT}) @ λ^i`` — a batched matmul with (H, L/T, M) and (H, M, T)
    operands, O(H·M·√L) memory, exact up to rounding of exp.
    """
    H, R, M = v.shape
    T = max(1, math.isqrt(L))
    n_blocks = -(-L // T)
    i = torch.arange(T, device=v.device, dtype=log_lam.real.dtype)
    c = torch.arange(n_blocks, device=v.device, dtype=log_lam.real.dtype) * T
    inner = torch.exp(log_lam[:, :, None] * i)  # (H, M, T)
    outer = torch.exp(log_lam[:, None, :] * c[:, None])  # (H, nb, M)
    lhs = (v[:, :, None, :] * outer[:, None]).reshape(H, R * n_blocks, M)
    K = torch.bmm(lhs, inner).real  # (H, R·nb, T)
    return K.reshape(H, R, n_blocks * T)[..., :L]
