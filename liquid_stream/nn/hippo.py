"""HiPPO initialisations for S4 (DPLR) and S4D (diagonal) state matrices.

HiPPO-LegS (Gu et al. 2020) projects the input history onto scaled Legendre
polynomials. Its state matrix, for n, k = 0 … N−1,

    A_nk = −(2n+1)^½ (2k+1)^½   if n > k
    A_nk = −(n+1)               if n = k
    A_nk = 0                    if n < k,       B_n = (2n+1)^½,

is *normal plus low rank* (NPLR): with P_n = (n+½)^½ the matrix S = A + P Pᵀ
equals −½ I plus a skew-symmetric matrix, hence is unitarily diagonalisable,
S = V Λ Vᴴ. In the eigenbasis, A = V (Λ − P̃ P̃ᴴ) Vᴴ with P̃ = Vᴴ P, B̃ = Vᴴ B.

Eigenvalues of a real matrix come in conjugate pairs; we keep the M = N // 2
with positive imaginary part (for odd N the single real eigenvalue is dropped,
as in the S4 reference code) and restore the other half by conjugation.

The LegS initialisations build and eigendecompose the dense N × N matrix, so N is bounded by
:data:`MAX_D_STATE` (4096: a 256 MiB complex matrix; the presets use at most
512): ``d_state=100000`` would need 149 GiB and is refused by name instead.
"""

from __future__ import annotations

import math

import numpy as np
import torch

# The largest d_state the dense LegS initialisation is built for (module docstring).
MAX_D_STATE = 4096


def _check_size(N: int) -> None:
    if N > MAX_D_STATE:
        raise ValueError(
            f"d_state={N} is above the limit of {MAX_D_STATE} (MAX_D_STATE in "
            f"liquid_stream/nn/hippo.py): the LegS initialisation eigendecomposes a dense "
            f"{N} x {N} matrix ({16 * N * N / 2**30:.3g} GiB)"
        )


def hippo_legs(N: int) -> tuple[np.ndarray, np.ndarray]:
    """Dense HiPPO-LegS matrices ``A (N, N)`` and ``B (N,)`` in float64."""
    _check_size(N)
    q = np.sqrt(2.0 * np.arange(N) + 1.0)
    A = -np.tril(np.outer(q, q), -1) - np.diag(np.arange(N) + 1.0)
    return A, q.copy()


def nplr_legs(N: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """S4-LegS NPLR initialisation (rank 1) in the eigenbasis of the normal part.

    Returns complex128 tensors ``Lambda (M,)``, ``P (M,)``, ``B (M,)`` with M = N // 2,
    the half of the spectrum with positive imaginary part, sorted by frequency.
    The full real system is A = diag(Λ, Λ̄) − [P; P̄][P; P̄]ᴴ with B = [B; B̄].
    """
    if N < 2:
        raise ValueError(f"d_state must be >= 2 for the S4-LegS init, got {N}")
    A, B = hippo_legs(N)
    P = np.sqrt(np.arange(N) + 0.5)
    S = A + np.outer(P, P)  # = −½ I + skew-symmetric
    # The skew part is Hermitian after multiplication by −i: stable eigh.
    skew = S + 0.5 * np.eye(N)
    lam_im, V = np.linalg.eigh(-1j * skew)
    keep = np.argsort(lam_im)[::-1][: N // 2]  # largest positive frequencies first
    keep = keep[np.argsort(lam_im[keep])]  # sort ascending in frequency
    V = V[:, keep]
    Lambda = -0.5 + 1j * lam_im[keep]
    P_t = V.conj().T @ P
    B_t = V.conj().T @ B
    return (
        torch.from_numpy(Lambda.astype(np.complex128)),
        torch.from_numpy(P_t.astype(np.complex128)),
        torch.from_numpy(B_t.astype(np.complex128)),
    )


def diag_init(N: int, init: str = "legs") -> tuple[torch.Tensor, torch.Tensor]:
    """S4D diagonal initialisations; returns ``Lambda (M,)``, ``B (M,)`` complex128, M = N // 2.

    - ``legs``: Λ is the diagonal of the S4-LegS NPLR form and B its projected input
      vector (S4D-LegS, which approximates the LegS kernel);
    - ``lin``:  Λ_n = −½ + iπn, B_n = 1 (S4D-Lin);
    - ``inv``:  Λ_n = −½ + i N/π (N/(2n+1) − 1), B_n = 1 (S4D-Inv).
    """
    M = N // 2
    if M < 1:
        raise ValueError(f"d_state must be >= 2, got {N}")
    n = np.arange(M, dtype=np.float64)
    if init == "legs":
        Lambda, _, B = nplr_legs(N)
        return Lambda, B
    if init == "lin":
        Lambda = -0.5 + 1j * math.pi * n
    elif init == "inv":
        Lambda = -0.5 + 1j * N / math.pi * (N / (2 * n + 1) - 1)
    else:
        raise ValueError(f"unknown diag init {init!r}; expected 'legs', 'lin' or 'inv'")
    return torch.from_numpy(Lambda.astype(np.complex128)), torch.ones(M, dtype=torch.complex128)
