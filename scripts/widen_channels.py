"""Widen a checkpoint to more input channels: the new channels start with zero weight.

    python scripts/widen_channels.py runs/prr/ppg-rr.pt runs/prr/ppg-rr-ii.pt --channels PLETH,II

Why: the shipped PLETH-only RR model (6 × 128) scores better on its own test records than
the PLETH + II pair, which is a smaller model; a PLETH + II model that starts as the PLETH
model and learns what II adds is a warm start (``train.init``) for
``--preset ppg+ecg`` at the PLETH model's size. The encoder is the only layer that sees the
channels (the scale-norm front end has no weights and treats each channel alone), so with
``x`` the new input and ``W`` the old encoder

    W' = W on the old channels' columns, 0 on the new ones   (H, d_input')

and the widened model's output equals the old one's on the old channels, whatever the new
channels carry. The script checks this on random input (float64, every output step) and
writes the checkpoint with ``meta.channels`` / ``d_input`` updated, every data constant
(output affine, window) kept.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from liquid_stream.nn.checkpoint import model_from_checkpoint, save_checkpoint
from liquid_stream.nn.model import LiquidS4Model


def widen(model: LiquidS4Model, meta: dict, channels: list[str]) -> tuple[LiquidS4Model, dict]:
    """The model reading ``channels`` (a superset of ``meta["channels"]``, any order) and
    its meta; weights of the channels it had are moved to their new columns."""
    old = list(meta["channels"])
    missing = [c for c in old if c not in channels]
    if missing or len(set(channels)) != len(channels):
        raise SystemExit(
            f"--channels must name each of {old} once (and may add others), got {channels}"
        )
    cfg = {**model.config, "d_input": len(channels)}
    wide = LiquidS4Model(**cfg).to(torch.float64)
    state = {k: v.to(torch.float64) for k, v in model.state_dict().items()}
    w = torch.zeros(state["encoder.weight"].shape[0], len(channels), dtype=torch.float64)
    for i, c in enumerate(old):
        w[:, channels.index(c)] = state["encoder.weight"][:, i]
    state["encoder.weight"] = w
    wide.load_state_dict(state)
    new_meta = {**meta, "channels": list(channels), "d_input": len(channels), "model_config": cfg}
    for k in ("input_mean", "input_std"):  # identity standardisation per channel
        if k in meta:
            src = dict(zip(old, meta[k], strict=True))
            new_meta[k] = [src.get(c, 0.0 if k == "input_mean" else 1.0) for c in channels]
    return wide.eval(), new_meta


def check(old: LiquidS4Model, wide: LiquidS4Model, old_ch: list[str], channels: list[str]):
    """max |y_wide − y_old| / max |y_old| on random input (3 × 6000 steps, float64)."""
    torch.manual_seed(0)
    x = torch.randn(3, 6000, len(channels), dtype=torch.float64) * 50 + 7  # (B, L, d')
    idx = [channels.index(c) for c in old_ch]
    with torch.no_grad():
        y_old = old.to(torch.float64).eval()(x[..., idx])
        y_new = wide(x)
    return float((y_new - y_old).abs().max() / y_old.abs().max())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkpoint", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--channels", required=True, help="comma-separated, e.g. PLETH,II")
    args = ap.parse_args()
    model, meta = model_from_checkpoint(args.checkpoint)
    channels = [c.strip() for c in args.channels.split(",") if c.strip()]
    wide, new_meta = widen(model, meta, channels)
    err = check(model, wide, list(meta["channels"]), channels)
    print(
        f"{args.checkpoint} {meta['channels']} -> {channels}: "
        f"max |y_wide - y_old| / max |y_old| = {err:.1e} (float64)"
    )
    if not err < 1e-12:
        sys.exit("the widened model does not reproduce the old one")
    save_checkpoint(args.out, wide.to(torch.float32), new_meta)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
