"""Where one exported graph spends a call: onnxruntime's own profiler, by op type and node.

    python bench/onnx_profile.py MODEL.onnx [--batch 64] [--calls 60] [--chunk N] [--top 15]

Streams ``--calls`` chunks of random input (standard normal · ``--scale`` + ``--offset``,
biosignal-like units for a scale-normalised model) through one onnxruntime session (one
thread, profiling on) by :meth:`liquid_stream.OnnxStreamer.process` (the state carried
from call to call), and prints the mean time of a call
(``model_run``) and the kernel time by op type and by node. Nodes inside an ``If`` (the
stack of a front-end graph) are counted both as themselves and in their ``If``, so the op
shares add up to more than 100 %. The profiler adds its own overhead: compare shares, not
absolute times (bench/onnx_ab.py times calls).
"""

from __future__ import annotations

import argparse
import collections
import json
import shlex
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from liquid_stream.onnx_streamer import OnnxStreamer  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="an exported graph (.onnx)")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--calls", type=int, default=60)
    ap.add_argument("--chunk", type=int, default=None, help="default: the graph's chunk")
    ap.add_argument("--top", type=int, default=15, help="nodes listed")
    ap.add_argument("--scale", type=float, default=30.0)
    ap.add_argument("--offset", type=float, default=500.0)
    args = ap.parse_args()
    import onnxruntime as ort

    streamer = OnnxStreamer(args.model, batch=args.batch, threads=1)
    T = args.chunk or streamer.chunk
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.enable_profiling = True
    options.profile_file_prefix = str(Path(tempfile.mkdtemp()) / "profile")
    options.log_severity_level = 3
    # the streamer's own call path (state carried, input checked), on a profiling session
    streamer.session = ort.InferenceSession(
        args.model, options, providers=["CPUExecutionProvider"]
    )
    rng = np.random.default_rng(0)
    for _ in range(args.calls):
        x = rng.standard_normal((args.batch, T, streamer.d_input)) * args.scale + args.offset
        streamer.process(x.astype(np.float32))
    session = streamer.session
    events = json.loads(Path(session.end_profiling()).read_text())
    by_op: collections.Counter = collections.Counter()
    by_node: collections.Counter = collections.Counter()
    run_us, runs = 0.0, 0
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            by_op[e["args"]["op_name"]] += e["dur"]
            by_node[f"{e['name'][: -len('_kernel_time')]} ({e['args']['op_name']})"] += e["dur"]
        elif e.get("cat") == "Session" and e["name"] == "model_run":
            run_us, runs = run_us + e["dur"], runs + 1
    runs = max(runs, 1)
    print(f"command: {shlex.join([sys.executable, *sys.argv])}")
    print(f"{args.model}: batch {args.batch}, chunk {T}, {args.calls} calls, one thread; "
          f"model_run mean {run_us / runs / 1e3:.3f} ms (profiled)\n")  # fmt: skip
    print("| op type | ms per call | share of model_run |\n|---|---|---|")
    for op, us in by_op.most_common():
        print(f"| {op} | {us / runs / 1e3:.3f} | {100 * us / max(run_us, 1):.1f} % |")
    print(f"\n| node (the {args.top} longest) | ms per call |\n|---|---|")
    for node, us in by_node.most_common(args.top):
        print(f"| {node} | {us / runs / 1e3:.3f} |")


if __name__ == "__main__":
    main()
