"""A WFDB record as the vital-sign monitor's input: its signals as a 1-s stream, and the
references of its ``<record>n`` numerics record (no torch).

    source = RecordSource("bidmc/bidmc01", ["PLETH", "II"])
    for chunk in source.chunks(speed=10):      # 1-s chunks (fs, C), paced at 10x real time
        ...
    window_ref, ref_1hz = source.reference("hr", time_s=40, window_s=32.0)

The WFDB files are read by :mod:`liquid_stream.io.wfdb`, which refuses bad headers (a sampling
rate outside its range, unnamed or twice-named channels) and signal files whose size does
not fit the header's format; a truncated signal file is streamed as far as it goes (with a
warning). The monitor takes records sampled at :data:`MIN_FS` Hz or faster. The signals are
read by sample ranges of :data:`BLOCK_FRAMES` frames as the stream goes
(:class:`~liquid_stream.io.wfdb.SampleReader`), so memory does not grow with the record's
length; the chunks are the same numbers as a whole read. References
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

from liquid_stream.apps.vitals.model import VitalsError
from liquid_stream.io.bidmc_vocab import NUMERICS_CHANNEL, strip_name
from liquid_stream.io.wfdb import (
    SampleReader,
    WfdbError,
    complete_samples,
    read_header,
    read_record,
    record_path,
    signals_by_name,
)

# The slowest record the monitor takes: below 10 Hz a waveform holds too little of a pulse
# or a QRS complex to estimate from (the models read 125 Hz; wfdb.FS_RANGE bounds the top).
MIN_FS = 10.0
# Frames read from the signal file at a time (1 MiB a channel in float64; 8.7 min at 125 Hz)
BLOCK_FRAMES = 1 << 17


class RecordSource:
    """A WFDB record (plus its ``<name>n`` numerics record, when present) as a 1-s stream.

    The header and the files' sizes are checked at open, and the first block read, so
    problems show before streaming starts; :meth:`chunks` then reads the record block by
    block and hands it out one second at a time, paced at ``speed`` times real time.

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
        self.path = record_path(record)
        self.name = self.path.name
        self.warnings: list[str] = []
        hea = self.path.with_name(self.name + ".hea")
        try:
            header = read_header(self.path)
        except WfdbError as e:
            raise VitalsError(str(e)) from None
        if not header.n_sig or not header.fs:
            raise VitalsError(f"{hea} describes no signals")
        self.fs = float(header.fs)
        if self.fs < MIN_FS:
            raise VitalsError(
                f"{hea}: sampling rate {self.fs:g} Hz is below the {MIN_FS:g} Hz the vital-sign "
                "monitor needs"
            )
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
        try:
            n = complete_samples(self.path, header)
        except WfdbError as e:
            raise VitalsError(f"record {self.name}: {e}") from None
        self.truncated = n is not None and 0 < n < self.header_samples
        if n == 0:
            raise VitalsError(f"record {self.name}: no complete samples in its signal file(s)")
        if self.truncated:
            self.warnings.append(
                f"record {self.name} is truncated: the header says {self.header_samples} "
                f"samples ({self.header_samples / self.fs:.1f} s), the signal file holds {n} "
                f"({n / self.fs:.1f} s); streaming those"
            )
        self._whole: np.ndarray | None = None
        if n is None:  # a layout whose length the files do not tell: read it whole
            self._whole = self._read_all(idx)
            n = len(self._whole)
        self.n_samples = int(n)
        self._reader = SampleReader(self.path, header, idx, self.n_samples)
        self._first = self._block(0)  # the first block: a read problem shows now
        self.numerics, self.numerics_name = self._read_numerics()

    def _read_all(self, idx: list[int]) -> np.ndarray:
        try:
            rec = read_record(self.path, channels=idx)
        except WfdbError as e:
            raise VitalsError(f"record {self.name}: {e}") from None
        if rec.p_signal is None or len(rec.p_signal) == 0:
            raise VitalsError(f"record {self.name}: no samples")
        return np.asarray(rec.p_signal, dtype=np.float64).reshape(-1, len(idx))

    def _block(self, a: int) -> np.ndarray:
        """Frames ``a`` to ``a + BLOCK_FRAMES`` (fewer at the end), (T, C) float64."""
        b = min(self.n_samples, a + BLOCK_FRAMES)
        if self._whole is not None:
            return self._whole[a:b]
        try:
            return self._reader.read(a, b)
        except WfdbError as e:
            raise VitalsError(f"record {self.name}: {e}") from None

    @property
    def signal(self) -> np.ndarray:
        """The whole streamed signal, ``(T, C)`` float64, read now (what :meth:`chunks`
        hands out, concatenated; for tests and tools: a stream never holds it)."""
        if self._whole is not None:
            return self._whole
        blocks = [self._block(a) for a in range(0, self.n_samples, BLOCK_FRAMES)]
        return np.concatenate(blocks) if blocks else np.zeros((0, len(self.channels)))

    @property
    def duration_s(self) -> float:
        return self.n_samples / self.fs

    def _read_numerics(self) -> tuple[dict[str, np.ndarray], str | None]:
        """The ``<name>n`` numerics at 1 Hz (binned when recorded faster) and that name;
        none (with a warning when unreadable): a reference is optional."""
        name = self.name + "n"
        p = self.path.with_name(name)
        if not p.with_name(name + ".hea").is_file():
            return {}, None
        try:
            rec = read_record(p)
        except WfdbError as e:
            self.warnings.append(f"numerics record {name} unreadable ({e}): no reference")
            return {}, None
        numerics = signals_by_name(rec)
        if abs(rec.fs - 1.0) > 1e-9:  # bin to 1 Hz
            per_s = max(1, int(round(rec.fs)))
            numerics = {k: _per_second(v, per_s) for k, v in numerics.items()}
        return numerics, name

    def chunks(self, speed: float | None = None, seconds: float = 1.0) -> Iterator[np.ndarray]:
        """Yield ``(≈fs*seconds, C)`` chunks; chunk k is released when its last sample is
        due at ``speed`` times real time (``None``: as fast as possible). The record is read
        a block at a time; a read failure mid-way is a :class:`VitalsError`."""
        n = self.n_samples
        t0 = time.perf_counter()
        a, k = 0, 1
        block, b0 = self._first, 0  # block holds frames b0 .. b0 + len(block)
        while a < n:
            b = min(n, int(round(k * seconds * self.fs)))
            if speed:
                wait = t0 + (b / self.fs) / speed - time.perf_counter()
                if wait > 0:
                    time.sleep(wait)
            parts = [block[a - b0 : b - b0]]
            while b > b0 + len(block):  # the chunk runs past the block: read the next one
                b0 += len(block)
                block = self._block(b0)
                parts.append(block[: b - b0])
            yield parts[0] if len(parts) == 1 else np.concatenate(parts)
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


def _per_second(v: np.ndarray, per_s: int) -> np.ndarray:
    """The mean of the finite values of each whole second of ``v`` (NaN where none)."""
    n = len(v) // per_s
    with np.errstate(all="ignore"):
        blocks = v[: n * per_s].reshape(n, per_s)
        cnt = np.isfinite(blocks).sum(1)
        return np.where(cnt > 0, np.nansum(blocks, 1) / np.maximum(cnt, 1), np.nan)
