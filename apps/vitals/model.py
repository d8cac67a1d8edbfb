"""The vital-sign monitor's models: an exported ``bidmc`` ONNX model and what its metadata
says (onnxruntime only, no torch).

    model = load_model("hr.onnx")   # VitalModel: target, units, channels, sample_rate, window

Each model (``task = "bidmc"``) names its ``target`` (hr / rr / spo2), its input
``channels`` (record channel names without BIDMC's trailing comma), ``sample_rate`` and
decoder ``window`` W (read through :class:`~liquid_stream.runtime.meta.ModelMeta`; a graph without
``window`` uses its model config's decoder window). Its output at a sample is the estimate
over the trailing W samples. A file that is not such a model raises :class:`VitalsError`,
the error of every part of the monitor (model, record, setting).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from liquid_stream.io.bidmc_vocab import UNITS, VITALS, strip_name
from liquid_stream.io.wfdb import FS_RANGE
from liquid_stream.runtime.meta import MetaError, ModelMeta

TASK = "bidmc"


class VitalsError(ValueError):
    """A model, record or setting the monitor cannot use (message says what and why)."""


@dataclass
class VitalModel:
    """One exported model and what its metadata says."""

    path: Path
    streamer: object  # OnnxStreamer
    target: str
    units: str
    channels: list[str]
    sample_rate: float
    window: int

    @property
    def window_s(self) -> float:
        return self.window / self.sample_rate


def load_model(path: str | Path, threads: int | None = 1) -> VitalModel:
    """Open ``path`` with onnxruntime and check it is a vital-sign (``bidmc``) model."""
    from liquid_stream.runtime.onnx_streamer import OnnxModelError, OnnxStreamer

    path = Path(path)
    try:
        s = OnnxStreamer(path, threads=threads, providers=["CPUExecutionProvider"])
    except OnnxModelError as e:
        raise VitalsError(str(e)) from None
    try:
        meta = ModelMeta.from_onnx_props(s.metadata)
    except MetaError as e:
        raise VitalsError(f"{path.name}: {e}") from None
    if meta.task != TASK:
        raise VitalsError(
            f"{path.name} is a {meta.task or 'task-less'!r} model, not a vital-sign model "
            f"(task {TASK!r}): pass models exported by the bidmc task"
        )
    target = meta.target or ""
    if target not in VITALS:
        raise VitalsError(f"{path.name}: metadata target {target!r} is not one of {VITALS}")
    channels = [strip_name(c) for c in meta.channels or []]
    if not channels or len(channels) != s.d_input:
        raise VitalsError(
            f"{path.name}: metadata 'channels' must list its {s.d_input} input channel(s), "
            f"got {meta.channels!r}"
        )
    if s.d_output != 1:
        raise VitalsError(
            f"{path.name}: expected 1 output (the {target} estimate), got {s.d_output}"
        )
    if not s.sample_rate or s.sample_rate <= 0:
        raise VitalsError(f"{path.name}: metadata has no sample_rate")
    if s.sample_rate > FS_RANGE[1]:  # the highest rate a record may have (liquid_stream.io.wfdb)
        raise VitalsError(
            f"{path.name}: metadata sample_rate {s.sample_rate:g} Hz is above the "
            f"highest vital-sign input rate, {FS_RANGE[1]:g} Hz"
        )
    if abs(s.sample_rate - round(s.sample_rate)) > 1e-9:
        raise VitalsError(f"{path.name}: sample rate {s.sample_rate} Hz is not a whole number")
    window = meta.decoder_window
    if window is None:
        raise VitalsError(f"{path.name}: metadata has no valid decoder 'window' (samples)")
    return VitalModel(
        path, s, target, meta.units or UNITS[target], channels, float(s.sample_rate), window
    )
