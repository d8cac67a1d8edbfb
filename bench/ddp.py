"""Data-parallel speed-up: the same global batch with 1 process vs K processes.

    python bench/ddp.py                                   # bidmc cpu preset, 1 vs 2 processes
    python bench/ddp.py --task speech --nprocs 1 2 4 --device cuda --batch 32

Each configuration trains ``liquid-stream train TASK --preset PRESET --max-steps S`` twice
(S = --short and --long) with per-process batch = global batch / K and the CPU threads
split between the processes (``--threads`` in total); time per step = (wall(long) −
wall(short)) / (long − short), which cancels start-up, data building and the final
validation. Prints a table (seconds per step, speed-up vs 1 process) and writes JSON.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def wall(args, k: int, steps: int, out: Path) -> float:
    cmd = [
        sys.executable,
        "-m",
        "liquid_stream.cli",
        "train",
        args.task,
        "--preset",
        args.preset,
        "--out",
        str(out),
        "--max-steps",
        str(steps),
        "--nproc",
        str(k),
        "--set",
        f"optim.batch_size={args.batch // k}",
        "--set",
        "train.progress=false",
        "--set",
        f"train.threads={max(1, args.threads // k)}",
    ]
    if args.target:
        cmd += ["--target", args.target]
    if args.device:
        cmd += ["--device", args.device]
    t = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--task", default="bidmc")
    ap.add_argument("--target", default="hr")
    ap.add_argument("--preset", default="cpu")
    ap.add_argument("--batch", type=int, default=16, help="global batch")
    ap.add_argument("--nprocs", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--threads", type=int, default=2, help="CPU threads in total")
    ap.add_argument("--device", default=None)
    ap.add_argument("--short", type=int, default=5)
    ap.add_argument("--long", type=int, default=25)
    ap.add_argument("--out", default="bench/results/ddp.json")
    args = ap.parse_args()
    if args.task != "bidmc":
        args.target = None
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for k in args.nprocs:
            w = {s: wall(args, k, s, Path(tmp) / f"k{k}-s{s}") for s in (args.short, args.long)}
            per_step = (w[args.long] - w[args.short]) / (args.long - args.short)
            rows.append(
                {"nproc": k, "per_rank_batch": args.batch // k, "s_per_step": per_step, "wall": w}
            )
            print(f"{k} process(es): {per_step:.3f} s/step", flush=True)
    base = rows[0]["s_per_step"]
    print(
        f"\n{args.task} --preset {args.preset}, global batch {args.batch}, "
        f"{args.threads} CPU threads in total, device {args.device or 'preset'}"
    )
    print("| processes | batch per process | s / step | speed-up |")
    print("|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['nproc']} | {r['per_rank_batch']} | {r['s_per_step']:.3f} | "
            f"{base / r['s_per_step']:.2f}× |"
        )
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"argv": sys.argv[1:], "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
