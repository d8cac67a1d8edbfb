"""``liquid-stream vitals``: the streaming vital-sign monitor on a WFDB record
(``--record``) or on a live Lab Streaming Layer stream (``--lsl``, its estimates published
with ``--lsl-out``; docs/lsl.md).

onnxruntime, wfdb, pylsl, rich and matplotlib are imported inside the command (``--help``
stays fast); torch is never imported on this path.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections import deque
from pathlib import Path

import click

SPARK = "▁▂▃▄▅▆▇█"


class SpeedType(click.ParamType):
    """``1``, ``10``, ``2.5x`` ... (times real time) or ``max`` (no pacing) -> float | None."""

    name = "speed"

    def convert(self, value, param, ctx):
        if value is None or isinstance(value, float):
            return value
        text = str(value).strip().lower()
        if text in ("max", "inf"):
            return None
        text = text.removesuffix("x")
        try:
            speed = float(text)
        except ValueError:
            self.fail(f"{value!r} is not a speed: use a positive number (1, 10) or 'max'")
        if not (speed > 0 and math.isfinite(speed)):
            self.fail(f"{value!r}: the speed must be > 0 (or 'max')")
        return speed


def sparkline(values, width: int = 40) -> str:
    """Unicode sparkline of the last ``width`` values (NaN -> blank)."""
    vals = list(values)[-width:]
    finite = [v for v in vals if v is not None and math.isfinite(v)]
    if not finite:
        return " " * len(vals)
    lo, hi = min(finite), max(finite)
    span = hi - lo or 1.0
    return "".join(
        " "
        if v is None or not math.isfinite(v)
        else SPARK[min(len(SPARK) - 1, int((v - lo) / span * len(SPARK)))]
        for v in vals
    )


class Dashboard:
    """The live rich view: one row per vital, alarm log, stream progress."""

    def __init__(self, monitor, source, speed, history: int = 60):
        self.monitor, self.source, self.speed = monitor, source, speed
        self.hist = {t: deque(maxlen=history) for t in monitor.targets}
        self.last = None
        self.log: deque[str] = deque(maxlen=5)

    def add(self, est) -> None:
        self.last = est
        for t in self.monitor.targets:
            self.hist[t].append(est.values[t] if est.status[t] == "ok" else math.nan)
        for name, ev in est.events:
            self.log.append(f"{est.time_s:6d} s  {name}  {'ON' if ev == 'on' else 'cleared'}")
        for msg, ev in est.tech_events:
            self.log.append(f"{est.time_s:6d} s  {msg}  {'ON' if ev == 'on' else 'cleared'}")

    def __rich_console__(self, console, options):
        yield self.render(max(10, min(60, options.max_width - 75)))

    def render(self, spark_width: int = 40):
        from rich.console import Group
        from rich.panel import Panel
        from rich.table import Table
        from rich.text import Text

        e = self.last
        table = Table(expand=True, box=None, pad_edge=False)
        for col, kw in (
            ("vital", {}),
            ("estimate", {"justify": "right"}),
            ("", {"no_wrap": True}),
            ("status", {}),
            ("monitor (window)", {"justify": "right"}),
            ("monitor 1 Hz", {"justify": "right"}),
            (f"last {spark_width} s", {"no_wrap": True}),
            ("alarms", {}),
        ):
            table.add_column(col, **kw)
        for t in self.monitor.targets:
            units = self.monitor.units[t]
            if e is None:
                table.add_row(t.upper(), "-", units, "waiting", "", "", "", "")
                continue
            ok = e.status[t] == "ok"
            val = e.values[t]
            est = Text(f"{val:.1f}" if math.isfinite(val) else "--", style="bold" if ok else "dim")
            alarms = [n for n, on in e.alarms.items() if n.startswith(t) and on]
            table.add_row(
                t.upper(),
                est,
                units,
                Text(e.status[t], style="green" if ok else "yellow"),
                _num(e.ref.get(t)),
                _num(e.ref_1hz.get(t)),
                sparkline(self.hist[t], spark_width),
                Text(" ".join(alarms) or "-", style="bold white on red" if alarms else "dim"),
            )
        now = e.time_s if e else 0
        speed = "max" if self.speed is None else f"{self.speed:g}x"
        head = (
            f"{self.source.name}  t = {now} / {self.source.duration_s:.0f} s  speed {speed}"
            f"  ({self.source.fs:g} Hz -> models {self.monitor.sample_rate:g} Hz)"
        )
        log = Text("\n".join(self.log) or "no alarm events", style="dim" if not self.log else "")
        if e is not None and e.technical:
            log = Group(
                Text("TECHNICAL: " + "; ".join(e.technical), style="bold black on yellow"), log
            )
        return Panel(Group(table, Text(""), log), title="liquid-stream vitals", subtitle=head)


def _num(v) -> str:
    return f"{v:.1f}" if v is not None and math.isfinite(v) else "-"


@click.command("vitals")
@click.argument("models", nargs=-1, required=False, type=click.Path(dir_okay=False))
@click.option(
    "--record",
    default=None,
    help="WFDB record path without extension, e.g. data/bidmc/bidmc01 (numerics: bidmc01n).",
)
@click.option(
    "--lsl",
    "lsl_name",
    default=None,
    metavar="NAME",
    help="Instead of --record: read the live LSL stream NAME (channel labels such as PPG, "
    "ECG, Resp mapped to PLETH / II / RESP; any nominal rate, resampled). LSL stays on this "
    "machine unless LSLAPICFG names another config (docs/lsl.md).",
)
@click.option(
    "--lsl-out",
    default=None,
    metavar="NAME",
    help="With --lsl: publish the estimates as the LSL stream NAME (one channel per vital, "
    "1 Hz, NaN when not valid; labels and units in its description).",
)
@click.option(
    "--lsl-timeout",
    default=5.0,
    show_default=True,
    type=click.FloatRange(0, min_open=True),
    help="Seconds to find the --lsl stream.",
)
@click.option(
    "--lsl-labels",
    default=None,
    help="Comma-separated labels of the --lsl stream's channels, in order, for a stream "
    "without labels in its description (e.g. 'PPG,ECG').",
)
@click.option(
    "--lsl-block",
    default=1.0,
    show_default=True,
    type=click.FloatRange(0),
    help="Seconds of the --lsl stream pushed to the models at once (1: the chunks of "
    "--record, same estimates bit for bit; 0: each arrival at once, equal up to float32 "
    "rounding, less latency when resampling).",
)
@click.option(
    "--duration",
    default=None,
    type=click.FloatRange(0, min_open=True),
    help="With --lsl: stop after this many seconds of signal [default: until the stream "
    "ends, or Ctrl-C].",
)
@click.option(
    "--speed",
    default="1",
    show_default=True,
    type=SpeedType(),
    help="Pacing: times real time (1 = live, 10), or 'max' for no pacing.",
)
@click.option(
    "--alarm",
    "alarms",
    multiple=True,
    help="Alarm rules, e.g. 'hr>120,spo2<90' or 'rr>30:hold=10:margin=4' (repeatable). "
    "An alarm triggers after --alarm-hold valid seconds beyond the threshold and clears at "
    "the first valid second beyond threshold -/+ margin (default margins: hr 5 bpm, rr 3 "
    "breaths/min, spo2 2 %).",
)
@click.option(
    "--alarm-hold",
    default=5,
    show_default=True,
    type=click.IntRange(1),
    help="Seconds a valid estimate must breach a threshold before its alarm triggers.",
)
@click.option(
    "--max-gap",
    default=2.0,
    show_default=True,
    type=click.FloatRange(0),
    help="Longest NaN gap (s) that is interpolated (estimates invalid while their window "
    "covers it); longer gaps reset the model state, which then re-warms.",
)
@click.option(
    "--out",
    "out_dir",
    default=None,
    type=click.Path(file_okay=False),
    help="Directory for <record>_vitals.csv / .png / _summary.json "
    "[default: runs/vitals/<record>].",
)
@click.option(
    "--no-fallback",
    is_flag=True,
    help="With no MODEL: run the picked models only, without the shipped models of the same "
    "vital on fewer channels that take over when a channel is lost (the PPG-only HR model "
    "when the ECG lead comes off).",
)
@click.option("--no-ui", is_flag=True, help="No live dashboard (also off when not a TTY).")
@click.option(
    "--threads", default=1, show_default=True, type=click.IntRange(1), help="ORT threads/model."
)
def vitals_cmd(
    models,
    record,
    lsl_name,
    lsl_out,
    lsl_timeout,
    lsl_labels,
    lsl_block,
    duration,
    speed,
    alarms,
    alarm_hold,
    max_gap,
    out_dir,
    no_fallback,
    no_ui,
    threads,
):
    """Stream a WFDB RECORD (or the live LSL stream --lsl NAME) through 1-3 exported
    vital-sign MODELS (hr / rr / spo2); with no MODEL, the shipped models that fit the
    channels (PLETH + II, else PLETH, else II for HR alone; RR from RESP when there is one;
    SpO2 from IR + RED).

    Emits HR/RR/SpO2 once per second from the models' causal outputs (none for a second
    whose signal cannot back it: a flat, clipped, noise-only or hum-only channel raises a
    TECHNICAL ALARM instead), raises alarms with hysteresis, compares with the record's
    numerics (RMSE/MAE), and writes a CSV and a PNG. NaN gaps up to --max-gap seconds are
    interpolated (estimates flagged invalid while the window covers them); longer gaps
    reset the models, which then re-warm. A sample
    beyond a model's input bound (10^6 input standard deviations: a corrupt value) counts
    as a NaN. A record at another sampling rate is resampled (causal polyphase FIR) to the
    models' rate. With no MODEL, the shipped models of each vital on fewer channels run
    beside the picked ones and give the number while a channel is lost (the PPG-only HR
    model while the ECG lead is off; --no-fallback: not).

    With --lsl NAME the monitor reads a live Lab Streaming Layer stream instead (--speed
    does not apply), prints each second's estimates, publishes them with --lsl-out, and
    writes the CSV, PNG and summary when the stream ends (or at --duration, or Ctrl-C).
    """
    if (record is None) == (lsl_name is None):
        raise click.UsageError("give --record RECORD or --lsl NAME (one of them)")
    if lsl_name is None:
        for opt, val in (
            ("--lsl-out", lsl_out),
            ("--lsl-labels", lsl_labels),
            ("--duration", duration),
        ):
            if val is not None:
                raise click.UsageError(f"{opt} needs --lsl")
    else:
        labels = None if lsl_labels is None else [x.strip() for x in lsl_labels.split(",")]
        return _vitals_lsl(
            models,
            lsl_name,
            lsl_out,
            lsl_timeout,
            labels,
            lsl_block,
            duration,
            alarms,
            alarm_hold,
            max_gap,
            out_dir,
            threads,
            no_fallback,
        )
    from liquid_stream.apps.vitals.alarms import AlarmSyntaxError, parse_alarms
    from liquid_stream.apps.vitals.model import VitalsError
    from liquid_stream.apps.vitals.run import open_record, run_record

    backups: list[str] = []
    if not models:  # the shipped models that fit the record's channels
        from liquid_stream.io.wfdb import WfdbError, read_header, record_path
        from liquid_stream.models import ShippedModelMissing, vitals_for

        try:
            names = read_header(record_path(record)).sig_name
            models = [str(p) for p in vitals_for(names)]
        except (WfdbError, ShippedModelMissing) as e:
            raise click.ClickException(str(e)) from None
        click.echo(f"no MODEL given: the shipped models {', '.join(Path(m).stem for m in models)}")
        backups = [] if no_fallback else _backups(names, models)
        if not any(Path(m).stem.endswith("-hr") for m in models):
            click.echo(
                "note: no shipped HR model reads these channels: no HR",
                err=True,
            )
    try:
        rules = parse_alarms(list(alarms), hold_s=alarm_hold)
        monitor, source = open_record(models, record, rules, max_gap, threads, backups=backups)
    except (VitalsError, AlarmSyntaxError) as e:
        raise click.ClickException(str(e)) from None

    echo = click.echo
    echo(
        f"record {source.name}: {source.duration_s:.1f} s at {source.fs:g} Hz, using "
        f"{', '.join(source.channels)}; numerics: "
        + (
            f"{source.numerics_name} ({', '.join(source.numerics)})"
            if source.numerics_name
            else "none (no reference)"
        )
    )
    _describe_monitor(monitor, f"record at {source.fs:g} Hz", echo)
    for w in source.warnings:
        echo(f"warning: {w}", err=True)
    for m in monitor.models:
        if source.duration_s < m.window_s + 1:
            echo(
                f"warning: the record ({source.duration_s:.1f} s) is not longer than the "
                f"{m.target} model's {m.window_s:g} s window: no valid {m.target} estimate",
                err=True,
            )
    for a in monitor.alarms:
        echo(f"alarm {a.rule}")

    from liquid_stream.apps.common.interrupt import interrupt_on_signals

    restore = interrupt_on_signals()  # SIGTERM stops the run like Ctrl-C: results written
    try:
        result = _run_record(monitor, source, speed, no_ui, echo, run_record)
    finally:
        restore()
    if result.interrupted:
        echo("interrupted: writing what was streamed so far", err=True)
    if result.error:
        echo("stopped at a refused sample: writing what was streamed before it", err=True)

    out = Path(out_dir) if out_dir else Path("runs") / "vitals" / source.name
    _write_results(
        result, out, source.name, source.name, _summary(result, source, monitor, speed), echo
    )
    if result.error:
        raise click.ClickException(f"record {source.name}: {result.error}")


def _run_record(monitor, source, speed, no_ui: bool, echo, run_record):
    """The record run: the live rich view on a terminal (unless ``no_ui``), else the events
    and a reading a minute as lines."""
    if not no_ui and sys.stdout.isatty():
        return _run_with_ui(monitor, source, speed, run_record)
    next_report = [60]

    def on_estimate(e):
        _echo_events(e, echo)
        if speed is not None and e.time_s >= next_report[0]:
            next_report[0] += 60
            echo(f"[{e.time_s:6d} s] " + _reading(e, monitor.units))

    return run_record(monitor, source, speed, on_estimate)


def _write_results(result, out: Path, stem: str, title: str, summary: dict, echo) -> None:
    """``<stem>_vitals.csv``, ``_vitals.png`` and ``_summary.json`` into ``out``; prints the
    summary and the paths. The three are written to hidden temporary files first and
    renamed into place only when all three are complete (:mod:`liquid_stream.io.atomic`), so a
    full disk or any other failed write publishes none of them (an older run's files stay
    as they were) and is a one-line error after the printed summary: nothing of the run is
    lost from the terminal, and no CSV is left without its summary."""
    import os
    from contextlib import ExitStack

    from liquid_stream.apps.common.plots import NO_PLOT, can_plot
    from liquid_stream.io.atomic import atomic_path

    plot = can_plot()
    paths = [out / f"{stem}_vitals.csv", out / f"{stem}_summary.json"]
    if plot:
        paths.insert(1, out / f"{stem}_vitals.png")
    mask = os.umask(0)
    os.umask(mask)
    try:
        with ExitStack() as stack:  # renamed in reverse order once every file is written
            tmps = [stack.enter_context(atomic_path(p)) for p in paths]
            result.write_csv(tmps[0])
            if plot:
                result.plot(tmps[1], title=title)
            tmps[-1].write_text(json.dumps(summary, indent=2, default=_json_default) + "\n")
            for tmp in tmps:  # the mode an ordinary write gives (the temporaries are 0600)
                os.chmod(tmp, 0o666 & ~mask)
    except OSError as e:
        _print_summary(summary, echo)
        why = e.strerror or str(e)
        raise click.ClickException(
            f"cannot write results to {out}: {why}; nothing written (the summary is above)"
        ) from None
    _print_summary(summary, echo)
    echo(f"wrote {', '.join(map(str, paths))}")
    if not plot:
        echo(f"note: {NO_PLOT}")


def _backups(channels, models) -> list[str]:
    """The shipped fallback models for these channels and picked ``models``
    (:func:`~liquid_stream.models.vitals_backups`)."""
    from liquid_stream.models import vitals_backups

    return [str(p) for p in vitals_backups(channels, models)]


def _describe_monitor(monitor, source_rate: str, echo) -> None:
    """Print each model (target, file, channels, window), each backup, and the resampling,
    if any, from ``source_rate`` (e.g. "record at 250 Hz") to the models' rate."""
    for m in monitor.models:
        echo(
            f"model {m.target}: {m.path.name} <- {', '.join(m.channels)}; window "
            f"{m.window_s:g} s at {m.sample_rate:g} Hz"
        )
    for b in monitor.backups:
        echo(f"backup {b.target}: {b.path.name} <- {', '.join(b.channels)} (when the model is not)")
    if monitor.resampler is not None:
        r = monitor.resampler
        echo(
            f"note: {source_rate}, models at {monitor.sample_rate:g} Hz: "
            f"resampling x{r.up}/{r.down} (causal FIR, {r.delay_s * 1000:.0f} ms delay)"
        )


def _vitals_lsl(
    models,
    name,
    lsl_out,
    timeout,
    labels,
    block_s,
    duration,
    alarms,
    alarm_hold,
    max_gap,
    out_dir,
    threads,
    no_fallback=False,
):
    """``vitals --lsl NAME``: the monitor on a live LSL stream (apps/vitals/lsl.py)."""
    import re

    from liquid_stream.apps.vitals.alarms import AlarmSyntaxError, parse_alarms
    from liquid_stream.apps.vitals.lsl import LslSource, monitor_for, run_lsl
    from liquid_stream.apps.vitals.model import VitalsError
    from liquid_stream.io.lsl import ESTIMATE_LABELS, LslError, LslPublisher, LslReader

    echo = click.echo
    try:
        rules = parse_alarms(list(alarms), hold_s=alarm_hold)
    except AlarmSyntaxError as e:
        raise click.ClickException(str(e)) from None
    try:
        reader = LslReader(name, timeout=timeout, labels=labels)
    except LslError as e:
        raise click.ClickException(str(e)) from None
    publisher = None
    try:
        echo(f"LSL stream {reader.describe()}")
        for w in reader.warnings:
            echo(f"warning: {w}", err=True)
        backups: list[str] = []
        if not models:  # the shipped models that fit the stream's channels
            from liquid_stream.models import ShippedModelMissing, vitals_for

            try:
                models = [str(p) for p in vitals_for(reader.channels)]
            except ShippedModelMissing as e:
                raise click.ClickException(f"LSL stream {name!r}: {e}") from None
            echo(f"no MODEL given: the shipped models {', '.join(Path(m).stem for m in models)}")
            backups = [] if no_fallback else _backups(reader.channels, models)
        try:
            monitor = monitor_for(models, reader, rules, max_gap, threads, backups=backups)
        except (VitalsError, AlarmSyntaxError) as e:
            raise click.ClickException(str(e)) from None
        _describe_monitor(monitor, f"stream at {reader.rate:g} Hz", echo)
        for a in monitor.alarms:
            echo(f"alarm {a.rule}")
        if lsl_out:
            try:
                publisher = LslPublisher(
                    lsl_out,
                    monitor.targets,
                    monitor.units,
                    source=name,
                    info={"models": ", ".join(m.path.name for m in monitor.models)},
                )
            except LslError as e:
                raise click.ClickException(str(e)) from None
            chans = ", ".join(
                f"{ESTIMATE_LABELS.get(t, t)} [{monitor.units[t]}]" for t in monitor.targets
            )
            echo(f"publishing the estimates as LSL stream {lsl_out!r}: {chans} (NaN: not valid)")
        until = f"for {duration:g} s of signal" if duration else "until the stream ends"
        total = reader.total_samples
        if total is not None:
            until += f" (a replayed record: {total / reader.rate:.1f} s)"
        echo(f"reading {until}; Ctrl-C stops")

        def on_estimate(e):
            _echo_events(e, echo)
            echo(f"[{e.time_s:6d} s] " + _reading(e, monitor.units))

        from liquid_stream.apps.common.interrupt import interrupt_on_signals

        source = LslSource(name, reader.rate, list(reader.channels), list(reader.warnings))
        restore = interrupt_on_signals()  # SIGTERM stops like Ctrl-C: results written
        try:
            result = run_lsl(
                monitor,
                reader,
                publisher,
                on_estimate,
                block_s=block_s,
                duration_s=duration,
                source=source,
            )
        finally:
            restore()
    finally:
        reader.close()
        if publisher is not None:
            publisher.close()
    echo(f"end: {source.end or 'stopped'} ({result.duration_s:.1f} s of signal)")
    if result.error:
        echo("stopped at a refused sample: writing what was streamed before it", err=True)
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "stream"
    out = Path(out_dir) if out_dir else Path("runs") / "vitals" / f"lsl-{safe}"
    summary = _summary(result, source, monitor, "live")
    summary["lsl"] = {
        "stream": name,
        "channels": dict(zip(reader.channels, reader.labels, strict=True)),
        "ignored": reader.ignored,
        "end": source.end,
        "published_as": lsl_out,
        "published_samples": publisher.samples if publisher else 0,
    }
    _write_results(result, out, f"lsl-{safe}", f"LSL {name}", summary, echo)
    if result.error:
        raise click.ClickException(f"LSL stream {name}: {result.error}")


def _reading(e, units: dict[str, str]) -> str:
    """``hr 72.4 bpm (ok), rr -- (nosignal)``: a value only where the estimate is valid
    (no number is printed for a second that cannot back one)."""
    return ", ".join(
        f"{t} {v:.1f} {units[t]} (ok)"
        if e.status[t] == "ok" and math.isfinite(v := e.values[t])
        else f"{t} -- ({e.status[t]})"
        for t in e.values
    )


def _echo_events(e, echo) -> None:
    """Print a second's alarm events: clinical (``ALARM hr>120 ON``) and technical
    (``TECHNICAL ALARM no signal on PLETH (flat line) ON``)."""
    for name, ev in e.events:
        echo(f"[{e.time_s:6d} s] ALARM {name} {'ON' if ev == 'on' else 'cleared'}")
    for msg, ev in e.tech_events:
        echo(f"[{e.time_s:6d} s] TECHNICAL ALARM {msg} {'ON' if ev == 'on' else 'cleared'}")


def _run_with_ui(monitor, source, speed, run_record):
    from rich.live import Live

    board = Dashboard(monitor, source, speed)
    last = [0.0]
    with Live(board, refresh_per_second=4, transient=False) as live:

        def on_estimate(e):
            board.add(e)
            now = time.perf_counter()
            if now - last[0] > 0.1:
                live.refresh()
                last[0] = now

        result = run_record(monitor, source, speed, on_estimate)
        live.refresh()
    return result


def _summary(result, source, monitor, speed) -> dict:
    lat = result.latencies_s
    return {
        "record": source.name,
        "duration_s": result.duration_s,
        "record_fs": source.fs,
        "model_fs": monitor.sample_rate,
        "resampled": monitor.resampler is not None,
        "truncated": source.truncated,
        "numerics": source.numerics_name,
        "speed": "max" if speed is None else speed,
        "models": {m.target: str(m.path) for m in monitor.models},
        "seconds": len(result.estimates),
        "metrics": result.metrics(),
        "gaps": result.gaps,
        "out_of_range": result.out_of_range,
        "alarms": {
            a.rule.name: {"episodes": a.episodes, "active_s": a.active_s, "events": a.events}
            for a in result.alarms
        },
        "alarm_check": result.alarm_check() if result.has_reference else None,
        "technical_alarms": result.technical(),
        "compute_s": result.compute_s,
        "wall_s": result.wall_s,
        "real_time_factor": result.real_time_factor,
        "chunks": len(lat),
        "latency_ms_mean": float(lat.mean() * 1000) if len(lat) else None,
        "latency_ms_p95": float(_p95(lat) * 1000) if len(lat) else None,
        "latency_ms_max": float(lat.max() * 1000) if len(lat) else None,
        "warnings": source.warnings,
        "interrupted": result.interrupted,
        "error": result.error,
    }


def _p95(x):
    import numpy as np

    return np.percentile(x, 95)


def _json_default(o):
    if hasattr(o, "item"):
        return o.item()
    raise TypeError(type(o).__name__)


def _print_summary(s: dict, echo) -> None:
    def f(v, nd=2):
        return (
            "-" if v is None or (isinstance(v, float) and not math.isfinite(v)) else f"{v:.{nd}f}"
        )

    if s["numerics"]:
        echo(f"\nresults ({s['seconds']} s; valid estimates vs the numerics {s['numerics']}):")
    else:
        echo(f"\nresults ({s['seconds']} s; no numerics record: no RMSE/MAE):")
    echo(
        f"  {'vital':6}{'valid':>8}{'RMSE win':>10}{'MAE win':>9}{'RMSE 1Hz':>10}{'MAE 1Hz':>9}"
        f"{'no ref':>8}"
    )
    for t, m in s["metrics"].items():
        echo(
            f"  {t:6}{m['valid']:>4}/{m['seconds']:<3}{f(m['rmse_window']):>10}"
            f"{f(m['mae_window']):>9}{f(m['rmse_1hz']):>10}{f(m['mae_1hz']):>9}"
            f"{m['no_ref_window']:>8}"
        )
    for t, g in s["gaps"].items():
        if g["short_gaps"] or g["long_gaps"]:
            echo(
                f"  gaps {t}: {g['short_gaps']} short, interpolated ({g['short_gap_s']:.1f} s); "
                f"{g['long_gaps']} long, model reset ({g['long_gap_s']:.1f} s)"
            )
    for t, o in s["out_of_range"].items():
        if o["samples"]:
            echo(
                f"  out of range {t}: {o['samples']} sample(s) beyond the model's input bound "
                f"(first at {o['first_s']:.3f} s), treated as gaps"
            )
    for msg, a in s["technical_alarms"].items():
        echo(
            f"  TECHNICAL ALARM {msg}: {a['episodes']} episode(s), {a['seconds']} s, first at "
            f"{a['first_s']} s (no valid estimate from that channel meanwhile)"
        )
    check = s.get("alarm_check") or {}
    for name, a in s["alarms"].items():
        c = check.get(name)
        echo(
            f"  alarm {name}: {a['episodes']} episode(s), active {a['active_s']} s"
            + (
                f"; vs the reference: {c['true_s']} s true, {c['false_s']} s false, "
                f"{c['missed_s']} s missed, {c['false_episodes']} false episode(s); vs the "
                f"same rule on the reference: {c['false_vs_ref_s']} s false, "
                f"{c['missed_vs_ref_s']} s missed"
                if c
                else ""
            )
        )
    rtf = s["real_time_factor"]
    echo(
        f"timing: {s['duration_s']:.1f} s of signal, {s['compute_s']:.3f} s compute -> "
        f"real-time factor {f(rtf, 4)}"
        + (f" ({1 / rtf:.0f}x real time)" if rtf else "")
        + f"; per-chunk (1 s) latency mean {f(s['latency_ms_mean'])} ms, p95 "
        f"{f(s['latency_ms_p95'])} ms; wall {s['wall_s']:.2f} s"
    )
