"""The liquid (input-correlation) terms of Liquid-S4, causal and trainable.

Order P ≥ 2; all powers are elementwise in the liquid basis (Λ diagonal):
b_p = B̄^{∘p}. The correlation signals are products of consecutive lags ending at t
(paper eq. 11), with u[<0] = 0:

    v_p[t] = u[t] · u[t−1] · … · u[t−p+1]

PB (powers of B, paper eq. 14; Ā replaced by I, kernel length L̃ = ``liquid_len``):

    c_p = s · Re(C · b_p),      y_pb[t] = Σ_p c_p Σ_{j<L̃} v_p[t−j]

KB (kernel × B, paper eq. 13 / Proposition 1):

    K̄_p[j] = s · Re(C Āʲ b_p),  y_kb[t] = Σ_p Σ_{j≤t} K̄_p[j] v_p[t−j]

Both are recomputed from the current parameters at every call, so every
parameter they depend on (log_dt, Λ, B, P, C) receives gradient.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from .kernel_base import Discrete

LIQUID_KINDS = (None, "pb", "kb", "ltc")  # ltc: liquid_stream.nn.ltc (diag mode only)
MAX_LIQUID_ORDER = 10


def shift(u: Tensor, k: int) -> Tensor:
    """Delay along the last axis by k steps with zeros: out[…, t] = u[…, t−k]."""
    if k == 0:
        return u
    L = u.shape[-1]
    return F.pad(u[..., : max(L - k, 0)], (min(k, L), 0))


def correlation_signals(u: Tensor, order: int) -> Tensor:
    """v_p for p = 2 … order, stacked: ``u (…, L)`` → ``(order − 1, …, L)``."""
    out, v = [], u
    for p in range(2, order + 1):
        v = v * shift(u, p - 1)
        out.append(v)
    return torch.stack(out)


def liquid_inputs(disc: Discrete, order: int) -> Tensor:
    """b_p = B̄^{∘p} for p = 2 … order: ``(order − 1, H, Mf)``."""
    return torch.stack([disc.B_bar**p for p in range(2, order + 1)])


def pb_coefficients(disc: Discrete, order: int) -> Tensor:
    """c_p = s · Re(Σ_m C_m (B̄_m)^p) of the forward channel: ``(order − 1, H)``."""
    return disc.scale * (disc.C[0] * liquid_inputs(disc, order)).sum(-1).real


def causal_window_sum(x: Tensor, n: int) -> Tensor:
    """out[…, t] = Σ_{j<n} x[…, t−j] (zeros before the start), for ``x (B, H, L)``.

    Short windows: a depthwise convolution. Long ones (the ``window`` decoder, n up to the
    sequence length): O(L) prefix sums in float64, out_t = S_t − S_{t−n}, so the cost does
    not grow with n and the difference of two large sums loses nothing in float32."""
    if n == 1:
        return x
    B, H, L = x.shape
    if n <= 32:
        w = x.new_ones(H, 1, n)
        return F.conv1d(F.pad(x, (n - 1, 0)), w, groups=H)
    s = torch.cumsum(x.double(), -1)
    if n < L:
        s = torch.cat([s[..., :n], s[..., n:] - s[..., : L - n]], -1)
    return s.to(x.dtype)


def pb_term(u: Tensor, disc: Discrete, order: int, liquid_len: int) -> Tensor:
    """y_pb for ``u (B, H, L)`` → ``(B, H, L)``."""
    c = pb_coefficients(disc, order)  # (P−1, H)
    v = correlation_signals(u, order)  # (P−1, B, H, L)
    mixed = torch.einsum("ph,pbhl->bhl", c.to(u.dtype), v)
    return causal_window_sum(mixed, liquid_len)
