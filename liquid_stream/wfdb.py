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
"""

from __future__ import annotations

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
    """The header of record ``path`` (``wfdb.Record`` without samples)."""
    import wfdb

    hea = path.with_name(path.name + ".hea")
    if not hea.is_file():
        raise WfdbError(f"record not found: {hea} does not exist")
    try:
        return wfdb.rdheader(str(path))
    except Exception as e:  # noqa: BLE001 - wfdb raises many kinds on bad headers
        raise WfdbError(f"cannot read header {hea}: {e}") from None


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
        return wfdb.rdrecord(str(path), channels=channels, sampto=sampto, return_res=64)
    except Exception as e:  # noqa: BLE001 - wfdb raises ValueError/IndexError/OSError
        raise WfdbError(f"cannot read WFDB record {path} ({type(e).__name__}: {e})") from None


def signals_by_name(rec) -> dict[str, np.ndarray]:
    """``{name: (T,) float64}`` of a read record, names cleaned (``"HR,"`` -> ``"HR"``)."""
    sig = np.asarray(rec.p_signal, dtype=np.float64)
    return {strip_name(c): sig[:, i] for i, c in enumerate(rec.sig_name)}
