"""Task configs: one YAML per task, presets, ``--set a.b=value`` overrides, validation.

A task file ``training/configs/<task>.yaml`` has the sections

    task:     the registry name of the data builder (default: the file's stem)
    model:    LiquidS4Model keyword arguments (d_input / d_output come from the task)
    data:     task-specific data options (validated against the task's defaults)
    optim:    lr, weight_decay, ssm_lr, ssm_weight_decay, schedule (cosine|multistep),
              warmup_steps, milestones, gamma, grad_clip, epochs, batch_size, grad_accum
    train:    seed, device (auto|cpu|cuda), amp, amp_dtype, eval_every, max_steps,
              num_workers, save_every_steps, progress, threads, checkpoint_blocks
    presets:  {name: {section: {key: value}}} applied over the base values; a preset's
              ``by_target: {t: {section: ...}}`` applies when data.target is t

Resolution order: built-in defaults ← file ← preset ← ``--set`` overrides (each value
parsed as YAML: ``--set optim.lr=1e-3``, ``--set model.liquid=null``,
``--set optim.milestones=[100,200]``). Unknown sections or keys raise
:class:`ConfigError` naming the key and the closest valid ones.

This module does not import torch at import time (fast CLI ``--help``).
"""

from __future__ import annotations

import copy
import difflib
import inspect
from pathlib import Path
from typing import Any

import yaml

CONFIG_DIR = Path(__file__).resolve().parent / "configs"
SECTIONS = ("task", "description", "model", "data", "optim", "train", "presets")

OPTIM_DEFAULTS: dict[str, Any] = {
    "lr": 0.001,
    "weight_decay": 0.01,
    "ssm_lr": 0.001,
    "ssm_weight_decay": 0.0,
    "schedule": "cosine",  # cosine (per optimizer step, linear warmup) | multistep (per epoch)
    "warmup_steps": 0,
    "milestones": [],  # epochs, multistep only
    "gamma": 0.5,  # multistep only
    "min_lr_ratio": 0.0,  # cosine floor, as a fraction of the peak lr
    "grad_clip": 0.0,  # max global grad norm; 0 = off
    "epochs": 1,
    "batch_size": 8,
    "eval_batch_size": None,  # default: batch_size
    "grad_accum": 1,
}
TRAIN_DEFAULTS: dict[str, Any] = {
    "seed": 0,
    "device": "auto",  # auto | cpu | cuda
    "amp": False,  # autocast on CUDA only (ignored on CPU)
    "amp_dtype": "bf16",  # bf16 | fp16 (fp16 uses a GradScaler)
    "eval_every": 1,  # epochs between validations (the last epoch is always validated)
    "max_steps": None,  # cap on optimizer steps (CI); the schedule still spans `epochs`
    "num_workers": 0,
    "save_every_steps": 0,  # also write last.pt every K optimizer steps (0 = epochs only)
    "progress": True,  # tqdm bars (auto-disabled when not a terminal)
    "plot_every_s": 30.0,  # redraw curves.png at most this often (and at the end)
    "threads": None,  # torch.set_num_threads on CPU (None = leave as is)
    "checkpoint_blocks": False,  # recompute block activations in backward (long L: Path-X)
}
SCHEDULES = ("cosine", "multistep")
DEVICES = ("auto", "cpu", "cuda")
MODEL_RESERVED = ("d_input", "d_output")


class ConfigError(ValueError):
    """A config file, preset or override is invalid."""


def config_path(task: str) -> Path:
    """``training/configs/<task>.yaml``, or ``task`` itself when it is a .yaml path."""
    p = Path(task)
    if p.suffix in (".yaml", ".yml"):
        return p
    return CONFIG_DIR / f"{task}.yaml"


def available_tasks() -> list[str]:
    return sorted(p.stem for p in CONFIG_DIR.glob("*.yaml"))


def _suggest(key: str, valid) -> str:
    close = difflib.get_close_matches(key, list(valid), n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    return f"{hint} Valid keys: {', '.join(sorted(valid))}"


def parse_value(text: str) -> Any:
    """A ``--set`` value, parsed as YAML (``1e-3`` → float, ``null`` → None, lists ...)."""
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    # PyYAML (YAML 1.1) reads "1e-3" as a string; accept it as a float.
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def parse_override(item: str) -> tuple[list[str], Any]:
    if "=" not in item:
        raise ConfigError(f"override {item!r} must look like section.key=value")
    key, _, raw = item.partition("=")
    parts = [p for p in key.strip().split(".") if p]
    if len(parts) < 2:
        raise ConfigError(f"override {item!r}: the key must be section.key (e.g. optim.lr)")
    return parts, parse_value(raw.strip())


def _merge(base: dict, upd: dict, where: str) -> None:
    for k, v in upd.items():
        if isinstance(v, dict) and isinstance(base.get(k), dict) and k not in ("milestones",):
            _merge(base[k], v, f"{where}.{k}")
        else:
            base[k] = copy.deepcopy(v)


def _model_keys() -> set[str]:
    from liquid_stream.model import LiquidS4Model

    sig = inspect.signature(LiquidS4Model.__init__)
    return {k for k in sig.parameters if k != "self"} - set(MODEL_RESERVED)


def validate(cfg: dict, data_defaults: dict | None = None) -> dict:
    """Raise :class:`ConfigError` on unknown sections/keys or bad values; returns ``cfg``."""
    for section in cfg:
        if section not in SECTIONS + ("preset",):
            raise ConfigError(f"unknown config section {section!r}" + _suggest(section, SECTIONS))
    checks = {"optim": OPTIM_DEFAULTS, "train": TRAIN_DEFAULTS, "model": _model_keys()}
    if data_defaults is not None:
        checks["data"] = data_defaults
    for section, valid in checks.items():
        for key in cfg.get(section) or {}:
            if key not in valid:
                raise ConfigError(
                    f"unknown key {section}.{key}" + _suggest(key, valid)
                    + (" (d_input/d_output come from the task)" if key in MODEL_RESERVED else "")
                )  # fmt: skip
    o, t = cfg["optim"], cfg["train"]
    if o["schedule"] not in SCHEDULES:
        raise ConfigError(f"optim.schedule must be one of {SCHEDULES}, got {o['schedule']!r}")
    if t["device"] not in DEVICES:
        raise ConfigError(f"train.device must be one of {DEVICES}, got {t['device']!r}")
    if t["amp_dtype"] not in ("bf16", "fp16"):
        raise ConfigError(f"train.amp_dtype must be bf16 or fp16, got {t['amp_dtype']!r}")
    for key in ("epochs", "batch_size", "grad_accum"):
        if not isinstance(o[key], int) or o[key] < 1:
            raise ConfigError(f"optim.{key} must be an integer >= 1, got {o[key]!r}")
    for key in ("lr", "weight_decay", "ssm_lr", "ssm_weight_decay", "grad_clip", "gamma"):
        if not isinstance(o[key], int | float) or o[key] < 0:
            raise ConfigError(f"optim.{key} must be a number >= 0, got {o[key]!r}")
    steps = t["max_steps"]
    if steps is not None and (not isinstance(steps, int) or steps < 1):
        raise ConfigError(f"train.max_steps must be null or an integer >= 1, got {steps!r}")
    if not isinstance(o["milestones"], list):
        raise ConfigError(f"optim.milestones must be a list of epochs, got {o['milestones']!r}")
    return cfg


def load_config(
    task: str,
    preset: str | None = None,
    overrides: list[str] | tuple[str, ...] = (),
    data_defaults: dict | None = None,
) -> dict:
    """Resolve a task config: defaults ← ``configs/<task>.yaml`` ← preset ← overrides.

    ``data_defaults`` (the task builder's defaults) validates and fills ``data:``; when
    None it is looked up in :data:`liquid_stream.training.tasks.TASKS`.
    """
    path = config_path(task)
    if not path.is_file():
        raise ConfigError(
            f"no config for task {task!r} ({path}); available: {', '.join(available_tasks())}"
        )
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: invalid YAML: {e}") from e
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: top level must be a mapping of sections")
    for section in raw:
        if section not in SECTIONS:
            raise ConfigError(f"{path}: unknown section {section!r}" + _suggest(section, SECTIONS))
    presets = raw.pop("presets", None) or {}
    cfg: dict[str, Any] = {
        "task": raw.get("task", path.stem),
        "description": raw.get("description", ""),
        "model": {},
        "data": {},
        "optim": copy.deepcopy(OPTIM_DEFAULTS),
        "train": copy.deepcopy(TRAIN_DEFAULTS),
        "preset": preset,
    }
    if data_defaults is None:
        from .tasks import TASKS, data_defaults_for

        if cfg["task"] not in TASKS:
            raise ConfigError(
                f"{path}: task {cfg['task']!r} is not registered; known: {', '.join(TASKS)}"
            )
        data_defaults = data_defaults_for(cfg["task"])
    cfg["data"] = copy.deepcopy(data_defaults)
    body = {k: v for k, v in raw.items() if k not in ("task", "description")}
    layers = [(f"file {path}", body)]
    if preset is not None:
        if preset not in presets:
            raise ConfigError(
                f"unknown preset {preset!r} for task {cfg['task']!r}; "
                f"available: {', '.join(presets) or '(none)'}"
            )
        chosen = dict(presets[preset] or {})
        by_target = chosen.pop("by_target", None) or {}
        layers.append((f"preset {preset!r}", chosen))
    else:
        by_target = {}
    _apply_layers(cfg, layers, data_defaults)
    if by_target:  # per-target values of a preset (e.g. bidmc lr for rr / spo2)
        target = apply_overrides(copy.deepcopy(cfg), overrides, data_defaults)["data"].get("target")
        if target in by_target:
            _apply_layers(cfg, [(f"preset {preset!r} target {target!r}", by_target[target])],
                          data_defaults)  # fmt: skip
    return apply_overrides(cfg, overrides, data_defaults)


def _apply_layers(cfg: dict, layers: list, data_defaults: dict) -> None:
    for where, layer in layers:
        for section, values in layer.items():
            if section not in ("model", "data", "optim", "train"):
                raise ConfigError(
                    f"{where}: unknown section {section!r}"
                    + _suggest(section, ("model", "data", "optim", "train"))
                )
            if not isinstance(values, dict):
                raise ConfigError(f"{where}: section {section!r} must be a mapping")
            _check_keys(section, values, data_defaults, where)
            _merge(cfg[section], values, section)


def apply_overrides(cfg: dict, overrides, data_defaults: dict) -> dict:
    """Apply ``section.key=value`` overrides to ``cfg`` (in place) and validate it."""
    for item in overrides:
        parts, value = parse_override(item)
        section, key = parts[0], parts[1]
        if section not in ("model", "data", "optim", "train"):
            raise ConfigError(
                f"override {item!r}: unknown section {section!r}"
                + _suggest(section, ("model", "data", "optim", "train"))
            )
        _check_keys(section, {key: value}, data_defaults, f"override {item!r}")
        target = cfg[section]
        for p in parts[1:-1]:
            target = target.setdefault(p, {})
        target[parts[-1]] = value
    return validate(cfg, data_defaults)


def resume_config(saved: dict, task: str, overrides=()) -> dict:
    """The config stored in a checkpoint, with CLI ``overrides`` applied: a resumed run
    continues the run it comes from, whatever the task YAML or presets say now."""
    from .tasks import data_defaults_for

    if saved.get("task") != task and Path(task).stem != saved.get("task"):
        raise ConfigError(f"the checkpoint is a {saved.get('task')!r} run, not {task!r}")
    return apply_overrides(copy.deepcopy(saved), overrides, data_defaults_for(saved["task"]))


def _check_keys(section: str, values: dict, data_defaults: dict, where: str) -> None:
    valid = {
        "optim": OPTIM_DEFAULTS,
        "train": TRAIN_DEFAULTS,
        "data": data_defaults,
        "model": None,
    }[section]
    if valid is None:
        valid = _model_keys()
    for key in values:
        if key not in valid:
            raise ConfigError(
                f"{where}: unknown key {section}.{key}" + _suggest(key, valid)
                + (" (d_input/d_output come from the task)" if key in MODEL_RESERVED else "")
            )  # fmt: skip


def dump_config(cfg: dict, path) -> None:
    Path(path).write_text(yaml.safe_dump(cfg, sort_keys=False))
