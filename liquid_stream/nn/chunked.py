"""Closed-form evaluation of a linear recurrence over a chunk of T steps.

Per channel h, R input signals s_r share one transition (R = 1, or 1 + the KB orders):

    x_t^(r) = Ā x_{t−1}^(r) + b_r s_r[t],       y_t = Σ_r c · x_t^(r)

in a *real* state basis of size Mr (complex modes are stored as [Re; Im] pairs).
Time is cut into sub-blocks of S steps (S a power of two) on a fixed grid:

    y[kS+i] = Σ_r Σ_{i'≤i} K_r[i−i'] s_r[kS+i']       local Toeplitz, K_r[j] = c Āʲ b_r
            + E[i] · Z[k−1]                            E[i] = c Ā^{i+1}
    ℓ[k]    = Σ_i G_r[i] s_r[kS+i]                     G_r[i] = Ā^{S−1−i} b_r
    Z[k]    = Ā^S Z[k−1] + ℓ[k]                        (Hillis–Steele scan, log₂ levels)

The streaming state is the SSM state Z at the last *completed* sub-block boundary
plus the q < S inputs received since (a buffer and its fill q). A chunk of T
inputs is appended to those q, the q + T values are evaluated as above (the last,
partial sub-block zero-padded — padding lies in the future, so it changes no
output), the T new outputs are returned and the new remainder is buffered. No
power of Ā depends on T, so an exported graph is small and fully dynamic in T.

Every table is computed in float64 from the exact discrete system and only then
cast. Two kinds of transition: ``diag`` (complex diagonal λ: powers applied
elementwise, O(Mr) per state) and ``dense`` (real Mr×Mr matrix, for DPLR systems
whose eigenvectors are too ill-conditioned to diagonalise safely).
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


def chunk_tables(A: Tensor, b: Tensor, c: Tensor, S: int) -> dict[str, Tensor]:
    """float64 tables of the sub-block algorithm for a real system (A, b_r, c):

    ``K_loc`` (R, H, S, S) with K_loc[r, h, i, j] = K_r[i−j] (0 above the diagonal),
    ``G`` (R, H, S, Mr) = Ā^{S−1−j} b_r and ``E`` (H, S, Mr) = c Ā^{i+1}.
    """
    A, b, c = A.double(), b.double(), c.double()
    Ab, cA = [b], [c]
    for _ in range(S):
        Ab.append(torch.einsum("hmn,rhn->rhm", A, Ab[-1]))
        cA.append(torch.einsum("hm,hmn->hn", cA[-1], A))
    K = torch.stack([(c * Ab[j]).sum(-1) for j in range(S)], -1)  # (R, H, S)
    i = torch.arange(S)
    lag = i[:, None] - i[None, :]
    return {
        "K_loc": torch.where(lag >= 0, K[..., lag.clamp(min=0)], 0.0),
        "G": torch.stack([Ab[S - 1 - j] for j in range(S)], 2),
        "E": torch.stack([cA[j + 1] for j in range(S)], 1),
    }


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
        n_blocks = -(-(S - 1 + max_chunk) // S)  # sub-blocks of the longest chunk + buffer
        self.levels = math.ceil(math.log2(n_blocks)) if n_blocks > 1 else 0
        self.max_chunk = S * 2**self.levels - (S - 1)
        A, b, c = A.double(), b.double(), c.double()
        # The exact real system, kept in float64 for exporters.
        self.register_buffer("A64", A, persistent=False)
        self.register_buffer("b64", b, persistent=False)
        self.register_buffer("c64", c, persistent=False)
        for name, table in chunk_tables(A, b, c, S).items():
            self.register_buffer(name, table.to(dtype))

        # Ā^{S·2^j} for the scan levels; ``diag`` stores (Re, Im) of λ^n as (2, H, 1, Mc).
        exps = [S * 2**j for j in range(max(self.levels, 1))]
        if lam is None:
            table = torch.stack([torch.linalg.matrix_power(A, n) for n in exps])
        else:
            pows = [lam.to(torch.complex128) ** n for n in exps]
            table = torch.stack([torch.stack([p.real, p.imag]) for p in pows])
            table = table.reshape(len(exps), 2, H, 1, Mr // 2)
        self.register_buffer("pow", table.to(dtype))  # pow[0] = Ā^S

    def apply_power(self, P: Tensor, z: Tensor) -> Tensor:
        """Āⁿ z for a stored power P and states ``z (…, H, R, Mr)``."""
        if self.kind == "dense":
            return torch.einsum("hmn,...hrn->...hrm", P, z)
        Mc = self.Mr // 2
        zr, zi = z[..., :Mc], z[..., Mc:]
        pr, pi = P[0], P[1]  # (H, 1, Mc)
        return torch.cat([pr * zr - pi * zi, pr * zi + pi * zr], -1)

    def init_state(self, batch: int) -> dict[str, Tensor]:
        """``z`` (B, H, R, Mr) at the last sub-block boundary, ``buf`` (B, S, R, H) holding
        the ``fill`` (shape (1,), int64, shared by the batch) inputs received since."""
        return {
            "z": self.G.new_zeros(batch, self.H, self.R, self.Mr),
            "buf": self.G.new_zeros(batch, self.S, self.R, self.H),
            "fill": torch.zeros(1, dtype=torch.int64, device=self.G.device),
        }

    def forward(self, s: Tensor, state: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        """``s (B, T, R, H)`` → ``y (B, T, H)`` and the new state (chunks > max_chunk split)."""
        ys = []
        for start in range(0, s.shape[1], self.max_chunk):
            y, state = self._chunk(s[:, start : start + self.max_chunk], state)
            ys.append(y)
        return (torch.cat(ys, 1) if len(ys) > 1 else ys[0]), state

    def _chunk(self, s: Tensor, state: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        """One pass over ``s (B, T, R, H)``, T ≤ max_chunk, in the named steps below (the
        exporter, :mod:`liquid_stream.export.to_onnx`, emits the same steps)."""
        q, T = int(state["fill"][0]), s.shape[1]
        ext, sp = self.sub_blocks(s, state["buf"], q)
        ell = self.block_inputs(sp)
        Z_prev = self.scan(ell, state["z"])
        y = self.outputs(sp, Z_prev)[:, q : q + T]
        return y, self.next_state(ext, Z_prev, state)

    def sub_blocks(self, s: Tensor, buf: Tensor, q: int) -> tuple[Tensor, Tensor]:
        """``ext`` (B, q+T, R, H): the q inputs buffered since the last boundary, then the T
        new ones; ``sp`` (B, nb, S, R, H): ext zero-padded to nb = ⌈(q+T)/S⌉ sub-blocks (the
        padding lies in the future, so it changes no output)."""
        S = self.S
        B, T, R, H = s.shape
        ext = torch.cat([buf[:, S - q :], s], 1)  # (B, q+T, R, H)
        n = q + T
        nb = -(-n // S)
        return ext, F.pad(ext, (0, 0, 0, 0, 0, nb * S - n)).reshape(B, nb, S, R, H)

    def block_inputs(self, sp: Tensor) -> Tensor:
        """ℓ[k] = Σ_i G_r[i] s_r[kS+i], ``(B, nb, H, R, Mr)``: each sub-block's input to Z."""
        return torch.einsum("bkjrh,rhjm->bkhrm", sp, self.G)

    def scan(self, ell: Tensor, z: Tensor) -> Tensor:
        """``Z_prev`` (B, nb+1, H, R, Mr) = Z[k−1], k = 0 … nb, of the inclusive scan
        Z[k] = Ā^S Z[k−1] + ℓ[k] from Z[−1] = z (the carried state): Hillis–Steele, level j
        adds Ā^{S·2^j} times the partial sums 2^j sub-blocks earlier."""
        nb = ell.shape[1]
        first = ell[:, :1] + self.apply_power(self.pow[0], z)[:, None]
        Z = torch.cat([first, ell[:, 1:]], 1)
        for j in range(self.levels):
            d = 2**j
            shifted = torch.cat([torch.zeros_like(Z[:, :d]), Z], 1)[:, :nb]
            Z = Z + self.apply_power(self.pow[j], shifted)
        return torch.cat([z[:, None], Z], 1)  # Z[k−1], k = 0 … nb

    def outputs(self, sp: Tensor, Z_prev: Tensor) -> Tensor:
        """y[kS+i] = Σ_r Σ_{j≤i} K_r[i−j] s_r[kS+j] + E[i] · Z[k−1] (the local Toeplitz and
        the state carried into sub-block k), ``(B, nb·S, H)``."""
        B, nb, S, R, H = sp.shape
        y = torch.einsum("bkjrh,rhij->bkih", sp, self.K_loc)  # local Toeplitz
        y = y + torch.einsum("bkhrm,him->bkih", Z_prev[:, :nb], self.E)
        return y.reshape(B, nb * S, H)

    def next_state(
        self, ext: Tensor, Z_prev: Tensor, state: dict[str, Tensor]
    ) -> dict[str, Tensor]:
        """``z`` = Z at the last completed sub-block boundary, ``buf`` = the last S inputs
        (zeros before the first), ``fill`` = (q+T) mod S of them since that boundary."""
        S, n = self.S, ext.shape[1]
        n_full = n // S
        return {
            "z": Z_prev[:, n_full],
            "buf": torch.cat([torch.zeros_like(state["buf"]), ext], 1)[:, -S:],
            "fill": torch.full_like(state["fill"], n - n_full * S),
        }
