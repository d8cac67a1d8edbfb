"""One Liquid-S4 layer, forward+backward on the GPU (same sizes as the CPU target).

    python experiments/2026-11-26-gpu-layer/gpu_layer.py   # needs CUDA

Prints the median ms and the peak GPU memory of each row.
"""

from __future__ import annotations

import statistics

import torch

from liquid_stream import LiquidS4


def main() -> None:
    assert torch.cuda.is_available(), "needs a CUDA device"
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print("| mode | N | liquid | B×L×H | fwd+bwd ms (median of 10) | peak GB |")
    print("|---|---|---|---|---|---|")
    for mode, N, liquid, B, L, H in [
        ("dplr", 7, "pb", 2, 16000, 128),
        ("dplr", 64, "pb", 2, 16000, 128),
        ("diag", 64, "pb", 2, 16000, 128),
        ("dplr", 64, "kb", 2, 16000, 128),
        ("dplr", 64, "pb", 16, 16384, 512),
        ("diag", 64, "ltc", 2, 16000, 128),
        ("diag", 7, "ltc", 2, 16000, 128),
        ("diag", 64, "ltc", 16, 16384, 512),
    ]:
        torch.manual_seed(0)
        layer = LiquidS4(H, d_state=N, mode=mode, liquid=liquid).cuda()
        u = torch.randn(B, L, H, device="cuda")
        torch.cuda.reset_peak_memory_stats()
        times = []
        for i in range(13):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            layer(u).square().mean().backward()
            end.record()
            torch.cuda.synchronize()
            if i >= 3:
                times.append(start.elapsed_time(end))
        peak = torch.cuda.max_memory_allocated() / 2**30
        ms = statistics.median(times)
        print(f"| {mode} | {N} | {liquid} | {B}×{L}×{H} | {ms:.1f} | {peak:.2f} |")


if __name__ == "__main__":
    main()
