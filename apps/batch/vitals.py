"""Many vital-sign monitor beds over the same 1..3 models, stepped together (see :mod:`.batch`).

    bank = VitalsBank([shipped("vitals-ppg-hr"), shipped("vitals-ppg-rr")])
    info = bank.open("bed7", channels=["II", "PLETH"], sample_rate=250, alarms="hr>120")
    bank.push("bed7", chunk)                # (T, 2) raw samples: checked now, queued
    events = bank.step()                    # {"bed7": [{"type": "estimate", "t": 12, ...}]}
    bank.close("bed7")                      # the rest, then forgotten

A bed is a :class:`~liquid_stream.apps.vitals.monitor.VitalsMonitor` built with
``deferred=True`` over the bank's opened models (the bank's models whose channels the bed
has): its push does everything but the model steps (resampling, the out-of-range check,
the per-model NaN-gap rule: bridging, resets, held samples, the status of every second)
and queues the rows each model must see, with a reset wherever the rule resets the
model. The bank cuts each bed's rows into chunks of T0 samples per model (a reset first
runs what came before it, as a shorter chunk), steps all beds' chunks of a model in one
:class:`~liquid_stream.apps.batch.session.BatchedSession` call per round, and hands the
outputs back to the bed (``settle``), whose alarms and estimates follow as in the
monitor.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from liquid_stream.apps.batch.session import BatchedSession, check_rate
from liquid_stream.apps.vitals.model import VitalModel
from liquid_stream.apps.vitals.monitor import DEFAULT_MAX_GAP_S, Estimate, VitalsMonitor
from liquid_stream.io.bidmc_vocab import strip_name

MAX_PENDING_S = 60.0  # most seconds of input a bed may buffer between steps
MAX_CHANNELS = 64


@dataclass
class _Segment:
    """Rows a model must see without a reset in between; ``closed``: a reset follows."""

    g0: int = 0  # model-rate sample index of the segment's first row
    rows: list[np.ndarray] = field(default_factory=list)  # not yet run, (n, C) float32
    n: int = 0
    start: int = 0  # rows of the segment already run
    marks: deque = field(default_factory=deque)  # [second, position in segment, status]
    closed: bool = False


class _Feed:
    """One bed's queued rows for one model, cut into chunks (see the module docstring)."""

    def __init__(self, lane: int, window: int):
        self.lane, self.window = lane, window  # the model's index in the bed's monitor, W
        self.segs: deque[_Segment] = deque()
        self.inflight: tuple[_Segment, int, int] | None = None

    def add(self, ops: list[tuple]) -> None:
        """Append a monitor's queued work (``VitalsMonitor.take_work``)."""
        for op in ops:
            if op[0] == "reset":
                if self.segs and not self.segs[-1].closed:
                    self.segs[-1].closed = True
                else:
                    self.segs.append(_Segment(closed=True))
                continue
            _, rows, g0, marks = op
            if not self.segs or self.segs[-1].closed:
                self.segs.append(_Segment(g0=g0))
            seg = self.segs[-1]
            at = seg.start + seg.n - g0  # segment position of sample index g0
            seg.marks.extend([sec, i + at, status] for sec, i, status in marks)
            seg.rows.append(rows)
            seg.n += len(rows)

    def next_chunk(self, T0: int, force: bool, reset: Callable[[], None]) -> np.ndarray | None:
        """The next rows to run: T0 of them, or the rest of a segment a reset closes (all
        of it when ``force``); ``reset`` is called where the model is reset; None: wait."""
        while self.segs:
            seg = self.segs[0]
            if seg.n and (seg.n >= T0 or seg.closed or force):
                L = min(T0, seg.n)
                x = np.concatenate(seg.rows) if len(seg.rows) > 1 else seg.rows[0]
                seg.rows = [x[L:]] if L < len(x) else []
                seg.n -= L
                self.inflight = (seg, seg.start, L)
                seg.start += L
                return x[:L]
            if not seg.closed:
                return None
            reset()
            self.segs.popleft()
        return None

    def done(self, y: np.ndarray) -> list[tuple[int, float, str]]:
        """The in-flight chunk ran: ``(second, output, status)`` of its marks."""
        seg, p0, L = self.inflight
        out = []
        while seg.marks and seg.marks[0][1] < p0 + L:
            sec, pos, status = seg.marks.popleft()
            out.append((sec, float(y[pos - p0]), status))
        return out

    def refused(self) -> tuple[list[int], int]:
        """The in-flight chunk was refused: the seconds ending in it and its last sample
        index; later marks whose window covers it are no longer ``ok`` but ``bridged``."""
        seg, p0, L = self.inflight
        seconds = []
        while seg.marks and seg.marks[0][1] < p0 + L:
            seconds.append(seg.marks.popleft()[0])
        last = seg.g0 + p0 + L - 1
        for s in self.segs:
            for m in s.marks:
                if m[2] == "ok" and s.g0 + m[1] - self.window + 1 <= last:
                    m[2] = "bridged"
        return seconds, last


@dataclass
class _Bed:
    monitor: VitalsMonitor
    models: list[int]  # the bank's model index of each of the monitor's models
    feeds: list[_Feed]
    outbox: list[Estimate] = field(default_factory=list)
    errors: list[dict] = field(default_factory=list)
    waiting_s: float = 0.0  # input seconds pushed since the last step


class VitalsBank:
    """Many :class:`~liquid_stream.apps.vitals.monitor.VitalsMonitor` beds over the same
    1..3 vital-sign models, each model batched (module docstring of :mod:`.batch`).

    Args:
        models: exported ``bidmc`` models (one per target, one sample rate), as for
            :class:`VitalsMonitor`; a bed runs those whose channels it has.
        threads: onnxruntime intra-op threads per model.
        max_streams: most open beds (:meth:`open` refuses more: "server full").
        max_gap_s: longest NaN gap that is interpolated (:class:`VitalsMonitor`).
        chunk: model-rate samples per step T0 (default: each model's ``chunk``).
        max_pending_s: most seconds of input a bed may push between steps.
    """

    def __init__(
        self,
        models: Sequence[str | Path],
        *,
        threads: int = 1,
        max_streams: int = 2048,
        max_gap_s: float = DEFAULT_MAX_GAP_S,
        chunk: int | None = None,
        max_pending_s: float = MAX_PENDING_S,
    ):
        probe = VitalsMonitor(models, max_gap_s=max_gap_s, threads=threads)  # checks the set
        self.models: list[VitalModel] = probe.models  # in target order
        self.sessions = [
            BatchedSession.from_streamer(m.streamer, max_streams=max_streams) for m in self.models
        ]
        self.chunk = [int(chunk or s.chunk) for s in self.sessions]
        if min(self.chunk) < 1:
            raise ValueError(f"chunk must be >= 1 sample, got {chunk}")
        self.sample_rate = probe.sample_rate
        self.max_streams, self.max_gap_s = int(max_streams), max_gap_s
        self.max_pending_s = float(max_pending_s)
        self._beds: dict[str, _Bed] = {}
        self._pushed: set[str] = set()  # beds pushed since the last step

    def ids(self) -> list[str]:
        """The open beds, in the order they were opened."""
        return list(self._beds)

    def open(
        self, sid: str, *, channels: list[str], sample_rate: float, alarms: str | None = None
    ) -> dict:
        """Open bed ``sid`` whose chunks hold ``channels`` at ``sample_rate`` Hz, with
        ``alarms`` (``"hr>120,spo2<90"``); returns its info (JSON-able). ValueError (one
        line) for a duplicate id, a full bank, bad channels, rate or alarms."""
        if not isinstance(sid, str) or not sid:
            raise ValueError(f"bed id must be a non-empty string, got {sid!r}")
        if sid in self._beds:
            raise ValueError(f"stream {sid!r} is already open")
        if len(self._beds) >= self.max_streams:
            raise ValueError(f"server full: {self.max_streams} streams")
        if (
            isinstance(channels, str)
            or not isinstance(channels, Sequence)
            or not channels
            or len(channels) > MAX_CHANNELS
            or not all(isinstance(c, str) and c.strip() for c in channels)
        ):
            raise ValueError(
                f"channels must be a list of 1 to {MAX_CHANNELS} channel names, got {channels!r}"
            )
        names = [strip_name(c) for c in channels]
        if len(set(names)) < len(names):
            raise ValueError(f"channel names repeat: {names}")
        used = [i for i, m in enumerate(self.models) if set(m.channels) <= set(names)]
        if not used:
            needs = "; ".join(f"{m.path.name}: {'+'.join(m.channels)}" for m in self.models)
            raise ValueError(f"no model for channels {names} (the models need {needs})")
        rate = check_rate(sample_rate, self.sample_rate, integer=False)
        monitor = VitalsMonitor(
            [self.models[i] for i in used],
            alarms=alarms,
            channels=names,
            input_rate=rate,
            max_gap_s=self.max_gap_s,
            deferred=True,
        )
        feeds = [_Feed(j, self.models[i].window) for j, i in enumerate(used)]
        for i in used:
            self.sessions[i].add(sid)
        self._beds[sid] = _Bed(monitor, used, feeds)
        return {
            "targets": list(monitor.targets),
            "units": dict(monitor.units),
            "channels": list(monitor.channels),
            "models": [self.models[i].path.name for i in used],
            "windows_s": dict(monitor.windows_s),
            "alarms": [str(a.rule) for a in monitor.alarms],
            "sample_rate": self.sample_rate,
            "input_rate": rate,
            "chunk": {self.models[i].target: self.chunk[i] for i in used},
        }

    def _bed(self, sid: str) -> _Bed:
        if sid not in self._beds:
            raise ValueError(f"no open stream {sid!r}")
        return self._beds[sid]

    def push(self, sid: str, block) -> None:
        """Check ``block`` (``(T, channels)`` raw samples in the bed's channel order, or
        ``{channel: (T,)}``; NaN / ±inf mark gaps) now and queue it. A refused block
        (wrong shape or type, a sample beyond a model's input bound, too much input
        waiting) raises ValueError (one line) and changes nothing."""
        bed = self._bed(sid)
        mon = bed.monitor
        if isinstance(block, dict):
            missing = [c for c in mon.channels if c not in block]
            if missing:
                raise ValueError(
                    f"chunk has no channel {missing[0]!r} (bed channels {mon.channels})"
                )
            block = np.stack([np.asarray(block[c]) for c in mon.channels], 1)
        x = np.asarray(block)
        if x.dtype.kind not in "iuf":
            raise ValueError(f"samples must be integer or floating numbers, got {x.dtype}")
        if bed.waiting_s + len(x) / mon.input_rate > self.max_pending_s:
            raise ValueError(
                f"bed {sid!r}: more than {self.max_pending_s:g} s of input waiting for the "
                "models; block refused"
            )
        bed.outbox += mon.push(x)  # all or nothing: checks, resampling, gap rule, queued
        bed.waiting_s += len(x) / mon.input_rate
        self._pushed.add(sid)

    def step(self) -> dict[str, list[dict]]:
        """Run every bed's queued whole chunks through the models (one batched call per
        model and round); returns the events of the beds with any: estimates of the
        seconds now complete, errors.

        Only the beds pushed since the last step take part (in the order they were opened):
        every other bed has no new work (its feeds hold less than a chunk, left by the
        step that ran its last input) and no new events (estimates are settled by a step,
        errors made by one), so visiting them would change nothing; a step that takes a few
        beds of a large bank costs what those beds cost."""
        pushed, self._pushed = self._pushed, set()
        beds = {sid: bed for sid, bed in self._beds.items() if sid in pushed}
        for bed in beds.values():
            for feed, ops in zip(bed.feeds, bed.monitor.take_work(), strict=True):
                feed.add(ops)
            bed.waiting_s = 0.0
        for i in range(len(self.models)):
            feeds = {
                sid: bed.feeds[bed.models.index(i)] for sid, bed in beds.items() if i in bed.models
            }
            self._drain(i, feeds, force=False)
        return {sid: ev for sid, bed in beds.items() if (ev := self._events(bed))}

    def _drain(self, i: int, feeds: dict[str, _Feed], force: bool) -> None:
        """Model ``i``: run the ``feeds``' chunks, a round at a time, one call per length."""
        session, T0 = self.sessions[i], self.chunk[i]
        active = {sid: f for sid, f in feeds.items() if f.segs}
        while active:
            by_len: dict[int, dict[str, np.ndarray]] = {}
            for sid, feed in list(active.items()):
                x = feed.next_chunk(T0, force, lambda sid=sid: session.reset(sid))
                if x is None:
                    del active[sid]
                else:
                    by_len.setdefault(len(x), {})[sid] = x
            for blocks in by_len.values():
                out = session.step(blocks)
                for sid in blocks:
                    bed, feed = self._beds[sid], active[sid]
                    if sid in out:
                        bed.monitor.settle(feed.lane, feed.done(out[sid][:, 0]))
                        continue
                    seconds, last = feed.refused()
                    bed.monitor.refuse_rows(feed.lane, seconds, last)
                    e, mon = session.errors[sid], bed.monitor
                    delay = 0.0 if mon.resampler is None else mon.resampler.delay_s
                    t = max(0.0, (last + 1 - len(blocks[sid])) / self.sample_rate - delay)
                    n = len(blocks[sid])
                    msg = (
                        f"{self.models[i].path.name} refused the input at {t:.3f} s: "
                        f"{e.reason}; its {n} samples are skipped (seconds ending in them: "
                        "no estimate)"
                    )
                    bed.errors.append({"type": "error", "message": msg})

    def _events(self, bed: _Bed) -> list[dict]:
        ests, bed.outbox = bed.outbox + bed.monitor.emit(), []
        events, bed.errors = bed.errors, []
        units = bed.monitor.units
        return events + [estimate_event(e, units) for e in ests]

    def close(self, sid: str) -> list[dict]:
        """End of the bed's stream: resolve open gaps, run everything queued (the last,
        shorter chunks too), emit; returns its last events and forgets the bed."""
        bed = self._bed(sid)
        bed.outbox += bed.monitor.flush()
        for feed, ops in zip(bed.feeds, bed.monitor.take_work(), strict=True):
            feed.add(ops)
        for i, feed in zip(bed.models, bed.feeds, strict=True):
            self._drain(i, {sid: feed}, force=True)
        events = self._events(bed)
        for i in bed.models:
            self.sessions[i].remove(sid)
        del self._beds[sid]
        return events


def estimate_event(est: Estimate, units: dict[str, str]) -> dict:
    """A monitor :class:`Estimate` as a JSON-able event (NaN values as None)."""
    return {
        "type": "estimate",
        "t": int(est.time_s),
        "values": {k: (None if math.isnan(v) else float(v)) for k, v in est.values.items()},
        "valid": dict(est.valid),
        "status": dict(est.status),
        "units": dict(units),
        "alarms": [name for name, on in est.alarms.items() if on],
        "raised": [name for name, ev in est.events if ev == "on"],
        "cleared": [name for name, ev in est.events if ev == "off"],
        "technical": list(est.technical),
    }
