"""Run an exported liquid-stream ONNX model chunk by chunk (onnxruntime only; no torch).

    streamer = OnnxStreamer("kws.onnx")          # CUDA if available, else CPU
    for block in audio_blocks:                    # any length, e.g. 160 samples
        scores = streamer.process(block)          # (T, d_output): one row per input sample
    streamer.reset()                              # start a new stream

The model's state lives in the streamer between calls, so consecutive ``process``
calls equal one call on the concatenated input (exactly, up to float32 rounding).

Input guard (policy in :mod:`liquid_stream.runtime.validate`, shared with the torch
``StreamingModel``): ``process`` refuses, with :class:`StreamInputError` (a ``ValueError``
naming the first offending time step of the block), a block of the wrong shape or of a
dtype that is not integer or floating (bool, complex, strings), one holding NaN or ±inf,
one holding a sample more than 10⁶ input standard deviations from the input mean
(``|x − input_mean| > 1e6 · input_std``, raw units, from the model's metadata; ``|x| >
1e6`` without them or with a front end that takes raw samples), and one whose outputs or
new state would not be finite. A refused block changes nothing: the state is committed
only after the new state and the outputs were checked finite, so the next block continues
as if the refused one had never been sent, and no input can leave the state non-finite.

Model files: a missing, corrupt or foreign file, and a liquid-stream model whose metadata
is missing or malformed (``state_spec``, ``d_input``, ``d_output``, ``max_chunk``,
``chunk``, ``sample_rate``, ``labels``; read through :mod:`liquid_stream.runtime.meta`'s schema),
raise :class:`OnnxModelError` naming the file and the entry (a ``state_spec`` whose shape
or dtype is not the graph's state input: the state, named, not a failed run later); so
does a graph whose content does not match its content hash (the ``integrity`` entry: a
changed weight or node, a changed, removed or added metadata entry), an int8 graph whose
quantization parameters do not match the checksums in its ``quantization`` entry, or one
that holds int8 nodes without that entry (:mod:`liquid_stream.runtime.quantized`). A graph without
a content hash (exported before it existed) loads with a one-line warning on stderr. The
file is read once: the bytes checked are the bytes onnxruntime runs.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np

from . import ltc_ort
from .meta import MetaError, ModelMeta
from .validate import (
    MAX_STD,
    StreamInputError,
    check_dtype,
    check_finite_result,
    check_shape,
    check_values,
    input_bound,
    input_range,
)

__all__ = ["MAX_STD", "OnnxModelError", "OnnxStreamer", "StreamInputError"]

# onnxruntime's input type names → numpy dtypes (the state dtypes the graphs use)
_ORT_TYPES = {
    "tensor(float)": np.dtype(np.float32),
    "tensor(double)": np.dtype(np.float64),
    "tensor(int64)": np.dtype(np.int64),
    "tensor(int32)": np.dtype(np.int32),
}

# The metadata entries the streamer reads (schema: liquid_stream/runtime/meta.py).
STREAMER_KEYS = (
    "state_spec",
    "d_input",
    "d_output",
    "max_chunk",
    "chunk",
    "sample_rate",
    "labels",
    "task",
)


class OnnxModelError(ValueError):
    """The file is missing, not ONNX, corrupt, or not a liquid-stream streaming model."""


_WARNED: set[str] = set()  # files already warned about (no content hash), per process


def _parse(data: bytes):
    """The ``onnx.ModelProto`` of a file's bytes (DecodeError for a file that is not one)."""
    import onnx

    return onnx.load_from_string(data)


class OnnxStreamer:
    """Stateful wrapper around an onnxruntime session of a liquid-stream streaming graph.

    Args:
        path: the ``.onnx`` file written by ``liquid-stream export --onnx``.
        batch: number of parallel streams (inputs are ``(batch, T, d_input)``).
        providers: onnxruntime providers; default CUDA when available, else CPU.
        threads: intra-op threads (default: onnxruntime's choice).
    """

    def __init__(
        self,
        path: str | Path,
        batch: int = 1,
        providers: list[str] | None = None,
        threads: int | None = None,
    ):
        import onnxruntime as ort

        path = Path(path)
        if not path.is_file():
            raise OnnxModelError(f"ONNX model not found: {path}")
        if providers is None:
            available = ort.get_available_providers()
            providers = [p for p in ("CUDAExecutionProvider",) if p in available]
            providers.append("CPUExecutionProvider")
        options = ort.SessionOptions()
        if threads:
            options.intra_op_num_threads = int(threads)
        options.log_severity_level = 3
        try:  # one read: the bytes checked below are the bytes that run
            data = path.read_bytes()
        except OSError as e:
            raise OnnxModelError(f"{path}: cannot read the model ({e.strerror or e})") from None
        try:
            proto = _parse(data)
            ltc_ort.register(options, model=proto)  # only a graph with the fused op needs it
            self.session = ort.InferenceSession(data, options, providers=providers)
        except ltc_ort.LtcOpUnavailable as e:
            raise OnnxModelError(f"{path}: {e}") from None
        except Exception as e:  # noqa: BLE001 - onnx / onnxruntime raise several kinds
            raise OnnxModelError(f"{path} is not a valid ONNX model ({e})") from e
        meta = self.session.get_modelmeta().custom_metadata_map
        if "state_spec" not in meta:
            raise OnnxModelError(f"{path} is not a liquid-stream streaming model (no state_spec)")
        self.path = path
        self.metadata: dict[str, str] = dict(meta)
        self._parse_metadata()
        if "quantization" in meta:  # first: its message names the changed tensor
            self._check_quantized(proto)
        self._check_integrity(proto)
        self.batch = int(batch)
        self.input_center, self.input_half_width = self._input_range()
        self._outputs = ["y"] + [f"next.{s['name']}" for s in self.state_spec]
        self._state_names = [f"state.{s['name']}" for s in self.state_spec]
        self.reset()

    def _bad_meta(self, key: str, why: str) -> OnnxModelError:
        return OnnxModelError(
            f"{self.path}: corrupt liquid-stream metadata: {key!r} {why}; "
            "re-export the model (liquid-stream export)"
        )

    def _parse_metadata(self) -> None:
        """Read and check every metadata entry the streamer uses through the schema
        (:meth:`ModelMeta.from_onnx_props <liquid_stream.runtime.meta.ModelMeta.from_onnx_props>`),
        OnnxModelError naming the file and the entry otherwise. Only those entries are
        decoded here: one the streamer does not use (``silence_class``, ``target``, ...) is
        for the app that reads it to check."""
        props = {k: self.metadata[k] for k in STREAMER_KEYS if k in self.metadata}
        try:
            meta = ModelMeta.from_onnx_props(props)
        except MetaError as e:  # "metadata KEY must be …, got …"
            key, _, why = str(e).removeprefix("metadata ").partition(" ")
            raise self._bad_meta(key, why) from None
        for key in props:
            if getattr(meta, key) is None:  # JSON null
                raise self._bad_meta(key, f"is null: {props[key]!r}")
        for key in ("d_input", "d_output", "max_chunk"):
            if getattr(meta, key) is None:
                raise self._bad_meta(key, "is missing")
        spec = meta.state_spec
        for s in spec:
            ok = isinstance(s, dict) and isinstance(s.get("name"), str)
            ok = (
                ok
                and isinstance(s.get("shape"), list)
                and all(
                    d == "batch" or (isinstance(d, int) and not isinstance(d, bool) and d >= 0)
                    for d in s["shape"]
                )
            )
            try:
                ok = ok and np.dtype(s["dtype"]).kind in "fiub"
            except (TypeError, ValueError):
                ok = False
            if not ok:
                raise self._bad_meta(
                    "state_spec", f"has an entry without a valid name / shape / dtype: {s!r}"
                )
        inputs = {i.name for i in self.session.get_inputs()}
        outputs = {o.name for o in self.session.get_outputs()}
        missing = [n for n in ("x", *(f"state.{s['name']}" for s in spec)) if n not in inputs]
        missing += [n for n in ("y", *(f"next.{s['name']}" for s in spec)) if n not in outputs]
        if missing:
            raise self._bad_meta("state_spec", f"does not match the graph (no {missing[0]!r})")
        graph_in = {i.name: i for i in self.session.get_inputs()}
        for s in spec:
            g = graph_in[f"state.{s['name']}"]
            dims = [d if isinstance(d, int) else "batch" for d in g.shape]
            want = [d if isinstance(d, int) else "batch" for d in s["shape"]]
            dtype = _ORT_TYPES.get(g.type)
            if dims != want or (dtype is not None and np.dtype(s["dtype"]) != dtype):
                raise self._bad_meta(
                    "state_spec",
                    f"gives state {s['name']!r} shape {s['shape']} "
                    f"{s['dtype']}, the graph's input takes {dims} {g.type}",
                )
        self.state_spec: list[dict] = spec
        self.d_input: int = meta.d_input
        self.d_output: int = meta.d_output
        self.max_chunk: int = meta.max_chunk
        self.chunk: int = meta.max_chunk if meta.chunk is None else meta.chunk
        self.sample_rate: float | None = (
            None if meta.sample_rate is None else float(meta.sample_rate)
        )
        self.labels: list[str] = [] if meta.labels is None else meta.labels
        self.task: str = meta.task or ""

    def _check_integrity(self, proto) -> None:
        """The graph against its content hash (:func:`liquid_stream.runtime.quantized.
        check_integrity`): OnnxModelError naming the file and what changed; a graph without
        the hash loads, with a one-line warning on stderr (once per file and process)."""
        from .quantized import IntegrityError, check_integrity

        try:
            hashed = check_integrity(proto)
        except IntegrityError as e:
            raise OnnxModelError(f"{self.path}: {e}; re-export the model") from None
        key = str(self.path.resolve())
        if not hashed and key not in _WARNED:
            _WARNED.add(key)
            print(
                f"warning: {self.path} has no content hash (exported before liquid-stream "
                "stamped one): its weights cannot be checked; re-export it to add one",
                file=sys.stderr,
            )

    def _check_quantized(self, proto) -> None:
        """An int8 graph: its quantization parameters must match the checksums in its
        metadata (:func:`liquid_stream.runtime.quantized.check_quantized`), else OnnxModelError."""
        from .quantized import QuantizationError, check_quantized

        try:
            raw = {"quantization": self.metadata["quantization"]}
            check_quantized(proto, ModelMeta.from_onnx_props(raw).quantization)
        except (MetaError, QuantizationError) as e:
            raise OnnxModelError(
                f"{self.path}: {e}; re-export the model (liquid-stream export … --quantize int8)"
            ) from None

    def _input_range(self) -> tuple[np.ndarray, np.ndarray]:
        """The accepted input ``center ± half_width`` in raw units: ``input_mean ± 1e6 ·
        input_std`` from the metadata (the graph folds that standardisation in); ``0 ± 1e6``
        when they are absent or unusable; :func:`~liquid_stream.runtime.validate.input_bound` when a
        front end takes the raw samples (``0 ± 1e30`` for a log scale-norm)."""
        try:
            config = self.meta_json("model_config", {}) or {}
            frontend = config.get("frontend") or {}
            if frontend.get("kind", "raw") == "raw":
                mean, std = self.meta_json("input_mean"), self.meta_json("input_std")
                return input_range(mean, std, self.d_input)
            return input_bound(frontend, self.d_input)
        except (ValueError, TypeError, AttributeError):  # malformed metadata: the fixed bound
            pass
        return input_range(0.0, 1.0, self.d_input)

    def meta_json(self, key: str, default=None):
        """A JSON-encoded metadata entry, decoded."""
        return json.loads(self.metadata[key]) if key in self.metadata else default

    def reset(self) -> None:
        """Forget the past: back to the zero state of a fresh stream."""
        self.state = {
            f"state.{s['name']}": np.zeros(
                [self.batch if d == "batch" else d for d in s["shape"]], dtype=s["dtype"]
            )
            for s in self.state_spec
        }

    def process(self, chunk: np.ndarray) -> np.ndarray:
        """Feed ``(T, d_input)`` (or ``(batch, T, d_input)``, or ``(T,)`` when d_input = 1)
        and get the per-step outputs ``(…, T, d_output)``; T may be any length (T = 0 gives
        an empty result). Raises :class:`StreamInputError` for a refused block (see the
        module docstring), leaving the state unchanged."""
        x = np.asarray(chunk)
        squeeze = x.ndim < 3
        if x.ndim == 1 and self.d_input == 1:
            x = x[:, None]
        if x.ndim == 2:
            x = x[None]
        if x.ndim != 3:
            raise StreamInputError(
                f"expected input of shape (T, {self.d_input}) or ({self.batch}, T, "
                f"{self.d_input}), got {np.shape(chunk)}"
            )
        check_shape(x.shape, self.d_input, self.batch, np.shape(chunk))
        check_dtype(x.dtype)
        if x.shape[1] == 0:
            return np.zeros((self.batch, 0, self.d_output), np.float32)[
                0 if squeeze else slice(None)
            ]
        check_values(x, self.input_center, self.input_half_width)
        x = x.astype(np.float32, copy=False)
        ys, state = [], self.state
        for start in range(0, x.shape[1], self.max_chunk):
            out = self.session.run(
                self._outputs, {"x": x[:, start : start + self.max_chunk], **state}
            )
            ys.append(out[0])
            state = dict(zip(self._state_names, out[1:], strict=True))
        y = ys[0] if len(ys) == 1 else np.concatenate(ys, 1)
        floats = [v for v in state.values() if v.dtype.kind == "f"]  # np.floating, cheaply
        # a finite sum has no NaN / inf in it: one reduction an array instead of two (the
        # per-call cost of 10 ms calls); an overflowing sum falls to the element-wise check
        if not math.isfinite(float(y.sum()) + sum(float(v.sum()) for v in floats)):
            check_finite_result(y, floats)
        self.state = state  # committed only now: a refused block leaves the state as it was
        return y[0] if squeeze else y
