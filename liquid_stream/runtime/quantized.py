"""The integrity of an int8 graph's quantization parameters (onnx + numpy; no torch).

    record = quantization_record(quantized_model, float_model)   # export: what to stamp
    check_quantized(model, meta_quantization)                    # load / verify: or raise

An int8 graph (``liquid-stream export … --quantize int8``, :mod:`liquid_stream.export.quantize`)
replaces weight initializers by integer tensors, their scales and zero points. A scale is
one number that multiplies a whole weight matrix: a scale scaled ×1000 or set to NaN by a
corrupted file gives a model that still runs, and answers wrongly (or NaN) from then on.
So the export stamps, in the ``quantization`` metadata entry (schema:
:mod:`liquid_stream.runtime.meta`), ``params``: every initializer the quantization added (the
integer weights, the scales, the zero points) → the first 16 hex digits of the SHA-256 of
its raw bytes (dtype, shape and values). :func:`check_quantized` recomputes them:
:class:`QuantizationError` (one line naming the tensor) for a missing tensor, a scale
that is not finite and positive, or any byte changed. :class:`~liquid_stream.OnnxStreamer`
runs it when it loads a graph whose metadata carries ``quantization``.

**Every graph: the content hash** (``integrity``, the last metadata entry). A float graph
has no quantization checksums, and flipped bytes in its weights give a model that loads,
runs and answers wrongly (50 flipped bytes in the shipped spotter: 2 detections instead
of 12). So every tool that writes a graph (export, ``--quantize``, an ensemble,
``kws-tune``) stamps it last (:func:`stamp_integrity`) with

    {"algorithm": "sha256", "graph": SHA-256 of the IR version, the opset imports and the
     graph (nodes, weights, subgraphs; protobuf's deterministic serialisation),
     "metadata": {key: first 16 hex digits of SHA-256 of "key NUL value"} of every other entry}

and every load checks it (:func:`check_integrity`, run by OnnxStreamer): a changed graph
(a weight, a node), a changed, removed or added metadata entry is an
:class:`IntegrityError` naming what changed. Metadata is hashed entry by entry so the
error names the entry; the whole graph is hashed at once (the file's bulk, ~10 ms for
10 MB). Deleting the ``quantization`` entry of an int8 graph is then a removed entry, and
deleting ``integrity`` as well leaves a graph that still holds integer MatMuls: refused as
"int8 nodes without quantization metadata" (:func:`int8_nodes`). A graph without
``integrity`` (exported before it existed) loads with a one-line warning. The hash finds
corruption (a bad disk, a truncated copy, an edit by hand); it is not a signature: whoever
can write the file can stamp it again.
"""

from __future__ import annotations

import hashlib
import json
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


# ------------------------------------------------------------------ content hash

INTEGRITY_KEY = "integrity"
INT8_OPS = (
    "MatMulInteger",
    "ConvInteger",
    "DynamicQuantizeLinear",
    "QLinearMatMul",
    "QLinearConv",
    "DequantizeLinear",
)


class IntegrityError(ValueError):
    """A graph whose content does not match its content hash (module docstring)."""


def graph_digest(model: onnx.ModelProto) -> str:
    """SHA-256 (hex) of the model's IR version, opset imports and graph (nodes, weights,
    subgraphs): everything but the metadata."""
    h = hashlib.sha256(f"ir{model.ir_version}".encode())
    for o in model.opset_import:
        h.update(f"|{o.domain}:{o.version}".encode())
    h.update(b"|")
    h.update(model.graph.SerializeToString(deterministic=True))
    return h.hexdigest()


def _entry_digest(key: str, value: str) -> str:
    return hashlib.sha256(f"{key}\0{value}".encode()).hexdigest()[:DIGITS]


def integrity_record(model: onnx.ModelProto) -> dict:
    """The ``integrity`` entry of ``model`` as it is now (module docstring)."""
    meta = {
        p.key: _entry_digest(p.key, p.value) for p in model.metadata_props if p.key != INTEGRITY_KEY
    }
    return {"algorithm": "sha256", "graph": graph_digest(model), "metadata": meta}


def stamp_integrity(model: onnx.ModelProto) -> None:
    """Replace ``model``'s ``integrity`` entry by the hash of its content now, as the last
    metadata entry: the last thing a tool does to a graph before writing it."""
    kept = [(p.key, p.value) for p in model.metadata_props if p.key != INTEGRITY_KEY]
    del model.metadata_props[:]
    for k, v in kept:
        model.metadata_props.add(key=k, value=v)
    record = json.dumps(integrity_record(model))
    model.metadata_props.add(key=INTEGRITY_KEY, value=record)


def int8_nodes(model: onnx.ModelProto) -> list[str]:
    """The op types of :data:`INT8_OPS` that ``model`` (or a subgraph) holds."""
    found: set[str] = set()

    def walk(g: onnx.GraphProto) -> None:
        for node in g.node:
            if node.op_type in INT8_OPS:
                found.add(node.op_type)
            for a in node.attribute:
                for sub in [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs):
                    walk(sub)

    walk(model.graph)
    return sorted(found)


def check_integrity(model: onnx.ModelProto) -> bool:
    """Check ``model`` against its ``integrity`` entry: False when it has none (a graph
    from before the hash), True when it matches; :class:`IntegrityError` (one line
    naming what changed) otherwise. Also refused, with or without the entry: integer
    nodes (an int8 graph) without the ``quantization`` entry."""
    props = {p.key: p.value for p in model.metadata_props}
    if INTEGRITY_KEY not in props:
        _check_int8_meta(model, props)
        return False
    try:
        record = json.loads(props[INTEGRITY_KEY])
        graph, meta = record["graph"], record["metadata"]
        ok = isinstance(graph, str) and isinstance(meta, dict)
    except (ValueError, TypeError, KeyError):
        ok = False
    if not ok or record.get("algorithm") != "sha256":
        raise IntegrityError("metadata integrity is malformed (corrupt file)")
    for key, digest in meta.items():
        if key not in props:
            raise IntegrityError(
                f"metadata entry {key!r} was removed after export (corrupt or edited file)"
            )
        if _entry_digest(key, props[key]) != digest:
            raise IntegrityError(
                f"metadata entry {key!r} does not match the content hash (corrupt or edited file)"
            )
    added = [k for k in props if k != INTEGRITY_KEY and k not in meta]
    if added:
        raise IntegrityError(
            f"metadata entry {added[0]!r} was added after export (not in the content hash)"
        )
    if graph_digest(model) != graph:
        raise IntegrityError(
            "the graph (weights or nodes) does not match its content hash (corrupt file)"
        )
    _check_int8_meta(model, props)
    return True


def _check_int8_meta(model: onnx.ModelProto, props: Mapping[str, str]) -> None:
    if "quantization" not in props and (ops := int8_nodes(model)):
        raise IntegrityError(
            f"the graph holds int8 nodes ({ops[0]}) but no quantization metadata (removed?): "
            "its quantization cannot be checked"
        )
