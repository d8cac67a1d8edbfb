"""Where one call of an exported graph spends its time: onnxruntime's profiler, by op type.

    python bench/onnx_profile.py liquid_stream/models/vitals-ppg-ecg-hr.onnx --batch 1000
    python bench/onnx_profile.py liquid_stream/models/kws-sc10.onnx --batch 50 --chunk 1600

Runs ``--calls`` calls of ``--chunk`` samples (default: the graph's ``chunk``) at batch
``--batch`` from the zero state, one thread, and prints the median wall time of a call
without the profiler, then the profiler's kernel time per op type (nodes inside ``If``
branches counted where they run; the ``If`` nodes themselves left out, they contain the
others) and the heaviest single nodes with their output shapes. Input: standard normal
times ``--scale`` around ``--offset`` (biosignal-like units by default; ``--scale 0.1
--offset 0`` for audio).
"""

from __future__ import annotations

import argparse
import collections
import json
import shlex
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from liquid_stream.runtime import ltc_ort
from liquid_stream.runtime.onnx_streamer import OnnxStreamer


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("onnx")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--chunk", type=int, default=None)
    ap.add_argument("--calls", type=int, default=10)
    ap.add_argument("--scale", type=float, default=30.0)
    ap.add_argument("--offset", type=float, default=500.0)
    ap.add_argument("--top", type=int, default=12)
    args = ap.parse_args()
    import onnxruntime as ort

    st = OnnxStreamer(args.onnx, batch=args.batch)
    T = args.chunk or st.chunk
    rng = np.random.default_rng(0)
    x = args.offset + args.scale * rng.standard_normal((args.batch, T, st.d_input))
    feeds = {"x": x.astype(np.float32), **st.state}

    def session(profile: bool):
        so = ort.SessionOptions()
        so.intra_op_num_threads, so.inter_op_num_threads = 1, 1
        so.enable_profiling = profile
        so.profile_file_prefix = "/tmp/onnx_profile"
        ltc_ort.register(so, args.onnx)  # a graph with the fused LTC op needs its library
        return ort.InferenceSession(args.onnx, so, providers=["CPUExecutionProvider"])

    plain = session(False)
    outs = [o.name for o in plain.get_outputs()]
    plain.run(outs, feeds)
    wall = []
    for _ in range(args.calls):
        t = time.perf_counter()
        plain.run(outs, feeds)
        wall.append(time.perf_counter() - t)
    prof = session(True)
    for _ in range(args.calls):
        prof.run(outs, feeds)
    events = json.loads(Path(prof.end_profiling()).read_text())
    by_op, n_op, by_node = collections.Counter(), collections.Counter(), collections.Counter()
    for e in events:
        if e.get("cat") != "Node" or not e["name"].endswith("_kernel_time"):
            continue
        op = e["args"].get("op_name")
        if op == "If":
            continue
        by_op[op] += e["dur"]
        n_op[op] += 1
        shape = json.dumps(e["args"].get("output_type_shape", ""))[:60]
        by_node[(op, e["name"][: -len("_kernel_time")], shape)] += e["dur"]
    total = sum(by_op.values())
    print(f"Command: python {shlex.join(sys.argv)}")
    print(f"{args.onnx}: batch {args.batch}, {T} samples a call, one thread")
    print(
        f"wall per call (no profiler), median of {args.calls}: "
        f"{1e3 * statistics.median(wall):.2f} ms\n"
    )
    print("| op | ms per call | share | nodes per call |\n|---|---|---|---|")
    for op, d in by_op.most_common():
        print(
            f"| {op} | {d / args.calls / 1e3:.2f} | {100 * d / total:.1f} % "
            f"| {n_op[op] // args.calls} |"
        )
    print(f"\n| heaviest nodes (top {args.top}) | output shape | ms per call |\n|---|---|---|")
    for (op, name, shape), d in by_node.most_common(args.top):
        print(f"| {op} `{name}` | {shape} | {d / args.calls / 1e3:.2f} |")


if __name__ == "__main__":
    main()
