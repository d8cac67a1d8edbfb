"""Checkpoint → streaming form → ONNX file, and the exactness check of the result.

liquid-stream export run/best.pt --onnx kws.onnx --chunk 160 --verify
liquid-stream export run/best.pt --onnx kws-int8.onnx --chunk 160 --quantize int8 --verify

With ``quantize="int8"`` the float32 graph is written to a temporary file, verified against
the torch model (the float32 contract), quantized (:mod:`.quantize`) into the output and
verified against the float32 graph with the looser :data:`.quantize.QUANT_RTOL`.

Publishing: the graph is written to a hidden sibling of the output, verified there, and
renamed onto the output only once it passed (``os.replace``: atomic). So the output is
never an unverified graph (a kill during verification leaves the hidden file only), and a
failed verification leaves an existing output as it was (re-exporting over a good graph
cannot lose it). Every graph carries the content hash of :mod:`liquid_stream.runtime.quantized`.

The checkpoint's ``meta`` is copied into the graph's metadata through the schema of
:mod:`liquid_stream.runtime.meta`: an unknown (e.g. renamed) key or a malformed value, and for a
checkpoint of a training task a key it must carry and lacks, is a
:class:`~liquid_stream.runtime.meta.MetaError` here, before any file is written.
"""

from __future__ import annotations

import copy
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import torch

from liquid_stream.io.atomic import atomic_path, atomic_write_bytes
from liquid_stream.nn.checkpoint import model_from_checkpoint
from liquid_stream.nn.model import LiquidS4Model
from liquid_stream.runtime.meta import ModelMeta
from liquid_stream.runtime.quantized import stamp_integrity

from .quantize import QuantVerifyReport, quantize_file
from .to_onnx import build_onnx, default_sub_block, metadata_props

# docs/design.md §5: float32 over L = 16000 steps, max |Δy| ≤ 1e-4 · max |y|.
CONTRACT_RTOL = 1e-4


def export_model(
    model: LiquidS4Model,
    out: str | os.PathLike,
    chunk: int = 160,
    opset: int = 17,
    sub_block: int | None = None,
    meta: dict | None = None,
    rate: float = 1.0,
    ltc_op: str = "graph",
) -> dict:
    """Write ``model``'s streaming form as ONNX (atomically); returns the export info.
    ``meta``: a checkpoint's metadata (:class:`ModelMeta` fields; a ``MetaError`` for
    an unknown key or a malformed value). ``ltc_op``: see :func:`build_onnx`."""
    model.check_streamable()  # bidirectional layers, a pair decoder: no step form
    task_meta = ModelMeta.from_dict(meta or {})
    sm = copy.deepcopy(model).float().eval().cpu().streaming(rate=rate)  # caller untouched
    model_proto, info = build_onnx(
        sm,
        # the stack steps once per front-end hop: its sub-blocks are sized in its steps
        sub_block=sub_block or default_sub_block(max(1, chunk // model.hop)),
        max_chunk=chunk,
        opset=opset,
        input_mean=0.0 if task_meta.input_mean is None else task_meta.input_mean,
        input_std=1.0 if task_meta.input_std is None else task_meta.input_std,
        ltc_op=ltc_op,
    )
    props = metadata_props(sm, info, {"chunk": chunk})
    # the graph's own keys (max_chunk, state_spec, ...) win over a checkpoint's copies of
    # them (a meta recovered from an older graph has some: scripts/checkpoint_from_onnx.py)
    props.update({k: v for k, v in task_meta.to_onnx_props().items() if k not in props})
    ModelMeta.from_onnx_props(props, strict=True)  # every entry readable by the apps
    for key, value in props.items():
        model_proto.metadata_props.add(key=key, value=value)
    stamp_integrity(model_proto)  # the content hash, last (liquid_stream/runtime/quantized.py)
    onnx.checker.check_model(model_proto)
    out = Path(out)
    atomic_write_bytes(out, model_proto.SerializeToString())
    info = dict(info, path=str(out), nodes=len(model_proto.graph.node))
    info["bytes"] = out.stat().st_size
    return info


@dataclass
class VerifyReport:
    length: int
    chunks: int
    max_abs: float
    max_ref: float
    quantity: str = "y"  # what is compared: the outputs y, or "p" (an ensemble's posteriors)

    @property
    def rel(self) -> float:
        return self.max_abs / max(self.max_ref, 1e-30)

    @property
    def ok(self) -> bool:
        return self.max_abs <= CONTRACT_RTOL * self.max_ref

    def __str__(self) -> str:
        verdict = "OK" if self.ok else "FAILED"
        return (
            f"verify: {self.length} steps in {self.chunks} random chunks: "
            f"max|Δ{self.quantity}| = {self.max_abs:.3e}, max|{self.quantity}| = "
            f"{self.max_ref:.3e}, relative {self.rel:.3e} "
            f"(contract ≤ {CONTRACT_RTOL:g}) {verdict}"
        )


def random_input(
    meta: dict, shape: tuple[int, int, int], rng: np.random.Generator
) -> tuple[np.ndarray, torch.Tensor]:
    """Verification input of ``shape`` (batch, L, d_input): standard normal in the model's
    standardised units; returns it raw (float32, the units the graph takes: it folds in
    ``input_mean`` / ``input_std``) and standardised (float32 torch, what the torch model
    takes), the latter computed in float64."""
    mean = np.asarray(meta.get("input_mean", 0.0), dtype=np.float64)
    std = np.asarray(meta.get("input_std", 1.0), dtype=np.float64)
    x = (rng.standard_normal(shape) * std + mean).astype(np.float32)
    xn = (torch.from_numpy(x).double() - torch.from_numpy(mean)) / torch.from_numpy(std)
    return x, xn.float()


def stream_random_chunks(
    streamer, x: np.ndarray, rng: np.random.Generator
) -> tuple[np.ndarray, int]:
    """``x`` (batch, L, d) through ``streamer`` (an OnnxStreamer) in chunks: half the calls
    its whole chunk (the apps' call, which a graph may run as one MatMul a layer), the others
    random sizes 1 … chunk; returns the outputs (batch, L, d_output) and the number of calls."""
    ys, pos, n = [], 0, 0
    while pos < x.shape[1]:
        c = streamer.chunk if rng.random() < 0.5 else int(rng.integers(1, streamer.chunk + 1))
        ys.append(streamer.process(x[:, pos : pos + c]))
        pos += c
        n += 1
    return np.concatenate(ys, 1), n


def verify_onnx(
    model: LiquidS4Model,
    onnx_path: str | os.PathLike,
    length: int = 16000,
    batch: int = 1,
    seed: int = 0,
    meta: dict | None = None,
) -> VerifyReport:
    """Stream random input through the ONNX graph in chunks (:func:`stream_random_chunks`)
    and compare with the torch convolutional forward (:meth:`LiquidS4Model.forward_steps`)."""
    from liquid_stream.runtime.onnx_streamer import OnnxStreamer

    streamer = OnnxStreamer(onnx_path, batch=batch)
    rng = np.random.default_rng(seed)
    x, xn = random_input(dict(meta or {}), (batch, length, model.d_input), rng)
    ref_model = copy.deepcopy(model).float().eval().cpu()
    with torch.no_grad():
        ref = ref_model.forward_steps(xn).double().numpy()
    y, n = stream_random_chunks(streamer, x, rng)
    return VerifyReport(length, n, float(np.abs(y - ref).max()), float(np.abs(ref).max()))


def export_checkpoint(
    checkpoint: str | os.PathLike,
    out: str | os.PathLike,
    chunk: int = 160,
    opset: int = 17,
    sub_block: int | None = None,
    verify: bool = False,
    verify_length: int = 16000,
    quantize: str | None = None,
    ltc_op: str = "graph",
) -> tuple[dict, VerifyReport | QuantVerifyReport | None]:
    """``liquid-stream export``: load, export, and optionally verify (raises if it fails).
    The checkpoint's metadata must be complete for its task (else a ``MetaError``).
    ``quantize="int8"``: the int8 graph (module docstring); the report is then the int8
    one, the float32 graph's in ``info["float32_verify"]``."""
    if quantize not in (None, "int8"):
        raise ValueError(f"quantize must be None or 'int8', got {quantize!r}")
    model, meta = model_from_checkpoint(checkpoint)
    ModelMeta.from_dict(meta).check_complete()
    if quantize is None:
        return _export_verified(
            model, meta, out, chunk, opset, sub_block, verify, verify_length, ltc_op
        )
    with tempfile.TemporaryDirectory() as tmp:
        f32 = Path(tmp) / "float32.onnx"
        info, report = _export_verified(
            model, meta, f32, chunk, opset, sub_block, verify, verify_length, ltc_op
        )
        qinfo, qreport = quantize_file(f32, out, verify=verify, verify_length=verify_length)
    info = dict(info, **qinfo)
    if report is not None:
        info["float32_verify"] = str(report)
    return info, qreport


def _export_verified(
    model: LiquidS4Model,
    meta: dict,
    out,
    chunk,
    opset,
    sub_block,
    verify,
    verify_length,
    ltc_op: str = "graph",
) -> tuple[dict, VerifyReport | None]:
    """Export to a hidden sibling of ``out``, verify that file (with ``verify``), and only
    then rename it onto ``out`` (module docstring): ``out`` never holds an unverified graph,
    a failed verification leaves an old ``out`` as it was, a kill leaves at most the
    hidden sibling (removed by the next write into the folder, liquid_stream/io/atomic.py)."""
    report = None
    with atomic_path(out) as tmp:
        info = export_model(model, tmp, chunk, opset, sub_block, meta, ltc_op=ltc_op)
        if verify:
            report = verify_onnx(model, tmp, length=verify_length, meta=meta)
            if not report.ok:
                raise RuntimeError(
                    f"exported graph breaks the exactness contract; {out} not written "
                    f"(an existing one is untouched). {report}"
                )
    return dict(info, path=str(out)), report


def describe(info: dict) -> str:
    keys = (
        "path",
        "nodes",
        "bytes",
        "sub_block",
        "max_chunk",
        "ltc_op",
        "members",
        "quantized",
        "source_bytes",
    )
    return json.dumps({k: info[k] for k in keys if k in info})
