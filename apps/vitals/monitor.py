"""The streaming vital-sign monitor: 1..3 ``bidmc`` models on a multi-channel stream, one
:class:`Estimate` per second, with gap handling and alarms (no torch).

    monitor = VitalsMonitor(["hr.onnx", "rr.onnx"], alarms="hr>120",
                            channels=["RESP", "PLETH", "II"], input_rate=125)
    for chunk in chunks:                       # (T, C) raw samples, any T
        for est in monitor.push(chunk):        # one Estimate per completed second
            print(est.time_s, est.values, est.valid, est.alarms)
    monitor.flush()

The monitor reports each model's output at the last sample of every second, flagged
*valid* once the window holds W real samples since the last reset.

Signal problems, per model (its own channels):

- **short gap** (NaN run of at most ``max_gap_s``, default 2 s, with a valid sample before
  it): linearly interpolated once the first valid sample after it arrives (those samples
  are held back meanwhile, so estimates can arrive up to 2 s late); estimates stay
  ``bridged`` (invalid) until the window no longer covers an interpolated sample.
- **long gap** (longer, or at the record start): the samples are skipped, the model state
  is reset at the gap and re-warms after it (``gap`` then ``warmup``: invalid, until the
  window holds W samples fed after the gap). Each gap is judged on its own, sample by
  sample (one right after a long gap follows the same rule), so the chunking of the
  stream changes nothing.
- **out-of-range sample** (finite, but beyond the model's input bound: more than 10⁶
  input standard deviations from its input mean, :mod:`liquid_stream.runtime.validate`; a corrupt
  value such as a 1e6 in a PLETH channel, never a real signal): the models would refuse
  it. ``VitalsMonitor`` refuses the chunk by default (``out_of_range="refuse"``:
  :class:`VitalsInputError`, the monitor unchanged); a record
  (:func:`~liquid_stream.apps.vitals.run.open_record`, the ``vitals`` command) uses
  ``out_of_range="gap"``: the sample is invalid for that model, exactly like a NaN (a
  short gap is bridged, a long one resets), and counted
  (:meth:`VitalsMonitor.out_of_range_counts`), so a long record survives a glitch. Any
  other refusal (a model overflow) stops
  :func:`~liquid_stream.apps.vitals.run.run_record` at that chunk, keeping the estimates
  before it (``RunResult.error``).
- **no signal** (:mod:`liquid_stream.apps.vitals.signal_quality`: a flat line, a constant
  offset, a clipped or rail-saturated signal, quantisation noise, noise with no pulse /
  QRS / breathing, mains hum alone): judged every second on each channel's trailing
  samples as fed to the model (2 s for the flat, quantisation and clipping tests, 8 s
  for the others). The lane's estimate is ``nosignal`` (invalid) while any of its
  channels is judged so, and ``recovering`` (invalid) while its window still covers such
  a second; the second carries a technical alarm per channel (``"no signal on PLETH
  (flat line)"``, ``"ECG lead off (II: flat line)"``; a long NaN gap: ``"... (no
  data)"``), raised and cleared as events. So a flat line is invalid within 2 s of its
  start (3 s counting the second it ends in), noise or hum within 8 s.
- **fallback** (``backups``): a model of the same target on other channels (the PPG-only HR
  model behind the PPG+ECG one, the ECG-only one, the PPG+ECG RR model behind the
  respiration-belt one) runs beside the primary model all the time, so it is warm when it
  is needed. A second whose primary estimate is not ``ok`` (an ECG lead off, a PLETH flat, a
  gap on one of its channels, its warm-up after one) takes the first backup whose estimate
  is ``ok``, named in :attr:`Estimate.source`; the technical alarm of the lost channel stays
  raised. So a monitor with a PPG and an ECG keeps a pulse rate from the PPG when the lead
  comes off, as a bedside monitor takes its pulse rate from the oximeter.
- **other sampling rate**: the record is resampled to the models' rate by a causal,
  stateful polyphase FIR (:mod:`liquid_stream.apps.common.resample`: the filter of
  ``scipy.signal.resample_poly``, without its delay compensation: chunked output equals
  ``upfirdn`` on the whole record; the delay is 10 samples of the slower rate, e.g. 80 ms
  for 250 -> 125 Hz), primed with the first sample (``prime="edge"``), so a signal with
  an offset does not start with a step up from 0.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from liquid_stream.apps.common.resample import StreamResampler
from liquid_stream.apps.vitals.alarms import Alarm, AlarmRule, parse_alarms
from liquid_stream.apps.vitals.model import VitalModel, VitalsError, load_model
from liquid_stream.apps.vitals.ppg_polarity import needs_polarity, polarity
from liquid_stream.apps.vitals.signal_quality import LONG_S, channel_kind, judge, technical_message
from liquid_stream.io.bidmc_vocab import VITALS, strip_name
from liquid_stream.runtime.validate import MAX_STD, StreamInputError

DEFAULT_MAX_GAP_S = 2.0
OUT_OF_RANGE = ("refuse", "gap")


class VitalsInputError(ValueError):
    """A chunk refused by :meth:`VitalsMonitor.push` (a sample beyond a model's input
    bound, or a model overflow); ``time_s`` is the stream time of the first bad sample,
    ``reason`` what is wrong. The monitor is exactly as before the chunk."""

    def __init__(self, reason: str, time_s: float):
        self.reason = reason
        self.time_s = float(time_s)
        super().__init__(f"input refused at {self.time_s:.3f} s: {reason}; monitor unchanged")


@dataclass
class Estimate:
    """The monitor's output for one second ``(time_s - 1, time_s]`` of the stream."""

    time_s: int
    values: dict[str, float]  # target -> estimate (NaN inside a long gap)
    status: dict[str, str]  # "ok" | "warmup" | "bridged" | "gap" | "nosignal" | "recovering"
    alarms: dict[str, bool] = field(default_factory=dict)  # rule name -> active
    events: list[tuple[str, str]] = field(default_factory=list)  # (rule name, "on"/"off")
    ref: dict[str, float] = field(default_factory=dict)  # window-mean reference
    ref_1hz: dict[str, float] = field(default_factory=dict)  # reading at time_s
    technical: list[str] = field(default_factory=list)  # active technical alarms (messages)
    tech_events: list[tuple[str, str]] = field(default_factory=list)  # (message, "on"/"off")
    source: dict[str, str] = field(default_factory=dict)  # target -> backup model (fallback)

    @property
    def valid(self) -> dict[str, bool]:
        return {t: s == "ok" for t, s in self.status.items()}


class _LaneRefusal(Exception):
    """A lane's model refused its input at model-rate sample ``index`` (push converts it)."""

    def __init__(self, reason: str, index: int):
        super().__init__(reason)
        self.reason, self.index = reason, index


class _Lane:
    """One model fed with its own channels: NaN-gap bridging, resets, per-second output.

    A sample is *bad* when any of the lane's channels is non-finite; a gap is a maximal run
    of bad samples. The gap handling is a per-sample state machine whose only state is the
    open gap (where it started, whether it is already known to be long, the samples held
    back), so its result does not depend on how the stream is cut into chunks:

    - no open gap: a good sample is fed; a bad one opens a gap (undecided).
    - undecided gap: bad samples are held back. Once the gap is longer than ``max_gap`` or
      has no fed sample before it (stream start), it is *long*: counted, the model is
      reset, the held samples are skipped. A good sample ending it while still undecided
      makes it *short*: the held samples are interpolated (from the last fed sample to this
      one), fed, and the estimates stay ``bridged`` while the window covers one of them.
    - long gap: bad samples are skipped (seconds ending in it are ``gap``); the next good
      sample closes it and is the first fed since the reset (``warmup`` until W fed).
    - end of stream: an undecided gap is long (never bridged).

    The model work is separable from this rule: a fed run of rows becomes the rows, its
    start index and the *marks* ``(second, sample index, status)`` of the seconds ending
    in it (their status is known when the rows are fed); the model's outputs at the marked
    samples are then *settled* into the per-second results. ``deferred=False`` (the
    monitor) runs the model at once; ``deferred=True`` queues ``("feed", rows, g0,
    marks)`` and ``("reset",)`` in :attr:`queue` for a caller that runs many lanes'
    models in batches (:class:`~liquid_stream.apps.batch.VitalsBank`) and settles the
    marks later, in order; a second is ready to emit once every mark up to it is settled.
    """

    def __init__(self, model: VitalModel, cols: list[int], max_gap: int, deferred: bool = False):
        self.model, self.cols, self.max_gap = model, cols, max_gap
        self.deferred = deferred
        self.queue: list[tuple] = []  # deferred model work, in order
        self.pending: deque[int] = deque()  # seconds whose marks await their outputs
        self.sps = int(round(model.sample_rate))
        self.W = model.window
        self.n_in = 0  # samples pushed so far (global index of the next one)
        self.gap_start: int | None = None  # first sample of the open gap (None: none open)
        self.gap_long = False  # the open gap is long (counted, model reset, being skipped)
        self.held = np.zeros((0, len(cols)))  # the undecided open gap's samples
        self.anchor: np.ndarray | None = None  # last fed sample (for interpolation)
        self.first_fed: int | None = None  # first sample fed since the last reset
        self.last_bridged = -(10**18)
        self.out: dict[int, tuple[float, str]] = {}
        self.short_gaps = self.short_gap_samples = 0
        self.long_gaps = self.long_gap_samples = 0
        self.out_of_range = 0  # samples beyond the input bound made gaps (out_of_range="gap")
        self.out_of_range_first: int | None = None  # the first one's index
        # signal quality: each channel's kind, the trailing fed samples (T <= Q, C), the
        # last sample of a second judged "no signal", the verdicts of the seconds not yet
        # emitted {second: {channel: reason}} and the channels of the open gap
        self.kinds = [channel_kind(c) for c in model.channels]
        self.Q = int(round(LONG_S * self.sps))
        self.recent = np.zeros((0, len(cols)))
        self.last_bad = -(10**18)
        self.tech: dict[int, dict[str, str]] = {}
        self.gap_cols = np.zeros(len(cols), dtype=bool)
        # PPG polarity (apps/vitals/ppg_polarity.py): the PLETH column, its sign (+1 until
        # decided) and whether it is decided since the last reset
        pol = [k for k, c in enumerate(model.channels) if needs_polarity(c)]
        self.pol_col: int | None = pol[0] if pol else None
        self.sign, self.decided = 1.0, False

    @property
    def n_resolved(self) -> int:
        """Samples before this are fed or skipped (an undecided gap is held back)."""
        if self.gap_start is not None and not self.gap_long:
            return self.gap_start
        return self.n_in

    def _boundaries(self, g0: int, n: int) -> np.ndarray:
        """Global indices i in [g0, g0+n) that end a second."""
        first = -(-(g0 + 1) // self.sps) * self.sps - 1
        return np.arange(first, g0 + n, self.sps)

    def _feed(self, rows: np.ndarray, g0: int) -> None:
        """Feed ``rows`` (raw model-rate samples ``g0 …``; a PLETH turned by its sign) to
        the model: now, or queued. Cut where the PLETH's polarity is decided."""
        self.anchor = rows[-1].copy()  # raw: a short gap is interpolated before the sign
        while len(rows):
            n = self._feed_part(rows, g0)
            rows, g0 = rows[n:], g0 + n

    def _feed_part(self, rows: np.ndarray, g0: int) -> int:
        """Feed ``rows`` up to the second where the polarity gets decided (all of them if
        none); returns how many were fed."""
        if self.first_fed is None:
            self.first_fed = g0
        if self.pol_col is not None:
            rows = rows.copy()
            rows[:, self.pol_col] *= self.sign
        marks = []  # (second, sample index, status) of the seconds ending in these rows
        past = np.concatenate([self.recent, rows])  # samples g0 - len(recent) ...
        p0 = g0 - len(self.recent)
        decided = None  # the sign decided at the last mark, if any
        for i in self._boundaries(g0, len(rows)):
            sec = (int(i) + 1) // self.sps
            j = int(i) - p0 + 1  # past[:j] ends at sample i
            window = past[max(0, j - self.Q) : j].T  # (C, <= Q) the trailing samples
            verdicts = {
                ch: r
                for ch, kind, x in zip(self.model.channels, self.kinds, window, strict=True)
                if (r := judge(x, self.sps, kind)) is not None
            }
            if verdicts:
                self.tech[sec] = verdicts
                self.last_bad = int(i)
                status = "nosignal"
            elif i - self.first_fed + 1 < self.W:
                status = "warmup"
            elif self.last_bridged >= i - self.W + 1:
                status = "bridged"
            elif self.last_bad >= i - self.W + 1:
                status = "recovering"
            else:
                status = "ok"
            marks.append((sec, int(i), status))
            if (
                not self.decided
                and self.pol_col is not None
                and j >= self.Q
                and int(i) - self.Q + 1 >= self.first_fed
                and self.last_bridged < int(i) - self.Q + 1  # nothing interpolated, refused
                and self.model.channels[self.pol_col] not in verdicts
            ):  # the first full window of a PLETH worth reading: which way up is it?
                decided = polarity(window[self.pol_col], self.sps)
                rows, past = rows[: int(i) - g0 + 1], past[:j]
                break
        self.recent = past[-self.Q :]
        self._run(rows, g0, marks)
        if decided is not None:  # restart the model on that window, turned by the sign
            refeed = self.recent.copy()
            refeed[:, self.pol_col] *= decided
            g1 = g0 + len(rows) - len(refeed)
            self._reset_model()
            self.first_fed, self.sign, self.decided = g1, decided, True
            self.recent = refeed
            self._run(refeed, g1, [])
        return len(rows)

    def _run(self, rows: np.ndarray, g0: int, marks: list) -> None:
        """Run (or queue) the model on ``rows`` and settle the ``marks`` in them."""
        rows = rows.astype(np.float32)
        if self.deferred:
            self.queue.append(("feed", rows, g0, marks))
            self.pending.extend(sec for sec, _, _ in marks)
            return
        try:
            y = self.model.streamer.process(rows)[:, 0]
        except StreamInputError as e:  # e.g. an overflow inside the model
            raise _LaneRefusal(f"{self.model.path.name}: {e.reason}", g0 + (e.index or 0)) from e
        self.settle([(sec, float(y[i - g0]), status) for sec, i, status in marks])

    def settle(self, results: list[tuple[int, float, str]]) -> None:
        """Record ``(second, model output, status)`` of marks (deferred: in their order)."""
        for sec, value, status in results:
            if self.deferred:
                if not self.pending or self.pending[0] != sec:
                    raise RuntimeError(f"lane settles second {sec} out of order")
                self.pending.popleft()
            self.out[sec] = (value, status)

    def refuse_rows(self, seconds: list[int], last: int) -> None:
        """Deferred: the model refused the queued rows up to sample ``last`` (an overflow),
        its state staying as before them. The ``seconds`` ending in them are reported NaN
        with status ``gap``; later estimates whose window covers them are ``bridged``."""
        self.settle([(sec, math.nan, "gap") for sec in seconds])
        self.last_bridged = max(self.last_bridged, last)

    def _skip(self, g0: int, n: int) -> None:
        off = {
            ch: "no data" for ch, bad in zip(self.model.channels, self.gap_cols, strict=True) if bad
        }
        for i in self._boundaries(g0, n):
            sec = (i + 1) // self.sps
            self.out[sec] = (math.nan, "gap")
            if off:
                self.tech[sec] = off
        self.long_gap_samples += n

    def _reset_model(self) -> None:
        if self.deferred:
            self.queue.append(("reset",))
        else:
            self.model.streamer.reset()

    def _reset(self) -> None:
        """A long gap: the model restarts, and the PLETH's polarity is decided anew."""
        self._reset_model()
        self.anchor, self.first_fed = None, None
        self.recent = self.recent[:0]
        self.sign, self.decided = 1.0, False

    _STATE = (
        "n_in",
        "gap_start",
        "gap_long",
        "held",
        "anchor",
        "first_fed",
        "last_bridged",
        "short_gaps",
        "short_gap_samples",
        "long_gaps",
        "long_gap_samples",
        "out_of_range",
        "out_of_range_first",
        "recent",
        "last_bad",
        "gap_cols",
        "sign",
        "decided",
    )

    def snapshot(self) -> tuple:
        """Everything :meth:`push` changes (arrays are replaced, never written in place)."""
        fields = {k: getattr(self, k) for k in self._STATE}
        model = self.model.streamer.state
        if self.deferred:
            model = (list(self.queue), deque(self.pending))
        return fields, (dict(self.out), dict(self.tech)), model

    def restore(self, snap: tuple) -> None:
        fields, (out, tech), model = snap
        for k, v in fields.items():
            setattr(self, k, v)
        self.out, self.tech = out, tech
        if self.deferred:
            self.queue, self.pending = model
        else:
            self.model.streamer.state = model

    def beyond_bound(self, x: np.ndarray) -> np.ndarray:
        """``(T, C)`` mask of the finite samples of ``x`` (this lane's columns) beyond the
        model's input bound (input mean ± MAX_STD input standard deviations)."""
        s = self.model.streamer
        with np.errstate(invalid="ignore"):
            return np.isfinite(x) & ~(np.abs(x - s.input_center) <= s.input_half_width)

    def all_in_bound(self, x: np.ndarray) -> bool:
        """Whether every sample of ``x`` (this lane's columns) is finite and within the
        model's input bound: the common block, with no gap and nothing beyond."""
        s = self.model.streamer
        with np.errstate(invalid="ignore"):
            return bool((np.abs(x - s.input_center) <= s.input_half_width).all())

    def push(self, x: np.ndarray) -> None:
        finite = np.isfinite(x).all(1)
        if finite.all():  # the common case: one good run
            self._good_run(x)
            self.n_in += len(x)
            return
        bad = ~finite
        edges = np.flatnonzero(np.diff(bad.astype(np.int8))) + 1
        bounds = [0, *edges.tolist(), len(x)]
        for a, b in zip(bounds[:-1], bounds[1:], strict=True):
            if a == b:
                continue
            if bad[a]:
                self._bad_run(x[a:b])
            else:
                self._good_run(x[a:b])
            self.n_in += b - a

    def _bad_run(self, rows: np.ndarray) -> None:
        if self.gap_start is None:  # a gap opens, undecided
            self.gap_start, self.gap_long = self.n_in, False
            self.gap_cols = np.zeros(len(self.cols), dtype=bool)
        self.gap_cols = self.gap_cols | ~np.isfinite(rows).all(0)
        if self.gap_long:  # a long gap goes on
            self._skip(self.n_in, len(rows))
            return
        self.held = np.concatenate([self.held, rows])
        if len(self.held) > self.max_gap or self.anchor is None:
            self._make_long()

    def _make_long(self) -> None:
        """The open gap is long: count it, reset the model, skip what was held."""
        self.long_gaps += 1
        self._reset()
        self._skip(self.gap_start, len(self.held))
        self.held = self.held[:0]
        self.gap_long = True

    def _good_run(self, rows: np.ndarray) -> None:
        if self.gap_start is not None:  # the good sample ends the open gap
            if not self.gap_long:
                self._bridge(rows[0])
            self.gap_start, self.gap_long = None, False
        self._feed(rows, self.n_in)

    def _bridge(self, after: np.ndarray) -> None:
        """Interpolate the held gap between the last fed sample and ``after``, feed it."""
        span = np.concatenate([self.anchor[None], self.held, after[None]])
        pos = np.arange(len(span))
        for c in range(span.shape[1]):
            ok = np.isfinite(span[:, c])
            span[~ok, c] = np.interp(pos[~ok], pos[ok], span[ok, c])
        n = len(self.held)
        self.short_gaps += 1
        self.short_gap_samples += n
        self.last_bridged = self.gap_start + n - 1
        self.held = self.held[:0]
        self._feed(span[1:-1], self.gap_start)

    def close(self) -> None:
        """End of stream: an open gap is never bridged."""
        if self.gap_start is not None and not self.gap_long:
            self._make_long()

    def resolved_seconds(self) -> int:
        return self.n_resolved // self.sps

    def ready_seconds(self) -> int:
        """Seconds up to this one have their results (resolved, and every mark settled)."""
        done = self.resolved_seconds()
        return min(done, self.pending[0] - 1) if self.pending else done


class VitalsMonitor:
    """Runs 1..3 vital-sign models on a multi-channel stream; one :class:`Estimate` per second.

    Args:
        models: paths of exported ``bidmc`` ONNX models (at most one per target), or
            models already opened by :func:`~liquid_stream.apps.vitals.model.load_model`.
        alarms: ``"hr>120,spo2<90"`` (see :mod:`liquid_stream.apps.vitals.alarms`) or rules.
        channels: column names of the chunks given to :meth:`push` (default: the union of
            the models' channels, in model order).
        input_rate: sampling rate of those chunks (default: the models'); another rate is
            resampled (:class:`StreamResampler`).
        max_gap_s: longest NaN gap that is interpolated; longer gaps reset the model.
        threads: onnxruntime intra-op threads per model.
        out_of_range: what a finite sample beyond a model's input bound (its input mean ±
            10⁶ input standard deviations, :mod:`liquid_stream.runtime.validate`; a corrupt value,
            never a real signal) does: ``"refuse"`` (default) the chunk, with
            :class:`VitalsInputError`; ``"gap"``: the sample is invalid for that model,
            like a NaN (bridged or reset by the gap rules, counted in
            :meth:`out_of_range_counts`), so a long record survives a glitch.
        backups: models of targets that ``models`` estimate, on other channels, run beside
            them; each second a target whose model is not ``ok`` takes the first of its
            backups that is (module docstring, "fallback"); their channels join the
            default ``channels``. Not with ``deferred``.
        deferred: run no model here: every model step is queued (:meth:`take_work`) for
            a caller that runs the models of many monitors in batches and hands the outputs
            back (:meth:`settle`); estimates come once their seconds are settled
            (:meth:`emit`). Used by :class:`~liquid_stream.apps.batch.VitalsBank`, which
            shares the opened ``models`` between monitors (their streamers' own state is
            then unused).

    :meth:`push` is all-or-nothing: a refused chunk (an out-of-range sample with
    ``out_of_range="refuse"``, a model overflow, a malformed chunk) raises a ValueError
    and leaves every model, gap state and counter as before it, so the stream goes on
    as if the chunk had never been pushed.
    """

    def __init__(
        self,
        models: Sequence[str | Path],
        alarms: str | Sequence[str] | Sequence[AlarmRule] | None = None,
        channels: Sequence[str] | None = None,
        input_rate: float | None = None,
        max_gap_s: float = DEFAULT_MAX_GAP_S,
        threads: int | None = 1,
        out_of_range: str = "refuse",
        deferred: bool = False,
        backups: Sequence[str | Path] = (),
    ):
        if not models:
            raise VitalsError("give at least one model")
        if out_of_range not in OUT_OF_RANGE:
            raise VitalsError(f"out_of_range must be one of {OUT_OF_RANGE}, got {out_of_range!r}")
        self.out_of_range = out_of_range
        if len(models) > len(VITALS):
            raise VitalsError(f"at most {len(VITALS)} models (one each for {', '.join(VITALS)})")
        self.models = [p if isinstance(p, VitalModel) else load_model(p, threads) for p in models]
        seen: dict[str, Path] = {}
        for m in self.models:
            if m.target in seen:
                raise VitalsError(
                    f"two models estimate {m.target}: {seen[m.target].name} and {m.path.name}"
                )
            seen[m.target] = m.path
        self.backups = [p if isinstance(p, VitalModel) else load_model(p, threads) for p in backups]
        if self.backups and deferred:
            raise VitalsError("backup models need a monitor that runs its models (not deferred)")
        for b in self.backups:
            if b.target not in seen:
                raise VitalsError(f"backup {b.path.name} estimates {b.target}: no model does")
            if b.path == seen[b.target]:
                raise VitalsError(f"{b.path.name} is its own backup")
        self.models.sort(key=lambda m: VITALS.index(m.target))
        every = self.models + self.backups  # one lane each, in this order
        rates = {m.sample_rate for m in every}
        if len(rates) > 1:
            raise VitalsError(
                "models expect different sample rates: "
                + ", ".join(f"{m.path.name} {m.sample_rate:g} Hz" for m in every)
                + "; export them at one rate"
            )
        self.sample_rate = self.models[0].sample_rate
        self.targets = [m.target for m in self.models]
        self.units = {m.target: m.units for m in self.models}
        self.windows_s = {m.target: m.window_s for m in self.models}
        needed: list[str] = []
        for m in every:
            needed += [c for c in m.channels if c not in needed]
        self.channel_users = {c: [m.path.name for m in every if c in m.channels] for c in needed}
        self.channels = [strip_name(c) for c in channels] if channels is not None else needed
        missing = [c for c in needed if c not in self.channels]
        if missing:
            raise VitalsError(
                f"channel {missing[0]!r} needed by {', '.join(self.channel_users[missing[0]])} "
                f"is not in the input (it has: {', '.join(self.channels) or 'nothing'})"
            )
        self.samples_in = 0
        self.set_input_rate(input_rate or self.sample_rate)
        max_gap = int(round(max_gap_s * self.sample_rate))
        self.deferred = deferred
        self._lanes = [  # the models' lanes (in models order), then the backups'
            _Lane(m, [self.channels.index(c) for c in m.channels], max_gap, deferred) for m in every
        ]
        self._model_lanes = self._lanes[: len(self.models)]
        self._backup_lanes = self._lanes[len(self.models) :]
        if alarms and isinstance(next(iter(alarms)), AlarmRule):
            rules = list(alarms)
        else:
            rules = parse_alarms(alarms)
        for r in rules:
            if r.vital not in self.targets:
                raise VitalsError(
                    f"alarm {r.name} needs a {r.vital} model; models given: "
                    f"{', '.join(self.targets)}"
                )
        self.alarms = [Alarm(r) for r in rules]
        self.max_gap_s = max_gap_s
        self._next_second = 1
        self._technical: list[str] = []  # the technical alarms active at the last second

    def set_input_rate(self, rate: float) -> None:
        """Set the sampling rate of the pushed chunks (before the first push)."""
        if self.samples_in:
            raise RuntimeError("set_input_rate after push")
        self.input_rate = float(rate)
        same = abs(self.input_rate - self.sample_rate) <= 1e-9
        self.resampler = (  # the past is the first sample: no step up from 0 at the start
            None if same else StreamResampler(self.input_rate, self.sample_rate, prime="edge")
        )

    def push(self, chunk) -> list[Estimate]:
        """Feed ``(T, len(channels))`` raw samples (or ``{channel: (T,)}``); returns the
        estimates of the seconds completed by it (usually 0 or 1; more after a held gap)."""
        if isinstance(chunk, dict):
            chunk = np.stack([np.asarray(chunk[c], dtype=np.float64) for c in self.channels], 1)
        x = np.asarray(chunk, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != len(self.channels):
            raise ValueError(f"expected (T, {len(self.channels)}) samples, got {x.shape}")
        n = len(x)
        snap = (
            self.samples_in,
            None if self.resampler is None else dict(self.resampler.__dict__),
            [lane.snapshot() for lane in self._lanes],
        )
        try:
            if self.resampler is not None:
                x = self.resampler.process(x)
            lanes = [self._lane_input(lane, x) for lane in self._lanes]  # all checked first
            for lane, xl in zip(self._lanes, lanes, strict=True):
                if len(xl):
                    lane.push(xl)
            self.samples_in += n
        except BaseException as e:  # all or nothing: back to the state before the chunk
            self.samples_in = snap[0]
            if snap[1] is not None:
                self.resampler.__dict__.update(snap[1])
            for lane, lane_snap in zip(self._lanes, snap[2], strict=True):
                lane.restore(lane_snap)
            if isinstance(e, _LaneRefusal):
                raise VitalsInputError(e.reason, self._stream_time(e.index)) from None
            raise
        return self.emit()

    def _lane_input(self, lane: _Lane, x: np.ndarray) -> np.ndarray:
        """The lane's columns of the (resampled) chunk ``x``; a finite sample beyond its
        model's input bound refuses the chunk (``out_of_range="refuse"``) or is made NaN,
        i.e. a gap (``"gap"``, counted)."""
        xl = x[:, lane.cols]
        if lane.all_in_bound(xl):  # the common case
            return xl
        beyond = lane.beyond_bound(xl)
        if not beyond.any():
            return xl
        t, c = (int(i) for i in np.argwhere(beyond)[0])
        if self.out_of_range == "gap":
            xl = np.where(beyond, np.nan, xl)
            lane.out_of_range += int(beyond.any(1).sum())
            if lane.out_of_range_first is None:
                lane.out_of_range_first = lane.n_in + t
            return xl
        center, half = lane.model.streamer.input_center[c], lane.model.streamer.input_half_width[c]
        lo, hi = center - half, center + half
        raise VitalsInputError(
            f"{lane.model.channels[c]} sample value {xl[t, c]:.4g} is outside the accepted range "
            f"{lo:.4g} … {hi:.4g} of {lane.model.path.name} (input mean ± {MAX_STD:.0e} input "
            "standard deviations)",
            self._stream_time(lane.n_in + t),
        )

    def _stream_time(self, index: int) -> float:
        """Input-stream seconds of model-rate sample ``index`` (less the resampler's delay)."""
        delay = 0.0 if self.resampler is None else self.resampler.delay_s
        return max(0.0, index / self.sample_rate - delay)

    def flush(self) -> list[Estimate]:
        """End of stream: resolve open gaps, emit what is left (an incomplete last second
        gets no estimate)."""
        for lane in self._lanes:
            lane.close()
        return self.emit()

    def take_work(self) -> list[list[tuple]]:
        """Deferred: the model work queued since the last call, one list per model (in
        :attr:`models` order) of ``("feed", rows (T, C) float32, g0, marks)`` and
        ``("reset",)`` in stream order; ``marks`` are ``(second, sample index, status)`` of
        the seconds ending in those rows, to :meth:`settle` with the model's outputs at
        those samples."""
        work = [lane.queue for lane in self._lanes]
        for lane in self._lanes:
            lane.queue = []
        return work

    def settle(self, model: int, results: list[tuple[int, float, str]]) -> None:
        """Deferred: ``(second, model output, status)`` of marks of model ``model``, in
        the order they were queued."""
        self._lanes[model].settle(results)

    def refuse_rows(self, model: int, seconds: list[int], last: int) -> None:
        """Deferred: model ``model`` refused queued rows up to sample ``last``; its state
        is as before them and the ``seconds`` ending in them become NaN, status ``gap``
        (later estimates whose window covers them: ``bridged``)."""
        self._lanes[model].refuse_rows(seconds, last)

    def emit(self) -> list[Estimate]:
        """The estimates of the seconds now complete and not yet returned (with a
        deferred monitor: once their marks are settled)."""
        upto = min(lane.ready_seconds() for lane in self._lanes)
        out = []
        for k in range(self._next_second, upto + 1):
            values, status, verdicts, source = {}, {}, {}, {}
            for lane in self._backup_lanes:  # the backups' channel verdicts, then the models'
                verdicts.update(lane.tech.pop(k, {}))
            for lane in self._model_lanes:
                values[lane.model.target], status[lane.model.target] = lane.out.pop(k)
                verdicts.update(lane.tech.pop(k, {}))
            for lane in self._backup_lanes:  # fallback: the first backup that is ok
                t, (v, st) = lane.model.target, lane.out.pop(k)
                if status[t] != "ok" and st == "ok":
                    values[t], status[t], source[t] = v, st, lane.model.path.stem
            est = Estimate(k, values, status, source=source)
            est.technical = [
                technical_message(c, verdicts[c]) for c in self.channels if c in verdicts
            ]
            now = set(est.technical)
            est.tech_events = [(m, "off") for m in self._technical if m not in now] + [
                (m, "on") for m in est.technical if m not in self._technical
            ]
            self._technical = est.technical
            for alarm in self.alarms:
                t = alarm.rule.vital
                ev = alarm.update(values[t], status[t] == "ok", k)
                est.alarms[alarm.rule.name] = alarm.active
                if ev:
                    est.events.append((alarm.rule.name, ev))
            out.append(est)
        self._next_second = max(self._next_second, upto + 1)
        return out

    def out_of_range_counts(self) -> dict[str, dict[str, float | None]]:
        """Per target: samples beyond the model's input bound made gaps
        (``out_of_range="gap"``) and the input-stream time of the first (None: none)."""
        return {
            lane.model.target: {
                "samples": lane.out_of_range,
                "first_s": None
                if lane.out_of_range_first is None
                else round(self._stream_time(lane.out_of_range_first), 3),
            }
            for lane in self._model_lanes
        }

    def gap_counts(self) -> dict[str, dict[str, float]]:
        """Per target: short (bridged) and long (reset) gaps and their seconds."""
        fs = self.sample_rate
        return {
            lane.model.target: {
                "short_gaps": lane.short_gaps,
                "short_gap_s": lane.short_gap_samples / fs,
                "long_gaps": lane.long_gaps,
                "long_gap_s": lane.long_gap_samples / fs,
            }
            for lane in self._model_lanes
        }
