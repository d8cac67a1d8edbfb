"""Tile sizes of the Triton LTC kernel (liquid_stream/nn/ltc_triton.py) on a CUDA device.

    python experiments/2026-11-27-ltc-tiles/ltc_tiles.py   # needs CUDA and Triton

For each (channel-mode pairs per program ``BLOCK_ELEMENTS``, warps per program ``NUM_WARPS``)
it times one forward + backward of the LTC scan alone (``ltc_triton`` on random coefficients
as the layer makes them, loss Σ y²) at two sizes, N = 64 (M = 32 modes): B×L×H =
2×16000×128 and 16×16384×512; median of 5 calls after one warm-up (which compiles), every
call bracketed by ``torch.cuda.synchronize``. Each tile's outputs and input gradient are
checked against the torch scan (``_LTCScan``) of the same float32 inputs (relative max
error, printed), so a tile that computed something else would show.
"""

from __future__ import annotations

import shlex
import statistics
import sys
import time

import torch

from liquid_stream.nn import ltc_triton as lt
from liquid_stream.nn.ltc import LTC_BLOCK, LTC_RHO, _LTCScan

TILES = [(32, 1), (64, 1), (64, 2), (128, 1), (256, 1), (512, 2), (1024, 4)]
SIZES = [(2, 16000, 128), (16, 16384, 512)]
M = 32


def coefficients(H: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    r = 1 - torch.logspace(-4, -0.3, M, dtype=torch.float64).expand(H, M)
    A = r * torch.exp(1j * torch.rand(H, M, generator=g, dtype=torch.float64))
    Bb = 0.3 * torch.randn(H, M, generator=g, dtype=torch.complex128)
    Bl = Bb * torch.clamp(LTC_RHO * (1 - A.abs()) / Bb.abs(), max=1.0)
    C = torch.randn(H, M, generator=g, dtype=torch.complex128)
    return [t.to(torch.complex64).cuda() for t in (A, Bl, Bb, C)]


def fwd_bwd(fn, u, coefs, x0):
    v = u.clone().requires_grad_()
    y, _ = fn(v, *coefs, x0)
    y.square().sum().backward()
    return y.detach(), v.grad


def main() -> None:
    assert torch.cuda.is_available() and lt.available(), "needs CUDA and Triton"
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print("\n| B×L×H | BLOCK_ELEMENTS | NUM_WARPS | fwd+bwd ms (median of 5) | rel. err y / ∂u |")
    print("|---|---|---|---|---|")
    for B, L, H in SIZES:
        coefs = coefficients(H)
        u = torch.randn(B, H, L, device="cuda")
        x0 = torch.zeros(B, H, M, dtype=torch.complex64, device="cuda")
        u_t = u.permute(2, 0, 1).contiguous()  # the torch scan is time-first
        ref = fwd_bwd(lambda *a: _LTCScan.apply(*a, 2.0, LTC_BLOCK, 1 << 26), u_t, coefs, x0)
        ref = tuple(r.permute(1, 2, 0) for r in ref)
        for block, warps in TILES:
            lt.BLOCK_ELEMENTS, lt.NUM_WARPS = block, warps
            got = fwd_bwd(lambda *a: lt.ltc_triton(*a, 2.0), u, coefs, x0)  # compiles
            err = [
                ((a - b).abs().max() / b.abs().max()).item() for a, b in zip(got, ref, strict=True)
            ]
            times = []
            for _ in range(5):
                torch.cuda.synchronize()
                t = time.perf_counter()
                fwd_bwd(lambda *a: lt.ltc_triton(*a, 2.0), u, coefs, x0)
                torch.cuda.synchronize()
                times.append(1e3 * (time.perf_counter() - t))
            print(
                f"| {B}×{L}×{H} | {block} | {warps} | {statistics.median(times):.1f} | "
                f"{err[0]:.1e} / {err[1]:.1e} |",
                flush=True,
            )
    cmd = f"python experiments/2026-11-27-ltc-tiles/ltc_tiles.py {shlex.join(sys.argv[1:])}"
    print(f"\nCommand: {cmd.rstrip()}")


if __name__ == "__main__":
    main()
