"""liquid_stream.io.wfdb's own header parser and sample reader against the ``wfdb`` package.

Every record here is written by ``wfdb.wrsamp`` (or as a header text, for layouts it does
not write) and read both ways: the fast path must give a ``wfdb.Record`` equal to
``wfdb.rdheader`` / ``wfdb.rdrecord``'s in every attribute, samples bit for bit (NaN where
NaN); layouts outside the fast path must still read, through ``wfdb``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

wfdb = pytest.importorskip("wfdb")

from liquid_stream.io import wfdb as lw  # noqa: E402


def same(a, b) -> None:
    va, vb = vars(a), vars(b)
    assert set(va) == set(vb)
    for k, x in va.items():
        y = vb[k]
        if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
            assert isinstance(x, np.ndarray) and isinstance(y, np.ndarray), k
            assert x.dtype == y.dtype and x.shape == y.shape, k
            assert np.array_equal(x, y, equal_nan=True), k
        else:
            assert x == y and type(x) is type(y), (k, x, y)


def write(tmp: Path, name: str, fmt: str, n: int = 500, n_sig: int = 3, seed: int = 0) -> Path:
    """A record of ``n_sig`` channels in ``fmt`` with NaN stretches, odd gains and
    baselines (wrsamp picks them from the signal's range)."""
    if fmt == "61":  # big-endian 16-bit: wrsamp does not write it, so swap a format-16 file
        p = write(tmp, name, "16", n, n_sig, seed)
        dat = p.with_suffix(".dat")
        dat.write_bytes(np.fromfile(dat, "<i2").astype(">i2").tobytes())
        hea = p.with_suffix(".hea")
        hea.write_text(hea.read_text().replace(f"{name}.dat 16 ", f"{name}.dat 61 "))
        return p
    rng = np.random.default_rng(seed)
    t = np.arange(n) / 125.0
    x = np.stack([(1 + i) * np.sin(2 * np.pi * (1 + i) * t) + 300.0 * i for i in range(n_sig)], 1)
    x += 0.01 * rng.normal(size=x.shape)
    x[40:47, 0] = np.nan
    x[n - 3 :, n_sig - 1] = np.nan
    wfdb.wrsamp(
        name,
        fs=125,
        units=["mV", "NU", "mmHg"][:n_sig],
        sig_name=[f"S{i}," for i in range(n_sig)],
        p_signal=x,
        fmt=[fmt] * n_sig,
        write_dir=str(tmp),
    )
    return tmp / name


@pytest.mark.parametrize("fmt", ["16", "61", "80", "32"])
def test_fast_path_equals_wfdb(tmp_path, fmt):
    p = write(tmp_path, f"r{fmt}", fmt)
    rec = lw._read_whole(p, None, None)  # the fast path itself (raises if it would defer)
    same(rec, wfdb.rdrecord(str(p), return_res=64))
    assert np.isnan(rec.p_signal[40:47, 0]).all() and np.isfinite(rec.p_signal[:40]).all()
    same(lw.read_header(p), wfdb.rdheader(str(p)))
    for ch in ([2, 0], [1]):  # a subset, out of order: the fields follow the channels
        same(lw.read_record(p, channels=ch), wfdb.rdrecord(str(p), channels=ch, return_res=64))
    n = lw.read_header(p).sig_len
    same(lw.read_record(p, sampto=n), wfdb.rdrecord(str(p), sampto=n, return_res=64))


def test_bidmc_layout_records_equal_wfdb(tmp_path):
    """The project's own writer (signals and the ``n`` numerics with NaN readings)."""
    from liquid_stream.training.data.vitals.bidmc_sim import simulate_record, write_record

    write_record(tmp_path, "bidmc01", simulate_record(np.random.default_rng(3), minutes=0.7))
    for name in ("bidmc01", "bidmc01n"):
        p = tmp_path / name
        same(lw._read_whole(p, None, None), wfdb.rdrecord(str(p), return_res=64))
        same(lw.read_header(p), wfdb.rdheader(str(p)))


def test_other_layouts_still_read_through_wfdb(tmp_path):
    # format 24 (3-byte samples): not in the fast path
    p = write(tmp_path, "r24", "24")
    with pytest.raises(lw._Fallback):
        lw._read_whole(p, None, None)
    same(lw.read_record(p), wfdb.rdrecord(str(p), return_res=64))
    # part of a record (sampto below the length): wfdb updates checksums and initial values
    q = write(tmp_path, "r16", "16")
    same(lw.read_record(q, sampto=100), wfdb.rdrecord(str(q), sampto=100, return_res=64))
    # a header with a start time and date: wfdb's own parse
    text = q.with_suffix(".hea").read_text().splitlines()
    text[0] += " 10:20:30 01/02/2003"
    (tmp_path / "rdt.hea").write_text("\n".join(text) + "\n")  # the same r16.dat
    r = tmp_path / "rdt"
    same(lw.read_header(r), wfdb.rdheader(str(r)))
    same(lw.read_record(r), wfdb.rdrecord(str(r), return_res=64))
    # comments, a fractional rate, a gain of 0 (= 200) and a missing baseline (= ADC zero)
    lines = [
        "# made by hand",
        "hand 2 62.5 4",
        "hand.dat 16 0 12 5 0 0 0 S0,",
        "hand.dat 16 50/mV 12 3 0 0 0 S1,",
        "# trailing comment",
    ]
    (tmp_path / "hand.hea").write_text("\n".join(lines) + "\n")
    np.asarray([[1, 2], [-32768, 4], [5, -6], [7, 8]], "<i2").tofile(tmp_path / "hand.dat")
    h = tmp_path / "hand"
    same(lw.read_header(h), wfdb.rdheader(str(h)))
    same(lw._read_whole(h, None, None), wfdb.rdrecord(str(h), return_res=64))


def test_truncated_and_missing_files_behave_as_before(tmp_path):
    p = write(tmp_path, "t16", "16", n=400)
    dat = p.with_suffix(".dat")
    dat.write_bytes(dat.read_bytes()[: -6 * 50])  # 50 frames short
    with pytest.raises(lw._Fallback):
        lw._read_whole(p, None, None)
    try:
        expect = wfdb.rdrecord(str(p), return_res=64)
    except Exception:  # noqa: BLE001 - then ours must refuse too, with the file named
        with pytest.raises(lw.WfdbError, match="t16"):
            lw.read_record(p)
    else:
        same(lw.read_record(p), expect)
    n = lw.complete_samples(p, lw.read_header(p))
    assert n == 350
    same(lw.read_record(p, sampto=n), wfdb.rdrecord(str(p), sampto=n, return_res=64))
    dat.unlink()
    with pytest.raises(lw.WfdbError, match="t16"):
        lw.read_record(p)
    with pytest.raises(lw.WfdbError, match="does not exist"):
        lw.read_header(tmp_path / "nothing")
    (tmp_path / "bad.hea").write_text("bad x y\n")
    with pytest.raises(lw.WfdbError, match="bad.hea"):
        lw.read_header(tmp_path / "bad")
