"""Many keyword-spotting streams of one model, stepped together (see :mod:`.batch`).

    bank = KwsBank("kws.onnx")
    info = bank.open("alice", sample_rate=48000)     # labels, chunk, sample_rate, ...
    bank.push("alice", block)                        # validated now, buffered
    events = bank.step()                             # {"alice": [{"type": "scores", ...}]}
    bank.close("alice")                              # the rest, then forgotten

Per stream: a resampler to the model's rate when the stream has another
(:func:`~liquid_stream.apps.common.audio.stream_resampler`, as ``liquid-stream kws``), the
pending model-rate samples, and the :class:`~liquid_stream.apps.kws.spotter.KeywordTracker` of a
:class:`~liquid_stream.apps.kws.spotter.KeywordSpotter` (its posteriors, smoothing, arming,
refractory period). The model runs in one
:class:`~liquid_stream.apps.batch.session.BatchedSession` for all streams.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from liquid_stream.apps.batch.session import BatchedSession, check_rate
from liquid_stream.apps.common.audio import stream_resampler
from liquid_stream.apps.common.resample import StreamResampler
from liquid_stream.apps.kws.spotter import KeywordSpotter, KeywordTracker, KwsInputError, mono_frame
from liquid_stream.runtime.validate import StreamInputError, check_dtype, check_values

MAX_PENDING_S = 60.0  # most seconds of audio a stream may have waiting for step()


@dataclass
class _KwsStream:
    tracker: KeywordTracker
    resampler: StreamResampler | None
    rate: float  # the stream's input rate
    delay_s: float  # the resampler's delay: event times are shifted back by it
    n_in: int = 0  # input samples accepted
    pending: list[np.ndarray] = field(default_factory=list)  # model-rate float32 (T,)
    n_pending: int = 0

    def take(self, n: int) -> np.ndarray:
        """The first ``n`` pending samples (removed)."""
        x = np.concatenate(self.pending) if len(self.pending) > 1 else self.pending[0]
        self.pending = [x[n:]] if n < len(x) else []
        self.n_pending -= n
        return x[:n]

    def t(self, seconds: float) -> float:
        """Stream time (input seconds) of model-rate time ``seconds``."""
        return max(0.0, seconds - self.delay_s)


class KwsBank:
    """Many :class:`~liquid_stream.apps.kws.spotter.KeywordSpotter` streams of one model, the model
    batched (module docstring of :mod:`liquid_stream.apps.batch` for the rule).

    Args:
        model_path: the spotter's ONNX model (as :class:`KeywordSpotter`).
        threshold: as :class:`KeywordSpotter` (None: the model's tuned one, else 0.8).
        threads: onnxruntime intra-op threads.
        max_streams: most open streams (:meth:`open` refuses more: "server full").
        chunk: model-rate samples per step T0 (default: the spotter's 10 ms frame, as
            :class:`KeywordSpotter` feeds it; a call takes several where the graph allows).
        max_pending_s: most seconds of input a stream may buffer between steps.
    """

    def __init__(
        self,
        model_path: str | os.PathLike,
        *,
        threshold: float | dict[str, float] | None = None,
        threads: int = 1,
        max_streams: int = 256,
        chunk: int | None = None,
        max_pending_s: float = MAX_PENDING_S,
    ):
        self.spotter = KeywordSpotter(model_path, threshold=threshold, threads=threads)
        self.session = BatchedSession.from_streamer(self.spotter.streamer, max_streams=max_streams)
        self.max_streams = int(max_streams)
        self.chunk = int(chunk or self.spotter.chunk)
        if self.chunk < 1:
            raise ValueError(f"chunk must be >= 1 sample, got {chunk}")
        # whole chunks one call may take: a graph exported for longer calls (max_chunk)
        # steps a stream's waiting chunks at once (one call, not one a chunk)
        self.max_chunks = max(1, self.session.max_chunk // self.chunk)
        self.sample_rate = self.spotter.sample_rate
        self.max_pending = int(max_pending_s * self.sample_rate)
        self._streams: dict[str, _KwsStream] = {}

    def ids(self) -> list[str]:
        """The open streams, in the order they were opened."""
        return list(self._streams)

    def open(self, sid: str, *, sample_rate: float = 16000) -> dict:
        """Open stream ``sid`` of audio at ``sample_rate`` Hz; returns its info (JSON-able).
        ValueError (one line) for a duplicate id, a bad rate or a full bank."""
        if not isinstance(sid, str) or not sid:
            raise ValueError(f"stream id must be a non-empty string, got {sid!r}")
        if sid in self._streams:
            raise ValueError(f"stream {sid!r} is already open")
        if len(self._streams) >= self.max_streams:
            raise ValueError(f"server full: {self.max_streams} streams")
        rate = check_rate(sample_rate, self.sample_rate, integer=True)
        resampler = None if rate == self.sample_rate else stream_resampler(rate, self.sample_rate)
        self.session.add(sid)
        self._streams[sid] = _KwsStream(
            self.spotter.new_tracker(),
            resampler,
            rate,
            0.0 if resampler is None else resampler.delay_s,
        )
        sp = self.spotter
        return {
            "labels": list(sp.labels),
            "keywords": list(sp.keywords),
            "thresholds": dict(zip(sp.keywords, map(float, sp.thresholds), strict=True)),
            "chunk": self.chunk,
            "sample_rate": self.sample_rate,
            "input_rate": rate,
            "delay_s": self._streams[sid].delay_s,
        }

    def _stream(self, sid: str) -> _KwsStream:
        if sid not in self._streams:
            raise ValueError(f"no open stream {sid!r}")
        return self._streams[sid]

    def push(self, sid: str, block) -> None:
        """Check ``block`` (mono ``(T,)`` / ``(T, 1)``, float in [-1, 1] or int16) now and
        buffer it. A refused block (wrong shape or type, NaN / ±inf, a sample beyond the
        model's input bound, too much input waiting) raises ValueError (one line; a
        :class:`KwsInputError` naming the stream time for a bad sample) and changes nothing."""
        st = self._stream(sid)
        x = mono_frame(block)
        try:
            check_dtype(x.dtype)
        except StreamInputError as e:
            raise ValueError(str(e)) from None
        if not len(x):
            return
        center, half = self.session.streamer.input_center, self.session.streamer.input_half_width
        try:
            check_values(x[None, :, None], center, half)
        except StreamInputError as e:
            raise KwsInputError(e.reason, (st.n_in + (e.index or 0)) / st.rate) from None
        y = x.astype(np.float32)
        before = None if st.resampler is None else dict(st.resampler.__dict__)
        if st.resampler is not None:
            y = st.resampler.process(y)
        try:  # the resampling filter can take a sample near the bound past it
            check_values(y[None, :, None], center, half)
            if st.n_pending + len(y) > self.max_pending:
                raise ValueError(
                    f"stream {sid!r}: more than {self.max_pending / self.sample_rate:g} s of "
                    "input waiting for the model; block refused"
                )
        except (StreamInputError, ValueError) as e:
            if before is not None:
                st.resampler.__dict__.update(before)
            if not isinstance(e, StreamInputError):
                raise
            t = st.t(st.tracker.time_at(st.n_pending + (e.index or 0)))
            raise KwsInputError(
                f"{e.reason} (after resampling to {self.sample_rate} Hz)", t
            ) from None
        st.n_in += len(x)
        if len(y):
            st.pending.append(y)
            st.n_pending += len(y)

    def step(self) -> dict[str, list[dict]]:
        """Run every stream's pending whole chunks through the model (module docstring of
        :mod:`.batch`): per round, each stream with a whole chunk waiting takes k of them,
        as many as wait up to :attr:`max_chunks`, and the streams of one k share one
        batched call. Returns the events of the streams that advanced or failed:
        detections, then one ``scores`` event."""
        events: dict[str, list[dict]] = {}
        while True:
            by_k: dict[int, list[str]] = {}
            for sid, st in self._streams.items():
                k = min(st.n_pending // self.chunk, self.max_chunks)
                if k:
                    by_k.setdefault(k, []).append(sid)
            if not by_k:
                break
            for k, sids in sorted(by_k.items(), reverse=True):
                n = k * self.chunk
                self._run({sid: self._streams[sid].take(n) for sid in sids}, events)
        return events

    def _run(self, blocks: dict[str, np.ndarray], events: dict[str, list[dict]]) -> None:
        out = self.session.step(blocks)
        for sid in blocks:
            st, ev = self._streams[sid], events.setdefault(sid, [])
            if sid not in out:
                e = self.session.errors[sid]
                err = KwsInputError(e.reason, st.t(st.tracker.time_at(e.index or 0)))
                ev.append({"type": "error", "message": str(err)})
                continue
            st.tracker.update(out[sid])
            ev[:] = [e for e in ev if e["type"] != "scores"]  # one per step: the latest
            ev += [
                {"type": "detection", "t": st.t(d.time_s), "label": d.keyword, "score": d.score}
                for d in st.tracker.detections
            ]
            ev.append(
                {"type": "scores", "t": st.t(st.tracker.time_s), "scores": dict(st.tracker.scores)}
            )

    def close(self, sid: str) -> list[dict]:
        """Run what is pending (a last, shorter chunk too) and forget the stream; returns its
        last events."""
        st = self._stream(sid)
        events: dict[str, list[dict]] = {}
        while st.n_pending:
            self._run({sid: st.take(min(self.chunk, st.n_pending))}, events)
        self.session.remove(sid)
        del self._streams[sid]
        return events.get(sid, [])
