"""Brute-force float64 references: literal loops over time of the design's equations.

Nothing here shares code with the library: the recurrences are written directly from
docs/design.md §2–3 so that the tests compare two independent computations.
"""

from __future__ import annotations

import torch
from torch import Tensor


def recurrence_s4(mats: dict, u: Tensor) -> Tensor:
    """x_t = Ā x_{t−1} + B̄ u_t, y_t = s·Re(C x_t) + D u_t for ``u (B, L, H)`` (float64)."""
    A, Bb, C, D, s = mats["A_bar"], mats["B_bar"], mats["C"], mats["D"], mats["scale"]
    batch, L, H = u.shape
    x = torch.zeros(batch, H, A.shape[-1], dtype=torch.complex128)
    ys = []
    for t in range(L):
        x = torch.einsum("hmn,bhn->bhm", A, x) + Bb * u[:, t, :, None]
        ys.append(s * (C * x).sum(-1).real + D * u[:, t])
    return torch.stack(ys, 1)


def correlation(u: Tensor, t: int, p: int) -> Tensor:
    """v_p[t] = u[t]·u[t−1]·…·u[t−p+1], zero when t − p + 1 < 0. ``u (B, L, H)`` → (B, H)."""
    if t - p + 1 < 0:
        return torch.zeros_like(u[:, 0])
    out = torch.ones_like(u[:, 0])
    for i in range(p):
        out = out * u[:, t - i]
    return out


def liquid_literal(mats: dict, u: Tensor) -> Tensor:
    """The liquid term alone (PB or KB), literally from its definition (float64)."""
    kind, P, Lt = mats["liquid"], mats["liquid_order"], mats["liquid_len"]
    A, Bb, C, s = mats["A_bar"], mats["B_bar"], mats["C"], mats["scale"]
    batch, L, H = u.shape
    y = torch.zeros(batch, L, H, dtype=torch.float64)
    if kind is None:
        return y
    if kind == "pb":
        for p in range(2, P + 1):
            c_p = s * (C * Bb**p).sum(-1).real  # (H,)
            for t in range(L):
                for j in range(Lt):
                    if t - j >= 0:
                        y[:, t] += c_p * correlation(u, t - j, p)
        return y
    for p in range(2, P + 1):  # KB: one extra state per order
        x = torch.zeros(batch, H, A.shape[-1], dtype=torch.complex128)
        for t in range(L):
            x = torch.einsum("hmn,bhn->bhm", A, x) + Bb**p * correlation(u, t, p)[..., None]
            y[:, t] += s * (C * x).sum(-1).real
    return y


def recurrence_ltc(mats: dict, u: Tensor, rho: float = 0.99, x0: Tensor | None = None):
    """The linear-LTC recurrence of docs/design.md (§3, eq. (10), diag) as a literal loop:

    x_t = (Ā + B̃ tanh(u_t)) x_{t−1} + B̄ u_t,  B̃ = B̄·min(1, ρ(1 − |Ā|)/|B̄|),
    y_t = s·Re(C x_t) + D u_t.

    ``mats`` as :meth:`LiquidS4.ssm_matrices` (A_bar diagonal; tensors may carry autograd).
    Returns ``y (B, L, H)`` and the last state ``x (B, H, M)``."""
    A = (
        torch.diagonal(mats["A_bar"], dim1=-2, dim2=-1)
        if mats["A_bar"].dim() == 3
        else mats["A_bar"]
    )
    Bb, C, D, s = mats["B_bar"], mats["C"], mats["D"], mats["scale"]
    Bl = Bb * torch.clamp(rho * (1 - A.abs()) / Bb.abs(), max=1.0)
    batch, L, H = u.shape
    x = torch.zeros(batch, H, A.shape[-1], dtype=torch.complex128) if x0 is None else x0
    ys = []
    for t in range(L):
        ut = u[:, t, :, None]
        x = (A + Bl * torch.tanh(ut)) * x + Bb * ut
        ys.append(s * (C * x).sum(-1).real + D * u[:, t])
    return torch.stack(ys, 1), x
