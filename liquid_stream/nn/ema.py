"""The causal exponential moving average of the streaming front ends, blockwise.

    s_t = β·s_{t−1} + (1−β)·x_t,   s_{−1} = 0                         x (B, L, C)
    w_t = 1 − β^{t+1},   μ_t = s_t / w_t     (the mean of x_0 … x_t, weights summing to one)

Used by the scale normaliser of biosignals (:mod:`liquid_stream.nn.scalenorm`: running mean
and variance per sample) and by the log-mel front end's running per-band mean
(:mod:`liquid_stream.nn.frontend`, ``cmn_s``). Their step forms run the recurrence literally,
one sample or frame at a time; this is the training forward's closed form.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def ema(x: Tensor, beta: float, block: int = 64) -> Tensor:
    """``x (B, L, C)`` → ``s (B, L, C)``, s_t = β·s_{t−1} + (1−β)·x_t, s_{−1} = 0.

    Blocks of S samples: within a block, s = T·x with the Toeplitz T[i, j] = (1−β)·β^{i−j}
    (i ≥ j); across blocks, s_{kS+i} += β^{i+1}·s_{kS−1}, a scan of ⌈L/S⌉ steps. Every sum
    is over the samples it describes (no FFT), so small early values keep their own
    relative precision — the step form agrees to float64 rounding."""
    B, L, C = x.shape
    S = min(block, L)
    n = -(-L // S)
    xb = torch.nn.functional.pad(x, (0, 0, 0, n * S - L)).reshape(B, n, S, C)
    i = torch.arange(S, dtype=x.dtype, device=x.device)
    lag = i[:, None] - i[None, :]  # (S, S)
    T = torch.where(lag >= 0, (1 - beta) * torch.exp(lag.clamp_min(0) * math.log(beta)), 0)
    local = torch.einsum("ij,bnjc->bnic", T, xb)  # (B, n, S, C)
    decay = torch.exp((i + 1) * math.log(beta))[:, None]  # (S, 1): β^{i+1}
    out, carry = [], x.new_zeros(B, C)
    for k in range(n):
        blk = local[:, k] + decay * carry[:, None]  # (B, S, C)
        out.append(blk)
        carry = blk[:, -1]
    return torch.stack(out, 1).reshape(B, n * S, C)[:, :L]


def ema_mean(x: Tensor, beta: float, block: int = 64) -> Tensor:
    """``x (B, L, C)`` → μ ``(B, L, C)``, μ_t = s_t / w_t with s = :func:`ema` and
    w_t = 1 − β^{t+1}: the exponentially weighted mean of x_0 … x_t (μ_0 = x_0)."""
    t = torch.arange(x.shape[1], dtype=x.dtype, device=x.device)
    w = (1 - torch.exp((t + 1) * math.log(beta)))[:, None]  # (L, 1)
    return ema(x, beta, block) / w
