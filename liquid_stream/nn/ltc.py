"""The exact linear liquid time-constant (LTC) SSM: ``liquid="ltc"`` (beyond the paper).

PB and KB truncate the linear LTC recurrence of the paper (eq. 10). This module runs it
untruncated, for a diagonal (S4D) state: per channel h and complex mode m (conjugate
modes implicit, s = 2),

    x_t = (Ā + B̃ g(u_t)) x_{t−1} + B̄ u_t,        y_t = s·Re(C x_t) + D u_t

**Stability.** The transition a_t = Ā + B̃ g(u_t) must stay inside the unit disc for any
input. Two bounds, both part of the model (training, step form and ONNX alike):

    g(u) = tanh(u)                                  (|g| < 1; g(u) = u − u³/3 + …)
    B̃ = B̄ · min(1, ρ (1 − |Ā|) / |B̄|),  ρ = 0.99   (the liquid coefficient, a clamp)

so |a_t| ≤ |Ā| + ρ (1 − |Ā|) = 1 − (1 − ρ)(1 − |Ā|) < 1 and |x_t| ≤ max|B̄ u| / ((1 − ρ)(1 − |Ā|)).
Where |B̄| ≤ ρ (1 − |Ā|) the clamp is inactive and B̃ = B̄: the recurrence is the paper's
eq. 10 with u bounded by tanh in the transition (and exactly it to second order in u).

**Relation to KB.** Unrolled, to second order in u (B̃ = B̄):

    y_t = y_s4[t] + Σ_{j<i≤t} s·Re(C Ā^{t−j−1} B̄²) u_i u_j + O(u³)

KB (paper eq. 13) keeps only the pairs of consecutive inputs, i = j + 1 (its v_2); LTC keeps
every pair, and every higher order.

**Training forward.** The recurrence x_t = a_t x_{t−1} + b_t is a linear scan with
input-dependent a_t. On the CPU :func:`ltc_scan` runs it by the fused kernel of
:mod:`liquid_stream.nn.ltc_kernel` when it can be built there: one sequential C++ loop over
time per channel that keeps the state in registers, reads u and writes y, keeps the state
every K steps and recomputes a segment's states for the adjoint in the backward pass (the
same recurrence, gradients and bounds as below). On a GPU the same design written in Triton
(:mod:`liquid_stream.nn.ltc_triton`) runs when Triton imports;
``LIQUID_STREAM_LTC_KERNEL=torch|fused|auto`` selects (:func:`ltc_path`). Otherwise (no
compiler, a failed build, no Triton, or ``torch``) it is evaluated by :class:`_LTCScan` over
time segments of at most ``max_elements`` states: within a segment by a blocked scan (all
blocks of ``block`` steps advance together, one position at a time; the state entering each
block comes from the same scan over the block summaries, recursively), all in products and
sums of numbers of modulus < 1, so nothing overflows (no logarithms, no divisions). Work
O(B·H·M·L). Only the state entering each segment is kept; the backward pass recomputes a
segment's states and runs the adjoint recurrence backwards in time, so memory is O(B·H·L)
plus a few segments at any L. Segments are sized to the device: cache-sized on the CPU (the
scan is bound by memory traffic there), large on a GPU (:func:`default_max_elements`).

The coefficients are computed in float64 from the parameters and only then cast: a state
of a slow mode sums ~1/(1 − |Ā|) steps, which would amplify float32 rounding of Ā by as
much (1/(1 − |Ā|) ≈ 2000 at Δ = 10⁻³).

**Streaming.** The step form (:class:`liquid_stream.nn.layer.LiquidS4Step`) carries x
(B, H, M) and applies the *same* recurrence to each chunk (:func:`ltc_scan` with x₀), and
the ONNX graph writes it op by op in real arithmetic: training and streaming compute one
and the same model.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from . import ltc_kernel, ltc_triton
from .kernel_base import complex_param

LTC_RHO = 0.99  # ρ: |Ā + B̃ g| ≤ 1 − (1 − ρ)(1 − |Ā|)
LTC_BLOCK = 64  # steps per block of the scan (time-major loop over a block's positions)
# States (B·H·M·steps) per time segment: 2¹⁹ complex64 = 4 MiB keeps a CPU segment in
# cache (fwd+bwd 4.1 s vs 9.3 s at 2²² for B=2, H=128, N=64, L=16000 on 2 cores).
LTC_SEGMENT_ELEMENTS = {"cpu": 1 << 19, "cuda": 1 << 26}


def default_max_elements(device: torch.device) -> int:
    return LTC_SEGMENT_ELEMENTS.get(device.type, LTC_SEGMENT_ELEMENTS["cuda"])


@dataclass
class LTCSystem:
    """Complex (H, M) coefficients of the LTC recurrence and the output scale s."""

    A_bar: Tensor  # Ā
    B_liq: Tensor  # B̃, the clamped liquid coefficient
    B_bar: Tensor  # B̄
    C: Tensor  # C of the forward channel
    scale: float

    def to_real(self) -> dict[str, Tensor]:
        """Real (H, M, 2) views, for buffers and exporters."""
        return {k: torch.view_as_real(getattr(self, k)) for k in ("A_bar", "B_liq", "B_bar", "C")}

    @classmethod
    def from_real(cls, tensors: dict[str, Tensor], scale: float) -> LTCSystem:
        return cls(**{k: torch.view_as_complex(v) for k, v in tensors.items()}, scale=scale)


def liquid_coefficient(A_bar: Tensor, B_bar: Tensor, rho: float = LTC_RHO) -> Tensor:
    """B̃ = B̄ · min(1, ρ (1 − |Ā|) / |B̄|)."""
    room = rho * (1 - A_bar.abs())
    return B_bar * torch.clamp(room / B_bar.abs().clamp_min(1e-300), max=1.0)


def ltc_system(kernel, rate: float = 1.0, dtype: torch.dtype = torch.float32) -> LTCSystem:
    """The LTC coefficients of a :class:`~liquid_stream.nn.diag.DiagKernel`, computed in float64
    (differentiably) and cast to the complex type of ``dtype``."""
    A_bar, B_bar = kernel.bar(rate, torch.float64)
    B_liq = liquid_coefficient(A_bar, B_bar)
    C = complex_param(kernel.C)[0].to(torch.complex128)
    ctype = torch.complex64 if dtype == torch.float32 else torch.complex128
    return LTCSystem(*(t.to(ctype) for t in (A_bar, B_liq, B_bar, C)), scale=2.0)


def _scan_tf(a: Tensor, x: Tensor, x0: Tensor | None, block: int) -> Tensor:
    """x_t = a_t x_{t−1} + b_t, x_{−1} = x0 (None: 0), for ``x (L, …)`` holding b; returns x
    (computed in place unless L needs padding to whole blocks).

    Time is the first axis. Up to ``block`` steps: a loop over time, each step one
    elementwise update of a contiguous slice. Longer: L is cut into n_b blocks of ``block``
    steps and the loop runs over the positions i of a block, updating all blocks at once:
    X_i += a_i X_{i−1} (each block's state from a zero start) and P_i = a_i P_{i−1} (its
    cumulative transition); the state entering each block is this same scan over the block
    summaries (P_last, X_last), recursively; then x = X + P · x_in. Only products and sums of
    numbers of modulus < 1 and the inputs: nothing overflows. ``a`` is not modified."""
    L = x.shape[0]
    if x0 is not None:
        x[0] += a[0] * x0
    if L <= block:
        for t in range(1, L):
            x[t].addcmul_(a[t], x[t - 1])
        return x
    nb = -(-L // block)
    pad = nb * block - L
    if pad:  # identity steps after the end: they change no output
        a = torch.cat([a, a.new_ones(pad, *a.shape[1:])])
        x = torch.cat([x, x.new_zeros(pad, *x.shape[1:])])
    A, X = a.unflatten(0, (nb, block)), x.unflatten(0, (nb, block))  # (n_b, block, …) views
    P = torch.empty_like(A)
    P[:, 0] = A[:, 0]
    for i in range(1, block):
        X[:, i].addcmul_(A[:, i], X[:, i - 1])
        torch.mul(A[:, i], P[:, i - 1], out=P[:, i])
    x_end = _scan_tf(P[:, -1], X[:, -1].clone(), None, block)  # (n_b, …): state at block ends
    X[1:] += P[1:] * x_end[:-1, None]
    return X.flatten(0, 1)[:L] if pad else x


def _rscan_tf(a: Tensor, lam: Tensor, block: int) -> Tensor:
    """λ_t = g_t + conj(a_{t+1}) λ_{t+1}, λ_L = 0, for ``lam (L, …)`` holding g; returns λ
    (in place unless padded). The adjoint of :func:`_scan_tf`: same blocking, run from the end."""
    L = lam.shape[0]
    a = a.conj().resolve_conj()  # one copy, not one per step
    if L <= block:
        for t in range(L - 2, -1, -1):
            lam[t].addcmul_(a[t + 1], lam[t + 1])
        return lam
    nb = -(-L // block)
    pad = nb * block - L
    if pad:  # g = 0 after the end: λ stays 0 there
        a = torch.cat([a, a.new_zeros(pad, *a.shape[1:])])
        lam = torch.cat([lam, lam.new_zeros(pad, *lam.shape[1:])])
    A, G = a.unflatten(0, (nb, block)), lam.unflatten(0, (nb, block))
    # P[k, i] = Π_{j=i+1}^{block} conj(a[k, j]), where a[k, block] is a[k + 1, 0] (0 at the end).
    P = torch.empty_like(A)
    P[:-1, -1] = A[1:, 0]
    P[-1, -1] = 0
    for i in range(block - 2, -1, -1):
        G[:, i].addcmul_(A[:, i + 1], G[:, i + 1])
        torch.mul(A[:, i + 1], P[:, i + 1], out=P[:, i])
    # λ at each block's first step: the same recurrence over blocks, with conj(a'_{k+1}) = P[k, 0].
    a_sum = torch.cat([P[:1, 0], P[:-1, 0]]).conj()
    lam_first = _rscan_tf(a_sum, G[:, 0].clone(), block)
    G[:-1] += P[:-1] * lam_first[1:, None]
    return G.flatten(0, 1)[:L] if pad else lam


def linear_scan(a: Tensor, b: Tensor, x0: Tensor | None = None, block: int = LTC_BLOCK) -> Tensor:
    """x_t = a_t x_{t−1} + b_t along the first axis of ``a, b (L, …)``; x_{−1} = ``x0 (…)``
    (zero if None). No autograd (see :class:`_LTCScan` for the differentiable recurrence)."""
    a, b = torch.broadcast_tensors(a, b)
    return _scan_tf(a, b.clone(), x0, block)


def _segments(L: int, width: int, max_elements: int, block: int) -> list[slice]:
    """Time segments of at most ``max_elements`` states (≥ one block)."""
    seg = max(block, max_elements // max(width, 1) // block * block)
    return [slice(s, min(s + seg, L)) for s in range(0, L, seg)]


def _segment_states(u, g, seg: slice, A, Bl, Bb, x_in, block: int) -> tuple[Tensor, Tensor]:
    """(a_t, x_t) of one time segment ``(L_s, B, H, M)``: a_t = Ā + B̃ g(u_t), x from x_in."""
    a = A + Bl * g[seg, ..., None]
    return a, _scan_tf(a, Bb * u[seg, ..., None], x_in, block)


class _LTCScan(torch.autograd.Function):
    """y, x_last = LTC(u) with a hand-written backward pass (time-first ``u (L, B, H)``).

    Forward, per time segment: a_t = Ā + B̃ g(u_t), b_t = B̄ u_t (L_s, B, H, M), the scan,
    y_t = s·Re Σ_m C_m x_t; only the state entering each segment is kept. Backward, segments
    in reverse: recompute the states, then the adjoint λ_t = s·ȳ_t·conj(C) + conj(a_{t+1}) λ_{t+1}
    (a reverse scan; PyTorch's convention for complex gradients) and

        ∂ℓ/∂a_t = λ_t conj(x_{t−1}),  ∂ℓ/∂b_t = λ_t,  ∂ℓ/∂C = s Σ ȳ_t conj(x_t),
        ∂ℓ/∂x_in = conj(a_0) λ_0 (carried to the previous segment),

    reduced over batch and time into the (H, M) coefficients and u. Memory: a few
    segment-sized temporaries; nothing of size B·H·M·L is kept."""

    @staticmethod
    def forward(ctx, u, A, Bl, Bb, C, x0, scale, block, max_elements):
        L, B, H = u.shape
        g = torch.tanh(u)
        y = u.new_empty(L, B, H)
        x = x0
        starts = []
        for seg in _segments(L, B * H * A.shape[-1], max_elements, block):
            starts.append(x)
            _, X = _segment_states(u, g, seg, A, Bl, Bb, x, block)
            y[seg] = scale * torch.einsum("lbhm,hm->lbh", X, C).real
            x = X[-1].clone()
        ctx.save_for_backward(u, A, Bl, Bb, C, torch.stack(starts))
        ctx.scale, ctx.block, ctx.max_elements = scale, block, max_elements
        return y, x

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, gy, gx_last):
        u, A, Bl, Bb, C, starts = ctx.saved_tensors
        s, block = ctx.scale, ctx.block
        L, B, H = u.shape
        g = torch.tanh(u)
        ctype = A.dtype
        gA, gBl, gBb, gC = (torch.zeros_like(A) for _ in range(4))
        gu = torch.zeros_like(u)
        carry = gx_last if gx_last is not None else torch.zeros_like(starts[0])
        segs = _segments(L, B * H * A.shape[-1], ctx.max_elements, block)
        Cc = s * C.conj()
        for k in range(len(segs) - 1, -1, -1):
            seg, x_in = segs[k], starts[k]
            a, X = _segment_states(u, g, seg, A, Bl, Bb, x_in, block)  # recomputed states
            gys = gy[seg] if gy is not None else u.new_zeros(X.shape[:-1])
            lam = gys[..., None] * Cc  # ∂ℓ/∂x_t through y_t
            lam[-1] += carry
            lam = _rscan_tf(a, lam, block)
            ga = torch.empty_like(lam)
            torch.mul(lam[1:], X[:-1].conj(), out=ga[1:])
            ga[0] = lam[0] * x_in.conj()
            gs, us = g[seg].to(ctype), u[seg].to(ctype)
            gC += s * torch.einsum("lbh,lbhm->hm", gys.to(ctype), X).conj()
            gA += ga.sum((0, 1))
            gBl += torch.einsum("lbhm,lbh->hm", ga, gs)
            gBb += torch.einsum("lbhm,lbh->hm", lam, us)
            gu[seg] = (1 - g[seg] ** 2) * torch.einsum("lbhm,hm->lbh", ga, Bl.conj()).real
            gu[seg] += torch.einsum("lbhm,hm->lbh", lam, Bb.conj()).real
            carry = a[0].conj() * lam[0]
        return gu, gA, gBl, gBb, gC, carry, None, None, None


def ltc_path(
    u: Tensor,
    sys: LTCSystem,
    x0: Tensor | None = None,
    block: int | None = None,
    max_elements: int | None = None,
) -> str:
    """Which implementation :func:`ltc_scan` runs for these arguments: ``"fused"`` (the C++
    kernel of :mod:`liquid_stream.nn.ltc_kernel`, CPU), ``"triton"`` (the Triton kernel of
    :mod:`liquid_stream.nn.ltc_triton`, CUDA) or ``"torch"`` (:class:`_LTCScan`).

    ``$LIQUID_STREAM_LTC_KERNEL``: ``torch`` always the torch scan; ``fused`` the device's
    fused kernel wherever it applies (float32 with complex64 or float64 with complex128);
    ``auto`` (default) the same, except that an explicit ``block`` or ``max_elements`` (the
    torch scan's own parameters) asks for the torch scan. Where the kernel cannot be built
    or Triton does not import, the torch scan (the C++ build failure is warned once)."""
    choice = ltc_kernel.kernel_choice()
    if choice == "torch" or (choice == "auto" and (block, max_elements) != (None, None)):
        return "torch"
    coefs = (sys.A_bar, sys.B_liq, sys.B_bar, sys.C)
    if u.device.type == "cuda":
        ok = all(ltc_triton.supports(u, c, x0) for c in coefs) and ltc_triton.available()
        return "triton" if ok else "torch"
    if not all(ltc_kernel.supports(u, c, x0) for c in coefs) or not ltc_kernel.available():
        return "torch"
    return "fused"


def ltc_scan(
    u: Tensor,
    sys: LTCSystem,
    x0: Tensor | None = None,
    block: int | None = None,
    max_elements: int | None = None,
) -> tuple[Tensor, Tensor]:
    """``u (B, H, L)`` → (s·Re(C x_t) ``(B, H, L)``, x_{L−1} ``(B, H, M)``), from x_{−1} = x0
    (zero if None). Differentiable in u, the coefficients of ``sys`` and x0.

    By the fused CPU kernel, the Triton GPU kernel or the torch scan, as :func:`ltc_path`
    decides; ``block`` (default :data:`LTC_BLOCK`) and ``max_elements`` (default
    :func:`default_max_elements`) shape the torch scan: its block size and the states per
    time segment."""
    B, H, L = u.shape
    if x0 is None:
        x0 = sys.A_bar.new_zeros(B, H, sys.A_bar.shape[-1])
    coefs = (sys.A_bar, sys.B_liq, sys.B_bar, sys.C)
    path = ltc_path(u, sys, x0, block, max_elements)
    if path == "triton":  # channel-major: no transposes
        return ltc_triton.ltc_triton(u, *coefs, x0, sys.scale)
    u_t = u.permute(2, 0, 1).contiguous()  # (L, B, H)
    if path == "fused":
        y, x = ltc_kernel.ltc_fused(u_t, *coefs, x0, sys.scale)
    else:
        y, x = _LTCScan.apply(
            u_t,
            *coefs,
            x0,
            sys.scale,
            block or LTC_BLOCK,
            max_elements or default_max_elements(u.device),
        )
    return y.permute(1, 2, 0), x
