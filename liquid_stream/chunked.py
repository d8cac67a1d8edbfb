"""Closed-form evaluation of a linear recurrence over a chunk of T steps.

Per channel h, R input signals s_r share one transition (R = 1, or 1 + the KB orders):

    x_t^(r) = Ā x_{t−1}^(r) + b_r s_r[t],       y_t = Σ_r c · x_t^(r)

in a *real* state basis of size Mr (complex modes are stored as [Re; Im] pairs).
The chunk is cut into sub-blocks of S steps (S a power of two, T padded at the end):

    y[kS+i] = Σ_r Σ_{i'≤i} K_r[i−i'] s_r[kS+i']       local Toeplitz, K_r[j] = c Āʲ b_r
            + E[i] · Z[k−1]                            E[i] = c Ā^{i+1}
    ℓ[k]    = Σ_i G_r[i] s_r[kS+i]                     G_r[i] = Ā^{S−1−i} b_r
    Z[k]    = Ā^S Z[k−1] + ℓ[k],   Z[−1] = x_prev     (Hillis–Steele scan, log₂ levels)

and the state after the last real step T−1 (r_T = T − (nb−1)·S steps into the last block)

    x_T = Ā^{r_T} Z[nb−2] + Σ_i G[i] · (last S inputs, right-aligned, masked to the block)

with Ā^{r_T} applied through the binary digits of r_T. Every table is computed in
float64 from the exact discrete system and only then cast; there is no Python loop
over time steps, so the module exports to a small ONNX graph with dynamic T.

Two kinds of transition: ``diag`` (complex diagonal λ: powers applied elementwise,
O(Mr) per state) and ``dense`` (real Mr×Mr matrix, for DPLR systems whose
eigenvectors are too ill-conditioned to diagonalise safely).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def diag_to_real(lam: Tensor) -> Tensor:
    """Complex diagonal λ (H, Mc) → real [[Re λ, −Im λ], [Im λ, Re λ]] (H, 2Mc, 2Mc)."""
    re, im = torch.diag_embed(lam.real), torch.diag_embed(lam.imag)
    return torch.cat([torch.cat([re, -im], -1), torch.cat([im, re], -1)], -2)


class ChunkedSSM(nn.Module):
    """Chunk-parallel step form of a multi-input linear recurrence (see module docstring).

    Args:
        A: real transition (H, Mr, Mr), float64.
        b: real input vectors (R, H, Mr), float64.
        c: real output vector (H, Mr), float64.
        lam: for ``diag`` transitions, the complex eigenvalues (H, Mr/2) with
            A = diag_to_real(lam); None for a dense transition.
        sub_block: S, a power of two.
        max_chunk: longest chunk one call handles in a single pass (scan depth);
            :meth:`forward` splits longer chunks, an exported graph must be fed ≤ this.
        dtype: dtype of the stored tables.
    """

    def __init__(
        self,
        A: Tensor,
        b: Tensor,
        c: Tensor,
        lam: Tensor | None,
        sub_block: int = 16,
        max_chunk: int = 4096,
        dtype: torch.dtype = torch.float32,
    ):
        super().__init__()
        S = sub_block
        if S < 1 or S & (S - 1):
            raise ValueError(f"sub_block must be a power of two, got {S}")
        R, H, Mr = b.shape
        self.S, self.R, self.H, self.Mr = S, R, H, Mr
        self.kind = "dense" if lam is None else "diag"
        n_blocks = max(1, -(-max_chunk // S))
        self.levels = max(0, math.ceil(math.log2(n_blocks)))
        self.max_chunk = S * 2**self.levels
        A, b, c = A.double(), b.double(), c.double()

        # A^j b_r and c A^j for j = 0 … S in float64.
        Ab = [b]
        cA = [c]
        for _ in range(S):
            Ab.append(torch.einsum("hmn,rhn->rhm", A, Ab[-1]))
            cA.append(torch.einsum("hm,hmn->hn", cA[-1], A))
        K = torch.stack([(c * Ab[j]).sum(-1) for j in range(S)], -1)  # (R, H, S)
        i = torch.arange(S)
        lag = i[:, None] - i[None, :]
        K_loc = torch.where(lag >= 0, K[..., lag.clamp(min=0)], 0.0)  # (R, H, S, S)
        G = torch.stack([Ab[S - 1 - j] for j in range(S)], 2)  # (R, H, S, Mr)
        E = torch.stack([cA[j + 1] for j in range(S)], 1)  # (H, S, Mr)
        self.register_buffer("K_loc", K_loc.to(dtype))
        self.register_buffer("G", G.to(dtype))
        self.register_buffer("E", E.to(dtype))

        scan_exps = [S * 2**j for j in range(self.levels)]
        tail_exps = [2**k for k in range(int(math.log2(S)) + 1)]
        for name, exps in (("scan", scan_exps), ("tail", tail_exps)):
            if lam is None:
                pows = [torch.linalg.matrix_power(A, n) for n in exps]
                table = torch.stack(pows) if pows else A.new_zeros(0, H, Mr, Mr)
            else:
                lam = lam.to(torch.complex128)
                pows = [lam**n for n in exps]  # (H, Mc) each
                table = torch.stack([torch.stack([p.real, p.imag]) for p in pows])
                table = table.reshape(len(exps), 2, H, 1, Mr // 2)
            self.register_buffer(f"{name}_pow", table.to(dtype))
        self.register_buffer("A_S", self._power_of(A, lam, S).to(dtype))

    def _power_of(self, A: Tensor, lam: Tensor | None, n: int) -> Tensor:
        if lam is None:
            return torch.linalg.matrix_power(A, n)
        p = lam.to(torch.complex128) ** n
        return torch.stack([p.real, p.imag]).reshape(2, self.H, 1, -1)

    def apply_power(self, P: Tensor, z: Tensor) -> Tensor:
        """Āⁿ z for a stored power P and states ``z (…, H, R, Mr)``."""
        if self.kind == "dense":
            return torch.einsum("hmn,...hrn->...hrm", P, z)
        Mc = self.Mr // 2
        zr, zi = z[..., :Mc], z[..., Mc:]
        pr, pi = P[0], P[1]  # (H, 1, Mc)
        return torch.cat([pr * zr - pi * zi, pr * zi + pi * zr], -1)

    def init_state(self, batch: int) -> Tensor:
        return self.G.new_zeros(batch, self.H, self.R, self.Mr)

    def forward(self, s: Tensor, z: Tensor) -> tuple[Tensor, Tensor]:
        """``s (B, T, R, H)``, state ``z (B, H, R, Mr)`` → ``y (B, T, H)``, new state."""
        T = s.shape[1]
        if T > self.max_chunk and not torch.compiler.is_compiling() and not _exporting():
            ys = []
            for start in range(0, T, self.max_chunk):
                y, z = self._chunk(s[:, start : start + self.max_chunk], z)
                ys.append(y)
            return torch.cat(ys, 1), z
        return self._chunk(s, z)

    def _chunk(self, s: Tensor, z: Tensor) -> tuple[Tensor, Tensor]:
        S = self.S
        B, T, R, H = s.shape
        nb = (T + S - 1) // S
        sp = F.pad(s, (0, 0, 0, 0, 0, nb * S - T)).reshape(B, nb, S, R, H)
        y = torch.einsum("bkjrh,rhij->bkih", sp, self.K_loc)  # local Toeplitz
        ell = torch.einsum("bkjrh,rhjm->bkhrm", sp, self.G)  # (B, nb, H, R, Mr)
        # Inclusive scan Z[k] = Ā^S Z[k−1] + ℓ[k] with Z[−1] = z.
        first = ell[:, :1] + self.apply_power(self.A_S, z)[:, None]
        Z = torch.cat([first, ell[:, 1:]], 1)
        for j in range(self.levels):
            d = 2**j
            shifted = torch.cat([torch.zeros_like(Z[:, :d]), Z], 1)[:, :nb]
            Z = Z + self.apply_power(self.scan_pow[j], shifted)
        Z_prev = torch.cat([z[:, None], Z], 1)[:, :nb]  # Z[k−1]
        y = y + torch.einsum("bkhrm,him->bkih", Z_prev, self.E)
        y = y.reshape(B, nb * S, H)[:, :T]

        # State after step T−1: Ā^{r_T} Z[nb−2] + contribution of the last r_T inputs.
        ones = torch.ones_like(s[0, :, 0, 0])
        T_t = ones.sum()  # T as a tensor (keeps exported graphs dynamic in T)
        r_T = T_t - (torch.div(T_t - 1, S, rounding_mode="floor")) * S  # 1 … S
        tail = F.pad(s, (0, 0, 0, 0, S, 0))[:, -S:]  # last S inputs, right-aligned
        keep = torch.arange(S, device=s.device, dtype=T_t.dtype) >= (S - r_T)
        tail = tail * keep.to(s.dtype)[None, :, None, None]
        z_new = Z_prev[:, -1]
        for k in range(self.tail_pow.shape[0]):
            bit = torch.remainder(torch.div(r_T, 2**k, rounding_mode="floor"), 2) > 0
            z_new = torch.where(bit, self.apply_power(self.tail_pow[k], z_new), z_new)
        z_new = z_new + torch.einsum("bjrh,rhjm->bhrm", tail, self.G)
        return y, z_new


def _exporting() -> bool:
    try:
        return torch.onnx.is_in_onnx_export()
    except Exception:  # noqa: BLE001
        return False
