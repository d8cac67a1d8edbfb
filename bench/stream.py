"""Streaming latency and real-time factor of the Speech-Commands paper model at 16 kHz.

    python bench/stream.py                 # N = 7 and 64, chunks 1/16/160/1600, 1 and 2 threads
    python bench/stream.py --quick         # fewer repetitions
    python bench/stream.py --liquid ltc    # the same model with the exact LTC recurrence (diag)

Three ways to run the same causal model on a live 16 kHz stream, chunk by chunk:
  onnx   the exported step-wise graph in onnxruntime (state carried between calls);
  torch  the torch step form (StreamingModel), same algorithm;
  naive  re-running the convolutional model over the last 1 s of audio every chunk.
Latency is per chunk (p50/p95); RTF = median processing time / audio time of a chunk.
The machine is noisy (±50% run to run): configurations are interleaved over several
rounds and medians reported. Weights are random (timing does not depend on them).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from liquid_stream import LiquidS4Model, OnnxStreamer  # noqa: E402
from liquid_stream.export.pipeline import export_model  # noqa: E402

SR = 16000


def paper_model(N: int, liquid: str = "pb") -> LiquidS4Model:
    """Speech Commands, paper settings (6×128, PB p=2), causal, window decoder of 0.1 s;
    ``liquid="ltc"`` swaps in the exact LTC recurrence (S4D state, the only mode it has)."""
    torch.manual_seed(0)
    mode = "diag" if liquid == "ltc" else "dplr"
    return LiquidS4Model(
        1, 35, d_model=128, n_layers=6, d_state=N, mode=mode, liquid=liquid, liquid_order=2,
        norm="batch", decoder="window", decoder_window=1600, dt_min=1e-3, dt_max=0.2,
    ).eval()  # fmt: skip


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
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = ap.parse_args()
    if args.quick:
        args.rounds = 1
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp())
    rows = []
    for N in args.states:
        model = paper_model(N, args.liquid)
        sm = model.streaming()
        graphs = {}
        for chunk in args.chunks:
            info = export_model(model, tmp / f"n{N}_c{chunk}.onnx", chunk=chunk)
            graphs[chunk] = (tmp / f"n{N}_c{chunk}.onnx", info)
        samples: dict[tuple, list[float]] = {}
        for _ in range(args.rounds):
            for chunk in args.chunks:
                audio = 0.5 if chunk >= 160 else (0.1 if chunk >= 16 else 0.02)
                n = max(5, int(audio * SR / chunk))
                for th in args.threads:
                    path, _ = graphs[chunk]
                    n_t = max(3, min(n, 60))
                    for method, lat in (
                        ("onnx", run_onnx(path, chunk, n, th)),
                        ("torch", run_torch(sm, chunk, n_t, th)),
                        ("naive", run_naive(model, chunk, 2, th)),
                    ):
                        samples.setdefault((chunk, th, method), []).extend(lat)
        for (chunk, th, method), lat in sorted(samples.items()):
            p50, p95 = statistics.median(lat), float(np.percentile(lat, 95))
            rows.append({
                "N": N, "chunk": chunk, "threads": th, "method": method,
                "p50_ms": 1e3 * p50, "p95_ms": 1e3 * p95, "rtf": p50 * SR / chunk,
                "nodes": graphs[chunk][1]["nodes"], "sub_block": graphs[chunk][1]["sub_block"],
            })  # fmt: skip

    print("\n| N | chunk | threads | onnx p50 / p95 ms | onnx RTF | torch RTF | naive RTF "
          "| naive / onnx |")
    print("|---|---|---|---|---|---|---|---|")
    by = {(r["N"], r["chunk"], r["threads"], r["method"]): r for r in rows}
    for N in args.states:
        for chunk in args.chunks:
            for th in args.threads:
                o, t, n = (by[(N, chunk, th, m)] for m in ("onnx", "torch", "naive"))
                ratio = n["rtf"] / o["rtf"]
                print(
                    f"| {N} | {chunk} | {th} | {o['p50_ms']:.3f} / {o['p95_ms']:.3f} | "
                    f"{o['rtf']:.3f} | {t['rtf']:.3f} | {n['rtf']:.1f} | {ratio:.0f}× |"
                )
    name = "stream" if args.liquid == "pb" else f"stream-{args.liquid}"
    (out_dir / f"{name}.json").write_text(json.dumps(rows, indent=1))
    plot(rows, args, out_dir / f"{name}.png")
    print(f"\nwrote {out_dir / f'{name}.json'} and {out_dir / f'{name}.png'}")


def plot(rows, args, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(args.states), figsize=(5 * len(args.states), 4), squeeze=False)
    for ax, N in zip(axes[0], args.states, strict=True):
        for method, style in (("onnx", "-o"), ("torch", "-s"), ("naive", ":x")):
            for th in args.threads:
                pts = sorted(
                    (r["chunk"], r["rtf"])
                    for r in rows
                    if r["N"] == N and r["method"] == method and r["threads"] == th
                )
                ax.plot(*zip(*pts, strict=True), style, label=f"{method}, {th} thr")
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set(xscale="log", yscale="log", xlabel="chunk (samples at 16 kHz)",
               ylabel="real-time factor",
               title=f"6×128 Liquid-S4 ({args.liquid.upper()}), N={N}")  # fmt: skip
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
