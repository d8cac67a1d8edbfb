"""Give a scale-norm checkpoint the ``slope`` front-end features, with zero weight.

    python experiments/2026-12-08-ecg-slope/widen_slope.py IN.pt OUT.pt

The encoder is the only layer that sees the front end's features; with ``slope`` they are
(f, g) per channel (liquid_stream/nn/scalenorm.py), so W' = [W, 0] (H, 2C) reads exactly what
the old model read, whatever g carries. Checked on random input (float64, every output).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from liquid_stream.nn.checkpoint import model_from_checkpoint, save_checkpoint
from liquid_stream.nn.model import LiquidS4Model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkpoint", type=Path)
    ap.add_argument("out", type=Path)
    args = ap.parse_args()
    model, meta = model_from_checkpoint(args.checkpoint)
    fe = model.config["frontend"]
    if fe.get("kind") != "scalenorm" or fe.get("slope"):
        sys.exit(f"{args.checkpoint}: not a scale-norm model without slope features")
    cfg = {**model.config, "frontend": {**fe, "slope": True}}
    wide = LiquidS4Model(**cfg).to(torch.float64)
    state = {k: v.to(torch.float64) for k, v in model.state_dict().items()}
    w = state["encoder.weight"]  # (H, C)
    state["encoder.weight"] = torch.cat([w, torch.zeros_like(w)], 1)  # (H, 2C)
    wide.load_state_dict(state)
    torch.manual_seed(0)
    x = torch.randn(2, 6000, model.config["d_input"], dtype=torch.float64) * 50 + 7
    with torch.no_grad():
        err = (wide.eval()(x) - model.to(torch.float64).eval()(x)).abs().max()
    print(f"max |y_slope - y_old| = {float(err):.1e} (float64)")
    if not err < 1e-9:
        sys.exit("the widened model does not reproduce the old one")
    save_checkpoint(args.out, wide.to(torch.float32), {**meta, "model_config": cfg})
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
