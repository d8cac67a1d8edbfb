"""What the graph emitters share: the emission limits and the float64 tables' helpers
(:mod:`.to_onnx`)."""

from __future__ import annotations

import numpy as np
import torch

END = 2**62  # "to the end" in Slice
WHOLE_CALL_MAX = 64  # a call of T steps as one MatMul while T + Mr (its columns) ≤ this
CLOSED_FORM_MAX_BLOCKS = 8  # sub-block recursion in closed form up to this many blocks
MATMUL_SCAN_MIN_BLOCKS = 4  # from this many, the closed form as one batched MatMul
LTC_MIN_B = 1e-20  # the LTC graph's coordinate z = x / B̄ needs |B̄| ≥ this
LTC_OPS = ("graph", "fused")  # the LTC layers as standard ops, or as ai.liquid_stream::LtcScan


def _f32(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().double().numpy().astype(np.float32)


def default_sub_block(chunk: int) -> int:
    """Largest power of two ≤ chunk/4, in 1 … 64: local work ~S per sample, scan depth
    ~log₂(T/S); measured best here: S = 32 at T = 160, S = 64 at T = 1600."""
    return 1 << min(6, max(0, (int(chunk) // 4).bit_length() - 1))


def default_ltc_sub_block(steps: int) -> int:
    """Q, the sub-block of the LTC layers' blocked scan, for chunks of ``steps`` stack steps:
    ~28 ops for each of the Q positions, one ``Scan`` iteration (~5 µs) per sub-block.
    Measured on the six 128-channel LTC layers of the paper model alone (1 thread,
    interleaved, 2026-11-27): 160 steps, Q = 2 / 4 / 8 / 16: 4.8 / 4.0 / 4.6 / 6.5 ms;
    1600 steps, Q = 4 / 8 / 16 / 32: 36.6 / 34.0 / 36.4 / 47.0 ms."""
    return 4 if steps <= 256 else 8


def diag_lambda(step) -> torch.Tensor:
    """λ ``(H, Mc)`` complex128 of a diagonal Ā, from its real [[Re, −Im], [Im, Re]] form."""
    A, Mc = step.ssm.A64.double(), step.ssm.Mr // 2
    return torch.complex(
        A[:, :Mc, :Mc].diagonal(dim1=1, dim2=2), A[:, Mc:, :Mc].diagonal(dim1=1, dim2=2)
    )


def power_table(lam: torch.Tensor, S: int, R: int, n_max: int) -> torch.Tensor:
    """The closed-form scan's table p[k, k'] = λ^{S(k−k')} for k ≥ k', 0 above,
    ``(n_max, n_max, H·R, Mc)`` complex128 (repeated over the R inputs)."""
    H, Mc = lam.shape
    k = torch.arange(n_max)
    lag = (k[:, None] - k[None, :]).clamp(min=0).double()  # (k, k')
    p = torch.exp(S * lag[..., None, None] * torch.log(lam.to(torch.complex128)))
    p = torch.where((k[:, None] >= k[None, :])[..., None, None], p, 0)  # (k, k', H, Mc)
    return p[:, :, :, None, :].expand(n_max, n_max, H, R, Mc).reshape(n_max, n_max, H * R, Mc)
