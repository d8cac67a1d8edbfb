"""``liquid-stream kws`` / ``kws-eval`` / ``kws-tune``: the keyword-spotting app.

    liquid-stream kws kws.onnx                          # default microphone, live view
    liquid-stream kws kws.onnx --device pulse --no-ui   # a named input, plain output
    liquid-stream kws kws.onnx --input talk.wav --fast  # a file, as fast as possible
    liquid-stream kws-eval kws.onnx --stream long.wav --labels long.csv --out eval.json
    liquid-stream kws-tune kws.onnx --stream val.wav --labels val.csv

The labelled streams come from ``liquid-stream data kws-stream`` (a data tool:
:mod:`liquid_stream.training.data.speech.kws_stream`).

How ``kws`` runs: an audio source (:class:`~.audio.MicSource`, whose PortAudio callback
only enqueues blocks, or :class:`~.audio.WavSource`, paced to real time unless
``--fast``) feeds a worker thread that resamples to the model's rate when needed
(:func:`~.audio.stream_resampler`), cuts ``--chunk-ms`` chunks and runs the
:class:`~.kws.KeywordSpotter` (:class:`KwsWorker`). The model's cost is mostly a fixed
cost per call (onnxruntime's per-node overhead: a 10 ms call of the shipped spotter costs
about what a 100 ms call does), so the worker makes few calls where it can without
changing a detection or delaying one: a file (``--input``), whose samples are all there,
runs in calls of the model's export chunk (:attr:`~.kws.KeywordSpotter.batch`, 100 ms
for the shipped spotter; ``--live-calls`` makes it call as for a microphone); a live input
runs each ``--chunk-ms`` block as it comes, except that it holds blocks back while no
detection can come from them (the keyword scores far below their thresholds, or a
detection's refractory period: :meth:`~.kws.KeywordSpotter.quiet_samples`) and runs them
later in one call, before the block that could fire arrives, which then runs alone on its
arrival. The detections are the same in every case (the rule runs on every sample; the
graphs are exact for any chunking to float32 rounding, so a crossing that lands within
~1e-6 of its threshold may move by one sample; the cost per audio hour and the comparison
are bench/kws_cpu.py). The main thread prints every detection as
``HH:MM:SS.mmm  keyword  score`` (wall clock for a microphone, stream time for a file),
draws the rich live view (input level + per-keyword score bars) when stdout is a TTY and
``--no-ui`` is not given, and on Ctrl-C (or the end of the file) stops the worker and
prints a summary: detections, mean / p95 chunk latency, real-time factor (compute time /
audio time), CPU % (process CPU time / wall time) and dropped blocks.

A sample the model refuses (NaN, ±inf, or beyond the model's input bound of 10⁶ input
standard deviations, e.g. a float WAV holding 1e30; see :mod:`liquid_stream.runtime.validate`)
stops the run at that sample, without a traceback: ``kws`` prints the detections before
it and the summary, then fails with one line ``FILE: input refused at T s: why``
(T in seconds of the file); ``kws-eval`` scores (and writes with ``--out``) the audio
before it, marked ``"partial": true``, then fails with the same line.

Only click is imported at module level (``liquid-stream --help`` stays fast); numpy,
onnxruntime, sounddevice and rich are imported inside the commands, torch never.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import sys
import threading
import time
from array import array

import click

FILE = click.Path(dir_okay=False)

# ----------------------------------------------------------------------------- worker


class KwsWorker(threading.Thread):
    """Runs the spotter over a source's blocks in its own thread (see module docstring).

    ``events`` receives ``(Detection, wall_time)``; ``latencies`` the seconds of every
    ``spotter.detect`` call; ``trace`` (when ``record_trace``) ``(time_s, scores...)``
    at every call's end; ``error`` any exception that ended the run (a refused sample:
    a :class:`~.kws.KwsInputError` whose ``time_s`` is time in the source, i.e. shifted
    back by the resampler's delay like the detections).

    ``batch`` is the number of model-rate samples a call takes when the audio is all there
    (a file): calls of exactly that many samples (:attr:`~.kws.KeywordSpotter.batch`), the
    last samples of the stream in one shorter call.

    ``batch=None`` (a live input): the whole ``spotter.chunk`` blocks that have arrived,
    as soon as one of them could hold a detection. While the keyword scores are far below
    their thresholds (or a detection's refractory period runs), no sample of the next
    :meth:`~.kws.KeywordSpotter.quiet_samples` can fire whatever it holds, so the worker
    holds those blocks back and runs them in calls of ``spotter.batch`` samples (the
    model's export chunk: 100 ms for the price of one 10 ms call) or all at once when the
    next block could reach the bound; the block that could fire is then run alone on its
    arrival, as with one call a block: a detection comes as early. A worker that fell
    behind takes the whole backlog in one call (a microphone's queue drained by
    :meth:`~.audio.MicSource.blocks`). ``hold=False``: one call a ``spotter.chunk``, as
    they come (``kws-eval``: its latencies and trace are per chunk).

    The detections do not depend on any of this: the rule runs on every sample, and the
    graphs are exact for any chunking to float32 rounding (~1e-6 of the logits between
    10 ms and 100 ms calls of the shipped graph), so only a crossing whose smoothed score
    lands within that of its threshold can move, by one sample
    (tests/apps/kws/test_kws_cpu_path.py).
    """

    def __init__(
        self,
        spotter,
        source,
        record_trace: bool = False,
        batch: int | None = None,
        hold: bool = True,
    ):
        import queue

        from ..common.audio import stream_resampler
        from .spotter import KwsInputError

        super().__init__(name="kws-worker", daemon=True)
        self.spotter = spotter
        self.source = source
        self.batch = batch
        self.hold = hold
        self._refused = KwsInputError
        self.calls = array("i")  # model-rate samples of every call (beside ``latencies``)
        self._recent = collections.deque([spotter.chunk], maxlen=16)  # the last blocks' lengths
        self.resampler = (
            stream_resampler(source.rate, spotter.sample_rate)
            if int(source.rate) != spotter.sample_rate
            else None
        )
        # a file's detection times are shifted back by the resampler's causal delay
        self.delay_s = self.resampler.delay_s if self.resampler is not None else 0.0
        self.events: queue.Queue = queue.Queue()
        self.latencies = array("d")  # 8 bytes a chunk (a list of floats: ~33)
        self.record_trace = record_trace
        self.trace: list[list[float]] = []
        self.level_db = -120.0
        self.samples = 0  # model-rate samples processed
        self.error: BaseException | None = None
        self.stopped = threading.Event()

    @property
    def audio_s(self) -> float:
        return self.samples / self.spotter.sample_rate

    def stop(self) -> None:
        self.stopped.set()
        self.source.stop()

    def _blocks(self):
        if getattr(self.source, "kind", None) == "mic":
            return self.source.blocks(drain=True)  # a backlog in one block
        return self.source.blocks()

    def run(self) -> None:
        import numpy as np

        from .spotter import KwsInputError

        pending = np.zeros(0, np.float32)
        try:
            for block in self._blocks():
                if self.stopped.is_set():
                    break
                block = np.asarray(block, np.float32)
                if len(block):  # the level meter (float32 dot: display only)
                    ms = float(np.dot(block, block)) / len(block)
                    self.level_db = 10 * math.log10(max(ms, 1e-12))
                y = self.resampler.process(block) if self.resampler is not None else block
                pending = np.concatenate([pending, y]) if len(pending) else y
                for size in self._calls(len(pending), len(y)):
                    self._step(pending[:size])
                    pending = pending[size:]
            if len(pending) and not self.stopped.is_set():
                self._step(pending)
        except KwsInputError as e:  # reported by the main thread, in source time
            reason = e.reason
            if self.resampler is not None:
                reason += f" (after resampling to {self.spotter.sample_rate} Hz)"
            self.error = KwsInputError(reason, max(0.0, e.time_s - self.delay_s))
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            self.error = e

    def _calls(self, have: int, block: int) -> list[int]:
        """The lengths of the calls to make now, on ``have`` pending samples of which the
        last ``block`` just arrived (the rule of the class docstring)."""
        if self.batch:  # a file: whole batches
            return [self.batch] * (have // self.batch)
        chunk = self.spotter.chunk
        n = have // chunk * chunk
        if not self.hold:  # one call a chunk
            return [chunk] * (n // chunk)
        if not n:
            return []
        self._recent.append(block)  # the next block: as long as the longest of the last 16
        if have + max(self._recent) <= self.spotter.quiet_samples():
            batch = self.spotter.batch  # neither this audio nor the next block can fire:
            return [batch] * (n // batch)  # whole model chunks now, the rest held back
        return [n]

    def _step(self, x) -> None:
        t = time.perf_counter()
        try:
            dets = self.spotter.detect(x)
        except self._refused as e:  # a refused sample: first the whole chunks before it,
            before = (e.index or 0) // self.spotter.chunk * self.spotter.chunk
            if before:  # as calls of one chunk each would have run them
                self._step(x[:before])
            raise
        self.latencies.append(time.perf_counter() - t)
        self.calls.append(len(x))
        self.samples += len(x)
        if dets:
            now = time.time()
            for d in dets:
                if self.delay_s:
                    d = dataclasses.replace(d, time_s=max(0.0, d.time_s - self.delay_s))
                self.events.put((d, now))
        if self.record_trace:
            self.trace.append([self.spotter.time_s - self.delay_s, *self.spotter.scores.values()])


def _clock(seconds: float) -> str:
    ms = int(round(seconds * 1000))
    h, rem = divmod(ms, 3_600_000)
    m, rem = divmod(rem, 60_000)
    s, ms = divmod(rem, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}.{ms:03d}"


def _wall(t: float) -> str:
    from datetime import datetime

    return datetime.fromtimestamp(t).strftime("%H:%M:%S.%f")[:-3]


def _open_spotter(model, keywords, threshold, refractory, smooth_ms, chunk_ms, threads):
    from .spotter import KeywordSpotter, KwsModelError

    kw = [k.strip() for k in keywords.split(",") if k.strip()] if keywords else None
    try:
        return KeywordSpotter(
            model,
            keywords=kw,
            threshold=threshold,
            refractory=refractory,
            smooth_ms=smooth_ms,
            chunk_ms=chunk_ms,
            threads=threads,
        )
    except KwsModelError as e:
        raise click.ClickException(str(e)) from e


def _open_wav(path, chunk_ms, realtime):
    from ..common.audio import AudioError, WavSource

    try:
        return WavSource(path, block_ms=chunk_ms, realtime=realtime)
    except AudioError as e:
        raise click.ClickException(str(e)) from e


def _refused(worker):
    """The worker's :class:`~.kws.KwsInputError` (a refused sample), else None."""
    from .spotter import KwsInputError

    return worker.error if isinstance(worker.error, KwsInputError) else None


def _summary(worker, wall_s: float, cpu_s: float, n_det: int, interrupted: bool) -> dict:
    import numpy as np

    # a copy through tolist(): a numpy view would export the buffer, and the worker thread
    # appending meanwhile would fail ("cannot resize an array that is exporting buffers")
    lat = np.array(worker.latencies.tolist()) if worker.latencies else np.zeros(1)
    audio_s = worker.audio_s
    return {
        "interrupted": interrupted,
        "detections": n_det,
        "audio_s": round(audio_s, 3),
        "chunks": len(worker.latencies),
        "latency_mean_ms": float(1e3 * lat.mean()),
        "latency_p95_ms": float(1e3 * np.percentile(lat, 95)),
        "rtf": float(lat.sum() / audio_s) if audio_s > 0 else float("nan"),
        "cpu_percent": float(100 * cpu_s / wall_s) if wall_s > 0 else float("nan"),
        "dropped_blocks": int(worker.source.dropped),
        "input_overflows": int(worker.source.overflows),
        "wall_s": round(wall_s, 3),
    }


def _format_summary(s: dict) -> str:
    if s["interrupted"]:
        head = "stopped (Ctrl-C)"
    else:
        head = "stopped at a refused sample" if s.get("refused") else "end of input"
    return (
        f"{head}: {s['detections']} detection(s) in {s['audio_s']:.1f} s of audio; "
        f"chunk latency mean {s['latency_mean_ms']:.2f} ms / p95 {s['latency_p95_ms']:.2f} ms "
        f"over {s['chunks']} chunks; real-time factor {s['rtf']:.3f}; "
        f"CPU {s['cpu_percent']:.0f}%; dropped blocks {s['dropped_blocks']} "
        f"(input overflows {s['input_overflows']})"
    )


def _live_view(worker, spotter, source_name: str):
    from rich.table import Table

    def bar(frac: float, width: int = 30, mark: float | None = None) -> str:
        n = int(round(max(0.0, min(1.0, frac)) * width))
        cells = ["█"] * n + ["·"] * (width - n)
        if mark is not None:
            cells[min(width - 1, int(round(mark * width)))] = "|"
        return "".join(cells)

    table = Table(title=f"liquid-stream kws — {source_name}", show_header=False, box=None)
    level = worker.level_db
    table.add_row("level", bar((level + 60) / 60), f"{level:6.1f} dBFS")
    for k, thr in zip(spotter.keywords, spotter.thresholds, strict=True):
        score = spotter.scores.get(k, 0.0)
        style = "bold green" if score >= thr else ""
        table.add_row(
            k,
            f"[{style}]{bar(score, mark=thr)}[/]" if style else bar(score, mark=thr),
            f"{score:.2f}",
        )
    table.add_row("time", f"{worker.audio_s:8.2f} s", "")
    return table


def run_kws(spotter, source, *, mic: bool, ui: bool, echo=click.echo, batch=None) -> dict:
    """Run ``source`` through ``spotter`` in a worker thread until the source ends or
    Ctrl-C; print detections; return the summary dict. ``batch``: see :class:`KwsWorker`."""
    worker = KwsWorker(spotter, source, batch=batch)
    t_wall, t_cpu = time.perf_counter(), time.process_time()
    n_det = 0
    interrupted = False

    def drain(print_fn) -> None:
        nonlocal n_det
        while not worker.events.empty():
            det, wall = worker.events.get()
            n_det += 1
            stamp = _wall(wall) if mic else _clock(det.time_s)
            print_fn(f"{stamp}  {det.keyword}  {det.score:.3f}")

    from liquid_stream.apps.common.interrupt import interrupt_on_signals

    live = None
    restore = interrupt_on_signals()
    try:
        worker.start()
        if ui:
            from rich.console import Console
            from rich.live import Live

            live = Live(
                _live_view(worker, spotter, source.name), console=Console(), refresh_per_second=15
            )
            live.start()
        while worker.is_alive():
            worker.join(0.05)
            if live is not None:
                drain(lambda line: live.console.print(line, markup=False, highlight=False))
                live.update(_live_view(worker, spotter, source.name))
            else:
                drain(echo)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        worker.stop()
        worker.join(5.0)
        if live is not None:
            drain(lambda line: live.console.print(line, markup=False, highlight=False))
            live.stop()
        restore()
    drain(echo)
    summary = _summary(
        worker, time.perf_counter() - t_wall, time.process_time() - t_cpu, n_det, interrupted
    )
    refused = _refused(worker)
    if refused is not None:  # the detections before it are printed; then one error line
        echo(_format_summary(dict(summary, refused=True)))
        raise click.ClickException(f"{source.name}: {refused}")
    if worker.error is not None:
        raise click.ClickException(f"audio processing failed: {worker.error}")
    return summary


# ---------------------------------------------------------------------------- commands

_SPOTTER_OPTIONS = [
    click.option("--keywords", default=None, help="Comma-separated keywords [default: all]."),
    click.option(
        "--threshold",
        default=None,
        type=click.FloatRange(0, 1, min_open=True),
        help="Smoothed-score threshold of a detection [default: the model's tuned "
        "threshold (kws-tune), else 0.8].",
    ),
    click.option(
        "--refractory",
        default=1.0,
        show_default=True,
        type=click.FloatRange(0),
        help="Seconds after a detection during which nothing fires.",
    ),
    click.option(
        "--smooth-ms",
        default=None,
        type=click.FloatRange(0),
        help="Moving-average window of the posteriors [default: the model's tuned "
        "window (kws-tune), else 100 ms].",
    ),
    click.option(
        "--chunk-ms",
        default=10.0,
        show_default=True,
        type=click.FloatRange(0.1),
        help="Audio per model call (kws: blocks of a live input; it runs several "
        "in one call only while none can fire a detection; a file runs in "
        "calls of at least the model's export chunk, unless --live-calls).",
    ),
    click.option(
        "--threads",
        default=1,
        show_default=True,
        type=click.IntRange(1),
        help="onnxruntime intra-op threads.",
    ),
]


def _spotter_options(fn):
    for opt in reversed(_SPOTTER_OPTIONS):
        fn = opt(fn)
    return fn


@click.command("kws")
@click.argument("model", required=False, default=None, type=click.Path(dir_okay=False))
@click.option(
    "--device",
    default=None,
    help="Input device: PortAudio index or name (e.g. 'pulse') [default: the default input].",
)
@click.option(
    "--input",
    "input_path",
    default=None,
    type=click.Path(dir_okay=False),
    help="Read a WAV file instead of a microphone.",
)
@click.option("--fast", is_flag=True, help="With --input: as fast as possible, not real time.")
@click.option(
    "--live-calls",
    is_flag=True,
    help="With --input: call the model as for a microphone, each --chunk-ms "
    "block on its arrival unless no detection can come from it (default: a "
    "file runs in calls of the model's export chunk, e.g. 100 ms; the same "
    "detections either way).",
)
@_spotter_options
@click.option("--no-ui", is_flag=True, help="Plain output only (no live view).")
def kws_cmd(
    model,
    device,
    input_path,
    fast,
    live_calls,
    keywords,
    threshold,
    refractory,
    smooth_ms,
    chunk_ms,
    threads,
    no_ui,
):
    """Spot keywords live with an exported per-step classifier MODEL (.onnx); without
    MODEL, the pretrained SC10 spotter shipped with the package (liquid_stream/models).

    Prints one line per detection, `HH:MM:SS.mmm  keyword  score` (wall clock for a
    microphone, stream time for --input), and a summary on Ctrl-C or at the end of the file.
    """
    if input_path and device is not None:
        raise click.UsageError("give either --device or --input, not both")
    if fast and not input_path:
        raise click.UsageError("--fast needs --input FILE.wav")
    if live_calls and not input_path:
        raise click.UsageError(
            "--live-calls needs --input FILE.wav (a microphone's calls are always these)"
        )
    if model is None:
        from liquid_stream.models import KWS, ShippedModelMissing, shipped

        try:
            model = str(shipped(KWS))
        except ShippedModelMissing as e:
            raise click.ClickException(f"{e}; give a MODEL") from e
        click.echo(f"model: the shipped {KWS} spotter ({model})", err=True)
    spotter = _open_spotter(model, keywords, threshold, refractory, smooth_ms, chunk_ms, threads)
    ui = not no_ui and sys.stdout.isatty()
    err = sys.stderr
    if input_path:
        # a file's samples are all there: calls of the model's own chunk (spotter.batch)
        # read in blocks of as much audio, unless --live-calls asks for a microphone's calls
        batch = None if live_calls else spotter.batch
        block_ms = chunk_ms if batch is None else 1000.0 * batch / spotter.sample_rate
        source = _open_wav(input_path, block_ms, realtime=not fast)
        for note in source.notes:
            click.echo(f"note: {note}", err=True)
        with source:
            rate_note = f", resampled {source.rate} → {spotter.sample_rate} Hz" * (
                source.rate != spotter.sample_rate
            )
            click.echo(f"reading {source.name} ({source.duration_s:.1f} s{rate_note})", err=True)
            summary = run_kws(spotter, source, mic=False, ui=ui, batch=batch)
    else:
        from ..common.audio import AudioError, MicSource

        dev = int(device) if device is not None and device.isdigit() else device
        try:
            source = MicSource(dev, prefer_rate=spotter.sample_rate, block_ms=chunk_ms)
            with source:
                source.wait_first_block(5.0)
                rate_note = f", resampled to {spotter.sample_rate} Hz" * (
                    source.rate != spotter.sample_rate
                )
                print(
                    f"listening on {source.name!r} at {source.rate} Hz{rate_note}; Ctrl-C to stop",
                    file=err,
                    flush=True,
                )
                summary = run_kws(spotter, source, mic=True, ui=ui)
        except AudioError as e:
            raise click.ClickException(str(e)) from e
    click.echo(_format_summary(summary))


def _stream_options(stream_help: str, labels_help: str):
    """``--stream`` (a WAV) and ``--labels`` (its CSV) of a labelled stream, both required."""

    def deco(fn):
        fn = click.option("--labels", "labels_path", required=True, type=FILE, help=labels_help)(fn)
        return click.option("--stream", "stream_path", required=True, type=FILE, help=stream_help)(
            fn
        )

    return deco


@click.command("kws-eval")
@click.argument("model", type=FILE)
@_stream_options(
    "Long WAV to spot keywords in.", "CSV start_s,end_s,word,is_keyword of the stream."
)
@click.option(
    "--tolerance",
    default=1.0,
    show_default=True,
    type=click.FloatRange(0),
    help="A detection counts until this long after the keyword's end.",
)
@_spotter_options
@click.option(
    "--out",
    "out_path",
    default=None,
    type=click.Path(dir_okay=False),
    help="Write the metrics as JSON here and a plot next to it (.png).",
)
def kws_eval_cmd(
    model,
    stream_path,
    labels_path,
    tolerance,
    keywords,
    threshold,
    refractory,
    smooth_ms,
    chunk_ms,
    threads,
    out_path,
):
    """Score MODEL on a labelled stream: detection rate, false accepts per hour, latency."""
    import json
    from pathlib import Path

    from liquid_stream.io.atomic import atomic_path, atomic_write_bytes
    from liquid_stream.io.labels import read_label_csv

    from .spotter import evaluate_detections

    spotter = _open_spotter(model, keywords, threshold, refractory, smooth_ms, chunk_ms, threads)
    try:
        truth = read_label_csv(labels_path)
    except ValueError as e:
        raise click.ClickException(str(e)) from e
    source = _open_wav(stream_path, chunk_ms, realtime=False)
    if len(source.samples) == 0:
        raise click.ClickException(f"{source.name}: the WAV holds no samples: nothing to score")
    worker = KwsWorker(spotter, source, record_trace=True, hold=False)  # a call a chunk
    t_wall, t_cpu = time.perf_counter(), time.process_time()
    worker.run()  # in this thread: nothing to display
    wall, cpu = time.perf_counter() - t_wall, time.process_time() - t_cpu
    refused = _refused(worker)
    if worker.error is not None and refused is None:
        raise click.ClickException(f"audio processing failed: {worker.error}")
    dets = []
    while not worker.events.empty():
        dets.append(worker.events.get()[0])
    duration = source.duration_s
    if refused is not None:  # score the audio before the refused sample, then fail
        duration = refused.time_s
        truth = [e for e in truth if e.start_s < duration]
    res = evaluate_detections(dets, truth, spotter.keywords, duration, tolerance)
    if refused is not None:
        res.update(partial=True, error=f"{source.name}: {refused}")
    run = _summary(worker, wall, cpu, len(dets), False)
    res.update(
        model=str(model),
        stream=str(stream_path),
        threshold=float(spotter.thresholds.min()),
        smooth_ms=spotter.smooth_ms,
        rtf=run["rtf"],
        latency_mean_ms=run["latency_mean_ms"],
        latency_p95_ms=run["latency_p95_ms"],
        detections=[
            {"time_s": round(d.time_s, 4), "keyword": d.keyword, "score": round(d.score, 4)}
            for d in dets
        ],
    )

    def fmt(v, spec=".3f"):
        return "-" if v is None else format(v, spec)

    click.echo(f"{'keyword':<16}{'targets':>8}{'hit':>6}{'rate':>7}{'FA':>5}{'lat s':>8}")
    for k, r in res["per_keyword"].items():
        click.echo(
            f"{k:<16}{r['targets']:>8}{r['detected']:>6}{fmt(r['detection_rate']):>7}"
            f"{r['false_accepts']:>5}{fmt(r['mean_latency_s']):>8}"
        )
    click.echo(
        f"detection rate {fmt(res['detection_rate'])} ({res['detected']}/{res['targets']}), "
        f"false accepts {res['false_accepts']} ({res['false_accepts_per_hour']:.1f}/h over "
        f"{res['duration_s']:.1f} s), mean latency {fmt(res['mean_latency_s'])} s after the "
        f"keyword's end, RTF {run['rtf']:.3f}"
    )
    if res["ignored_words"]:
        click.echo(
            f"note: keywords in the labels the model does not spot: "
            f"{', '.join(res['ignored_words'])}",
            err=True,
        )
    if out_path:  # both files or neither: the plot first, the JSON last, each atomically
        from liquid_stream.apps.common.plots import NO_PLOT, can_plot

        out = Path(out_path)
        png = out.with_suffix(".png")
        plot = can_plot()
        try:
            if plot:
                with atomic_path(png) as tmp:
                    _plot_eval(tmp, source, worker.trace, spotter, truth, dets, until_s=duration)
            try:
                atomic_write_bytes(out, (json.dumps(res, indent=2) + "\n").encode())
            except BaseException:
                png.unlink(missing_ok=True)
                raise
        except OSError as e:  # a full disk: one line, nothing half-written
            raise click.ClickException(
                f"cannot write {out} / {png.name}: {e.strerror or e}; no report written"
            ) from None
        if plot:
            click.echo(f"wrote {out} and {png}")
        else:
            click.echo(f"wrote {out}; {NO_PLOT}")
    if refused is not None:
        click.echo(f"note: scored the first {duration:.3f} s only", err=True)
        raise click.ClickException(f"{source.name}: {refused}")


def _plot_eval(path, source, trace, spotter, truth, dets, until_s=None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    x = source.samples if until_s is None else source.samples[: int(until_s * source.rate)]
    step = max(1, len(x) // 20000)
    t = np.arange(0, len(x), step) / source.rate
    tr = np.asarray(trace) if trace else np.zeros((0, 1 + len(spotter.keywords)))
    fig, ax = plt.subplots(2, 1, figsize=(14, 6), sharex=True)
    ax[0].plot(t, x[::step], lw=0.3, color="0.3")
    ax[0].set(ylabel="audio", title=f"{source.name}: true keywords (spans) and detections")
    colors = {k: f"C{i % 10}" for i, k in enumerate(spotter.keywords)}
    for e in truth:
        c = colors.get(e.word, "0.8") if e.is_keyword else "0.85"
        for a in ax:
            a.axvspan(e.start_s, e.end_s, color=c, alpha=0.2, lw=0)
    for i, k in enumerate(spotter.keywords):
        ax[1].plot(tr[:, 0], tr[:, 1 + i], lw=0.8, color=colors[k], label=k)
    for d in dets:
        ax[1].axvline(d.time_s, color=colors.get(d.keyword, "k"), ls="--", lw=0.8)
    ax[1].axhline(float(np.min(spotter.thresholds)), color="k", lw=0.5, ls=":")
    ax[1].set(xlabel="time (s)", ylabel="smoothed score", ylim=(0, 1.05))
    if len(spotter.keywords) <= 12:
        ax[1].legend(loc="upper right", fontsize=7, ncol=2)
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=100, format="png")  # path may be a hidden .tmp sibling
    finally:
        plt.close(fig)


@click.command("kws-tune")
@click.argument("model", type=FILE)
@_stream_options(
    "A labelled VALIDATION stream (kws-stream --split validation).",
    "Its CSV start_s,end_s,word,is_keyword.",
)
@click.option(
    "--max-fa-per-hour",
    default=2.0,
    show_default=True,
    type=click.FloatRange(0),
    help="False accepts per hour allowed on the stream.",
)
@click.option(
    "--write/--no-write",
    default=True,
    show_default=True,
    help="Store the chosen threshold and smoothing in MODEL's metadata.",
)
@click.option(
    "--chunk-ms",
    default=10.0,
    show_default=True,
    type=click.FloatRange(0.1),
    help="Audio per model call (the posteriors do not depend on it: the graphs "
    "are exact for any chunking; a graph exported for long chunks runs "
    "faster in them).",
)
@click.option(
    "--out",
    "out_path",
    default=None,
    type=click.Path(dir_okay=False),
    help="Write the whole grid (JSON) here.",
)
def kws_tune_cmd(model, stream_path, labels_path, max_fa_per_hour, write, chunk_ms, out_path):
    """Choose MODEL's detection threshold and smoothing on a labelled validation stream:
    the highest detection rate with at most --max-fa-per-hour false accepts."""
    import json
    from pathlib import Path

    from liquid_stream.io.atomic import atomic_write_bytes
    from liquid_stream.io.labels import read_label_csv

    from ..common.audio import AudioError, read_wav
    from .spotter import KwsModelError
    from .tune import tune_thresholds, write_tuning

    try:
        truth = read_label_csv(labels_path)
        audio, rate, _ = read_wav(stream_path)
        if len(audio) == 0:
            raise ValueError(f"{stream_path}: the WAV holds no samples: nothing to tune on")
        res = tune_thresholds(
            model, audio, truth, max_fa_per_hour, chunk_ms=chunk_ms, sample_rate=rate
        )
    except (ValueError, KwsModelError, AudioError) as e:
        raise click.ClickException(str(e)) from e
    click.echo(
        f"chosen on {Path(stream_path).name}: threshold {res.threshold:.2f}, smoothing "
        f"{res.smooth_ms:g} ms → detection rate {res.detection_rate:.3f}, "
        f"{res.false_accepts_per_hour:.1f} false accepts/h (target ≤ {max_fa_per_hour:g})"
    )
    # a full disk or a read-only folder: one line; the model and --out as they were
    where = out_path
    try:
        if out_path:
            atomic_write_bytes(out_path, (json.dumps(res.table, indent=1) + "\n").encode())
        where = model
        if write:
            write_tuning(model, res, Path(stream_path).name)
    except OSError as e:
        raise click.ClickException(
            f"cannot write {where}: {e.strerror or e}; {model} is unchanged"
        ) from None
    except ValueError as e:
        raise click.ClickException(str(e)) from None
    if write:
        click.echo(f"wrote kws_threshold / kws_smooth_ms into {model}")
