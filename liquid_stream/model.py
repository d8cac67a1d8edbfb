"""Liquid-S4 blocks and the sequence model (the S4 standard architecture).

Block (pre-norm):   x → norm → LiquidS4 → GELU → dropout → Linear(H→2H) → GLU → + x
Block (post-norm):  x → LiquidS4 → GELU → dropout → Linear(H→2H) → GLU → + x → norm
Model:  Linear(d_input→H) → n blocks → final norm (pre-norm only) → decoder

Decoders (``(B, L, H)`` → logits):
- ``pool``:   mean over time, then Linear(H→d_output)            → ``(B, d_output)``
- ``last``:   the last step, then Linear                          → ``(B, d_output)``
- ``window``: causal mean over the last W steps, then Linear, per step
              (at t < W the mean is over the t + 1 steps seen)     → ``(B, L, d_output)``
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .kernel_base import SSM_PARAMETER_NAMES, SSMKernel
from .layer import LiquidS4, check_input
from .liquid import causal_window_sum

DECODERS = ("pool", "last", "window")
NORMS = ("batch", "layer")


class Norm(nn.Module):
    """BatchNorm1d or LayerNorm over the H features of a ``(B, L, H)`` tensor."""

    def __init__(self, d_model: int, kind: str):
        super().__init__()
        if kind not in NORMS:
            raise ValueError(f"norm must be 'batch' or 'layer', got {kind!r}")
        self.kind = kind
        self.norm = nn.BatchNorm1d(d_model) if kind == "batch" else nn.LayerNorm(d_model)

    def forward(self, x: Tensor) -> Tensor:
        if self.kind == "batch":
            return self.norm(x.transpose(1, 2)).transpose(1, 2)
        return self.norm(x)


class LiquidS4Block(nn.Module):
    """One residual block around a :class:`LiquidS4` layer, ``(B, L, H) → (B, L, H)``."""

    def __init__(
        self,
        d_model: int,
        norm: str = "batch",
        prenorm: bool = True,
        dropout: float = 0.0,
        **ssm_kwargs,
    ):
        super().__init__()
        self.prenorm = prenorm
        self.norm = Norm(d_model, norm)
        self.ssm = LiquidS4(d_model, **ssm_kwargs)
        self.dropout = nn.Dropout(dropout)
        self.out = nn.Linear(d_model, 2 * d_model)

    def forward(self, x: Tensor, rate: float = 1.0) -> Tensor:
        z = self.norm(x) if self.prenorm else x
        z = self.dropout(F.gelu(self.ssm(z, rate)))
        z = F.glu(self.out(z), dim=-1)
        x = x + z
        return x if self.prenorm else self.norm(x)


class LiquidS4Model(nn.Module):
    """Encoder → stacked Liquid-S4 blocks → decoder.

    ``forward(x (B, L, d_input), rate=1.0)`` returns ``(B, d_output)`` for ``pool``/``last``
    and ``(B, L, d_output)`` for ``window``. Every constructor argument is kept in
    :attr:`config`, so ``LiquidS4Model(**model.config)`` rebuilds the architecture.
    """

    def __init__(
        self,
        d_input: int,
        d_output: int,
        d_model: int = 128,
        n_layers: int = 4,
        d_state: int = 64,
        mode: str = "dplr",
        liquid: str | None = None,
        liquid_order: int = 2,
        liquid_len: int = 1,
        dt_min: float = 0.001,
        dt_max: float = 0.1,
        bidirectional: bool = False,
        init: str = "legs",
        disc: str = "bilinear",
        backend: str = "auto",
        norm: str = "batch",
        prenorm: bool = True,
        dropout: float = 0.0,
        decoder: str = "pool",
        decoder_window: int = 1,
    ):
        super().__init__()
        self.config = {k: v for k, v in locals().items() if k not in ("self", "__class__")}
        if decoder not in DECODERS:
            raise ValueError(f"decoder must be one of {DECODERS}, got {decoder!r}")
        if decoder_window < 1:
            raise ValueError(f"decoder_window must be >= 1, got {decoder_window}")
        self.d_input, self.d_output, self.decoder = d_input, d_output, decoder
        self.decoder_window, self.prenorm = decoder_window, prenorm
        self.encoder = nn.Linear(d_input, d_model)
        ssm_kwargs = dict(
            d_state=d_state, mode=mode, liquid=liquid, liquid_order=liquid_order,
            liquid_len=liquid_len, dt_min=dt_min, dt_max=dt_max, bidirectional=bidirectional,
            init=init, disc=disc, backend=backend,
        )  # fmt: skip
        self.blocks = nn.ModuleList(
            LiquidS4Block(d_model, norm, prenorm, dropout, **ssm_kwargs) for _ in range(n_layers)
        )
        self.final_norm = Norm(d_model, norm) if prenorm else nn.Identity()
        self.head = nn.Linear(d_model, d_output)

    @property
    def is_causal(self) -> bool:
        """True when the whole model can run step by step (no bidirectional layer)."""
        return all(b.ssm.is_causal for b in self.blocks)

    def features(self, x: Tensor, rate: float = 1.0) -> Tensor:
        """The sequence of features before the decoder, ``(B, L, H)``."""
        check_input(x, self.d_input, "x")
        h = self.encoder(x)
        for block in self.blocks:
            h = block(h, rate)
        return self.final_norm(h)

    def forward(self, x: Tensor, rate: float = 1.0) -> Tensor:
        h = self.features(x, rate)
        if self.decoder == "pool":
            return self.head(h.mean(1))
        if self.decoder == "last":
            return self.head(h[:, -1])
        L = h.shape[1]
        count = torch.arange(1, L + 1, device=h.device, dtype=h.dtype).clamp(
            max=self.decoder_window
        )
        mean = causal_window_sum(h.transpose(1, 2), self.decoder_window) / count
        return self.head(mean.transpose(1, 2))


def parameter_groups(
    model: nn.Module,
    lr: float,
    weight_decay: float,
    ssm_lr: float = 1e-3,
    ssm_weight_decay: float = 0.0,
) -> list[dict]:
    """Split parameters into the SSM group (log_dt, Λ, B, P: own lr, no decay) and the rest."""
    ssm, rest = [], []
    for module in model.modules():
        for name, p in module.named_parameters(recurse=False):
            if not p.requires_grad:
                continue
            is_ssm = isinstance(module, SSMKernel) and name in SSM_PARAMETER_NAMES
            (ssm if is_ssm else rest).append(p)
    groups = [{"params": rest, "lr": lr, "weight_decay": weight_decay, "name": "default"}]
    if ssm:
        groups.append(
            {"params": ssm, "lr": ssm_lr, "weight_decay": ssm_weight_decay, "name": "ssm"}
        )
    return groups


def make_optimizer(
    model: nn.Module,
    lr: float,
    weight_decay: float,
    ssm_lr: float = 1e-3,
    ssm_weight_decay: float = 0.0,
) -> torch.optim.AdamW:
    """AdamW with the S4 convention: SSM parameters in their own group (lr 1e-3, wd 0)."""
    return torch.optim.AdamW(parameter_groups(model, lr, weight_decay, ssm_lr, ssm_weight_decay))
