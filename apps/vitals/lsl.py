"""The vital-sign monitor on a live Lab Streaming Layer stream, its estimates published as
an LSL stream (no torch).

    from liquid_stream.apps.vitals.lsl import open_lsl, run_lsl

    monitor, reader = open_lsl(["hr.onnx", "rr.onnx"], "BioHarness")   # resolve, map, load
    with LslPublisher("vitals", monitor.targets, monitor.units) as pub:
        result = run_lsl(monitor, reader, pub, on_estimate=print)     # until the stream ends
    result.write_csv("v.csv")                                          # vitals.run.RunResult

The stream (:class:`~liquid_stream.io.lsl.LslReader`: channels mapped to PLETH / II / RESP)
feeds :class:`~liquid_stream.apps.vitals.monitor.VitalsMonitor` at its nominal rate (another
rate than the models' is resampled by the monitor). By default the samples are pushed in
blocks of one second of the stream (``block_s = 1``: sample ``round(k * fs)`` starts block
k), the chunks ``vitals --record`` pushes, so a replayed record gives the estimates of the
record read from its file bit for bit; the estimate of second k needs its last sample
anyway, so this costs no latency at the models' rate (with resampling: up to one block, the
filter's delay reaching into the next one). ``block_s = 0`` pushes each pull as it arrives
(estimates equal up to float32 rounding: the models' sums are split differently).

Each estimate is published as one sample (NaN where not valid), stamped with the LSL
timestamp of the input sample that ended its second. The run ends when the stream does
(its source is lost, or a replayed record's announced samples are all read), after
``duration_s`` seconds of signal, when ``stop`` is set, or on Ctrl-C; then the monitor is
flushed. Gaps the stream marks with NaN are handled by the monitor's gap rules; samples the
source never sent are not detected (LSL carries them over TCP: none are lost while the
inlet's buffer, 6 minutes by default, does not overflow).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from liquid_stream.apps.vitals.model import VitalsError
from liquid_stream.apps.vitals.monitor import (
    DEFAULT_MAX_GAP_S,
    Estimate,
    VitalsInputError,
    VitalsMonitor,
)
from liquid_stream.apps.vitals.run import EstimateLog, RunResult, monitor_result
from liquid_stream.io.lsl import DEFAULT_TIMEOUT_S, LslPublisher, LslReader


@dataclass
class LslSource:
    """What the summary says about the stream (the fields of a record source it uses)."""

    name: str
    fs: float
    channels: list[str]
    warnings: list[str] = field(default_factory=list)
    truncated: bool = False
    numerics_name: str | None = None
    end: str = ""  # how the run ended: "stream complete", "stream lost", ...


def open_lsl(
    models: Sequence[str | Path],
    name: str,
    alarms=None,
    max_gap_s: float = DEFAULT_MAX_GAP_S,
    threads: int | None = 1,
    timeout: float = DEFAULT_TIMEOUT_S,
    labels: Sequence[str] | None = None,
    out_of_range: str = "gap",
) -> tuple[VitalsMonitor, LslReader]:
    """Open the LSL stream ``name`` and a monitor of ``models`` on its mapped channels at
    its nominal rate. A channel a model needs that the stream lacks is a
    :class:`VitalsError` naming the stream's labels. ``out_of_range``: as for a record
    (``"gap"``: a corrupt sample is a gap, so a long stream survives a glitch)."""
    reader = LslReader(name, timeout=timeout, labels=labels)
    try:
        monitor = monitor_for(models, reader, alarms, max_gap_s, threads, out_of_range)
    except BaseException:
        reader.close()
        raise
    return monitor, reader


def monitor_for(
    models: Sequence[str | Path],
    reader: LslReader,
    alarms=None,
    max_gap_s: float = DEFAULT_MAX_GAP_S,
    threads: int | None = 1,
    out_of_range: str = "gap",
    backups: Sequence[str | Path] = (),
) -> VitalsMonitor:
    """A :class:`VitalsMonitor` of ``models`` (and their ``backups``) reading ``reader``'s
    channels at its rate."""
    try:
        return VitalsMonitor(
            models,
            alarms,
            channels=reader.channels,
            input_rate=reader.rate,
            max_gap_s=max_gap_s,
            threads=threads,
            out_of_range=out_of_range,
            backups=backups,
        )
    except VitalsError as e:
        if "is not in the input" not in str(e):
            raise
        raise VitalsError(
            f"LSL stream {reader.name!r}: {str(e).split(' (it has')[0]} (its channels: "
            f"{', '.join(map(repr, reader.stream_labels))}; mapped: "
            f"{', '.join(reader.channels)})"
        ) from None


def run_lsl(
    monitor: VitalsMonitor,
    reader: LslReader,
    publisher: LslPublisher | None = None,
    on_estimate: Callable[[Estimate], None] | None = None,
    block_s: float | None = 1.0,
    duration_s: float | None = None,
    poll_s: float = 0.02,
    stop: threading.Event | None = None,
    source: LslSource | None = None,
) -> RunResult:
    """Stream ``reader`` through ``monitor`` until the stream ends (see the module
    docstring); publish each estimate on ``publisher`` and call ``on_estimate`` with it.
    A chunk the monitor refuses ends the run there (``RunResult.error``), keeping the
    estimates before it. ``source``, when given, gets how the run ended (``end``)."""
    if monitor.input_rate != reader.rate:
        raise VitalsError(
            f"the monitor reads {monitor.input_rate:g} Hz, the stream is {reader.rate:g} Hz"
        )
    fs = reader.rate
    block = None if not block_s else float(block_s)
    limit = None if duration_s is None else int(round(duration_s * fs))
    stop = stop or threading.Event()
    estimates = EstimateLog()  # by column: memory does not grow by objects per second
    latencies: list[float] = []
    stamps: dict[int, float] = {}  # second k -> LSL timestamp of its last input sample
    pending = np.zeros((0, len(reader.channels)))
    received = 0  # input samples taken from the reader
    pushed = 0  # input samples pushed into the monitor
    k_block = 1  # next block ends at sample round(k_block * block * fs)
    error, interrupted, end = None, False, ""
    t_start = time.perf_counter()

    def emit(ests: list[Estimate]) -> None:
        for e in ests:
            estimates.append(e)
            ts = stamps.pop(e.time_s, None)
            if publisher is not None:
                publisher.push(
                    {t: (e.values[t] if e.status[t] == "ok" else math.nan) for t in e.values},
                    ts,
                )
            if on_estimate is not None:
                on_estimate(e)

    def push(x: np.ndarray) -> bool:
        nonlocal pushed, error
        t0 = time.perf_counter()
        try:
            ests = monitor.push(x)
        except VitalsInputError as e:  # the monitor is as before the chunk: end there
            error = str(e)
            return False
        latencies.append(time.perf_counter() - t0)
        pushed += len(x)
        emit(ests)
        return True

    try:
        while True:
            if stop.is_set():
                end = "stopped"
                break
            x, ts = reader.pull_with_timestamps()
            if limit is not None:
                x, ts = x[: limit - received], ts[: limit - received]
            if len(x):
                _note_seconds(stamps, received, ts, fs)
                received += len(x)
                pending = np.concatenate([pending, x])
                if block is None:
                    ok = push(pending)
                    pending = pending[:0]
                else:
                    ok = True
                    while ok:
                        end_k = int(round(k_block * block * fs))
                        if received < end_k:
                            break
                        n = end_k - pushed
                        ok = push(pending[:n])
                        if ok:
                            pending = pending[n:]
                            k_block += 1
                if not ok:
                    end = "refused input"
                    break
            if limit is not None and received >= limit:
                end = f"{duration_s:g} s read"
                break
            if reader.ended:
                end = "stream lost" if reader.lost else "stream complete"
                break
            if not len(x):
                time.sleep(poll_s)
    except KeyboardInterrupt:
        interrupted, end = True, "interrupted"
    try:
        if error is None and len(pending):
            push(pending)
        t0 = time.perf_counter()
        ests = monitor.flush()
        if latencies:
            latencies[-1] += time.perf_counter() - t0
        emit(ests)
    except KeyboardInterrupt:
        interrupted = True
    if source is not None:
        source.end = end
    return monitor_result(monitor, estimates, latencies, t_start, False, interrupted, error)


def _note_seconds(stamps: dict[int, float], start: int, ts: np.ndarray, fs: float) -> None:
    """Note the timestamp of each input sample that ends a second k (index round(k*fs) - 1)
    among the samples ``start .. start + len(ts) - 1`` (``ts``: theirs)."""
    k = max(1, int(math.floor((start + 1) / fs)))
    while True:
        i = int(round(k * fs)) - 1
        if i >= start + len(ts):
            return
        if i >= start:
            stamps[k] = float(ts[i - start])
        k += 1
