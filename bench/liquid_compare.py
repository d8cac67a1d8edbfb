"""Quality of the liquid terms at the same budget: none vs PB vs KB vs LTC, one task.

    python bench/liquid_compare.py bidmc --target hr          # simulated BIDMC, cpu preset
    python bench/liquid_compare.py speech                     # synthetic speech, cpu preset
    python bench/liquid_compare.py speech --device cuda --set optim.epochs=5

For each liquid kind the script runs, as a subprocess,

    liquid-stream train TASK --preset cpu --set model.mode=diag --set model.liquid=KIND …

with everything else equal (same preset, seed, data, steps; ``mode=diag`` for all four,
because ``ltc`` is the diagonal recurrence), then reads the run's ``test_metrics.json`` and
prints one table row per kind: parameters, wall time, test metrics; writes
``OUT/compare.json`` and a bar chart ``OUT/compare.png``. Finished runs are reused (delete
the run folder to redo one). The training command lines are printed and logged.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

KINDS = ("none", "pb", "kb", "ltc")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("task", help="a training task (bidmc, speech, speech-stream, …)")
    ap.add_argument("--target", default=None, help="bidmc target (hr, rr, spo2)")
    ap.add_argument("--preset", default="cpu")
    ap.add_argument("--kinds", nargs="+", default=list(KINDS), choices=KINDS)
    ap.add_argument("--data", default=None, help="data root (default: the task's own)")
    ap.add_argument("--device", default=None, choices=["cpu", "cuda", "auto"])
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--out", default=None, help="default runs/liquid-compare/TASK[-TARGET]")
    args = ap.parse_args()
    name = args.task + (f"-{args.target}" if args.target else "")
    out = Path(args.out or f"runs/liquid-compare/{name}")
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for kind in args.kinds:
        run_dir = out / kind
        liquid = "null" if kind == "none" else kind
        cmd = [
            "liquid-stream",
            "train",
            args.task,
            "--preset",
            args.preset,
            "--out",
            str(run_dir),
            "--set",
            "model.mode=diag",
            "--set",
            f"model.liquid={liquid}",
        ]
        if args.target:
            cmd += ["--target", args.target]
        if args.data:
            cmd += ["--data", args.data]
        if args.device:
            cmd += ["--device", args.device]
        for o in args.overrides:
            cmd += ["--set", o]
        metrics_path = run_dir / "test_metrics.json"
        timing_path = run_dir / "compare_time.json"
        if not metrics_path.exists():
            print("$ " + " ".join(cmd), flush=True)
            with open(out / "commands.log", "a") as log:
                log.write("$ " + " ".join(cmd) + "\n")
            t0 = time.time()
            subprocess.run([sys.executable, "-m", "liquid_stream.cli", *cmd[1:]], check=True)
            timing_path.write_text(json.dumps({"wall_s": time.time() - t0}))
        rows.append(row(kind, run_dir))
    print_table(name, rows)
    (out / "compare.json").write_text(json.dumps(rows, indent=1))
    plot(name, rows, out / "compare.png")
    print(f"wrote {out / 'compare.json'} and {out / 'compare.png'}")


def row(kind: str, run_dir: Path) -> dict:
    import torch

    metrics = json.loads((run_dir / "test_metrics.json").read_text())
    ckpt = torch.load(run_dir / "best.pt", map_location="cpu", weights_only=True)
    params = sum(
        v.numel()
        for k, v in ckpt["model"].items()
        if not k.endswith(("running_mean", "running_var", "num_batches_tracked"))
    )
    timing = run_dir / "compare_time.json"
    wall = json.loads(timing.read_text())["wall_s"] if timing.exists() else float("nan")
    return {"liquid": kind, "params": params, "wall_s": wall, **metrics}


def print_table(name: str, rows: list[dict]) -> None:
    keys = [k for k in rows[0] if k not in ("liquid", "params", "wall_s")]
    head = ["liquid", "params", "train+eval min"] + [f"test {k}" for k in keys]
    print(f"\n{name}: same preset and budget, mode=diag")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in rows:
        vals = [r["liquid"], str(r["params"]), f"{r['wall_s'] / 60:.1f}"]
        vals += [f"{r[k]:.4g}" if isinstance(r[k], float) else str(r[k]) for k in keys]
        print("| " + " | ".join(vals) + " |")


def plot(name: str, rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    key = next(k for k in ("rmse", "acc", "bacc", "loss") if k in rows[0])
    fig, ax = plt.subplots(figsize=(5, 3.2))
    ax.bar([r["liquid"] for r in rows], [r[key] for r in rows], color="tab:blue")
    ax.set_ylabel(f"test {key}")
    ax.set_title(f"{name}: liquid term at equal budget")
    for i, r in enumerate(rows):
        ax.annotate(f"{r[key]:.3g}", (i, r[key]), ha="center", va="bottom", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    main()
