"""Live biosignals over Lab Streaming Layer (LSL): read a device's stream, publish
vital-sign estimates, and replay a WFDB record as a live stream (pylsl, whose wheel bundles
liblsl; no torch).

    reader = LslReader("BioHarness", timeout=5.0)   # resolve the stream by name, open an inlet
    reader.channels, reader.rate                    # ["PLETH", "II"] (mapped labels), 250.0
    x = reader.pull()                               # (T, C) float64, non-blocking; T may be 0
    reader.close()

    pub = LslPublisher("vitals", ["hr", "rr"], {"hr": "bpm", "rr": "breaths/min"})
    pub.push({"hr": 72.4, "rr": math.nan}, timestamp)          # one sample per estimate

    replay_record("data/bidmc01", name="bidmc01", speed=10)     # a record as a live outlet

**Keeping LSL on this machine.** liblsl reads its configuration once, when it is first
used, from the file the environment variable ``LSLAPICFG`` names (else ``./lsl_api.cfg``,
``~/lsl_api/lsl_api.cfg``, ``/etc/lsl_api/lsl_api.cfg``). When ``LSLAPICFG`` is not set,
:func:`ensure_config` (called before this module first imports pylsl) writes
:data:`LOCAL_CONFIG` to ``~/.cache/liquid-stream/lsl_api.cfg`` and points ``LSLAPICFG`` at
it: ``[ports] IPv6 = disable``, ``[multicast] ResolveScope = machine`` (discovery queries
go to 127.0.0.1 only), ``[lab] KnownPeers = {127.0.0.1}``, ``[log] level = -2`` (errors
only). Streams of other programs on this machine are found; streams of other machines are
not, and nothing is sent to another address. To read a device on the network, set
``LSLAPICFG`` to your own config (e.g. ``ResolveScope = site``, or ``KnownPeers =
{the device's address}``) before starting; docs/lsl.md. An outlet's data and time servers
listen on every interface (liblsl has no setting for their bind address): a firewall
decides who may connect.

**Channel labels.** An inlet's channels are named by the stream description's
``channels/channel/label`` entries (the XDF convention; ``name`` is read when there is no
``label``), or by ``labels=`` for a stream without them. Each label is mapped to the
models' vocabulary by :func:`liquid_stream.io.bidmc_vocab.signal_channel` (``PPG`` -> PLETH,
``ECG`` / ``ECG II`` -> II, ``Resp`` -> RESP, ...); :class:`LslReader` keeps the mapped
columns (in stream order) and ignores the others. Two labels of one channel: the one
spelled like the channel (``PLETH``) wins, else the first. A stream with no mapped
channel, an irregular rate (nominal rate 0) or string samples is refused with a one-line
:class:`LslError` naming what it has.

**End of a stream.** A live stream has no end: the reader runs until its source
disappears (:attr:`LslReader.lost`) or its caller stops. A replayed record announces its
length in its description (``replay/samples``, :attr:`LslReader.total_samples`); the reader
ends after that many samples, and the replay keeps its outlet open after the last sample
until its consumers have left (at most ``linger_s``), so a consumer gets every sample.
Samples are pushed as float64 (``cf_double64``): the values read equal the record's.
"""

from __future__ import annotations

import math
import os
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .bidmc_vocab import SIGNALS, label_key, signal_channel, strip_name

CONFIG_ENV = "LSLAPICFG"
# liblsl's INI syntax (liblsl src/api_config.cpp): ResolveScope is a [multicast] key, sets
# are written {a, b}.
LOCAL_CONFIG = """\
[ports]
IPv6 = disable

[multicast]
ResolveScope = machine

[lab]
KnownPeers = {127.0.0.1}

[log]
level = -2
"""
# Estimate channels of a published vitals stream: target -> label (not "RESP": that is the
# respiration waveform's label).
ESTIMATE_LABELS = {"hr": "HR", "rr": "RR", "spo2": "SpO2"}
DEFAULT_TIMEOUT_S = 5.0
_PULL_CHUNK = 4096  # samples per pull_chunk call (a pull drains all that arrived)
_config_lock = threading.Lock()
_written: Path | None = None  # the config ensure_config wrote and pointed LSLAPICFG at


class LslError(RuntimeError):
    """A stream that cannot be found or used, or a replay that cannot start (one line)."""


# ------------------------------------------------------------------------ configuration


def local_config_path() -> Path:
    """Where :func:`ensure_config` writes :data:`LOCAL_CONFIG`:
    ``$XDG_CACHE_HOME/liquid-stream/lsl_api.cfg`` (default ``~/.cache/...``)."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "liquid-stream" / "lsl_api.cfg"


def write_config(path: str | Path, content: str = LOCAL_CONFIG) -> Path:
    """Write an LSL api config ``content`` to ``path`` (atomically; unchanged if equal)."""
    from .atomic import atomic_path

    path = Path(path)
    if path.is_file() and path.read_text() == content:
        return path
    with atomic_path(path) as tmp:
        tmp.write_text(content)
    return path


def ensure_config() -> Path:
    """The LSL config liblsl will read: ``$LSLAPICFG`` when the user set it, else
    :data:`LOCAL_CONFIG` written to :func:`local_config_path` (a private temporary folder
    when that cannot be written) with ``LSLAPICFG`` pointed at it. Effective only before
    liblsl's first use in this process (liblsl reads its config once)."""
    global _written
    with _config_lock:
        user = os.environ.get(CONFIG_ENV)
        if user:
            return Path(user)
        try:
            path = write_config(local_config_path())
        except OSError:
            path = write_config(Path(tempfile.mkdtemp(prefix="liquid-stream-lsl-")) / "lsl_api.cfg")
        os.environ[CONFIG_ENV] = str(path)
        _written = path
        return path


def _pylsl():
    """pylsl, imported after :func:`ensure_config` (liblsl then reads that config)."""
    ensure_config()
    import pylsl

    return pylsl


def _scope_note() -> str:
    cfg = os.environ.get(CONFIG_ENV, "")
    if _written is not None and cfg == str(_written):
        return f"LSL looks on this machine only: LSLAPICFG={cfg}, see docs/lsl.md"
    return f"LSL config: LSLAPICFG={cfg}"


# ----------------------------------------------------------------------- channel labels


def stream_labels(info) -> list[str]:
    """The channel labels of a stream's full description (``channels/channel/label``, else
    ``name``), one per channel ("" where none)."""
    return _channel_field(info, ("label", "name"))


def stream_units(info) -> list[str]:
    """The channel units of a stream's full description (``channels/channel/unit``)."""
    return _channel_field(info, ("unit", "units"))


def _channel_field(info, keys: tuple[str, ...]) -> list[str]:
    out: list[str] = []
    ch = info.desc().child("channels").child("channel")
    while not ch.empty() and len(out) < info.channel_count():
        out.append(next((v for k in keys if (v := ch.child_value(k).strip())), ""))
        ch = ch.next_sibling()
    return out + [""] * (info.channel_count() - len(out))


def map_labels(labels: Sequence[str]) -> dict[int, str]:
    """``{column: channel}`` for the labels naming one of :data:`SIGNALS` (in column order):
    ``["PPG", "ECG", "EEG"]`` -> ``{0: "PLETH", 1: "II"}``. A channel named twice takes the
    label spelled like the channel (``"PLETH"`` before ``"PPG"``), else the first."""
    chosen: dict[str, int] = {}
    for i, label in enumerate(labels):
        ch = signal_channel(label) if label else None
        if ch is None:
            continue
        exact = label_key(label) == label_key(ch)
        if ch not in chosen or (exact and label_key(labels[chosen[ch]]) != label_key(ch)):
            chosen[ch] = i
    return {i: ch for ch, i in sorted(chosen.items(), key=lambda kv: kv[1])}


# ------------------------------------------------------------------------------ reading


def resolve(name: str, timeout: float = DEFAULT_TIMEOUT_S):
    """``(pylsl.StreamInfo, how many were found)`` of the stream named ``name`` (the first
    found within ``timeout`` seconds); :class:`LslError` naming the streams seen when there
    is none."""
    lsl = _pylsl()
    found = lsl.resolve_byprop("name", name, 1, float(timeout))
    if found:
        return found[0], len(found)
    seen = sorted({i.name() for i in lsl.resolve_streams(min(1.0, float(timeout)))})
    raise LslError(
        f"no LSL stream named {name!r} found within {timeout:g} s ("
        + (f"streams seen: {', '.join(map(repr, seen))}" if seen else "no LSL stream seen")
        + f"; {_scope_note()})"
    )


class LslReader:
    """A live LSL stream of biosignals, its channels mapped to PLETH / II / RESP.

    Args:
        name: the stream's name (``StreamInfo.name``), resolved within ``timeout`` seconds.
        timeout: seconds to find the stream and open its inlet.
        labels: one label per stream channel, for a stream whose description has none (or
            to override it).
        max_buffer_s: seconds of samples the inlet holds between two pulls (older ones are
            dropped by liblsl).

    Attributes: ``name``, ``rate`` (nominal, Hz), ``channels`` (the mapped channels, in
    stream order), ``labels`` (their labels in the stream), ``stream_labels`` (every
    channel's label), ``units`` (channel -> unit, "" if none), ``ignored`` (labels of the
    channels not used), ``total_samples`` (a replayed record's length; None for a live
    stream), ``samples_read``, ``lost``, ``warnings``, ``hostname``, ``source_id``.
    """

    def __init__(
        self,
        name: str,
        timeout: float = DEFAULT_TIMEOUT_S,
        labels: Sequence[str] | None = None,
        max_buffer_s: float = 360.0,
    ):
        lsl = _pylsl()
        self.name = name
        self.warnings: list[str] = []
        self.lost = False
        self.samples_read = 0
        self._inlet = None
        info, n_found = resolve(name, timeout)
        if n_found > 1:
            self.warnings.append(
                f"{n_found} LSL streams are named {name!r}: reading the one of "
                f"{info.hostname()} (source id {info.source_id() or 'none'})"
            )
        self.hostname, self.source_id = info.hostname(), info.source_id()
        n = info.channel_count()
        if info.channel_format() == lsl.cf_string:
            raise LslError(f"LSL stream {name!r} carries strings (a marker stream), not samples")
        self.rate = float(info.nominal_srate())
        if not (self.rate > 0 and math.isfinite(self.rate)):
            raise LslError(
                f"LSL stream {name!r} has an irregular rate (nominal rate 0): the vital-sign "
                "monitor needs a stream with a nominal sampling rate"
            )
        inlet = lsl.StreamInlet(
            info,
            max_buflen=max(1, int(math.ceil(max_buffer_s))),
            recover=False,
            processing_flags=lsl.proc_clocksync,
        )
        try:
            full = inlet.info(float(timeout))
            if labels is not None:
                labels = [str(x) for x in labels]
                if len(labels) != n:
                    raise LslError(
                        f"{len(labels)} label(s) given for LSL stream {name!r}, which has {n} "
                        "channel(s)"
                    )
                self.stream_labels = labels
            else:
                self.stream_labels = stream_labels(full)
            units = stream_units(full)
            mapping = map_labels(self.stream_labels)
            if not mapping:
                what = (
                    f"its {n} channel(s) are labelled "
                    + ", ".join(repr(x) for x in self.stream_labels)
                    if any(self.stream_labels)
                    else f"its {n} channel(s) have no labels in its description "
                    "(name them with labels=... / --lsl-labels)"
                )
                raise LslError(
                    f"LSL stream {name!r} has no channel the vital-sign models read "
                    f"({' / '.join(SIGNALS)}, or PPG, ECG, Resp ...): {what}"
                )
            self.columns = list(mapping)
            self.channels = list(mapping.values())
            self.labels = [self.stream_labels[i] for i in self.columns]
            self.units = {ch: units[i] for i, ch in mapping.items()}
            self.ignored = [x for i, x in enumerate(self.stream_labels) if i not in mapping]
            for i, ch in mapping.items():
                others = [
                    x
                    for j, x in enumerate(self.stream_labels)
                    if j != i and x and signal_channel(x) == ch
                ]
                if others:
                    self.warnings.append(
                        f"channel {ch}: using {self.stream_labels[i]!r}, not "
                        + ", ".join(map(repr, others))
                    )
            self.total_samples = _int_or_none(full.desc().child("replay").child_value("samples"))
            inlet.open_stream(float(timeout))
        except LslError:
            inlet.close_stream()
            raise
        except (lsl.util.TimeoutError, lsl.util.LostError) as e:
            inlet.close_stream()
            raise LslError(f"LSL stream {name!r} could not be opened: {e}") from None
        self._inlet = inlet
        self._lsl = lsl

    @property
    def ended(self) -> bool:
        """The source is gone, or a replayed record's samples have all been read."""
        total = self.total_samples
        return self.lost or (total is not None and self.samples_read >= total)

    def pull(self) -> np.ndarray:
        """The samples that have arrived since the last pull: ``(T, C)`` float64 of
        :attr:`channels`; non-blocking (T = 0 when none)."""
        return self.pull_with_timestamps()[0]

    def pull_with_timestamps(self) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`pull` and the samples' LSL timestamps ``(T,)`` (this machine's
        ``local_clock``, clock offsets corrected)."""
        xs: list[np.ndarray] = []
        tss: list[np.ndarray] = []
        while self._inlet is not None and not self.ended:
            try:
                s, ts = self._inlet.pull_chunk(timeout=0.0, max_samples=_PULL_CHUNK, as_numpy=True)
            except self._lsl.util.LostError:
                self.lost = True
                break
            ts = np.asarray(ts, dtype=np.float64)
            if not len(ts):
                break
            x = np.asarray(s, dtype=np.float64).reshape(len(ts), -1)[:, self.columns]
            if self.total_samples is not None:  # a replayed record ends at its length
                keep = max(0, self.total_samples - self.samples_read)
                x, ts = x[:keep], ts[:keep]
            xs.append(x)
            tss.append(ts)
            self.samples_read += len(ts)
            if len(ts) < _PULL_CHUNK:
                break
        if not xs:
            return np.zeros((0, len(self.channels))), np.zeros(0)
        return np.concatenate(xs), np.concatenate(tss)

    def close(self) -> None:
        """Close the inlet (idempotent); the source sees one consumer fewer."""
        if self._inlet is not None:
            self._inlet.close_stream()
            self._inlet = None

    def __enter__(self) -> LslReader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def describe(self) -> str:
        """``'bidmc01' at 125 Hz: PLETH <- 'PPG', II <- 'ECG'; ignored: 'V'``."""
        used = ", ".join(
            ch if label_key(lab) == label_key(ch) else f"{ch} <- {lab!r}"
            for ch, lab in zip(self.channels, self.labels, strict=True)
        )
        ign = f"; ignored: {', '.join(map(repr, self.ignored))}" if self.ignored else ""
        return f"{self.name!r} at {self.rate:g} Hz: {used}{ign}"


def _int_or_none(text: str) -> int | None:
    try:
        v = int(text)
    except (TypeError, ValueError):
        return None
    return v if v >= 0 else None


def open_inlet(name: str, timeout: float = DEFAULT_TIMEOUT_S):
    """A plain ``pylsl.StreamInlet`` on the stream ``name`` (opened, ``recover=False``) and
    its full ``StreamInfo``: for streams that are not biosignals (e.g. published estimates)."""
    lsl = _pylsl()
    info, _ = resolve(name, timeout)
    inlet = lsl.StreamInlet(info, recover=False)
    try:
        full = inlet.info(float(timeout))
        inlet.open_stream(float(timeout))
    except (lsl.util.TimeoutError, lsl.util.LostError) as e:
        inlet.close_stream()
        raise LslError(f"LSL stream {name!r} could not be opened: {e}") from None
    return inlet, full


# ----------------------------------------------------------------------------- publishing


class LslPublisher:
    """An LSL outlet of vital-sign estimates: one channel per target (float64, nominal rate
    1 Hz: one sample per second of the monitored stream), labelled ``HR`` / ``RR`` /
    ``SpO2`` with their units in the description; NaN where there is no valid estimate.

    Args:
        name: the outlet's stream name.
        targets: ``["hr", "rr"]``: the channels, in this order.
        units: target -> unit (``"bpm"``).
        source: the monitored stream's name (written to ``desc/source``).
        info: further ``desc/liquid_stream`` entries (e.g. the models' file names).
        stream_type: the stream's content type.
    """

    def __init__(
        self,
        name: str,
        targets: Sequence[str],
        units: Mapping[str, str],
        source: str | None = None,
        info: Mapping[str, str] | None = None,
        stream_type: str = "Vitals",
    ):
        lsl = _pylsl()
        self.name, self.targets = name, list(targets)
        if not self.targets:
            raise LslError("an estimate stream needs at least one target")
        si = lsl.StreamInfo(
            name, stream_type, len(self.targets), 1.0, lsl.cf_double64, f"liquid-stream:{name}"
        )
        desc = si.desc()
        chans = desc.append_child("channels")
        for t in self.targets:
            c = chans.append_child("channel")
            c.append_child_value("label", ESTIMATE_LABELS.get(t, t.upper()))
            c.append_child_value("unit", units.get(t, ""))
            c.append_child_value("type", t)
        meta = desc.append_child("liquid_stream")
        meta.append_child_value("invalid", "NaN: no valid estimate (warm-up, gap, bridged gap)")
        if source:
            desc.append_child_value("source", source)
        for k, v in (info or {}).items():
            meta.append_child_value(k, str(v))
        self._outlet = lsl.StreamOutlet(si)
        self._lsl = lsl
        self.samples = 0

    def push(self, values: Mapping[str, float], timestamp: float | None = None) -> None:
        """One sample: ``values[target]`` for each target (a missing one is NaN), stamped
        ``timestamp`` (LSL ``local_clock`` seconds; None: now)."""
        row = [float(values.get(t, math.nan)) for t in self.targets]
        self._outlet.push_sample(row, 0.0 if timestamp is None else float(timestamp))
        self.samples += 1

    def have_consumers(self) -> bool:
        return self._outlet is not None and self._outlet.have_consumers()

    def wait_for_consumers(self, timeout: float) -> bool:
        """True once an inlet is connected (False after ``timeout`` seconds)."""
        return self._outlet.wait_for_consumers(float(timeout))

    def close(self) -> None:
        """Remove the outlet (idempotent); its consumers see the stream end."""
        self._outlet = None

    def __enter__(self) -> LslPublisher:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# ------------------------------------------------------------------------------- replay


@dataclass
class ReplayReport:
    """What :func:`replay_record` published."""

    name: str  # the outlet's stream name
    record: str
    fs: float
    labels: list[str]  # the published channel labels
    samples: int = 0  # samples pushed (all loops)
    loops: int = 0  # complete passes over the record
    wall_s: float = 0.0
    stopped: bool = False  # ended by ``stop`` (not by the record's end)
    warnings: list[str] = field(default_factory=list)


def read_replay_record(record: str | Path):
    """``(name, fs, labels, units, signal (T, C) float64)`` of a WFDB record, every
    channel (names without BIDMC's trailing comma); a truncated signal file is read as far
    as it goes. :class:`~liquid_stream.io.wfdb.WfdbError` when it cannot be read."""
    from .wfdb import WfdbError, complete_samples, read_header, read_record, record_path

    path = record_path(record)
    header = read_header(path)
    if not header.n_sig or not header.fs:
        raise WfdbError(f"{path.with_name(path.name + '.hea')} describes no signals")
    n = complete_samples(path, header)
    if n == 0:
        raise WfdbError(f"record {path.name}: no complete samples in its signal file(s)")
    rec = read_record(path, sampto=n)
    sig = np.asarray(rec.p_signal, dtype=np.float64).reshape(-1, header.n_sig)
    labels = [strip_name(c) for c in header.sig_name]
    units = [str(u or "") for u in (header.units or [""] * header.n_sig)]
    return path.name, float(header.fs), labels, units, sig


def replay_record(
    record: str | Path,
    name: str | None = None,
    speed: float | None = 1.0,
    loop: bool = False,
    rename: Mapping[str, str] | None = None,
    wait_for_consumer: float | None = None,
    linger_s: float = 10.0,
    chunk_s: float = 0.04,
    stop: threading.Event | None = None,
    on_ready: Callable[[ReplayReport], None] | None = None,
) -> ReplayReport:
    """Publish WFDB ``record`` as a live LSL outlet at its own rate, paced in real time.

    Args:
        record: path without extension (``data/bidmc01``).
        name: the stream name (default: the record's name).
        speed: times real time (2: twice as fast); None: as fast as possible. Sample i is
            stamped ``t0 + i / (fs * speed)`` (``t0``: the first push); chunks of
            ``chunk_s`` seconds of signal are pushed when their last sample is due.
        loop: start over at the end, until ``stop`` is set (the length is then not
            announced).
        rename: ``{"PLETH": "PPG"}``: publish these channels under other labels (as a
            device that names them so would).
        wait_for_consumer: seconds to wait for the first inlet before pushing (None: push at
            once; a consumer connecting later misses the start). :class:`LslError` when
            none came.
        linger_s: after the last sample, keep the outlet while consumers are connected, at
            most this long (they pull the tail).
        stop: set it (from another thread) to end the replay early.
        on_ready: called with the report once the outlet exists (before waiting).

    The description holds the channel labels and units (``channels/channel/label``,
    ``unit``) and ``replay/record``, ``replay/samples`` (the length, without ``loop``).
    """
    if speed is not None and not (speed > 0 and math.isfinite(speed)):
        raise LslError(f"speed must be > 0 (or None: as fast as possible), got {speed}")
    rec_name, fs, labels, units, sig = read_replay_record(record)
    rename = dict(rename or {})
    unknown = [k for k in rename if strip_name(k) not in labels]
    if unknown:
        raise LslError(
            f"record {rec_name} has no channel {unknown[0]!r} to rename (it has: "
            f"{', '.join(labels)})"
        )
    rename = {strip_name(k): v for k, v in rename.items()}
    out_labels = [rename.get(c, c) for c in labels]
    report = ReplayReport(name or rec_name, rec_name, fs, out_labels)
    lsl = _pylsl()
    si = lsl.StreamInfo(
        report.name, "Physio", sig.shape[1], fs, lsl.cf_double64, f"liquid-stream:replay:{rec_name}"
    )
    chans = si.desc().append_child("channels")
    for lab, unit in zip(out_labels, units, strict=True):
        c = chans.append_child("channel")
        c.append_child_value("label", lab)
        c.append_child_value("unit", unit)
        c.append_child_value("type", signal_channel(lab) or "")
    rep = si.desc().append_child("replay")
    rep.append_child_value("record", rec_name)
    if not loop:
        rep.append_child_value("samples", str(len(sig)))
    outlet = lsl.StreamOutlet(si)
    stop = stop or threading.Event()
    t_start = time.perf_counter()
    try:
        if on_ready is not None:
            on_ready(report)
        if wait_for_consumer is not None and not _wait(outlet, wait_for_consumer, stop):
            if stop.is_set():
                report.stopped = True
                return report
            raise LslError(
                f"no consumer connected to LSL stream {report.name!r} within "
                f"{wait_for_consumer:g} s"
            )
        step = max(1, int(round(chunk_s * fs)))
        rate = fs * (speed or 1.0)
        t0 = lsl.local_clock()
        while not stop.is_set():
            for a in range(0, len(sig), step):
                b = min(len(sig), a + step)
                i = report.samples + np.arange(b - a)
                stamps = t0 + i / rate
                if stop.is_set() or (speed is not None and not _sleep_until(lsl, stamps[-1], stop)):
                    break
                outlet.push_chunk(sig[a:b], timestamp=stamps)
                report.samples += b - a
            else:
                report.loops += 1
                if loop:
                    continue
            break
        report.stopped = stop.is_set()
        deadline = time.monotonic() + linger_s
        while outlet.have_consumers() and time.monotonic() < deadline and not stop.is_set():
            time.sleep(0.02)
    finally:
        del outlet
        report.wall_s = time.perf_counter() - t_start
    return report


def _wait(outlet, timeout: float, stop: threading.Event) -> bool:
    """Wait (in short steps, so ``stop`` is seen) for the outlet's first consumer."""
    deadline = time.monotonic() + timeout
    while not stop.is_set():
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        if outlet.wait_for_consumers(min(0.1, left)):
            return True
    return False


def _sleep_until(lsl, when: float, stop: threading.Event) -> bool:
    """Sleep until ``local_clock() >= when`` (False if ``stop`` was set meanwhile)."""
    while True:
        left = when - lsl.local_clock()
        if left <= 0:
            return not stop.is_set()
        if stop.wait(min(left, 0.1)):
            return False
