"""Training cost of one exact-LTC layer, fused kernel vs torch scan, next to PB (CPU or GPU).

    python bench/ltc_train.py                        # N = 64, L = 16000, B = 2, H = 128
    python bench/ltc_train.py --threads 2 --rounds 5 --no-torch
    python bench/ltc_train.py --states 7 --length 4000
    python bench/ltc_train.py --device cuda --batch 16 --length 16384 --channels 512

What is timed: one ``forward + backward`` of ``LiquidS4(d_model=H, d_state=N, mode="diag",
liquid=…, liquid_order=2)`` on ``u (B, L, H)``, loss ``y.square().mean()`` (as bench/kernel.py),
for three configurations: ``LTC fused`` (``liquid="ltc"``, the C++ kernel of
liquid_stream/nn/ltc_kernel.py, ``LIQUID_STREAM_LTC_KERNEL=fused``), ``LTC torch`` (the same
layer through the blocked torch scan ``_LTCScan``, ``=torch``) and ``PB`` (``liquid="pb"``,
p = 2, the same mode). Per thread count (``torch.set_num_threads``) the configurations are
interleaved over ``--rounds`` rounds, the order rotated every round, ``--reps`` calls each
per round after one untimed warm-up call each (which also builds or loads the kernel). The
table gives per configuration the median and [min, max] wall time over all timed calls, the
median process CPU time of a call (all threads; less sensitive than wall time to other
processes on a shared machine) and the ratio of medians to PB at the same thread count. The
1-minute load average before and after each thread count says how busy the machine was.
Weights and inputs are random (the time does not depend on them); every configuration of a
thread count sees the same ``u``.

With ``--device cuda`` the layers and ``u`` live on the GPU, ``LTC fused`` is the Triton
kernel of liquid_stream/nn/ltc_triton.py, every call is bracketed by ``torch.cuda.synchronize``,
the thread count is not varied (``—``) and the CPU-time column gives the peak GPU memory of
the configuration (GB, ``torch.cuda.max_memory_allocated``) instead.
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import sys
import time

import torch

from liquid_stream import LiquidS4
from liquid_stream.nn import ltc_kernel
from liquid_stream.nn.ltc import ltc_path, ltc_system

CONFIGS = {"LTC fused": ("ltc", "fused"), "LTC torch": ("ltc", "torch"), "PB": ("pb", None)}


def layer_of(liquid: str, args) -> LiquidS4:
    torch.manual_seed(0)
    return LiquidS4(d_model=args.H, d_state=args.N, mode="diag", liquid=liquid, liquid_order=2)


def call(layer: LiquidS4, u: torch.Tensor, kernel: str | None) -> tuple[float, float]:
    """One fwd+bwd; (wall s, process CPU s, or on a GPU its peak memory in GB). ``kernel``
    sets $LIQUID_STREAM_LTC_KERNEL."""
    if kernel is not None:
        os.environ[ltc_kernel.KERNEL_ENV] = kernel
    layer.zero_grad(set_to_none=True)
    gpu = u.device.type == "cuda"
    if gpu:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    t, c = time.perf_counter(), time.process_time()
    layer(u).square().mean().backward()
    if gpu:
        torch.cuda.synchronize()
        return time.perf_counter() - t, torch.cuda.max_memory_allocated() / 2**30
    return time.perf_counter() - t, time.process_time() - c


def check_paths(layers: dict, u: torch.Tensor) -> None:
    """Each LTC configuration runs the implementation it is named after."""
    for name, (liquid, kernel) in CONFIGS.items():
        if liquid == "ltc" and name in layers:
            os.environ[ltc_kernel.KERNEL_ENV] = kernel
            system = ltc_system(layers[name].kernel, 1.0, u.dtype)
            path = ltc_path(u.transpose(1, 2), system)
            want = "triton" if kernel == "fused" and u.device.type == "cuda" else kernel
            if path != want:
                sys.exit(f"ltc_train: {name} would run the {path} path (kernel unavailable?)")


def run(threads: int, args) -> list[dict]:
    if threads:
        torch.set_num_threads(threads)
    names = [n for n in CONFIGS if not (n == "LTC torch" and args.no_torch)]
    layers = {n: layer_of(CONFIGS[n][0], args).to(args.device) for n in names}
    u = torch.randn(args.B, args.L, args.H, generator=torch.Generator().manual_seed(1))
    u = u.to(args.device)
    check_paths(layers, u)
    load0 = os.getloadavg()[0]
    for n in names:  # warm-up: allocator, kernel build / load
        call(layers[n], u, CONFIGS[n][1])
    wall: dict[str, list[float]] = {n: [] for n in names}
    cpu: dict[str, list[float]] = {n: [] for n in names}
    for r in range(args.rounds):
        for n in names[r % len(names) :] + names[: r % len(names)]:
            for _ in range(args.reps):
                w, c = call(layers[n], u, CONFIGS[n][1])
                wall[n].append(w)
                cpu[n].append(c)
    load1 = os.getloadavg()[0]
    pb = statistics.median(wall["PB"])
    return [
        {
            "threads": threads,
            "config": n,
            "median": statistics.median(wall[n]),
            "min": min(wall[n]),
            "max": max(wall[n]),
            "cpu": statistics.median(cpu[n]),
            "ratio": statistics.median(wall[n]) / pb,
            "calls": len(wall[n]),
            "load": (load0, load1),
        }
        for n in names
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--states", dest="N", type=int, default=64, help="N (d_state)")
    ap.add_argument("--length", dest="L", type=int, default=16000)
    ap.add_argument("--batch", dest="B", type=int, default=2)
    ap.add_argument("--channels", dest="H", type=int, default=128)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=1, help="timed calls per configuration and round")
    ap.add_argument("--no-torch", action="store_true", help="skip the (slow) torch LTC scan")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    args = ap.parse_args()
    command = "python bench/ltc_train.py " + shlex.join(sys.argv[1:])
    gpu = args.device == "cuda"
    if gpu and not torch.cuda.is_available():
        sys.exit("ltc_train: --device cuda needs a CUDA device")
    if not gpu and not ltc_kernel.available():
        sys.exit("ltc_train: the fused LTC kernel cannot be built here (see the warning)")
    rows = [row for t in ([0] if gpu else args.threads) for row in run(t, args)]
    where = f"the GPU ({torch.cuda.get_device_name()})" if gpu else "the CPU"
    print(
        f"\nOne LiquidS4 layer (diag), fwd+bwd on {where}: N = {args.N}, L = {args.L}, "
        f"B = {args.B}, H = {args.H}; {args.rounds} interleaved rounds × {args.reps} call(s)"
    )
    extra = "peak GPU GB" if gpu else "CPU s (median)"
    print(f"\n| threads | configuration | median s | [min, max] s | {extra} | / PB | load 1-min |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['threads'] or '—'} | {r['config']} | {r['median']:.3f} | "
            f"[{r['min']:.3f}, {r['max']:.3f}] | {r['cpu']:.3f} | {r['ratio']:.2f}× | "
            f"{r['load'][0]:.1f} → {r['load'][1]:.1f} |"
        )
    print(f"\nCommand: {command}")


if __name__ == "__main__":
    main()
