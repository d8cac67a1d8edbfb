"""Real-time factor of the exact LTC layer in ONNX, next to PB, on a live 16 kHz stream.

    python bench/ltc_stream.py                       # 10 / 100 ms chunks, 1 and 2 threads
    python bench/ltc_stream.py --before 5167c90      # + the LTC graph of an older commit
    python bench/ltc_stream.py --no-fused            # without the custom-op graph

The paper Speech Commands model (6×128, N = 7, raw 16 kHz samples, bench/stream.py's
``paper_model``) exported three ways and streamed through onnxruntime chunk by chunk:
``pb`` (the paper's PB liquid term, chunked convolution, the baseline), ``ltc`` (the
literal input-dependent transition x_t = (Ā + B̃ tanh u_t) x_{t−1} + B̄ u_t, this tree's
blocked scan in standard ops), ``ltc-fused`` (the same model with one
``ai.liquid_stream::LtcScan`` custom op a layer, ``--ltc-op fused``; skipped with a note when
its library cannot be built here) and, with ``--before REV``, ``ltc@REV``: the same model
through the exporter (export/to_onnx.py) at git revision REV (the rest from this tree).
Configurations are interleaved over rounds (the machine is noisy); medians, min and max
of the per-chunk times; RTF = median time / audio time of a chunk.
"""

from __future__ import annotations

import argparse
import importlib.util
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

from stream import SR, paper_model  # noqa: E402

from liquid_stream import OnnxStreamer  # noqa: E402
from liquid_stream.export import pipeline  # noqa: E402
from liquid_stream.export.pipeline import export_model  # noqa: E402
from liquid_stream.runtime import ltc_ort  # noqa: E402


def exporter_at(rev: str):
    """``build_onnx`` of export/to_onnx.py at git revision ``rev`` (the rest of the export
    pipeline from this tree)."""
    src = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{rev}:export/to_onnx.py"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    path = Path(tempfile.mkdtemp()) / "to_onnx_before.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("liquid_stream.export.to_onnx_before", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.build_onnx


def export(kind: str, chunk: int, out: Path, before=None) -> Path:
    model = paper_model(7, "pb" if kind == "pb" else "ltc")
    path = out / f"{kind}-{chunk}.onnx"
    if kind.startswith("ltc@"):
        current = pipeline.build_onnx
        pipeline.build_onnx = before
        try:
            export_model(model, path, chunk=chunk)
        finally:
            pipeline.build_onnx = current
    else:
        export_model(model, path, chunk=chunk, ltc_op="fused" if kind == "ltc-fused" else "graph")
    return path


def time_stream(path: Path, chunk: int, threads: int, seconds: float) -> list[float]:
    s = OnnxStreamer(path, threads=threads)
    x = (np.random.default_rng(0).standard_normal(SR) * 0.3).astype(np.float32)
    s.process(x[:chunk])  # warm-up
    out = []
    for k in range(max(3, int(seconds * SR / chunk))):
        c = x[(k * chunk) % (SR - chunk + 1) :][:chunk]
        t = time.perf_counter()
        s.process(c)
        out.append(time.perf_counter() - t)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--chunks", type=int, nargs="+", default=[160, 1600])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=0.5, help="audio per configuration a round")
    ap.add_argument("--before", metavar="REV", help="also the LTC graph of this git revision")
    ap.add_argument("--no-fused", action="store_true", help="without the ltc-fused graph")
    args = ap.parse_args()
    command = "python " + shlex.join(["bench/ltc_stream.py", *sys.argv[1:]])
    kinds = ["pb", "ltc"]
    if not args.no_fused:
        try:
            ltc_ort.library_path()
            kinds.append("ltc-fused")
        except ltc_ort.LtcOpUnavailable as e:
            print(f"NOTE: no ltc-fused rows: {e}")
    kinds += [f"ltc@{args.before}"] if args.before else []
    before = exporter_at(args.before) if args.before else None
    tmp = Path(tempfile.mkdtemp())
    paths = {(k, c): export(k, c, tmp, before) for k in kinds for c in args.chunks}
    times: dict[tuple, list[float]] = {}
    for _ in range(args.rounds):
        for (k, c), p in paths.items():
            for th in args.threads:
                seconds = args.seconds if not k.startswith("ltc@") else args.seconds / 4
                times.setdefault((k, c, th), []).extend(time_stream(p, c, th, seconds))
    print(f"\n`{command}`\n")
    print("| graph | chunk | threads | ms per chunk: median (min–max) | RTF | / pb |")
    print("|---|---|---|---|---|---|")
    for c in args.chunks:
        for th in args.threads:
            base = statistics.median(times[("pb", c, th)])
            for k in kinds:
                t = times[(k, c, th)]
                med = statistics.median(t)
                print(
                    f"| {k} | {c} ({1000 * c / SR:g} ms) | {th} | {1e3 * med:.2f} "
                    f"({1e3 * min(t):.2f}–{1e3 * max(t):.2f}) | {med * SR / c:.3f} | "
                    f"{med / base:.2f}× |"
                )


if __name__ == "__main__":
    main()
