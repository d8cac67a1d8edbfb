"""Two ONNX exports of one model, A vs B: time per call at several batch sizes, interleaved.

    python bench/onnx_ab.py A.onnx B.onnx [--batch 1 4 16 64] [--calls 200] [--chunk N]

For an exporter change (same weights, another graph): each batch size streams the same
random input through both graphs (:class:`liquid_stream.OnnxStreamer`, one thread, its own
state each), one ``--chunk``-sample call after the other, the order alternating every call,
and reports the median ms per call of each, the ratio A / B, and the largest difference of
their outputs relative to max|y| (the two graphs must compute the same model). Input:
standard normal, scaled by ``--scale`` around ``--offset`` (biosignal-like units for a
scale-normalised model). ``--chunk`` defaults to the graph's own ``chunk`` metadata.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import time

import numpy as np

from liquid_stream.runtime.onnx_streamer import OnnxStreamer


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("a", help="graph A (.onnx)")
    ap.add_argument("b", help="graph B (.onnx)")
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 4, 16, 64])
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--chunk", type=int, default=None)
    ap.add_argument("--scale", type=float, default=30.0)
    ap.add_argument("--offset", type=float, default=500.0)
    args = ap.parse_args()
    probe = OnnxStreamer(args.a, threads=1)
    chunk = args.chunk or int(probe.metadata.get("chunk", 160))
    rng = np.random.default_rng(0)
    print("| batch | A ms per call | B ms per call | A / B | max|y_A − y_B| / max|y| |")
    print("|---|---|---|---|---|")
    for B in args.batch:
        sa = OnnxStreamer(args.a, batch=B, threads=1)
        sb = OnnxStreamer(args.b, batch=B, threads=1)
        x = rng.standard_normal((B, chunk * args.calls, probe.d_input)) * args.scale
        x = (x + args.offset).astype(np.float32)
        ta, tb, ya, yb = [], [], [], []
        for r in range(args.calls):
            c = x[:, r * chunk : (r + 1) * chunk]
            for s, ts, ys in [(sa, ta, ya), (sb, tb, yb)][:: 1 if r % 2 else -1]:
                t = time.perf_counter()
                ys.append(s.process(c))
                ts.append(time.perf_counter() - t)
        ma, mb = statistics.median(ta) * 1e3, statistics.median(tb) * 1e3
        y_a, y_b = np.concatenate(ya, 1), np.concatenate(yb, 1)
        diff = np.abs(y_a - y_b).max() / max(np.abs(y_a).max(), 1e-30)
        print(f"| {B} | {ma:.2f} | {mb:.2f} | {ma / mb:.2f}× | {diff:.1e} |")
    print(f"\nchunk {chunk} samples, {args.calls} calls per graph and batch, one thread.")
    print(f"Command: python bench/onnx_ab.py {shlex.join(sys.argv[1:])}")


if __name__ == "__main__":
    main()
