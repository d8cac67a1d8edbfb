"""Recover a diagonal Liquid-S4 checkpoint from an exported ONNX graph (its tables).

    python scripts/checkpoint_from_onnx.py liquid_stream/models/kws-sc10.onnx OUT.pt

Why: a shipped graph whose training checkpoint is lost (``kws-sc10`` v3b, ``runs/ship3``;
``vitals-ppg-hr``, ``runs/vit3``: not on this machine) cannot be re-exported through a
newer exporter (the whole-call MatMul of docs/design.md §8). The graph holds every
weight, so the checkpoint is rebuilt from it. Supported: what the exporter writes for a
causal S4D model (``mode="diag"``, bilinear, PB or no liquid term, L̃ = 1, one input
signal) on the channel-first stack, any sub-block S (S ≠ 2M when S > 1), with a front
end whose tables follow from the config (log-mel, scale-norm). The graph's tables are
read in the order the exporter emits them, per block (two of them stored transposed by
some exporter versions: both are read):

    LayerNorm γ, β                             (H, 1, 1) Mul, Add
    G[j] = Ā^{S−1−j} b, b = [Re B̄ | Im B̄]       (H, S, 2M) MatMul
    scan tables: powers of λ                    (H, 2, M) Mul or a Slice'd table (skipped)
    [K_locᵀ; Eᵀ], K_loc[0] = c·b + D, E[i] = c Ā^{i+1}, c = [2 Re C | −2 Im C]
                                                (H, S + 2M, S) MatMul
    pb_coef = 2 Re Σ_m C_m B̄_m²                 (H, 1, 1) Mul      (PB only: a check)
    GLU linear: W_a, b_a, W_g, b_g              (H, H) MatMul, (H, 1) Add × 2

and the encoder (H, d) / (H, 1) before the blocks, the final LayerNorm and the head after
(with the model's output scale a and shift s folded in: a·(W h + b) + s, unfolded here).
λ = Ā comes from scan level 0 when S = 1, else from E[1] = E[0]·Ā; c from E[0]. The
continuous parameters follow from the bilinear map: ΔΛ = 2(λ − 1)/(λ + 1),
ΔB = B̄ (1 − ΔΛ/2), with Δ kept at the geometric middle of the config's [dt_min, dt_max]
(the graph fixes only the products ΔΛ and ΔB, which are all the model and its ``rate``
option use). The recovered model is checked against the graph it came from: the script
streams random input through both and prints the largest difference relative to max|y|.
An ensemble graph (export/ensemble.py: members side by side, names prefixed ``m<i>.``)
gives one checkpoint per member (``--member I``, or every member as ``OUT-m<i>.pt``); the
check is then of the members' mean (weighted by the graph's ``ensemble.weights`` when it
has them) against the ensemble graph.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np
import onnx
import torch
from onnx import numpy_helper

from liquid_stream.nn.checkpoint import save_checkpoint
from liquid_stream.nn.model import LiquidS4Model
from liquid_stream.runtime.meta import ModelMeta


def tables_in_order(model: onnx.ModelProto, prefix: str = "") -> list[tuple[str, np.ndarray]]:
    """(consumer op, value) of every float initializer of two or more dimensions (the
    weight tables, not shapes or scalars) whose name starts with ``prefix`` (an ensemble
    member's), in first-use order (subgraphs walked depth-first, as the exporter emitted
    them)."""
    inits = {
        i.name: numpy_helper.to_array(i)
        for i in model.graph.initializer
        if i.name.startswith(prefix)
    }
    inits = {k: v for k, v in inits.items() if v.dtype.kind == "f"}
    seen: dict[str, tuple[str, np.ndarray]] = {}

    def walk(g: onnx.GraphProto) -> None:
        for n in g.node:
            for x in n.input:
                if x in inits and inits[x].ndim >= 2 and x not in seen:
                    seen[x] = (n.op_type, inits[x])
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    walk(a.g)

    walk(model.graph)
    # a newer exporter's whole-call tables (H, T₀ + 2M, T₀ + 2M) follow from the rest
    whole = [
        op == "MatMul" and v.ndim == 3 and v.shape[1] == v.shape[2] > 1 for op, v in seen.values()
    ]
    return [t for t, w in zip(seen.values(), whole, strict=True) if not w]


class Reader:
    """Takes the tables one by one, checking each one's consumer op and shape."""

    def __init__(self, tables: list[tuple[str, np.ndarray]]):
        self.tables, self.i = tables, 0

    def take(self, op: str, shape: tuple[int, ...]) -> np.ndarray:
        got_op, value = self.tables[self.i]
        if got_op != op or value.shape != shape:
            raise ValueError(
                f"table {self.i}: expected {op} {shape}, found {got_op} {value.shape}: "
                "not a graph this script reads"
            )
        self.i += 1
        return value.astype(np.float64)

    def take_either(self, op: str, shape: tuple[int, int, int]) -> np.ndarray:
        """A table stored as ``shape`` (H, m, n) or transposed (H, n, m) (the exporter's
        layouts differ between versions), returned as ``shape``."""
        H, m, n = shape
        got_op, value = self.tables[self.i]
        if got_op == op and value.shape == (H, n, m) and m != n:
            self.i += 1
            return value.astype(np.float64).transpose(0, 2, 1)
        return self.take(op, shape)

    def skip_while(self, op: str, shape: tuple[int, ...] | None) -> None:
        """Skip tables of ``op`` and ``shape`` (None: any of three or more dimensions)."""
        while self.i < len(self.tables):
            got_op, value = self.tables[self.i]
            fits = value.ndim >= 3 if shape is None else value.shape == shape
            if got_op != op or not fits:
                return
            self.i += 1


def _basis_and_lambda(G: np.ndarray, out: np.ndarray, S: int, M: int, block: int):
    """For S > 1: the tables in the [Re | Im] basis and λ = Ā from E[1] = E[0]·Ā, i.e.
    e₁ = e₀·conj(λ) per mode for e = E_re + i·E_im. The basis is [Re | Im] or interleaved
    (mode, Re/Im) by exporter version: the one in which G[S−2] = λ·G[S−1] holds."""
    best = None
    for interleaved in (False, True):
        g, o = G, out
        if interleaved:  # (…, M, 2) → (…, 2, M)
            g = G.reshape(*G.shape[:2], M, 2).swapaxes(-1, -2).reshape(G.shape)
            z = out[:, S:].reshape(out.shape[0], M, 2, S).swapaxes(1, 2).reshape(-1, 2 * M, S)
            o = np.concatenate([out[:, :S], z], 1)
        e0 = o[:, S:, 0][:, :M] + 1j * o[:, S:, 0][:, M:]
        e1 = o[:, S:, 1][:, :M] + 1j * o[:, S:, 1][:, M:]
        lam = np.where(e0 == 0, 0.5, np.conj(e1 / np.where(e0 == 0, 1, e0)))  # c = 0: any λ
        gc = g[:, :, :M] + 1j * g[:, :, M:]
        err = np.abs(gc[:, S - 2] - lam * gc[:, S - 1]).max() / np.abs(gc).max()
        if best is None or err < best[0]:
            best = (err, g, o, lam)
    err, g, o, lam = best
    if err > 1e-3:
        raise ValueError(f"block {block}: G and E do not share one transition ({err:.1e})")
    return g, o, lam


def members(path: Path) -> int:
    """How many members the graph at ``path`` averages (0: not an ensemble)."""
    return int(
        _ensemble({p.key: p.value for p in onnx.load(str(path)).metadata_props}).get("members", 0)
    )


def _ensemble(props: dict[str, str]) -> dict:
    """The graph's ``ensemble`` metadata ({} when it is not an ensemble)."""
    return json.loads(props.get("ensemble") or "null") or {}


def recover(path: Path, member: int | None = None) -> tuple[LiquidS4Model, dict]:
    """The model and meta of the graph at ``path``; of an ensemble graph, member
    ``member``'s (its config from ``ensemble.member_model_configs`` when the members differ,
    else member 0's, the graph's ``model_config``)."""
    graph = onnx.load(str(path))
    props = {p.key: p.value for p in graph.metadata_props}
    ens = _ensemble(props)
    k = int(ens.get("members", 0))
    if k and (member is None or not 0 <= member < k):
        raise ValueError(f"{path} is an ensemble of {k} members: recover one (member 0 … {k - 1})")
    if not k and member is not None:
        raise ValueError(f"{path} is not an ensemble (no member {member})")
    cfg = json.loads(props["model_config"])
    if "member_model_configs" in ens:  # members of different architectures
        cfg = ens["member_model_configs"][member]
    if cfg["mode"] != "diag" or cfg.get("disc") != "bilinear" or cfg.get("bidirectional"):
        raise ValueError("only causal bilinear S4D graphs are supported")
    if cfg.get("liquid") not in (None, "pb") or cfg.get("liquid_len", 1) != 1:
        raise ValueError("only PB (liquid_len 1) or no liquid term is supported")
    S, H, M = int(props.get("sub_block", 0)), cfg["d_model"], cfg["d_state"] // 2
    if S < 1 or S & (S - 1) or (S > 1 and S == 2 * M):
        raise ValueError(f"sub-block {S} with {2 * M} states: not a layout this script reads")
    model = LiquidS4Model(**cfg).double().eval()
    sd = {k: v.clone() for k, v in model.state_dict().items()}
    rd = Reader(tables_in_order(graph, f"m{member}." if k else ""))
    # front end (fixed: its tables follow from the config), then the encoder
    n_feat = model.encoder.weight.shape[1]
    while rd.tables[rd.i][0] != "MatMul" or rd.tables[rd.i][1].shape != (H, n_feat):
        rd.i += 1
    sd["encoder.weight"] = torch.tensor(rd.take("MatMul", (H, n_feat)))
    sd["encoder.bias"] = torch.tensor(rd.take("Add", (H, 1))[:, 0])
    dt = math.sqrt(cfg["dt_min"] * cfg["dt_max"])
    for i in range(cfg["n_layers"]):
        p = f"blocks.{i}."
        sd[p + "norm.norm.weight"] = torch.tensor(rd.take("Mul", (H, 1, 1)).ravel())
        sd[p + "norm.norm.bias"] = torch.tensor(rd.take("Add", (H, 1, 1)).ravel())
        G = rd.take_either("MatMul", (H, S, 2 * M))  # G[j] = Ā^{S−1−j} b
        if S == 1:  # scan level 0 is λ^S = λ itself
            re2, im2 = rd.take("Mul", (H, 2, M)), rd.take("Mul", (H, 2, M))
            lam = re2[:, 0] + 1j * im2[:, 1]
        rd.skip_while("Mul", (H, 2, M))  # the (higher) scan levels: powers of λ
        rd.skip_while("Slice", None)  # a closed-form scan's table of powers
        out = rd.take_either("MatMul", (H, S + 2 * M, S))  # [K_locᵀ; Eᵀ]: (s, Z) → y
        if S > 1:  # the real basis: [Re | Im], or (mode, Re/Im) interleaved; λ from E
            G, out, lam = _basis_and_lambda(G, out, S, M, i)
        b = G[:, S - 1]
        B_bar = b[:, :M] + 1j * b[:, M:]
        E = out[:, S:, 0]  # E[0] = c Ā in the real basis
        # E = c·[[Re λ, −Im λ], [Im λ, Re λ]]: per mode, solve for (c_re, c_im)
        det = lam.real**2 + lam.imag**2
        c_re = (E[:, :M] * lam.real - E[:, M:] * lam.imag) / det
        c_im = (E[:, :M] * lam.imag + E[:, M:] * lam.real) / det
        C = c_re / 2 - 1j * c_im / 2
        D = out[:, 0, 0] - (c_re * b[:, :M] + c_im * b[:, M:]).sum(-1)
        dtL = 2 * (lam - 1) / (lam + 1)
        B = B_bar * (1 - dtL / 2) / dt
        Lam = dtL / dt
        if (Lam.real >= 0).any():
            raise ValueError(f"block {i}: an unstable mode (|λ| ≥ 1)")
        k = p + "ssm."
        sd[k + "D"] = torch.tensor(D)
        sd[k + "kernel.log_dt"] = torch.full((H,), math.log(dt), dtype=torch.float64)
        sd[k + "kernel.Lambda_re_log"] = torch.tensor(np.log(-Lam.real))
        sd[k + "kernel.Lambda_im"] = torch.tensor(Lam.imag)
        sd[k + "kernel.B"] = torch.view_as_real(torch.tensor(B))
        sd[k + "kernel.C"] = torch.view_as_real(torch.tensor(C))[None]
        if cfg.get("liquid") == "pb":
            pb = rd.take("Mul", (H, 1, 1)).ravel()
            mine = 2 * (C * B_bar**2).sum(-1).real
            err = np.abs(pb - mine).max() / np.abs(pb).max()
            if err > 1e-4:
                raise ValueError(f"block {i}: the PB coefficient does not follow ({err:.1e})")
        wa, ba = rd.take("MatMul", (H, H)), rd.take("Add", (H, 1))[:, 0]
        wg, bg = rd.take("MatMul", (H, H)), rd.take("Add", (H, 1))[:, 0]
        sd[p + "out.weight"] = torch.tensor(np.concatenate([wa, wg]))
        sd[p + "out.bias"] = torch.tensor(np.concatenate([ba, bg]))
    sd["final_norm.norm.weight"] = torch.tensor(rd.take("Mul", (H, 1, 1)).ravel())
    sd["final_norm.norm.bias"] = torch.tensor(rd.take("Add", (H, 1, 1)).ravel())
    d_out = cfg["d_output"]
    # the graph's head has the output scale and shift folded in: a·(W h + b) + s
    a, shift = cfg.get("output_scale", 1.0), cfg.get("output_shift", 0.0)
    sd["head.weight"] = torch.tensor(rd.take("MatMul", (d_out, H)) / a)
    sd["head.bias"] = torch.tensor((rd.take("Add", (d_out, 1))[:, 0] - shift) / a)
    model.load_state_dict(sd)
    model = model.float().eval()
    meta = ModelMeta.from_onnx_props(props).to_dict()
    if k:  # a member's checkpoint: the graph's joint state layout is not its own
        meta.pop("ensemble", None)
        meta.pop("state_spec", None)
        meta["model_config"] = cfg
    return model, meta


def compare(model: LiquidS4Model, path: Path, meta: dict) -> float:
    """Largest |Δy| / max|y| between the recovered torch forward and the graph it came from
    (:func:`~liquid_stream.export.pipeline.verify_onnx`: 16 000 samples of random input
    streamed through the graph in random chunks)."""
    from liquid_stream.export.pipeline import verify_onnx

    report = verify_onnx(model, path, meta=meta)
    return report.rel


def compare_members(models: list[LiquidS4Model], path: Path, meta: dict) -> float:
    """The same for an ensemble graph: the mean of the recovered members' outputs
    (posteriors for classifiers; weighted by the graph's ``ensemble.weights`` when it has
    them) against the graph's (:func:`~liquid_stream.export.ensemble.verify_ensemble`)."""
    from liquid_stream.export.ensemble import verify_ensemble

    props = {p.key: p.value for p in onnx.load(str(path)).metadata_props}
    weights = _ensemble(props).get("weights")
    return verify_ensemble(models, path, meta=meta, weights=weights).rel


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("onnx", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--member", type=int, default=None, help="of an ensemble: this member only")
    args = ap.parse_args()
    k = members(args.onnx)
    which = [args.member] if args.member is not None or not k else list(range(k))
    got = [recover(args.onnx, m) for m in which]
    if k and len(got) == k:
        rel = compare_members([m for m, _ in got], args.onnx, got[0][1])
    elif k:  # one member alone does not reproduce the ensemble graph: nothing to compare
        rel = 0.0
        print(f"member {args.member} of {k}: not compared (the graph is the members' mean)")
    else:
        rel = compare(got[0][0], args.onnx, got[0][1])
    print(f"recovered {args.onnx}: torch forward vs the graph, relative {rel:.2e}")
    if rel > 1e-4:
        sys.exit("the recovered model does not reproduce the graph (contract 1e-4)")
    for m, (model, meta) in zip(which, got, strict=True):
        out = args.out if len(got) == 1 else args.out.with_name(f"{args.out.stem}-m{m}.pt")
        save_checkpoint(out, model, meta)
        print(f"wrote {out}")


if __name__ == "__main__":
    main()
