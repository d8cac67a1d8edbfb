"""The chunked SSM layer's graph, step by step with :class:`~liquid_stream.nn.layer.LiquidS4Step`
and :class:`~liquid_stream.nn.chunked.ChunkedSSM` (the table in :mod:`.to_onnx`)."""

from __future__ import annotations

import numpy as np
import onnx
import torch

from liquid_stream.nn.chunked import chunk_tables

from .emit_common import (
    CLOSED_FORM_MAX_BLOCKS,
    END,
    MATMUL_SCAN_MIN_BLOCKS,
    WHOLE_CALL_MAX,
    _f32,
    diag_lambda,
    power_table,
)
from .graph import DTYPES


class SsmEmitter:
    """The methods of :class:`~.to_onnx._Emitter` that emit a chunked (S4 / S4D, PB / KB) layer."""

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
