"""int8 export: the weight MatMuls of a streaming graph in 8 bits, the recurrence in float32.

    liquid-stream export run/best.pt --onnx kws-int8.onnx --quantize int8 --verify
    liquid-stream export liquid_stream/models/kws-sc10.onnx --onnx kws-int8.onnx \\
        --quantize int8 --verify          # an exported float32 graph, quantized directly

Method: onnxruntime's dynamic quantization (``onnxruntime.quantization.quantize_dynamic``,
``MatMul`` → ``DynamicQuantizeLinear`` + ``MatMulInteger``): each quantized weight is
stored in 8 bits with one scale and zero point (per tensor), the activation that meets it
is quantized to uint8 on every call from its own range; no calibration data. The weights
are stored as uint8 (asymmetric), in the channel-first graphs (``W @ x``: onnxruntime gives a
MatMul's first input the activation type) and the batch-first ones of LTC layers (``x @ Wᵀ``)
alike: with int8 weights there (u8 × s8), onnxruntime's AVX2 kernel on a CPU without VNNI
saturates its 16-bit pair sums, and an LTC test graph then deviated by 0.29 of max|y|
(uint8: 0.012; 2026-12-07, AMD EPYC with AVX2 only, onnxruntime 1.32; its earlier machines
had VNNI, where both pass). Static
quantization (calibrated activation ranges) is not offered: onnxruntime's calibrators and
static quantizer do not enter subgraphs, and the whole model stack of a front-end model
sits in an ``If`` (export/emit_frontend.py ``frontend_stack``).

Which nodes (:func:`weight_roles`; every MatMul / Gemm / Conv with a constant input):

- ``linear``, quantized: the model's Linear layers — the encoder, the two GLU halves of
  every block, the decoder (2-D weights ``(out, in)``).
- ``ssm``, float32: the chunked SSM's per-channel tables (batched MatMuls with ≥ 3-D
  constants: the sub-block inputs G, the local Toeplitz + D·u and the state read-out E;
  a dense transition's powers). They *are* the recurrence: quantizing them as well moves
  the KWS logits on 30 s of validation speech by 28 % of max|y| (RMS 18 %; the ``linear``
  graph: 1.3 %, RMS 0.6 %) and the vital-sign outputs by 5–32 % on random input (``linear``:
  ≤ 0.7 %) — ``python bench/quantize.py --verify-only``.
- ``frontend``, float32: the log-mel front end's DFT (a Conv) and mel filterbank, and the
  scale-norm front end's within-block EMA products (the weight nodes upstream of the
  encoder, found from the graph: they are upstream of no block state and feed another
  weight node before it). The log that follows magnifies the
  error of quiet bins: quantizing them too moves the KWS logits on speech by 70 % of max|y|.

Everything else stays as exported, in float32: the state inputs and outputs (the
``state_spec`` is unchanged), the scan and its tables (elementwise ops on float32
constants), the norms, the activations, the PB term, the decoder's window sums.

Metadata: ``quantization`` (:mod:`liquid_stream.runtime.meta`) = ``{"method": "dynamic", "bits": 8,
"tool", "weights", "activations", "quantized": [nodes], "float32": {"ssm": [...],
"frontend": [...]}, "rtol": QUANT_RTOL, "params": {tensor: checksum}}``; the checksums
(:mod:`liquid_stream.runtime.quantized`) let a loader refuse a graph whose scales were changed.

Verification (:func:`verify_quantized`): the same random input, in random chunk sizes,
through the float32 graph and the int8 graph; passes if max|Δy| ≤ :data:`QUANT_RTOL` ·
max|y_float32| and every output and state is finite. (The float32 graph itself is held to
the float32 contract, 1e-4 · max|y|, against the torch model by the export's ``--verify``.)
The tolerance, measured with ``python bench/quantize.py --verify-only`` (2026-11-26,
onnxruntime 1.32; 16 000 steps, seeds 0–4, the five shipped models): the int8 graphs
deviate by 0.013–0.021 of max|y| (KWS) and 0.003–0.007 (vitals); with the SSM tables
quantized as well, by 0.026–0.039 (KWS: on random input its logits barely move; on speech
0.28) and 0.05–0.32 (vitals). QUANT_RTOL = 0.05 is 2.4× the worst int8 graph measured. It
refuses a scale off by ×2 (tests) and, over the default 16 000 steps, the vital-sign graphs
with quantized tables (their error grows along the stream: over 4 000 steps ppg-rr's still
passes); the checksums refuse any changed scale at load. Because the spotter with quantized
tables passes this tolerance on random input, verification also refuses by role: a
quantized node that the float graph's :func:`weight_roles` calls ``ssm`` or ``frontend``
fails it (``QuantVerifyReport.not_linear``), whatever the numbers.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from liquid_stream.io.atomic import atomic_path
from liquid_stream.runtime.meta import ModelMeta
from liquid_stream.runtime.quantized import (
    INTEGRITY_KEY,
    IntegrityError,
    QuantizationError,
    check_integrity,
    check_quantized,
    quantization_record,
    stamp_integrity,
)

__all__ = [
    "QUANT_RTOL",
    "QuantVerifyReport",
    "QuantizationError",
    "quantize_file",
    "quantize_graph",
    "verify_quantized",
    "weight_roles",
]

QUANT_RTOL = 0.05  # int8 vs float32 graph: max|Δy| ≤ QUANT_RTOL · max|y| (module docstring)
ROLES = ("linear", "ssm", "frontend")
QUANTIZED_ROLES = ("linear",)
WEIGHT_OPS = ("MatMul", "Gemm", "Conv")
BLOCK_STATE = "state.block"  # the inputs of the blocks' states (downstream: the model stack)


# ------------------------------------------------------------------------------- plan


def _nodes(g: onnx.GraphProto):
    """Every node of ``g`` and of its subgraphs, a subgraph's nodes before its owner's."""
    for node in g.node:
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                yield from _nodes(a.g)
            for sub in a.graphs:
                yield from _nodes(sub)
        yield node


def _deps(node: onnx.NodeProto) -> list[str]:
    """The values ``node`` depends on: its inputs and its subgraphs' outputs and inputs
    from the enclosing scope (a branch of an ``If`` reads outer values by name)."""
    deps = list(node.input)
    for a in node.attribute:
        for sub in [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs):
            deps += [o.name for o in sub.output]
            deps += [i for n in sub.node for i in n.input]
    return deps


def weight_roles(model: onnx.ModelProto) -> dict[str, str]:
    """Node name → role (``linear`` / ``ssm`` / ``frontend``, module docstring) of every
    MatMul / Gemm / Conv that has a constant (initializer) input, in graph order."""
    inits = {t.name: t for t in model.graph.initializer}
    nodes = list(_nodes(model.graph))
    weights = {}
    for n in nodes:
        consts = [inits[i] for i in n.input if i in inits]
        if n.op_type in WEIGHT_OPS and consts:
            weights[n.name] = max(len(c.dims) for c in consts)
    # values downstream of a block state, and the weight nodes upstream of every value
    stack = {i.name for i in model.graph.input if i.name.startswith(BLOCK_STATE)}
    upstream: dict[str, frozenset[str]] = {}
    for _ in range(len(nodes)):  # fixed point (one pass when the order is topological)
        changed = False
        for n in nodes:
            deps = _deps(n)
            up = frozenset().union(*(upstream.get(d, frozenset()) for d in deps))
            if n.name in weights:
                up = up | {n.name}
            in_stack = any(d in stack for d in deps)
            for o in n.output:
                if upstream.get(o) != up:
                    upstream[o], changed = up, True
                if in_stack and o not in stack:
                    stack.add(o)
                    changed = True
        if not changed:
            break
    # weight nodes before the stack: the front end's and the encoder(s), which feed no other
    ins = {n.name: _deps(n) for n in nodes if n.name in weights}
    out_of = {n.name: n.output[0] for n in nodes if n.name in weights}
    pre = [w for w in weights if not any(d in stack for d in ins[w])]
    front = {w for w in pre if any(w in upstream.get(out_of[v], ()) for v in pre if v != w)}
    return {
        w: "frontend" if w in front else "ssm" if ndim >= 3 else "linear"
        for w, ndim in weights.items()
    }


# ------------------------------------------------------------------------ quantize


def _sort(g: onnx.GraphProto) -> None:
    """Order ``g``'s nodes topologically (stable), counting the outer values a subgraph
    reads as inputs of its node."""
    made = {o: i for i, n in enumerate(g.node) for o in n.output}
    order, placed = [], set()

    def place(i: int) -> None:
        stack = [(i, False)]
        while stack:
            j, expanded = stack.pop()
            if j in placed:
                continue
            if expanded:
                placed.add(j)
                order.append(g.node[j])
                continue
            stack.append((j, True))
            stack.extend((made[d], False) for d in _deps(g.node[j]) if d in made)

    for i in range(len(g.node)):
        place(i)
    nodes = [onnx.NodeProto() for _ in order]
    for dst, src in zip(nodes, order, strict=True):
        dst.CopyFrom(src)
    del g.node[:]
    g.node.extend(nodes)


@contextmanager
def _quiet():
    """onnxruntime.quantization logs warnings (pre-processing advice) on the root logger."""
    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        yield
    finally:
        logging.disable(previous)


def quantize_graph(
    model: onnx.ModelProto, roles: tuple[str, ...] = QUANTIZED_ROLES
) -> tuple[onnx.ModelProto, dict]:
    """The int8 graph of a float32 streaming graph (its metadata copied, ``quantization``
    added) and that record. ``roles``: which weight roles to quantize (module docstring;
    more than ``("linear",)`` only to measure what breaks)."""
    import onnxruntime
    from onnxruntime.quantization import QuantType, quantize_dynamic

    props = {p.key: p.value for p in model.metadata_props}
    if "state_spec" not in props:
        raise ValueError("not a liquid-stream streaming graph (no state_spec metadata)")
    if "quantization" in props:
        raise ValueError("the graph is already quantized (metadata quantization)")
    bad = [r for r in roles if r not in ROLES]
    if bad:
        raise ValueError(f"unknown weight role {bad[0]!r} (roles: {', '.join(ROLES)})")
    plan = weight_roles(model)
    chosen = [n for n, r in plan.items() if r in roles]
    if not chosen:
        raise ValueError("the graph has no weight MatMul to quantize")
    with tempfile.TemporaryDirectory() as tmp, _quiet():
        out = Path(tmp) / "int8.onnx"
        quantize_dynamic(
            model,
            out,
            op_types_to_quantize=["MatMul", "Conv"],
            nodes_to_quantize=chosen,
            weight_type=QuantType.QUInt8,
            per_channel=False,
            # DefaultTensorType: onnx's shape inference gives no type past a custom op
            # (the fused LTC op, liquid_stream/runtime/ltc_ort.py); every activation is float32
            extra_options={
                "EnableSubgraph": True,
                "MatMulConstBOnly": False,
                "DefaultTensorType": onnx.TensorProto.FLOAT,
            },
        )
        q = onnx.load(out)
    _sort(q.graph)  # the quantizer orders the top level as if subgraphs read no outer value
    done = {n.name for n in _nodes(q.graph) if n.op_type in ("MatMulInteger", "ConvInteger")}
    missing = [n for n in chosen if f"{n}_quant" not in done]
    if missing:
        raise RuntimeError(f"onnxruntime did not quantize {missing[0]!r} ({len(missing)} nodes)")
    params = quantization_record(q, model)
    arrays = [numpy_helper.to_array(t) for t in q.graph.initializer if t.name in params]
    kinds = sorted({a.dtype.name for a in arrays if a.dtype.kind in "iu" and a.ndim >= 2})
    record = {
        "method": "dynamic",
        "bits": 8,
        "tool": f"onnxruntime.quantization.quantize_dynamic {onnxruntime.__version__}",
        "weights": f"{'/'.join(kinds)}, one scale and zero point per tensor",
        "activations": "uint8, scale and zero point from each call's range",
        "quantized": chosen,
        "float32": {r: [n for n, k in plan.items() if k == r] for r in ROLES if r not in roles},
        "rtol": QUANT_RTOL,
        "params": params,
    }
    del q.metadata_props[:]
    props.pop(INTEGRITY_KEY, None)  # the float graph's: this graph is stamped anew below
    props["quantization"] = json.dumps(record)
    ModelMeta.from_onnx_props(props, strict=True)  # every entry readable by the apps
    for key, value in props.items():
        q.metadata_props.add(key=key, value=value)
    stamp_integrity(q)  # the content hash, last (liquid_stream/runtime/quantized.py)
    onnx.checker.check_model(q)
    return q, record


def quantize_file(
    src: str | os.PathLike,
    out: str | os.PathLike,
    verify: bool = False,
    verify_length: int = 16000,
    roles: tuple[str, ...] = QUANTIZED_ROLES,
) -> tuple[dict, QuantVerifyReport | None]:
    """Quantize the float32 graph ``src`` into ``out``: written to a hidden sibling of
    ``out``, with ``verify`` checked against ``src`` there, and renamed onto ``out`` only if
    it passes (a failure, RuntimeError, leaves an existing ``out`` untouched). Returns the export
    info (``path``, ``nodes``, ``bytes``, ``quantized``, ``source_bytes``) and the report."""
    src, out = Path(src), Path(out)
    try:
        model = onnx.load(src)
    except Exception as e:  # noqa: BLE001 - protobuf raises several kinds
        raise ValueError(f"{src} is not an ONNX model ({e})") from None
    try:  # a corrupt source would be quantized, and stamped, as if it were good
        check_integrity(model)
    except IntegrityError as e:
        raise ValueError(f"{src}: {e}") from None
    q, record = quantize_graph(model, roles)
    report = None
    with atomic_path(out) as tmp:  # verified on the hidden sibling, published if it passes
        tmp.write_bytes(q.SerializeToString())
        info = {
            "path": str(out),
            "nodes": sum(1 for _ in _nodes(q.graph)),
            "bytes": tmp.stat().st_size,
            "source_bytes": src.stat().st_size,
            "quantized": len(record["quantized"]),
        }
        if verify:
            report = verify_quantized(src, tmp, length=verify_length)
            if not report.ok:
                raise RuntimeError(
                    f"int8 graph outside its tolerance; removed, {out} not "
                    f"written (an existing one is untouched). {report}"
                )
    props = {p.key: p.value for p in q.metadata_props}
    info.update((k, json.loads(props[k])) for k in ("sub_block", "max_chunk") if k in props)
    return info, report


# -------------------------------------------------------------------------- verify


@dataclass
class QuantVerifyReport:
    """int8 vs float32 graph on the same input: output deviation and state sanity."""

    length: int
    chunks: int
    max_abs: float  # max |y_int8 − y_float32|
    max_ref: float  # max |y_float32|
    rtol: float
    finite: bool  # every output and state of the int8 graph finite
    state_rel: float  # max |Δ state| / max |state| at the end, over the float states
    # quantized nodes whose role in the float graph is not ``linear`` (SSM tables, front end)
    not_linear: tuple[str, ...] = ()

    @property
    def rel(self) -> float:
        return self.max_abs / max(self.max_ref, 1e-30)

    @property
    def ok(self) -> bool:
        return self.finite and self.max_abs <= self.rtol * self.max_ref and not self.not_linear

    def __str__(self) -> str:
        verdict = "OK" if self.ok else "FAILED"
        finite = "" if self.finite else ", NON-FINITE output or state"
        more = " …" if len(self.not_linear) > 3 else ""
        roles = (
            f", {len(self.not_linear)} quantized node(s) that must stay float32 (SSM tables / "
            f"front end: {', '.join(self.not_linear[:3])}{more})"
            if self.not_linear
            else ""
        )
        return (
            f"verify int8: {self.length} steps in {self.chunks} random chunks vs the float32 "
            f"graph: max|Δy| = {self.max_abs:.3e}, max|y| = {self.max_ref:.3e}, relative "
            f"{self.rel:.3e} (tolerance ≤ {self.rtol:g}); final state relative "
            f"{self.state_rel:.2e}{finite}{roles} {verdict}"
        )


def verify_quantized(
    float_path: str | os.PathLike,
    int8_path: str | os.PathLike,
    length: int = 16000,
    batch: int = 1,
    seed: int = 0,
    rtol: float = QUANT_RTOL,
) -> QuantVerifyReport:
    """Stream the same random input (standard normal in the model's standardised units,
    i.e. ``input_mean + input_std · z`` raw) in random chunk sizes (1 … chunk) through
    both graphs and compare (module docstring). A graph whose quantization parameters do
    not match their checksums raises :class:`QuantizationError` first."""
    from liquid_stream.runtime.onnx_streamer import OnnxStreamer

    int8_path = Path(int8_path)
    model = onnx.load(int8_path)
    record = quantization_of(model)
    check_quantized(model, record)
    roles = weight_roles(onnx.load(float_path))
    not_linear = tuple(n for n in record.get("quantized", []) if roles.get(n) != "linear")
    ref, q = OnnxStreamer(float_path, batch=batch), OnnxStreamer(int8_path, batch=batch)
    rng = np.random.default_rng(seed)
    mean = np.asarray(ref.meta_json("input_mean", 0.0), dtype=np.float64)
    std = np.asarray(ref.meta_json("input_std", 1.0), dtype=np.float64)
    x = (rng.standard_normal((batch, length, ref.d_input)) * std + mean).astype(np.float32)
    max_abs = max_ref = 0.0
    finite, pos, n = True, 0, 0
    while pos < length:
        c = int(rng.integers(1, ref.chunk + 1))
        y0 = ref.process(x[:, pos : pos + c])
        try:
            y1 = q.process(x[:, pos : pos + c])
        except ValueError:  # the streamer refuses non-finite outputs / states
            finite = False
            break
        max_abs = max(max_abs, float(np.abs(y1.astype(np.float64) - y0).max()))
        max_ref = max(max_ref, float(np.abs(y0).max()))
        pos, n = pos + c, n + 1
    state_rel = 0.0
    if finite:
        floats = [k for k, v in ref.state.items() if np.issubdtype(v.dtype, np.floating)]
        d = max((float(np.abs(q.state[k] - ref.state[k]).max()) for k in floats), default=0.0)
        m = max((float(np.abs(ref.state[k]).max()) for k in floats), default=0.0)
        state_rel = d / max(m, 1e-30)
    else:
        max_abs = float("inf")
    return QuantVerifyReport(length, n, max_abs, max_ref, rtol, finite, state_rel, not_linear)


def quantization_of(model: onnx.ModelProto) -> dict:
    """The ``quantization`` metadata entry of an int8 graph (QuantizationError if absent)."""
    props = {p.key: p.value for p in model.metadata_props}
    if "quantization" not in props:
        raise QuantizationError("not a quantized graph (no quantization metadata)")
    return ModelMeta.from_onnx_props({"quantization": props["quantization"]}).quantization or {}


def float_tables_unchanged(float_model: onnx.ModelProto, int8_model: onnx.ModelProto) -> list[str]:
    """The float initializers of ``float_model`` that ``int8_model`` holds with other bytes
    or not at all, other than the quantized nodes' weights (empty: the recurrence, the
    front end, norms and biases are bit for bit the exported float32 ones)."""
    record = json.loads({p.key: p.value for p in int8_model.metadata_props}["quantization"])
    inits = {t.name: t for t in int8_model.graph.initializer}
    quantized = set(record["quantized"])
    weights = {i for n in _nodes(float_model.graph) if n.name in quantized for i in n.input}
    changed = []
    for t in float_model.graph.initializer:
        if t.name in weights:
            continue
        other = inits.get(t.name)
        a = numpy_helper.to_array(t)
        if other is None or not np.array_equal(a, numpy_helper.to_array(other)):
            changed.append(t.name)
    return changed
