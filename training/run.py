"""Train a run from its config, in Python: what ``liquid-stream train`` does.

    from liquid_stream.training.config import load_config
    from liquid_stream.training.run import train

    cfg = load_config("toy", "tiny", ["train.max_steps=5"])
    summary = train(cfg, "runs/toy")                     # resume="runs/toy/last.pt" continues

:func:`train` builds the task's data and the model (:func:`model_config`), warm-starts the
weights from ``train.init`` when set (:func:`warm_start`; not on resume; the data
constants of that checkpoint are kept, :func:`init_constants`), trains
(:class:`~.trainer.Trainer`, which writes the logs, last.pt and best.pt in ``out``), then
tests best.pt on the test split (``test_metrics.json``). Errors a user can fix before
training starts (missing or bad data, a model the data does not fit, an unusable
``train.init``) raise :class:`RunError` with a one-line message; a bad ``resume``
checkpoint raises :class:`~liquid_stream.nn.checkpoint.CheckpointError`, a NaN/inf loss
:class:`~.trainer.NonFiniteLossError`.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import torch
from torch.utils.data import Dataset

from liquid_stream.nn.checkpoint import CheckpointError, load_checkpoint
from liquid_stream.nn.model import LiquidS4Model

from .config import OptimConfig, TrainConfig, dump_config
from .rng import seed_everything
from .tasks import build_task
from .trainer import Trainer

# What a task builder raises for bad or missing data (a missing file is an OSError).
DATA_ERRORS = (RuntimeError, ValueError, OSError)


class RunError(Exception):
    """A run cannot start: bad data, a model the data does not fit, an unusable
    ``train.init``. The message is one line."""


def train(config: dict, out, resume=None) -> dict:
    """Train the run ``config`` (resolved and validated, as :func:`~.config.load_config`
    returns it) into the folder ``out``; with ``resume``, continue exactly from that
    checkpoint. Returns the trainer's final summary, plus ``test`` (best.pt's metrics on
    the test split) when the task has one. Under torchrun every rank trains; rank 0 alone
    writes files and prints, and tests."""
    out = Path(out)
    trainer, test_set = make_trainer(config, out, resume)
    try:
        summary = trainer.fit()
    finally:
        if trainer.dist.enabled:
            torch.distributed.destroy_process_group()
    if not trainer.dist.is_main:
        return summary
    _say(f"final: {format_metrics(summary)}")
    best = out / "best.pt"
    if test_set is not None and len(test_set) and best.is_file():
        trainer.model.load_state_dict(load_checkpoint(best)["model"])
        summary["test"] = trainer.evaluate(test_set)
        _say(f"test (best.pt): {format_metrics(summary['test'])}")
        (out / "test_metrics.json").write_text(json.dumps(summary["test"], indent=1))
    _say(f"wrote {out}/metrics.csv, curves.png, last.pt, best.pt")
    return summary


def make_trainer(config: dict, out: Path, resume=None) -> tuple[Trainer, Dataset | None]:
    """The run's trainer at step 0 (or at ``resume``'s position), and its test set. The
    data is built (every split checked non-empty) before the run folder is made."""
    seed_everything(config["train"]["seed"])
    optim_cfg, train_cfg = OptimConfig(**config["optim"]), TrainConfig(**config["train"])
    # a warm start keeps the data constants of its init checkpoint (on resume too, so the
    # resumed run rebuilds exactly the model it saved); the weights are loaded only at start
    init_meta = init_constants(train_cfg.init) if train_cfg.init else None
    if init_meta is not None:
        config = inherit_frontend_stats(config, init_meta)
    try:
        train_set, val_set, test_set, meta, loss = build_task(config, stats=_input_stats(init_meta))
    except DATA_ERRORS as e:
        raise RunError(one_line(e)) from e
    if init_meta is not None:  # the output affine the warm-started weights were fitted to
        meta.update({k: init_meta[k] for k in ("target_mean", "target_std") if k in init_meta})
    model = build_model(config, meta)
    if meta.get("spec_augment") is not None:  # training-time feature augmentation
        from .data.speech.spec_augment import SpecAugmentConfig, install

        install(model, SpecAugmentConfig.from_dict(meta["spec_augment"]))
    if init_meta is not None and not resume:
        warm_start(model, train_cfg.init)
    if int(os.environ.get("RANK", "0")) == 0:  # data parallel: rank 0 writes
        out.mkdir(parents=True, exist_ok=True)
        dump_config(config, out / "config.yaml")
    try:
        trainer = Trainer(
            model, train_set, val_set, optim_cfg, train_cfg, out, meta, loss, config=config
        )
    except ValueError as e:  # settings the trainer refuses (e.g. fp16 autocast on the CPU)
        raise RunError(one_line(e)) from e
    if trainer.dist.is_main:
        _say(_header(trainer, config, meta, out))
    if resume:
        trainer.resume(resume)
        if trainer.dist.is_main:
            _say(f"resumed from {resume} at epoch {trainer.epoch}, step {trainer.step}")
    return trainer, test_set


def build_model(config: dict, meta: dict) -> LiquidS4Model:
    """The run's model, sized by the task (``d_input``, ``d_output``) and the config."""
    try:
        return LiquidS4Model(
            d_input=meta["d_input"], d_output=meta["d_output"], **model_config(config, meta)
        )
    except (ValueError, RuntimeError) as e:  # e.g. output_scale of the wrong length
        raise RunError(f"model: {one_line(e)}") from e


def init_constants(path) -> dict:
    """The meta of the ``train.init`` checkpoint ``path``: what the data decided for the
    weights being warm-started (input standardisation, log-mel band statistics, output
    affine of a regression target). A warm start on other data keeps these, so the loaded
    weights see the features and produce the units they were trained with."""
    try:
        return dict(load_checkpoint(path).get("meta") or {})
    except (CheckpointError, RuntimeError, KeyError) as e:
        raise RunError(f"train.init {path}: {one_line(e)}") from e


def inherit_frontend_stats(config: dict, init_meta: dict) -> dict:
    """``config`` with the log-mel band statistics of ``init_meta`` where the config's front
    end gives none (otherwise they would be recomputed from the new train crops)."""
    fe = config["model"].get("frontend")
    stats = init_meta.get("frontend_stats")
    if not fe or not stats or (fe.get("mean") and fe.get("std")):
        return config
    model = {**config["model"], "frontend": {**fe, **stats}}
    return {**config, "model": model}


def _input_stats(init_meta: dict | None):
    """``(input_mean, input_std)`` of the ``train.init`` checkpoint, or None."""
    if init_meta and "input_mean" in init_meta and "input_std" in init_meta:
        return init_meta["input_mean"], init_meta["input_std"]
    return None


def warm_start(model: torch.nn.Module, path) -> None:
    """``train.init``: load the model weights of the checkpoint ``path`` (only those: the
    optimizer, schedule and data position start afresh)."""
    try:
        model.load_state_dict(load_checkpoint(path)["model"])
    except (CheckpointError, RuntimeError, KeyError) as e:
        raise RunError(f"train.init {path}: {one_line(e)}") from e


def model_config(cfg: dict, meta: dict) -> dict:
    """The model's arguments: ``cfg["model"]`` completed by what the data decides (the
    output affine of regression targets, the log-mel front end's band statistics)."""
    m = dict(cfg["model"])
    m.update({k: v for k, v in output_affine(meta).items() if k not in m})
    if "frontend_stats" in meta and m.get("frontend"):
        m["frontend"] = {**m["frontend"], **meta["frontend_stats"]}
    return m


def output_affine(meta: dict) -> dict:
    """Regression tasks: the model's output affine from the train targets' mean / std, so
    the network learns standardised targets while every output (forward, streaming, ONNX)
    is in physical units."""
    if "target_mean" in meta and "target_std" in meta:
        return {
            "output_shift": float(meta["target_mean"]),
            "output_scale": float(meta["target_std"]),
        }
    return {}


def _header(trainer: Trainer, config: dict, meta: dict, out: Path) -> str:
    preset, world = config.get("preset"), trainer.dist.world_size
    n_params = sum(p.numel() for p in trainer.model.parameters())
    n_val = len(trainer.val_set) if trainer.val_set is not None else 0
    return (
        f"task {config['task']}"
        + (f" (preset {preset})" if preset else "")
        + (f" on {meta['source']}" if "source" in meta else "")
        + f": {n_params} parameters, {len(trainer.train_set)} train / {n_val} val examples, "
        f"device {trainer.device}, {trainer.steps_per_epoch} steps/epoch"
        + (f", {world} processes × batch {trainer.batch_size}" if world > 1 else "")
        + f" -> {out}"
    )


def _say(line: str) -> None:
    print(line, flush=True)


def format_metrics(metrics: dict) -> str:
    """``key=value`` for the scalars of ``metrics`` (floats to 4 decimals)."""
    parts = []
    for k, v in metrics.items():
        if isinstance(v, float):
            parts.append(f"{k}={v:.4f}" if math.isfinite(v) else f"{k}={v}")
        elif isinstance(v, int | str) or v is None:
            parts.append(f"{k}={v}")
    return " ".join(parts)


def one_line(e: BaseException | str) -> str:
    """The message of ``e`` on one line (YAML errors, for one, span several); an OSError
    that names a file as ``path: reason`` (not ``[Errno 2] ...``)."""
    if isinstance(e, OSError) and e.strerror:
        text = f"{e.filename}: {e.strerror}" if e.filename else e.strerror
    else:
        text = str(e)
    return " ".join(text.split())
