"""Choose a keyword spotter's threshold and smoothing on a labelled VALIDATION stream.

    liquid-stream data kws-stream val.wav --labels val.csv --split validation
    liquid-stream kws-tune kws.onnx --stream val.wav --labels val.csv --max-fa-per-hour 2

The model runs once over the stream (the app's own code path: :class:`KeywordSpotter`
in ``chunk_ms`` frames). Its keyword posteriors are kept every ``step_ms`` (10 ms: a
log-mel model's output changes once per 10 ms hop, so nothing is lost for it), and for
every smoothing window in ``smooth_grid`` and threshold in ``threshold_grid`` the
detection rule of the app (:func:`~liquid_stream.apps.kws.spotter.detect_events`: threshold,
re-arm, refractory) is replayed and scored with
:func:`~liquid_stream.apps.kws.spotter.evaluate_detections`. The chosen pair has the highest
detection rate with false accepts ≤ ``max_fa_per_hour`` (ties: the higher threshold, then
the shorter window). With ``write=True`` the pair is stored in the ONNX metadata
(``kws_threshold``, ``kws_smooth_ms``, ``kws_tuning``), so ``kws`` and ``kws-eval`` use it
by default. The test stream is never used for this. A stream with no samples, or labels
with no event of one of the model's keywords, is refused (ValueError): nothing is chosen
or written from a stream that cannot score a threshold.
Torch-free.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from liquid_stream.io.atomic import atomic_path
from liquid_stream.io.labels import TrueEvent
from liquid_stream.runtime.meta import VERSION_KEY, ModelMeta

from .spotter import Detection, KeywordSpotter, detect_events, evaluate_detections

THRESHOLD_GRID = tuple(round(float(t), 2) for t in np.arange(0.30, 0.991, 0.02))
SMOOTH_GRID_MS = (0.0, 50.0, 100.0, 200.0, 300.0)


@dataclass(frozen=True)
class TuneResult:
    threshold: float
    smooth_ms: float
    detection_rate: float
    false_accepts_per_hour: float
    table: list[dict]  # every (smooth_ms, threshold) tried, with its scores


def posterior_trace(
    model: str | os.PathLike,
    audio: np.ndarray,
    chunk_ms: float = 10.0,
    step_ms: float = 10.0,
    sample_rate: float | None = None,
) -> tuple[np.ndarray, float, list[str]]:
    """Keyword posteriors ``(n, K)`` every ``step_ms`` (the value at the last sample of each
    step), the step in seconds, and the keywords, from one pass of the model."""
    return _trace(_trace_spotter(model, chunk_ms, sample_rate), audio, step_ms)


def _trace_spotter(
    model: str | os.PathLike, chunk_ms: float, sample_rate: float | None
) -> KeywordSpotter:
    """The spotter of :func:`posterior_trace` (the raw posteriors: no smoothing)."""
    spotter = KeywordSpotter(model, threshold=1.0, smooth_ms=0.0, chunk_ms=chunk_ms, threads=1)
    if sample_rate is not None and int(round(sample_rate)) != spotter.sample_rate:
        raise ValueError(
            f"the stream is at {sample_rate:g} Hz, the model at {spotter.sample_rate} Hz: "
            "tune on a stream at the model's rate (kws-stream writes 16 kHz)"
        )
    return spotter


def _trace(
    spotter: KeywordSpotter, audio: np.ndarray, step_ms: float
) -> tuple[np.ndarray, float, list[str]]:
    step = max(1, int(round(step_ms * spotter.sample_rate / 1000)))
    rows = [np.zeros((0, len(spotter.keywords)))]
    for pos in range(0, len(audio), spotter.chunk):
        spotter.predict(audio[pos : pos + spotter.chunk])
        trace = spotter.last_trace  # smooth_ms = 0: the posteriors themselves
        first = (step - 1 - pos) % step  # rows at samples ≡ step − 1 (mod step)
        rows.append(trace[first::step].astype(np.float32))
    return np.concatenate(rows), step / spotter.sample_rate, spotter.keywords


def smooth(p: np.ndarray, window: int) -> np.ndarray:
    """Causal moving average over ``window`` rows (zeros before the start), as the app."""
    if window <= 1:
        return p
    c = np.cumsum(np.concatenate([np.zeros((window, p.shape[1])), p]), 0)
    return (c[window:] - c[:-window]) / window


def tune_thresholds(
    model: str | os.PathLike,
    audio: np.ndarray,
    truth: list[TrueEvent],
    max_fa_per_hour: float = 2.0,
    threshold_grid: tuple[float, ...] = THRESHOLD_GRID,
    smooth_grid: tuple[float, ...] = SMOOTH_GRID_MS,
    refractory: float = 1.0,
    tolerance: float = 1.0,
    chunk_ms: float = 10.0,
    step_ms: float = 10.0,
    sample_rate: float | None = None,
) -> TuneResult:
    """Grid search of (smoothing, threshold) on a labelled stream (module docstring);
    ``audio`` must be at the model's sample rate (checked when ``sample_rate`` is given).
    Raises ValueError for a stream with no samples or labels with no event of one of the
    model's keywords (nothing to tune on)."""
    spotter = _trace_spotter(model, chunk_ms, sample_rate)
    if len(audio) == 0:
        raise ValueError("the stream holds no samples: nothing to tune on")
    if not any(e.is_keyword and e.word in spotter.keywords for e in truth):
        raise ValueError(
            "the labels hold no keyword event of the model's keywords "
            f"({', '.join(spotter.keywords)}): nothing to tune on"
        )
    p, dt, keywords = _trace(spotter, audio, step_ms)
    table = []
    for sm in smooth_grid:
        s = smooth(p, max(1, int(round(sm / 1000 / dt))))
        for thr in threshold_grid:
            res = replay(s, dt, thr, keywords, truth, refractory, tolerance)
            table.append(
                {
                    "smooth_ms": sm,
                    "threshold": thr,
                    "detection_rate": res["detection_rate"] or 0.0,
                    "false_accepts_per_hour": res["false_accepts_per_hour"],
                    "mean_latency_s": res["mean_latency_s"],
                }
            )
    best = choose(table, max_fa_per_hour)
    return TuneResult(
        best["threshold"],
        best["smooth_ms"],
        best["detection_rate"],
        best["false_accepts_per_hour"],
        table,
    )


def replay(
    s: np.ndarray,
    dt: float,
    threshold: float,
    keywords: list[str],
    truth: list[TrueEvent],
    refractory: float = 1.0,
    tolerance: float = 1.0,
) -> dict:
    """The app's rule (:func:`~.kws.detect_events`, every keyword at ``threshold``) on
    scores ``s (T, K)`` taken every ``dt`` seconds (row t at time (t+1)·dt), scored against
    ``truth`` by :func:`~.kws.evaluate_detections`."""
    k = len(keywords)
    fired, _ = detect_events(s, np.full(k, threshold), refractory / dt, np.ones(k, bool), -np.inf)
    dets = [Detection((t + 1) * dt, keywords[j], float(s[t, j])) for t, j in fired]
    return evaluate_detections(dets, truth, keywords, len(s) * dt, tolerance)


def choose(table: list[dict], max_fa_per_hour: float) -> dict:
    """The row of ``table`` (``detection_rate``, ``false_accepts_per_hour``, ``threshold``,
    ``smooth_ms``) with the highest detection rate at ≤ ``max_fa_per_hour`` (ties: the
    higher threshold, then the shorter window); none meets it: the fewest false accepts."""
    ok = [r for r in table if r["false_accepts_per_hour"] <= max_fa_per_hour]
    if not ok:
        ok = [min(table, key=lambda r: (r["false_accepts_per_hour"], -r["detection_rate"]))]
    return max(ok, key=lambda r: (r["detection_rate"], r["threshold"], -r["smooth_ms"]))


def write_tuning(model: str | os.PathLike, result: TuneResult, source: str) -> None:
    """Store the chosen threshold and smoothing in the ONNX file's metadata (atomically):
    the file's entries read and written back through :class:`~liquid_stream.runtime.meta.ModelMeta`
    (a malformed one is a :class:`~liquid_stream.runtime.meta.MetaError`); a graph from before the
    schema (no ``meta_schema``) is left without one. The graph must match its content hash
    (a corrupt one is refused, ValueError: stamping it would make it look good) and is
    stamped anew (:mod:`liquid_stream.runtime.quantized`). A symlink is written through: its target
    gets the new content and the link stays a link; the file keeps its permission bits
    (an OSError, e.g. a full disk, leaves the file as it was)."""
    import onnx

    from liquid_stream.runtime.quantized import IntegrityError, check_integrity, stamp_integrity

    path = Path(model)
    target = path.resolve()  # through symlinks: the file the apps will read
    proto = onnx.load(str(target))
    try:
        check_integrity(proto)
    except IntegrityError as e:
        raise ValueError(f"{path}: {e}; not tuned") from None
    old = {p.key: p.value for p in proto.metadata_props}
    meta = ModelMeta.from_onnx_props(old)
    meta.kws_threshold = result.threshold
    meta.kws_smooth_ms = result.smooth_ms
    meta.kws_tuning = {
        "stream": source,
        "detection_rate": result.detection_rate,
        "false_accepts_per_hour": result.false_accepts_per_hour,
    }
    meta.integrity = None  # stamped anew below
    props = meta.to_onnx_props()
    if VERSION_KEY not in old:
        del props[VERSION_KEY]
    del proto.metadata_props[:]
    for k, v in props.items():
        proto.metadata_props.add(key=k, value=v)
    stamp_integrity(proto)
    mode = stat.S_IMODE(target.stat().st_mode)
    with atomic_path(target) as tmp:
        tmp.write_bytes(proto.SerializeToString())
        os.chmod(tmp, mode)
