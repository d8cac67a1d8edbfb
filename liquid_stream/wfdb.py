"""Reading WFDB records (PhysioNet's waveform format) through the ``wfdb`` package (no torch).

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

**A faster path for the common layout.** ``wfdb.rdheader`` spends ~6 ms a header looking up
its field table (a pandas frame) once per field and signal, ~60 % of reading a 7-channel
BIDMC record, which a training run over 2997 records pays four times. :func:`read_header`
matches each line with ``wfdb``'s own expressions and applies the same defaults and types
from that table, read once; multi-segment headers go to ``wfdb``. :func:`read_record` reads
whole single-segment records whose signals share one file in format 16, 61, 80 or 32 (one
sample per frame, no skew) with ``numpy.fromfile``, and converts them as ``wfdb`` does,
``(d - baseline) / adc_gain`` in float64 with the format's invalid value as NaN; anything
else (other formats, several files, a file shorter than its header says, part of a
record) goes to ``wfdb.rdrecord``. Both give ``wfdb.Record`` objects equal to ``wfdb``'s
(tests/test_wfdb_io.py compares every field and the samples bit for bit).
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np

from .bidmc_vocab import strip_name

# bytes per sample of the WFDB formats (to find how much of a truncated .dat is there)
FMT_BYTES = {"8": 1, "16": 2, "61": 2, "80": 1, "160": 2, "24": 3, "32": 4, "212": 1.5,
             "310": 4 / 3, "311": 4 / 3}  # fmt: skip


class WfdbError(ValueError):
    """A WFDB record that cannot be read (message names the file and why)."""


def record_path(record: str | Path) -> Path:
    """``dir/bidmc01``, ``dir/bidmc01.hea`` or ``dir/bidmc01.dat`` -> ``dir/bidmc01``."""
    p = Path(record)
    return p.with_suffix("") if p.suffix in (".hea", ".dat") else p


def read_header(path: Path):
    """The header of record ``path`` (``wfdb.Record`` without samples; module docstring)."""
    import wfdb

    hea = path.with_name(path.name + ".hea")
    if not hea.is_file():
        raise WfdbError(f"record not found: {hea} does not exist")
    try:
        return _parse_header(hea.read_text(encoding="ascii", errors="ignore"))
    except _Fallback:
        pass
    except Exception as e:  # noqa: BLE001 - the same message as wfdb's parse would give
        raise WfdbError(f"cannot read header {hea}: {e}") from None
    try:
        return wfdb.rdheader(str(path))
    except Exception as e:  # noqa: BLE001 - wfdb raises many kinds on bad headers
        raise WfdbError(f"cannot read header {hea}: {e}") from None


class _Fallback(Exception):
    """A layout the fast path leaves to ``wfdb``."""


@functools.cache
def _specs() -> tuple[dict, dict]:
    """``{field: (read default, kind)}`` of ``wfdb``'s record and signal fields (kind: int,
    float or str), read once from its field tables."""
    from wfdb.io import _header

    def table(specs) -> dict:
        out = {}
        for field in specs.index:
            types = specs.loc[field, "allowed_types"]
            kind = float if float in types else int if int in types else str
            out[field] = (specs.loc[field, "read_default"], kind)
        return out

    return table(_header.RECORD_SPECS), table(_header.SIGNAL_SPECS)


def _parse_header(text: str):
    """``wfdb.rdheader``'s result for a single-segment header's ``text`` (the same
    expressions, defaults and types; see ``wfdb.io._header``), or :class:`_Fallback`."""
    import wfdb
    from wfdb.io.header import HeaderSyntaxError, parse_header_content, rx_record, rx_signal

    lines, comments = parse_header_content(text)
    rec_specs, sig_specs = _specs()
    m = rx_record.match(lines[0])
    if m is None:
        raise HeaderSyntaxError("invalid syntax in record line")
    fields = m.groupdict()
    if fields["n_seg"] or fields["base_time"] or fields["base_date"]:
        raise _Fallback  # multi-segment, or a date / time to parse: wfdb's own code
    record = wfdb.Record()
    for f, v in fields.items():
        default, kind = rec_specs[f]
        if v == "":
            v = default
        elif kind is not str:
            v = kind(v)
            if f == "fs" and round(v, 8) == float(int(v)):
                v = int(v)
        if f != "n_seg":
            setattr(record, f, v)
    sig: dict[str, list] = {f: [] for f in sig_specs}
    for line in lines[1:]:
        m = rx_signal.match(line)
        if m is None:
            raise HeaderSyntaxError("invalid syntax in signal line")
        g = m.groupdict()
        for f, (default, kind) in sig_specs.items():
            v = g[f]
            if v == "":
                v = default
                if f == "baseline" and g["adc_zero"] != "":
                    v = int(g["adc_zero"])
            elif kind is not str:
                v = kind(v)
                if f == "adc_gain" and v == 0:
                    v = 200.0
            sig[f].append(v)
    if lines[1:]:
        for f, v in sig.items():
            setattr(record, f, v)
    record.comments = [c.strip(" \t#") for c in comments]
    return record


def complete_samples(path: Path, header) -> int | None:
    """Whole samples (frames) in the signal files of ``path``, at most the header's length
    (None: a layout this cannot size, let ``wfdb`` decide). A missing file is a
    :class:`WfdbError`."""
    n = int(header.sig_len or 0) or None
    files: dict[str, list[int]] = {}
    for i, f in enumerate(header.file_name):
        files.setdefault(f, []).append(i)
    for f, sigs in files.items():
        p = path.with_name(f)
        if not p.is_file():
            raise WfdbError(f"signal file {p} is missing")
        fmt = str(header.fmt[sigs[0]])
        spf = header.samps_per_frame[sigs[0]] if header.samps_per_frame else 1
        if fmt not in FMT_BYTES or any(str(header.fmt[i]) != fmt for i in sigs):
            continue  # unknown layout: let wfdb decide
        offset = (header.byte_offset[sigs[0]] or 0) if header.byte_offset else 0
        per_frame = FMT_BYTES[fmt] * len(sigs) * (spf or 1)
        have = max(0, int((p.stat().st_size - offset) // per_frame))
        n = have if n is None else min(n, have)
    return n


def read_record(path: Path, channels: list[int] | None = None, sampto: int | None = None):
    """Record ``path`` (``wfdb.Record``: ``p_signal`` in physical units, float64), its
    ``channels`` (indices; None: all) up to sample ``sampto`` (None: the header's length)."""
    import wfdb

    try:
        return _read_whole(path, channels, sampto)
    except _Fallback:
        pass
    try:
        return wfdb.rdrecord(str(path), channels=channels, sampto=sampto, return_res=64)
    except Exception as e:  # noqa: BLE001 - wfdb raises ValueError/IndexError/OSError
        raise WfdbError(f"cannot read WFDB record {path} ({type(e).__name__}: {e})") from None


# formats the fast path reads: numpy dtype, offset added to the stored value, invalid value
_FAST_FMT = {"16": ("<i2", 0, -(2**15)), "61": (">i2", 0, -(2**15)),
             "80": ("u1", -128, -(2**7)), "32": ("<i4", 0, -(2**31))}  # fmt: skip


def _read_whole(path: Path, channels: list[int] | None, sampto: int | None):
    """The whole record ``path`` read with numpy (module docstring), or :class:`_Fallback`."""
    try:
        rec = read_header(path)
    except WfdbError:
        raise _Fallback from None  # wfdb gives its own message
    n_sig, n = int(rec.n_sig or 0), rec.sig_len
    if not n_sig or not n or (sampto is not None and sampto != n) or len(set(rec.fmt)) != 1:
        raise _Fallback
    if len(set(rec.file_name)) != 1 or rec.fmt[0] not in _FAST_FMT:
        raise _Fallback
    if any(s not in (None, 1) for s in rec.samps_per_frame) or any(rec.skew):
        raise _Fallback
    if len(set(rec.byte_offset)) != 1:
        raise _Fallback
    channels = list(range(n_sig)) if channels is None else [int(c) for c in channels]
    if not channels or any(c < 0 or c >= n_sig for c in channels):
        raise _Fallback
    dtype, shift, invalid = _FAST_FMT[rec.fmt[0]]
    f = path.with_name(rec.file_name[0])
    offset = int(rec.byte_offset[0] or 0)
    need = n * n_sig
    if not f.is_file() or f.stat().st_size - offset < need * np.dtype(dtype).itemsize:
        raise _Fallback  # missing or truncated: wfdb's own error or reading
    d = np.fromfile(f, dtype=dtype, count=need, offset=offset).reshape(n, n_sig)[:, channels]
    d = d.astype(np.int64) + shift if shift else d
    nan = d == invalid
    p = d.astype(np.float64)
    np.subtract(p, [rec.baseline[c] for c in channels], p)
    np.divide(p, [rec.adc_gain[c] for c in channels], p)
    p[nan] = np.nan
    for field in _specs()[1]:  # the signal fields, per read channel (as wfdb arranges them)
        setattr(rec, field, [getattr(rec, field)[c] for c in channels])
    rec.n_sig, rec.p_signal = len(channels), p
    return rec


def signals_by_name(rec) -> dict[str, np.ndarray]:
    """``{name: (T,) float64}`` of a read record, names cleaned (``"HR,"`` -> ``"HR"``)."""
    sig = np.asarray(rec.p_signal, dtype=np.float64)
    return {strip_name(c): sig[:, i] for i, c in enumerate(rec.sig_name)}
