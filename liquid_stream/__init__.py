"""liquid-stream: causal, trainable, exactly streamable Liquid-S4.

The public API is batch-first ``(B, L, H)`` throughout:

- :class:`LiquidS4` — one SSM layer (S4/S4D convolution + D·u + liquid PB/KB term);
- :class:`LiquidS4Model` — encoder → residual Liquid-S4 blocks → decoder;
- :func:`make_optimizer` — AdamW with the SSM parameter group.
"""

__version__ = "0.1.0"

from .layer import LiquidS4  # noqa: E402
from .model import LiquidS4Block, LiquidS4Model, make_optimizer, parameter_groups  # noqa: E402

__all__ = [
    "LiquidS4",
    "LiquidS4Block",
    "LiquidS4Model",
    "make_optimizer",
    "parameter_groups",
    "__version__",
]
