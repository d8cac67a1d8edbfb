"""Several trained models as one streaming graph whose output is their mean.

    liquid-stream export a/best.pt b/best.pt --onnx kws.onnx --chunk 1600 --verify

Members i = 0 … K−1 (same task, labels, sample rate, input and chunk; for regressors also
the same target, units, channels and window; the front ends may differ, and the graph's
longest call is the shortest of the members') are exported one by one
(:func:`~.pipeline.export_model`) and placed side by side in one ONNX graph that takes the
one input ``x`` and returns, for classifiers (keyword spotters),

    y = log( max( (1/K) Σ_i softmax(y_i), 1e-30 ) )                      (batch, T, d)

so that the softmax the apps take of ``y`` is the members' mean posterior
``p = (1/K) Σ_i softmax(y_i)`` (``softmax(log p) = p / Σp = p``; the floor keeps ``y``
finite where every member gives a class a posterior below 1e-30 in float32, and moves
``p`` by at most 1e-30 per class), and for regressors (vital signs, whose graphs output
physical units)

    y = (1/K) Σ_i y_i                                                     (batch, T, 1)

With weights w_i (``--weights``: positive, divided by their sum, recorded in the metadata's
``ensemble.weights``) the 1/K becomes w_i in both: p = Σ_i w_i softmax(y_i), y = Σ_i w_i y_i.
Members of different recipes need not be equally good: a vital-sign RR ensemble of two
4 × 64 models and one 6 × 128 model streamed 1.468 breaths/min RMSE on its selection set
with 1/3 each and 1.419 with the 6 × 128 model at 0.6 (the members of c498285;
docs/benchmarks.md §5.2; ``python bench/ensemble_weights.py`` chooses them on held-out
records).

Member i's state ``<name>`` is the graph's state
``m<i>.<name>`` (input ``state.m<i>.<name>``, output ``next.m<i>.<name>``); its nodes,
values and weights are prefixed ``m<i>.``, so the members share nothing but ``x``.
Everything downstream (``OnnxStreamer``, the batched server, ``kws``, ``kws-tune``,
``kws-eval``, ``vitals``) reads the graph as any other: its ``state_spec`` lists the
members' states.

Why: two models trained from different seeds make different mistakes. Three seeds of the
main job's spotter recipe detected 77.8–91.4 % (mean of the best detection at ≤ 2 … 10 false
accepts per hour) on a 60-minute validation stream, and the mean posterior of any two of
them 90.7–93.3 % (docs/benchmarks.md §4.1) — for twice the training. Two HR estimators of
the same recipe and seed (made on different thread counts) have errors correlated 0.95 and
gain 1 % from averaging; members of different seeds are what an ensemble needs (the record
split then held fixed by ``data.split_seed``; docs/benchmarks.md §5.2).

Exactness: each member's graph is its torch model's (verified per member, the contract of
docs/design.md §5, when ``verify``), and the ensemble's output (posteriors, or the mean
estimate) equals the mean of the members' float64 torch outputs within
:data:`~.pipeline.CONTRACT_RTOL` (:func:`verify_ensemble`).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import helper

from liquid_stream.io.atomic import atomic_write_bytes
from liquid_stream.nn.checkpoint import model_from_checkpoint
from liquid_stream.runtime.meta import SAME_ESTIMATE, ModelMeta, ensemble_weights
from liquid_stream.runtime.quantized import INTEGRITY_KEY, stamp_integrity

from .pipeline import (
    CONTRACT_RTOL,
    VerifyReport,
    export_model,
    random_input,
    stream_random_chunks,
    verify_onnx,
)

FLOOR = 1e-30  # of the mean posterior before its log (module docstring)
SAME = (
    "task",
    "labels",
    "sample_rate",
    "d_input",
    "d_output",
    "chunk",
    "rate",
    "decoder",
    "input_mean",
    "input_std",
)
COMBINE_POSTERIORS = "mean of the members' softmax posteriors; y = log of it"


def is_regressor(meta: ModelMeta | dict) -> bool:
    """A regression graph (a vital-sign estimator: ``target`` set, outputs in physical
    units) rather than a classifier."""
    target = meta.get("target") if isinstance(meta, dict) else meta.target
    return target is not None


def member_prefix(i: int) -> str:
    return f"m{i}."


def prefix_graph(graph: onnx.GraphProto, prefix: str) -> onnx.GraphProto:
    """A copy of ``graph`` with ``prefix`` before every name: nodes, values, inputs,
    outputs, initializers, value infos, in every nested subgraph (``If`` / ``Scan``
    bodies) as well; the empty name (an omitted optional input) stays empty. Every name
    is renamed the same way everywhere, so outer-scope references from a subgraph keep
    pointing at their values. (``onnx.compose.add_prefix_graph`` of onnx 1.23 renames a
    subgraph's edges before the outer graph's initializers are known, and leaves the
    subgraph's references to them dangling.)"""
    g = onnx.GraphProto()
    g.CopyFrom(graph)

    def ren(name: str) -> str:
        return prefix + name if name else name

    def walk(gr: onnx.GraphProto) -> None:
        for coll in (gr.input, gr.output, gr.value_info):
            for v in coll:
                v.name = ren(v.name)
        for t in gr.initializer:
            t.name = ren(t.name)
        for n in gr.node:
            n.name = ren(n.name)
            n.input[:] = [ren(v) for v in n.input]
            n.output[:] = [ren(v) for v in n.output]
            for a in n.attribute:
                if a.HasField("g"):
                    walk(a.g)
                for sub in a.graphs:
                    walk(sub)

    walk(g)
    return g


def _renamed(values, name: str, new: str) -> onnx.ValueInfoProto:
    """A copy of the value ``name`` of ``values`` (graph inputs or outputs) called ``new``."""
    v = onnx.ValueInfoProto()
    v.CopyFrom(next(v for v in values if v.name == name))
    v.name = new
    return v


def _identity(src: str, dst: str) -> onnx.NodeProto:
    return helper.make_node("Identity", [src], [dst], name=f"{dst}.identity")


def merge_members(
    members: list[onnx.ModelProto], weights: list[float] | None = None
) -> tuple[onnx.ModelProto, ModelMeta]:
    """The ensemble graph of exported classifier graphs, or of exported regressor graphs
    (module docstring), and its metadata (member 0's, with the members' states and
    ``ensemble``). ``weights``: one positive number per member (normalised here), or None
    for the plain mean. A ValueError names what the members do not share: a classifier
    with a regressor, a classifier without one output per label."""
    if len(members) < 2:
        raise ValueError("an ensemble needs at least two members")
    weights = ensemble_weights(weights, len(members))
    metas = [ModelMeta.from_onnx_props({p.key: p.value for p in m.metadata_props}) for m in members]
    regression = is_regressor(metas[0])
    for i, m in enumerate(metas):
        if is_regressor(m) != regression:
            raise ValueError(
                f"member {i} is a {'classifier' if regression else 'regressor'} "
                f"and member 0 a {'regressor' if regression else 'classifier'}: "
                "an ensemble averages members of one kind"
            )
        if not regression and (not m.labels or m.d_output != len(m.labels)):
            raise ValueError(
                f"member {i} is not a classifier (labels, one output per "
                "label): an ensemble averages class posteriors"
            )
    first = metas[0]
    for i, m in enumerate(metas[1:], 1):
        for key in SAME + (SAME_ESTIMATE if regression else ()):
            if getattr(m, key) != getattr(first, key):
                raise ValueError(
                    f"member {i} differs from member 0 in {key!r}: "
                    f"{getattr(m, key)!r} vs {getattr(first, key)!r}"
                )
    versions: dict[str, set[int]] = {}  # per domain ("": ONNX; the fused LTC op's own)
    for m in members:
        for o in m.opset_import:
            versions.setdefault(o.domain, set()).add(o.version)
    if any(len(v) > 1 for v in versions.values()):
        raise ValueError(f"the members use different opsets: {sorted(versions.items())}")
    opset_imports = [helper.make_opsetid(d, v.pop()) for d, v in sorted(versions.items())]
    K = len(members)
    nodes, inits, inputs, outputs, spec = [], [], [], [], []
    x_info = next(v for v in members[0].graph.input if v.name == "x")
    inputs.append(x_info)
    y_info = next(v for v in members[0].graph.output if v.name == "y")
    for i, (model, meta) in enumerate(zip(members, metas, strict=True)):
        pre = member_prefix(i)
        g = prefix_graph(model.graph, pre)
        nodes.append(_identity("x", pre + "x"))
        for s in meta.state_spec:  # state.m<i>.<name> → member's state.<name>, prefixed
            name = s["name"]
            inputs.append(_renamed(model.graph.input, f"state.{name}", f"state.{pre}{name}"))
            nodes.append(_identity(inputs[-1].name, f"{pre}state.{name}"))
            spec.append({**s, "name": pre + name})
        nodes.extend(g.node)
        inits.extend(g.initializer)
        for s in meta.state_spec:  # member's next.<name>, prefixed → next.m<i>.<name>
            name = s["name"]
            outputs.append(_renamed(model.graph.output, f"next.{name}", f"next.{pre}{name}"))
            nodes.append(_identity(f"{pre}next.{name}", outputs[-1].name))
        if not regression:
            nodes.append(
                helper.make_node("Softmax", [pre + "y"], [pre + "p"], axis=-1, name=pre + "softmax")
            )
    each = "y" if regression else "p"
    mean = "y" if regression else "ens.mean"
    if weights is None:  # (1/K) Σ_i: the graph of every equal-weight ensemble shipped
        nodes += [
            helper.make_node(
                "Sum", [member_prefix(i) + each for i in range(K)], ["ens.sum"], name="ens.sum"
            ),
            helper.make_node("Mul", ["ens.sum", "ens.inv_k"], [mean], name="ens.mean"),
        ]
        inits.append(helper.make_tensor("ens.inv_k", onnx.TensorProto.FLOAT, [], [1.0 / K]))
    else:  # Σ_i w_i ·
        for i, w in enumerate(weights):
            pre = member_prefix(i)
            nodes.append(
                helper.make_node(
                    "Mul", [pre + each, pre + "w"], [pre + "weighted"], name=pre + "weight"
                )
            )
            inits.append(helper.make_tensor(pre + "w", onnx.TensorProto.FLOAT, [], [w]))
        nodes.append(
            helper.make_node(
                "Sum", [member_prefix(i) + "weighted" for i in range(K)], [mean], name="ens.mean"
            )
        )
    if not regression:
        nodes += [
            helper.make_node("Max", ["ens.mean", "ens.floor"], ["ens.floored"], name="ens.floor"),
            helper.make_node("Log", ["ens.floored"], ["y"], name="ens.log"),
        ]
        inits.append(helper.make_tensor("ens.floor", onnx.TensorProto.FLOAT, [], [FLOOR]))
    outputs.insert(0, y_info)
    graph = helper.make_graph(nodes, "liquid_stream_ensemble", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=opset_imports, producer_name="liquid-stream")
    model.ir_version = members[0].ir_version
    onnx.checker.check_model(model)
    meta = ModelMeta.from_dict(first.to_dict())
    meta.integrity = None  # member 0's: the ensemble graph is stamped when it is written
    meta.state_spec = spec
    # members exported for one chunk may accept different longest calls (a front end
    # rounds the chunk up to its hop: 125 samples → 130 with hop 10, 125 with hop 5); the
    # ensemble takes what every member takes
    limits = [m.max_chunk for m in metas if m.max_chunk is not None]
    meta.max_chunk = min(limits) if limits else None
    combine = "mean of the members' outputs" if regression else COMBINE_POSTERIORS
    meta.ensemble = {
        "members": K,
        "combine": combine if weights is None else f"weighted {combine}",
        # of each member as exported before the content hash (its integrity entry left
        # out): the same digests as the ensembles shipped before it
        "member_sha256": [
            hashlib.sha256(_unstamped(m).SerializeToString()).hexdigest() for m in members
        ],
    }
    if weights is not None:
        meta.ensemble["weights"] = weights
    if any(m.model_config != first.model_config for m in metas):  # members of other sizes
        meta.ensemble["member_model_configs"] = [m.model_config for m in metas]
    return model, meta


def _unstamped(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` without its ``integrity`` entry (the content hash)."""
    if not any(p.key == INTEGRITY_KEY for p in model.metadata_props):
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    kept = [(p.key, p.value) for p in out.metadata_props if p.key != INTEGRITY_KEY]
    del out.metadata_props[:]
    for k, v in kept:
        out.metadata_props.add(key=k, value=v)
    return out


def export_ensemble(
    checkpoints: list[str | os.PathLike],
    out: str | os.PathLike,
    chunk: int = 160,
    opset: int = 17,
    sub_block: int | None = None,
    verify: bool = False,
    verify_length: int = 16000,
    weights: list[float] | None = None,
    ltc_op: str = "graph",
) -> tuple[dict, list[VerifyReport]]:
    """``liquid-stream export A.pt B.pt … [--weights w0,w1,…]``: export each checkpoint
    (``ltc_op``: see :func:`~.to_onnx.build_onnx`), merge (module docstring), write ``out``
    atomically. With ``verify``: each member graph
    against its torch model, then the ensemble against the members' (weighted) mean torch
    posteriors; a failure removes nothing but raises before ``out`` is written
    (RuntimeError)."""
    weights = ensemble_weights(weights, len(checkpoints))
    loaded = [model_from_checkpoint(c) for c in checkpoints]
    for _, meta in loaded:
        ModelMeta.from_dict(meta).check_complete()
    reports: list[VerifyReport] = []
    protos = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, (model, meta) in enumerate(loaded):
            path = Path(tmp) / f"m{i}.onnx"
            export_model(model, path, chunk, opset, sub_block, meta, ltc_op=ltc_op)
            if verify:
                rep = verify_onnx(model, path, length=verify_length, meta=meta)
                if not rep.ok:
                    raise RuntimeError(
                        f"member {i} ({checkpoints[i]}) breaks the exactness "
                        f"contract; nothing written. {rep}"
                    )
                reports.append(rep)
            protos.append(onnx.load(str(path)))
        model, meta = merge_members(protos, weights)
        props = meta.to_onnx_props()
        for key, value in props.items():
            model.metadata_props.add(key=key, value=value)
        stamp_integrity(model)  # the content hash, last (liquid_stream/runtime/quantized.py)
        path = Path(tmp) / "ensemble.onnx"
        path.write_bytes(model.SerializeToString())
        if verify:
            rep = verify_ensemble(
                [m for m, _ in loaded], path, verify_length, loaded[0][1], weights=weights
            )
            if not rep.ok:
                raise RuntimeError(
                    f"the ensemble graph breaks the exactness contract; nothing written. {rep}"
                )
            reports.append(rep)
        atomic_write_bytes(out, path.read_bytes())
    info = {
        "path": str(out),
        "nodes": len(model.graph.node),
        "members": len(protos),
        "bytes": Path(out).stat().st_size,
        "sub_block": meta.sub_block,
        "max_chunk": meta.max_chunk,
    }
    return info, reports


def verify_ensemble(
    models: list,
    onnx_path: str | os.PathLike,
    length: int = 16000,
    meta: dict | None = None,
    seed: int = 0,
    weights: list[float] | None = None,
) -> VerifyReport:
    """Stream random input through the ensemble graph in random chunk sizes (1 … chunk);
    compare its posteriors ``softmax(y)`` with the mean (``weights``: the weighted mean) of
    the members' posteriors from their float32 torch convolutional forwards, taken in
    float64 (max |Δp|, max p); for regressors its ``y`` with the (weighted) mean of the
    members' outputs (max |Δy|, max |y|)."""
    import torch

    from liquid_stream.runtime.onnx_streamer import OnnxStreamer

    streamer = OnnxStreamer(onnx_path, batch=1)
    rng = np.random.default_rng(seed)
    x, xn = random_input(dict(meta or {}), (1, length, models[0].d_input), rng)
    regression = is_regressor(dict(meta or {}))
    with torch.no_grad():
        outs = [m.float().eval().cpu().forward_steps(xn).double() for m in models]
    y, n = stream_random_chunks(streamer, x, rng)
    y = y.astype(np.float64)
    w = np.asarray(ensemble_weights(weights, len(models)) or [1.0 / len(models)] * len(models))
    if regression:
        ref = np.tensordot(w, np.stack([o.numpy() for o in outs]), axes=1)
        return VerifyReport(length, n, float(np.abs(y - ref).max()), float(np.abs(ref).max()))
    ref = np.tensordot(w, np.stack([torch.softmax(o, -1).numpy() for o in outs]), axes=1)
    p = np.exp(y - y.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return VerifyReport(length, n, float(np.abs(p - ref).max()), float(np.abs(ref).max()), "p")


__all__ = ["CONTRACT_RTOL", "export_ensemble", "is_regressor", "merge_members", "verify_ensemble"]
