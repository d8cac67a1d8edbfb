"""Model checkpoints: plain tensors + plain config, written atomically.

A checkpoint is a dict loadable with ``torch.load(path, weights_only=True)``:

    {"format": "liquid-stream/checkpoint", "version": 1,
     "model_config": {...LiquidS4Model kwargs...},
     "model": state_dict,
     "meta": {"meta_schema": 1, "task": ..., "labels": [...], "sample_rate": ...,
              "input_mean": ..., "input_std": ..., "d_input": ..., "d_output": ..., ...},
     ... (trainer state: optimizer, scheduler, RNG, epoch — added by the trainer)}

``meta`` is :meth:`ModelMeta.to_dict() <liquid_stream.runtime.meta.ModelMeta.to_dict>`: its keys
and their kinds are the schema of :mod:`liquid_stream.runtime.meta` (the task's keys, e.g.
``target``, ``units``, ``channels``, ``target_mean`` / ``target_std`` for ``bidmc``;
``silence_class``, ``class_weights``, ``frontend_stats`` for ``speech-stream``; the tasks'
provenance). A checkpoint without ``meta_schema`` predates the schema (version 0).

The trainer's ``last.pt`` is the single source of truth of a run: it also carries the best
checkpoint so far under ``BEST_KEY`` — ``{"metrics": ...}`` alone when the best is this
checkpoint's own state (``trainer.best_step == trainer.step``), else
``{"model": ..., "trainer": ..., "metrics": ...}`` — so :func:`embedded_best` can rebuild
``best.pt`` after a crash between the two writes.

No pickled code is ever stored or loaded.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from ..io.atomic import atomic_open
from .model import LiquidS4Model

FORMAT = "liquid-stream/checkpoint"
VERSION = 1
BEST_KEY = "best_checkpoint"


class CheckpointError(ValueError):
    """A checkpoint file is missing, unreadable, corrupt or of the wrong kind."""


def atomic_torch_save(obj, path: str | os.PathLike) -> None:
    """torch.save to a temporary file in the same folder, fsync, then rename over ``path``
    (:func:`liquid_stream.io.atomic.atomic_open`)."""
    with atomic_open(path, fsync=True) as f:
        torch.save(obj, f)


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


def split_records(path, split: str = "test") -> list[Path]:
    """The recordings of a checkpoint's ``split`` (``val`` / ``test``), as paths under the
    data root it was trained on: the names its task recorded in ``meta["records"]`` (record
    protocol, e.g. ``bidmc``), so a held-out evaluation reads exactly the unseen records."""
    meta = load_checkpoint(path).get("meta", {})
    names = (meta.get("records") or {}).get(split) or []
    if not names or not meta.get("data_root"):
        raise CheckpointError(f"{path} lists no {split} recordings")
    return [Path(meta["data_root"]) / n for n in names]


def model_from_checkpoint(ckpt: dict | str | os.PathLike) -> tuple[LiquidS4Model, dict]:
    """Rebuild the model (eval mode) and return it with the checkpoint's ``meta``.

    Raises :class:`CheckpointError` (one line) when the config does not build a model or
    the weights do not fit it (counts of missing / unexpected / mis-sized tensors, and the
    first of them)."""
    where = ""
    if not isinstance(ckpt, dict):
        where = f"{ckpt}: "
        ckpt = load_checkpoint(ckpt)
    head = f"{where}checkpoint does not match its model config"
    config, weights = ckpt["model_config"], ckpt["model"]
    if not isinstance(config, dict) or not isinstance(weights, dict):
        raise CheckpointError(f"{head}: 'model_config' and 'model' must be dicts")
    try:
        model = LiquidS4Model(**config)
    except (TypeError, RuntimeError, ValueError) as e:
        raise CheckpointError(f"{head}: {' '.join(str(e).split())}") from e
    problem = _weights_misfit(model.state_dict(), weights)
    if problem:
        raise CheckpointError(f"{head}: the weights do not fit it: {problem}")
    try:
        model.load_state_dict(weights)
    except (TypeError, RuntimeError, ValueError) as e:
        raise CheckpointError(f"{head}: {' '.join(str(e).split())}") from e
    return model.eval(), dict(ckpt.get("meta", {}))


def _weights_misfit(expected: dict, given: dict) -> str:
    """'' when ``given`` has exactly the keys and shapes of ``expected``, else one line:
    ``2 missing, 1 unexpected, 1 size mismatch (first: ...)``."""
    missing = [k for k in expected if k not in given]
    unexpected = [k for k in given if k not in expected]
    sized = [
        k
        for k in expected
        if k in given and (not torch.is_tensor(given[k]) or given[k].shape != expected[k].shape)
    ]
    parts = [
        f"{len(v)} {what}"
        for v, what in ((missing, "missing"), (unexpected, "unexpected"), (sized, "size mismatch"))
        if v
    ]
    if not parts:
        return ""
    if sized:
        k = sized[0]
        got = tuple(given[k].shape) if torch.is_tensor(given[k]) else type(given[k]).__name__
        first = f"{k} is {got} in the checkpoint, {tuple(expected[k].shape)} in the model"
    else:
        first = f"{(missing or unexpected)[0]} {'missing' if missing else 'unexpected'}"
    return f"{', '.join(parts)} (first: {first})"
