"""Keyword spotting on a live stream with an exported liquid-stream ONNX model (no torch).

    from liquid_stream.apps.kws.spotter import KeywordSpotter

    spotter = KeywordSpotter("kws.onnx", threshold=0.8)    # keywords = the model's labels
    for frame in frames:                   # e.g. 10 ms blocks at spotter.sample_rate
        scores = spotter.predict(frame)    # {"yes": 0.01, "no": 0.93}: smoothed, latest sample
        for det in spotter.detections:     # what this frame triggered
            print(det.time_s, det.keyword, det.score)

The model (a per-step classifier: one output row per input sample, e.g. the
``speech-stream`` task with a causal ``window`` decoder) gives logits; the spotter turns
them into softmax posteriors, smooths each keyword's posterior with a moving average
over ``smooth_ms``, and fires a :class:`Detection` at the first sample where a smoothed
score reaches its keyword's threshold, provided that keyword has fallen back below its
threshold since its last detection (re-arm) and no keyword fired in the last
``refractory`` seconds. ``Detection.time_s`` is stream time: seconds of audio fed
since the start (or the last ``reset()``), at sample resolution.

Frames are float in [-1, 1] or int16 (scaled by 1/32768), at the model's
``sample_rate`` (resample first, see :class:`~liquid_stream.apps.common.resample.StreamResampler`).
The model's metadata is read through :class:`~liquid_stream.runtime.meta.ModelMeta`. The
no-keyword class is its ``silence_class`` when present, else the label named
``_silence_``, ``silence`` or ``_unknown_``. Models that are not per-step audio
classifiers, and malformed metadata, are refused with :class:`KwsModelError`.

Bad samples: a frame holding NaN, ±inf or a sample beyond the model's input bound
(10⁶ input standard deviations from the input mean, e.g. a float WAV holding 1e30; the
policy of :mod:`liquid_stream.runtime.validate`) is refused with :class:`KwsInputError`, which
names the stream time of the first bad sample (``time_s``). The spotter is then exactly
as before the frame (model state, smoothing, time, arming), so nothing detected earlier
is lost and feeding can go on with good frames.

The decision rule after the model (posteriors, smoothing, arming, refractory period,
stream time) is a :class:`KeywordTracker`: one per stream, so that
:class:`~liquid_stream.apps.batch.KwsBank` runs many streams of one model through one
batched session with the spotter's own rule.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from liquid_stream.io.labels import TrueEvent
from liquid_stream.runtime.meta import MetaError, ModelMeta
from liquid_stream.runtime.onnx_streamer import OnnxModelError, OnnxStreamer, StreamInputError

SILENCE_NAMES = ("_silence_", "silence", "_unknown_")
DEFAULT_THRESHOLD = 0.8  # of a model with no tuned threshold in its metadata (kws-tune)
DEFAULT_SMOOTH_MS = 100.0
# Tasks whose outputs are not class logits (vital-sign regression, ...).
REGRESSION_TASKS = ("bidmc", "vitals", "regression")


# the highest audio rate a model may declare (192 kHz studio audio, with room)
MAX_SAMPLE_RATE = 384_000.0


class KwsModelError(ValueError):
    """The ONNX file is unusable as a keyword spotter (message says why)."""


class KwsInputError(ValueError):
    """A frame refused by the model (NaN, infinite or out-of-range sample, or an overflow);
    ``time_s`` is the stream time of the first bad sample, ``reason`` what is wrong,
    ``index`` (when known) its index in the refused frame. The spotter's state is
    unchanged."""

    def __init__(self, reason: str, time_s: float, index: int | None = None):
        self.reason = reason
        self.time_s = float(time_s)
        self.index = index
        super().__init__(f"input refused at {self.time_s:.3f} s: {reason}")


@dataclass(frozen=True)
class Detection:
    """A keyword heard at ``time_s`` seconds of stream time with smoothed ``score``."""

    time_s: float
    keyword: str
    score: float


def read_meta(streamer: OnnxStreamer) -> ModelMeta:
    """The opened model's metadata (:class:`KwsModelError` naming the file if malformed)."""
    try:
        return ModelMeta.from_onnx_props(streamer.metadata)
    except MetaError as e:
        raise KwsModelError(f"{streamer.path.name}: {e}") from None


MAX_TUNED_SMOOTH_MS = 10_000.0  # 10 s: ten times any keyword; no tuning chooses more


def check_tuning(path: str | os.PathLike, threshold: float | None, smooth_ms: float | None) -> None:
    """The tuned defaults in a model's metadata (``kws-tune``): ``kws_threshold`` in (0, 1]
    (a posterior), ``kws_smooth_ms`` in [0, :data:`MAX_TUNED_SMOOTH_MS`]; else
    :class:`KwsModelError` naming the file and the key (a threshold of 7 would never fire,
    a negative window is no window: the model would run and spot nothing, silently)."""
    if threshold is not None and not 0 < threshold <= 1:
        raise KwsModelError(
            f"{path}: metadata kws_threshold must be in (0, 1], got {threshold!r}; re-run kws-tune"
        )
    if smooth_ms is not None and not 0 <= smooth_ms <= MAX_TUNED_SMOOTH_MS:
        raise KwsModelError(
            f"{path}: metadata kws_smooth_ms must be in [0, "
            f"{MAX_TUNED_SMOOTH_MS:g}] ms, got {smooth_ms!r}; re-run "
            "kws-tune"
        )


def check_kws_model(streamer: OnnxStreamer, meta: ModelMeta) -> int:
    """Validate an opened model (and its ``meta``) for keyword spotting; return its
    no-keyword class index."""
    name = streamer.path.name
    task = meta.task or "?"
    if any(task.startswith(t) for t in REGRESSION_TASKS):
        raise KwsModelError(
            f"{name} is a regression model (task {task!r}), not a keyword classifier"
        )
    if streamer.d_input != 1:
        raise KwsModelError(
            f"{name} takes {streamer.d_input} input channels (task {task!r}); a keyword "
            "spotter needs a mono audio model (d_input = 1)"
        )
    if not streamer.labels:
        raise KwsModelError(f"{name} has no class labels in its metadata (task {task!r})")
    if len(streamer.labels) != streamer.d_output:
        raise KwsModelError(
            f"{name}: {len(streamer.labels)} labels for {streamer.d_output} outputs"
        )
    if streamer.sample_rate is None:
        raise KwsModelError(f"{name} has no sample_rate in its metadata (task {task!r})")
    if not (1 <= streamer.sample_rate <= MAX_SAMPLE_RATE):  # NaN fails too
        raise KwsModelError(
            f"{name}: metadata sample_rate must be 1 to {MAX_SAMPLE_RATE:g} Hz, got "
            f"{streamer.sample_rate!r}"
        )
    if meta.decoder == "pool":
        raise KwsModelError(
            f"{name} has a 'pool' decoder (a running mean over the whole stream, task "
            f"{task!r}): train a per-step model (e.g. task speech-stream, decoder window)"
        )
    silence = meta.silence_class
    if silence is None:
        for s in SILENCE_NAMES:
            if s in streamer.labels:
                silence = streamer.labels.index(s)
                break
    if silence is None:
        raise KwsModelError(
            f"{name}: no non-keyword class (metadata silence_class, or a label named "
            f"{' / '.join(SILENCE_NAMES)}); labels: {streamer.labels}"
        )
    if not 0 <= silence < streamer.d_output:
        raise KwsModelError(
            f"{name}: metadata silence_class {silence} is not a class index "
            f"(0 … {streamer.d_output - 1})"
        )
    return silence


class KeywordSpotter:
    """Streaming keyword spotter around an :class:`OnnxStreamer` (see the module docstring).

    Args:
        model_path: an ONNX file from ``liquid-stream export`` of a per-step classifier.
        keywords: the labels to spot (default: every label except the no-keyword class).
        threshold: smoothed-score threshold, one value or a dict keyword → value; None: the
            model's tuned threshold (``kws-tune``, in its metadata), else 0.8.
        refractory: seconds after a detection during which no keyword fires.
        smooth_ms: moving-average window of the posteriors (1 sample when 0); None: the
            model's tuned window, else 100 ms.
        chunk_ms: the frame length the app feeds (``chunk`` samples); any length works.
        threads: onnxruntime intra-op threads (default: onnxruntime's choice).

    ``batch`` is the length of the calls an app should make when the audio is already
    there (a file, a backlog): ``chunk`` rounded up to whole export chunks of the model
    (its metadata ``chunk``, e.g. 1600 samples = 100 ms for the shipped spotter, whose
    graph runs a call of exactly that length as one MatMul a layer; a 10 ms call costs
    about what a 100 ms call of it costs: onnxruntime's per-node overhead). Detections
    are a rule on every sample, so they do not depend on the call length, but for the
    float32 rounding of the graph (a crossing within ~1e-6 of its threshold may move by a
    sample)."""

    def __init__(
        self,
        model_path: str | os.PathLike,
        keywords: list[str] | None = None,
        threshold: float | dict[str, float] | None = None,
        refractory: float = 1.0,
        smooth_ms: float | None = None,
        chunk_ms: float = 10.0,
        threads: int | None = None,
    ):
        path = Path(model_path)
        if not path.is_file():
            raise KwsModelError(f"model not found: {path}")
        try:
            self.streamer = OnnxStreamer(path, providers=["CPUExecutionProvider"], threads=threads)
        except OnnxModelError as e:
            raise KwsModelError(str(e)) from e
        self.meta = read_meta(self.streamer)
        self.silence_class = check_kws_model(self.streamer, self.meta)
        # None: the values chosen on a validation stream by ``kws-tune`` (ONNX metadata
        # kws_threshold / kws_smooth_ms), else 0.8 and 100 ms
        tuned = self.meta.kws_threshold, self.meta.kws_smooth_ms
        check_tuning(path, *tuned)
        if threshold is None:
            threshold = DEFAULT_THRESHOLD if tuned[0] is None else tuned[0]
        if smooth_ms is None:
            smooth_ms = DEFAULT_SMOOTH_MS if tuned[1] is None else tuned[1]
        self.smooth_ms = float(smooth_ms)
        self.labels = list(self.streamer.labels)
        self.sample_rate = int(round(self.streamer.sample_rate))
        self.task = self.streamer.task
        candidates = [lab for i, lab in enumerate(self.labels) if i != self.silence_class]
        if keywords:
            unknown = [k for k in keywords if k not in candidates]
            if unknown:
                raise KwsModelError(
                    f"unknown keyword(s) {', '.join(unknown)}; this model knows: "
                    f"{', '.join(candidates)}"
                )
            self.keywords = list(dict.fromkeys(keywords))
        else:
            self.keywords = candidates
        self._cls = np.array([self.labels.index(k) for k in self.keywords])
        if isinstance(threshold, dict):
            bad = [k for k in threshold if k not in self.keywords]
            if bad:
                raise KwsModelError(f"threshold for unknown keyword(s): {', '.join(bad)}")
            self.thresholds = np.array(
                [float(threshold.get(k, DEFAULT_THRESHOLD)) for k in self.keywords]
            )
        else:
            self.thresholds = np.full(len(self.keywords), float(threshold))
        if np.any((self.thresholds <= 0) | (self.thresholds > 1)):
            raise KwsModelError("thresholds must be in (0, 1]")
        if refractory < 0 or smooth_ms < 0 or chunk_ms <= 0:
            raise KwsModelError("refractory and smooth_ms must be >= 0, chunk_ms > 0")
        self.refractory = float(refractory)
        self.smooth = max(1, int(round(smooth_ms * self.sample_rate / 1000)))
        self.chunk = max(1, int(round(chunk_ms * self.sample_rate / 1000)))
        model_chunk = max(1, min(self.streamer.chunk, self.streamer.max_chunk))
        self.batch = model_chunk * -(-self.chunk // model_chunk)
        self.reset()

    def new_tracker(self) -> KeywordTracker:
        """A fresh :class:`KeywordTracker` with this spotter's keywords, thresholds,
        smoothing and refractory period: the decision state of one more stream of the same
        model (what :class:`~liquid_stream.apps.batch.KwsBank` keeps per stream)."""
        return KeywordTracker(
            self.keywords,
            self._cls,
            self.thresholds,
            self.smooth,
            self.refractory * self.sample_rate,
            self.sample_rate,
        )

    # ------------------------------------------------------------------ state

    def reset(self) -> None:
        """Start a new stream: zero model state, empty smoothing window, time 0."""
        self.streamer.reset()
        self.tracker = self.new_tracker()

    @property
    def time_s(self) -> float:
        """Stream time: seconds of audio consumed."""
        return self.tracker.time_s

    @property
    def scores(self) -> dict[str, float]:
        """The smoothed keyword scores at the last sample fed."""
        return self.tracker.scores

    @property
    def detections(self) -> list[Detection]:
        """The detections the last frame triggered."""
        return self.tracker.detections

    @property
    def last_trace(self) -> np.ndarray:
        """The last frame's per-sample smoothed scores ``(T, keywords)``."""
        return self.tracker.last_trace

    # ------------------------------------------------------------------ run

    def predict(self, frame: np.ndarray) -> dict[str, float]:
        """Feed a frame; return the smoothed keyword scores at its last sample.

        Detections triggered inside this frame are in :attr:`detections` (replaced on
        every call); the per-sample smoothed scores in :attr:`last_trace` (T, keywords).
        """
        x = mono_frame(frame)
        self.tracker.detections = []
        if len(x) == 0:
            return dict(self.scores)
        try:
            logits = self.streamer.process(x[:, None])
        except StreamInputError as e:  # nothing below ran: the spotter is as it was
            i = e.index or 0
            raise KwsInputError(e.reason, self.tracker.time_at(i), i) from e
        return self.tracker.update(logits)

    def quiet_samples(self) -> int:
        """How many of the next samples cannot fire a detection, whatever they hold
        (:meth:`KeywordTracker.quiet_samples`): audio an app may hold back and feed later
        in one longer call without delaying any detection."""
        return self.tracker.quiet_samples()

    def detect(self, frame: np.ndarray) -> list[Detection]:
        """Feed a frame; return the detections it triggered (scores in :attr:`scores`)."""
        self.predict(frame)
        return list(self.detections)

    def run(self, audio: np.ndarray) -> list[Detection]:
        """Feed a whole signal in ``chunk``-sample frames; return every detection."""
        out: list[Detection] = []
        for pos in range(0, len(audio), self.chunk):
            out.extend(self.detect(audio[pos : pos + self.chunk]))
        return out


def mono_frame(frame) -> np.ndarray:
    """A frame as the model's samples ``(T,)``: ``(T,)`` or ``(T, 1)`` input, int16 scaled
    by 1/32768; ValueError for any other shape."""
    x = np.asarray(frame)
    if x.ndim == 2 and x.shape[1] == 1:
        x = x[:, 0]
    if x.ndim != 1:
        raise ValueError(f"expected a mono frame (T,) or (T, 1), got shape {x.shape}")
    if x.dtype == np.int16:
        x = x.astype(np.float32) / 32768.0
    return x


class KeywordTracker:
    """The decision state of one stream, after the model: posteriors, smoothing window,
    arming, refractory period and stream time (the rule of the module docstring).

    :meth:`update` takes the model's logits ``(T, classes)`` of the next T samples and
    sets :attr:`scores` (smoothed, last sample), :attr:`detections` (what these samples
    triggered) and :attr:`last_trace` ``(T, keywords)``. Built by
    :meth:`KeywordSpotter.new_tracker`.
    """

    def __init__(
        self,
        keywords: list[str],
        classes: np.ndarray,
        thresholds: np.ndarray,
        smooth: int,
        refractory: float,
        sample_rate: int,
    ):
        self.keywords, self._cls, self.thresholds = keywords, classes, thresholds
        self.smooth, self.refractory, self.sample_rate = smooth, refractory, sample_rate
        k = len(keywords)
        # the last smooth-1 posteriors, a ring (K, smooth-1): column _head is the oldest
        self._hist = np.zeros((k, smooth - 1))
        self._head = 0
        self._n = 0  # samples seen
        self._armed = np.ones(k, bool)
        self._last_det = -np.inf  # sample index of the last detection
        self._last = np.zeros(k)  # the smoothed scores at the last sample
        self.scores: dict[str, float] = dict.fromkeys(keywords, 0.0)
        self.detections: list[Detection] = []
        self.last_trace: np.ndarray = np.zeros((0, k))

    @property
    def time_s(self) -> float:
        """Stream time: seconds of audio consumed."""
        return self._n / self.sample_rate

    def time_at(self, index: int) -> float:
        """Stream time of sample ``index`` of the next block."""
        return (self._n + index) / self.sample_rate

    def quiet_samples(self) -> int:
        """How many of the next samples cannot fire a detection, whatever they hold.

        A smoothed score moves by (p_new − p_leaving) / w ≤ 1/w a sample (posteriors are in
        [0, 1]), so keyword k cannot reach its threshold within (threshold_k − s_k)·w
        samples of its last score s_k; and nothing fires within the refractory period of
        the last detection. The larger of the two bounds (less a margin for rounding):
        an app may hold back that much audio and run the model on it later, in one call,
        without any detection coming later than from calls of every block."""
        w = self.smooth
        rise = (self.thresholds - self._last - 1e-6) * w - 1.0  # margin: rounding, off-by-one
        by_score = int(math.floor(min(rise.min(), 1e12))) if len(rise) else 0
        by_refractory = 0
        end = self._last_det + self.refractory  # nothing fires before this step
        if end > self._n:  # (NaN: no bound)
            by_refractory = math.ceil(min(end, 2.0**53)) - 1 - self._n
        return max(0, by_score, by_refractory)

    def update(self, logits: np.ndarray) -> dict[str, float]:
        """Consume the logits ``(T, classes)`` of the next T samples; return the smoothed
        keyword scores at the last one."""
        self.detections = []
        if len(logits) == 0:
            return dict(self.scores)
        s = self._smooth(self._posteriors(logits))
        self.last_trace = s
        self._detect(s)
        self._n += len(logits)
        self._last = s[-1]
        self.scores = {k: float(v) for k, v in zip(self.keywords, s[-1], strict=True)}
        return dict(self.scores)

    def _posteriors(self, logits: np.ndarray) -> np.ndarray:
        """The keywords' softmax posteriors ``(T, K)``, float64. A graph with a front end
        holds each frame's logits for the frame's samples, so the softmax is taken once per
        run of equal rows and repeated (the same numbers as row by row)."""
        new = np.ones(len(logits), bool)
        new[1:] = (logits[1:] != logits[:-1]).any(1)
        starts = np.flatnonzero(new)
        rows = logits[starts]
        e = np.exp(rows - rows.max(-1, keepdims=True))
        p = (e[:, self._cls] / e.sum(-1, keepdims=True)).astype(np.float64)
        if len(starts) == len(logits):
            return p
        return np.repeat(p, np.diff(np.append(starts, len(logits))), axis=0)

    def _smooth(self, p: np.ndarray) -> np.ndarray:
        """s_t = (1/w) Σ_{j<w} p_{t−j}, the mean of the last w posteriors at every new
        sample (zeros before the start), by running sums over the block: with H the sum
        of the w−1 posteriors before it and ℓ_t the one that leaves the window at t,
        w·s_t = H + Σ_{j≤t} p_j − Σ_{j<t} ℓ_j. The w−1 last posteriors are a ring
        ``(K, w−1)``, so a block costs O(T) moves, not O(w + T)."""
        w = self.smooth
        if w == 1:
            return p
        T, ring, pt = len(p), self._hist, p.T
        if T < w - 1:
            idx = (self._head + np.arange(T)) % (w - 1)
            leaving = ring[:, idx]  # the oldest T, in order
        else:  # the whole ring leaves, then the block's own first T − (w − 1)
            leaving = np.concatenate([np.roll(ring, -self._head, 1), pt[:, : T - (w - 1)]], 1)
        s = np.cumsum(pt, 1)
        s += ring.sum(1)[:, None]
        s[:, 1:] -= np.cumsum(leaving[:, : T - 1], 1)
        s /= w
        if T < w - 1:
            ring[:, idx] = pt
            self._head = (self._head + T) % (w - 1)
        else:
            self._hist, self._head = np.ascontiguousarray(pt[:, T - (w - 1) :]), 0
        return s.T

    def _detect(self, s: np.ndarray) -> None:
        fired, self._last_det = detect_events(
            s, self.thresholds, self.refractory, self._armed, self._last_det, self._n
        )
        self.detections += [
            Detection((t + 1) / self.sample_rate, self.keywords[k], float(s[t - self._n, k]))
            for t, k in fired
        ]


def detect_events(
    s: np.ndarray,
    thresholds: np.ndarray,
    refractory: float,
    armed: np.ndarray,
    last: float,
    t0: int = 0,
) -> tuple[list[tuple[int, int]], float]:
    """The detection rule on smoothed scores ``s (T, K)`` of steps t0 … t0+T−1.

    Keyword k fires at step t when s[t, k] ≥ threshold_k, k is armed (its score has been
    below its threshold since it last fired) and at least ``refractory`` steps have passed
    since the last detection of any keyword; of several such keywords the highest score
    fires. ``armed`` (K,) is updated in place. Returns the ``(t, k)`` fired and the new
    last-detection step.

    The rule is applied to runs of equal rows of ``s ≥ thresholds`` rather than row by
    row: within such a run the arming cannot change but by a detection, so the candidates
    are known at its first row and each can only fire at the first row where the
    refractory period has passed (at most K detections a run). A keyword held above its
    threshold for a second costs a few operations, not one loop turn per sample."""
    above = s >= thresholds
    n = len(above)
    fired: list[tuple[int, int]] = []
    if n == 0:
        return fired, last
    edges = np.flatnonzero((above[1:] != above[:-1]).any(1)) + 1
    starts = [0, *edges.tolist()]
    for a, b in zip(starts, [*starts[1:], n], strict=True):
        row = above[a]
        if not row.any():  # a row below every threshold re-arms everything
            armed[:] = True
            continue
        armed |= ~row
        lo = a  # the first row of the run not yet looked at
        while True:
            fire = row & armed
            if not fire.any():
                break
            t = _first_after_refractory(lo, b, last, refractory, t0)
            if t >= b:
                break
            k = int(np.argmax(np.where(fire, s[t], -1.0)))
            armed[k] = False
            last = t0 + t
            fired.append((t0 + t, k))
            lo = t + 1  # one detection a step
    return fired, last


def _first_after_refractory(lo: int, hi: int, last: float, refractory: float, t0: int) -> int:
    """The first step t in [lo, hi) with ``t0 + t − last ≥ refractory`` (the rule's test,
    in its own floating-point arithmetic), else ``hi``."""
    if t0 + lo - last >= refractory:
        return lo
    need = last + refractory - t0  # last is finite here
    if not need <= hi:  # an infinite (or NaN) refractory period: never again
        return hi
    t = max(lo, math.ceil(need))
    while t > lo and t0 + t - 1 - last >= refractory:
        t -= 1
    while t < hi and not t0 + t - last >= refractory:
        t += 1
    return t


# -------------------------------------------------------------------------- evaluation


def evaluate_detections(
    detections: list[Detection],
    truth: list[TrueEvent],
    keywords: list[str],
    duration_s: float,
    tolerance: float = 1.0,
) -> dict:
    """Match detections to true keyword events and score them.

    A detection of word w matches the earliest unmatched true event of w (``is_keyword``)
    with ``start_s <= time_s <= end_s + tolerance``; each event matches at most once.
    Every unmatched detection is a false accept. Only true events whose word is one of
    ``keywords`` (what the spotter listens for) count as targets. Returns overall and
    per-keyword detection rate, false accepts (count and per hour), and the latency
    ``time_s - end_s`` of matched detections (negative: fired before the word ended).
    """
    targets = [e for e in truth if e.is_keyword and e.word in keywords]
    matched: dict[int, Detection] = {}
    fa: list[Detection] = []
    for d in sorted(detections, key=lambda d: d.time_s):
        best = None
        for i, e in enumerate(targets):
            if i in matched or e.word != d.keyword:
                continue
            if e.start_s <= d.time_s <= e.end_s + tolerance:
                best = i
                break
        if best is None:
            fa.append(d)
        else:
            matched[best] = d
    hours = max(duration_s, 1e-9) / 3600.0
    lat = [matched[i].time_s - targets[i].end_s for i in matched]
    per = {}
    for k in keywords:
        idx = [i for i, e in enumerate(targets) if e.word == k]
        hit = [i for i in idx if i in matched]
        k_fa = sum(1 for d in fa if d.keyword == k)
        k_lat = [matched[i].time_s - targets[i].end_s for i in hit]
        per[k] = {
            "targets": len(idx),
            "detected": len(hit),
            "detection_rate": len(hit) / len(idx) if idx else None,
            "false_accepts": k_fa,
            "false_accepts_per_hour": k_fa / hours,
            "mean_latency_s": float(np.mean(k_lat)) if k_lat else None,
        }
    ignored = sorted({e.word for e in truth if e.is_keyword and e.word not in keywords})
    return {
        "duration_s": duration_s,
        "tolerance_s": tolerance,
        "targets": len(targets),
        "detected": len(matched),
        "detection_rate": len(matched) / len(targets) if targets else None,
        "false_accepts": len(fa),
        "false_accepts_per_hour": len(fa) / hours,
        "mean_latency_s": float(np.mean(lat)) if lat else None,
        "per_keyword": per,
        "ignored_words": ignored,
        "false_accept_times": [round(d.time_s, 3) for d in fa],
    }
