"""Streaming latency and real-time factor of the Speech-Commands paper model at 16 kHz.

    python bench/stream.py                 # N = 7 and 64, chunks 1/16/160/1600, 1 and 2 threads
    python bench/stream.py --quick         # fewer repetitions
    python bench/stream.py --liquid ltc    # the same model with the exact LTC recurrence (diag)
    python bench/stream.py --states 7 --chunks 160 1600 --frontends raw logmel \
        --onnx liquid_stream/models/kws-sc10.onnx     # log-mel beside raw, 10 / 100 ms chunks

Three ways to run the same causal model on a live 16 kHz stream, chunk by chunk:
  onnx   the exported step-wise graph in onnxruntime (state carried between calls);
  torch  the torch step form (StreamingModel), same algorithm;
  naive  re-running the convolutional model over the last 1 s of audio every chunk.
Latency is per chunk (p50/p95); RTF = median processing time / audio time of a chunk.
The machine is noisy (±50% run to run): configurations are interleaved over several
rounds and medians reported. Weights are random (timing does not depend on them).

Front ends (``--frontends``): ``raw`` is the paper model on raw samples (the stack steps
16000 times a second); ``logmel`` is the same 6×128 PB stack behind the log-mel front end
(``frontend: {kind: logmel}``: 25 ms / 10 ms frames, so the stack steps 100 times a second)
with a 0.1 s window decoder of 10 frames. Both take raw 16 kHz samples in any chunk size;
"/ raw" is a row's ONNX RTF over the raw model's at the same N, chunk and threads. ``--onnx
FILE`` adds an exported model (e.g. a trained log-mel keyword spotter) timed the same way,
ONNX only; chunks above the graph's ``max_chunk`` are fed in max_chunk pieces by
OnnxStreamer (as the apps do).
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from liquid_stream import LiquidS4Model, OnnxStreamer
from liquid_stream.export.pipeline import export_model

ROOT = Path(__file__).resolve().parents[1]

SR = 16000


def paper_model(N: int, liquid: str = "pb", frontend: str = "raw", mode: str | None = None):
    """Speech Commands, paper settings (6×128, PB p=2), causal, window decoder of 0.1 s;
    ``liquid="ltc"`` swaps in the exact LTC recurrence (S4D state, the only mode it has);
    ``frontend="logmel"`` puts the log-mel front end before the same stack (the decoder
    window is then 10 frames = 0.1 s)."""
    torch.manual_seed(0)
    mode = mode or ("diag" if liquid == "ltc" else "dplr")
    logmel = frontend == "logmel"
    return LiquidS4Model(
        1,
        35,
        d_model=128,
        n_layers=6,
        d_state=N,
        mode=mode,
        liquid=liquid,
        liquid_order=2,
        norm="batch",
        decoder="window",
        decoder_window=10 if logmel else 1600,
        dt_min=1e-3,
        dt_max=0.2,
        frontend={"kind": "logmel"} if logmel else None,
    ).eval()


def time_calls(fn, chunks: list[np.ndarray]) -> list[float]:
    out = []
    for c in chunks:
        t = time.perf_counter()
        fn(c)
        out.append(time.perf_counter() - t)
    return out


def run_onnx(path: Path, chunk: int, n_calls: int, threads: int) -> list[float]:
    s = OnnxStreamer(path, threads=threads, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).standard_normal((n_calls + 10) * chunk).astype(np.float32)
    chunks = [x[i * chunk : (i + 1) * chunk, None] for i in range(n_calls + 10)]
    return time_calls(s.process, chunks)[10:]


def run_torch(sm, chunk: int, n_calls: int, threads: int) -> list[float]:
    torch.set_num_threads(threads)
    state = sm.init_state(1)
    x = torch.randn(1, (n_calls + 3) * chunk, 1)

    def step(c):
        nonlocal state
        with torch.no_grad():
            _, state = sm(c, state)

    chunks = [x[:, i * chunk : (i + 1) * chunk] for i in range(n_calls + 3)]
    return time_calls(step, chunks)[3:]


def run_naive(model, chunk: int, n_calls: int, threads: int) -> list[float]:
    torch.set_num_threads(threads)
    x = torch.randn(1, SR, 1)

    def step(_):
        with torch.no_grad():
            model(x)

    return time_calls(step, [None] * (n_calls + 1))[1:]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--states", type=int, nargs="+", default=[7, 64])
    ap.add_argument("--chunks", type=int, nargs="+", default=[1, 16, 160, 1600])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--liquid", default="pb", choices=["pb", "ltc"])
    ap.add_argument(
        "--frontends",
        nargs="+",
        default=["raw"],
        choices=["raw", "logmel"],
        help="paper models to build: on raw samples and/or behind log-mel",
    )
    ap.add_argument(
        "--onnx",
        nargs="*",
        default=[],
        metavar="FILE",
        help="exported models to time as well (ONNX only)",
    )
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = ap.parse_args()
    if args.quick:
        args.rounds = 1
    command = "python " + shlex.join(["bench/stream.py", *sys.argv[1:]])
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp())
    # configurations: (front end label, N) → torch model (None: a given ONNX file) and graphs
    configs: dict[tuple[str, str], dict] = {}
    for fe in args.frontends:
        for N in args.states:
            model = paper_model(N, args.liquid, fe)
            graphs = {}
            for chunk in args.chunks:
                path = tmp / f"{fe}_n{N}_c{chunk}.onnx"
                graphs[chunk] = (path, export_model(model, path, chunk=chunk))
            configs[(fe, str(N))] = {"model": model, "sm": model.streaming(), "graphs": graphs}
    for f in args.onnx:
        meta = onnx_meta(f)
        info = {"nodes": meta["nodes"], "sub_block": int(meta.get("sub_block", 0))}
        graphs = {chunk: (Path(f), info) for chunk in args.chunks}
        configs[(Path(f).name, str(meta["d_state"]))] = {"model": None, "graphs": graphs}
    rows = []
    for (fe, N), cfg in configs.items():
        samples: dict[tuple, list[float]] = {}
        for _ in range(args.rounds):
            for chunk in args.chunks:
                audio = 0.5 if chunk >= 160 else (0.1 if chunk >= 16 else 0.02)
                n = max(5, int(audio * SR / chunk))
                for th in args.threads:
                    path, _ = cfg["graphs"][chunk]
                    n_t = max(3, min(n, 60))
                    lat = {"onnx": run_onnx(path, chunk, n, th)}
                    if cfg["model"] is not None:
                        lat["torch"] = run_torch(cfg["sm"], chunk, n_t, th)
                        lat["naive"] = run_naive(cfg["model"], chunk, 2, th)
                    for method, t in lat.items():
                        samples.setdefault((chunk, th, method), []).extend(t)
        for (chunk, th, method), lat in sorted(samples.items()):
            p50, p95 = statistics.median(lat), float(np.percentile(lat, 95))
            info = cfg["graphs"][chunk][1]
            rows.append(
                {
                    "frontend": fe,
                    "N": N,
                    "chunk": chunk,
                    "threads": th,
                    "method": method,
                    "p50_ms": 1e3 * p50,
                    "p95_ms": 1e3 * p95,
                    "rtf": p50 * SR / chunk,
                    "nodes": info["nodes"],
                    "sub_block": info["sub_block"],
                }
            )

    by = {(r["frontend"], r["N"], r["chunk"], r["threads"], r["method"]): r for r in rows}
    print(f"\n`{command}`\n")
    print(
        "| front end | N | chunk | threads | onnx p50 / p95 ms | onnx RTF | / raw | torch RTF "
        "| naive RTF | naive / onnx |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for fe, N in configs:
        for chunk in args.chunks:
            for th in args.threads:
                o = by[(fe, N, chunk, th, "onnx")]
                t, n = by.get((fe, N, chunk, th, "torch")), by.get((fe, N, chunk, th, "naive"))
                raw = by.get(("raw", N, chunk, th, "onnx"))
                vs_raw = f"{o['rtf'] / raw['rtf']:.3f}" if raw and fe != "raw" else "–"
                print(
                    f"| {fe} | {N} | {chunk} | {th} | {o['p50_ms']:.3f} / {o['p95_ms']:.3f} | "
                    f"{o['rtf']:.4f} | {vs_raw} | {t['rtf']:.4f} | {n['rtf']:.1f} | "
                    f"{n['rtf'] / o['rtf']:.0f}× |"
                    if t is not None
                    else f"| {fe} | {N} | {chunk} | {th} | {o['p50_ms']:.3f} / "
                    f"{o['p95_ms']:.3f} | {o['rtf']:.4f} | {vs_raw} | – | – | – |"
                )
    name = "stream" if args.liquid == "pb" else f"stream-{args.liquid}"
    if args.frontends != ["raw"] or args.onnx:
        name += "-frontends"
    (out_dir / f"{name}.json").write_text(
        json.dumps({"command": command, "rows": rows}, indent=1) + "\n"
    )
    plot(rows, list(configs), args, out_dir / f"{name}.png")
    print(f"\nwrote {out_dir / f'{name}.json'} and {out_dir / f'{name}.png'}")


def onnx_meta(path: str) -> dict:
    """d_state (from the model config) and node count of an exported model."""
    import onnx

    m = onnx.load(path)
    meta = {p.key: p.value for p in m.metadata_props}
    meta["d_state"] = json.loads(meta["model_config"])["d_state"]
    meta["nodes"] = len(m.graph.node)
    return meta


def plot(rows, configs, args, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(configs), figsize=(5 * len(configs), 4), squeeze=False)
    for ax, (fe, N) in zip(axes[0], configs, strict=True):
        for method, style in (("onnx", "-o"), ("torch", "-s"), ("naive", ":x")):
            for th in args.threads:
                pts = sorted(
                    (r["chunk"], r["rtf"])
                    for r in rows
                    if (r["frontend"], r["N"], r["method"], r["threads"]) == (fe, N, method, th)
                )
                if pts:
                    ax.plot(*zip(*pts, strict=True), style, label=f"{method}, {th} thr")
        ax.axhline(1.0, color="k", lw=0.8)
        title = (
            f"6×128 Liquid-S4 ({args.liquid.upper()}), {fe}, N={N}"
            if fe in ("raw", "logmel")
            else f"{fe} (N={N})"
        )
        ax.set(
            xscale="log",
            yscale="log",
            xlabel="chunk (samples at 16 kHz)",
            ylabel="real-time factor",
            title=title,
        )
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
