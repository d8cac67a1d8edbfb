"""``liquid-stream serve`` / ``stream-to``: the streaming server and a client that feeds it.

    liquid-stream serve                                   # the shipped models, 127.0.0.1:8765
    liquid-stream serve --kws my.onnx=spotter --vitals ward=hr.onnx,rr.onnx --port 9000
    liquid-stream serve --host 0.0.0.0 --token "$SECRET"  # beyond this machine: a token
    liquid-stream serve --lsl BioHarness                  # a live LSL stream as a bed
    liquid-stream stream-to ws://127.0.0.1:8765 --input talk.wav --fast
    liquid-stream stream-to ws://127.0.0.1:8765 --record data/bidmc/bidmc01 --alarm 'hr>120'
    liquid-stream stream-to ws://127.0.0.1:8765 --device pulse

``serve`` prints one line ``serving ws://HOST:PORT/stream (dashboard http://HOST:PORT/)``
once it listens (``--port 0`` picks a free port: read it there), then runs until Ctrl-C
or SIGTERM. ``stream-to`` prints each event as a line (``--json``: the server's JSON),
then a summary; ``scores`` events only with ``--scores``.

Only click is imported at module level; the rest inside the commands, torch never.
"""

from __future__ import annotations

import math
import sys

import click

TOKEN_ENV = "LIQUID_STREAM_TOKEN"


@click.command("serve")
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on. Anything beyond the loopback needs --token.",
)
@click.option(
    "--port",
    default=8765,
    show_default=True,
    type=click.IntRange(0, 65535),
    help="Port (0: a free one, printed).",
)
@click.option(
    "--kws",
    "kws",
    multiple=True,
    metavar="MODEL[=NAME]",
    help="Host a keyword spotter (a .onnx file or a shipped model's name) as NAME "
    "[default NAME: the file's stem]. Repeatable.",
)
@click.option(
    "--vitals",
    "vitals",
    multiple=True,
    metavar="NAME=MODEL,MODEL,...",
    help="Host a set of 1-3 vital-sign models (one per target, files or shipped "
    "names) as NAME. Repeatable. Without --kws / --vitals: kws-sc10 and the "
    "shipped vitals sets (vitals-ppg-ecg, vitals-ppg).",
)
@click.option(
    "--token",
    default=None,
    envvar=TOKEN_ENV,
    help=f"Shared token clients must give (or ${TOKEN_ENV}).",
)
@click.option(
    "--max-streams",
    default=4096,
    show_default=True,
    type=click.IntRange(1),
    help="Most open streams (an open beyond is refused: 'server full').",
)
@click.option(
    "--budget-ms",
    default=20.0,
    show_default=True,
    type=click.FloatRange(0),
    help="Longest a received block waits for its model step to start.",
)
@click.option(
    "--queue-blocks",
    default=256,
    show_default=True,
    type=click.IntRange(1),
    help="A stream's inbox bound in blocks (then blocks are dropped, or the client "
    "waits with overflow=wait).",
)
@click.option(
    "--queue-s",
    default=10.0,
    show_default=True,
    type=click.FloatRange(0, min_open=True),
    help="A stream's inbox bound in seconds of input.",
)
@click.option(
    "--out-queue",
    default=256,
    show_default=True,
    type=click.IntRange(1),
    help="A stream's outgoing bound before its oldest scores events are dropped.",
)
@click.option(
    "--threads",
    default=1,
    show_default=True,
    type=click.IntRange(1),
    help="onnxruntime intra-op threads per model (each model steps on its own worker thread).",
)
@click.option(
    "--workers",
    default=2,
    show_default=True,
    type=click.IntRange(1),
    help="Banks per model, each stepping its share of the streams on its own thread "
    "(onnxruntime releases the GIL, so 2 lets one model use two cores; measured on 2 "
    "cores: 550 beds held instead of 200, docs/serving.md).",
)
@click.option(
    "--max-batch",
    default=256,
    show_default=True,
    type=click.IntRange(1),
    help="Most streams one step of a bank takes (the longest waiting first).",
)
@click.option(
    "--bulk-ms",
    default=10.0,
    show_default=True,
    type=click.FloatRange(0, min_open=True),
    help="Bulk streams (files sent as fast as they go, overflow=wait) are stepped apart "
    "from the live ones, at most about this much model time (CPU ms) a step, so a live "
    "block, an open or a close waits behind at most one such step.",
)
@click.option(
    "--bulk-share",
    default=0.5,
    show_default=True,
    type=click.FloatRange(0, 1, min_open=True),
    help="While live streams are open, the most of one core's time the bulk steps of all "
    "banks take together (1: no pause between them).",
)
@click.option(
    "--open-timeout",
    default=10.0,
    show_default=True,
    type=click.FloatRange(0, min_open=True),
    help="Seconds a connection may take to open its stream; then it is told so and "
    "closed (code 1008), so idle connections cannot pile up.",
)
@click.option(
    "--ping-s",
    default=20.0,
    show_default=True,
    type=click.FloatRange(0, min_open=True),
    help="WebSocket keepalive: a ping every this many seconds; a client that does not "
    "answer within as long again is disconnected (code 1011).",
)
@click.option(
    "--stale-s",
    default=5.0,
    show_default=True,
    type=click.FloatRange(0, min_open=True),
    help="A connected stream that sends no samples for longer is shown as NO DATA in "
    "/api/state and on the dashboard (no valid value, its alarms replaced by a "
    "technical 'no data' alarm) until its next block.",
)
@click.option(
    "--lsl",
    "lsl",
    multiple=True,
    metavar="NAME",
    help="Also open a vitals stream fed by the live LSL stream NAME (channels "
    "mapped to PLETH / II / RESP; on the dashboard as lsl-NAME). Repeatable.",
)
@click.option("--lsl-alarm", default=None, help="Alarm rules of the --lsl beds ('hr>120').")
@click.option(
    "--lsl-timeout",
    default=5.0,
    show_default=True,
    type=click.FloatRange(0, min_open=True),
    help="Seconds to find an --lsl stream.",
)
def serve_cmd(
    host,
    port,
    kws,
    vitals,
    token,
    max_streams,
    budget_ms,
    queue_blocks,
    queue_s,
    out_queue,
    threads,
    workers,
    max_batch,
    bulk_ms,
    bulk_share,
    open_timeout,
    ping_s,
    stale_s,
    lsl,
    lsl_alarm,
    lsl_timeout,
) -> None:
    """Serve many live streams over WebSocket (ws://HOST:PORT/stream), each model's
    streams micro-batched into one onnxruntime call per step, with the live ward
    dashboard at http://HOST:PORT/ (protocol: docs/serving.md)."""
    import asyncio
    import signal

    from .server import (
        ServeError,
        StreamServer,
        check_token,
        default_hosts,
        kws_host,
        parse_kws_spec,
        parse_vitals_spec,
        vitals_host,
    )

    try:
        check_token(host, token)  # before loading any model: at once, not after ~10 s
        if kws or vitals:
            kws_specs = [parse_kws_spec(k) for k in kws] * workers
            vitals_specs = [parse_vitals_spec(v) for v in vitals] * workers
            hosts = [kws_host(p, n, threads) for p, n in kws_specs]
            hosts += [vitals_host(n, ps, threads, max_streams) for n, ps in vitals_specs]
        else:
            hosts = default_hosts(threads, max_streams, workers)
        server = StreamServer(
            hosts,
            host=host,
            port=port,
            token=token,
            max_streams=max_streams,
            budget_ms=budget_ms,
            queue_blocks=queue_blocks,
            queue_s=queue_s,
            out_queue=out_queue,
            out_hard=max(8192, out_queue),
            max_batch=max_batch,
            bulk_ms=bulk_ms,
            bulk_share=bulk_share,
            open_timeout_s=open_timeout,
            ping_s=ping_s,
            stale_s=stale_s,
        )
    except ValueError as e:  # ServeError, a model the banks refuse
        raise click.ClickException(str(e)) from None

    async def main():
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        try:
            await server.start()
        except OSError as e:
            raise click.ClickException(f"cannot listen on {host}:{port}: {e}") from None
        try:
            for name in lsl:
                try:
                    sid = await server.add_lsl(name, alarms=lsl_alarm, timeout=lsl_timeout)
                except ValueError as e:
                    raise click.ClickException(f"--lsl {name}: {e}") from None
                click.echo(f"LSL stream {name!r} -> bed {sid}", err=True)
            http = server.url.replace("ws://", "http://").removesuffix("/stream")
            models = ", ".join(f"{h.name} ({h.task})" for h in server.hosts.values())
            click.echo(f"serving {server.url} (dashboard {http}/) models: {models}")
            sys.stdout.flush()
            await stop.wait()
        finally:
            await server.stop()

    try:
        asyncio.run(main())
    except ServeError as e:
        raise click.ClickException(str(e)) from None


# ---------------------------------------------------------------------------- stream-to


def format_event(ev: dict) -> str | None:
    """One line for an event (None: not shown)."""
    kind = ev.get("type")
    t = ev.get("t")
    if kind == "estimate":
        parts = []
        for k, v in (ev.get("values") or {}).items():
            status = (ev.get("status") or {}).get(k, "ok" if ev["valid"].get(k) else "invalid")
            val = "--" if v is None or not math.isfinite(v) else f"{v:.1f}"
            parts.append(f"{k.upper()} {val} {ev.get('units', {}).get(k, '')} ({status})")
        line = f"{t:6d} s  " + "  ".join(parts)
        for name in ev.get("raised") or ():
            line += f"  ALARM {name}"
        for name in ev.get("cleared") or ():
            line += f"  cleared {name}"
        return line
    if kind == "detection":
        return f"{t:10.3f} s  {ev['label']}  {ev['score']:.2f}"
    if kind == "scores":
        best = max(ev["scores"].items(), key=lambda kv: kv[1], default=("-", 0.0))
        return f"{t:10.3f} s  scores: top {best[0]} {best[1]:.2f}"
    if kind == "dropped":
        return f"server dropped {ev['blocks']} block(s) ({ev['total_blocks']} in all)"
    if kind == "error":
        return f"error: {ev.get('message')}"
    return None


@click.command("stream-to")
@click.argument("url", default="ws://127.0.0.1:8765/stream")
@click.option(
    "--input",
    "wav",
    default=None,
    type=click.Path(dir_okay=False),
    help="Stream a WAV file (channel 0) to a keyword spotter.",
)
@click.option(
    "--record",
    default=None,
    help="Stream a WFDB record (path without extension; all its channels) to vital-sign models.",
)
@click.option(
    "--device",
    default=None,
    help="Stream a microphone (PortAudio index or part of its name) to a keyword "
    "spotter, until Ctrl-C.",
)
@click.option(
    "--model",
    default=None,
    help="The hosted model's name [default: the server's first kws model; for a "
    "record the vitals set that fits its channels best].",
)
@click.option("--id", "stream_id", default=None, help="The stream's id (e.g. bed-3).")
@click.option("--token", default=None, envvar=TOKEN_ENV, help="The server's token.")
@click.option("--alarm", "alarms", default=None, help="Alarm rules of a record ('hr>120').")
@click.option(
    "--realtime/--fast",
    default=True,
    show_default=True,
    help="Send a file paced in real time, or as fast as the server takes it "
    "(--fast: nothing is dropped, the server makes the client wait).",
)
@click.option(
    "--block-ms",
    default=None,
    type=click.FloatRange(0, min_open=True),
    help="Block length [default: 100 ms for audio, 1000 ms for a record].",
)
@click.option("--scores", is_flag=True, help="Print the scores events too.")
@click.option("--json", "as_json", is_flag=True, help="Print the server's messages as JSON.")
def stream_to_cmd(
    url, wav, record, device, model, stream_id, token, alarms, realtime, block_ms, scores, as_json
) -> None:
    """Stream a WAV file (--input), a WFDB record (--record) or a microphone (--device) to
    a `liquid-stream serve` at URL and print the events it sends back."""
    import json
    import time

    from .client import ServeClient, ServeClientError

    if sum(x is not None for x in (wav, record, device)) != 1:
        raise click.UsageError("give exactly one of --input, --record, --device")
    counts: dict[str, int] = {}

    def show(ev: dict) -> None:
        kind = ev.get("type", "")
        counts[kind] = counts.get(kind, 0) + 1
        if kind == "scores" and not scores:
            return
        line = json.dumps(ev) if as_json else format_event(ev)
        if line:
            click.echo(line)

    try:
        if record is not None:
            from ..vitals.model import VitalsError
            from ..vitals.record import RecordSource

            try:
                src = RecordSource(record)
            except VitalsError as e:
                raise click.ClickException(str(e)) from None
            for w in src.warnings:
                click.echo(f"warning: {w}", err=True)
            block_s = (block_ms or 1000.0) / 1000
            blocks = src.chunks(1.0 if realtime else None, block_s)
            rate, channels, kind = src.fs, src.channels, model or "vitals"
            source = None
        else:
            from ..common.audio import AudioError, MicSource, WavSource

            try:
                if wav is not None:
                    source = WavSource(wav, block_ms=block_ms or 100.0, realtime=realtime)
                else:
                    dev = int(device) if device.isdigit() else device
                    source = MicSource(dev, prefer_rate=16000, block_ms=block_ms or 100.0)
                    source.__enter__()
            except AudioError as e:
                raise click.ClickException(str(e)) from None
            blocks = source.blocks()
            rate, channels, kind, alarms = source.rate, None, model or "kws", None
        overflow = "drop" if (device is not None or realtime) else "wait"
        t0 = time.perf_counter()
        sent = 0.0
        with ServeClient(url, token=token, stream_id=stream_id) as c:
            opened = c.open(
                kind, sample_rate=rate, channels=channels, alarms=alarms, overflow=overflow
            )
            click.echo(
                f"stream {opened['id']} -> {opened['model']} ({opened['task']}, "
                f"{rate:g} Hz{', ' + ', '.join(channels) if channels else ''})",
                err=True,
            )
            try:
                for block in blocks:
                    c.send(block)
                    sent += len(block) / rate
                    for ev in c.drain():
                        show(ev)
            except KeyboardInterrupt:
                pass
            finally:
                if device is not None:
                    source.__exit__(None, None, None)
            for ev in c.close():
                show(ev)
            stats = (c.closed or {}).get("stats", {})
    except (ServeClientError, ValueError) as e:  # the server ended it; a file went bad
        raise click.ClickException(str(e)) from None
    wall = time.perf_counter() - t0
    summary = ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "no events"
    click.echo(
        f"sent {sent:.1f} s in {wall:.1f} s; received {summary}; server dropped "
        f"{stats.get('dropped_blocks', 0)} block(s), {stats.get('errors', 0)} error(s)",
        err=True,
    )
