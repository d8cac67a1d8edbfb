"""liquid-stream: causal, trainable, exactly streamable Liquid-S4.

The public API is batch-first ``(B, L, H)`` throughout:

- :class:`LiquidS4` — one SSM layer (S4/S4D convolution + D·u + liquid PB/KB term, or the
  exact linear-LTC recurrence, ``liquid="ltc"``);
- :class:`SSMConfig` — a layer's SSM settings as one value (``LiquidS4(H, config=cfg)``);
- :class:`LiquidS4Model` — encoder → residual Liquid-S4 blocks → decoder, with
  :meth:`LiquidS4Model.streaming` for its exact step-wise form;
- :func:`make_optimizer` — AdamW with the SSM parameter group;
- :class:`OnnxStreamer` — runs an exported ONNX model chunk by chunk (no torch import).

Names are imported lazily, so ``from liquid_stream import OnnxStreamer`` (the apps'
runtime path) does not import torch.
"""

from __future__ import annotations

import importlib
import os

# onnxruntime (1.2x–1.3x on Linux) resolves and contacts Microsoft's telemetry host from any
# process that keeps sessions open (seen under strace in tests/io/test_lsl.py); this variable,
# read when onnxruntime loads, turns that off. Every onnxruntime user here imports this
# package first. A value the user set is kept.
os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")

__version__ = "0.1.0"

_EXPORTS = {
    "LiquidS4": "liquid_stream.nn.layer",
    "LiquidS4Step": "liquid_stream.nn.layer",
    "SSMConfig": "liquid_stream.nn.layer",
    "LiquidS4Block": "liquid_stream.nn.model",
    "LiquidS4Model": "liquid_stream.nn.model",
    "StreamingModel": "liquid_stream.nn.model",
    "make_optimizer": "liquid_stream.nn.model",
    "parameter_groups": "liquid_stream.nn.model",
    "OnnxStreamer": "liquid_stream.runtime.onnx_streamer",
}

__all__ = [*_EXPORTS, "__version__"]


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'liquid_stream' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
