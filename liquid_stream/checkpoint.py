"""Model checkpoints: plain tensors + plain config, written atomically.

A checkpoint is a dict loadable with ``torch.load(path, weights_only=True)``:

    {"format": "liquid-stream/checkpoint", "version": 1,
     "model_config": {...LiquidS4Model kwargs...},
     "model": state_dict,
     "meta": {"task": ..., "sample_rate": ..., "labels": [...], "target_names": [...],
              "input_mean": [...], "input_std": [...], ...},
     ... (trainer state: optimizer, scheduler, RNG, epoch — added by the trainer)}

The trainer's ``last.pt`` is the single source of truth of a run: it also carries the best
checkpoint so far under ``BEST_KEY`` — ``{"metrics": ...}`` alone when the best is this
checkpoint's own state (``trainer.best_step == trainer.step``), else
``{"model": ..., "trainer": ..., "metrics": ...}`` — so :func:`embedded_best` can rebuild
``best.pt`` after a crash between the two writes.

No pickled code is ever stored or loaded.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import torch

from .model import LiquidS4Model

FORMAT = "liquid-stream/checkpoint"
VERSION = 1
BEST_KEY = "best_checkpoint"


class CheckpointError(ValueError):
    """A checkpoint file is missing, unreadable, corrupt or of the wrong kind."""


def atomic_torch_save(obj, path: str | os.PathLike) -> None:
    """torch.save to a temporary file in the same folder, fsync, then rename over ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def checkpoint_dict(model: LiquidS4Model, meta: dict | None = None, **extra) -> dict:
    """The checkpoint of ``model`` (config + state_dict), ``meta`` and any trainer ``extra``."""
    return {
        "format": FORMAT,
        "version": VERSION,
        "model_config": dict(model.config),
        "model": {k: v.detach().cpu() for k, v in model.state_dict().items()},
        "meta": dict(meta or {}),
        **extra,
    }


def save_checkpoint(path, model: LiquidS4Model, meta: dict | None = None, **extra) -> None:
    """Write ``model`` (config + state_dict), ``meta`` and any trainer ``extra`` atomically."""
    atomic_torch_save(checkpoint_dict(model, meta, **extra), path)


def embedded_best(ckpt: dict) -> dict | None:
    """The best checkpoint recorded in a trainer checkpoint (``best.pt`` as it must be), or
    None when it records none (no validation yet, or written before ``BEST_KEY`` existed).
    A checkpoint without ``BEST_KEY`` whose ``best_step`` is its own step (``best.pt``
    itself) is its own best."""
    st = ckpt.get("trainer") if isinstance(ckpt.get("trainer"), dict) else {}
    step = st.get("best_step")
    base = {k: v for k, v in ckpt.items() if k != BEST_KEY}
    parts = ckpt.get(BEST_KEY)
    if step is None:
        return None
    if parts is None:
        return base if step == st.get("step") else None
    own = step == st.get("step")
    if not isinstance(parts, dict) or not (own or {"model", "trainer"} <= set(parts)):
        raise CheckpointError(f"checkpoint records best step {step} but not its model")
    return {**base, **parts}


def load_checkpoint(path) -> dict:
    """Read a checkpoint with ``weights_only=True``; clear errors for every bad file."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint not found: {path}")
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - torch raises many kinds for corrupt files
        raise CheckpointError(
            f"{path} is not a readable liquid-stream checkpoint: corrupt, truncated or not a "
            f"torch file ({type(e).__name__})"
        ) from e
    if not isinstance(obj, dict) or obj.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not a liquid-stream checkpoint (format tag missing)")
    if obj.get("version", 0) > VERSION:
        raise CheckpointError(f"{path} has checkpoint version {obj['version']} > {VERSION}")
    for key in ("model_config", "model"):
        if key not in obj:
            raise CheckpointError(f"{path} is incomplete: no {key!r}")
    return obj


def model_from_checkpoint(ckpt: dict | str | os.PathLike) -> tuple[LiquidS4Model, dict]:
    """Rebuild the model (eval mode) and return it with the checkpoint's ``meta``."""
    if not isinstance(ckpt, dict):
        ckpt = load_checkpoint(ckpt)
    try:
        model = LiquidS4Model(**ckpt["model_config"])
        model.load_state_dict(ckpt["model"])
    except (TypeError, RuntimeError, ValueError) as e:
        raise CheckpointError(f"checkpoint does not match its model config: {e}") from e
    return model.eval(), dict(ckpt.get("meta", {}))
