"""Training cost of the paper-size keyword spotter on raw samples vs behind the log-mel
front end: seconds per training step (forward + per-step cross-entropy + backward + AdamW).

    python bench/train_cost.py                 # batch 16 × 2 s (raw at batch 2), 1 thread
    python bench/train_cost.py --threads 2 --raw-batch 4 --raw-steps 3

Both models are the 6×128 Liquid-S4 (PB p=2, N=7, DPLR, batch norm, causal, 0.1 s window
decoder) of bench/stream.py: ``raw`` steps its stack once per sample (32000 steps per 2 s
item), ``logmel`` once per 10 ms frame (200 steps). Inputs and labels are random (the cost
does not depend on them); the loss is the trainer's ``ce_per_step`` over every stack step.
A raw step is slow on a CPU, so only a few steps are timed (``--raw-steps``, after one
untimed warm-up step, as for log-mel); the table gives how many.

Memory: a raw step at batch 16 × 32000 samples holds more than 20 GB of activations (it
ran out of a 23 GB machine), so raw runs at ``--raw-batch`` (default 2) and its batch-16
time is that × 16 / raw-batch (CPU time is linear in the batch; the log-mel model is timed
at both batches to show how linear). Ratios are raw / log-mel seconds per step at the same
batch, in the same run. A guard thread stops the run if the process's RSS passes
``--max-rss-gb``. Peak RSS is the process's (log-mel runs first, so the
raw row's value is the raw step's peak unless log-mel's was higher).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import statistics
import sys
import threading
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]

from stream import paper_model  # noqa: E402

from liquid_stream.training.metrics import compute_loss  # noqa: E402

SR = 16000


def rss_guard(limit_gb: float) -> None:
    """Exit the process (status 3) as soon as its resident memory passes ``limit_gb``."""
    page = os.sysconf("SC_PAGE_SIZE")

    def watch() -> None:
        while True:
            with open("/proc/self/statm") as f:
                rss = int(f.read().split()[1]) * page / 2**30
            if rss > limit_gb:
                print(
                    f"train_cost: RSS {rss:.1f} GB > --max-rss-gb {limit_gb:g}: stopping",
                    file=sys.stderr,
                    flush=True,
                )
                os._exit(3)
            time.sleep(0.2)

    threading.Thread(target=watch, daemon=True).start()


def step_times(frontend: str, batch: int, n_timed: int, args) -> dict:
    model = paper_model(args.N, "pb", frontend, args.mode).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(0)
    L = int(args.seconds * SR)
    x = torch.randn(batch, L, 1, generator=g)
    n_steps = L // model.hop
    y = torch.randint(0, 35, (batch, n_steps), generator=g)
    times = []
    for i in range(1 + n_timed):
        t = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss, _ = compute_loss(model(x, steps=True), y, "ce_per_step")
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        dt = time.perf_counter() - t
        warm = " (warm-up)" * (i == 0)
        print(f"{frontend} batch {batch} step {i}{warm}: {dt:.2f} s", file=sys.stderr, flush=True)
        if i > 0:
            times.append(dt)
    return {
        "frontend": frontend,
        "batch": batch,
        "stack_steps_per_item": n_steps,
        "steps_timed": len(times),
        "s_per_step": statistics.median(times),
        "s_per_step_all": times,
        "params": sum(p.numel() for p in model.parameters()),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=2.0, help="audio per item")
    ap.add_argument("--N", type=int, default=7)
    ap.add_argument("--mode", default="dplr", choices=["dplr", "diag"])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--raw-batch", type=int, default=2, help="batch of the raw model")
    ap.add_argument("--raw-steps", type=int, default=2, help="timed raw steps (slow)")
    ap.add_argument("--max-rss-gb", type=float, default=8.0)
    ap.add_argument("--logmel-steps", type=int, default=5, help="timed log-mel steps")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "train_cost.json"))
    args = ap.parse_args()
    command = "python " + shlex.join(["bench/train_cost.py", *sys.argv[1:]])
    torch.set_num_threads(args.threads)
    rss_guard(args.max_rss_gb)
    rows = []
    # smaller runs first: the process's peak RSS after each is that run's own peak
    plan = [("logmel", args.raw_batch, args.logmel_steps), ("raw", args.raw_batch, args.raw_steps)]
    if args.batch != args.raw_batch:
        plan.insert(1, ("logmel", args.batch, args.logmel_steps))
    for fe, batch, n in plan:
        rows.append(step_times(fe, batch, n, args))
        rows[-1]["peak_rss_gb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    raw = next(r for r in rows if r["frontend"] == "raw")
    lm = {r["batch"]: r for r in rows if r["frontend"] == "logmel"}
    raw_full = raw["s_per_step"] * args.batch / args.raw_batch
    print(f"\n`{command}`\n")
    print(
        f"6×128 Liquid-S4 PB, N={args.N} ({args.mode}), items of {args.seconds:g} s of 16 kHz "
        f"audio, {args.threads} thread(s); median over the timed steps after one warm-up "
        f"step; peak RSS is the process's, cumulative in row order\n"
    )
    print(
        "| front end | batch | stack steps / item | timed steps | s / step | raw / log-mel "
        "| audio s trained / s | peak RSS GB |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        ratio = raw["s_per_step"] / r["s_per_step"] if r["batch"] == args.raw_batch else None
        print(
            f"| {r['frontend']} | {r['batch']} | {r['stack_steps_per_item']} | "
            f"{r['steps_timed']} | {r['s_per_step']:.3f} | "
            f"{'–' if ratio is None or r is raw else f'{ratio:.0f}×'} | "
            f"{r['batch'] * args.seconds / r['s_per_step']:.1f} | "
            f"{r['peak_rss_gb']:.1f} |"
        )
    if args.batch != args.raw_batch:
        b = args.batch
        print(
            f"| raw (scaled) | {b} | {raw['stack_steps_per_item']} | – | ≈ {raw_full:.1f} | "
            f"≈ {raw_full / lm[b]['s_per_step']:.0f}× | "
            f"{b * args.seconds / raw_full:.1f} | – |"
        )
        lin = lm[b]["s_per_step"] / lm[args.raw_batch]["s_per_step"] / (b / args.raw_batch)
        print(
            f"\nlog-mel batch {b} / batch {args.raw_batch} time, per item: {lin:.2f} "
            f"(1 = linear in the batch)"
        )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "command": command,
                "args": vars(args),
                "rows": rows,
                "raw_s_per_step_scaled_to_batch": raw_full,
            },
            indent=1,
        )
        + "\n"
    )
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
