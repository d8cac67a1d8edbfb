"""Training memory of a task's model at its full sequence length, with and without
activation checkpointing (``train.checkpoint_blocks``).

    python bench/memory.py                                 # pathx paper model, batch 1 and 2
    python bench/memory.py --task pathfinder --batch 4 8 --device cuda

Each configuration runs in a fresh process: the task's model (``--preset``, default
``paper``) built from its config, one training forward + backward on random input of the
task's length (batch ``--batch``), peak memory measured — on CPU the peak resident set
(``getrusage``, includes ≈ 0.3 GB of interpreter + torch, so the per-example slope is what
scales), on CUDA ``torch.cuda.max_memory_allocated``. Prints a table, the per-example slope
and the ratio without / with checkpointing, and writes JSON.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

LENGTHS = {
    "pathx": 16384,
    "pathfinder": 1024,
    "listops": 2000,
    "imdb": 4096,
    "aan": 4000,
    "scifar": 1024,
    "lra-cifar": 1024,
    "fashion-mnist": 784,
}
D_INPUT = {"listops": 16, "imdb": 257, "aan": 257, "scifar": 3}


def one(task: str, preset: str, batch: int, checkpoint: bool, device: str) -> dict:
    """One forward + backward in this process; returns peak memory (GB) and time (s)."""
    import resource

    import torch

    from liquid_stream import LiquidS4Model
    from liquid_stream.training.config import load_config

    cfg = load_config(task, preset)
    torch.manual_seed(0)
    d_in, L = D_INPUT.get(task, 1), LENGTHS[task]
    model = LiquidS4Model(d_input=d_in, d_output=2, **cfg["model"]).to(device).train()
    model.checkpoint_blocks = checkpoint
    shape = (batch, 2, L, d_in) if cfg["model"]["decoder"] == "pair" else (batch, L, d_in)
    x = torch.randn(*shape, device=device)
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    t = time.perf_counter()
    model(x).square().sum().backward()
    if device == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - t
    if device == "cuda":
        peak = (torch.cuda.max_memory_allocated() - base) / 2**30
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    return {
        "task": task,
        "preset": preset,
        "batch": batch,
        "checkpoint": checkpoint,
        "device": device,
        "peak_gb": peak,
        "seconds": seconds,
        "params": sum(p.numel() for p in model.parameters()),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--task", default="pathx", choices=sorted(LENGTHS))
    ap.add_argument("--preset", default="paper")
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="bench/results/memory")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # internal: run one configuration
    args = ap.parse_args()
    if args.one:
        import torch

        torch.set_num_threads(args.threads)
        batch, ckpt = args.one.split(",")
        print(json.dumps(one(args.task, args.preset, int(batch), ckpt == "1", args.device)))
        return
    rows = []
    for ckpt in (False, True):
        for b in args.batch:
            cmd = [
                sys.executable,
                __file__,
                "--task",
                args.task,
                "--preset",
                args.preset,
                "--device",
                args.device,
                "--threads",
                str(args.threads),
                "--one",
                f"{b},{int(ckpt)}",
            ]
            res = subprocess.run(cmd, capture_output=True, text=True)
            if res.returncode != 0:
                print(res.stderr[-2000:], file=sys.stderr)
                raise SystemExit(f"configuration batch={b} checkpoint={ckpt} failed")
            rows.append(json.loads(res.stdout.strip().splitlines()[-1]))
            r = rows[-1]
            print(
                f"  batch {b:3d}  checkpoint {str(ckpt):5s}  peak {r['peak_gb']:7.2f} GB  "
                f"{r['seconds']:7.1f} s",
                flush=True,
            )
    print(
        f"\n{args.task} ({args.preset}: {rows[0]['params']} parameters, L = "
        f"{LENGTHS[args.task]}), one training forward + backward on {args.device}"
    )
    print("| checkpoint | batch | peak GB | s |\n|---|---|---|---|")
    for r in rows:
        print(f"| {r['checkpoint']} | {r['batch']} | {r['peak_gb']:.2f} | {r['seconds']:.1f} |")
    slopes = {}
    if len(args.batch) > 1:
        for ckpt in (False, True):
            rs = [r for r in rows if r["checkpoint"] == ckpt]
            a, b = rs[0], rs[-1]
            slopes[ckpt] = (b["peak_gb"] - a["peak_gb"]) / (b["batch"] - a["batch"])
            print(f"per example, checkpoint={ckpt}: {slopes[ckpt]:.2f} GB")
        if slopes[True] > 0:
            print(f"ratio without / with checkpointing: {slopes[False] / slopes[True]:.1f}x")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{args.task}-{args.preset}-{args.device}.json"
    path.write_text(
        json.dumps(
            {"rows": rows, "per_example_gb": {str(k): v for k, v in slopes.items()}}, indent=1
        )
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
