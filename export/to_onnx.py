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

from liquid_stream.nn.chunked import chunk_tables
from liquid_stream.nn.frontend import LogMelStep
from liquid_stream.nn.scalenorm import LOG_FLOOR, LOG_RATIO
from liquid_stream.runtime.ltc_ort import DOMAIN as LTC_DOMAIN
from liquid_stream.runtime.ltc_ort import OP as LTC_OP
from liquid_stream.runtime.ltc_ort import library_path as ltc_library_path
from liquid_stream.runtime.meta import ModelMeta

from .graph import DTYPES, Graph

END = 2**62  # "to the end" in Slice
WHOLE_CALL_MAX = 64  # a call of T steps as one MatMul while T + Mr (its columns) ≤ this
CLOSED_FORM_MAX_BLOCKS = 8  # sub-block recursion in closed form up to this many blocks
MATMUL_SCAN_MIN_BLOCKS = 4  # from this many, the closed form as one batched MatMul
LTC_MIN_B = 1e-20  # the LTC graph's coordinate z = x / B̄ needs |B̄| ≥ this
LTC_OPS = ("graph", "fused")  # the LTC layers as standard ops, or as ai.liquid_stream::LtcScan


def _f32(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().double().numpy().astype(np.float32)


def default_sub_block(chunk: int) -> int:
    """Largest power of two ≤ chunk/4, in 1 … 64: local work ~S per sample, scan depth
    ~log₂(T/S); measured best here: S = 32 at T = 160, S = 64 at T = 1600."""
    return 1 << min(6, max(0, (int(chunk) // 4).bit_length() - 1))


def default_ltc_sub_block(steps: int) -> int:
    """Q, the sub-block of the LTC layers' blocked scan, for chunks of ``steps`` stack steps:
    ~28 ops for each of the Q positions, one ``Scan`` iteration (~5 µs) per sub-block.
    Measured on the six 128-channel LTC layers of the paper model alone (1 thread,
    interleaved, 2026-11-27): 160 steps, Q = 2 / 4 / 8 / 16: 4.8 / 4.0 / 4.6 / 6.5 ms;
    1600 steps, Q = 4 / 8 / 16 / 32: 36.6 / 34.0 / 36.4 / 47.0 ms."""
    return 4 if steps <= 256 else 8


def diag_lambda(step) -> torch.Tensor:
    """λ ``(H, Mc)`` complex128 of a diagonal Ā, from its real [[Re, −Im], [Im, Re]] form."""
    A, Mc = step.ssm.A64.double(), step.ssm.Mr // 2
    return torch.complex(
        A[:, :Mc, :Mc].diagonal(dim1=1, dim2=2), A[:, Mc:, :Mc].diagonal(dim1=1, dim2=2)
    )


def power_table(lam: torch.Tensor, S: int, R: int, n_max: int) -> torch.Tensor:
    """The closed-form scan's table p[k, k'] = λ^{S(k−k')} for k ≥ k', 0 above,
    ``(n_max, n_max, H·R, Mc)`` complex128 (repeated over the R inputs)."""
    H, Mc = lam.shape
    k = torch.arange(n_max)
    lag = (k[:, None] - k[None, :]).clamp(min=0).double()  # (k, k')
    p = torch.exp(S * lag[..., None, None] * torch.log(lam.to(torch.complex128)))
    p = torch.where((k[:, None] >= k[None, :])[..., None, None], p, 0)  # (k, k', H, Mc)
    return p[:, :, :, None, :].expand(n_max, n_max, H, R, Mc).reshape(n_max, n_max, H * R, Mc)


class _Emitter:
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

    # ------------------------------------------------------------------ SSM layer
    # A chunked layer is LiquidS4Step.forward and ChunkedSSM._chunk (liquid_stream/nn/layer.py,
    # liquid_stream/nn/chunked.py) step by step, one method per torch step under the same name
    # (each docstring names its counterpart with ↔). What differs is layout (channel-first;
    # the state table in the module docstring) and fusion: D·u joins the local Toeplitz,
    # the R inputs share one MatMul, and the next-state slices are taken where their values
    # are made. The graph's shape arithmetic (q, nb, …) is :meth:`chunk_dims`, shared by
    # all layers.
    def layer(self, i: int, step, u: str) -> str:
        """↔ :meth:`LiquidS4Step.forward`: one layer on channel-first ``u (H, B, T)``."""
        if step.liquid == "ltc":
            return self.ltc_layer(i, step, u)
        pre, R = f"block{i}.", step.ssm.R
        buf = self.state(pre + "ssm.buf", [step.H, "batch", self.S] + ([R] if R > 1 else []))
        corr, full = self.correlations(pre, step, u, buf)
        if self.whole_call(step) and self._mode == "whole":
            y = self.whole_layer(pre, step, u, buf, full)
        elif self.columns(step):
            sp = self.sub_blocks(pre, step, u, corr, buf, full)
            y = self.columns_layer(pre, step, sp, self.tables(step))
        else:
            sp = self.sub_blocks(pre, step, u, corr, buf, full)
            tables = self.tables(step)
            ell = self.block_inputs(step, sp, tables)
            Z_prev = self.scan(pre, step, ell)
            y = self.outputs(step, sp, Z_prev, tables)
        if step.liquid == "pb":
            y = self.g.op("Add", y, self.pb_term(pre, step, corr))
        return y

    def correlations(self, pre: str, step, u: str, buf: str) -> tuple[list[str], str | None]:
        """↔ :meth:`LiquidS4Step.correlations`: v_p = v_{p−1} · u[t−p+1], p = 2 … P, each
        ``(H, B, T)``. The earlier inputs come from ``u_buf``, or (PB with S ≥ P − 1) from
        ``ssm.buf``, which then holds the last S inputs u: such a layer has no ``u_buf``
        state. Returns [v_2, …, v_P] and, in that case, the [ssm.buf | u] built (else None).
        """
        if step.liquid is None:
            return [], None
        g, S, P = self.g, self.S, step.P
        if step.ssm.R > 1 or S < P - 1:
            u_buf = self.state(pre + "u_buf", [step.H, "batch", P - 1])
            u_hist = g.op("Concat", u_buf, u, axis=2)  # (H, B, P−1+T)
            self.set_state(pre + "u_buf", g.slice(u_hist, -(P - 1), END, axis=2))
            full, off = None, P - 1
        else:
            u_hist = full = g.op("Concat", buf, u, axis=2)  # (H, B, S+T)
            off = S
        v, corr = u, []
        for k in range(1, P):  # v_p = v_{p−1} · u[t−p+1]
            v = g.op("Mul", v, g.slice(u_hist, off - k, self.t_plus(off - k), axis=2))
            corr.append(v)
        return corr, full

    def sub_blocks(self, pre: str, step, u: str, corr: list[str], buf: str, full) -> str:
        """↔ :meth:`ChunkedSSM.sub_blocks` (and the ``buf`` of its ``next_state``): the
        signals (u, or u and the KB correlations stacked on a last axis R, as
        LiquidS4Step.forward stacks them) after the S buffered ones; the last q + T of them,
        zero-padded to nb sub-blocks, as ``sp (H, B·nb, S·R)``. Next ``ssm.buf``: the last S.
        """
        g, S, d, H, R = self.g, self.S, self.dims, step.H, step.ssm.R
        if R > 1:
            sig = g.op("Concat", *[g.op("Unsqueeze", x, g.const([3])) for x in [u, *corr]], axis=3)
            full = g.op("Concat", buf, sig, axis=2)  # (H, B, S+T, R)
        elif full is None:
            full = g.op("Concat", buf, u, axis=2)  # (H, B, S+T)
        self.set_state(pre + "ssm.buf", g.slice(full, -S, END, axis=2))
        ext = g.slice(full, d["buf_start"], END, axis=2)  # (H, B, q+T[, R])
        pad = self.zeros(H, d["B"], d["pad"], *([R] if R > 1 else []))
        return g.op("Reshape", g.op("Concat", ext, pad, axis=2), g.const([H, -1, S * R]))

    def tables(self, step) -> dict[str, torch.Tensor]:
        """↔ the tables of :class:`ChunkedSSM` (:func:`chunk_tables`, float64, at this graph's
        S), with LiquidS4Step.forward's D·u folded into the local Toeplitz's diagonal."""
        tab = chunk_tables(step.ssm.A64, step.ssm.b64, step.ssm.c64, self.S)
        tab["K_loc"][0] += torch.diag_embed(step.D.double()[:, None].expand(step.H, self.S))
        return tab

    def block_inputs(self, step, sp: str, tab: dict[str, torch.Tensor]) -> str:
        """↔ :meth:`ChunkedSSM.block_inputs`: ℓ = sp @ G, the R inputs' G side by side in
        one MatMul ("MatMul 1"), ``(H, B·nb, R·Mr)``."""
        H, S, R, Mr = step.H, self.S, step.ssm.R, step.ssm.Mr
        G_w = torch.zeros(H, S, R, R * Mr, dtype=torch.float64)  # rows (j, r)
        for r in range(R):
            G_w[:, :, r, r * Mr : (r + 1) * Mr] = tab["G"][r]
        return self.g.op("MatMul", sp, self.g.const(_f32(G_w.reshape(H, S * R, R * Mr))))

    def scan(self, pre: str, step, ell: str) -> str:
        """↔ :meth:`ChunkedSSM.scan` (and the ``z`` of its ``next_state``): ``Z_prev``
        ``(H, B·nb, R·Mr)``, Z[k−1] for k = 0 … nb−1. The graph scans the n = nb + 1
        elements [z, ℓ_0, …, ℓ_{nb−1}] (Z'[k] = Ā^S Z'[k−1] + ℓ'[k], so Z'[k] = Z[k−1])
        where torch folds z into ℓ_0; next ``ssm.z`` is Z'[n_full]."""
        if step.ssm.kind == "diag":
            return self.scan_diag(pre, step, ell)
        return self.scan_dense(pre, step, ell)

    def scan_diag(self, pre: str, step, ell: str) -> str:
        """:meth:`scan` for a complex diagonal Ā = diag(λ), in the layout
        ``(B, n, H·R, 2, Mc)`` of ``ssm.z`` (Re and Im halves of the real basis): the closed
        form for n ≤ MATMUL_SCAN_MIN_BLOCKS / 2 (:meth:`broadcast_scan`), else Hillis–Steele
        (from MATMUL_SCAN_MIN_BLOCKS to CLOSED_FORM_MAX_BLOCKS the whole layer is
        :meth:`columns_layer`)."""
        g, S, d = self.g, self.S, self.dims
        H, R, Mr = step.H, step.ssm.R, step.ssm.Mr
        Mc, C = Mr // 2, H * R * Mr
        lam = diag_lambda(step)  # (H, Mc)
        z = self.state(pre + "ssm.z", ["batch", 1, C])
        n_max = 2**self.levels
        ell_t = g.op("Transpose", ell, perm=[1, 0, 2])  # (B·nb, H, RMr)
        ell_t = g.op("Reshape", ell_t, g.op("Concat", d["B"], g.const([-1, C]), axis=0))
        Zs = g.op("Concat", z, ell_t, axis=1)  # (B, n, C)
        if n_max <= CLOSED_FORM_MAX_BLOCKS:
            Zs = self.broadcast_scan(Zs, lam, R)
        else:
            Zs = g.op("Reshape", Zs, g.const([0, 0, H * R, 2, Mc]))
            for lvl in range(self.levels):
                sh, dims = 2**lvl, (d["B"], 2**lvl, H * R, 2, Mc)
                self.zeros(*dims)  # built (and cached) here, outside the If
                p = (lam ** (S * sh))[:, None, :].expand(H, R, Mc).reshape(H * R, 1, Mc)

                def level(Zs=Zs, sh=sh, dims=dims, p=p) -> str:
                    shifted = self.shift_blocks(Zs, sh, 1, dims)
                    return g.op("Add", Zs, self.apply_power_diag(shifted, p))

                # a level whose shift reaches past the n = nb + 1 elements adds nothing:
                # skipped (If), so a short chunk costs the levels it needs, not max_chunk's
                Zs = level() if lvl == 0 else self.if_then(self.more_than(sh), level, Zs)
        Zs = g.op("Reshape", Zs, g.const([0, 0, C]))
        Z_prev = g.op("Reshape", g.slice(Zs, 0, -1, axis=1), g.const([-1, H, R * Mr]))
        Z_prev = g.op("Transpose", Z_prev, perm=[1, 0, 2])  # (H, B·nb, RMr)
        self.set_state(pre + "ssm.z", g.slice(Zs, d["n_full"], d["n_full_plus_1"], axis=1))
        return Z_prev

    def broadcast_scan(self, Zs: str, lam: torch.Tensor, R: int) -> str:
        """The diagonal scan of ``Zs (B, n, C)`` for very few sub-blocks (n_max ≤
        MATMUL_SCAN_MIN_BLOCKS / 2), in closed form: Z'[k] = Σ_{k'≤k} λ^{S(k−k')} ℓ'[k'] as
        one broadcast product with an (n_max, n_max) table of powers, sliced to n: fewer
        ops than the MatMul form (:meth:`columns_layer`), which pays off on tiny tensors (the
        keyword spotter's 10 ms chunks, n ≤ 2: 1.25–1.3x faster a call than the MatMul form,
        measured with the previous, batch-first MatMul form)."""
        g, S = self.g, self.S
        H, Mc = lam.shape
        C, n_max = H * R * 2 * Mc, 2**self.levels  # n_max ≥ nb + 1
        p = power_table(lam, S, R, n_max).reshape(n_max, n_max, H * R, 1, Mc)
        Ta = torch.cat([p.real, p.real], 3).reshape(n_max, n_max * C)
        Tb = torch.cat([-p.imag, p.imag], 3).reshape(n_max, n_max * C)
        n = self.n_blocks_plus_1()
        n_flat = g.op("Mul", n, g.const([C]))
        ends = g.op("Concat", n, n_flat, axis=0)
        Ta_n, Tb_n = (
            g.op("Slice", g.const(_f32(t)), g.const([0, 0]), ends, g.const([0, 1]))
            for t in (Ta, Tb)
        )
        Z5 = g.op("Reshape", Zs, g.const([0, 0, H * R, 2, Mc]))
        swap = g.op("Reshape", g.slice(Z5, -1, -END, axis=3, step=-1), g.const([0, 1, -1]))
        flat = g.op("Reshape", Zs, g.const([0, 1, -1]))  # (B, 1, n·C)
        prod = g.op("Add", g.op("Mul", flat, Ta_n), g.op("Mul", swap, Tb_n))  # (B, n, n·C)
        prod = g.op("Reshape", prod, g.op("Concat", self.dims["B"], n, n, g.const([C]), axis=0))
        return g.op("ReduceSum", prod, g.const([2]), keepdims=0)

    def columns(self, step) -> bool:
        """Whether a chunked layer runs as :meth:`columns_layer`: diagonal, channel-first,
        and a graph of MATMUL_SCAN_MIN_BLOCKS … CLOSED_FORM_MAX_BLOCKS sub-blocks a call."""
        n_max = 2**self.levels
        return (
            step.ssm.kind == "diag"
            and not self.bf
            and MATMUL_SCAN_MIN_BLOCKS <= n_max <= CLOSED_FORM_MAX_BLOCKS
        )

    def whole_call(self, step) -> bool:
        """Whether a chunked layer gets the whole-call MatMul (:meth:`whole_layer`): a
        graph of sub-blocks of one step (S = 1: the fill is always 0 and ``ssm.z`` is the
        state after the last input), a diagonal layer with one input signal (R = 1) on the
        channel-first stack, and a short call (T + Mr ≤ WHOLE_CALL_MAX, T the export's chunk
        in stack steps). With S > 1 the map would depend on the fill: S tables, S× the file."""
        return (
            self.S == 1
            and step.ssm.kind == "diag"
            and step.ssm.R == 1
            and not self.bf
            and self.call_steps + step.ssm.Mr <= WHOLE_CALL_MAX
        )

    def whole_table(self, step, perm: list[int]) -> torch.Tensor:
        """float64 (H, T₀ + Mr, T₀ + Mr): the linear map of a call of exactly T₀ =
        ``call_steps`` steps from [u; z] (the inputs v_0 … v_{T₀−1} and the carried state z,
        its Mr rows in the order ``perm`` of the real basis) to [y; next z] (rows of next z
        in the same order):

            x_{−1} = z,   x_j = Ā x_{j−1} + b v_j,   y_j = c·x_j + D v_j,   next z = x_{T₀−1}

        — the recurrence of :mod:`liquid_stream.nn.chunked` (S = 1) run literally on unit
        inputs, in float64."""
        T0, H, Mr = self.call_steps, step.H, step.ssm.Mr
        A, b, c = step.ssm.A64.double(), step.ssm.b64.double()[0], step.ssm.c64.double()
        D = step.D.double()
        table = torch.zeros(H, T0 + Mr, T0 + Mr, dtype=torch.float64)
        X = torch.zeros(H, T0 + Mr, Mr, dtype=torch.float64)  # x as a map of the inputs
        X[:, T0 + torch.arange(Mr), torch.tensor(perm)] = 1.0
        for j in range(T0):
            X = torch.einsum("hmn,hin->him", A, X)
            X[:, j] += b
            table[:, j] = torch.einsum("him,hm->hi", X, c)
            table[:, j, j] += D
        table[:, T0:] = X[:, :, perm].transpose(1, 2)
        return table

    def whole_layer(self, pre: str, step, u: str, buf: str, full) -> str:
        """A call of exactly T₀ = ``call_steps`` steps as one batched MatMul,
        [y; next z] = W · [u; z] ``(H, T₀ + Mr, T₀ + Mr) @ (H, T₀ + Mr, B)`` with W =
        :meth:`whole_table` (the blocks' ``If`` on T = T₀ chose this branch, :meth:`stack`).
        The same recurrence in fewer, larger ops: a 1-s call of a vital-sign model is
        T₀ = 25, Mr = 16 (docs/serving.md §8). The next state is the chunked layer's, in its
        layout: ``ssm.buf`` the last input; ``ssm.z`` ``(H·Mc, 2, 1, B)`` rows (m, Re/Im)
        for :meth:`columns_layer`, else ``(B, 1, H·Mr)`` in the real basis [Re | Im]."""
        g, H, Mr = self.g, step.H, step.ssm.Mr
        T0, Mc = self.call_steps, Mr // 2
        if full is None:
            full = g.op("Concat", buf, u, axis=2)  # (H, B, 1 + T)
        self.set_state(pre + "ssm.buf", g.slice(full, -1, END, axis=2))
        if self.columns(step):
            z = self.state(pre + "ssm.z", [H * Mc, 2, 1, "batch"])
            z_cols = g.op("Reshape", z, g.const([H, Mr, -1]))
            perm = [ri * Mc + m for m in range(Mc) for ri in range(2)]
        else:
            z = self.state(pre + "ssm.z", ["batch", 1, H * Mr])
            z_cols = g.op("Transpose", g.op("Reshape", z, g.const([0, H, Mr])), perm=[1, 2, 0])
            perm = list(range(Mr))
        cols = g.op("Concat", g.op("Transpose", u, perm=[0, 2, 1]), z_cols, axis=1)
        out = g.op("MatMul", g.const(_f32(self.whole_table(step, perm))), cols)
        z_next = g.slice(out, T0, END, axis=1)  # (H, Mr, B)
        if self.columns(step):
            z_next = g.op("Reshape", z_next, g.const([H * Mc, 2, 1, -1]))
        else:
            z_next = g.op(
                "Reshape", g.op("Transpose", z_next, perm=[2, 0, 1]), g.const([0, 1, H * Mr])
            )
        self.set_state(pre + "ssm.z", z_next)
        return g.op("Transpose", g.slice(out, 0, T0, axis=1), perm=[0, 2, 1])  # (H, B, T₀)

    def if_stack(self, cond: str, then, otherwise) -> str:
        """An ONNX ``If`` of two versions of the blocks: each branch emits nodes and returns
        its activations; the states both set become outputs of the ``If`` (and are set from them),
        the values they cache are forgotten. States are declared once (:meth:`state`)."""
        g = self.g
        dtypes = {}

        def branch(fn, name: str):
            outer, cache, states = g.nodes, dict(self._cache), dict(self.state_out)
            g.nodes = []
            y = fn()
            dtypes.update({sp["name"]: np.dtype(sp["dtype"]) for sp in self.spec})
            changed = {k: v for k, v in self.state_out.items() if states.get(k) != v}
            nodes, g.nodes = g.nodes, outer
            self._cache, self.state_out = cache, states
            return nodes, y, changed

        branches = [branch(then, "whole"), branch(otherwise, "chunked")]
        names = list(branches[0][2])
        if set(names) != set(branches[1][2]):
            raise AssertionError("the stack's two branches set different states")
        graphs = []
        for (nodes, y, changed), name in zip(branches, ("whole", "chunked"), strict=True):
            values = [y] + [changed[k] for k in names]
            outs = [g.fresh(name) for _ in values]
            nodes = nodes + [
                onnx.helper.make_node("Identity", [v], [o])
                for v, o in zip(values, outs, strict=True)
            ]
            types = [DTYPES[g.float_dtype]] + [DTYPES[dtypes[k]] for k in names]
            infos = [
                onnx.helper.make_tensor_value_info(o, t, None)
                for o, t in zip(outs, types, strict=True)
            ]
            graphs.append(onnx.helper.make_graph(nodes, g.fresh(name), [], infos))
        outs = g.op("If", cond, n_out=1 + len(names), then_branch=graphs[0], else_branch=graphs[1])
        for k, o in zip(names, outs[1:], strict=True):
            self.set_state(k, o)
        return outs[0]

    def columns_layer(self, pre: str, step, sp: str, tab: dict[str, torch.Tensor]) -> str:
        """↔ :meth:`ChunkedSSM.block_inputs`, :meth:`ChunkedSSM.scan` and
        :meth:`ChunkedSSM.outputs` (+ D·u) for a diagonal Ā and 4–8 sub-blocks a call, in
        the *column layout*: every tensor of the layer has the batch as its last axis and
        the sub-blocks before it, ``(…, nb, B)``, so that

        - MatMul 1 is ℓᵀ = Gᵀ·spᵀ ``(H, R·Mr, nb·B)`` (rows (r, m, Re/Im));
        - the scan is the closed form Z'[k] = Σ_{k'≤k} λ^{S(k−k')} ℓ'[k'] over the n = nb + 1
          elements [z, ℓ_0, …, ℓ_{nb−1}] as one batched MatMul: per real mode pair
          (h, r, m), the (2n, 2n) real matrix of the complex products (rows and columns
          (Re/Im, k): blocks [[a, −b], [b, a]] with a + ib = λ^{S(k−k')}, zero for k' > k,
          sliced from an (n_max, n_max) table) times the ``(2n, B)`` values:
          (H·R·Mc, 2n, 2n) @ (H·R·Mc, 2n, B);
        - MatMul 2 is yᵀ = W₂ᵀ·[spᵀ; Z_prevᵀ] ``(H, S, nb·B)``;

        with no transpose of the (H·R·Mr·nb·B) block values: only the layer's input and
        output (H·S·R·nb·B and H·T·B values) are transposed, each as batched 2-D
        transposes or with whole B-rows contiguous. The ``closed_form_scan`` before it (git
        history) put B last for the scan's MatMul by two 6-axis transposes of the block
        values (the graph's ``ssm.z`` state in ``(B, 1, C)``): 52–56 % of a vital-sign
        model's call at batch 64 (bench/onnx_profile.py; docs/serving.md §8). ``ssm.z`` is
        here ``(H·R·Mc, 2, 1, batch)``: the column layout of the carried Z'[n_full]."""
        g, S, d = self.g, self.S, self.dims
        H, R, Mr = step.H, step.ssm.R, step.ssm.Mr
        Mc, SR, B = Mr // 2, S * R, d["B"]
        HRM, n_max = H * R * Mc, 2**self.levels  # n_max ≥ nb + 1

        def shape(*dims) -> str:  # int dims and the batch B, as a Reshape target
            parts = [g.const(list(x)) if isinstance(x, tuple) else x for x in dims]
            return g.op("Concat", *parts, axis=0)

        # spᵀ (H, S·R, nb·B) from sp (H, B·nb, S·R): (H, B, ·) → (H, ·, B), then nb ↔ S·R
        x = g.op("Transpose", g.op("Reshape", sp, shape((H,), B, (-1,))), perm=[0, 2, 1])
        x = g.op("Reshape", x, shape((H, -1, SR), B))  # (H, nb, S·R, B)
        spT = g.op("Reshape", g.op("Transpose", x, perm=[0, 2, 1, 3]), g.const([H, SR, -1]))

        # MatMul 1: the R inputs' G side by side, columns (r, m, Re/Im)
        G_w = torch.zeros(H, S, R, R, Mc, 2, dtype=torch.float64)  # rows (j, r)
        for r in range(R):
            G_w[:, :, r, r] = tab["G"][r].reshape(H, S, 2, Mc).transpose(2, 3)
        G_T = G_w.reshape(H, SR, R * Mr).transpose(1, 2)  # (H, R·Mr, S·R)
        ell = g.op("MatMul", g.const(_f32(G_T)), spT)  # (H, R·Mr, nb·B)
        ell = g.op("Reshape", ell, shape((HRM, 2, -1), B))  # (H·R·Mc, 2, nb, B)

        # the scan: [z, ℓ_0, …] (H·R·Mc, 2n, B), times the (2n, 2n) table of powers
        z = self.state(pre + "ssm.z", [HRM, 2, 1, "batch"])
        Zm = g.op("Reshape", g.op("Concat", z, ell, axis=2), shape((HRM, -1), B))
        p = power_table(diag_lambda(step), S, R, n_max).reshape(n_max, n_max, HRM)
        p = p.permute(2, 0, 1)  # (H·R·Mc, k, k')
        M = torch.zeros(HRM, 2, n_max, 2, n_max, dtype=torch.float64)
        M[:, 0, :, 0], M[:, 0, :, 1] = p.real, -p.imag
        M[:, 1, :, 0], M[:, 1, :, 1] = p.imag, p.real
        n = self.n_blocks_plus_1()
        n2 = g.op("Mul", n, g.const([2]))
        M_n = g.op(
            "Slice",
            g.const(_f32(M)),
            g.const([0, 0]),
            g.op("Concat", n, n, axis=0),
            g.const([2, 4]),
        )
        M_n = g.op("Reshape", M_n, g.op("Concat", g.const([HRM]), n2, n2, axis=0))
        out = g.op("Reshape", g.op("MatMul", M_n, Zm), shape((HRM, 2, -1), B))  # (·, 2, n, B)
        self.set_state(pre + "ssm.z", g.slice(out, d["n_full"], d["n_full_plus_1"], axis=2))
        prev = g.op("Reshape", g.slice(out, 0, -1, axis=2), g.const([H, R * Mr, -1]))

        # MatMul 2: [local Toeplitz (+D); E repeated over r] transposed
        W2 = torch.zeros(H, SR + R * Mr, S, dtype=torch.float64)
        W2[:, :SR] = tab["K_loc"].permute(1, 3, 0, 2).reshape(H, SR, S)  # rows (j, r)
        E = tab["E"].transpose(1, 2).reshape(H, 2, Mc, S).transpose(1, 2).reshape(H, Mr, S)
        W2[:, SR:] = E.repeat(1, R, 1)  # rows (r, m, Re/Im)
        yT = g.op("MatMul", g.const(_f32(W2.transpose(1, 2))), g.op("Concat", spT, prev, axis=1))
        y = g.op("Transpose", g.op("Reshape", yT, shape((H, S, -1), B)), perm=[0, 2, 1, 3])
        y = g.slice(g.op("Reshape", y, shape((H, -1), B)), d["fill"], d["fill_plus_T"], axis=1)
        return g.op("Transpose", y, perm=[0, 2, 1])  # (H, T, B) → (H, B, T)

    def scan_dense(self, pre: str, step, ell: str) -> str:
        """:meth:`scan` for a dense real Ā, in the layout ``(H, B, n, R·Mr)`` of ``ssm.z``:
        Hillis–Steele with a batched MatMul per channel and level."""
        g, S, d = self.g, self.S, self.dims
        H, R, Mr = step.H, step.ssm.R, step.ssm.Mr
        A = step.ssm.A64.double()
        z = self.state(pre + "ssm.z", [H, "batch", 1, R * Mr])
        ell_shape = g.op("Concat", g.const([H]), d["B"], g.const([-1, R * Mr]), axis=0)
        Zs = g.op("Concat", z, g.op("Reshape", ell, ell_shape), axis=2)
        for lvl in range(self.levels):
            sh = 2**lvl
            shifted = self.shift_blocks(Zs, sh, 2, (H, d["B"], sh, R * Mr))
            power = torch.linalg.matrix_power(A, S * sh)  # (H, Mr, Mr)
            Zs = g.op("Add", Zs, self.apply_power_dense(shifted, power, R))
        Z_prev = g.op("Reshape", g.slice(Zs, 0, -1, axis=2), g.const([H, -1, R * Mr]))
        self.set_state(pre + "ssm.z", g.slice(Zs, d["n_full"], d["n_full_plus_1"], axis=2))
        return Z_prev

    def more_than(self, k: int) -> str:
        """The bool scalar n > k, n = nb + 1 (built once per k)."""
        key = ("n>", k)
        if key not in self._cache:
            g = self.g
            more = g.op("Greater", self.n_blocks_plus_1(), g.const([k]))
            self._cache[key] = g.op("Squeeze", more, g.const([0]))
        return self._cache[key]

    def if_then(self, cond: str, then, otherwise: str) -> str:
        """``then()`` if ``cond`` else ``otherwise``: an ONNX ``If`` whose then-branch holds
        the nodes ``then`` emits (reading outer values; nothing it builds may be cached for
        use outside) and whose else-branch passes ``otherwise`` through."""
        g = self.g
        outer, g.nodes = g.nodes, []
        value = then()
        then_nodes, g.nodes = g.nodes, outer
        outs = [g.fresh("then"), g.fresh("else")]
        then_nodes.append(onnx.helper.make_node("Identity", [value], [outs[0]]))
        else_nodes = [onnx.helper.make_node("Identity", [otherwise], [outs[1]])]
        info = [onnx.helper.make_tensor_value_info(o, DTYPES[g.float_dtype], None) for o in outs]
        return g.op(
            "If",
            cond,
            then_branch=onnx.helper.make_graph(then_nodes, g.fresh("level"), [], [info[0]]),
            else_branch=onnx.helper.make_graph(else_nodes, g.fresh("skip"), [], [info[1]]),
        )

    def shift_blocks(self, Z: str, sh: int, axis: int, zeros: tuple) -> str:
        """Z[k − sh] along the sub-block ``axis`` (zeros of dims ``zeros`` for k < sh) ↔
        ``torch.cat([torch.zeros_like(Z[:, :d]), Z], 1)[:, :nb]`` in ChunkedSSM.scan."""
        ext_z = self.g.op("Concat", self.zeros(*zeros), Z, axis=axis)
        return self.g.slice(ext_z, 0, -sh, axis=axis)

    def apply_power_diag(self, z: str, p: torch.Tensor) -> str:
        """↔ :meth:`ChunkedSSM.apply_power` (``diag``): λⁿ z for ``z (…, H·R, 2, Mc)`` and
        ``p`` = λⁿ (H·R, 1, Mc): z·Pa + swap(z)·Pb with Pa = (Re λⁿ, Re λⁿ),
        Pb = (−Im λⁿ, Im λⁿ), swap exchanging the Re and Im halves (leading axes broadcast)."""
        g = self.g
        Pa = torch.cat([p.real, p.real], 1)  # (H·R, 2, Mc)
        Pb = torch.cat([-p.imag, p.imag], 1)
        swap = g.slice(z, -1, -END, axis=3, step=-1)
        return g.op("Add", g.op("Mul", z, g.const(_f32(Pa))), g.op("Mul", swap, g.const(_f32(Pb))))

    def apply_power_dense(self, z: str, power: torch.Tensor, R: int) -> str:
        """↔ :meth:`ChunkedSSM.apply_power` (``dense``): Āⁿ z for rows ``z (H, B, n, R·Mr)``,
        one MatMul per channel with the block-diagonal (over r) of ``power`` = Āⁿ transposed.
        """
        H, Mr = power.shape[0], power.shape[-1]
        eye_R = torch.eye(R, dtype=torch.float64)
        P_blk = torch.einsum("rs,hmn->hrmsn", eye_R, power).reshape(H, R * Mr, R * Mr)
        return self.g.op("MatMul", z, self.g.const(_f32(P_blk.transpose(1, 2))[:, None]))

    def outputs(self, step, sp: str, Z_prev: str, tab: dict[str, torch.Tensor]) -> str:
        """↔ :meth:`ChunkedSSM.outputs` and LiquidS4Step.forward's + D·u, in one MatMul
        ("MatMul 2"): [sp | Z_prev] @ [local Toeplitz (+D); E repeated over r]
        ``(H, B·nb, S)``; then the T new outputs, [q, q+T) of it, ``(H, B, T)``."""
        g, S, d = self.g, self.S, self.dims
        H, R, Mr = step.H, step.ssm.R, step.ssm.Mr
        W2 = torch.zeros(H, S * R + R * Mr, S, dtype=torch.float64)
        W2[:, : S * R] = tab["K_loc"].permute(1, 3, 0, 2).reshape(H, S * R, S)  # rows (j, r)
        W2[:, S * R :] = tab["E"].transpose(1, 2).repeat(1, R, 1)
        y = g.op("MatMul", g.op("Concat", sp, Z_prev, axis=2), g.const(_f32(W2)))
        y = g.op("Reshape", y, d["y_shape"])  # (H, B, nb·S)
        return g.slice(y, d["fill"], d["fill_plus_T"], axis=2)

    def pb_term(self, pre: str, step, corr: list[str]) -> str:
        """↔ :meth:`LiquidS4Step.pb_term`: w = Σ_p pb_coef[p] v_p, summed over the last L̃
        steps (the earlier L̃ − 1 values in ``w_buf``), ``(H, B, T)``."""
        g, L = self.g, step.L_liq
        mixed = None
        for k, v in enumerate(corr):
            term = g.op("Mul", v, g.const(_f32(step.pb_coef[k])[:, None, None]))
            mixed = term if mixed is None else g.op("Add", mixed, term)
        if L > 1:  # the window sum as L̃ shifted slices (the torch form is a conv1d)
            wbuf = self.state(pre + "w_buf", [step.H, "batch", L - 1])
            ext_w = g.op("Concat", wbuf, mixed, axis=2)  # (H, B, L̃−1+T)
            self.set_state(pre + "w_buf", g.slice(ext_w, -(L - 1), END, axis=2))
            mixed = g.slice(ext_w, 0, self.dims["T"], axis=2)
            for j in range(1, L):
                mixed = g.op("Add", mixed, g.slice(ext_w, j, self.t_plus(j), axis=2))
        return mixed

    def ltc_dims(self) -> dict[str, str]:
        """Shape arithmetic of the LTC layers' sub-blocks (built once, int64 (1,)): n_b =
        ⌈T/Q⌉, pad = n_b·Q − T, the pads of ``(B, T, H)`` that put ``pad`` steps after the
        chunk, the shapes ``(B, n_b, Q, H)`` and ``(B, −1, H)``, and (n_b − 1)·Q, where the
        last sub-block starts."""
        if "ltc" not in self._cache:
            g, d, Q, H = self.g, self.dims, self.ltc_Q, self.sm.blocks[0].ssm.H
            nb = g.op("Div", g.op("Add", d["T"], g.const([Q - 1])), g.const([Q]))
            pad = g.op("Sub", g.op("Mul", nb, g.const([Q])), d["T"])
            self._cache["ltc"] = {
                "nb": nb,
                "pads": g.op("Concat", g.const([0, 0, 0, 0]), pad, g.const([0]), axis=0),
                "blocks": g.op("Concat", d["B"], nb, g.const([Q, H]), axis=0),
                "flat": g.op("Concat", d["B"], g.const([-1, H]), axis=0),
                "last": g.op("Mul", g.op("Sub", nb, g.const([1])), g.const([Q])),
            }
        return self._cache["ltc"]

    def ltc_layer(self, i: int, step, u: str) -> str:
        """↔ the ``ltc`` branch of :meth:`LiquidS4Step.forward` (``ltc.ltc_scan``):
        x_t = a_t x_{t−1} + b_t, a_t = Ā + B̃ tanh(u_t), b_t = B̄ u_t, y_t = s·Re(C x_t) + D u_t
        on batch-first ``u (B, T, H)`` (a channel-first stack is transposed to it and back).

        The graph runs in the coordinate z = x / B̄ (per channel and mode), where the input
        term is u itself: z_t = a_t z_{t−1} + u_t, y_t = Re(w z_t) + D u_t with w = s C B̄.
        That saves three of ~28 elementwise passes (measured 1.1× at 10 ms chunks, 1.16× at
        100 ms); the carried state stays x (z = x·B̄⁻¹ on the way in, x = B̄ z on the way out).
        A mode with |B̄| < :data:`LTC_MIN_B` gets B̄ = LTC_MIN_B (its input term is then
        1e-20·u instead of ~0).

        A blocked scan (the decomposition of :func:`liquid_stream.nn.ltc._scan_tf`). The chunk
        is cut into n_b sub-blocks of Q steps, with ``pad`` < Q steps of u = 0 after it, and
        every value of a position q is a tensor ``(B, n_b, M, H)`` (M the modes), its Re and
        Im parts apart: the fewest elementwise passes, and every broadcast of a ``(M, H)``
        table is over leading axes.

        1. One unrolled loop over the Q positions advances all sub-blocks at once: a_q from
           u_q (4 ops), the local state Z_q = a_q Z_{q−1} + u_q from zero and the cumulative
           transition P_q = a_q P_{q−1} (7 + 6 ops).
        2. An ONNX ``Scan`` over the sub-blocks gives the state entering each,
           z_in[k+1] = P_{Q−1}[k] z_in[k] + Z_{Q−1}[k], z_in[0] from the carried state.
        3. Position by position, y_q = Σ_M Re(w Z_q) + Re(P_q c), c = w z_in (8 ops).
        4. The next state: a second ``Scan`` runs the last sub-block's real steps (T − (n_b −
           1)·Q ≤ Q of them) from its z_in. The pad steps (a = Ā, b = 0) are not the identity,
           so the state at the end of the last sub-block is not the next state.

        Products and sums of numbers of modulus < 1 only, and the fixed scalings B̄⁻¹ and B̄:
        nothing grows along the stream."""
        if self.ltc_op == "fused":
            return self.ltc_layer_fused(i, step, u)
        g, Q, H, pre = self.g, self.ltc_Q, step.H, f"block{i}."
        sys = {k: getattr(step, f"ltc_{k}").double() for k in ("A_bar", "B_liq", "B_bar", "C")}
        M = sys["A_bar"].shape[1]
        cplx = {k: torch.view_as_complex(v.contiguous()) for k, v in sys.items()}  # (H, M)
        Bb = cplx["B_bar"]
        Bb = torch.where(Bb.abs() < LTC_MIN_B, torch.full_like(Bb, LTC_MIN_B), Bb)
        tables = {
            "A": cplx["A_bar"],
            "Bl": cplx["B_liq"],
            "w": step.ltc_scale * cplx["C"] * Bb,
            "B": Bb,
            "iB": 1.0 / Bb,
        }
        x_state = self.state(pre + "ltc.x", ["batch", 2, M, H])
        if not self.bf:
            u = g.op("Transpose", u, perm=[1, 2, 0])  # (H, B, T) → (B, T, H)
        dl = self.ltc_dims()
        # the (M, H) tables, each one initializer, shared by the loop and the Scan bodies
        t = {}
        for name, z in tables.items():
            t[name + "_re"] = g.const(np.ascontiguousarray(z.real.T.numpy().astype(np.float32)))
            t[name + "_im"] = g.const(np.ascontiguousarray(z.imag.T.numpy().astype(np.float32)))

        def a_of(gr, v):  # a = Ā + B̃ v: Re and Im, each (…, M, H)
            return (
                gr.op("Add", gr.op("Mul", v, t["Bl_re"]), t["A_re"]),
                gr.op("Add", gr.op("Mul", v, t["Bl_im"]), t["A_im"]),
            )

        def mul(gr, pr, pi, xr, xi):  # p·x, complex, Re and Im
            re = gr.op("Sub", gr.op("Mul", pr, xr), gr.op("Mul", pi, xi))
            return re, gr.op("Add", gr.op("Mul", pr, xi), gr.op("Mul", pi, xr))

        def step_z(gr, ar, ai, zr, zi, uu):  # a·z + u (u real; zi None: Im z = 0)
            if zi is None:
                return gr.op("Add", gr.op("Mul", ar, zr), uu), gr.op("Mul", ai, zr)
            re, im = mul(gr, ar, ai, zr, zi)
            return gr.op("Add", re, uu), im

        # 1. u (B, T, H) → (B, n_b, Q, H) → per position (B, n_b, 1, H)
        ub = g.op("Reshape", g.op("Pad", u, dl["pads"]), dl["blocks"])
        vb = g.op("Tanh", ub)
        split = g.const([1] * Q)
        us = g.op("Split", ub, split, axis=2, n_out=Q) if Q > 1 else [ub]
        vs = g.op("Split", vb, split, axis=2, n_out=Q) if Q > 1 else [vb]
        Z, P = [(us[0], None)], [a_of(g, vs[0])]  # per position: (Re, Im), (B, n_b, M, H)
        for q in range(1, Q):
            ar, ai = a_of(g, vs[q])
            Z.append(step_z(g, ar, ai, *Z[-1], us[q]))
            P.append(mul(g, ar, ai, *P[-1]))
        z_last = Z[-1] if Z[-1][1] is not None else (Z[-1][0], g.op("Mul", Z[-1][0], g.const(0.0)))

        # 2. the states entering the sub-blocks: Scan over axis 1 of (B, n_b, M, H)
        x_re, x_im = (
            g.op("Squeeze", s, g.const([1]))
            for s in g.op("Split", x_state, g.const([1, 1]), axis=1, n_out=2)
        )  # (B, M, H)
        z_re, z_im = mul(g, t["iB_re"], t["iB_im"], x_re, x_im)

        def across(gr, sr, si, pr, pi, zr, zi):  # (z_in, P, Z) of one sub-block → next z_in
            re, im = mul(gr, pr, pi, sr, si)
            return [gr.op("Add", re, zr), gr.op("Add", im, zi), sr, si]

        body = g.subgraph(
            f"{pre}ltc.blocks", ["s_re", "s_im", "p_re", "p_im", "z_re", "z_im"], across
        )
        _, _, in_re, in_im = g.op(
            "Scan",
            z_re,
            z_im,
            *P[-1],
            *z_last,
            n_out=4,
            body=body,
            num_scan_inputs=4,
            scan_input_axes=[1] * 4,
            scan_output_axes=[1, 1],
        )  # (B, n_b, M, H)

        # 3. y_q = Σ_M [Re w Re Z_q − Im w Im Z_q + Re P_q Re c − Im P_q Im c]
        c_re, c_im = mul(g, t["w_re"], t["w_im"], in_re, in_im)
        ys = []
        for (zr, zi), (pr, pi) in zip(Z, P, strict=True):
            own = g.op("Mul", zr, t["w_re"])
            if zi is not None:
                own = g.op("Sub", own, g.op("Mul", zi, t["w_im"]))
            carried = g.op("Sub", g.op("Mul", pr, c_re), g.op("Mul", pi, c_im))
            ys.append(g.op("ReduceSum", g.op("Add", own, carried), g.const([2]), keepdims=1))
        y = g.op("Concat", *ys, axis=2) if Q > 1 else ys[0]  # (B, n_b, Q, H)
        y = g.slice(g.op("Reshape", y, dl["flat"]), 0, self.dims["T"], axis=1)  # (B, T, H)
        y = g.op("Add", y, g.op("Mul", u, g.const(_f32(step.D))))

        # 4. the next state: the last sub-block's real steps, one by one, from its z_in
        def one_step(gr, sr, si, u_t):  # u_t (B, H)
            u_t = gr.op("Unsqueeze", u_t, g.const([1]))  # (B, 1, H)
            return list(step_z(gr, *a_of(gr, gr.op("Tanh", u_t)), sr, si, u_t))

        last_in = [
            g.op("Squeeze", g.slice(v, -1, END, axis=1), g.const([1])) for v in (in_re, in_im)
        ]
        tail = g.slice(u, dl["last"], END, axis=1)  # (B, T − (n_b − 1)·Q, H)
        body = g.subgraph(f"{pre}ltc.tail", ["s_re", "s_im", "u"], one_step)
        n_re, n_im = g.op(
            "Scan", *last_in, tail, n_out=2, body=body, num_scan_inputs=1, scan_input_axes=[1]
        )
        n_re, n_im = mul(g, t["B_re"], t["B_im"], n_re, n_im)  # x = B̄ z
        x_next = g.op(
            "Concat",
            g.op("Unsqueeze", n_re, g.const([1])),
            g.op("Unsqueeze", n_im, g.const([1])),
            axis=1,
        )  # (B, 2, M, H)
        self.set_state(pre + "ltc.x", x_next)
        return y if self.bf else g.op("Transpose", y, perm=[2, 0, 1])

    def ltc_layer_fused(self, i: int, step, u: str) -> str:
        """:meth:`ltc_layer` as one ``ai.liquid_stream::LtcScan`` node (:mod:`liquid_stream.
        ltc_ort`: the fused kernel of training) between a Tanh and y + D·u: the same
        recurrence, state and layout, run in x itself (no coordinate change)."""
        g, pre = self.g, f"block{i}."
        sys = {k: getattr(step, f"ltc_{k}").double() for k in ("A_bar", "B_liq", "B_bar", "C")}
        sys["C"] = sys["C"] * step.ltc_scale  # C' = s·C
        M = sys["A_bar"].shape[1]
        coef = torch.stack([sys[k] for k in ("A_bar", "B_liq", "B_bar", "C")])  # (4, H, M, 2)
        x_state = self.state(pre + "ltc.x", ["batch", 2, M, step.H])
        if not self.bf:
            u = g.op("Transpose", u, perm=[1, 2, 0])  # (H, B, T) → (B, T, H)
        y, x_next = g.op(
            LTC_OP, u, g.op("Tanh", u), x_state, g.const(_f32(coef)), n_out=2, domain=LTC_DOMAIN
        )
        self.set_state(pre + "ltc.x", x_next)
        y = g.op("Add", y, g.op("Mul", u, g.const(_f32(step.D))))
        return y if self.bf else g.op("Transpose", y, perm=[2, 0, 1])

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

    def decoder(self, logits: str) -> str:
        """↔ the decoder part of :meth:`StreamingModel._stack`: per-step decoder on
        ``logits (B, T, d)``, last / sliding window / running pool."""
        g, sm = self.g, self.sm
        if sm.decoder == "last":
            return logits
        dout, T = sm.d_output, self.dims["T"]
        x64 = g.op("Cast", logits, to=onnx.TensorProto.DOUBLE)
        one = onnx.helper.make_tensor("one", onnx.TensorProto.DOUBLE, [1], [1.0])
        ones = g.op(
            "ConstantOfShape", g.op("Concat", g.const([1]), T, g.const([1]), axis=0), value=one
        )
        count_in = self.state("decoder.count", ["batch", 1], np.float64)
        sum_in = self.state("decoder.sum", ["batch", dout], np.float64)
        count = g.op(
            "Add", g.op("Unsqueeze", count_in, g.const([1])), g.op("CumSum", ones, g.const(1))
        )
        if sm.decoder == "pool":
            delta, denom = x64, count
        else:
            # history in float32: the logits are float32, so it holds them exactly
            hist = self.state("decoder.history", ["batch", sm.window, dout], np.float32)
            ext = g.op("Concat", hist, logits, axis=1)
            leaving = g.op("Cast", g.slice(ext, 0, T, axis=1), to=onnx.TensorProto.DOUBLE)
            delta = g.op("Sub", x64, leaving)
            denom = g.op("Min", count, g.const(np.array(float(sm.window)), dtype=np.float64))
            self.set_state("decoder.history", g.slice(ext, -sm.window, END, axis=1))
        total = g.op(
            "Add", g.op("Unsqueeze", sum_in, g.const([1])), g.op("CumSum", delta, g.const(1))
        )
        self.set_state(
            "decoder.sum", g.op("Squeeze", g.slice(total, -1, END, axis=1), g.const([1]))
        )
        self.set_state(
            "decoder.count", g.op("Squeeze", g.slice(count, -1, END, axis=1), g.const([1]))
        )
        return g.op("Cast", g.op("Div", total, denom), to=onnx.TensorProto.FLOAT)

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

    def logmel(self, seg: str) -> str:
        """:class:`~liquid_stream.nn.frontend.LogMel` frames of ``seg (B, (F−1)·R + W)``
        → channel-first features ``(n_mels, B, F)``: the DFT as a stride-R Conv."""
        g, cfg = self.g, self.sm.frontend.cfg
        nf = cfg.n_freq
        # the front end's own float64 tables: basis (2·nf, 1, W), mel (nf, M), μ, σ (M,)
        basis, mel, mean, std = self.sm.frontend.f.tables(torch.float64, torch.device("cpu"))
        spec = g.op(
            "Conv",
            g.op("Unsqueeze", seg, g.const([1])),
            g.const(_f32(basis)),
            strides=[cfg.hop],
        )  # (B, 2·nf, F)
        re, im = g.slice(spec, 0, nf, axis=1), g.slice(spec, nf, 2 * nf, axis=1)
        power = g.op("Add", g.op("Mul", re, re), g.op("Mul", im, im))  # (B, nf, F)
        energy = g.op("MatMul", g.const(_f32(mel.T)), power)  # (B, M, F)
        z = g.op("Log", g.op("Add", energy, g.const(float(cfg.log_floor))))
        z = g.op("Div", g.op("Sub", z, g.const(_f32(mean)[:, None])), g.const(_f32(std)[:, None]))
        if cfg.cmn_s is not None:
            z = self.logmel_cmn(z)
        return g.op("Transpose", z, perm=[1, 0, 2])

    def logmel_cmn(self, z: str) -> str:
        """↔ :meth:`LogMelStep.cmn`: the running per-band mean taken away from the chunk's
        frames ``z (B, M, F)`` (F ≥ 1: inside the stack's ``If``, so a chunk without a frame
        passes m and w through), the EMA along the frames in closed form
        (:meth:`ema_chunk`) and w_k = 1 − (1 − w_{−1})·β^{k+1}."""
        g, cfg = self.g, self.sm.frontend.cfg
        beta = float(cfg.cmn_beta)
        m0 = self.state("frontend.cmn", ["batch", cfg.n_mels])
        w0 = self.state("frontend.cmn_weight", [1])
        F_ = g.dim(z, 2)
        max_frames = self.max_chunk // cfg.hop + 1
        k1 = np.arange(1, max_frames + 1, dtype=np.float64)
        decay = g.slice(g.const((beta**k1)[None, :], name="cmn_decay"), 0, F_, axis=1)
        w_seq = g.op("Sub", g.const(1.0), g.op("Mul", g.op("Sub", g.const(1.0), w0), decay))
        m_seq, m = self.ema_chunk(z, m0, self.ema_tables(F_, beta, max_frames, tag="cmn"))
        self.set_state("frontend.cmn", m)
        self.set_state(
            "frontend.cmn_weight", g.op("Reshape", g.slice(w_seq, -1, END, axis=1), g.const([1]))
        )
        return g.op("Sub", z, g.op("Div", m_seq, w_seq))  # (B, M, F)

    def logmel_states(self) -> dict[str, str]:
        W = self.sm.frontend.win
        return {"buffer": self.state("frontend.buffer", ["batch", W - 1])}

    def logmel_segment(self, x: str, own: dict[str, str], phase: str, n: str) -> str:
        """↔ :meth:`LogMelStep.forward`: the samples of the chunk's F frames,
        ``(B, (F−1)·R + W)``, from the buffer of the last W − 1 samples and ``x (B, T, 1)``."""
        g, R, W = self.g, self.sm.frontend.hop, self.sm.frontend.win
        ext = g.op("Concat", own["buffer"], g.op("Squeeze", x, g.const([2])), axis=1)
        self.set_state("frontend.buffer", g.slice(ext, -(W - 1), END, axis=1))
        start = g.op("Sub", g.const([R - 1]), phase)
        stop = g.op("Add", start, g.op("Add", g.op("Mul", n, g.const([R])), g.const([W - R])))
        return g.slice(ext, start, stop, axis=1)

    def scalenorm_states(self) -> dict[str, str]:
        C = self.sm.frontend.cfg.channels
        own = {k: self.state(f"frontend.{k}", ["batch", C]) for k in ("origin", "mean", "var")}
        own["weight"] = self.state("frontend.weight", [1])
        own["acc"] = self.state("frontend.acc", ["batch", C])
        if self.sm.frontend.cfg.slope:
            own["last"] = self.state("frontend.last", ["batch", C])
            own["slope"] = self.state("frontend.slope", ["batch", C])
        return own

    SCALENORM_BLOCK = 32  # Q: samples per block of the chunk's closed-form EMA

    def ema_tables(
        self, T: str, beta: float | None = None, max_len: int | None = None, tag: str = "scalenorm"
    ) -> dict[str, str]:
        """The constants and chunk-dependent slices of :meth:`ema_chunk` (built once per
        graph, shared by the running mean and variance): Kᵀ, Gᵀ, the powers of β, and the
        padding of the chunk's ``T`` steps to whole blocks. β and the longest chunk default
        to the scale normaliser's (per sample); the log-mel front end's running mean passes
        its own (per frame)."""
        g = self.g
        beta = float(self.sm.frontend.cfg.beta if beta is None else beta)
        Q = self.SCALENORM_BLOCK
        nb_max = -(-(self.max_chunk if max_len is None else max_len) // Q)
        i = np.arange(Q, dtype=np.float64)
        lag = i[:, None] - i[None, :]
        K = np.where(lag >= 0, (1 - beta) * beta ** np.clip(lag, 0, None), 0.0)  # (Q, Q)
        k = np.arange(nb_max, dtype=np.float64)
        lagk = k[:, None] - k[None, :]
        G = np.where(lagk >= 0, beta ** (Q * np.clip(lagk, 0, None)), 0.0)  # (nb, nb)
        nb = g.op("Div", g.op("Add", T, g.const([Q - 1])), g.const([Q]))  # (1,) int64
        pad = g.op("Sub", g.op("Mul", nb, g.const([Q])), T)
        zeros = g.const([0, 0, 0, 0, 0], dtype=np.int64)
        Gt = g.const(G.T.copy(), name=f"{tag}_Gt")
        return {
            "Kt": g.const(K.T.copy(), name=f"{tag}_Kt"),
            "Gt": g.slice(g.slice(Gt, 0, nb, axis=0), 0, nb, axis=1),  # (n, n)
            "Pk": g.slice(
                g.const((beta ** (Q * (k + 1)))[None, :], name=f"{tag}_Pk"), 0, nb, axis=1
            ),  # (1, n): β^{Q(k+1)}
            "Pq": g.const(beta ** (i + 1), name=f"{tag}_Pq"),  # (Q,)
            "pads": g.op("Concat", zeros, pad, axis=0),  # (0,0,0, 0,0,pad): the last axis
            "T": T,
        }

    def ema_chunk(self, u: str, s0: str, tab: dict[str, str]) -> tuple[str, str]:
        """↔ :func:`liquid_stream.nn.ema.ema` with a carried start, along the last axis:
        s_t = β·s_{t−1} + (1−β)·u_t over the chunk ``u (B, C, T)`` from ``s0 (B, C)`` →
        (s ``(B, C, T)``, s_{T−1} ``(B, C)``), in closed form without a loop over steps
        (``tab``: :meth:`ema_tables`). The chunk is cut into n = ⌈T/Q⌉ blocks of Q steps
        (zeros after the end: causal, they change nothing before them). Within a block
        s̃ = u·Kᵀ, K[i, j] = (1−β)·β^{i−j} (i ≥ j); the state after block k,
        c_k = β^Q·c_{k−1} + s̃_k[Q−1] with c_{−1} = s0, is c = s̃[…, Q−1]·Gᵀ + β^{Q(k+1)}·s0
        with G[k, j] = β^{Q(k−j)} (k ≥ j); then s[k, i] = s̃[k, i] + β^{i+1}·c_{k−1}. Every
        coefficient is a power of β ≤ 1: no growing exponential, and each sum runs over the
        steps it describes. Time is the last axis, so each product is one GEMM over all
        rows (B·C·n), and every broadcast runs along T or Q, not along C (measured: a
        (B, T, C) layout with C = 2 innermost spent most of the scale-norm front end's
        time in 4000 tiny batched products and 2-float broadcast spans)."""
        g, Q = self.g, self.SCALENORM_BLOCK
        ub = g.op("Pad", u, tab["pads"])  # (B, C, n·Q)
        ub = g.op("Reshape", ub, g.const([0, 0, -1, Q], dtype=np.int64))  # (B, C, n, Q)
        local = g.op("MatMul", ub, tab["Kt"])  # (B, C, n, Q)
        ends = g.op("Squeeze", g.slice(local, Q - 1, Q, axis=3), g.const([3]))  # (B, C, n)
        s0u = g.op("Unsqueeze", s0, g.const([2]))  # (B, C, 1)
        c = g.op("Add", g.op("MatMul", ends, tab["Gt"]), g.op("Mul", s0u, tab["Pk"]))
        c_in = g.op("Concat", s0u, g.slice(c, 0, -1, axis=2), axis=2)  # entering each block
        full = g.op("Add", local, g.op("Mul", g.op("Unsqueeze", c_in, g.const([3])), tab["Pq"]))
        seq = g.slice(
            g.op("Reshape", full, g.const([0, 0, -1], dtype=np.int64)), 0, tab["T"], axis=2
        )
        last = g.op("Squeeze", g.slice(seq, -1, END, axis=2), g.const([2]))
        return seq, last

    def scalenorm_centred(self, x: str, origin: str) -> str:
        """↔ :func:`liquid_stream.nn.scalenorm.centred`: ``x (B, C, T)``, ``origin (B, C)`` →
        u = x − x₀, or with ``log`` u = Log(Min(Max(Max(x, φ)/Max(x₀, φ), 1e−30), 1e30))
        (the ratio first, then the log: precision for x ≈ x₀ in float32; an overflow of the
        ratio to inf, or its underflow to 0, lands on the clamp)."""
        g = self.g
        o = g.op("Unsqueeze", origin, g.const([2]))  # (B, C, 1)
        if not self.sm.frontend.cfg.log:
            return g.op("Sub", x, o)
        phi = g.const(float(LOG_FLOOR))
        ratio = g.op("Div", g.op("Max", x, phi), g.op("Max", o, phi))
        lo, hi = (g.const(float(r)) for r in LOG_RATIO)
        return g.op("Log", g.op("Min", g.op("Max", ratio, lo), hi))

    def scalenorm_frames(self, x: str, own: dict[str, str], phase: str, n: str) -> str:
        """↔ :meth:`ScaleNormStep.forward` (:mod:`liquid_stream.nn.scalenorm`): the centred
        input (:meth:`scalenorm_centred`), the running mean and variance of the whole chunk
        in closed form (:meth:`ema_chunk`: two small matrix products per EMA instead of a
        loop over samples), the weight w_t = 1 − (1 − w_{−1})·β^{t+1}, each channel divided
        by its own running RMS or (``shared_scale``) by channel 0's, then the frames' means
        from a cumulative sum (:meth:`frame_means`) → channel-first features ``(C, B, F)``;
        with ``slope`` also the frames' mean |z_t − z_{t−1}| → ``(2C, B, F)``. Computed
        channel-first, ``(B, C, T)``: time innermost (:meth:`ema_chunk`)."""
        g, c = self.g, self.sm.frontend.cfg
        beta = float(c.beta)
        x = g.op("Transpose", x, perm=[0, 2, 1])  # (B, C, T)
        first = g.op("Squeeze", g.slice(x, 0, 1, axis=2), g.const([2]))  # (B, C)
        started = g.op("Greater", own["weight"], g.const([0.0]))  # (1,)
        origin = g.op("Where", started, own["origin"], first)  # the stream's first sample
        self.set_state("frontend.origin", origin)
        u = self.scalenorm_centred(x, origin)  # (B, C, T)
        T = g.dim(x, 2)
        t1 = np.arange(1, self.max_chunk + 1, dtype=np.float64)
        decay = g.slice(g.const((beta**t1)[None, :], name="scalenorm_decay"), 0, T, axis=1)
        w_seq = g.op(
            "Sub", g.const(1.0), g.op("Mul", g.op("Sub", g.const(1.0), own["weight"]), decay)
        )  # (1, T)
        tab = self.ema_tables(T)
        m_seq, m = self.ema_chunk(u, own["mean"], tab)
        d = g.op("Sub", u, g.op("Div", m_seq, w_seq))
        v_seq, v = self.ema_chunk(g.op("Mul", d, d), own["var"], tab)
        if c.shared_scale:  # channel 0's variance for every channel: (B, 1, T)
            v_seq = g.slice(v_seq, 0, 1, axis=1)
        sd = g.op("Sqrt", g.op("Add", g.op("Div", v_seq, w_seq), g.const(float(c.eps))))
        zs = g.op("Clip", g.op("Div", d, sd), g.const(-float(c.clip)), g.const(float(c.clip)))
        w = g.op("Reshape", g.slice(w_seq, -1, END, axis=1), g.const([1]))
        self.set_state("frontend.mean", m)
        self.set_state("frontend.var", v)
        self.set_state("frontend.weight", w)
        frames, acc = self.frame_means(zs, own["acc"], phase, n)  # (B, C, F), (B, C)
        self.set_state("frontend.acc", acc)
        if c.slope:  # |z_t − z_{t−1}|, z_{t−1} from the state across chunks
            before = g.op("Concat", g.op("Unsqueeze", own["last"], g.const([2])), zs, axis=2)
            dz = g.op("Abs", g.op("Sub", zs, g.slice(before, 0, -1, axis=2)))  # (B, C, T)
            self.set_state(
                "frontend.last", g.op("Squeeze", g.slice(zs, -1, END, axis=2), g.const([2]))
            )
            slopes, sacc = self.frame_means(dz, own["slope"], phase, n)
            self.set_state("frontend.slope", sacc)
            frames = g.op("Concat", frames, slopes, axis=1)  # (B, 2C, F): f's, then g's
        return g.op("Transpose", frames, perm=[1, 0, 2])

    def frame_means(self, zs: str, acc0: str, phase: str, n: str) -> tuple[str, str]:
        """The frames' means of ``zs (B, C, T)`` from a cumulative sum, the frame in progress
        carried in ``acc0 (B, C)`` (its sum so far) → (frames ``(B, C, F)``, the new sum).
        Frame i ends at chunk sample e_i = R − p − 1 + i·R; S_t = acc + Σ_{s≤t} z_s."""
        g, R = self.g, self.sm.frontend.hop
        cum = g.op("CumSum", zs, g.const(np.int64(2)))  # (B, C, T)
        S = g.op("Add", cum, g.op("Unsqueeze", acc0, g.const([2])))
        e0 = g.op("Squeeze", g.op("Sub", g.const([R - 1]), phase), g.const([0]))
        e_end = g.op("Add", e0, g.op("Squeeze", g.op("Mul", n, g.const([R])), g.const([0])))
        ends = g.op("Range", e0, e_end, g.const(np.int64(R)))  # (F,)
        S_e = g.op("Gather", S, ends, axis=2)  # (B, C, F)
        zero = g.op("Mul", g.slice(S, 0, 1, axis=2), g.const(0.0))  # (B, C, 1)
        prev = g.op("Concat", zero, S_e, axis=2)  # (B, C, F+1): S before each frame
        frames = g.op("Div", g.op("Sub", S_e, g.slice(prev, 0, -1, axis=2)), g.const(float(R)))
        acc = g.op("Sub", g.slice(S, -1, END, axis=2), g.slice(prev, -1, END, axis=2))
        return frames, g.op("Squeeze", acc, g.const([2]))

    def frontend_stack(self, x: str, B: str, T: str) -> str:
        """↔ :meth:`StreamingModel._step` with a front end: raw samples ``x (B, T, 1)`` →
        front-end frames (log-mel or scale-normalised) → the stack at the frame rate →
        per-sample held outputs
        ``(B, T, d_output)`` (:mod:`liquid_stream.nn.frontend`).

        A chunk that completes no frame must leave the stack's state untouched, and the
        stack's graph cannot run on zero steps, so the stack sits in an ``If`` on F > 0
        whose else branch passes its states through."""
        g, sm = self.g, self.sm
        fe = sm.frontend
        R, dout = fe.hop, sm.d_output
        logmel = isinstance(fe, LogMelStep)
        own = self.logmel_states() if logmel else self.scalenorm_states()
        phase = self.state("frontend.phase", [1], np.int64)
        held = self.state("frontend.held", ["batch", dout])
        mu = np.asarray(self.input_mean, dtype=np.float64).reshape(-1)
        sd = np.asarray(self.input_std, dtype=np.float64).reshape(-1)
        if not (np.all(mu == 0.0) and np.all(sd == 1.0)):  # standardise the raw samples
            x = g.op(
                "Div",
                g.op("Sub", x, g.const(_f32(torch.from_numpy(mu)))),
                g.const(_f32(torch.from_numpy(sd))),
            )
        p_T = g.op("Add", phase, T)
        n = g.op("Div", p_T, g.const([R]))  # frames completed by this chunk
        self.set_state("frontend.phase", g.op("Sub", p_T, g.op("Mul", n, g.const([R]))))
        if logmel:  # the frames' samples now, the log-mel inside the If (F > 0 only)
            seg = self.logmel_segment(x, own, phase, n)
        else:  # the normaliser's state moves with every sample: its frames outside the If
            feats = self.scalenorm_frames(x, own, phase, n)
        # then-branch: the stack on the F > 0 new frames
        outer, g.nodes = g.nodes, []
        first_state = len(self.spec)
        y_frames = self.stack(self.logmel(seg) if logmel else feats, B, n)
        stack_states = self.spec[first_state:]
        then_nodes, g.nodes = g.nodes, outer
        types = [onnx.TensorProto.FLOAT] + [DTYPES[np.dtype(s["dtype"])] for s in stack_states]
        values = [y_frames] + [self.state_out[s["name"]] for s in stack_states]
        then_out = [g.fresh("then") for _ in values]
        then_nodes += [
            onnx.helper.make_node("Identity", [v], [o])
            for v, o in zip(values, then_out, strict=True)
        ]
        else_out = [g.fresh("else") for _ in values]
        zero = onnx.helper.make_tensor("zero", onnx.TensorProto.FLOAT, [1], [0.0])
        else_nodes = [
            onnx.helper.make_node(
                "ConstantOfShape",
                [g.op("Concat", B, g.const([0]), g.const([dout]), axis=0)],
                [else_out[0]],
                value=zero,
            )
        ] + [
            onnx.helper.make_node("Identity", [f"state.{s['name']}"], [o])
            for s, o in zip(stack_states, else_out[1:], strict=True)
        ]

        def branch(name: str, nodes: list, outs: list[str]) -> onnx.GraphProto:
            infos = [
                onnx.helper.make_tensor_value_info(o, t, None)
                for o, t in zip(outs, types, strict=True)
            ]
            return onnx.helper.make_graph(nodes, name, [], infos)

        cond = g.op("Squeeze", g.op("Greater", n, g.const([0])), g.const([0]))
        outs = g.op(
            "If",
            cond,
            n_out=len(values),
            then_branch=branch("frames", then_nodes, then_out),
            else_branch=branch("no_frame", else_nodes, else_out),
        )
        for s, o in zip(stack_states, outs[1:], strict=True):
            self.set_state(s["name"], o)
        # hold: sample t of the chunk gets the last frame complete at t (or ``held``)
        ext_y = g.op("Concat", g.op("Unsqueeze", held, g.const([1])), outs[0], axis=1)
        t1 = g.op(
            "Range",
            g.op("Squeeze", g.op("Add", phase, g.const([1])), g.const([0])),
            g.op("Squeeze", g.op("Add", p_T, g.const([1])), g.const([0])),
            g.const(np.int64(1)),
        )
        y = g.op("Gather", ext_y, g.op("Div", t1, g.const(np.int64(R))), axis=1)
        self.set_state(
            "frontend.held", g.op("Squeeze", g.slice(ext_y, -1, END, axis=1), g.const([1]))
        )
        return y

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
