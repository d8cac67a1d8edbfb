"""The integrity of an int8 graph's quantization parameters (onnx + numpy; no torch).

    record = quantization_record(quantized_model, float_model)   # export: what to stamp
    check_quantized(model, meta_quantization)                    # load / verify: or raise

An int8 graph (``liquid-stream export … --quantize int8``, :mod:`liquid_stream.export.quantize`)
replaces weight initializers by integer tensors, their scales and zero points. A scale is
one number that multiplies a whole weight matrix: a scale scaled ×1000 or set to NaN by a
corrupted file gives a model that still runs, and answers wrongly (or NaN) from then on.
So the export stamps, in the ``quantization`` metadata entry (schema:
:mod:`liquid_stream.meta`), ``params``: every initializer the quantization added (the
integer weights, the scales, the zero points) → the first 16 hex digits of the SHA-256 of
its raw bytes (dtype, shape and values). :func:`check_quantized` recomputes them:
:class:`QuantizationError` (one line naming the tensor) for a missing tensor, a scale
that is not finite and positive, or any byte changed. :class:`~liquid_stream.OnnxStreamer`
runs it when it loads a graph whose metadata carries ``quantization``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

DIGITS = 16  # hex digits of SHA-256 kept per tensor


class QuantizationError(ValueError):
    """A quantized graph whose quantization parameters are missing, invalid or changed."""


def tensor_digest(t: onnx.TensorProto) -> str:
    """SHA-256 (first :data:`DIGITS` hex digits) of a tensor's dtype, shape and values."""
    a = numpy_helper.to_array(t)
    h = hashlib.sha256(f"{a.dtype.str}{list(a.shape)}".encode())
    h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:DIGITS]


def _initializers(model: onnx.ModelProto) -> dict[str, onnx.TensorProto]:
    """Every initializer of the graph and of its subgraphs, by name."""
    out: dict[str, onnx.TensorProto] = {}

    def walk(g: onnx.GraphProto) -> None:
        out.update((t.name, t) for t in g.initializer)
        for node in g.node:
            for a in node.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    walk(a.g)
                for sub in a.graphs:
                    walk(sub)

    walk(model.graph)
    return out


def quantization_record(quantized: onnx.ModelProto, original: onnx.ModelProto) -> dict[str, str]:
    """``params`` of the metadata: initializer name → digest, for every initializer of
    ``quantized`` that ``original`` does not hold with the same bytes."""
    before = {n: tensor_digest(t) for n, t in _initializers(original).items()}
    return {
        name: d
        for name, t in sorted(_initializers(quantized).items())
        if before.get(name) != (d := tensor_digest(t))
    }


def check_quantized(model: onnx.ModelProto, record: Any) -> None:
    """Raise :class:`QuantizationError` unless every tensor of ``record["params"]`` is in
    ``model`` with its digest, and every float tensor among them (the scales) is finite
    and positive."""
    params = record.get("params") if isinstance(record, Mapping) else None
    if not isinstance(params, Mapping) or not params:
        raise QuantizationError("metadata quantization has no 'params' checksums; re-export")
    inits = _initializers(model)
    for name, digest in params.items():
        t = inits.get(name)
        if t is None:
            raise QuantizationError(f"quantization parameter {name!r} is missing from the graph")
        a = numpy_helper.to_array(t)
        if a.dtype.kind == "f" and not (np.isfinite(a).all() and (a > 0).all()):
            bad = a.reshape(-1)[~(np.isfinite(a.reshape(-1)) & (a.reshape(-1) > 0))][0]
            raise QuantizationError(
                f"quantization scale {name!r} is {bad!r}, not finite and positive (corrupt file)"
            )
        if tensor_digest(t) != digest:
            raise QuantizationError(
                f"quantization parameter {name!r} does not match its checksum in the metadata "
                "(corrupt file)"
            )
