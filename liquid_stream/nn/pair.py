"""The ``pair`` decoder of LRA retrieval (AAN): two sequences per example, offline only.

For ``x (B, 2, L, d_input)`` both sequences go through the same encoder and blocks
(:meth:`~liquid_stream.nn.model.LiquidS4Model.features`, as one batch of 2B rows) and are
mean-pooled over time; the two encodings are compared by a small MLP:

    a = mean_t f(x[:, 0]),   b = mean_t f(x[:, 1])              (B, H)
    z = GELU(W [a, b, a·b, a − b] + c)                           (B, H),   W (H, 4H)
    logits = the model's head and output affine on z             (B, d_output)

[a − b] is ordered: swapping the two sequences changes the logits. The decoder needs both
whole sequences, so a pair model has no per-step output and no streaming form; the
model refuses both with the messages below, and nothing of it exists in the step form.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

NO_STEPS = "the pair decoder compares two whole sequences: no per-step output"
NOT_STREAMABLE = "a pair (two-sequence retrieval) model cannot be streamed"


class PairDecoder(nn.Sequential):
    """Linear(4H → H) → GELU on [a, b, a·b, a − b], from the pair ``x`` and the encoder.

    A Sequential of those two layers, so that a model's ``pair_mlp`` keeps the parameter
    names ``pair_mlp.0.weight``, ``pair_mlp.0.bias`` of the checkpoints written before it
    was its own class; only :meth:`forward` differs.
    """

    def __init__(self, d_model: int):
        super().__init__(nn.Linear(4 * d_model, d_model), nn.GELU())

    def forward(self, x: Tensor, features: Callable[[Tensor], Tensor]) -> Tensor:
        """``x (B, 2, L, d_input)`` → ``z (B, H)``, with the model's encoder and blocks
        ``features``: ``(N, L, d_input) → (N, L', H)``."""
        if x.dim() != 4 or x.shape[1] != 2:
            raise ValueError(
                f"the pair decoder takes x of shape (B, 2, L, d_input), got {tuple(x.shape)}"
            )
        B = x.shape[0]
        pooled = features(x.flatten(0, 1)).mean(1)  # (2B, H), rows a0 b0 a1 b1 …
        a, b = pooled.view(B, 2, -1).unbind(1)
        return super().forward(torch.cat([a, b, a * b, a - b], -1))
