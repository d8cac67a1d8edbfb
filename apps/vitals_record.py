"""A WFDB record as the vital-sign monitor's input: its signals as a 1-s stream, and the
references of its ``<record>n`` numerics record (no torch).

    source = RecordSource("bidmc/bidmc01", ["PLETH", "II"])
    for chunk in source.chunks(speed=10):      # 1-s chunks (fs, C), paced at 10x real time
        ...
    window_ref, ref_1hz = source.reference("hr", time_s=40, window_s=32.0)

A truncated signal file is streamed as far as it goes (with a warning). References
(numerics record ``<record>n``, 1 Hz, reading i describes second [i, i+1)): the estimate
at time k s (samples up to k*fs) is compared with the *window* reference, the mean of the
finite readings of the seconds its window covers, floor(k - W/fs) .. k-1 (what the bidmc
task trains on), and with the *1 Hz* reference, the reading of second k-1.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from liquid_stream.apps.vitals_model import VitalsError
from liquid_stream.bidmc_vocab import NUMERICS_CHANNEL, strip_name

# bytes per sample of the WFDB formats (to find how much of a truncated .dat is there)
_FMT_BYTES = {"8": 1, "16": 2, "61": 2, "80": 1, "160": 2, "24": 3, "32": 4, "212": 1.5,
              "310": 4 / 3, "311": 4 / 3}  # fmt: skip


def record_path(record: str | Path) -> Path:
    """``dir/bidmc01``, ``dir/bidmc01.hea`` or ``dir/bidmc01.dat`` -> ``dir/bidmc01``."""
    p = Path(record)
    return p.with_suffix("") if p.suffix in (".hea", ".dat") else p


class RecordSource:
    """A WFDB record (plus its ``<name>n`` numerics record, when present) as a 1-s stream.

    The record is read at open (so problems show before streaming starts) and handed out
    by :meth:`chunks` one second at a time, paced at ``speed`` times real time.

    Args:
        record: path without extension (``data/bidmc01``).
        channels: the channels to stream, in this column order (names without the trailing
            comma); default all.
        channel_users: channel -> model names, only to say who needs a missing channel.
    """

    def __init__(
        self,
        record: str | Path,
        channels: Sequence[str] | None = None,
        channel_users: dict[str, list[str]] | None = None,
    ):
        import wfdb

        self.path = record_path(record)
        self.name = self.path.name
        self.warnings: list[str] = []
        hea = self.path.with_name(self.name + ".hea")
        if not hea.is_file():
            raise VitalsError(f"record not found: {hea} does not exist")
        try:
            header = wfdb.rdheader(str(self.path))
        except Exception as e:  # noqa: BLE001 - wfdb raises many kinds on bad headers
            raise VitalsError(f"cannot read header {hea}: {e}") from None
        if not header.n_sig or not header.fs:
            raise VitalsError(f"{hea} describes no signals")
        self.fs = float(header.fs)
        names = [strip_name(n) for n in header.sig_name]
        self.all_channels = names
        wanted = list(names) if channels is None else [strip_name(c) for c in channels]
        lower = [n.lower() for n in names]
        idx = []
        for c in wanted:  # exact name first, else ignoring case
            if c in names:
                idx.append(names.index(c))
            elif c.lower() in lower:
                idx.append(lower.index(c.lower()))
            else:
                users = (channel_users or {}).get(c)
                who = f" needed by {', '.join(users)}" if users else ""
                raise VitalsError(
                    f"record {self.name} has no channel {c!r}{who} (it has: {', '.join(names)})"
                )
        self.channels = wanted
        self.header_samples = int(header.sig_len or 0)  # 0: the header does not say
        n = self._available_samples(header)
        self.truncated = n is not None and 0 < n < self.header_samples
        if n == 0:
            raise VitalsError(f"record {self.name}: no complete samples in its signal file(s)")
        if self.truncated:
            self.warnings.append(
                f"record {self.name} is truncated: the header says {self.header_samples} "
                f"samples ({self.header_samples / self.fs:.1f} s), the signal file holds {n} "
                f"({n / self.fs:.1f} s); streaming those"
            )
        try:
            rec = wfdb.rdrecord(str(self.path), channels=idx, sampto=n)
        except Exception as e:  # noqa: BLE001
            raise VitalsError(f"cannot read record {self.name}: {e}") from None
        if rec.p_signal is None or len(rec.p_signal) == 0:
            raise VitalsError(f"record {self.name}: no samples")
        self.signal = np.asarray(rec.p_signal, dtype=np.float64).reshape(-1, len(idx))
        self.nan_samples = int((~np.isfinite(self.signal)).any(1).sum())
        self.numerics, self.numerics_name = self._read_numerics(wfdb)

    @property
    def duration_s(self) -> float:
        return len(self.signal) / self.fs

    def _available_samples(self, header) -> int | None:
        """Complete samples in the signal file(s) (None: unknown layout, read them all)."""
        n = self.header_samples or None
        files: dict[str, list[int]] = {}
        for i, f in enumerate(header.file_name):
            files.setdefault(f, []).append(i)
        for f, sigs in files.items():
            p = self.path.with_name(f)
            if not p.is_file():
                raise VitalsError(f"record {self.name}: signal file {p} is missing")
            fmt = str(header.fmt[sigs[0]])
            spf = header.samps_per_frame[sigs[0]] if header.samps_per_frame else 1
            if fmt not in _FMT_BYTES or any(str(header.fmt[i]) != fmt for i in sigs):
                continue  # unknown layout: let wfdb decide
            offset = (header.byte_offset[sigs[0]] or 0) if header.byte_offset else 0
            per_frame = _FMT_BYTES[fmt] * len(sigs) * (spf or 1)
            have = max(0, int((p.stat().st_size - offset) // per_frame))
            n = have if n is None else min(n, have)
        return n

    def _read_numerics(self, wfdb) -> tuple[dict[str, np.ndarray], str | None]:
        name = self.name + "n"
        p = self.path.with_name(name)
        if not p.with_name(name + ".hea").is_file():
            return {}, None
        try:
            rec = wfdb.rdrecord(str(p))
        except Exception as e:  # noqa: BLE001 - a reference is optional: warn, go on
            self.warnings.append(f"numerics record {name} unreadable ({e}): no reference")
            return {}, None
        sig = np.asarray(rec.p_signal, dtype=np.float64)
        per_s = max(1, int(round(rec.fs)))
        if abs(rec.fs - 1.0) > 1e-9:  # bin to 1 Hz
            n = len(sig) // per_s
            with np.errstate(all="ignore"):
                blocks = sig[: n * per_s].reshape(n, per_s, -1)
                cnt = np.isfinite(blocks).sum(1)
                sig = np.where(cnt > 0, np.nansum(blocks, 1) / np.maximum(cnt, 1), np.nan)
        return {strip_name(c): sig[:, i] for i, c in enumerate(rec.sig_name)}, name

    def chunks(self, speed: float | None = None, seconds: float = 1.0) -> Iterator[np.ndarray]:
        """Yield ``(≈fs*seconds, C)`` chunks; chunk k is released when its last sample is
        due at ``speed`` times real time (``None``: as fast as possible)."""
        n = len(self.signal)
        t0 = time.perf_counter()
        a, k = 0, 1
        while a < n:
            b = min(n, int(round(k * seconds * self.fs)))
            if speed:
                wait = t0 + (b / self.fs) / speed - time.perf_counter()
                if wait > 0:
                    time.sleep(wait)
            yield self.signal[a:b]
            a, k = b, k + 1

    def reference(self, target: str, time_s: int, window_s: float) -> tuple[float, float]:
        """(window reference, 1 Hz reference) for the estimate at ``time_s`` (NaN if none).

        Window: the mean of the finite readings of seconds floor(time_s - window_s) ..
        time_s - 1 (the seconds the model's window covers: the bidmc task's training
        target); 1 Hz: the reading of second time_s - 1 (the last one in the window)."""
        vals = self._numeric(target)
        if vals is None:
            return math.nan, math.nan
        k = int(time_s) - 1
        inst = float(vals[k]) if 0 <= k < len(vals) else math.nan
        k0 = max(0, int(math.floor(time_s - window_s + 1e-9)))
        seg = vals[k0 : int(time_s)]
        seg = seg[np.isfinite(seg)]
        return (float(seg.mean()) if len(seg) else math.nan), inst

    def _numeric(self, target: str) -> np.ndarray | None:
        want = NUMERICS_CHANNEL[target].lower()
        for name, v in self.numerics.items():
            if name.lower() == want:
                return v
        return None
