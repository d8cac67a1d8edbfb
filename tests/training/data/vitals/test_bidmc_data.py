"""BIDMC data: WFDB and .ts loaders, splits, the simulator and the NeuroKit2 baseline."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from fixtures_bidmc import SIM_MINUTES, SIM_RECORDS, SIM_SEED, sim_root, ts_text, write_pair

from liquid_stream.training.data.cli import data as data_cli
from liquid_stream.training.data.vitals import bidmc_sim
from liquid_stream.training.data.vitals.bidmc import (
    TARGETS,
    BidmcDataError,
    WindowDataset,
    channel_stats,
    concat_windows,
    find_format,
    list_records,
    load_ts_windows,
    load_wfdb_windows,
    parse_ts,
    read_record,
    split_windows,
)
from liquid_stream.training.data.vitals.bidmc_baseline import (
    baseline_estimates,
    baseline_rmse,
    ppg_peaks,
    rate_in_window,
)

FS = 125
N_SAMPLES = int(SIM_MINUTES * 60 * FS) + 1  # 11251


@pytest.fixture(scope="session")
def sim(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("bidmc") / "sim"
    sim_root(root)
    return root


def _expected_starts(n: int, window: int, hop: int) -> list[int]:
    return list(range(0, n - window + 1, hop))


# ---------------------------------------------------------------------------- WFDB


def test_sim_layout_and_headers(sim: Path) -> None:
    import wfdb

    assert list_records(sim) == [f"bidmc{i:02d}" for i in range(1, SIM_RECORDS + 1)]
    assert find_format(sim) == "wfdb"
    lines = (sim / "RECORDS").read_text().split()
    assert lines[:2] == ["bidmc01", "bidmc01n"]
    h = wfdb.rdheader(str(sim / "bidmc01"))
    assert h.fs == FS and h.sig_len == N_SAMPLES
    assert h.sig_name == ["RESP,", "PLETH,", "V,", "AVR,", "II,"]
    assert h.units == ["NU", "NU", "mV", "mV", "mV"]
    hn = wfdb.rdheader(str(sim / "bidmc01n"))
    assert hn.fs == 1 and hn.sig_name == ["HR,", "PULSE,", "RESP,", "SpO2,"]
    assert hn.units == ["bpm", "bpm", "bpm", "%"]


@pytest.mark.parametrize("target", list(TARGETS))
def test_wfdb_round_trip(sim: Path, target: str) -> None:
    import wfdb

    window, hop = 4000, 250
    w = load_wfdb_windows(sim, target, channels=("II", "PLETH"), window=window, hop=hop)
    starts = _expected_starts(N_SAMPLES, window, hop)
    assert len(starts) == 30
    assert len(w) == SIM_RECORDS * len(starts)
    assert w.x.shape == (len(w), window, 2) and w.x.dtype == np.float32
    assert w.channels == ("II", "PLETH") and w.target == target
    assert sum(w.skipped.values()) == 0
    num_col = ["HR,", "PULSE,", "RESP,", "SpO2,"].index(TARGETS[target][0] + ",")
    for name in list_records(sim):
        rec = wfdb.rdrecord(str(sim / name))
        num = wfdb.rdrecord(str(sim / f"{name}n")).p_signal[:, num_col]
        sel = w.record == name
        assert list(w.start[sel]) == starts
        for j in np.flatnonzero(sel)[::7]:
            s = int(w.start[j])
            # channel order as requested: II is column 4 of the record, PLETH column 1
            np.testing.assert_allclose(w.x[j, :, 0], rec.p_signal[s : s + window, 4], rtol=1e-6)
            np.testing.assert_allclose(w.x[j, :, 1], rec.p_signal[s : s + window, 1], rtol=1e-6)
            secs = num[s // FS : math.ceil((s + window) / FS)]
            assert len(secs) == 32
            assert w.y[j] == pytest.approx(np.nanmean(secs), abs=1e-4)


def test_signal_matches_simulation_to_quantisation(sim: Path) -> None:
    """The written signal equals simulate_record's output up to WFDB's 16-bit step."""
    import wfdb

    rng = np.random.default_rng([SIM_SEED, 1])
    rec = bidmc_sim.simulate_record(rng, SIM_MINUTES)
    sig, fs, num = read_record(sim, "bidmc02", ["RESP", "PLETH", "V", "AVR", "II"])
    assert fs == FS and sig.shape == rec["signals"].shape
    h = wfdb.rdheader(str(sim / "bidmc02"))
    step = 1.0 / np.asarray(h.adc_gain)  # (5,) physical units per digital step
    assert (np.abs(sig - rec["signals"]) <= step * 0.5 + 1e-9).all()
    np.testing.assert_array_equal(num["HR"], rec["numerics"][:, 0])
    np.testing.assert_array_equal(np.isnan(num["SpO2"]), np.isnan(rec["numerics"][:, 3]))
    # numerics are the per-second true values, rounded
    truth = rec["truth"]["hr"][: 90 * FS].reshape(90, FS).mean(axis=1)
    assert np.abs(num["HR"][:90] - truth).max() <= 0.5 + 1e-9


def test_custom_window_hop_and_records(sim: Path) -> None:
    w = load_wfdb_windows(
        sim, "hr", channels=("pleth,",), window=1000, hop=500, records=["bidmc03"]
    )
    assert len(w) == len(_expected_starts(N_SAMPLES, 1000, 500))
    assert set(w.record) == {"bidmc03"} and w.channels == ("pleth,",)


def test_missing_channel(sim: Path) -> None:
    with pytest.raises(BidmcDataError, match=r"bidmc01.*'ABP'.*PLETH,"):
        load_wfdb_windows(sim, "hr", channels=("PLETH", "ABP"))
    with pytest.raises(BidmcDataError, match="unknown BIDMC target"):
        load_wfdb_windows(sim, "bp")


def _custom_record(tmp_path: Path, num_nan=(), sig_nan=(), fs: float = 125, secs: int = 60):
    rng = np.random.default_rng(0)
    n = int(secs * fs)
    sig = rng.standard_normal((n, 2))  # (T, 2)
    for a, b in sig_nan:
        sig[a:b, 1] = np.nan
    num = np.tile(np.array([70.0, 71.0, 15.0, 97.0]), (secs, 1))
    num[:, 0] += np.arange(secs) * 0.5  # HR ramps: labels differ per window
    for a, b in num_nan:
        num[a:b, 0] = np.nan
    write_pair(tmp_path, "bidmc01", sig, ["PLETH,", "II,"], num, fs=fs)
    return sig, num


def test_nan_numerics_and_signal_are_skipped_and_counted(tmp_path: Path) -> None:
    window, hop = 1250, 125  # 10 s windows every second
    sig, num = _custom_record(tmp_path, num_nan=[(20, 32)], sig_nan=[(5000, 5010)])
    w = load_wfdb_windows(tmp_path, "hr", window=window, hop=hop, min_valid=0.5)
    starts = _expected_starts(sig.shape[0], window, hop)
    exp_sig = exp_y = 0
    kept = []
    for s in starts:
        if np.isnan(sig[s : s + window]).any():
            exp_sig += 1
            continue
        secs = num[s // FS : (s + window) // FS, 0]
        if np.isfinite(secs).sum() < 0.5 * len(secs):
            exp_y += 1
            continue
        kept.append((s, np.nanmean(secs)))
    assert exp_sig > 0 and exp_y > 0
    assert w.skipped == {"short_record": 0, "nan_signal": exp_sig, "nan_target": exp_y}
    assert list(w.start) == [s for s, _ in kept]
    np.testing.assert_allclose(w.y, [y for _, y in kept], rtol=1e-6)
    # a partly-NaN window is averaged over its valid seconds
    partial = [j for j, s in enumerate(w.start) if 11 <= s // FS < 20]
    assert partial


def test_short_record_skipped(tmp_path: Path) -> None:
    _custom_record(tmp_path, secs=20)
    w = load_wfdb_windows(tmp_path, "hr")
    assert len(w) == 0 and w.skipped["short_record"] == 1 and w.x.shape == (0, 4000, 2)


def test_wrong_sampling_rate(tmp_path: Path) -> None:
    _custom_record(tmp_path, fs=250)
    with pytest.raises(BidmcDataError, match=r"250 Hz.*expected 125"):
        load_wfdb_windows(tmp_path, "hr")


def test_truncated_dat(sim: Path, tmp_path: Path) -> None:
    for f in ("bidmc01.hea", "bidmc01.dat", "bidmc01n.hea", "bidmc01n.dat"):
        shutil.copy(sim / f, tmp_path / f)
    dat = tmp_path / "bidmc01.dat"
    dat.write_bytes(dat.read_bytes()[:5000])
    with pytest.raises(BidmcDataError, match=r"bidmc01.*truncated"):
        load_wfdb_windows(tmp_path, "hr")
    (tmp_path / "bidmc01.dat").unlink()
    with pytest.raises(BidmcDataError, match="bidmc01"):
        read_record(tmp_path, "bidmc01", ["PLETH"])


def test_no_data(tmp_path: Path) -> None:
    with pytest.raises(BidmcDataError, match="neither"):
        find_format(tmp_path)
    with pytest.raises(BidmcDataError, match="no BIDMC WFDB records"):
        load_wfdb_windows(tmp_path, "hr")


# ---------------------------------------------------------------------------- .ts


def _ts_data(n: int = 5, length: int = 40):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((n, 2, length)).round(4)  # (n, C, L)
    y = rng.uniform(60, 100, n).round(3)
    return x, y


def test_parse_ts(tmp_path: Path) -> None:
    x, y = _ts_data()
    x[1, 0, 3] = np.nan
    y[3] = np.nan
    p = tmp_path / "BIDMC32HR_TRAIN.ts"
    p.write_text(ts_text(x, y))
    xs, ys, header = parse_ts(p)
    assert xs.shape == (5, 2, 40) and ys.shape == (5,)
    np.testing.assert_array_equal(np.isnan(xs), np.isnan(x))
    np.testing.assert_allclose(xs[~np.isnan(xs)], x[~np.isnan(x)])
    np.testing.assert_array_equal(np.isnan(ys), np.isnan(y))
    assert header["problemname"] == "BIDMC32HR" and header["dimensions"] == 2
    assert header["serieslength"] == 40 and header["equallength"] is True


def test_parse_ts_errors(tmp_path: Path) -> None:
    x, y = _ts_data()
    p = tmp_path / "bad.ts"
    p.write_text(ts_text(x, y).replace("@dimensions 2", "@dimensions 3"))
    with pytest.raises(BidmcDataError, match="header says 3"):
        parse_ts(p)
    p.write_text(ts_text(x, y).replace("@seriesLength 40", "@seriesLength 4000"))
    with pytest.raises(BidmcDataError, match="seriesLength"):
        parse_ts(p)
    p.write_text(ts_text(x, y).replace("@data\n", ""))
    with pytest.raises(BidmcDataError):
        parse_ts(p)


def test_load_ts_windows_and_splits(tmp_path: Path) -> None:
    x, y = _ts_data(6)
    x[2, 1, 0] = np.nan
    d = tmp_path / "BIDMC32RR"
    d.mkdir()
    (d / "BIDMC32RR_TRAIN.ts").write_text(ts_text(x, y, "BIDMC32RR"))
    (d / "BIDMC32RR_TEST.ts").write_text(ts_text(x[:3], y[:3], "BIDMC32RR"))
    assert find_format(tmp_path) == "ts"
    tr, te = load_ts_windows(tmp_path, "rr")
    assert len(tr) == 5 and len(te) == 2
    assert tr.skipped == {"nan_signal": 1, "nan_target": 0}
    assert tr.channels == ("PLETH", "II") and tr.x.shape == (5, 40, 2)
    assert list(tr.record) == ["TRAIN0", "TRAIN1", "TRAIN3", "TRAIN4", "TRAIN5"]
    assert (tr.start == -1).all()
    np.testing.assert_allclose(tr.x[1, :, 1], x[1, 1], rtol=1e-6)
    both = concat_windows(tr, te)
    with pytest.raises(BidmcDataError, match="no record ids"):
        split_windows(both, "record")
    a, b, c = split_windows(both, "shuffled")
    assert (len(a), len(b), len(c)) == (4, 1, 2)
    with pytest.raises(BidmcDataError, match="BIDMC32HR_TRAIN.ts not found"):
        load_ts_windows(tmp_path, "hr")


# ---------------------------------------------------------------------------- splits


def test_record_split(sim: Path) -> None:
    w = load_wfdb_windows(sim, "hr", hop=500)
    for seed in (0, 1, 2):
        parts = split_windows(w, "record", seed=seed)
        sets = [set(p.record) for p in parts]
        assert all(sets) and not (sets[0] & sets[1] or sets[0] & sets[2] or sets[1] & sets[2])
        assert sum(len(p) for p in parts) == len(w)
    one = w.subset(np.flatnonzero(w.record != "bidmc01"))
    with pytest.raises(BidmcDataError, match="at least 3 records"):
        split_windows(one, "record")


def test_evaluation_loads_only_the_scored_split(tmp_path: Path) -> None:
    # records of different lengths with NaN signal and NaN targets, so that dropped windows
    # change the per-record counts the record split balances: ``only`` must give the same
    # splits, with the samples of the one asked for and an index of the others
    from liquid_stream.training.tasks import bidmc_windows, build_bidmc

    rng = np.random.default_rng(4)
    for i in range(1, 8):
        secs = 40 + 7 * i
        sig = rng.standard_normal((secs * FS, 2))
        if i % 2:
            sig[1000 * i : 1000 * i + 20, i % 2] = np.nan
        num = np.tile(np.array([60.0 + i, 61.0, 14.0, 97.0]), (secs, 1))
        num[:, 0] += np.arange(secs) * 0.25
        if i % 3 == 0:
            num[5 : 5 + 3 * i, 0] = np.nan
        write_pair(tmp_path, f"bidmc{i:02d}", sig, ["PLETH,", "II,"], num)
    d = {**build_bidmc.data_defaults, "root": str(tmp_path), "window": 1250, "hop": 125}
    full = bidmc_windows(d, 0)[2:]
    assert all(len(w) for w in full) and full[0].skipped["nan_signal"] > 0
    assert full[0].skipped["nan_target"] > 0
    for k, only in enumerate(("train", "val", "test")):
        got = bidmc_windows(d, 0, only=only)[2:]
        for j, (a, b) in enumerate(zip(full, got, strict=True)):
            assert list(b.record) == list(a.record) and b.skipped == a.skipped
            np.testing.assert_array_equal(b.start, a.start)
            np.testing.assert_array_equal(b.y, a.y)
            if j == k:
                np.testing.assert_array_equal(b.x, a.x)
            else:
                assert b.x.shape == (len(a), 0, 2)
    # the shuffled protocol shares records between splits: everything is loaded
    shuffled = bidmc_windows({**d, "protocol": "shuffled"}, 0, only="test")[2:]
    assert all(w.x.shape[1] == 1250 for w in shuffled)
    with pytest.raises(BidmcDataError, match="non-empty"):
        channel_stats(bidmc_windows(d, 0, only="test")[2].x)
    with pytest.raises(ValueError, match="only must be"):
        bidmc_windows(d, 0, only="tests")


def test_record_split_fractions() -> None:
    # 20 fake records of 10 windows: counts come out 140 / 30 / 30
    from liquid_stream.training.data.vitals.bidmc import Windows

    n = 200
    w = Windows(
        x=np.zeros((n, 4, 1), np.float32),
        y=np.arange(n, dtype=np.float32),
        record=np.repeat([f"bidmc{i:02d}" for i in range(20)], 10),
        start=np.tile(np.arange(10) * 250, 20),
        channels=("PLETH",),
        target="hr",
    )
    parts = split_windows(w, "record", seed=3)
    assert [len(p) for p in parts] == [140, 30, 30]


def test_shuffled_split(sim: Path) -> None:
    w = load_wfdb_windows(sim, "rr", hop=500)
    n = len(w)
    a = split_windows(w, "shuffled", seed=0)
    b = split_windows(w, "shuffled", seed=0)
    c = split_windows(w, "shuffled", seed=1)
    assert [len(p) for p in a] == [int(0.7 * n), int(0.15 * n), n - int(0.7 * n) - int(0.15 * n)]
    for p, q in zip(a, b, strict=True):
        np.testing.assert_array_equal(p.y, q.y)
        np.testing.assert_array_equal(p.start, q.start)
    assert not np.array_equal(a[0].start, c[0].start) or not np.array_equal(
        a[0].record, c[0].record
    )
    keys = {(r, s) for p in a for r, s in zip(p.record, p.start, strict=True)}
    assert len(keys) == n
    with pytest.raises(BidmcDataError, match="unknown split protocol"):
        split_windows(w, "random")


def test_channel_stats_and_dataset(sim: Path) -> None:
    import torch

    w = load_wfdb_windows(sim, "spo2", hop=1000)
    mean, std = channel_stats(w.x)
    assert len(mean) == len(std) == 2
    flat = w.x.reshape(-1, 2).astype(np.float64)
    np.testing.assert_allclose(mean, flat.mean(0), rtol=1e-6)
    np.testing.assert_allclose(std, flat.std(0), rtol=1e-6)
    ds = WindowDataset(w, mean, std)
    x, y = ds[3]
    assert len(ds) == len(w)
    assert x.shape == (4000, 2) and x.dtype == torch.float32 and y.shape == ()
    np.testing.assert_allclose(x.numpy(), (w.x[3] - np.float32(mean)) / np.float32(std), 1e-5)
    assert float(y) == pytest.approx(float(w.y[3]))
    xn = np.full((2, 5, 1), np.nan)
    xn[0, :, 0] = [1, 2, 3, 4, 5]
    m, s = channel_stats(xn)
    assert m == [3.0] and s[0] == pytest.approx(np.std([1, 2, 3, 4, 5]))


# ---------------------------------------------------------------------------- simulator + baseline


def test_simulator_deterministic_and_ranges() -> None:
    a = bidmc_sim.simulate_record(np.random.default_rng([0, 5]), 0.6)
    b = bidmc_sim.simulate_record(np.random.default_rng([0, 5]), 0.6)
    np.testing.assert_array_equal(a["signals"], b["signals"])
    assert a["signals"].shape == (int(0.6 * 60 * FS) + 1, 5) and a["numerics"].shape == (37, 4)
    p = a["params"]
    assert 55 <= p["hr0"] <= 120 and 8 <= p["rr0"] <= 30 and 88 <= p["spo2_0"] <= 100
    assert np.isfinite(a["signals"]).all()


def test_simulator_numerics_match_signal_and_baseline(sim: Path) -> None:
    """HR from the simulated ECG (and PPG) and RR from RESP agree with the numerics."""
    w = load_wfdb_windows(sim, "hr", hop=500)
    hr = baseline_estimates(sim, w, "hr")
    err = np.abs(hr - w.y)
    assert np.mean(err < 2.0) >= 0.9, err
    # PPG alone (the model's PLETH input) also carries the rate
    pk = {r: ppg_peaks(read_record(sim, r, ["PLETH"])[0][:, 0], FS) for r in list_records(sim)}
    ppg = np.array(
        [
            rate_in_window(pk[r], s, 4000, FS, 3, (25, 250))
            for r, s in zip(w.record, w.start, strict=True)
        ]
    )
    assert np.mean(np.abs(ppg - w.y) < 4.0) >= 0.8
    wr = load_wfdb_windows(sim, "rr", hop=500)
    rr = baseline_estimates(sim, wr, "rr")
    assert np.mean(np.abs(rr - wr.y) < 2.0) >= 0.8
    m = baseline_rmse(rr, wr.y)
    assert m["n_valid"] + m["n_failed"] == len(wr) and m["rmse"] >= m["mae"]
    assert np.isnan(baseline_estimates(sim, wr, "spo2")).all()


def test_baseline_on_recordless_windows(sim: Path) -> None:
    """.ts-like windows (start -1): HR from the window's II/PLETH, RR from PPG modulation."""
    from liquid_stream.training.data.vitals.bidmc import Windows

    out = {}
    for target in ("hr", "rr"):
        w = load_wfdb_windows(sim, target, hop=2000)
        tsw = Windows(
            x=w.x,
            y=w.y,
            record=np.array([f"TRAIN{i}" for i in range(len(w))]),
            start=np.full(len(w), -1),
            channels=w.channels,
            target=target,
        )
        out[target] = (baseline_estimates(None, tsw, target), w.y)
    hr, y = out["hr"]
    assert np.nanmean(np.abs(hr - y) < 3.0) >= 0.8
    rr, y = out["rr"]
    assert np.mean(np.abs(rr - y) < 4.0) >= 0.5


def test_ensure_cache_and_cli(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("LIQUID_STREAM_CACHE", str(tmp_path / "cache"))
    root = bidmc_sim.ensure_bidmc_sim(records=1, minutes=0.6, seed=3, progress=False)
    assert root == tmp_path / "cache" / "bidmc-sim-r1-m0.6-s3"
    stamp = (root / bidmc_sim.STAMP_NAME).stat().st_mtime_ns
    assert bidmc_sim.ensure_bidmc_sim(records=1, minutes=0.6, seed=3, progress=False) == root
    assert (root / bidmc_sim.STAMP_NAME).stat().st_mtime_ns == stamp
    assert not [p for p in root.parent.iterdir() if ".tmp-" in p.name]

    out = tmp_path / "cli"
    args = ["bidmc-sim", str(out), "--records", "1", "--minutes", "0.6"]
    res = CliRunner().invoke(data_cli, args)
    assert res.exit_code == 0, res.output
    assert "wrote 1 record pairs" in res.output
    assert list_records(out) == ["bidmc01"]
    res = CliRunner().invoke(data_cli, args)
    assert res.exit_code != 0 and "--force" in res.output
    res = CliRunner().invoke(data_cli, [*args, "--force"])
    assert res.exit_code == 0, res.output
