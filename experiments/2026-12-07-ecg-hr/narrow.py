"""Narrow a checkpoint to a subset of its input channels (the dropped channels' encoder
columns removed): equal to the old model with those channels' normalised input 0."""

import sys

from liquid_stream.nn.checkpoint import model_from_checkpoint, save_checkpoint
from liquid_stream.nn.model import LiquidS4Model

src, out, keep = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
model, meta = model_from_checkpoint(src)
old = list(meta["channels"])
idx = [old.index(c) for c in keep]
cfg = {**model.config, "d_input": len(keep)}
narrow = LiquidS4Model(**cfg)
state = model.state_dict()
state["encoder.weight"] = state["encoder.weight"][:, idx].clone()
narrow.load_state_dict(state)
new_meta = {**meta, "channels": keep, "d_input": len(keep), "model_config": cfg}
for k in ("input_mean", "input_std"):
    if k in meta:
        new_meta[k] = [meta[k][i] for i in idx]
print(old, "->", keep, {k: v for k, v in meta.items() if k not in ("model_config",)}.keys())
save_checkpoint(out, narrow.eval(), new_meta)
print("wrote", out)
