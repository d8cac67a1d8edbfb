"""BIDMC vital-sign regression data: PhysioNet WFDB records and the Monash TSER ``.ts`` files.

Two real on-disk formats are read (torch is imported only by :class:`WindowDataset`):

**PhysioNet BIDMC PPG and Respiration Dataset** (Pimentel et al. 2016), WFDB records::

    <root>/bidmcNN.hea + .dat    125 Hz waveforms; signal names carry a trailing comma:
                                 "RESP," "PLETH," "V," "AVR," "II," (order varies by record)
    <root>/bidmcNNn.hea + .dat   1 Hz numerics: "HR," "PULSE," "RESP," "SpO2,"

The files are read by :mod:`liquid_stream.io.wfdb` (the reader the vitals app uses); the BIDMC
names by :mod:`liquid_stream.io.bidmc_vocab`. Channel names are matched ignoring the trailing
comma, surrounding blanks and case. Windows of ``window`` samples are cut every ``hop``
samples (starts ``0, hop, ...`` while the window fits). A window starting at sample ``s``
covers the seconds ``k`` with ``floor(s/fs) <= k < ceil((s+window)/fs)`` (32 numerics for
the default 4000-sample windows on a 250-sample hop); its target is the mean of the 1 Hz
numerics over those seconds, as a NaN-aware mean if at least ``min_valid`` of them are valid
(seconds past the end of the numerics count as invalid), else the window is skipped. Windows
with any NaN in the selected signal channels are skipped; records shorter than one window
are skipped. Skips are counted in ``Windows.skipped`` (``nan_signal``, ``nan_target``,
``short_record``). A sampling rate other than ``sample_rate``, a missing channel or a
truncated/corrupt file raise :class:`BidmcDataError` (no silent resampling).

**Monash TSER archive BIDMC32HR / BIDMC32RR / BIDMC32SpO2** (Tan et al. 2021), sktime
``.ts`` text files ``BIDMC32<T>_TRAIN.ts`` / ``_TEST.ts`` (in ``root`` or below it)::

    # comments
    @problemName BIDMC32HR
    @timeStamps false
    @missing true
    @univariate false
    @dimensions 2
    @equalLength true
    @seriesLength 4000
    @targetlabel true
    @data
    v1,v2,...,v4000:v1,...,v4000:target        one case a line; "?" = missing

The two dimensions are the PPG and the ECG (32 s at 125 Hz); they are returned as the
channels ``("PLETH", "II")``. The files carry no record ids, so cases are named
``TRAIN0, TRAIN1, ...`` / ``TEST0, ...`` with ``start = -1``, and a record-wise split of
them is refused (use the archive's fixed TRAIN/TEST split).

Splits (:func:`split_windows`): ``shuffled`` permutes all windows with ``seed`` and takes
``floor(0.7 n)`` / ``floor(0.15 n)`` / the rest (the S4 code's BIDMC protocol: overlapping
windows of one record land in every split, so it leaks); ``record`` assigns whole records.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from liquid_stream.io.bidmc_vocab import TARGETS, channel_key
from liquid_stream.io.wfdb import WfdbError, signals_by_name
from liquid_stream.io.wfdb import read_record as read_wfdb_record

TS_NAMES = {"hr": "HR", "rr": "RR", "spo2": "SpO2"}  # BIDMC32<name>_TRAIN.ts
TS_CHANNELS = ("PLETH", "II")  # the .ts dimensions: PPG, ECG
SAMPLE_RATE = 125
WINDOW = 4000
NUMERICS_RATE = 1.0
_RECORD_RE = re.compile(r"^bidmc\d+$")


class BidmcDataError(ValueError):
    """Input that the BIDMC loaders cannot use (missing files/channels, bad rate, corrupt)."""


@dataclass
class Windows:
    """Fixed-length windows with one regression target each."""

    x: np.ndarray  # (n, window, C) float32, raw physical units, channel order = channels
    y: np.ndarray  # (n,) float32 target in physical units
    record: np.ndarray  # (n,) str record id ("bidmc03"; "TRAIN12" for .ts cases)
    start: np.ndarray  # (n,) int64 first sample of the window in its record (-1 for .ts)
    channels: tuple[str, ...]
    target: str
    skipped: dict[str, int] = field(default_factory=dict)  # reason -> count

    def __len__(self) -> int:
        return int(self.y.shape[0])

    def subset(self, idx) -> Windows:
        idx = np.asarray(idx)
        return Windows(
            x=self.x[idx],
            y=self.y[idx],
            record=self.record[idx],
            start=self.start[idx],
            channels=self.channels,
            target=self.target,
            skipped=dict(self.skipped),
        )

    @property
    def has_records(self) -> bool:
        """True for WFDB windows (record ids and start samples are real)."""
        return bool(len(self) == 0 or (self.start >= 0).all())


def concat_parts(parts: Sequence, what: str) -> dict:
    """``x``, ``y``, ``record``, ``start`` of ``parts`` (windows or crops of the same channels
    and target, e.g. :class:`.bidmc_crops.Crops`) concatenated, with their channels and
    target."""
    if not parts:
        raise BidmcDataError(f"concatenating {what} needs at least one part")
    for p in parts[1:]:
        if p.channels != parts[0].channels or p.target != parts[0].target:
            raise BidmcDataError(
                f"cannot concatenate {what} of {p.channels}/{p.target} "
                f"with {parts[0].channels}/{parts[0].target}"
            )
    out = {k: np.concatenate([getattr(p, k) for p in parts]) for k in ("x", "y", "record", "start")}
    return {**out, "channels": parts[0].channels, "target": parts[0].target}


def concat_windows(*ws: Windows) -> Windows:
    """Concatenate windows of the same channels and target (skip counts are summed)."""
    fields = concat_parts(ws, "windows")
    skipped: dict[str, int] = {}
    for w in ws:
        for k, v in w.skipped.items():
            skipped[k] = skipped.get(k, 0) + v
    return Windows(**fields, skipped=skipped)


def _check_target(target: str) -> str:
    if target not in TARGETS:
        raise BidmcDataError(f"unknown BIDMC target {target!r}; expected one of {list(TARGETS)}")
    return target


# ---------------------------------------------------------------------------- WFDB


def wfdb_dir(root: str | os.PathLike) -> Path:
    """The folder holding the bidmcNN.hea files: root itself or the first folder below it."""
    root = Path(root).expanduser()
    if not root.is_dir():
        raise BidmcDataError(f"BIDMC root is not a folder: {root}")
    if any(_RECORD_RE.match(p.stem) for p in root.glob("bidmc*.hea")):
        return root
    for p in sorted(root.rglob("bidmc*.hea")):
        if _RECORD_RE.match(p.stem):
            return p.parent
    return root


def list_records(root: str | os.PathLike) -> list[str]:
    """Sorted ``bidmcNN`` names that have both the signal and the ``bidmcNNn`` header."""
    d = wfdb_dir(root)
    names = {p.stem for p in d.glob("bidmc*.hea")}
    return sorted(n for n in names if _RECORD_RE.match(n) and f"{n}n" in names)


def read_whole_record(path: Path, what: str):
    """The whole record ``path`` (:mod:`liquid_stream.io.wfdb`); a missing, unreadable or
    truncated one is a :class:`BidmcDataError` (this loader never reads part of one)."""
    hea = path.with_suffix(".hea")
    if not hea.is_file():
        raise BidmcDataError(f"{what}: header file not found: {hea}")
    try:
        rec = read_wfdb_record(path)
    except WfdbError as e:  # a bad header or file size names itself; a failed read may be
        hint = "; the .dat file may be truncated or corrupt" if "cannot read WFDB" in str(e) else ""
        raise BidmcDataError(f"{what}: {e}{hint}") from e
    sig = rec.p_signal
    if sig is None or sig.ndim != 2 or sig.shape[0] != rec.sig_len:
        raise BidmcDataError(
            f"{what}: WFDB record {path} has {0 if sig is None else sig.shape[0]} samples, "
            f"its header says {rec.sig_len}; the .dat file is truncated or corrupt"
        )
    return rec


def read_record(
    root: str | os.PathLike, name: str, channels: Sequence[str], sample_rate: int = SAMPLE_RATE
) -> tuple[np.ndarray, float, dict[str, np.ndarray]]:
    """Read record ``name`` (e.g. ``"bidmc03"``) and its ``<name>n`` numerics.

    Returns ``signals`` (T, C) float64 in the order of ``channels`` (NaN where the record
    has invalid samples), the signal sampling rate, and the 1 Hz numerics as
    ``{"HR": (S,), "PULSE": (S,), "RESP": (S,), "SpO2": (S,)}`` (names without the comma).
    """
    d = wfdb_dir(root)
    rec = read_whole_record(d / name, name)
    fs = float(rec.fs)
    if not math.isclose(fs, sample_rate):
        raise BidmcDataError(
            f"{name}: sampled at {fs:g} Hz, expected {sample_rate} Hz (BIDMC is 125 Hz; "
            "the loader does not resample)"
        )
    present = {channel_key(s): i for i, s in enumerate(rec.sig_name)}
    cols = []
    for ch in channels:
        if channel_key(ch) not in present:
            raise BidmcDataError(
                f"{name}: channel {ch!r} not found; the record has {list(rec.sig_name)}"
            )
        cols.append(present[channel_key(ch)])
    signals = np.asarray(rec.p_signal[:, cols], dtype=np.float64)  # (T, C)
    num = read_whole_record(d / f"{name}n", f"{name}n")
    if not math.isclose(float(num.fs), NUMERICS_RATE):
        raise BidmcDataError(f"{name}n: numerics sampled at {num.fs:g} Hz, expected 1 Hz")
    return signals, fs, signals_by_name(num)


def _numeric(numerics: dict[str, np.ndarray], channel: str, name: str) -> np.ndarray:
    for k, v in numerics.items():
        if channel_key(k) == channel_key(channel):
            return v
    raise BidmcDataError(
        f"{name}n: numerics channel {channel!r} not found; the record has {list(numerics)}"
    )


def window_starts(n_samples: int, window: int, hop: int) -> np.ndarray:
    """Start samples ``0, hop, ...`` of the windows that fit in ``n_samples``."""
    if n_samples < window:
        return np.zeros(0, np.int64)
    return np.arange(0, n_samples - window + 1, hop, dtype=np.int64)


def window_targets(
    values: np.ndarray, starts: np.ndarray, window: int, fs: float, min_valid: float
) -> np.ndarray:
    """Mean of the 1 Hz ``values`` over the seconds each window covers (NaN if too few valid).

    values (S,) 1 Hz; starts (n,) samples at ``fs`` -> (n,) float64.
    """
    out = np.full(len(starts), np.nan)
    for j, s in enumerate(starts):
        k0 = int(math.floor(s / fs))
        k1 = int(math.ceil((s + window) / fs))
        seg = values[k0 : min(k1, len(values))]
        valid = np.isfinite(seg)
        if valid.sum() >= min_valid * (k1 - k0) and valid.any():
            out[j] = float(seg[valid].mean())
    return out


def load_wfdb_windows(
    root: str | os.PathLike,
    target: str,
    channels: Sequence[str] = ("PLETH", "II"),
    window: int = WINDOW,
    hop: int = 250,
    sample_rate: int = SAMPLE_RATE,
    records: Sequence[str] | None = None,
    min_valid: float = 0.5,
    signals: bool = True,
) -> Windows:
    """Cut every record of ``root`` (or ``records``) into windows (see the module docstring).

    ``signals=False``: an index only, ``x`` of shape ``(n, 0, C)``: the same windows (the
    same ones dropped for NaN signal or target), their targets, records and starts, without
    holding the samples (``4 · window · C`` bytes a window: 5.1 GB for 2997 four-minute
    records at hop 500 and two channels)."""
    numeric = TARGETS[_check_target(target)][0]
    if window < 1 or hop < 1:
        raise BidmcDataError(f"window and hop must be >= 1 (got {window}, {hop})")
    names = list(records) if records is not None else list_records(root)
    if not names:
        raise BidmcDataError(
            f"no BIDMC WFDB records (bidmcNN.hea with bidmcNNn.hea) found in {root}"
        )
    skipped = {"short_record": 0, "nan_signal": 0, "nan_target": 0}
    n_ch = len(channels)
    xs, ys, recs, sts = [], [], [], []
    for name in names:
        sig, fs, num = read_record(root, name, channels, sample_rate)
        values = _numeric(num, numeric, name)
        starts = window_starts(sig.shape[0], window, hop)
        if len(starts) == 0:
            skipped["short_record"] += 1
            continue
        # (n, window, C) view, no copy
        view = np.lib.stride_tricks.sliding_window_view(sig, window, axis=0)[starts]
        view = view.transpose(0, 2, 1)
        ok_sig = np.isfinite(view).all(axis=(1, 2))
        y = window_targets(values, starts, window, fs, min_valid)
        ok_y = np.isfinite(y)
        skipped["nan_signal"] += int((~ok_sig).sum())
        skipped["nan_target"] += int((ok_sig & ~ok_y).sum())
        keep = ok_sig & ok_y
        empty = np.zeros((int(keep.sum()), 0, n_ch), np.float32)
        xs.append(view[keep].astype(np.float32) if signals else empty)
        ys.append(y[keep].astype(np.float32))
        recs.append(np.full(int(keep.sum()), name, dtype=object))
        sts.append(starts[keep])
    return Windows(
        x=np.concatenate(xs) if xs else np.zeros((0, window * signals, n_ch), np.float32),
        y=np.concatenate(ys) if ys else np.zeros(0, np.float32),
        record=np.concatenate(recs).astype(str) if recs else np.zeros(0, str),
        start=np.concatenate(sts) if sts else np.zeros(0, np.int64),
        channels=tuple(channels),
        target=target,
        skipped=skipped,
    )


# ---------------------------------------------------------------------------- .ts


def parse_ts(path: str | os.PathLike) -> tuple[np.ndarray, np.ndarray, dict]:
    """Parse a Monash/sktime ``.ts`` regression file.

    Returns ``x`` (n, C, L) float64 (NaN for ``?`` and, for unequal lengths, padding),
    ``y`` (n,) float64 and the header as a dict (lower-case keys without ``@``; values
    as strings, ``"true"``/``"false"`` as bool, integers as int).
    """
    path = Path(path)
    if not path.is_file():
        raise BidmcDataError(f".ts file not found: {path}")
    header: dict = {}
    rows: list[list[np.ndarray]] = []
    ys: list[float] = []
    in_data = False
    with open(path, encoding="utf-8", errors="replace") as f:
        for lineno, raw in enumerate(f, 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            if not in_data:
                if not line.startswith("@"):
                    raise BidmcDataError(f"{path}:{lineno}: expected a @header line or @data")
                key, _, val = line[1:].partition(" ")
                key, val = key.lower(), val.strip()
                if key == "data":
                    in_data = True
                    continue
                if val.lower() in ("true", "false"):
                    header[key] = val.lower() == "true"
                elif re.fullmatch(r"-?\d+", val):
                    header[key] = int(val)
                else:
                    header[key] = val
                continue
            if header.get("timestamps"):
                raise BidmcDataError(f"{path}: @timeStamps true is not supported")
            parts = line.split(":")
            if header.get("targetlabel", True) is False:
                raise BidmcDataError(f"{path}: @targetlabel false: not a regression file")
            if len(parts) < 2:
                raise BidmcDataError(f"{path}:{lineno}: no ':target' at the end of the case")
            dims = header.get("dimensions")
            if isinstance(dims, int) and len(parts) - 1 != dims:
                raise BidmcDataError(
                    f"{path}:{lineno}: {len(parts) - 1} dimensions, header says {dims}"
                )
            try:
                row = [
                    np.array(p.replace("?", "nan").split(","), dtype=np.float64) for p in parts[:-1]
                ]
                t = parts[-1].strip()
                ys.append(float("nan") if t == "?" else float(t))
            except ValueError as e:
                raise BidmcDataError(f"{path}:{lineno}: bad value ({e})") from e
            rows.append(row)
    if not in_data:
        raise BidmcDataError(f"{path}: no @data line (not a .ts file?)")
    if not rows:
        raise BidmcDataError(f"{path}: no cases after @data")
    n_dim = {len(r) for r in rows}
    if len(n_dim) != 1:
        raise BidmcDataError(f"{path}: cases have different numbers of dimensions {n_dim}")
    lengths = {len(a) for r in rows for a in r}
    if header.get("equallength") and len(lengths) != 1:
        raise BidmcDataError(f"{path}: @equalLength true but series lengths are {sorted(lengths)}")
    length = max(lengths)
    if isinstance(header.get("serieslength"), int) and header["serieslength"] != length:
        raise BidmcDataError(
            f"{path}: series have {length} values, @seriesLength says {header['serieslength']}"
        )
    x = np.full((len(rows), n_dim.pop(), length), np.nan)  # (n, C, L)
    for i, r in enumerate(rows):
        for c, a in enumerate(r):
            x[i, c, : len(a)] = a
    return x, np.asarray(ys, dtype=np.float64), header


def _ts_path(root: Path, target: str, split: str) -> Path | None:
    name = f"BIDMC32{TS_NAMES[target]}_{split}.ts"
    for cand in (root / name, root / f"BIDMC32{TS_NAMES[target]}" / name):
        if cand.is_file():
            return cand
    found = sorted(root.rglob(name)) if root.is_dir() else []
    return found[0] if found else None


def load_ts_windows(root: str | os.PathLike, target: str) -> tuple[Windows, Windows]:
    """(train, test) windows of ``BIDMC32<T>_TRAIN.ts`` / ``_TEST.ts`` found in/below ``root``.

    Channels are ``("PLETH", "II")`` (the files' PPG and ECG). Cases with a missing value in
    the series or the target are skipped and counted.
    """
    _check_target(target)
    root = Path(root).expanduser()
    out = []
    for split in ("TRAIN", "TEST"):
        p = _ts_path(root, target, split)
        if p is None:
            raise BidmcDataError(
                f"BIDMC32{TS_NAMES[target]}_{split}.ts not found in or below {root}"
            )
        x, y, _ = parse_ts(p)
        if x.shape[1] != len(TS_CHANNELS):
            raise BidmcDataError(f"{p}: {x.shape[1]} dimensions, expected 2 (PPG, ECG)")
        ok_sig = np.isfinite(x).all(axis=(1, 2))
        ok_y = np.isfinite(y)
        keep = ok_sig & ok_y
        idx = np.flatnonzero(keep)
        out.append(
            Windows(
                x=np.ascontiguousarray(x[keep].transpose(0, 2, 1), dtype=np.float32),
                y=y[keep].astype(np.float32),
                record=np.array([f"{split}{i}" for i in idx], dtype=str),
                start=np.full(len(idx), -1, np.int64),
                channels=TS_CHANNELS,
                target=target,
                skipped={
                    "nan_signal": int((~ok_sig).sum()),
                    "nan_target": int((ok_sig & ~ok_y).sum()),
                },
            )
        )
    return out[0], out[1]


def find_format(root: str | os.PathLike) -> str:
    """``"wfdb"`` if ``root`` holds BIDMC WFDB records, ``"ts"`` if it holds BIDMC32 .ts files."""
    root = Path(root).expanduser()
    if not root.is_dir():
        raise BidmcDataError(f"BIDMC root is not a folder: {root}")
    if list_records(root):
        return "wfdb"
    if any(root.rglob("BIDMC32*_TRAIN.ts")):
        return "ts"
    raise BidmcDataError(
        f"{root} holds neither PhysioNet BIDMC WFDB records (bidmcNN.hea + bidmcNNn.hea) "
        "nor Monash BIDMC32 .ts files (BIDMC32HR_TRAIN.ts, ...)"
    )


# ---------------------------------------------------------------------------- splits


def _split_sizes(n: int, fractions: Sequence[float]) -> tuple[int, int]:
    return int(math.floor(fractions[0] * n)), int(math.floor(fractions[1] * n))


def split_windows(
    w: Windows,
    protocol: str,
    seed: int = 0,
    fractions: Sequence[float] = (0.7, 0.15, 0.15),
) -> tuple[Windows, Windows, Windows]:
    """(train, val, test) by ``protocol``: ``"shuffled"`` or ``"record"`` (module docstring).

    ``record``: records are shuffled with ``seed``; the first goes to val, the second to test,
    then each next record goes to the split furthest below its share of the windows
    (relative deficit), so window counts come out near ``fractions`` and no record is in
    two splits.
    """
    if len(fractions) != 3 or abs(sum(fractions) - 1.0) > 1e-6 or min(fractions) < 0:
        raise BidmcDataError(f"fractions must be 3 non-negative numbers summing to 1: {fractions}")
    rng = np.random.default_rng(seed)
    n = len(w)
    if protocol == "shuffled":
        perm = rng.permutation(n)
        n_tr, n_va = _split_sizes(n, fractions)
        parts = (perm[:n_tr], perm[n_tr : n_tr + n_va], perm[n_tr + n_va :])
        return tuple(w.subset(np.sort(p)) for p in parts)  # type: ignore[return-value]
    if protocol != "record":
        raise BidmcDataError(f"unknown split protocol {protocol!r}; use 'shuffled' or 'record'")
    if not w.has_records:
        raise BidmcDataError(
            "the Monash .ts files carry no record ids, so a record-wise split is impossible; "
            "use the archive's fixed TRAIN/TEST split (or protocol='shuffled')"
        )
    names, counts = np.unique(w.record, return_counts=True)
    if len(names) < 3:
        raise BidmcDataError(
            f"a record-wise split needs at least 3 records, got {len(names)}: {list(names)}"
        )
    order = rng.permutation(len(names))
    target = np.asarray(fractions, dtype=np.float64) * n
    have = np.zeros(3)
    assign: dict[str, int] = {}
    for j, r in enumerate(order):
        if j < 2:
            k = j + 1  # one record each for val and test first
        else:
            k = int(np.argmax((target - have) / np.maximum(target, 1e-9)))
        assign[str(names[r])] = k
        have[k] += counts[r]
    which = np.array([assign[str(r)] for r in w.record])
    return tuple(w.subset(np.flatnonzero(which == k)) for k in range(3))  # type: ignore


# ---------------------------------------------------------------------------- torch


def channel_stats(x: np.ndarray) -> tuple[list[float], list[float]]:
    """Per-channel NaN-safe mean and std of ``x`` (n, L, C) (std floored at 1e-8)."""
    x = np.asarray(x)
    if x.ndim != 3 or x.shape[0] == 0 or x.shape[1] == 0:
        raise BidmcDataError(f"channel_stats needs a non-empty (n, L, C) array, got {x.shape}")
    flat = x.reshape(-1, x.shape[2])
    mean = np.nanmean(flat, axis=0, dtype=np.float64)
    std = np.nanstd(flat, axis=0, dtype=np.float64)
    return [float(m) for m in mean], [float(max(s, 1e-8)) for s in std]


class WindowDataset:
    """``(x (window, C) float32 tensor = (x - mean) / std, y () float32 tensor)``.

    A map-style dataset (``__len__`` + ``__getitem__``) usable by ``torch.utils.data.DataLoader``;
    torch is imported in ``__getitem__`` only, so this module stays torch-free."""

    def __init__(self, windows: Windows, mean: Sequence[float], std: Sequence[float]):
        self.windows = windows
        self.mean = np.asarray(mean, np.float32).reshape(1, -1)  # (1, C)
        self.std = np.asarray(std, np.float32).reshape(1, -1)
        if self.mean.shape[1] != len(windows.channels) or self.std.shape != self.mean.shape:
            raise BidmcDataError(
                f"mean/std have {self.mean.shape[1]}/{self.std.shape[1]} entries for "
                f"{len(windows.channels)} channels {windows.channels}"
            )

    def __len__(self) -> int:
        return len(self.windows)

    def features(self, i: int):
        """Item ``i``'s standardised input, a (window, C) float32 tensor."""
        import torch

        x = (self.windows.x[i] - self.mean) / self.std  # (window, C)
        return torch.from_numpy(np.ascontiguousarray(x, np.float32))

    def __getitem__(self, i: int):
        import torch

        return self.features(i), torch.tensor(float(self.windows.y[i]), dtype=torch.float32)
