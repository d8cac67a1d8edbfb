"""The metadata schema of checkpoints and ONNX graphs (standard library only: no torch, numpy).

    meta = ModelMeta(task="bidmc", labels=["hr"], sample_rate=125, target="hr", ...)
    ckpt["meta"] = meta.to_dict()                        # training: a plain dict
    props = ModelMeta.from_dict(ckpt["meta"]).to_onnx_props()   # export: strings
    meta = ModelMeta.from_onnx_props(session_metadata)   # apps: typed, checked

One :class:`ModelMeta` is what a model carries. Training writes its task fields into the
checkpoint (``meta``); export checks them (an unknown key, e.g. a renamed one, or a
malformed value is a :class:`MetaError` there, not a crash in the field), adds the graph
fields and stores all as ONNX ``metadata_props``; ``kws-tune`` adds the tuning fields;
the apps read them back. Fields (None: not stored):

- task: ``task``, ``labels`` (distinct), ``sample_rate`` (Hz), ``input_mean`` / ``input_std`` (the
  raw-input standardisation the graph folds in: a number or one per channel),
  ``d_input``, ``d_output``;
- keyword spotting (``speech-stream``): ``silence_class`` (the no-keyword class),
  ``class_weights`` (loss weights), ``frontend_stats`` (the log-mel band mean / std);
- vital signs (``bidmc``): ``target`` (hr / rr / spo2), ``units``, ``channels`` (input
  channel names), ``window`` (decoder window W, samples), ``target_mean`` / ``target_std``
  (the output affine);
- graph (export): ``liquid_stream_version``, ``model_config``, ``decoder``, ``rate``,
  ``sub_block``, ``max_chunk``, ``chunk``, ``state_spec``, and for an int8 graph
  ``quantization`` (method, the quantized and the float32 nodes, the verify tolerance, the
  checksums of the quantization parameters: :mod:`liquid_stream.runtime.quantized`), and for
  an ensemble ``ensemble`` (members, how they are combined — the mean, or the weighted
  mean with ``weights`` summing to 1 (:func:`ensemble_weights`), of classifiers' posteriors
  or of regressors' estimates — their graphs' SHA-256: export/ensemble.py); and last,
  ``integrity``: the content hash of the graph and of every other entry, written by
  every tool that writes a graph and checked by every load (:mod:`liquid_stream.runtime.quantized`);
- tuning (``kws-tune``): ``kws_threshold``, ``kws_smooth_ms``, ``kws_tuning``;
- ``extra``: the tasks' provenance (``PROVENANCE``: data root, split records, subset, ...),
  which no reader relies on.

Encoding (unchanged since the first exports): a string field is stored as the string
itself, every other value as JSON. The graph also stores ``meta_schema`` =
:data:`SCHEMA_VERSION`. Graphs and checkpoints written before the schema existed carry no
``meta_schema`` (version 0, :data:`LEGACY_VERSION`): they use the same keys and encoding
and are read as they are; a version newer than this module's is refused, naming both.
Reading keeps keys it does not know (``unknown``, raw); writing refuses them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

SCHEMA_VERSION = 1
LEGACY_VERSION = 0  # graphs and checkpoints written before the schema: no meta_schema key
VERSION_KEY = "meta_schema"


class MetaError(ValueError):
    """Metadata that does not follow the schema (a one-line message naming the key)."""


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return (_is_int(v) or isinstance(v, float)) and math.isfinite(v)


def _is_list_of(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, list) and all(check(x) for x in v)


# kind -> (check of a decoded value, what it must be)
KINDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "str": (lambda v: isinstance(v, str), "a string"),
    "int": (_is_int, "an integer"),
    "count": (lambda v: _is_int(v) and v >= 1, "an integer >= 1"),
    "number": (_is_number, "a finite number"),
    "positive": (lambda v: _is_number(v) and v > 0, "a positive number"),
    "numbers": (
        lambda v: _is_number(v) or _is_list_of(_is_number)(v),
        "a number or a list of numbers",
    ),
    "strings": (_is_list_of(lambda v: isinstance(v, str)), "a list of strings"),
    # class labels: a label printed for class i must name class i alone (a repeated one
    # would print the detections of one class under another's name)
    "names": (
        lambda v: _is_list_of(lambda x: isinstance(x, str))(v) and len(set(v)) == len(v),
        "a list of distinct strings",
    ),
    "object": (lambda v: isinstance(v, dict), "a JSON object"),
    "list": (lambda v: isinstance(v, list), "a JSON list"),
}

# The tasks' provenance keys (ModelMeta.extra) and their kinds.
PROVENANCE: dict[str, str] = {
    "data_root": "str",
    "records": "object",
    "windows": "object",
    "format": "str",
    "protocol": "str",
    "subset": "str",
    "clip_end": "str",
    "label_tail_ms": "number",
    "label_hold_ms": "number",
    "vocab": "strings",
    "max_length": "count",
    "source": "str",
    "mode": "str",
    "length": "count",
    "image_shape": "list",
    "val_split": "str",
    "resolution": "count",
    "difficulty": "str",
    "spec_augment": "object",
    "extra_train": "object",
    "beats": "object",
}

# What a checkpoint of each training task must carry (export_checkpoint checks it).
_TASK = ("task", "labels", "d_input", "d_output")
REQUIRED: dict[str, tuple[str, ...]] = {
    "toy": (*_TASK, "sample_rate", "input_mean", "input_std"),
    "speech": (*_TASK, "sample_rate", "input_mean", "input_std"),
    "speech-stream": (*_TASK, "sample_rate", "input_mean", "input_std", "silence_class"),
    "bidmc": (
        *_TASK,
        "sample_rate",
        "input_mean",
        "input_std",
        "target",
        "units",
        "channels",
        "window",
        "target_mean",
        "target_std",
    ),
}

# What two vital-sign estimators must share for one mean estimate of them to mean anything
# (an ensemble graph, `evaluate --mean`): the quantity, its units, what they read, how.
SAME_ESTIMATE: tuple[str, ...] = ("target", "units", "channels", "window")


def ensemble_weights(weights: str | Sequence[float] | None, k: int) -> list[float] | None:
    """The weights w_i of a K-member ensemble's mean Σ_i w_i f_i (export/ensemble.py,
    ``evaluate --mean``), from ``"1,1,3"`` or a sequence: K finite positive numbers,
    returned divided by their sum (so Σ_i w_i = 1); None stays None (the plain mean, 1/K
    each). A MetaError says what is wrong in one line."""
    if weights is None:
        return None
    if isinstance(weights, str):
        try:
            weights = [float(v) for v in weights.split(",")]
        except ValueError:
            raise MetaError(f"ensemble weights {weights!r}: not comma-separated numbers") from None
    w = [float(v) for v in weights]
    if len(w) != k:
        raise MetaError(f"{len(w)} ensemble weights for {k} members")
    if not all(math.isfinite(v) and v > 0 for v in w):
        raise MetaError(f"ensemble weights must be finite and positive, got {w}")
    total = math.fsum(w)
    return [v / total for v in w]


def _kind(kind: str) -> dict:
    return {"kind": kind}


@dataclass
class ModelMeta:
    """What a checkpoint and an ONNX graph carry (module docstring); None: not stored."""

    # task (training)
    task: str | None = field(default=None, metadata=_kind("str"))
    labels: list[str] | None = field(default=None, metadata=_kind("names"))
    sample_rate: float | None = field(default=None, metadata=_kind("positive"))
    input_mean: float | list[float] | None = field(default=None, metadata=_kind("numbers"))
    input_std: float | list[float] | None = field(default=None, metadata=_kind("numbers"))
    d_input: int | None = field(default=None, metadata=_kind("count"))
    d_output: int | None = field(default=None, metadata=_kind("count"))
    # keyword spotting (speech-stream)
    silence_class: int | None = field(default=None, metadata=_kind("int"))
    class_weights: list[float] | None = field(default=None, metadata=_kind("numbers"))
    frontend_stats: dict | None = field(default=None, metadata=_kind("object"))
    # vital signs (bidmc)
    target: str | None = field(default=None, metadata=_kind("str"))
    units: str | None = field(default=None, metadata=_kind("str"))
    channels: list[str] | None = field(default=None, metadata=_kind("strings"))
    window: int | None = field(default=None, metadata=_kind("count"))
    target_mean: float | None = field(default=None, metadata=_kind("number"))
    target_std: float | None = field(default=None, metadata=_kind("positive"))
    # graph (export)
    liquid_stream_version: str | None = field(default=None, metadata=_kind("str"))
    model_config: dict | None = field(default=None, metadata=_kind("object"))
    decoder: str | None = field(default=None, metadata=_kind("str"))
    rate: float | None = field(default=None, metadata=_kind("positive"))
    sub_block: int | None = field(default=None, metadata=_kind("count"))
    max_chunk: int | None = field(default=None, metadata=_kind("count"))
    chunk: int | None = field(default=None, metadata=_kind("count"))
    state_spec: list[dict] | None = field(default=None, metadata=_kind("list"))
    quantization: dict | None = field(default=None, metadata=_kind("object"))
    ensemble: dict | None = field(default=None, metadata=_kind("object"))
    integrity: dict | None = field(default=None, metadata=_kind("object"))
    # keyword-spotter tuning (kws-tune)
    kws_threshold: float | None = field(default=None, metadata=_kind("number"))
    kws_smooth_ms: float | None = field(default=None, metadata=_kind("number"))
    kws_tuning: dict | None = field(default=None, metadata=_kind("object"))
    # provenance (PROVENANCE keys), keys read but not known (raw strings), schema read
    extra: dict[str, Any] = field(default_factory=dict)
    unknown: dict[str, str] = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        for f in _FIELDS:
            _check(f.name, f.metadata["kind"], getattr(self, f.name))
        for key, value in self.extra.items():
            if key not in PROVENANCE:
                raise MetaError(_unknown_key(key))
            _check(key, PROVENANCE[key], value)

    # ----------------------------------------------------------------- derived

    @property
    def decoder_window(self) -> int | None:
        """The decoder window W in samples: ``window``, else the model config's
        ``decoder_window`` (graphs of tasks that do not store ``window``)."""
        if self.window is not None:
            return self.window
        w = (self.model_config or {}).get("decoder_window")
        return w if _is_int(w) and w >= 1 else None

    def missing(self) -> list[str]:
        """The keys a checkpoint of this (training) task must carry and does not."""
        return [k for k in REQUIRED.get(self.task or "", ()) if getattr(self, k) is None]

    def check_complete(self) -> None:
        """Raise :class:`MetaError` if a key of :meth:`missing` is absent."""
        missing = self.missing()
        if missing:
            raise MetaError(
                f"{self.task} metadata lacks {', '.join(missing)} (renamed or not written "
                "by training?)"
            )

    # ------------------------------------------------------------- plain dicts

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ModelMeta:
        """From a checkpoint's ``meta`` (or a builder's): every key known, every value of
        its kind, else :class:`MetaError`."""
        version = _version(d.get(VERSION_KEY, LEGACY_VERSION))
        known, extra = {}, {}
        for key, value in d.items():
            if key == VERSION_KEY:
                continue
            if key in _NAMES:
                known[key] = value
            elif key in PROVENANCE:
                extra[key] = value
            else:
                raise MetaError(_unknown_key(key))
        return cls(**known, extra=extra, schema_version=version)

    def to_dict(self) -> dict[str, Any]:
        """The stored fields as a plain dict (a checkpoint's ``meta``), with ``meta_schema``."""
        out: dict[str, Any] = {VERSION_KEY: SCHEMA_VERSION}
        out.update((f.name, v) for f in _FIELDS if (v := getattr(self, f.name)) is not None)
        return {**out, **self.extra, **self.unknown}

    # ------------------------------------------------------------- ONNX props

    @classmethod
    def from_onnx_props(cls, props: Mapping[str, str], strict: bool = False) -> ModelMeta:
        """From ONNX ``metadata_props`` (key -> string). A malformed known entry is a
        :class:`MetaError`; an unknown key is kept in ``unknown`` (``strict``: refused)."""
        version = LEGACY_VERSION
        if VERSION_KEY in props:
            version = _version(_decode(VERSION_KEY, "int", props[VERSION_KEY]))
        known, extra, unknown = {}, {}, {}
        for key, raw in props.items():
            if key == VERSION_KEY:
                continue
            if key in _NAMES:
                known[key] = _decode(key, _NAMES[key], raw)
            elif key in PROVENANCE:
                extra[key] = _decode(key, PROVENANCE[key], raw)
            elif strict:
                raise MetaError(_unknown_key(key))
            else:
                unknown[key] = raw
        return cls(**known, extra=extra, unknown=unknown, schema_version=version)

    def to_onnx_props(self) -> dict[str, str]:
        """The stored fields as ONNX ``metadata_props`` strings (strings as they are,
        everything else JSON), with ``meta_schema``."""
        kinds = {**_NAMES, **PROVENANCE, VERSION_KEY: "int"}
        return {
            k: v if kinds.get(k) == "str" or k in self.unknown else json.dumps(v)
            for k, v in self.to_dict().items()
        }


_FIELDS = [f for f in fields(ModelMeta) if "kind" in f.metadata]
_NAMES: dict[str, str] = {f.name: f.metadata["kind"] for f in _FIELDS}


def _unknown_key(key: str) -> str:
    return (
        f"unknown metadata key {key!r} (renamed? the schema, version {SCHEMA_VERSION}, "
        "is liquid_stream/runtime/meta.py)"
    )


def _check(key: str, kind: str, value: Any) -> None:
    check, what = KINDS[kind]
    if value is not None and not check(value):
        raise MetaError(f"metadata {key} must be {what}, got {value!r}")


def _decode(key: str, kind: str, raw: str) -> Any:
    """A stored string decoded by its kind (strings as they are, the rest JSON)."""
    if kind == "str":
        return raw
    try:
        value = json.loads(raw)
    except ValueError:
        raise MetaError(f"metadata {key} must be {KINDS[kind][1]}, got {raw!r}") from None
    if value is not None and not KINDS[kind][0](value):
        raise MetaError(f"metadata {key} must be {KINDS[kind][1]}, got {raw!r}")
    return value


def _version(v: Any) -> int:
    """A schema version this module reads (0 … SCHEMA_VERSION), else :class:`MetaError`."""
    if not _is_int(v) or v < 0:
        raise MetaError(f"metadata {VERSION_KEY} must be a schema version (an integer), got {v!r}")
    if v > SCHEMA_VERSION:
        raise MetaError(
            f"metadata schema version {v} is newer than this liquid-stream reads (versions "
            f"{LEGACY_VERSION} to {SCHEMA_VERSION}): upgrade liquid-stream, or re-export the "
            "model with this version"
        )
    return v
