"""Reading WFDB records (PhysioNet's waveform format) with numpy (no torch, no ``wfdb`` for
the common layouts).

    path = record_path("data/bidmc01.hea")          # -> data/bidmc01
    header = read_header(path)                      # sampling rate, signal names, formats
    n = complete_samples(path, header)              # samples the signal files really hold
    rec = read_record(path, channels=[1, 4], sampto=n)   # physical units, float64
    numerics = signals_by_name(rec)                 # {"HR": (S,), ...}, names cleaned

A record is a text header ``<name>.hea`` and one or more signal files (``.dat``) of
interleaved samples in a WFDB format (:data:`FMT_BYTES`: bytes per sample).
:func:`complete_samples` works out from the files' sizes how many whole frames a truncated
record still holds, so a reader can take those instead of failing. Every problem (missing
header or signal file, unreadable or corrupt data) is a :class:`WfdbError` naming the file;
callers add their own context. Used by the BIDMC training data and the vital-sign monitor.
:class:`SampleReader` reads a record by sample ranges (blocks), so that a stream over a
long record holds one block, not the record (the vital-sign monitor's record source).

**What a header must say** (checked by :func:`read_header`, so every reader refuses the
same records, with a :class:`WfdbError` naming the header and the field):

- a sampling rate that is a plain decimal number in :data:`FS_RANGE` (0.001 Hz to 100 kHz:
  slow numerics up to fast electrophysiology); an omitted rate is WFDB's default of
  250 Hz. (``wfdb`` would read ``-125`` as the default 250 Hz and ``1e9`` as 1 Hz.)
- a name for every signal, and no name twice (compared as the BIDMC names are matched,
  :func:`~liquid_stream.io.bidmc_vocab.channel_key`): a reader that picks channels by name
  would otherwise take the first of two ``II`` without a word.
- the text is UTF-8 (ASCII is a part of it), so a record named ``réc_ü`` reads; ``wfdb``
  itself drops the non-ASCII letters, so such a record needs a format of the fast path.

**The signal file's size must fit its header's format** (:func:`complete_samples`, called
by every reader). With ``L`` frames declared and a format taking ``F`` bytes a frame (its
bytes per sample times the signals in the file), a file needs ``ceil(L * F)`` bytes after
its byte offset. The file is

- *complete* when it holds that, plus less than one frame (or 4 bytes) of padding;
- *of another format* (refused: the samples would be garbage) when it holds more than
  that, or exactly the bytes that another WFDB format would need for the same ``L``
  samples (16-bit data declared format 212 or 80 is longer than declared; 8-bit data
  declared format 16 is exactly half);
- *truncated* otherwise (shorter, e.g. a copy cut off): its whole frames are read, and the
  vital-sign monitor streams them with a warning. A cut that lands exactly on another
  format's size is refused as a format mismatch (the message says it may be a cut).

**Our own reader for the common layout; the ``wfdb`` package for the rest.** The runtime
(the vital-sign app, in the base install) reads records without the ``wfdb`` package, which
pulls pandas, scipy and matplotlib (~320 MB). :func:`read_header` parses single-segment
headers itself, by the header grammar of WFDB's ``header(5)``: the record line ``name
n_sig [fs[/counter_freq[(base_counter)]] [sig_len]]``, the signal lines ``file
fmt[xspf][:skew][+offset] [gain[(baseline)][/units] [adc_res [adc_zero [init_value
[checksum [block_size [description]]]]]]]``, with ``wfdb``'s defaults (250 Hz, gain 200,
baseline = adc_zero or 0, units mV) and types, into a :class:`Record` with the attributes of
a ``wfdb.Record``. It is also faster: ``wfdb.rdheader`` spends ~6 ms a header in its pandas
field table. :func:`read_record` reads whole single-segment records whose signals share
one file in format 16, 61, 80 or 32 (one sample per frame, no skew) with
``numpy.fromfile``, and converts them as ``wfdb`` does, ``(d - baseline) / adc_gain`` in
float64 with the format's invalid value as NaN. Anything else (a multi-segment header or
one with a base time / date, other formats such as 212, several files, part of a record)
goes to ``wfdb.rdheader`` / ``wfdb.rdrecord``, installed with the ``train`` extra; without
it that record is a one-line :class:`WfdbError` naming the extra. Both ways give records
equal to ``wfdb``'s in every attribute (tests/io/test_wfdb_io.py compares every field and the
samples bit for bit). A :class:`SampleReader` reads its ranges the same two ways
(``numpy.fromfile`` at the range's byte offset, or ``wfdb.rdrecord(sampfrom=, sampto=)``).
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np

from .bidmc_vocab import channel_key, strip_name

# bytes per sample of the WFDB formats (to find how much of a truncated .dat is there)
FMT_BYTES = {
    "8": 1,
    "16": 2,
    "61": 2,
    "80": 1,
    "160": 2,
    "24": 3,
    "32": 4,
    "212": 1.5,
    "310": 4 / 3,
    "311": 4 / 3,
}

# the sampling rates a header may state, in Hz (module docstring)
FS_RANGE = (1e-3, 1e5)


class WfdbError(ValueError):
    """A WFDB record that cannot be read (message names the file and why)."""


# a ``wfdb.Record``'s attributes: a record read here has exactly these
RECORD_FIELDS = (
    "record_name",
    "n_sig",
    "fs",
    "counter_freq",
    "base_counter",
    "sig_len",
    "base_time",
    "base_date",
    "comments",
    "sig_name",
    "p_signal",
    "d_signal",
    "e_p_signal",
    "e_d_signal",
    "file_name",
    "fmt",
    "samps_per_frame",
    "skew",
    "byte_offset",
    "adc_gain",
    "baseline",
    "units",
    "adc_res",
    "adc_zero",
    "init_value",
    "checksum",
    "block_size",
)
# the per-signal ones (lists, one entry per signal)
SIGNAL_FIELDS = (
    "file_name",
    "fmt",
    "samps_per_frame",
    "skew",
    "byte_offset",
    "adc_gain",
    "baseline",
    "units",
    "adc_res",
    "adc_zero",
    "init_value",
    "checksum",
    "block_size",
    "sig_name",
)


class Record:
    """A WFDB record (header fields, and ``p_signal`` once read) with the attributes of a
    ``wfdb.Record`` (:data:`RECORD_FIELDS`, None until set)."""

    def __init__(self, **fields):
        for f in RECORD_FIELDS:
            setattr(self, f, fields.get(f))


def _wfdb(path: Path, what: str):
    """The ``wfdb`` package, for a layout this module does not read itself; without it a
    :class:`WfdbError` naming the record and the extra that installs it."""
    try:
        import wfdb
    except ModuleNotFoundError:
        raise WfdbError(
            f"{path}: {what} needs the wfdb package, which the base install leaves out: "
            "pip install 'liquid-stream[train]'"
        ) from None
    return wfdb


def record_path(record: str | Path) -> Path:
    """``dir/bidmc01``, ``dir/bidmc01.hea`` or ``dir/bidmc01.dat`` -> ``dir/bidmc01``."""
    p = Path(record)
    return p.with_suffix("") if p.suffix in (".hea", ".dat") else p


def read_header(path: Path):
    """The header of record ``path`` (a :class:`Record` without samples; module docstring),
    checked: a sampling rate in :data:`FS_RANGE`, every signal named once."""
    hea = path.with_name(path.name + ".hea")
    if not hea.is_file():
        raise WfdbError(f"record not found: {hea} does not exist")
    try:
        text = hea.read_bytes().decode("utf-8", errors="replace")
    except OSError as e:
        raise WfdbError(f"cannot read header {hea}: {e}") from None
    try:
        rec = _parse_header(text)
    except _Fallback:
        wfdb = _wfdb(hea, "a multi-segment header or one with a base time or date")
        try:
            rec = wfdb.rdheader(str(path))
        except Exception as e:  # noqa: BLE001 - wfdb raises many kinds on bad headers
            raise WfdbError(f"cannot read header {hea}: {e}") from None
    except Exception as e:  # noqa: BLE001 - a line that does not parse
        _check_header(hea, text, None)  # a bad rate is named as such
        raise WfdbError(f"cannot read header {hea}: {e}") from None
    _check_header(hea, text, rec)
    return rec


def _check_header(hea: Path, text: str, rec: Record | None) -> None:
    """Refuse a header whose sampling rate is not a plain number in :data:`FS_RANGE` (read
    from the record line itself: ``wfdb``'s expression takes ``-125`` for no rate and
    ``1e9`` for 1), or whose signals are unnamed or named twice (module docstring)."""
    lines, _ = _header_lines(text)
    fields = lines[0].split() if lines else []
    fs_text = fields[2].split("/")[0] if len(fields) > 2 else ""
    if fs_text:  # omitted: WFDB's default rate (250 Hz)
        lo, hi = FS_RANGE
        try:
            fs = float(fs_text)
        except ValueError:
            raise WfdbError(f"{hea}: sampling rate {fs_text!r} is not a number") from None
        if not math.isfinite(fs):
            raise WfdbError(f"{hea}: sampling rate {fs_text!r} is not a finite number")
        if not lo <= fs <= hi:
            raise WfdbError(
                f"{hea}: sampling rate {fs_text} Hz is outside the accepted range "
                f"{lo:g} to {hi:g} Hz"
            )
        if rec is not None and (rec.fs is None or float(rec.fs) != fs):
            raise WfdbError(
                f"{hea}: sampling rate {fs_text!r} is not written as a plain decimal number "
                f"(read as {rec.fs} Hz)"
            )
    names = list(getattr(rec, "sig_name", None) or []) if getattr(rec, "n_sig", 0) else []
    seen: dict[str, int] = {}
    for i, name in enumerate(names):
        if name is None or not strip_name(name):
            raise WfdbError(f"{hea}: signal {i + 1} has no name (every signal must be named)")
        key = channel_key(name)
        if key in seen:
            raise WfdbError(
                f"{hea}: channel {strip_name(name)!r} is named twice (signals {seen[key] + 1} "
                f"and {i + 1}): a record must name each channel once"
            )
        seen[key] = i


class _Fallback(Exception):
    """A layout the fast path leaves to ``wfdb``."""


def _header_lines(text: str) -> tuple[list[str], list[str]]:
    """The header's record and signal lines, and its comment lines (stripped)."""
    lines, comments = [], []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("#"):
            comments.append(line)
        elif line:
            lines.append(line)
    return lines, comments


_NUM = r"\d*\.?\d*"
# the record line's rate field: fs[/counter_freq[(base_counter)]]
_RX_FS = re.compile(rf"(?P<fs>{_NUM})(?:/(?P<cf>-?{_NUM})(?:\((?P<bc>-?{_NUM})\))?)?")
# a signal line's format field: fmt[xspf][:skew][+offset]
_RX_FMT = re.compile(r"(?P<fmt>\d+)(?:x(?P<spf>\d+))?(?::(?P<skew>\d+))?(?:\+(?P<off>\d+))?")
# a signal line's gain field: gain[(baseline)][/units]
_RX_GAIN = re.compile(
    r"(?P<gain>-?[\d.]*(?:e[+-]?\d+)?)(?:\((?P<base>-?\d+)\))?(?:/(?P<units>\S*))?"
)
_RX_INT = re.compile(r"-?\d+")


def _int(s: str | None) -> int | None:
    return int(s) if s else None


def _float(s: str | None) -> float | None:
    return float(s) if s else None


def _parse_header(text: str) -> Record:
    """A single-segment header's ``text`` as ``wfdb.rdheader`` reads it (module docstring:
    the grammar, defaults and types), or :class:`_Fallback` (multi-segment, a base time or
    date). A line that does not parse is a ``ValueError``."""
    lines, comments = _header_lines(text)
    if not lines:
        raise ValueError("no record line")
    head = lines[0].split()
    name, _, n_seg = head[0].partition("/")
    if n_seg or len(head) > 4:
        raise _Fallback
    if len(head) < 2 or not re.fullmatch(r"[-\w]+", name) or not head[1].isdigit():
        raise ValueError("invalid syntax in record line")
    rec = Record(record_name=name, n_sig=int(head[1]), fs=250)
    if len(head) > 2:
        m = _RX_FS.fullmatch(head[2])
        if m is None or m["fs"] in ("", "."):
            raise ValueError("invalid syntax in record line")
        fs = float(m["fs"])
        rec.fs = int(fs) if round(fs, 8) == float(int(fs)) else fs
        rec.counter_freq, rec.base_counter = _float(m["cf"]), _float(m["bc"])
    if len(head) > 3:
        if not head[3].isdigit():
            raise ValueError("invalid syntax in record line")
        rec.sig_len = int(head[3])
    sig: dict[str, list] = {f: [] for f in SIGNAL_FIELDS}
    for line in lines[1:]:
        p = line.split(None, 8)  # file, format, gain, adc_res ... block_size, description
        f = _RX_FMT.fullmatch(p[1]) if len(p) > 1 else None
        g = _RX_GAIN.fullmatch(p[2]) if len(p) > 2 else None
        if f is None or (len(p) > 2 and g is None) or not all(map(_RX_INT.fullmatch, p[3:8])):
            raise ValueError("invalid syntax in signal line")
        gain = _float(g["gain"]) if g else None
        base = _int(g["base"]) if g else None
        adc_zero = _int(p[4]) if len(p) > 4 else None
        sig["file_name"].append(p[0])
        sig["fmt"].append(f["fmt"])
        sig["samps_per_frame"].append(int(f["spf"]) if f["spf"] else 1)
        sig["skew"].append(_int(f["skew"]))
        sig["byte_offset"].append(_int(f["off"]))
        sig["adc_gain"].append(gain or 200.0)  # a gain of 0 means the default too
        sig["baseline"].append(base if base is not None else adc_zero or 0)
        sig["units"].append(g["units"] if g and g["units"] else "mV")
        sig["adc_res"].append(_int(p[3]) if len(p) > 3 else None)
        sig["adc_zero"].append(adc_zero)
        sig["init_value"].append(_int(p[5]) if len(p) > 5 else None)
        sig["checksum"].append(_int(p[6]) if len(p) > 6 else None)
        sig["block_size"].append(_int(p[7]) if len(p) > 7 else None)
        sig["sig_name"].append(p[8] if len(p) > 8 else None)
    if lines[1:]:
        for k, v in sig.items():
            setattr(rec, k, v)
    rec.comments = [c.strip(" \t#") for c in comments]
    return rec


def complete_samples(path: Path, header) -> int | None:
    """Whole samples (frames) in the signal files of ``path``, at most the header's length
    (None: a layout this cannot size, let ``wfdb`` decide). A missing file, or one whose
    size does not fit the header's format (module docstring), is a :class:`WfdbError`."""
    n = int(header.sig_len or 0) or None
    files: dict[str, list[int]] = {}
    for i, f in enumerate(header.file_name or []):
        files.setdefault(f, []).append(i)
    for f, sigs in files.items():
        p = path.with_name(f)
        if not p.is_file():
            raise WfdbError(f"signal file {p} is missing")
        fmt = str(header.fmt[sigs[0]])
        if fmt not in FMT_BYTES or any(str(header.fmt[i]) != fmt for i in sigs):
            continue  # unknown layout: let wfdb decide
        spf = sum((header.samps_per_frame[i] if header.samps_per_frame else 1) or 1 for i in sigs)
        offset = (header.byte_offset[sigs[0]] or 0) if header.byte_offset else 0
        size = p.stat().st_size - offset
        _check_size(p, size, fmt, spf, header.sig_len)
        have = max(0, int(size // (FMT_BYTES[fmt] * spf)))
        n = have if n is None else min(n, have)
    return n


def _check_size(p: Path, size: int, fmt: str, per_frame: int, length: int | None) -> None:
    """Refuse signal file ``p`` (``size`` bytes after its offset, ``per_frame`` samples a
    frame) when it is longer than ``length`` frames of ``fmt`` need, or exactly as long as
    another format would need for them (the rule of the module docstring)."""
    if not length:
        return  # the header gives no length to compare with

    def need(f: str) -> int:
        return math.ceil(length * per_frame * FMT_BYTES[f])

    want = need(fmt)
    slack = max(4, math.ceil(per_frame * FMT_BYTES[fmt]))
    what = f"{length} samples of {per_frame} signal(s) in format {fmt} need {want} bytes"
    if size >= want + slack:
        raise WfdbError(
            f"signal file {p} holds {size} bytes but its header's {what}: the format does "
            "not match the file"
        )
    if size < want:
        other = sorted({f for f in FMT_BYTES if FMT_BYTES[f] != FMT_BYTES[fmt] and need(f) == size})
        if other:
            raise WfdbError(
                f"signal file {p} holds {size} bytes, exactly what format {other[0]} needs, "
                f"but its header's {what}: the format does not match the file (or the file "
                "was cut at exactly that size)"
            )


def read_record(path: Path, channels: list[int] | None = None, sampto: int | None = None):
    """Record ``path`` (``wfdb.Record``: ``p_signal`` in physical units, float64), its
    ``channels`` (indices; None: all) up to sample ``sampto`` (None: the header's length).
    The header and the files' sizes are checked first (:func:`read_header`,
    :func:`complete_samples`)."""
    header = read_header(path)
    complete_samples(path, header)
    try:
        return _read_whole(path, channels, sampto, header)
    except _Fallback:
        pass
    wfdb = _wfdb(path, f"this layout (format {', '.join(sorted(set(header.fmt or [])))})")
    try:
        return wfdb.rdrecord(str(path), channels=channels, sampto=sampto, return_res=64)
    except Exception as e:  # noqa: BLE001 - wfdb raises ValueError/IndexError/OSError
        raise WfdbError(f"cannot read WFDB record {path} ({type(e).__name__}: {e})") from None


# formats the fast path reads: numpy dtype, offset added to the stored value, invalid value
_FAST_FMT = {
    "16": ("<i2", 0, -(2**15)),
    "61": (">i2", 0, -(2**15)),
    "80": ("u1", -128, -(2**7)),
    "32": ("<i4", 0, -(2**31)),
}


def _fast_layout(rec) -> bool:
    """Whether the fast path reads ``rec``'s samples: one signal file in one format of
    :data:`_FAST_FMT`, one sample per frame, no skew, one byte offset."""
    n_sig = int(rec.n_sig or 0)
    return bool(
        n_sig
        and len(set(rec.fmt)) == 1
        and len(set(rec.file_name)) == 1
        and rec.fmt[0] in _FAST_FMT
        and not any(s not in (None, 1) for s in rec.samps_per_frame)
        and not any(rec.skew)
        and len(set(rec.byte_offset)) == 1
    )


def _read_fast(rec, f: Path, channels: list[int], a: int, b: int) -> np.ndarray:
    """Frames ``a`` to ``b`` of ``rec``'s ``channels`` from its signal file ``f``, in
    physical units, float64, NaN for the format's invalid value: ``(d - baseline) /
    adc_gain`` as ``wfdb`` computes it, sample by sample (so any block of frames gives the
    same numbers as the whole record)."""
    dtype, shift, invalid = _FAST_FMT[rec.fmt[0]]
    n_sig = int(rec.n_sig)
    size = np.dtype(dtype).itemsize
    offset = int(rec.byte_offset[0] or 0) + a * n_sig * size
    try:
        d = np.fromfile(f, dtype=dtype, count=(b - a) * n_sig, offset=offset)
    except OSError as e:
        raise WfdbError(f"cannot read signal file {f}: {e}") from None
    if len(d) != (b - a) * n_sig:
        raise WfdbError(f"signal file {f} ends before sample {b}")
    d = d.reshape(b - a, n_sig)[:, channels]
    d = d.astype(np.int64) + shift if shift else d
    nan = d == invalid
    p = d.astype(np.float64)
    np.subtract(p, [rec.baseline[c] for c in channels], p)
    np.divide(p, [rec.adc_gain[c] for c in channels], p)
    p[nan] = np.nan
    return p


def _read_whole(path: Path, channels: list[int] | None, sampto: int | None, rec=None):
    """The whole record ``path`` read with numpy (module docstring), or :class:`_Fallback`.
    ``rec``: its header, already read (it becomes the returned record)."""
    if rec is None:
        try:
            rec = read_header(path)
        except WfdbError:
            raise _Fallback from None  # wfdb gives its own message
    n_sig, n = int(rec.n_sig or 0), rec.sig_len
    if not n or (sampto is not None and sampto != n) or not _fast_layout(rec):
        raise _Fallback
    channels = list(range(n_sig)) if channels is None else [int(c) for c in channels]
    if not channels or any(c < 0 or c >= n_sig for c in channels):
        raise _Fallback
    f = path.with_name(rec.file_name[0])
    need = n * n_sig * np.dtype(_FAST_FMT[rec.fmt[0]][0]).itemsize
    if not f.is_file() or f.stat().st_size - int(rec.byte_offset[0] or 0) < need:
        raise _Fallback  # missing or truncated: wfdb's own error or reading
    p = _read_fast(rec, f, channels, 0, n)
    for field in SIGNAL_FIELDS:  # the signal fields, per read channel (as wfdb arranges them)
        setattr(rec, field, [getattr(rec, field)[c] for c in channels])
    rec.n_sig, rec.p_signal = len(channels), p
    return rec


class SampleReader:
    """Samples of a record's channels read by ranges: ``read(a, b)`` is frames ``a`` to
    ``b`` as ``(b - a, C)`` float64 in physical units, equal bit for bit to the same rows of
    :func:`read_record` (the fast formats are converted by the same code; other layouts
    are read by ``wfdb.rdrecord(sampfrom=a, sampto=b)``). Memory: one range at a time.

    Args:
        path: the record (without extension); ``header``: its :func:`read_header`.
        channels: signal indices, in the column order wanted.
        n: the frames the files hold (:func:`complete_samples`; the end of every range).
    """

    def __init__(self, path: Path, header, channels: list[int], n: int):
        self.path, self.header, self.n = path, header, int(n)
        self.channels = [int(c) for c in channels]
        self._file = path.with_name(header.file_name[0]) if _fast_layout(header) else None

    def read(self, a: int, b: int) -> np.ndarray:
        """Frames ``a`` to ``b`` (``0 <= a <= b <= n``) as ``(b - a, C)`` float64."""
        a, b = int(a), int(min(b, self.n))
        if b <= a:
            return np.zeros((0, len(self.channels)))
        if self._file is not None:
            return _read_fast(self.header, self._file, self.channels, a, b)
        fmts = ", ".join(sorted(set(self.header.fmt or [])))
        wfdb = _wfdb(self.path, f"this layout (format {fmts})")
        try:
            rec = wfdb.rdrecord(
                str(self.path), sampfrom=a, sampto=b, channels=self.channels, return_res=64
            )
        except Exception as e:  # noqa: BLE001 - wfdb raises ValueError/IndexError/OSError
            raise WfdbError(
                f"cannot read WFDB record {self.path} ({type(e).__name__}: {e})"
            ) from None
        return np.asarray(rec.p_signal, dtype=np.float64).reshape(b - a, len(self.channels))


def signals_by_name(rec) -> dict[str, np.ndarray]:
    """``{name: (T,) float64}`` of a read record, names cleaned (``"HR,"`` -> ``"HR"``)."""
    sig = np.asarray(rec.p_signal, dtype=np.float64)
    return {strip_name(c): sig[:, i] for i, c in enumerate(rec.sig_name)}
