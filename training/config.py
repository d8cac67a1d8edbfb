"""Task configs: one YAML per task, presets, ``--set a.b=value`` overrides, validation.

A task file ``training/configs/<task>.yaml`` has the sections

    task:     the registry name of the data builder (default: the file's stem)
    model:    LiquidS4Model keyword arguments (d_input / d_output come from the task)
    data:     task-specific data options (validated against the task's defaults)
    optim:    the fields of :class:`OptimConfig` (lr, schedule, batch_size, epochs, ...)
    train:    the fields of :class:`TrainConfig` (seed, device, amp, max_steps, init, ...)
    presets:  {name: {section: {key: value}}} applied over the base values; a preset's
              ``by_target: {t: {section: ...}}`` applies when data.target is t

Resolution order: built-in defaults ← file ← preset ← ``--set`` overrides (each value
parsed as YAML: ``--set optim.lr=1e-3``, ``--set model.liquid=null``,
``--set optim.milestones=[100,200]``). Unknown sections or keys raise
:class:`ConfigError` naming the key and the closest valid ones. Every value is then
checked (:func:`validate`: type, range, the choices the consuming code accepts, rules
between fields, split sizes that follow from the config), so a bad value is one error
naming its field before any data is loaded, model built or run folder written. The model
sizes are bounded by :data:`MAX_MODEL_PARAMETERS` (10⁹ parameters, counted by
:func:`model_parameters`): ``--set model.d_model=1e9`` is a config error, not an
out-of-memory kill. The trainer takes the optim and train sections as the dataclasses
(``OptimConfig(**cfg["optim"])``), where each default is defined once; configs stored in
checkpoints stay plain dicts.

This module does not import torch at import time (fast CLI ``--help``).
"""

from __future__ import annotations

import copy
import difflib
import inspect
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

CONFIG_DIR = Path(__file__).resolve().parent / "configs"
SECTIONS = ("task", "description", "model", "data", "optim", "train", "presets")


@dataclass(frozen=True)
class OptimConfig:
    """The ``optim:`` section: optimizer, learning-rate schedule, batch, epochs."""

    lr: float = 0.001
    weight_decay: float = 0.01
    ssm_lr: float = 0.001
    ssm_weight_decay: float = 0.0
    schedule: str = "cosine"  # cosine (per optimizer step, linear warmup) | multistep (per epoch)
    warmup_steps: int = 0
    milestones: list[int] = field(default_factory=list)  # epochs, multistep only
    gamma: float = 0.5  # multistep only
    min_lr_ratio: float = 0.0  # cosine floor, as a fraction of the peak lr
    grad_clip: float = 0.0  # max global grad norm; 0 = off
    epochs: int = 1
    batch_size: int = 8
    eval_batch_size: int | None = None  # default: batch_size
    grad_accum: int = 1
    # decay d of an exponential moving average of the weights (0 = off): after each step
    # w_avg <- d' w_avg + (1 - d') w with d' = min(d, (1 + t) / (10 + t)); validation,
    # best.pt and the test use w_avg, last.pt keeps both (exact resume)
    ema: float = 0.0
    # α of a regression loss's target balance (0 = off): each scored target y weighs
    # (p(y) / p̄)^(−α), p the smoothed density of the training targets (training/metrics.py
    # TargetBalance); validation, best.pt's choice and the metrics stay unweighted
    target_balance: float = 0.0


@dataclass(frozen=True)
class TrainConfig:
    """The ``train:`` section: how the run executes, logs and saves."""

    seed: int = 0
    device: str = "auto"  # auto | cpu | cuda
    amp: bool = False  # autocast: CUDA bf16 / fp16, CPU bf16 (see amp_dtype)
    amp_dtype: str = "bf16"  # bf16 | fp16 (CUDA only; fp16 uses a GradScaler)
    eval_every: int = 1  # epochs between validations (the last epoch is always validated)
    max_steps: int | None = None  # cap on optimizer steps (CI); the schedule still spans `epochs`
    num_workers: int = 0
    save_every_steps: int = 0  # also write last.pt every K optimizer steps (0 = epochs only)
    progress: bool = True  # tqdm bars (auto-disabled when not a terminal)
    plot_every_s: float = 30.0  # redraw curves.png at most this often (and at the end)
    threads: int | None = None  # torch.set_num_threads on CPU (None = leave as is)
    checkpoint_blocks: bool = False  # recompute block activations in backward (long L: Path-X)
    init: str | None = None  # warm start: model weights from this checkpoint (fresh optimizer)


# The keys and defaults of the two sections as config dicts (what a config file holds).
OPTIM_DEFAULTS: dict[str, Any] = asdict(OptimConfig())
TRAIN_DEFAULTS: dict[str, Any] = asdict(TrainConfig())
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
    from liquid_stream.nn.model import LiquidS4Model

    sig = inspect.signature(LiquidS4Model.__init__)
    return {k for k in sig.parameters if k != "self"} - set(MODEL_RESERVED)


def validate(cfg: dict, data_defaults: dict | None = None) -> dict:
    """Raise :class:`ConfigError` on unknown sections/keys or bad values; returns ``cfg``.

    Every field of ``model``, ``data``, ``optim`` and ``train`` is checked against its spec
    (:data:`OPTIM_FIELDS`, :data:`TRAIN_FIELDS`, :func:`model_fields`, :func:`data_fields`:
    type, range, allowed choices taken from the code that consumes them), then the rules
    that tie fields together; the message names the field, e.g. ``model.d_model must be a
    positive integer, got 'abc'``. Integral floats (``1e3``) given for integer fields are
    stored as ints and ``model.liquid: none`` as null."""
    for section in cfg:
        if section not in SECTIONS + ("preset",):
            raise ConfigError(f"unknown config section {section!r}" + _suggest(section, SECTIONS))
    checks = {"optim": OPTIM_DEFAULTS, "train": TRAIN_DEFAULTS, "model": _model_keys()}
    if data_defaults is not None:
        checks["data"] = data_defaults
    for section, valid in checks.items():
        values = cfg.get(section)
        if values is None:
            continue
        if not isinstance(values, dict):
            raise ConfigError(f"section {section!r} must be a mapping, got {values!r}")
        for key in values:
            if key not in valid:
                raise ConfigError(
                    f"unknown key {section}.{key}"
                    + _suggest(key, valid)
                    + (" (d_input/d_output come from the task)" if key in MODEL_RESERVED else "")
                )
    _check_fields("optim", cfg["optim"], OPTIM_FIELDS)
    _check_fields("train", cfg["train"], TRAIN_FIELDS)
    _check_fields("model", cfg.get("model") or {}, model_fields())
    _check_model(cfg.get("model") or {})
    if data_defaults is not None:
        task = str(cfg.get("task") or "")
        _check_fields("data", cfg.get("data") or {}, data_fields(task, data_defaults))
        _check_data(task, cfg.get("data") or {})
    return cfg


# ------------------------------------------------------------------ field specs
# A spec is (what, coerce): ``what`` completes "section.key must be ...", ``coerce(value)``
# returns the value to store or raises _Bad.


class _Bad(Exception):
    """A value does not match its spec."""


class Spec:
    """``what`` (a string, or a function giving it when a message is made) and ``coerce``."""

    def __init__(self, what, coerce):
        self._what, self.coerce = what, coerce

    @property
    def what(self) -> str:
        return self._what() if callable(self._what) else self._what


def _nullable(spec: Spec, null: bool) -> Spec:
    if not null:
        return spec
    return Spec(lambda: f"null or {spec.what}", lambda v: None if v is None else spec.coerce(v))


def _as_int(v: Any) -> int:
    if isinstance(v, bool):
        raise _Bad
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    raise _Bad


def _as_number(v: Any) -> float | int:
    if isinstance(v, bool) or not isinstance(v, int | float) or v != v or abs(v) == float("inf"):
        raise _Bad
    return v


def integer(lo: int | None = None, hi: int | None = None, null: bool = False) -> Spec:
    """An int (an integral float is accepted and stored as an int) in [lo, hi]."""
    if lo == 1 and hi is None:
        what = "a positive integer"
    elif lo is not None and hi is not None:
        what = f"an integer in {lo}..{hi}"
    elif lo is not None:
        what = f"an integer >= {lo}"
    else:
        what = "an integer"

    def coerce(v):
        v = _as_int(v)
        if (lo is not None and v < lo) or (hi is not None and v > hi):
            raise _Bad
        return v

    return _nullable(Spec(what, coerce), null)


def number(
    lo: float | None = None,
    hi: float | None = None,
    *,
    lo_open: bool = False,
    hi_open: bool = False,
    null: bool = False,
) -> Spec:
    """A finite int or float in the interval given (open ends where asked)."""
    if lo is not None and hi is not None:
        what = f"a number in {'(' if lo_open else '['}{lo:g}, {hi:g}{')' if hi_open else ']'}"
    elif lo is not None:
        what = f"a number {'>' if lo_open else '>='} {lo:g}"
    else:
        what = "a finite number"

    def coerce(v):
        v = _as_number(v)
        if lo is not None and (v < lo or (lo_open and v == lo)):
            raise _Bad
        if hi is not None and (v > hi or (hi_open and v == hi)):
            raise _Bad
        return v

    return _nullable(Spec(what, coerce), null)


def boolean() -> Spec:
    def coerce(v):
        if not isinstance(v, bool):
            raise _Bad
        return v

    return Spec("true or false", coerce)


def choice(options, null: bool = False) -> Spec:
    """One of ``options`` (a tuple, or a function returning one, called at check time);
    with ``null``, also None (written null, or none)."""

    def get() -> tuple:
        return tuple(options() if callable(options) else options)

    def coerce(v):
        if null and (v is None or (isinstance(v, str) and v.lower() in ("none", "null"))):
            return None
        if isinstance(v, bool) or not isinstance(v, str | int | float) or v not in get():
            raise _Bad
        return v

    def what() -> str:
        shown = ", ".join(str(o) for o in get())
        return f"one of {'null (none), ' if null else ''}{shown}"

    return Spec(what, coerce)


def path(null: bool = True) -> Spec:
    def coerce(v):
        if isinstance(v, Path):
            v = str(v)
        if not isinstance(v, str) or not v.strip():
            raise _Bad
        return v

    return _nullable(Spec("a path (string)", coerce), null)


def number_list(what: str, item: Spec, length: int | None = None, nonempty: bool = False) -> Spec:
    def coerce(v):
        if not isinstance(v, list | tuple):
            raise _Bad
        if (length is not None and len(v) != length) or (nonempty and not v):
            raise _Bad
        return [item.coerce(x) for x in v]

    return Spec(what, coerce)


def scalar_or_list(item: Spec) -> Spec:
    """A number, or a non-empty list of numbers (one per output), each passing ``item``."""

    def coerce(v):
        if isinstance(v, list | tuple):
            if not v:
                raise _Bad
            return [item.coerce(x) for x in v]
        return item.coerce(v)

    return Spec(f"{item.what}, or a non-empty list of them", coerce)


def _strings(nonempty: bool = True) -> Spec:
    def coerce(v):
        if not isinstance(v, list | tuple) or (nonempty and not v):
            raise _Bad
        if not all(isinstance(x, str) and x for x in v):
            raise _Bad
        return list(v)

    return Spec("a non-empty list of names" if nonempty else "a list of names", coerce)


def _nonzero(spec: Spec) -> Spec:
    def coerce(v):
        v = spec.coerce(v)
        if v == 0:
            raise _Bad
        return v

    return Spec(f"{spec.what}, not 0", coerce)


def mapping(null: bool = True) -> Spec:
    def coerce(v):
        if not isinstance(v, dict):
            raise _Bad
        return v

    return _nullable(Spec("a mapping of settings", coerce), null)


def _check_fields(section: str, values: dict, fields: dict[str, Spec]) -> None:
    for key, value in values.items():
        spec = fields.get(key)
        if spec is None:  # a key this table does not know yet (the tests require one);
            continue  # model keys are still checked by building the model (_check_model)
        try:
            values[key] = spec.coerce(value)
        except ConfigError:  # a spec that explains itself
            raise
        except (_Bad, TypeError, ValueError):
            raise ConfigError(f"{section}.{key} must be {spec.what}, got {value!r}") from None


OPTIM_FIELDS: dict[str, Spec] = {
    "lr": number(0),
    "weight_decay": number(0),
    "ssm_lr": number(0),
    "ssm_weight_decay": number(0),
    "schedule": choice(SCHEDULES),
    "warmup_steps": integer(0),
    "milestones": number_list("a list of epochs (integers >= 1)", integer(1)),
    "gamma": number(0),
    "min_lr_ratio": number(0, 1),
    "grad_clip": number(0),
    "epochs": integer(1),
    "batch_size": integer(1),
    "eval_batch_size": integer(1, null=True),
    "grad_accum": integer(1),
    "ema": number(0, 1, hi_open=True),
    "target_balance": number(0, 1),
}
TRAIN_FIELDS: dict[str, Spec] = {
    "seed": integer(),
    "device": choice(DEVICES),
    "amp": boolean(),
    "amp_dtype": choice(("bf16", "fp16")),
    "eval_every": integer(1),
    "max_steps": integer(1, null=True),
    "num_workers": integer(0),
    "save_every_steps": integer(0),
    "progress": boolean(),
    "plot_every_s": number(0),
    "threads": integer(1, null=True),
    "checkpoint_blocks": boolean(),
    "init": path(null=True),
}
# LiquidS4 (liquid_stream/nn/layer.py) takes these; it names no constant for them.
SSM_MODES = ("dplr", "diag")
DISCRETISATIONS = ("bilinear", "zoh")  # zoh: diag only (liquid_stream.nn.dplr / diag)


def _d_state() -> Spec:
    """``model.d_state``: an integer in 2 .. MAX_D_STATE (the dense LegS initialisation's
    bound, :mod:`liquid_stream.nn.hippo`: ``d_state=100000`` would need a 149 GiB matrix)."""
    from liquid_stream.nn.hippo import MAX_D_STATE

    return Spec(
        f"an integer >= 2 and <= {MAX_D_STATE} (MAX_D_STATE in liquid_stream/nn/hippo.py: "
        "the LegS initialisation eigendecomposes a dense d_state x d_state matrix)",
        integer(2, MAX_D_STATE).coerce,
    )


def model_fields() -> dict[str, Spec]:
    """The spec of every ``model:`` key (the arguments of ``LiquidS4Model``), with the
    choices the model code accepts (:mod:`liquid_stream.nn.model`, ``.liquid``, ``.cauchy``)."""
    from liquid_stream.nn.cauchy import BACKENDS
    from liquid_stream.nn.diag import DIAG_INITS
    from liquid_stream.nn.liquid import LIQUID_KINDS, MAX_LIQUID_ORDER
    from liquid_stream.nn.model import DECODERS, NORMS

    return {
        "d_model": integer(1),
        "n_layers": integer(1),
        "d_state": _d_state(),
        "mode": choice(SSM_MODES),
        "liquid": choice(tuple(k for k in LIQUID_KINDS if k), null=None in LIQUID_KINDS),
        "liquid_order": integer(2, MAX_LIQUID_ORDER),
        "liquid_len": integer(1),
        "dt_min": number(0, lo_open=True),
        "dt_max": number(0, lo_open=True),
        "bidirectional": boolean(),
        "init": choice(DIAG_INITS),
        "disc": choice(DISCRETISATIONS),
        "backend": choice(BACKENDS),
        "norm": choice(NORMS),
        "prenorm": boolean(),
        "dropout": number(0, 1, hi_open=True),
        "decoder": choice(DECODERS),
        "decoder_window": integer(1),
        "output_scale": scalar_or_list(_nonzero(number())),
        "output_shift": scalar_or_list(number()),
        "frontend": mapping(),  # its fields: checked by the model itself (_check_model)
    }


# A sanity bound on the model's size (the presets have at most ~1.1·10⁷ parameters): 10⁹
# parameters are 4 GB of float32 weights, ~16 GB with gradients and AdamW's moments.
MAX_MODEL_PARAMETERS = 10**9


def model_parameters(m: dict) -> int:
    """The parameter count of a LiquidS4Model with the (complete) arguments ``m``, less its
    encoder and head (d_input / d_output come from the task): per block 2H² + 6H (GLU
    output, norm, D, Δ) + H·N·(2 + C + P) (Λ and B, C per direction C, P for dplr), a
    final norm, and the pair decoder's 4H² + H; H = d_model, N = d_state."""
    H, N, L = m["d_model"], m["d_state"], m["n_layers"]
    per_block = (
        2 * H * H + 6 * H + H * N * (2 + (2 if m["bidirectional"] else 1) + (m["mode"] == "dplr"))
    )
    return L * per_block + 2 * H + (4 * H * H + H if m["decoder"] == "pair" else 0)


def _check_model(m: dict) -> None:
    """The rules between model fields (those LiquidS4 enforces when it is built), then a
    tiny model built with the other fields as given, so that whatever the model itself
    refuses is a config error now, before any data is loaded or any file written."""
    import torch

    from liquid_stream.nn.model import LiquidS4Model

    params = inspect.signature(LiquidS4Model.__init__).parameters.items()
    defaults = {k: p.default for k, p in params if p.default is not inspect.Parameter.empty}
    v = {**defaults, **m}
    n = model_parameters(v)
    if n > MAX_MODEL_PARAMETERS:
        raise ConfigError(
            f"model: {n:.2g} parameters (model.d_model={v['d_model']}, model.n_layers="
            f"{v['n_layers']}, model.d_state={v['d_state']}) exceed the limit of "
            f"{MAX_MODEL_PARAMETERS:.0e} (MAX_MODEL_PARAMETERS in training/config.py)"
        )
    if v["dt_min"] > v["dt_max"]:
        raise ConfigError(
            f"model.dt_min must be <= model.dt_max, got {v['dt_min']!r} > {v['dt_max']!r}"
        )
    if v["liquid"] == "ltc" and (v["mode"] != "diag" or v["bidirectional"]):
        raise ConfigError(
            "model.liquid=ltc (the causal diagonal recurrence) needs model.mode=diag and "
            f"model.bidirectional=false, got mode={v['mode']!r}, "
            f"bidirectional={v['bidirectional']!r}"
        )
    if v["mode"] == "dplr" and v["init"] != "legs":
        raise ConfigError(
            f"model.mode=dplr is initialised with S4-LegS only: model.init must "
            f"be legs, got {v['init']!r} (lin / inv are for mode=diag)"
        )
    if v["mode"] == "dplr" and v["disc"] != "bilinear":
        raise ConfigError(
            f"model.mode=dplr supports only model.disc=bilinear, got {v['disc']!r} "
            "(zoh is for mode=diag)"
        )
    lists = [len(x) for x in (v["output_scale"], v["output_shift"]) if isinstance(x, list)]
    with torch.random.fork_rng(devices=[]):  # leaves the caller's random numbers alone
        try:
            # the smallest such model (its sizes are checked above): a few milliseconds
            small = {**m, "n_layers": 1, "d_model": 1, "d_state": 2}
            LiquidS4Model(d_input=1, d_output=max(lists, default=1), **small)
        except (ValueError, TypeError, RuntimeError) as e:
            raise ConfigError(f"model: {' '.join(str(e).split())}") from None


def _speech_subsets():
    from .data.speech.speech import SUBSETS

    return tuple(SUBSETS)


def _speech_clip_ends():
    from .data.speech.speech import CLIP_ENDS

    return CLIP_ENDS


def _speech_rates():
    from .data.speech.speech import SR

    return (SR,)


def _bidmc_targets():
    from liquid_stream.io.bidmc_vocab import TARGETS

    return tuple(TARGETS)


def _from_tasks(name: str) -> tuple:
    from . import tasks

    return tuple(getattr(tasks, name))


def _image_modes():
    from .data.lra.images import MODES

    return MODES


def _difficulties():
    from .data.lra.pathfinder import DIFFICULTIES

    return tuple(DIFFICULTIES)


def _min_per_word() -> int:
    """The fewest clips per word with which the generator fills every split."""
    from .data.speech.speech_synth import MIN_PER_WORD

    return MIN_PER_WORD


def _per_word() -> Spec:
    """``synth_per_word``: enough clips per word for the generator to fill every split."""

    def what() -> str:
        return integer(_min_per_word()).what + " (fewer leave the val / test splits empty)"

    return Spec(what, lambda v: integer(_min_per_word()).coerce(v))


# The ``data:`` keys of every task (training/tasks.py data_defaults), by name; a task whose
# key means something else has its own entry in TASK_DATA_FIELDS.
DATA_FIELDS: dict[str, Spec] = {
    "root": path(),
    "seed": integer(),
    "n_train": integer(1),
    "n_val": integer(1),
    "n_test": integer(1),
    "length": integer(1),
    "sample_rate": integer(1),
    "noise": number(0),
    # speech / speech-stream
    "subset": choice(_speech_subsets),
    "max_train_per_class": integer(1, null=True),
    "max_eval_per_class": integer(1, null=True),
    "synth_per_word": _per_word(),
    "normalizer_per_class": integer(1, null=True),
    "augment": boolean(),
    "label_tail_ms": number(),  # < 0: the label starts that long after the speech's end
    "label_hold_ms": number(0),
    "clip_end": choice(_speech_clip_ends),
    "gap_ms": number_list("[lo, hi] in ms with 0 <= lo <= hi", number(0), length=2),
    "keyword_prob": number(0, 1),
    "noise_prob": number(0, 1),
    "noise_max_gain": number(0),
    "silence_weight": number(0, lo_open=True),
    # bidmc
    "format": choice(lambda: _from_tasks("BIDMC_FORMATS")),
    "target": choice(_bidmc_targets),
    "protocol": choice(lambda: _from_tasks("BIDMC_PROTOCOLS")),
    "channels": _strings(),
    "window": integer(1),
    "hop": integer(1),
    "min_valid": number(0, 1),
    "sim": choice(lambda: _from_tasks("BIDMC_SIMS")),
    "sim_families": _strings(),
    "sim_records": integer(1),  # each simulator refuses past its own cap (names: bidmcNN, bidmcN+)
    "sim_minutes": number(0, lo_open=True),
    "sim_seed": integer(),
    "max_train": integer(1, null=True),
    "max_eval": integer(1, null=True),
    "crop_s": number(0, lo_open=True, null=True),  # bidmc: train on long crops (bidmc_crops)
    "crop_hop_s": number(0, lo_open=True),
    "channel_off": number(0, 1),  # bidmc crops: P(one channel held flat over a stretch)
    "pulse_eq": number(0, 1),  # bidmc crops: P(each channel through a random equaliser)
    "pulse_eq_db": number(0, null=True),  # its knot gains within ± this, dB (null: GAIN_DB)
    "beats": number(0),  # bidmc crops: weight of the per-frame beat-density loss (HR)
    "beats_shift_s": number(0, 2),  # its bumps follow the R peaks by this (s; PPG: + PTT)
    "beats_box_s": number(0, 60),  # scored as counts over this causal box (s; 0: per frame)
    "split_seed": integer(null=True),  # bidmc: the record split's seed (null: train.seed)
    "extra_train": _strings(nonempty=False),  # bidmc: record folders for the train split only
    # listops
    "max_length": integer(1),
    "min_length": integer(0),
    "max_depth": integer(1),
    "max_args": integer(2),
    # images
    "source": choice(lambda: _from_tasks("IMAGE_SOURCES")),
    "mode": choice(_image_modes),
    "val_fraction": number(0, 1, lo_open=True, hi_open=True),  # 0 would leave val empty
    # pathfinder
    "resolution": integer(1),
    "difficulty": choice(_difficulties),
    "n_images": integer(3),
    "n_distractors": integer(0, null=True),
    "test_fraction": number(0, 1, lo_open=True, hi_open=True),
}
_SPEECH_DATA = {"sample_rate": choice(_speech_rates)}  # Speech Commands is 16 kHz


def _settings_mapping(field: str, check, what: str) -> Spec:
    """``data.<field>``: null, or a mapping that ``check`` accepts (it raises ValueError
    with the reason, which becomes the one-line ConfigError)."""

    def coerce(v):
        if v is None:
            return None
        if not isinstance(v, dict):
            raise _Bad
        try:
            check(v)
        except ValueError as e:
            raise ConfigError(f"data.{field}: {e}") from None
        return v

    return Spec(f"null or a mapping of {what}", coerce)


def _augment_settings() -> Spec:
    """``data.augment`` of speech-stream: AugmentConfig fields (checked by it)."""

    def check(v):
        from .data.speech.augment import AugmentConfig

        AugmentConfig.from_dict(v).check_rate(16000)

    return _settings_mapping("augment", check, "augmentation settings (AugmentConfig)")


def _spec_augment_settings() -> Spec:
    """``data.spec_augment`` of speech-stream: SpecAugmentConfig fields (checked by it)."""

    def check(v):
        from .data.speech.spec_augment import SpecAugmentConfig

        SpecAugmentConfig.from_dict(v)

    return _settings_mapping(
        "spec_augment", check, "feature-augmentation settings (SpecAugmentConfig)"
    )


TASK_DATA_FIELDS: dict[str, dict[str, Spec]] = {
    "speech": _SPEECH_DATA,
    "speech-stream": {
        **_SPEECH_DATA,
        "augment": _augment_settings(),
        "spec_augment": _spec_augment_settings(),
    },
    # IMDB: 0 validates on the test set (LRA); > 0 holds out part of train
    "imdb": {"val_fraction": number(0, 1, hi_open=True)},
    "listops": {"max_length": integer(2)},
}


def data_fields(task: str, data_defaults: dict) -> dict[str, Spec]:
    """The spec of every ``data:`` key of ``task`` (keys: those of ``data_defaults``)."""
    fields = {**DATA_FIELDS, **TASK_DATA_FIELDS.get(task, {})}
    return {k: fields[k] for k in data_defaults if k in fields}


def _check_data(task: str, d: dict) -> None:
    """The rules between data fields (split sizes that can be told before building)."""
    gap = d.get("gap_ms")
    if isinstance(gap, list) and len(gap) == 2 and gap[0] > gap[1]:
        raise ConfigError(f"data.gap_ms must be [lo, hi] with lo <= hi, got {gap!r}")
    if task == "listops" and d.get("root") is None and "min_length" in d:
        lo, hi, depth, args = d["min_length"], d["max_length"], d["max_depth"], d["max_args"]
        if lo + 1 >= hi:
            raise ConfigError(
                f"data.min_length + 1 must be < data.max_length to generate "
                f"ListOps, got {lo} and {hi}"
            )
        longest = 1
        for _ in range(depth - 1):
            longest = 2 + args * longest
        if longest <= lo:
            raise ConfigError(
                f"data.max_depth={depth} with data.max_args={args} makes expressions of at "
                f"most {longest} tokens, none longer than data.min_length={lo}"
            )
    if "test_fraction" in d and "val_fraction" in d:
        val, test = d["val_fraction"], d["test_fraction"]
        if val + test >= 1:
            raise ConfigError(
                f"data.val_fraction + data.test_fraction must be < 1, got {val!r} + {test!r}"
            )
        n = d.get("n_images")
        if d.get("root") is None and n is not None:  # a generated pool, split 3 ways
            n_val, n_test = round(val * n), round(test * n)
            sizes = {"train": n - n_val - n_test, "val": n_val, "test": n_test}
            for split, k in sizes.items():
                if k < 1:
                    raise ConfigError(
                        f"data.n_images={n} leaves the {split} split with {k} images "
                        f"(val_fraction {val:g}, test_fraction {test:g}); it needs at least 1"
                    )


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
            _apply_layers(
                cfg, [(f"preset {preset!r} target {target!r}", by_target[target])], data_defaults
            )
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


# Fields whose value is a mapping of settings: ``--set data.augment.gain_db=[-6, 6]`` sets
# one of them (the mapping's own checks then run on the whole).
MAPPING_FIELDS = ("augment", "spec_augment", "frontend")


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
        if len(parts) == 3 and key in MAPPING_FIELDS:  # one setting of a mapping field
            current = cfg[section].get(key)
            cfg[section][key] = {**(current if isinstance(current, dict) else {}), parts[2]: value}
            continue
        if len(parts) > 2:  # other fields are flat (lists are written [a, b])
            raise ConfigError(f"override {item!r}: {section}.{key} has no sub-keys")
        cfg[section][key] = value
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
                f"{where}: unknown key {section}.{key}"
                + _suggest(key, valid)
                + (" (d_input/d_output come from the task)" if key in MODEL_RESERVED else "")
            )


def dump_config(cfg: dict, path) -> None:
    Path(path).write_text(yaml.safe_dump(cfg, sort_keys=False))
