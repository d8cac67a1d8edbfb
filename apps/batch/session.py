"""One onnxruntime session of a streaming graph, many streams' states: gather, one batched
step, scatter (the engine of :mod:`liquid_stream.apps.batch`; no torch).

    session = BatchedSession("kws.onnx")          # CPU, 1 intra-op thread
    session.add("a"); session.add("b")
    out = session.step({"a": xa, "b": xb})        # (T, d_input) each, the same T
    out["a"]                                      # (T, d_output), as OnnxStreamer gives
    session.errors                                # streams refused by the last step
    session.calls                                 # onnxruntime calls it made (groups)

State layout. The graph's state ``state.<name>`` has the shape of its ``state_spec``
entry, with the symbolic ``"batch"`` at some axis (``(batch, W−1)``, ``(H, batch, S)``,
…) or at none (``ssm.fill``, ``frontend.phase``, ``frontend.weight``: one value for the
whole batch). The session keeps, per state, one array with the batch axis replaced by
``capacity`` slots (a stream owns one slot; freed slots are reused), and per shared state
one value per slot, ``(capacity, *shape)``. A step gathers the slots of the stepped
streams along each state's batch axis (``np.take``), runs the graph once on
``x (B, T, d_input)``, checks every stream's outputs and new state finite, and scatters
the new states of the streams that passed back into their slots.

Shared states. A state without a batch axis is one value for all the streams of a call,
so streams can share a call only when those values are equal. They count samples (the
front end's phase, the SSM's sub-block fill) or follow them (the scale-norm front end's
total weight ``1 − β^{n+1}``, which reaches a fixed point after ~10⁴ samples), so streams
fed the same chunks since their (re)start hold equal values. ``step`` groups the streams
by the bytes of their shared states and makes one call per group: one call when the
streams are in step, a few otherwise (e.g. vital-sign models with 25 frames per 1 s chunk
and sub-blocks of 4 frames: up to 4 groups by the fill — the shipped ones have sub-blocks
of one frame, one group —, plus streams in their first ~80 s by the weight).

Why it is exact. The graph computes every batch element with the same operations on its
own slice (the batch axis is never reduced over); the only coupling is the shared states,
which the grouping makes equal. So a stream's outputs and state equal those of an
:class:`~liquid_stream.runtime.onnx_streamer.OnnxStreamer` fed the same chunks, up to float32
rounding where a kernel's summation order depends on the batch size (measured: a few
float32 ulps of the outputs; the tests allow rtol 1e-5).

Input guard: the policy of :mod:`liquid_stream.runtime.validate` (as :class:`OnnxStreamer`), per
stream: a block of the wrong shape or dtype, holding NaN / ±inf or a sample beyond the
bound, or whose outputs or new state would not be finite, is refused for that stream
alone: it is left out of :meth:`step`'s result, its :class:`StreamInputError` is in
:attr:`errors`, its state is unchanged; the other streams commit.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from fractions import Fraction
from pathlib import Path

import numpy as np

from liquid_stream.runtime.onnx_streamer import OnnxStreamer
from liquid_stream.runtime.validate import (
    StreamInputError,
    check_dtype,
    check_finite_result,
    check_shape,
    check_values,
)

__all__ = ["BatchedSession", "check_rate"]

MAX_RATIO_TERM = 1000  # largest up / down of a stream's resampling ratio (filter size)


class BatchedSession:
    """Many streams of one exported model in one onnxruntime session (module docstring).

    Args:
        path: the ``.onnx`` file (``liquid-stream export --onnx``).
        threads: onnxruntime intra-op threads.
        max_streams: most streams at once (:meth:`add` refuses more).
        providers: onnxruntime providers (default CPU, as the apps).
    """

    def __init__(
        self,
        path: str | Path,
        *,
        threads: int = 1,
        max_streams: int = 4096,
        providers: list[str] | None = None,
    ):
        streamer = OnnxStreamer(
            path, providers=providers or ["CPUExecutionProvider"], threads=threads
        )
        self._setup(streamer, max_streams)

    @classmethod
    def from_streamer(cls, streamer: OnnxStreamer, *, max_streams: int = 4096) -> BatchedSession:
        """A batched session sharing the session and metadata of an opened streamer (whose
        own state it does not touch)."""
        self = cls.__new__(cls)
        self._setup(streamer, max_streams)
        return self

    def _setup(self, streamer: OnnxStreamer, max_streams: int) -> None:
        if int(max_streams) < 1:
            raise ValueError(f"max_streams must be >= 1, got {max_streams}")
        self.streamer = streamer
        self.max_streams = int(max_streams)
        self.d_input, self.d_output = streamer.d_input, streamer.d_output
        self.chunk, self.max_chunk = streamer.chunk, streamer.max_chunk
        self.sample_rate, self.labels = streamer.sample_rate, streamer.labels
        self._names = [f"state.{s['name']}" for s in streamer.state_spec]
        self._outputs = ["y"] + [f"next.{s['name']}" for s in streamer.state_spec]
        # batch axis of each state (None: shared by the batch) and its per-stream shape
        self._axis = [
            s["shape"].index("batch") if "batch" in s["shape"] else None
            for s in streamer.state_spec
        ]
        self._shape = [[1 if d == "batch" else d for d in s["shape"]] for s in streamer.state_spec]
        self._dtype = [np.dtype(s["dtype"]) for s in streamer.state_spec]
        self._shared = [i for i, a in enumerate(self._axis) if a is None]
        self._floats = [i for i, d in enumerate(self._dtype) if d.kind == "f"]
        # the axes of each state other than its batch axis (a per-stream reduction)
        self._others = [
            None if a is None else tuple(j for j in range(len(shape)) if j != a)
            for a, shape in zip(self._axis, self._shape, strict=True)
        ]
        self._slot: dict[Hashable, int] = {}
        self._free: list[int] = []
        self._cap = 0
        self._store: list[np.ndarray] = []
        self._grow(min(16, self.max_streams))
        self.errors: dict[Hashable, StreamInputError] = {}
        self.calls = 0  # session runs made by the last step (one per group and piece)

    # ------------------------------------------------------------------ streams

    def _grow(self, cap: int) -> None:
        """Room for ``cap`` slots (the arrays are copied into larger ones)."""
        new = []
        for i, (shape, dtype) in enumerate(zip(self._shape, self._dtype, strict=True)):
            a = self._axis[i]
            full = (
                [cap, *shape] if a is None else [cap if j == a else d for j, d in enumerate(shape)]
            )
            arr = np.zeros(full, dtype)
            if self._cap:
                old = self._store[i]
                arr[self._at(i, slice(0, self._cap))] = old
            new.append(arr)
        self._free += range(cap - 1, self._cap - 1, -1)  # lowest slot first
        self._store, self._cap = new, cap

    def _at(self, i: int, index) -> tuple:
        """The index of slots ``index`` in state ``i``'s array."""
        a = self._axis[i]
        return (index,) if a is None else (slice(None),) * a + (index,)

    def add(self, key: Hashable) -> None:
        """Open a stream: a free slot, zero state (as a fresh :class:`OnnxStreamer`)."""
        if key in self._slot:
            raise ValueError(f"stream {key!r} is already open")
        if len(self._slot) >= self.max_streams:
            raise ValueError(f"session full: {self.max_streams} streams")
        if not self._free:
            self._grow(min(2 * self._cap, self.max_streams))
        self._slot[key] = self._free.pop()
        self.reset(key)

    def remove(self, key: Hashable) -> None:
        """Close a stream; its slot is free for the next one."""
        self._free.append(self._slot.pop(self._known(key)))

    def reset(self, key: Hashable) -> None:
        """Back to the zero state of a fresh stream."""
        slot = self._slot[self._known(key)]
        for i, arr in enumerate(self._store):
            arr[self._at(i, slot)] = 0

    def _known(self, key: Hashable) -> Hashable:
        if key not in self._slot:
            raise KeyError(f"no open stream {key!r}")
        return key

    def __len__(self) -> int:
        return len(self._slot)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._slot

    def keys(self) -> list[Hashable]:
        return list(self._slot)

    def state(self, key: Hashable) -> dict[str, np.ndarray]:
        """A copy of one stream's state, laid out as :attr:`OnnxStreamer.state` (batch 1)."""
        slot = self._slot[self._known(key)]
        return {
            name: arr[self._at(i, slice(slot, slot + 1))].reshape(self._shape[i]).copy()
            for i, (name, arr) in enumerate(zip(self._names, self._store, strict=True))
        }

    # ------------------------------------------------------------------ step

    def step(self, blocks: dict[Hashable, np.ndarray]) -> dict[Hashable, np.ndarray]:
        """Advance every stream of ``blocks`` by its block, ``(T, d_input)`` (or ``(T,)``
        when d_input = 1), the same T for all; return the outputs ``(T, d_output)`` of the
        streams that committed. A refused stream (see the module docstring) is not in the
        result, its error is in :attr:`errors` and its state is unchanged.

        Raises KeyError for a stream that is not open and ValueError when the blocks'
        lengths differ, before anything changes."""
        self.errors, self.calls = {}, 0
        for key in blocks:
            self._known(key)
        xs: dict[Hashable, np.ndarray] = {}
        lengths: set[int] = set()
        for key, block in blocks.items():
            try:
                x = self._block(block)
            except StreamInputError as e:
                self.errors[key] = e
                continue
            xs[key] = x
            lengths.add(x.shape[0])
        if len(lengths) > 1:
            raise ValueError(f"blocks of different lengths {sorted(lengths)}: step needs one T")
        if not xs or not next(iter(lengths)):
            return {key: np.zeros((0, self.d_output), np.float32) for key in xs}
        keys = list(xs)
        x = np.stack([xs[k] for k in keys])  # (B, T, d_input), the callers' dtype
        ok = np.abs(x.astype(np.float64) - self.streamer.input_center) <= (
            self.streamer.input_half_width
        )  # NaN → False
        good = ok.all(axis=(1, 2))
        for b in np.flatnonzero(~good):
            try:
                check_values(
                    x[b : b + 1], self.streamer.input_center, self.streamer.input_half_width
                )
            except StreamInputError as e:
                self.errors[keys[b]] = e
        keys = [k for k, g in zip(keys, good, strict=True) if g]
        x = x[good].astype(np.float32)
        out: dict[Hashable, np.ndarray] = {}
        if not keys:
            return out
        slots = np.array([self._slot[k] for k in keys], np.int64)
        for members in self._groups(slots):
            out.update(self._run(x[members], [keys[m] for m in members], slots[members]))
        return out

    def _block(self, block) -> np.ndarray:
        """One stream's block as ``(T, d_input)``, or StreamInputError (shape, dtype)."""
        x = np.asarray(block)
        given = x.shape
        if x.ndim == 1 and self.d_input == 1:
            x = x[:, None]
        if x.ndim != 2:
            raise StreamInputError(
                f"expected a block of shape (T, {self.d_input}) (time, channels), got {given}"
            )
        check_shape((1, *x.shape), self.d_input, 1, given)
        check_dtype(x.dtype)
        return x

    def _groups(self, slots: np.ndarray) -> list[np.ndarray]:
        """Positions in ``slots`` grouped by equal shared states (one call per group)."""
        if not self._shared or len(slots) == 1:
            return [np.arange(len(slots))]
        rows = np.concatenate(
            [self._store[i][slots].reshape(len(slots), -1).view(np.uint8) for i in self._shared],
            axis=1,
        )
        if (rows == rows[0]).all():  # the usual case: all in step
            return [np.arange(len(slots))]
        _, inverse = np.unique(rows, axis=0, return_inverse=True)
        inverse = inverse.reshape(-1)
        return [np.flatnonzero(inverse == g) for g in range(inverse.max() + 1)]

    def _run(self, x: np.ndarray, keys: list, slots: np.ndarray) -> dict[Hashable, np.ndarray]:
        """One group: gather, run (pieces of at most max_chunk steps), check, scatter."""
        # slots in a row (streams opened together, in order): a slice, not a gather
        in_a_row = bool(np.all(np.diff(slots) == 1))
        run = slice(int(slots[0]), int(slots[-1]) + 1) if in_a_row else slots
        state = {
            name: (arr[slots[0]] if self._axis[i] is None else arr[self._at(i, run)])
            for i, (name, arr) in enumerate(zip(self._names, self._store, strict=True))
        }
        ys = []
        for start in range(0, x.shape[1], self.max_chunk):
            res = self.streamer.session.run(
                self._outputs, {"x": x[:, start : start + self.max_chunk], **state}
            )
            self.calls += 1
            ys.append(res[0])
            state = dict(zip(self._names, res[1:], strict=True))
        y = ys[0] if len(ys) == 1 else np.concatenate(ys, 1)  # (B, T, d_output)
        fine = np.isfinite(y).all(axis=(1, 2))
        for i in self._floats:
            v = np.isfinite(state[self._names[i]])
            fine &= bool(v.all()) if self._axis[i] is None else v.all(axis=self._others[i])
        batched = [(n, a) for n, a in zip(self._names, self._axis, strict=True) if a is not None]
        for b in np.flatnonzero(~fine):  # refused: the slot keeps its old state
            mine = [np.take(state[n], b, axis=a) for n, a in batched]
            try:
                check_finite_result(y[b : b + 1], mine)
            except StreamInputError as e:
                self.errors[keys[b]] = e
            else:  # only a shared state overflowed
                self.errors[keys[b]] = StreamInputError(
                    "the model's shared state would become non-finite (overflow)", x.shape[1] - 1
                )
        all_fine = bool(fine.all())
        if not all_fine:
            run = slots = slots[fine]
        for i, (name, arr) in enumerate(zip(self._names, self._store, strict=True)):
            new = state[name]
            if self._axis[i] is None:
                arr[slots] = new
            else:
                arr[self._at(i, run)] = new if all_fine else np.compress(fine, new, self._axis[i])
        return {k: y[b] for b, k in enumerate(keys) if fine[b]}


def check_rate(rate: float, model_rate: float, integer: bool) -> float:
    """A stream's sampling rate, checked: finite, positive (whole Hz when ``integer``), and
    with a resampling ratio to ``model_rate`` whose terms are at most MAX_RATIO_TERM (its
    filter has 20·max(up, down) + 1 taps). ValueError (one line) otherwise."""
    try:
        r = float(rate)
    except (TypeError, ValueError):
        raise ValueError(f"sample_rate must be a number of Hz, got {rate!r}") from None
    if not (math.isfinite(r) and r > 0) or (integer and r != int(r)):
        kind = "a whole positive number" if integer else "a positive number"
        raise ValueError(f"sample_rate must be {kind} of Hz, got {rate!r}")
    ratio = Fraction(model_rate).limit_denominator(10**6) / Fraction(r).limit_denominator(10**6)
    if r != model_rate and max(ratio.numerator, ratio.denominator) > MAX_RATIO_TERM:
        raise ValueError(
            f"sample_rate {r:g} Hz is too far from a simple ratio to the model's "
            f"{model_rate:g} Hz (up/down {ratio.numerator}/{ratio.denominator}); use a common "
            "rate (8000, 16000, 22050, 44100, 48000, ...)"
        )
    return r
