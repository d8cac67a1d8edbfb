"""One run of the vital-sign monitor over a WFDB record: open, stream, and the result with
its references, metrics, CSV and plot (no torch).

    from liquid_stream.apps.vitals.run import open_record, run_record

    # 1..3 models (one per target); the record's channels they need; its <name>n numerics
    monitor, source = open_record(["hr.onnx", "rr.onnx"], "bidmc/bidmc01", alarms="hr>120")
    for chunk in source.chunks(speed=10):      # 1-s chunks (fs, C), paced at 10x real time
        for est in monitor.push(chunk):        # one Estimate per completed second
            print(est.time_s, est.values, est.valid, est.alarms)
    monitor.flush()

    # or the same loop with references, latencies and metrics:
    result = run_record(monitor, source, speed=None)     # None: as fast as possible
    result.metrics(); result.write_csv("v.csv"); result.plot("v.png")

The models are :mod:`~liquid_stream.apps.vitals.model`, the monitor
:mod:`~liquid_stream.apps.vitals.monitor` (``VitalsMonitor`` also takes any ``(T, C)``
stream), the record and its references :mod:`~liquid_stream.apps.vitals.record`. Seconds
without a finite reference are left out of RMSE/MAE and counted.
"""

from __future__ import annotations

import csv
import math
import time
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from liquid_stream.apps.vitals.alarms import Alarm, check_alarm
from liquid_stream.apps.vitals.monitor import (
    DEFAULT_MAX_GAP_S,
    Estimate,
    VitalsInputError,
    VitalsMonitor,
)
from liquid_stream.apps.vitals.record import RecordSource


class EstimateLog(Sequence[Estimate]):
    """A run's estimates, one per second, kept by column so that a day-long record costs
    ~100 bytes a second instead of the ~1.3 kB of an :class:`Estimate` object with its
    eight dicts and lists (``vitals`` on 24 h: 309 MB peak before, the goal ≤ 300 MB).

    It reads as a list of :class:`Estimate` (``len``, index, slice, iteration), each
    rebuilt equal to the one appended: the numbers (``values``, ``ref``, ``ref_1hz`` per
    target) in float64 arrays, which hold a float exactly; everything else (the status,
    alarm and technical dicts and lists, and which targets a reference names) as an index
    into a table of the distinct values seen, which stays small: a run has a handful of
    status combinations, not one per second. Rebuilt objects are new; editing one does
    not change the log."""

    def __init__(self, estimates=()):
        self._time = array("q")
        self._num: dict[str, dict[str, array]] = {}  # field -> target -> float64 column
        self._idx: dict[str, array] = {}  # field -> index into _table[field]
        self._table: dict[str, list] = {}
        self._lookup: dict[str, dict] = {}
        for e in estimates:
            self.append(e)

    _NUMBERS = ("values", "ref", "ref_1hz")
    _OTHERS = ("status", "alarms", "events", "technical", "tech_events", "source", "keys")

    def _intern(self, name: str, value) -> None:
        table, lookup = self._table.setdefault(name, []), self._lookup.setdefault(name, {})
        i = lookup.get(value)
        if i is None:
            i = lookup[value] = len(table)
            table.append(value)
        self._idx.setdefault(name, array("I")).append(i)

    def append(self, e: Estimate) -> None:
        n = len(self._time)
        keys = tuple(tuple(getattr(e, f)) for f in self._NUMBERS)
        for f, ks in zip(self._NUMBERS, keys, strict=True):
            cols = self._num.setdefault(f, {})
            for k in ks:
                if k not in cols:  # a target first seen now: NaN for the rows before
                    cols[k] = array("d", [math.nan]) * n
            for k, col in cols.items():
                col.append(float(getattr(e, f).get(k, math.nan)))
        self._time.append(int(e.time_s))
        self._intern("keys", keys)
        self._intern("status", tuple(e.status.items()))
        self._intern("alarms", tuple(e.alarms.items()))
        self._intern("events", tuple(e.events))
        self._intern("technical", tuple(e.technical))
        self._intern("tech_events", tuple(e.tech_events))
        self._intern("source", tuple(e.source.items()))

    def extend(self, estimates) -> None:
        for e in estimates:
            self.append(e)

    def __len__(self) -> int:
        return len(self._time)

    def _row(self, i: int) -> Estimate:
        get = {f: self._table[f][self._idx[f][i]] for f in self._OTHERS}
        nums = [
            {k: self._num[f][k][i] for k in ks}
            for f, ks in zip(self._NUMBERS, get["keys"], strict=True)
        ]
        return Estimate(
            self._time[i],
            nums[0],
            dict(get["status"]),
            dict(get["alarms"]),
            list(get["events"]),
            nums[1],
            nums[2],
            list(get["technical"]),
            list(get["tech_events"]),
            dict(get["source"]),
        )

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self._row(j) for j in range(*i.indices(len(self)))]
        n = len(self)
        if not -n <= i < n:
            raise IndexError("estimate index out of range")
        return self._row(i % n)

    def __iter__(self) -> Iterator[Estimate]:
        for i in range(len(self)):
            yield self._row(i)


@dataclass
class RunResult:
    """Everything one run produced: estimates with references, timing, counts."""

    estimates: Sequence[Estimate]  # an EstimateLog from run_record / run_lsl
    targets: list[str]
    units: dict[str, str]
    alarms: list[Alarm]
    latencies_s: np.ndarray  # per 1-s chunk: time in VitalsMonitor.push
    compute_s: float
    wall_s: float
    duration_s: float
    gaps: dict[str, dict[str, float]]
    has_reference: bool
    interrupted: bool = False
    out_of_range: dict[str, dict] = field(default_factory=dict)  # out_of_range_counts()
    error: str | None = None  # the refusal that stopped the run early (None: ran to the end)
    backups: dict[str, list[str]] = field(default_factory=dict)  # target -> backup models

    @property
    def real_time_factor(self) -> float:
        """Compute time / signal time (< 1: faster than real time)."""
        return self.compute_s / self.duration_s if self.duration_s else math.nan

    def metrics(self) -> dict[str, dict[str, float]]:
        """Per target: RMSE/MAE of the valid estimates against the window reference and the
        1 Hz reading, with how many seconds were compared and left out (and why)."""
        out = {}
        for t in self.targets:
            est = np.array([e.values[t] for e in self.estimates], dtype=np.float64)
            valid = np.array([e.status[t] == "ok" for e in self.estimates], dtype=bool)
            row: dict[str, float] = {"seconds": len(est), "valid": int(valid.sum())}
            for key, attr in (("window", "ref"), ("1hz", "ref_1hz")):
                ref = np.array([e.__dict__[attr].get(t, math.nan) for e in self.estimates])
                use = valid & np.isfinite(ref)
                err = est[use] - ref[use]
                row[f"n_{key}"] = int(use.sum())
                row[f"no_ref_{key}"] = int((valid & ~np.isfinite(ref)).sum())
                row[f"rmse_{key}"] = float(np.sqrt(np.mean(err**2))) if len(err) else math.nan
                row[f"mae_{key}"] = float(np.mean(np.abs(err))) if len(err) else math.nan
            out[t] = row
        return out

    def alarm_check(self) -> dict[str, dict[str, int]]:
        """Per alarm rule, its states against the record's reference (the numerics over
        the model's window): seconds, episodes and the same rule driven by the reference
        (:func:`~liquid_stream.apps.vitals.alarms.check_alarm`)."""
        return {
            a.rule.name: check_alarm(
                a.rule,
                [bool(e.alarms.get(a.rule.name, False)) for e in self.estimates],
                [e.ref.get(a.rule.vital, math.nan) for e in self.estimates],
            )
            for a in self.alarms
        }

    def technical(self) -> dict[str, dict[str, int]]:
        """Per technical alarm (``"no signal on PLETH (flat line)"``): its episodes, its
        seconds and the second it was first raised."""
        out: dict[str, dict[str, int]] = {}
        for e in self.estimates:
            for m in e.technical:
                row = out.setdefault(m, {"episodes": 0, "seconds": 0, "first_s": e.time_s})
                row["seconds"] += 1
            for m, ev in e.tech_events:
                if ev == "on":
                    out[m]["episodes"] += 1
        return out

    def columns(self) -> list[str]:
        cols = ["time_s"]
        for t in self.targets:
            cols += [t, f"{t}_valid", f"{t}_status", f"{t}_ref", f"{t}_ref_1hz"]
            cols += [f"{t}_source"] if t in self.backups else []
        return cols + [f"alarm_{a.rule.name}" for a in self.alarms] + ["technical"]

    def write_csv(self, path: str | Path) -> Path:
        """One row per second; see :meth:`columns` (``nan`` where there is no value)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(self.columns())
            for e in self.estimates:
                row: list = [e.time_s]
                for t in self.targets:
                    row += [
                        _fmt(e.values[t]),
                        int(e.status[t] == "ok"),
                        e.status[t],
                        _fmt(e.ref.get(t, math.nan)),
                        _fmt(e.ref_1hz.get(t, math.nan)),
                    ]
                    if t in self.backups:  # the backup that gave the value, if one did
                        row.append(e.source.get(t, ""))
                row += [int(e.alarms.get(a.rule.name, False)) for a in self.alarms]
                row.append("; ".join(e.technical))
                w.writerow(row)
        return path

    def plot(self, path: str | Path, title: str = "") -> Path:
        """Estimate vs reference per target (invalid seconds grey, alarm time shaded red,
        no-signal time shaded grey)."""
        import matplotlib

        matplotlib.use("Agg", force=False)
        import matplotlib.pyplot as plt

        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        t = np.array([e.time_s for e in self.estimates], dtype=np.float64)
        fig, axes = plt.subplots(
            len(self.targets), 1, figsize=(10, 2.6 * len(self.targets)), sharex=True, squeeze=False
        )
        for ax, tgt in zip(axes[:, 0], self.targets, strict=True):
            est = np.array([e.values[tgt] for e in self.estimates], dtype=np.float64)
            ok = np.array([e.status[tgt] == "ok" for e in self.estimates])
            ref = np.array([e.ref.get(tgt, math.nan) for e in self.estimates])
            inst = np.array([e.ref_1hz.get(tgt, math.nan) for e in self.estimates])
            if np.isfinite(inst).any():
                ax.plot(t, inst, color="0.7", lw=0.8, label="monitor 1 Hz")
            if np.isfinite(ref).any():
                ax.plot(t, ref, color="k", lw=1.2, label="monitor, window mean")
            ax.plot(t, np.where(ok, np.nan, est), color="0.55", lw=1, ls=":", label="invalid")
            ax.plot(t, np.where(ok, est, np.nan), color="C0", lw=1.5, label="estimate")
            nosig = np.array([e.status[tgt] == "nosignal" for e in self.estimates])
            if nosig.any():
                ax.fill_between(
                    t,
                    0,
                    1,
                    where=nosig,
                    color="0.3",
                    alpha=0.15,
                    step="pre",
                    transform=ax.get_xaxis_transform(),
                    label="no signal",
                )
            for a in self.alarms:
                if a.rule.vital != tgt:
                    continue
                ax.axhline(a.rule.threshold, color="C3", lw=0.8, ls="--")
                on = np.array([e.alarms.get(a.rule.name, False) for e in self.estimates])
                if on.any():
                    ax.fill_between(
                        t,
                        0,
                        1,
                        where=on,
                        color="C3",
                        alpha=0.15,
                        step="pre",
                        transform=ax.get_xaxis_transform(),
                        label=a.rule.name,
                    )
            ax.set_ylabel(f"{tgt.upper()} [{self.units[tgt]}]")
            ax.legend(loc="upper right", fontsize=7, ncol=3)
            ax.grid(alpha=0.3)
        axes[-1, 0].set_xlabel("time [s]")
        if title:
            axes[0, 0].set_title(title)
        fig.tight_layout()
        fig.savefig(path, dpi=100, format="png")  # PNG whatever the name (a temporary)
        plt.close(fig)
        return path


def _fmt(v: float) -> str:
    return "nan" if v is None or not math.isfinite(v) else f"{v:.6g}"


def open_record(
    models: Sequence[str | Path],
    record: str | Path,
    alarms=None,
    max_gap_s: float = DEFAULT_MAX_GAP_S,
    threads: int | None = 1,
    out_of_range: str = "gap",
    backups: Sequence[str | Path] = (),
) -> tuple[VitalsMonitor, RecordSource]:
    """Load the models (and their ``backups``), then the record's channels they need
    (resampled if needed). ``out_of_range``: see :class:`VitalsMonitor` (default ``"gap"``
    for a record)."""
    monitor = VitalsMonitor(
        models,
        alarms,
        max_gap_s=max_gap_s,
        threads=threads,
        out_of_range=out_of_range,
        backups=backups,
    )
    source = RecordSource(record, monitor.channels, monitor.channel_users)
    monitor.set_input_rate(source.fs)
    return monitor, source


def monitor_result(
    monitor: VitalsMonitor,
    estimates: list[Estimate],
    latencies: list[float],
    t_start: float,
    has_reference: bool,
    interrupted: bool,
    error: str | None,
) -> RunResult:
    """The :class:`RunResult` of a finished run of ``monitor`` (any source: record, LSL)."""
    lat = np.array(latencies)
    return RunResult(
        estimates=estimates,
        targets=list(monitor.targets),
        units=dict(monitor.units),
        alarms=monitor.alarms,
        latencies_s=lat,
        compute_s=float(lat.sum()),
        wall_s=time.perf_counter() - t_start,
        duration_s=monitor.samples_in / monitor.input_rate,
        gaps=monitor.gap_counts(),
        has_reference=has_reference,
        interrupted=interrupted,
        out_of_range=monitor.out_of_range_counts(),
        error=error,
        backups={
            t: [b.path.stem for b in monitor.backups if b.target == t]
            for t in monitor.targets
            if any(b.target == t for b in monitor.backups)
        },
    )


def run_record(
    monitor: VitalsMonitor,
    source: RecordSource,
    speed: float | None = None,
    on_estimate=None,
) -> RunResult:
    """Stream ``source`` through ``monitor`` (paced at ``speed``; None = unpaced), attach
    the references, time every chunk. Ctrl-C stops early (``interrupted``), keeping what
    was done; so does a chunk the monitor refuses (:class:`VitalsInputError`, ``error``:
    the seconds before it are emitted). ``on_estimate(estimate)`` is called for each
    second as it is emitted."""
    estimates = EstimateLog()
    latencies: list[float] = []
    t_start = time.perf_counter()

    def take(ests):
        for e in ests:
            for t in monitor.targets:
                e.ref[t], e.ref_1hz[t] = source.reference(t, e.time_s, monitor.windows_s[t])
            estimates.append(e)
            if on_estimate is not None:
                on_estimate(e)

    interrupted, error = False, None
    try:
        for chunk in source.chunks(speed):
            t0 = time.perf_counter()
            try:
                ests = monitor.push(chunk)
            except VitalsInputError as e:  # the monitor is as before the chunk: end there
                error = str(e)
                break
            latencies.append(time.perf_counter() - t0)
            take(ests)
        t0 = time.perf_counter()
        ests = monitor.flush()
        latencies[-1:] = [latencies[-1] + time.perf_counter() - t0] if latencies else []
        take(ests)
    except KeyboardInterrupt:
        interrupted = True
    return monitor_result(
        monitor, estimates, latencies, t_start, bool(source.numerics), interrupted, error
    )
