"""S4 with a diagonal-plus-low-rank state matrix (S4-LegS, the Liquid-S4 paper's kernel).

Per channel h (conjugate halves made explicit, Mf = 2M states, output scale s = 1):

    A = diag(Λ, Λ̄) − P Pᴴ,           P = [P; P̄],  B = [B; B̄],  C = [C; C̄]
    Ā = (I − Δ/2·A)⁻¹ (I + Δ/2·A),   B̄ = (I − Δ/2·A)⁻¹ Δ B          (bilinear)
    K̄[j] = Re(C Āʲ B̄),  j = 0 … L−1

The rank-one term couples each mode to its conjugate partner, so the state
cannot be halved as for S4D; it is real-valued in disguise (K̄ is real).

Kernel evaluation (Gu et al., S4): the truncated generating function
K̂(ω) = Σ_{j<L} K̄[j] ωʲ = C̃ (I − ωĀ)⁻¹ B̄ with C̃ = C (I − Āᴸ), evaluated at the
roots of unity ω_k = exp(−2πik/L). With z = 2(1−ω)/(1+ω) and R = (z − ΔΛ)⁻¹,

    K̂(ω) = 2Δ/(1+ω) · [k₀₀ − Δ k₀₁ k₁₀ / (1 + Δ k₁₁)],
    k₀₀ = Σ C̃ B R,  k₀₁ = Σ C̃ P R,  k₁₀ = Σ P̄ B R,  k₁₁ = Σ P̄ P R     (Woodbury)

— four Cauchy sums — and K̄ = iFFT(K̂). At ω = −1 (even L) the limit is K̂ = Δ/2·Σ C̃ B.
C is the parameter; C̃ is recomputed for the current L and Δ at every call, so the forward
equals the infinite recurrence for every L. Ā is never needed as a matrix there: by
Sherman–Morrison it is diagonal plus rank one, Ā = diag(E) + β u vᵀ, so x ↦ xĀ costs O(Mf).
C Āᴸ is taken by repeated squaring of the dense Ā when that is small (H·Mf² entries,
≈ 2 log₂ L of them kept for the backward pass, under the device's ``DENSE_POWER_BYTES``),
else by L structured steps with activation checkpointing every ≈ √L steps (O(H·Mf·√L)
memory, no Mf × Mf matrix: N = 512 at L = 1024 would otherwise need ~20 GB and
H·Mf³·log L work).
Any discrete input vector b (e.g. the liquid powers B̄^{∘p}) goes through the same
formula via its continuous equivalent B_b = (I − Δ/2·A) b / Δ.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .cauchy import cauchy
from .hippo import nplr_legs
from .kernel_base import Discrete, SSMKernel, complex_param


def _conj_full(x: Tensor) -> Tensor:
    """(…, M) → (…, 2M): append the conjugate half."""
    return torch.cat([x, x.conj()], dim=-1)


def vec_mat_power(c: Tensor, A: Tensor, n: int) -> Tensor:
    """c · Aⁿ for row vectors ``c (…, H, Mf)`` and ``A (H, Mf, Mf)`` by repeated squaring."""
    out = c.unsqueeze(-2)
    Q = A
    while n:
        if n & 1:
            out = out @ Q
        n >>= 1
        if n:
            Q = Q @ Q
    return out.squeeze(-2)


# The dense repeated squaring of Ā is used while its saved matrices stay under this size
# (per device type: a GPU multiplies the matrices fast, a CPU is better off with the steps).
DENSE_POWER_BYTES = {"cpu": 2**29, "cuda": 2**32}


def _structured_steps(x: Tensor, E: Tensor, u: Tensor, v: Tensor, beta: Tensor, n: int) -> Tensor:
    """n steps of x ← x Ā = x ∘ E + β (x · u) vᵀ for row vectors ``x (…, H, Mf)``."""
    for _ in range(n):
        x = x * E + (beta * (x * u).sum(-1, keepdim=True)) * v
    return x


def vec_structured_power(
    c: Tensor, E: Tensor, u: Tensor, v: Tensor, beta: Tensor, n: int
) -> Tensor:
    """c · Āⁿ for Ā = diag(E) + β u vᵀ (``E, u, v (H, Mf)``, ``beta (H, 1)``): n steps of
    O(Mf), in segments of ≈ √n steps whose activations are recomputed in the backward pass."""
    from torch.utils.checkpoint import checkpoint

    seg = max(1, math.isqrt(n))
    x = c
    for start in range(0, n, seg):
        steps = min(seg, n - start)
        if torch.is_grad_enabled():
            x = checkpoint(_structured_steps, x, E, u, v, beta, steps, use_reentrant=False)
        else:
            x = _structured_steps(x, E, u, v, beta, steps)
    return x


class DPLRKernel(SSMKernel):
    """S4-LegS kernel: NPLR init (rank 1), bilinear discretisation, Cauchy + Woodbury + iFFT."""

    def __init__(
        self,
        d_model: int,
        d_state: int = 64,
        channels: int = 1,
        dt_min: float = 0.001,
        dt_max: float = 0.1,
        disc: str = "bilinear",
        backend: str = "auto",
    ):
        super().__init__(d_model, d_state, channels, dt_min, dt_max)
        if disc != "bilinear":
            raise ValueError("mode='dplr' supports only disc='bilinear' (ZOH is offered for diag)")
        self.backend = backend
        Lambda, P, B = nplr_legs(d_state)
        H = d_model
        self._set_Lambda(Lambda.expand(H, -1))
        self._register_complex("P", P.expand(H, -1))
        self._register_complex("B", B.expand(H, -1))
        C = torch.randn(channels, H, self.M, dtype=torch.cfloat)
        self._register_complex("C", C)

    def discretize(self, rate: float = 1.0) -> Discrete:
        """Bilinear discretisation in closed form.

        I − Δ/2·A = D + (Δ/2) P Pᴴ with D = diag(1 − Δ/2·Λ), so by Sherman–Morrison
        (I − Δ/2·A)⁻¹ = D⁻¹ − α (D⁻¹P)(PᴴD⁻¹), α = (Δ/2) / (1 + (Δ/2) PᴴD⁻¹P), and
        Ā = 2 (I − Δ/2·A)⁻¹ − I,  B̄ = (I − Δ/2·A)⁻¹ Δ B.
        """
        dt = self.dt(rate)
        h = (dt / 2)[:, None]  # (H, 1)
        Lf = _conj_full(self.Lambda())
        Pf = _conj_full(complex_param(self.P))
        Bf = _conj_full(complex_param(self.B))
        d = 1 / (1 - h * Lf)  # D⁻¹ (H, Mf)
        left_p, right_p = d * Pf, d * Pf.conj()  # D⁻¹P and (PᴴD⁻¹)ᵀ
        alpha = h / (1 + h * (right_p * Pf).sum(-1, keepdim=True))  # (H, 1)
        # Ā = 2 (D⁻¹ − α D⁻¹P PᴴD⁻¹) − I = diag(E) + β u vᵀ
        E, beta = 2 * d - 1, -2 * alpha
        dtB = dt[:, None] * Bf
        B_bar = d * dtB - alpha * left_p * (right_p * dtB).sum(-1, keepdim=True)
        C = _conj_full(complex_param(self.C))
        extra = {"Pf": Pf, "Lf": Lf, "u": left_p, "v": right_p, "beta": beta}
        return Discrete(dt, E, B_bar, C, 1.0, extra)

    def dense_A_bar(self, disc: Discrete) -> Tensor:
        x = disc.extra
        low_rank = x["beta"][..., None] * x["u"][:, :, None] * x["v"][:, None, :]
        return torch.diag_embed(disc.A_bar) + low_rank

    def c_power(self, C: Tensor, disc: Discrete, L: int) -> Tensor:
        """C Āᴸ (ch, H, Mf): dense repeated squaring or structured steps (module docstring)."""
        H, Mf = disc.A_bar.shape
        dense_bytes = 2 * max(1, L.bit_length()) * H * Mf * Mf * C.element_size()
        if dense_bytes <= DENSE_POWER_BYTES.get(C.device.type, DENSE_POWER_BYTES["cpu"]):
            return vec_mat_power(C, self.dense_A_bar(disc), L)
        x = disc.extra
        return vec_structured_power(C, disc.A_bar, x["u"], x["v"], x["beta"], L)

    def kernel(self, L: int, disc: Discrete, b: Tensor) -> Tensor:
        dt, C = disc.dt, disc.C
        ch, H, Mf = C.shape
        R = b.shape[0]
        C_t = C - self.c_power(C, disc, L)  # C̃ = C(I − Āᴸ)  (ch, H, Mf)
        # Continuous-equivalent inputs: (I − Δ/2·A) b / Δ.
        Pf, Lf = disc.extra["Pf"], disc.extra["Lf"]  # (H, Mf)
        # (I − Δ/2·A) b / Δ = ((1 − Δ/2·Λ) b + Δ/2·P (Pᴴb)) / Δ
        Bc = (1 - dt[:, None] / 2 * Lf) * b + dt[:, None] / 2 * Pf * (Pf.conj() * b).sum(-1, True)
        Bc = Bc / dt[:, None]
        w = dt[:, None] * Lf

        # Nodes ω_k = exp(−2πik/L), k = 0 … L//2 and z = 2(1−ω)/(1+ω).
        k = torch.arange(L // 2 + 1, device=dt.device, dtype=dt.dtype)
        omega = torch.polar(torch.ones_like(k), -2 * math.pi * k / L)
        nyquist = L % 2 == 0
        if nyquist:  # ω = −1: z = ∞; use a finite placeholder, patched below
            omega = omega.clone()
            omega[-1] = 0.0
        z = 2 * (1 - omega) / (1 + omega)

        rows = [
            (C_t[:, None] * Bc[None]).reshape(ch * R, H, Mf),  # k00
            C_t * Pf,  # k01
            Pf.conj() * Bc,  # k10
            (Pf.conj() * Pf)[None],  # k11
        ]
        v = torch.cat(rows, dim=0).transpose(0, 1)  # (H, ch·R + ch + R + 1, Mf)
        r = cauchy(v.contiguous(), z, w.contiguous(), self.backend).transpose(0, 1)
        k00 = r[: ch * R].reshape(ch, R, H, -1)
        k01 = r[ch * R : ch * R + ch].reshape(ch, 1, H, -1)
        k10 = r[ch * R + ch : ch * R + ch + R].reshape(1, R, H, -1)
        k11 = r[-1].reshape(1, 1, H, -1)
        dtz = dt[:, None]
        K_hat = 2 * dtz / (1 + omega) * (k00 - dtz * k01 * k10 / (1 + dtz * k11))
        if nyquist:
            limit = dt[:, None] / 2 * torch.einsum("chm,rhm->crh", C_t, Bc)[..., None]
            K_hat = torch.cat([K_hat[..., :-1], limit.expand(ch, R, H, 1)], dim=-1)
        return torch.fft.irfft(K_hat, n=L)  # (ch, R, H, L)
