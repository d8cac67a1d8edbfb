"""Hosted models: the named banks a :class:`~.server.StreamServer` serves (``--kws``,
``--vitals``, the shipped defaults) and the sample rate a vital-sign channel needs."""

from __future__ import annotations

import asyncio
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .defaults import QRS_TOP_HZ, ServeError

if TYPE_CHECKING:
    from .protocol import _Stream


@dataclass
class HostedModel:
    """One named bank the server hosts.

    ``task`` is ``"kws"`` or ``"vitals"``; ``channels`` the input channels a stream of
    it may send (vitals: every channel one of its models reads; kws: ``["audio"]``);
    ``needs`` (vitals) the channels of each model; ``sample_rate`` the models' rate."""

    name: str
    task: str
    bank: object
    paths: list[Path]
    sample_rate: float
    channels: list[str]
    needs: list[list[str]] = field(default_factory=list)

    def __post_init__(self):
        self.executor = ThreadPoolExecutor(1, thread_name_prefix=f"bank-{self.name}")
        self.streams: dict[str, _Stream] = {}  # open streams of this bank
        self.pending: dict[_Stream, None] = {}  # live streams with input waiting (ordered set)
        self.bulk: dict[_Stream, None] = {}  # bulk streams with input waiting (round robin)
        self.live = 0  # open live streams of this bank (the others are bulk)
        self.wake = asyncio.Event()  # the batcher has something new to decide on
        self.bulk_cost = 0.0  # CPU s of a bulk step per input s (running mean; 0: unknown)
        self.stats = _HostStats()
        self.opening = 0  # streams being opened on this bank

    def describe(self) -> dict:
        """What ``/api/state`` and the open reply say about this model."""
        return {
            "name": self.name,
            "task": self.task,
            "files": [p.name for p in self.paths],
            "sample_rate": self.sample_rate,
            "channels": list(self.channels),
            "streams": len(self.streams),
        }

    def fits(self, channels: list[str]) -> tuple[int, int]:
        """How well a stream with ``channels`` fits (vitals): (2 every model of the set
        runs, 1 some do, 0 none; then the number of the stream's channels they read)."""
        have = {c.upper().rstrip(",").strip() for c in channels}
        ok = [set(c.upper() for c in need) <= have for need in self.needs]
        used = {c.upper() for need, fit in zip(self.needs, ok, strict=True) if fit for c in need}
        return (2 if ok and all(ok) else int(any(ok))), len(used)


class _HostStats:
    """Timing of one bank's steps: where the time goes (``/api/state`` server.hosts)."""

    def __init__(self):
        self.steps = 0
        self.blocks = 0
        self.bulk_steps = 0  # steps of bulk streams (overflow "wait"), counted in steps too
        self.bulk_s = 0.0  # input seconds those steps carried
        self.bulk_cpu_s = 0.0  # CPU seconds (push + step) they took
        self.push_s = 0.0  # CPU seconds (thread time) of pushing input into the bank
        self.step_s = 0.0  # of bank.step (session calls + per-stream python)
        self.route_s = 0.0  # of routing the events (JSON encoding included), loop thread
        self.step_wall_s = 0.0
        self.latency = deque(maxlen=4096)  # live blocks: s from arrival to events routed
        self.batch = deque(maxlen=256)  # streams per step

    def to_json(self) -> dict:
        lat = np.array(self.latency) * 1000 if self.latency else np.zeros(1)
        n = max(1, self.steps)
        return {
            "steps": self.steps,
            "blocks": self.blocks,
            "bulk": {
                "steps": self.bulk_steps,
                "input_s": self.bulk_s,
                "cpu_s": self.bulk_cpu_s,
                "cpu_ms_per_step": 1000 * self.bulk_cpu_s / max(1, self.bulk_steps),
            },
            "cpu_s": {"push": self.push_s, "step": self.step_s, "route": self.route_s},
            "push_ms_per_step": 1000 * self.push_s / n,
            "step_ms_per_step": 1000 * self.step_s / n,
            "step_wall_ms_per_step": 1000 * self.step_wall_s / n,
            "route_ms_per_step": 1000 * self.route_s / n,
            "streams_per_step": float(np.mean(self.batch)) if self.batch else 0.0,
            "block_latency_ms": {
                "p50": float(np.percentile(lat, 50)),
                "p95": float(np.percentile(lat, 95)),
                "max": float(lat.max()),
            },
        }


# ------------------------------------------------------------------------------ hosts


def kws_host(
    path: str | Path,
    name: str | None = None,
    threads: int = 1,
    max_streams: int = 256,
    threshold: float | None = None,
) -> HostedModel:
    """Host the keyword spotter ``path`` as ``name`` (default: the file's stem)."""
    from liquid_stream.apps.batch import KwsBank

    path = Path(path)
    bank = KwsBank(path, threshold=threshold, threads=threads, max_streams=max_streams)
    return HostedModel(name or path.stem, "kws", bank, [path], float(bank.sample_rate), ["audio"])


def vitals_host(name: str, paths, threads: int = 1, max_streams: int = 2048) -> HostedModel:
    """Host the vital-sign model set ``paths`` (1..3 models, one per target) as ``name``."""
    from liquid_stream.apps.batch import VitalsBank

    paths = [Path(p) for p in paths]
    bank = VitalsBank(paths, threads=threads, max_streams=max_streams)
    needs = [list(m.channels) for m in bank.models]
    channels = list(dict.fromkeys(c for n in needs for c in n))
    return HostedModel(name, "vitals", bank, paths, float(bank.sample_rate), channels, needs)


def default_hosts(threads: int = 1, max_streams: int = 2048, workers: int = 1) -> list[HostedModel]:
    """The shipped models: the spotter ``kws-sc10`` and each shipped vital-sign set
    (``vitals-ppg-ecg``, ``vitals-ppg``; :data:`liquid_stream.models.VITALS_TARGETS`),
    ``workers`` banks each."""
    from liquid_stream.models import KWS, VITALS_TARGETS, available, shipped

    have = set(available())
    hosts = []
    for _ in range(workers):
        if KWS in have:
            hosts.append(kws_host(shipped(KWS), KWS, threads, min(max_streams, 1024)))
        for name, targets in VITALS_TARGETS.items():
            if all(t in have for t in targets):
                paths = [shipped(t) for t in targets]
                hosts.append(vitals_host(f"vitals-{name}", paths, threads, max_streams))
    if not hosts:
        raise ServeError("no shipped models installed: give --kws / --vitals")
    return hosts


def parse_kws_spec(spec: str) -> tuple[Path, str | None]:
    """``PATH[=NAME]`` (or a shipped model's name) -> (path, name)."""
    path, _, name = spec.partition("=")
    return _model_path(path), (name or None)


def parse_vitals_spec(spec: str) -> tuple[str, list[Path]]:
    """``NAME=PATH,PATH,...`` (a path may be a shipped model's name) -> (name, paths)."""
    name, sep, rest = spec.partition("=")
    if not sep or not name or not rest:
        raise ServeError(f"--vitals takes NAME=MODEL,MODEL,..., got {spec!r}")
    return name, [_model_path(p) for p in rest.split(",") if p]


def _model_path(spec: str) -> Path:
    from liquid_stream.models import available, shipped

    p = Path(spec)
    if p.is_file():
        return p
    if spec in available():
        return shipped(spec)
    raise ServeError(
        f"model {spec!r} is neither a file nor a shipped model ({', '.join(available())})"
    )


def needed_rate(channel: str) -> float:
    """The lowest sampling rate in Hz at which ``channel`` still carries what the vitals
    monitor reads in it: twice the top of the band its signal-quality judge tests
    (:mod:`.signal_quality`: a PPG's pulse band 0.5-8 Hz -> 16 Hz, RESP 0.05-2 Hz -> 4 Hz,
    an ECG lead's QRS band 5-30 Hz -> 60 Hz). Below it the pulse, the breaths or the QRS
    complexes are aliased away and the models would read noise as a signal."""
    from liquid_stream.apps.vitals.signal_quality import channel_kind

    kind = channel_kind(channel)
    return 2.0 * (QRS_TOP_HZ if kind.spiky else kind.band_hz[1])
