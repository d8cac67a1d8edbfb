"""The front ends' graphs: log-mel (↔ :class:`~liquid_stream.nn.frontend.LogMelStep`) and
scale-norm (↔ :class:`~liquid_stream.nn.scalenorm.ScaleNormStep`), and the stack behind
them (``frontend_stack``)."""

from __future__ import annotations

import numpy as np
import onnx
import torch

from liquid_stream.nn.frontend import LogMelStep
from liquid_stream.nn.scalenorm import LOG_FLOOR, LOG_RATIO

from .emit_common import END, _f32
from .graph import DTYPES


class FrontendEmitter:
    """The methods of :class:`~.to_onnx._Emitter` that emit a front end."""

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
