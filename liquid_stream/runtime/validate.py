"""The input guard of the streaming runtimes (numpy only: no torch import).

:class:`~liquid_stream.runtime.onnx_streamer.OnnxStreamer` and the torch
:class:`~liquid_stream.nn.model.StreamingModel` both call these checks, so a chunk is
accepted or refused, with the same message, by either runtime.

Policy (a refused chunk raises :class:`StreamInputError`, a ``ValueError``, and the
stream's state stays exactly as it was before the call: the next chunk continues as if
the refused one had never been sent):

- **Shape.** ``(batch, T, d_input)`` with the stream's batch and width.
- **Type.** Real numbers: integer or floating dtypes (not bool, complex, strings or
  objects; a complex sample has no meaning to the model, and casting would silently
  drop its imaginary part). The torch model takes exactly its own dtype.
- **NaN / ±inf.** Refused.
- **Magnitude.** A sample more than :data:`MAX_STD` = 10⁶ input standard deviations from
  the input mean is refused: ``|x − input_mean| > 1e6 · input_std``, per channel, with
  ``input_mean`` / ``input_std`` the training standardisation stored in the ONNX model's
  metadata (0 / 1 when absent, and for a model whose front end takes raw samples). The
  torch model has no standardisation of its own (it is fed standardised input, or raw
  audio with a front end), so there the bound is ``|x| > 1e6``.
  Why 10⁶ σ: real signals never come near it (audio in [−1, 1] with σ ≈ 0.1 allows
  ±10⁵; a biosignal in raw units allows 10⁶ of its own spreads), yet it is far below
  the float32 range (3.4·10³⁸), so a rogue sample (a float WAV holding 1e30, a corrupt
  packet) is caught before the linear SSM recurrence carries it into the state for
  good, where it used to turn every later output into NaN (at 1e18 the outputs reached
  ~4e24). Such samples are refused rather than clipped: a spike clipped to 10⁶ σ would
  still wreck the outputs of the next seconds, silently. A scale-norm front end with
  ``log`` (an oximeter's raw intensities) accepts ``|x| ≤`` :data:`LOG_MAX` = 10³⁰
  instead: it takes the log of the ratio to the first sample, clamped, so no float32
  sample can carry a large value into the state, while 10⁶ would refuse the raw counts
  of a 22-bit ADC (:func:`input_bound`).
- **Overflow.** A chunk within the bound can still overflow inside the model (the
  liquid terms multiply up to ``liquid_order`` inputs). The new state and the outputs
  are checked after the step and the chunk is refused when any of them is not finite;
  the state is committed only after that check, so **no input can leave the state
  non-finite**.

The error names the first offending time step of the chunk (:attr:`StreamInputError.index`)
so that an application can translate it into stream time (``liquid-stream kws`` reports
``FILE: … at 12.345 s``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

MAX_STD = 1e6  # accepted input: within input_mean ± MAX_STD · input_std (per channel)
LOG_MAX = 1e30  # accepted |x| for a log scale-norm front end (intensities; see input_bound)


class StreamInputError(ValueError):
    """A chunk refused by a streaming model; the model's state is left unchanged.

    Attributes:
        reason: what is wrong, without the position (one line).
        index: the first offending time step within the chunk (None for shape errors).
    """

    def __init__(self, reason: str, index: int | None = None, where: str = ""):
        self.reason = reason
        self.index = index
        head = "" if index is None else f"input step {index}{where} of the chunk: "
        super().__init__(f"{head}{reason}; state left unchanged")


def input_range(mean=0.0, std=1.0, d_input: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """``(center, half_width)`` per channel, float64 ``(d_input,)``: the accepted input is
    ``|x − center| ≤ half_width`` with center = ``mean``, half_width = MAX_STD · ``std``.

    ``mean`` / ``std`` are scalars or one value per channel (the ``input_mean`` /
    ``input_std`` metadata of an exported model); None means 0 / 1.
    """
    mean = 0.0 if mean is None else mean
    std = 1.0 if std is None else std
    try:
        center = np.broadcast_to(np.asarray(mean, np.float64).reshape(-1), (d_input,))
        scale = np.broadcast_to(np.asarray(std, np.float64).reshape(-1), (d_input,))
    except ValueError as e:
        raise ValueError(
            f"input_mean / input_std must be scalars or {d_input} values, got {mean!r} / {std!r}"
        ) from e
    if not (np.isfinite(center).all() and np.isfinite(scale).all() and (scale > 0).all()):
        raise ValueError(f"input_mean / input_std must be finite, std > 0: {mean!r} / {std!r}")
    return center.copy(), MAX_STD * scale


def input_bound(frontend: dict | None, d_input: int) -> tuple[np.ndarray, np.ndarray]:
    """``(center, half_width)`` for a model whose front end (``frontend``: its config dict,
    None for none) takes the raw samples: ``|x| ≤ LOG_MAX`` for a log scale-norm, else
    ``|x| ≤ MAX_STD`` (module docstring)."""
    fe = frontend or {}
    if fe.get("kind") == "scalenorm" and fe.get("log"):
        return input_range(0.0, LOG_MAX / MAX_STD, d_input)
    return input_range(0.0, 1.0, d_input)


def _where(b: int, c: int, batch: int, width: int) -> str:
    parts = ([f"stream {b}"] if batch > 1 else []) + ([f"channel {c}"] if width > 1 else [])
    return f" ({', '.join(parts)})" if parts else ""


def check_values(x: np.ndarray, center: np.ndarray, half_width: np.ndarray) -> None:
    """Raise :class:`StreamInputError` at the first time step of ``x (B, T, C)`` holding a
    NaN, an infinity or a sample outside ``center ± half_width`` (see the module policy)."""
    ok = np.abs(x.astype(np.float64, copy=False) - center) <= half_width  # NaN → False
    if ok.all():
        return
    bad = ~ok
    t = int(np.flatnonzero(bad.any(axis=(0, 2)))[0])
    b, c = (int(i) for i in np.argwhere(bad[:, t])[0])
    v = float(x[b, t, c])
    where = _where(b, c, x.shape[0], x.shape[2])
    if not np.isfinite(v):
        raise StreamInputError(f"sample value {v} (NaN or infinite values are refused)", t, where)
    lo, hi = center[c] - half_width[c], center[c] + half_width[c]
    raise StreamInputError(
        f"sample value {v:.4g} is outside the accepted range {lo:.4g} … {hi:.4g} "
        f"(input mean ± {MAX_STD:.0e} input standard deviations)",
        t,
        where,
    )


def check_finite_result(y: np.ndarray, states: Iterable[np.ndarray] = ()) -> None:
    """Raise :class:`StreamInputError` when the outputs ``y (B, T, d)`` or any of ``states``
    of a step are not finite; ``index`` is the first non-finite output step (the last step
    when only the state overflowed)."""
    y_ok = np.isfinite(y).all(axis=(0, 2))
    if y_ok.all() and all(np.isfinite(s).all() for s in states):
        return
    t = int(np.flatnonzero(~y_ok)[0]) if not y_ok.all() else y.shape[1] - 1
    raise StreamInputError(
        "the model's output or state would become non-finite (overflow) on this input", t
    )


def check_dtype(dtype) -> None:
    """Raise :class:`StreamInputError` unless ``dtype`` (numpy) is an integer or floating
    type (see the module policy)."""
    dtype = np.dtype(dtype)
    if dtype.kind not in "iuf":
        raise StreamInputError(
            f"input must be numeric (integer or floating samples), got {dtype}"
            + (" (complex samples are refused)" if dtype.kind == "c" else "")
        )


def check_shape(
    shape: Sequence[int], d_input: int, batch: int, given: Sequence[int] | None = None
) -> None:
    """Raise :class:`StreamInputError` unless ``shape`` is ``(batch, T, d_input)``;
    ``given`` is the shape as the caller passed it (for the message)."""
    shape = tuple(int(s) for s in shape)
    given = shape if given is None else tuple(given)
    if len(shape) != 3:
        raise StreamInputError(
            f"expected input of shape ({batch}, T, {d_input}) (batch, time, channels), got {given}"
        )
    if shape[2] != d_input:
        raise StreamInputError(
            f"expected {d_input} input channel(s) (last dimension), got {shape[2]}: shape {given}"
        )
    if shape[0] != batch:
        raise StreamInputError(
            f"the input holds {shape[0]} stream(s) (first dimension) but the state "
            f"holds {batch}: shape {given}"
        )
