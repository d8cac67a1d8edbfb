"""Write a :class:`~liquid_stream.nn.model.StreamingModel` as an ONNX graph with explicit state.

Graph signature (``batch`` and ``T`` dynamic; each state is an input and, updated, an output):

    inputs:  x (batch, T, d_input), state.<name> …
    outputs: y (batch, T, d_output), next.<name> …

The graph computes what :meth:`StreamingModel.step` computes, with the same chunked
algorithm (:mod:`liquid_stream.nn.chunked`) and tables built in float64 from the same
exact systems, written op by op in real float32 arithmetic. Inside, activations are
channel-first ``(H, batch, T)``, so that per layer the SSM is two batched MatMuls
over ``(H, batch·n_blocks, ·)`` views (the local Toeplitz, D·u and the sub-block
inputs in one; the cross term in the other) plus a log₂-depth scan over sub-blocks
on tiny tensors, and the GLU is one plain MatMul. A model of LTC layers only runs
batch-first ``(batch, T, H)``, the layout of its elementwise scan (``ltc_layer``). The
states are those of the torch step form, laid out as in the table below; the
``state_spec`` metadata lists their names, shapes and dtypes.

Step by step (:class:`_Emitter`, one method per torch step, same names; ↔ in each docstring):

    torch (liquid_stream/nn/layer.py, chunked.py)    graph (_Emitter)
    LiquidS4Step.forward                          layer   (ltc: ltc_layer ↔ ltc.ltc_scan)
      LiquidS4Step.correlations                   correlations
      ChunkedSSM.sub_blocks                       sub_blocks   (+ next ssm.buf)
      ChunkedSSM tables (chunk_tables)            tables       (+ D folded into K_loc)
      ChunkedSSM.block_inputs                     block_inputs ("MatMul 1")
      ChunkedSSM.scan, .apply_power               scan: scan_diag (broadcast_scan or
                                                  levels) / scan_dense; apply_power_diag /
                                                  apply_power_dense   (+ next ssm.z)
      ChunkedSSM.outputs, + D·u                   outputs      ("MatMul 2")
      (diag, 4–8 sub-blocks: the three above)     columns_layer (batch-last layout)
      ChunkedSSM.next_state (fill)                chunk_dims   (one ssm.fill for all layers)
      LiquidS4Step.pb_term                        pb_term
    LiquidS4BlockStep.forward                     block
    StreamingModel._stack (decoder part)          decoder
    StreamingModel._step, LogMelStep              frontend_stack, logmel

The emitter is one class whose methods live by the table's rows: the chunked layer's
(``layer`` … ``pb_term``) in :mod:`.emit_ssm`, the LTC layer's in :mod:`.emit_ltc`, the
decoder in :mod:`.emit_decoder`, the front ends (``frontend_stack``, log-mel, scale-norm)
in :mod:`.emit_frontend`; ``block``, the whole model (``chunk_dims``, the stack) and
``build`` here; the emission limits and table helpers in :mod:`.emit_common`.

State layout. The graph's states have the torch :class:`StreamingModel`'s names (one
``ssm.fill`` serves all layers); torch's are batch-first, the layers' in the graph mostly
channel-first. With the graph's ``sub_block`` S (:func:`default_sub_block`; a torch
``streaming(sub_block=S)`` holds the same values), block i, H = d_model, R = 1 (or P for
KB: u and its P − 1 correlations), Mr = 2·Mc real SSM modes ([Re | Im] halves), M the LTC
modes, P = liquid_order, L̃ = liquid_len, W = decoder_window, d = d_output:

    name                  torch            graph                  graph from torch
    block{i}.ssm.fill     (1,) int64       ssm.fill (1,) int64    one for all the layers
    block{i}.ssm.buf      (B, S, R, H)     (H, batch, S[, R])     permute(3, 0, 1, 2) (a)
    block{i}.ssm.z diag   (B, H, R, Mr)    (batch, 1, H·R·Mr)     reshape(B, 1, −1)
      … column layout     (B, H, R, Mr)    (H·R·Mc, 2, 1, batch)  (d)
    block{i}.ssm.z dense  (B, H, R, Mr)    (H, batch, 1, R·Mr)    permute(1, 0, 2, 3), reshape
    block{i}.u_buf        (B, P−1, H)      (H, batch, P−1)        permute(2, 0, 1) (b)
    block{i}.w_buf        (B, L̃−1, H)      (H, batch, L̃−1)        permute(2, 0, 1)
    block{i}.ltc.x        (B, H, M, 2)     (batch, 2, M, H)       permute(0, 3, 2, 1)
    decoder.sum, .count   (B, d), (B, 1)   same, float64          same
    decoder.history       (B, W, d) f64    (batch, W, d) float32  cast (c)
    frontend.buffer, .phase, .held         same                   same
    frontend.cmn, .cmn_weight (cmn_s)      same                   same

(a) the R axis only for R > 1. (b) none for PB with S ≥ P − 1: ``ssm.buf`` (the last S
inputs u) holds them. (c) exact: it holds float32 logits. (d) a diagonal layer of a graph
with 4–8 sub-blocks a call (:meth:`_Emitter.columns_layer`): reshape(B, H, R, 2, Mc),
permute(1, 2, 4, 3, 0), reshape(−1, 2, 1, B).
:func:`onnx_state_from_torch` is this table as code: a stream begun in torch continues in
the graph from the converted state.

The graph's inputs and ``state_spec`` list the states in the order they are declared:
``frontend.*`` (log-mel models), ``ssm.fill`` (models with a chunked layer), then per block
``ssm.buf``, ``u_buf``, ``ssm.z``, ``w_buf`` (or ``ltc.x``), then ``decoder.*``.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
import torch

from liquid_stream.runtime.ltc_ort import library_path as ltc_library_path
from liquid_stream.runtime.meta import ModelMeta

from .emit_common import (
    CLOSED_FORM_MAX_BLOCKS,
    END,
    LTC_MIN_B,
    LTC_OPS,
    MATMUL_SCAN_MIN_BLOCKS,
    WHOLE_CALL_MAX,
    _f32,
    default_ltc_sub_block,
    default_sub_block,
    diag_lambda,
    power_table,
)
from .emit_decoder import DecoderEmitter
from .emit_frontend import FrontendEmitter
from .emit_ltc import LtcEmitter
from .emit_ssm import SsmEmitter
from .graph import Graph

__all__ = [
    "build_onnx",
    "metadata_props",
    "onnx_state_from_torch",
    "default_sub_block",
    "default_ltc_sub_block",
    "diag_lambda",
    "power_table",
    "END",
    "WHOLE_CALL_MAX",
    "CLOSED_FORM_MAX_BLOCKS",
    "MATMUL_SCAN_MIN_BLOCKS",
    "LTC_MIN_B",
    "LTC_OPS",
]


class _Emitter(SsmEmitter, LtcEmitter, DecoderEmitter, FrontendEmitter):
    """Emits the graph of one StreamingModel; collects the state specification."""

    def __init__(
        self,
        sm,
        sub_block: int,
        max_chunk: int,
        opset: int,
        input_mean,
        input_std,
        ltc_sub_block: int | None = None,
        ltc_op: str = "graph",
    ):
        self.sm, self.S, self.opset = sm, sub_block, opset
        self.input_mean, self.input_std = input_mean, input_std
        self.g = Graph(opset)
        # Sub-blocks (+1 for the carried state) of the longest chunk → scan depth. With a
        # front end the stack steps once per hop R samples: ≤ ⌈T/R⌉ frames per chunk.
        hop = sm.frontend.hop if sm.frontend is not None else 1
        steps = -(-max_chunk // hop)
        self.call_steps = steps  # stack steps of the export's chunk: the whole-call MatMul's T
        # A call of the export's chunk makes ⌊T/R⌋ or ⌈T/R⌉ frames (with the R − 1 samples a
        # front end may hold): a whole-call branch for each (12 and 13 for 1 s at 12.5 Hz)
        self.whole_steps = sorted({max_chunk // hop, steps} - {0}, reverse=True)
        n_blocks = -(-(self.S - 1 + steps) // self.S) + 1
        self.levels = math.ceil(math.log2(n_blocks))
        self.max_chunk = (self.S * (2**self.levels - 1) - (self.S - 1)) * hop
        # LTC layers: sub-blocks of Q steps. A model of LTC layers only runs its stack
        # batch-first (B, T, H) ("bf"): the LTC scan's layout, with no transposes per layer
        self.ltc_Q = ltc_sub_block or default_ltc_sub_block(steps)
        self.ltc_op = ltc_op
        self.bf = bool(sm.blocks) and all(b.ssm.liquid == "ltc" for b in sm.blocks)
        if any(b.ssm.liquid != "ltc" and self.whole_call(b.ssm) for b in sm.blocks):
            # longer blocks are cut into calls of the export's chunk, the whole-call path
            # (OnnxStreamer splits at max_chunk; S = 1 makes longer calls the slow path)
            self.max_chunk = min(self.max_chunk, steps * hop)
        self.state_out: dict[str, str] = {}
        self.spec: list[dict] = []
        self._cache: dict[tuple, str] = {}
        self._mode: str | None = None  # "whole" while the whole-call blocks are emitted

    # ------------------------------------------------------------------ state
    def state(self, name: str, shape: list, dtype=np.float32) -> str:
        if any(s["name"] == name for s in self.spec):  # declared already (both If branches)
            return f"state.{name}"
        value = self.g.input(f"state.{name}", dtype, shape)
        self.spec.append({"name": name, "shape": shape, "dtype": np.dtype(dtype).name})
        return value

    def set_state(self, name: str, value: str) -> None:
        self.state_out[name] = value

    def zeros(self, *dims) -> str:
        """A float32 zero tensor of the given dims (ints or int64 (1,) names), built once."""
        key = tuple(dims)
        if key not in self._cache:
            g = self.g
            zero = onnx.helper.make_tensor("zero", onnx.TensorProto.FLOAT, [1], [0.0])
            parts = [x if isinstance(x, str) else g.const([x]) for x in dims]
            self._cache[key] = g.op("ConstantOfShape", g.op("Concat", *parts, axis=0), value=zero)
        return self._cache[key]

    def n_blocks_plus_1(self) -> str:
        """nb + 1 (sub-blocks of this call plus the carried state) as int64 (1,)."""
        key = ("nb+1",)
        if key not in self._cache:
            self._cache[key] = self.g.op("Add", self.dims["nb"], self.g.const([1]))
        return self._cache[key]

    def t_plus(self, k: int) -> str:
        """T + k as an int64 (1,) tensor, built once."""
        key = ("T+", k)
        if key not in self._cache:
            self._cache[key] = self.g.op("Add", self.dims["T"], self.g.const([k]))
        return self._cache[key]

    # ------------------------------------------------------------------ pieces
    def linear(self, lin: torch.nn.Linear, x2d: str) -> str:
        """A Linear on the stack's layout: channel-first W (out, in) @ x (in, N) + b (out, 1),
        or batch-first x (N, in) @ Wᵀ (in, out) + b (out,)."""
        g = self.g
        if self.bf:
            y = g.op("MatMul", x2d, g.const(np.ascontiguousarray(_f32(lin.weight).T)))
            bias = None if lin.bias is None else _f32(lin.bias)
        else:
            y = g.op("MatMul", g.const(_f32(lin.weight)), x2d)
            bias = None if lin.bias is None else _f32(lin.bias)[:, None]
        return y if bias is None else g.op("Add", y, g.const(bias))

    def to_2d(self, x: str, C: int) -> str:
        """``(C, B, T)`` → ``(C, B·T)`` channel-first, ``(B, T, C)`` → ``(B·T, C)`` batch-first."""
        return self.g.op("Reshape", x, self.g.const([-1, C] if self.bf else [C, -1]))

    def norm(self, norm, x: str) -> str:
        """BatchNorm (folded affine) or LayerNorm over the channel axis of the stack's
        activations: axis 0 of ``(H, B, T)``, or the last of ``(B, T, H)``."""
        g = self.g
        if isinstance(norm, torch.nn.Identity):
            return x
        axis = -1 if self.bf else 0

        def per_channel(v: torch.Tensor) -> str:
            v = _f32(v)
            return g.const(v if self.bf else v[:, None, None])

        if isinstance(norm, torch.nn.LayerNorm):

            def mean(v: str) -> str:
                if self.opset >= 18:
                    return g.op("ReduceMean", v, g.const([axis]), keepdims=1)
                return g.op("ReduceMean", v, axes=[axis], keepdims=1)

            xc = g.op("Sub", x, mean(x))
            var = mean(g.op("Mul", xc, xc))
            inv = g.op("Reciprocal", g.op("Sqrt", g.op("Add", var, g.const(float(norm.eps)))))
            y = g.op("Mul", g.op("Mul", xc, inv), per_channel(norm.weight))
            return g.op("Add", y, per_channel(norm.bias))
        return g.op("Add", g.op("Mul", x, per_channel(norm.a)), per_channel(norm.b))

    def gelu(self, x: str) -> str:
        """Exact GELU 0.5·x·(1 + erf(x/√2)) (onnxruntime fuses the pattern)."""
        g = self.g
        if self.opset >= 20:
            return g.op("Gelu", x)
        e = g.op("Erf", g.op("Div", x, g.const(math.sqrt(2))))
        return g.op("Mul", g.op("Mul", x, g.op("Add", e, g.const(1.0))), g.const(0.5))

    def block(self, i: int, block, x: str) -> str:
        """↔ :meth:`LiquidS4BlockStep.forward` on the stack's activations ``x``."""
        g = self.g
        z = self.norm(block.norm, x) if block.prenorm else x
        z = self.gelu(self.layer(i, block.ssm, z))
        H = block.ssm.H
        z2d = self.to_2d(z, H)
        halves = []
        for half in (slice(0, H), slice(H, 2 * H)):  # GLU as two MatMuls: no Split copy
            lin = torch.nn.Linear(H, H)
            with torch.no_grad():
                lin.weight.copy_(block.out.weight[half])
                lin.bias.copy_(block.out.bias[half])
            halves.append(self.linear(lin, z2d))
        z = g.op("Mul", halves[0], g.op("Sigmoid", halves[1]))
        z = g.op("Reshape", z, self.dims["act_shape"])
        x = g.op("Add", x, z)
        return x if block.prenorm else self.norm(block.norm, x)

    # ------------------------------------------------------------------ whole model
    def chunk_dims(self, B: str, T: str, H: int) -> dict[str, str]:
        """The chunk's shape arithmetic (int64 (1,) values), shared by all layers:
        ``B``, ``T``, and for the chunked layers ↔ the q, n, nb, n_full of
        :meth:`ChunkedSSM.sub_blocks` / ``next_state`` (q = ``fill``). Every layer sees the
        same chunks, so one ``ssm.fill`` state serves all (torch keeps one per layer, equal);
        its next value, (q + T) mod S, is set here."""
        g, S = self.g, self.S
        shape = (B, T, g.const([H])) if self.bf else (g.const([H]), B, T)
        d = {"B": B, "T": T, "act_shape": g.op("Concat", *shape, axis=0)}
        if any(b.ssm.liquid != "ltc" for b in self.sm.blocks):  # the chunked layers
            fill0 = self.state("ssm.fill", [1], np.int64)
            n = g.op("Add", fill0, T)
            nb = g.op("Div", g.op("Add", n, g.const([S - 1])), g.const([S]))
            n_full = g.op("Div", n, g.const([S]))
            pad = g.op("Sub", g.op("Mul", nb, g.const([S])), n)
            d.update(
                pad=pad,
                buf_start=g.op("Sub", g.const([S]), fill0),
                fill=fill0,
                fill_plus_T=g.op("Add", fill0, T),
                n_full=n_full,
                nb=nb,
                n_full_plus_1=g.op("Add", n_full, g.const([1])),
                y_shape=g.op("Concat", g.const([H]), B, g.const([-1]), axis=0),
            )
            self.set_state("ssm.fill", g.op("Sub", n, g.op("Mul", n_full, g.const([S]))))
        return d

    def stack(self, feats: str, B: str, T: str) -> str:
        """Encoder → blocks → norm → head → decoder on channel-first ``feats (d_in, B, T)``;
        returns ``y (B, T, d_output)``. Declares the stack's states (inputs) as it goes.
        The activations are channel-first ``(H, B, T)``, or batch-first ``(B, T, H)`` in a
        model of LTC layers only (``self.bf``). With whole-call layers (:meth:`whole_call`)
        the blocks sit in an ``If`` on T = T₀: :meth:`whole_layer` MatMuls for a call of
        exactly the export's chunk, the chunked layers for any other length."""
        g, sm = self.g, self.sm
        H = sm.blocks[0].ssm.H if len(sm.blocks) else sm.encoder.out_features
        self.dims = self.chunk_dims(B, T, H)
        # Encoder: (d_in, B·T) → (H, B, T) (or (B·T, d_in) → (B, T, H)). For raw-input
        # models the input standardisation (x − μ)/σ is folded in: W' = W/σ, b' = b − W μ/σ.
        d_in = sm.encoder.in_features
        if self.bf:
            feats = g.op("Transpose", feats, perm=[1, 2, 0])
        enc = torch.nn.Linear(d_in, H).double()
        with torch.no_grad():
            enc.weight.copy_(sm.encoder.weight.double())
            enc.bias.copy_(sm.encoder.bias.double())
            if sm.frontend is None:
                mu = torch.as_tensor(self.input_mean, dtype=torch.float64).expand(d_in)
                sd = torch.as_tensor(self.input_std, dtype=torch.float64).expand(d_in)
                enc.weight.div_(sd)
                enc.bias.sub_(enc.weight @ mu)
        h = g.op("Reshape", self.linear(enc, self.to_2d(feats, d_in)), self.dims["act_shape"])
        if any(b.ssm.liquid != "ltc" and self.whole_call(b.ssm) for b in sm.blocks):
            h = self.whole_or_chunked(h, T, self.whole_steps)
        else:
            h = self.blocks(h, None)
        h = self.norm(sm.final_norm, h)
        logits = self.linear(sm.head, self.to_2d(h, H))
        if self.bf:  # (B·T, d_output) → (B, T, d_output)
            logits = g.op("Reshape", logits, g.op("Concat", B, T, g.const([sm.d_output]), axis=0))
        else:  # (d_output, B·T) → (B, T, d_output)
            logits = g.op("Reshape", logits, g.op("Concat", g.const([sm.d_output]), B, T, axis=0))
            logits = g.op("Transpose", logits, perm=[1, 2, 0])
        return self.decoder(logits)

    def whole_or_chunked(self, h: str, T: str, steps: list[int]) -> str:
        """The blocks in nested ``If``s: on T = T₀ for each T₀ of ``steps`` (the longest
        first) the whole-call layers of a T₀-step call, else the chunked layers."""
        if not steps:
            return self.blocks(h, "chunked")
        g, longest = self.g, self.call_steps

        def whole() -> str:
            self.call_steps = steps[0]  # whole_table / whole_layer read it
            try:
                return self.blocks(h, "whole")
            finally:
                self.call_steps = longest

        cond = g.op("Squeeze", g.op("Equal", T, g.const([steps[0]])), g.const([0]))
        return self.if_stack(cond, whole, lambda: self.whole_or_chunked(h, T, steps[1:]))

    def blocks(self, h: str, mode: str | None) -> str:
        """The residual blocks on the stack's activations; ``mode`` "whole": their layers
        as :meth:`whole_layer` where they can, else chunked."""
        self._mode = mode
        for i, block in enumerate(self.sm.blocks):
            h = self.block(i, block, h)
        self._mode = None
        return h

    def build(self) -> onnx.ModelProto:
        g, sm = self.g, self.sm
        x = g.input("x", np.float32, ["batch", "T", sm.d_input])
        B, T = g.dim(x, 0), g.dim(x, 1)
        if sm.frontend is None:
            y = self.stack(g.op("Transpose", x, perm=[2, 0, 1]), B, T)
        else:
            y = self.frontend_stack(x, B, T)
        g.output(y, "y", np.float32, ["batch", "T", sm.d_output])
        for spec in self.spec:
            name = spec["name"]
            g.output(self.state_out[name], f"next.{name}", np.dtype(spec["dtype"]), spec["shape"])
        return g.model("liquid_stream", _version())


def _version() -> str:
    from liquid_stream import __version__

    return __version__


def build_onnx(
    sm,
    sub_block: int | None = None,
    max_chunk: int = 4096,
    opset: int = 17,
    input_mean=0.0,
    input_std=1.0,
    ltc_sub_block: int | None = None,
    ltc_op: str = "graph",
) -> tuple[onnx.ModelProto, dict]:
    """ONNX graph of a float32 :class:`StreamingModel` and its ``info`` (state spec, sub-block,
    longest chunk per call). ``sub_block`` defaults to :func:`default_sub_block` of max_chunk.
    The graph takes raw input: (x − input_mean)/input_std is folded into the encoder.
    ``ltc_op`` (:data:`LTC_OPS`): the LTC layers as standard ops (``graph``, portable) or
    as the custom op of :mod:`liquid_stream.runtime.ltc_ort` (``fused``: onnxruntime with
    that library)."""
    if sm.dtype != torch.float32:
        raise ValueError(f"ONNX export needs a float32 streaming model, got {sm.dtype}")
    if opset < 17:
        raise ValueError(f"opset must be >= 17 (LayerNormalization/DFT era), got {opset}")
    S = sub_block or default_sub_block(max_chunk)
    if S < 1 or S & (S - 1):
        raise ValueError(f"sub_block must be a power of two, got {S}")
    if np.any(np.asarray(input_std) <= 0):
        raise ValueError("input_std must be positive")
    if ltc_sub_block is not None and ltc_sub_block < 1:
        raise ValueError(f"ltc_sub_block must be >= 1, got {ltc_sub_block}")
    if ltc_op not in LTC_OPS:
        raise ValueError(f"ltc_op must be one of {', '.join(LTC_OPS)}, got {ltc_op!r}")
    has_ltc = any(b.ssm.liquid == "ltc" for b in sm.blocks)
    if ltc_op == "fused" and has_ltc:
        ltc_library_path()  # LtcOpUnavailable (a RuntimeError) with the reason, before any work
    em = _Emitter(sm, S, max_chunk, opset, input_mean, input_std, ltc_sub_block, ltc_op)
    model = em.build()
    info = {"state_spec": em.spec, "sub_block": S, "max_chunk": em.max_chunk, "levels": em.levels}
    if has_ltc:
        info["ltc_sub_block"] = em.ltc_Q
        info["ltc_op"] = ltc_op
    return model, info


# The graph's entries in the order of the first exports (meta_schema: the task's entries).
GRAPH_KEYS = (
    "liquid_stream_version",
    "model_config",
    "d_input",
    "d_output",
    "decoder",
    "rate",
    "sub_block",
    "max_chunk",
    "state_spec",
)


def metadata_props(sm, info: dict, extra: dict | None = None) -> dict[str, str]:
    """The graph's metadata stored in the ONNX file, encoded by
    :meth:`ModelMeta.to_onnx_props <liquid_stream.runtime.meta.ModelMeta.to_onnx_props>`:
    :data:`GRAPH_KEYS`, then ``extra`` (more :class:`~liquid_stream.runtime.meta.ModelMeta` fields,
    e.g. ``chunk``). ``meta_schema`` is left to the task's entries merged after these."""
    extra = extra or {}
    props = ModelMeta(
        liquid_stream_version=_version(),
        model_config=sm.config,
        d_input=sm.d_input,
        d_output=sm.d_output,
        decoder=sm.decoder,
        rate=sm.rate,
        sub_block=info["sub_block"],
        max_chunk=info["max_chunk"],
        state_spec=info["state_spec"],
        **extra,
    ).to_onnx_props()
    return {k: props[k] for k in (*GRAPH_KEYS, *extra)}


def onnx_state_from_torch(
    state: dict[str, torch.Tensor], spec: list[dict]
) -> dict[str, np.ndarray]:
    """A torch :class:`~liquid_stream.nn.model.StreamingModel`'s ``state`` as the graph's,
    converted per the module docstring's table: ``state_spec`` name → array of its shape and
    dtype (the graph takes each as the input ``state.<name>``). The torch model must stream
    with the graph's sub-block S (``sm = model.streaming(sub_block=info["sub_block"])``);
    a state of another S, another model, or a batch that is not one size is a ValueError.

        state = sm.init_state(1)
        y0, state = sm.step(x[:, :n], state)                 # torch, the first n steps
        streamer.state = {f"state.{k}": v for k, v in
                          onnx_state_from_torch(state, streamer.state_spec).items()}
        y1 = streamer.process(x[0, n:].numpy())               # ONNX, the rest
    """
    out: dict[str, np.ndarray] = {}
    used: set[str] = set()
    batch = None
    for entry in spec:
        name, shape = entry["name"], entry["shape"]
        if name == "ssm.fill":  # one for all the layers: their fills are equal
            keys = sorted(k for k in state if k.endswith(".ssm.fill"))
            fills = {int(state[k].reshape(-1)[0]) for k in keys}
            if len(fills) != 1:
                raise ValueError(f"the layers' ssm.fill differ ({sorted(fills)}) or are absent")
            used.update(keys)
            v = state[keys[0]]
        else:
            if name not in state:
                raise ValueError(f"the torch state has no {name!r} (another model?)")
            used.add(name)
            v = state[name]
            if name.endswith(".ssm.buf"):  # (B, S, R, H) -> (H, B, S[, R])
                v = v.permute(3, 0, 1, 2)
                v = v.squeeze(3) if len(shape) == 3 else v
            elif name.endswith(".ssm.z"):  # (B, H, R, Mr)
                if shape[-1] == "batch":  # diag, column layout: (H·R·Mc, 2, 1, B)
                    Bn, H, R, Mr = v.shape
                    v = v.reshape(Bn, H, R, 2, Mr // 2).permute(1, 2, 4, 3, 0)
                    v = v.reshape(-1, 2, 1, Bn)
                elif len(shape) == 3:  # diag: (B, 1, H·R·Mr)
                    v = v.reshape(v.shape[0], 1, -1)
                else:  # dense: (H, B, 1, R·Mr)
                    v = v.permute(1, 0, 2, 3).reshape(v.shape[1], v.shape[0], 1, -1)
            elif name.endswith((".u_buf", ".w_buf")):  # (B, n, H) -> (H, B, n)
                v = v.permute(2, 0, 1)
            elif name.endswith(".ltc.x"):  # (B, H, M, 2) -> (B, 2, M, H)
                v = v.permute(0, 3, 2, 1)
            # decoder.*, frontend.*: the same layout (decoder.history: cast to float32)
        a = v.detach().cpu().numpy().astype(entry["dtype"])
        if batch is None and "batch" in shape and a.ndim == len(shape):
            batch = a.shape[shape.index("batch")]
        want = [batch if d == "batch" else d for d in shape]
        if list(a.shape) != want:
            raise ValueError(
                f"state {name!r}: torch gives {list(a.shape)} for the graph's {shape} (batch "
                f"{batch}); stream torch with the graph's sub_block, batch the same size"
            )
        out[name] = a
    # what the graph does not keep: PB's u_buf when ssm.buf holds those inputs (note b)
    left = sorted(k for k in set(state) - used if not k.endswith(".u_buf"))
    if left:
        raise ValueError(f"torch state entries the graph has no place for: {left}")
    return out
