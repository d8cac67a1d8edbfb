"""How much of the LTC recurrence is the paper's eq. (10): the liquid coefficient's clamp.

    python bench/ltc_fidelity.py                                  # fresh inits, N = 7 and 64
    python bench/ltc_fidelity.py runs/ltc-init/legs/ltc/best.pt …  # trained checkpoints too

``liquid="ltc"`` runs x_t = (Ā + B̃ tanh u_t) x_{t−1} + B̄ u_t with the liquid coefficient
B̃ = B̄ · min(1, ρ(1 − |Ā|)/|B̄|) (liquid_stream/nn/ltc.py): where the clamp is active, B̃ ≠ B̄
and the mode is not eq. (10) with the paper's coefficient. For every LTC layer this prints
the fraction of (channel, mode) pairs whose clamp is active and the median and minimum of
|B̃|/|B̄|, for the ``legs`` init (S4D-LegS) and ``legs-inside`` (B scaled per mode at init so
that |B̄| ≤ ½ρ(1 − |Ā|): the clamp inactive everywhere), and for each checkpoint given.
"""

from __future__ import annotations

import argparse
import shlex
import sys

import torch

from liquid_stream.nn.checkpoint import model_from_checkpoint
from liquid_stream.nn.layer import LiquidS4
from liquid_stream.nn.ltc import ltc_system


def clamp_stats(layers: list[LiquidS4]) -> tuple[float, float, float]:
    """(fraction clamped, median |B̃|/|B̄|, min |B̃|/|B̄|) over all layers' (h, m)."""
    with torch.no_grad():
        r = torch.cat(
            [
                (s.B_liq.abs() / s.B_bar.abs()).flatten()
                for s in (ltc_system(layer.kernel, 1.0, torch.float64) for layer in layers)
            ]
        )
    return float((r < 1 - 1e-9).double().mean()), float(r.median()), float(r.min())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkpoints", nargs="*", help="trained LTC checkpoints (best.pt / last.pt)")
    ap.add_argument("--states", type=int, nargs="+", default=[7, 64])
    args = ap.parse_args()
    print(f"\n`python {shlex.join(['bench/ltc_fidelity.py', *sys.argv[1:]])}`\n")
    print("| model | layers | clamped (h, m) | median abs(B̃/B̄) | min abs(B̃/B̄) |")
    print("|---|---|---|---|---|")
    for N in args.states:
        for init in ("legs", "legs-inside"):
            torch.manual_seed(0)
            layer = LiquidS4(128, d_state=N, mode="diag", liquid="ltc", init=init)
            f, med, lo = clamp_stats([layer])
            print(f"| init {init}, H = 128, N = {N} | 1 | {100 * f:.1f} % | {med:.3f} | {lo:.2e} |")
    for path in args.checkpoints:
        model, _ = model_from_checkpoint(path)
        layers = [m for m in model.modules() if isinstance(m, LiquidS4) and m.liquid == "ltc"]
        if not layers:
            print(f"| {path} | 0 (no LTC layer) | – | – | – |")
            continue
        f, med, lo = clamp_stats(layers)
        init = model.config.get("init", "legs")
        print(f"| {path} (init {init}) | {len(layers)} | {100 * f:.1f} % | {med:.3f} | {lo:.2e} |")


if __name__ == "__main__":
    main()
