"""The streaming vital-sign monitor (``liquid-stream vitals``) on real WFDB records and real
(tiny, untrained) exported ONNX models in onnxruntime."""

from __future__ import annotations

import csv
import json
import math
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/: the fixtures
from fixtures_vitals import (  # noqa: E402
    STATS,
    export_vital_model,
    signals,
    truncate_record,
    write_record,
)

from liquid_stream.apps.vitals.alarms import (  # noqa: E402
    Alarm,
    AlarmRule,
    AlarmSyntaxError,
    check_alarm,
    parse_alarms,
)
from liquid_stream.apps.vitals.model import VitalsError  # noqa: E402
from liquid_stream.apps.vitals.monitor import VitalsMonitor  # noqa: E402
from liquid_stream.apps.vitals.record import RecordSource  # noqa: E402
from liquid_stream.apps.vitals.run import open_record, run_record  # noqa: E402
from liquid_stream.cli import main  # noqa: E402

FS = 125
W = 250  # tiny models' decoder window: 2 s


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("vital_models")
    out = {}
    for target in ("hr", "rr", "spo2"):
        torch_model, meta = export_vital_model(d / f"{target}.onnx", target, seed=1)
        out[target] = (d / f"{target}.onnx", torch_model, meta)
    return out


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    d = tmp_path_factory.mktemp("vital_records")
    return {
        "clean": write_record(d, "bidmc01", seconds=60, numerics_nan_seconds=[30, 31, 32, 33]),
        "gaps": write_record(
            d, "bidmc02", seconds=60, nan_spans=[("PLETH", 20, 1.0), ("II", 40, 5)]
        ),
        "no_ii": write_record(d, "bidmc03", seconds=10, channels=("RESP", "PLETH", "V")),
        "fs250": write_record(d, "bidmc04", seconds=20, fs=250),
        "no_num": write_record(d, "bidmc05", seconds=10, with_numerics=False),
        "short": write_record(d, "bidmc06", seconds=20),
    }


def invoke(*args):
    result = CliRunner().invoke(main, ["vitals", *map(str, args)])
    assert "Traceback" not in result.output, result.output
    return result


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _f(s):
    return float(s)  # "nan" -> nan


# ---------------------------------------------------------------------------- alarms


def test_alarm_parsing():
    r1, r2 = parse_alarms("hr>120, spo2<90")
    assert (r1.vital, r1.op, r1.threshold, r1.hold_s, r1.margin) == ("hr", ">", 120, 5, 5.0)
    assert (r2.vital, r2.op, r2.clear_level) == ("spo2", "<", 92.0)
    (r3,) = parse_alarms(["RR>30:hold=10:margin=4"])
    assert (r3.vital, r3.hold_s, r3.margin, r3.name) == ("rr", 10, 4.0, "rr>30")
    assert parse_alarms("hr>120", hold_s=2)[0].hold_s == 2
    assert parse_alarms(None) == [] and parse_alarms("") == []
    for bad, msg in [
        ("hr", "expected VITAL>NUMBER"),
        ("bp>120", "unknown vital 'bp'"),
        ("hr>=120", "bad operator"),
        ("hr>abc", "expected"),
        ("hr>120:foo=1", "unknown option 'foo'"),
        ("hr>120:hold=x", "bad value"),
        ("hr>120:hold=0", "hold must be"),
        ("hr>120,hr>120", "duplicate"),
    ]:
        with pytest.raises(AlarmSyntaxError, match=msg):
            parse_alarms(bad)


def test_alarm_hysteresis():
    a = Alarm(AlarmRule("hr", ">", 120, hold_s=3, margin=5))
    seq = [
        (121, True),
        (122, True),
        (100, True),  # 2 s above, then below: no alarm
        (121, True),
        (125, True),
        (130, False),  # invalid second restarts the count
        (121, True),
        (121, True),
        (121, True),  # 3 valid seconds above: ON at the 3rd
        (118, True),
        (115, True),
        (math.nan, False),
        (119, True),  # 115..120 holds it
        (114.9, True),  # below 120 - 5: cleared
        (121, True),
        (121, True),
        (121, True),  # again
    ]
    states, events = [], []
    for i, (v, ok) in enumerate(seq):
        ev = a.update(v, ok, i + 1)
        states.append(a.active)
        events.append(ev)
    assert states == [False] * 8 + [True] * 5 + [False] * 3 + [True]
    assert [e for e in events if e] == ["on", "off", "on"]
    assert a.events == [(9, "on"), (14, "off"), (17, "on")]
    assert a.episodes == 2 and a.active_s == 6
    low = Alarm(AlarmRule("spo2", "<", 90, hold_s=1, margin=2))
    assert [low.update(v, True) for v in (89, 91, 92.5)] == ["on", None, "off"]


def test_alarm_check_seconds_episodes_and_the_reference_alarm():
    rule = AlarmRule("hr", ">", 120, hold_s=2, margin=5)
    # a value that crosses 120 for 3 s, then hovers in the hysteresis band 115..120
    refs = [110, 121, 122, 123, 118, 117, math.nan, 119, 116, 114, 110, 110]
    oracle, exact = Alarm(rule), []  # the rule driven by the reference: an exact estimate
    for v in refs:
        oracle.update(v, math.isfinite(v))
        exact.append(oracle.active)
    assert exact == [False, False, True, True, True, True, True, True, True, False, False, False]
    c = check_alarm(rule, exact, refs)
    # per second, the exact estimate is charged its hysteresis seconds as false ...
    assert (c["active_s"], c["true_s"], c["false_s"], c["missed_s"]) == (7, 2, 4, 1)
    assert c["breach_s"] == 3 and (c["episodes"], c["false_episodes"]) == (1, 0)
    # ... and against the same rule on the reference it is exact
    assert (c["ref_active_s"], c["false_vs_ref_s"], c["missed_vs_ref_s"]) == (7, 0, 0)
    # an alarm raised where the reference neither breached nor alarmed: a false episode
    c2 = check_alarm(rule, [True] + [False] * 9 + [True, True], refs)
    assert (c2["episodes"], c2["false_episodes"], c2["false_vs_ref_s"]) == (2, 2, 3)
    # one raised late, in the hysteresis band of the reference's alarm, is not
    c3 = check_alarm(rule, [False] * 4 + [True] * 5 + [False] * 3, refs)
    assert (c3["false_episodes"], c3["false_vs_ref_s"], c3["missed_vs_ref_s"]) == (0, 0, 2)
    assert (c3["true_s"], c3["false_s"]) == (0, 4)  # every second of it "false" per second
    assert check_alarm(rule, [], []) == dict.fromkeys(c, 0)
    with pytest.raises(ValueError, match="3 alarm states but 2 references"):
        check_alarm(rule, [True] * 3, [1.0, 2.0])


# ----------------------------------------------------------------------------- runs


def test_cli_speed_max_csv_rmse_png(models, records, tmp_path):
    paths = [models[t][0] for t in ("spo2", "hr", "rr")]  # any order
    res = invoke(*paths, "--record", records["clean"], "--speed", "max", "--out", tmp_path)
    assert res.exit_code == 0, res.output
    rows = read_csv(tmp_path / "bidmc01_vitals.csv")
    cols = ["time_s"]
    for t in ("hr", "rr", "spo2"):
        cols += [t, f"{t}_valid", f"{t}_status", f"{t}_ref", f"{t}_ref_1hz"]
    assert list(rows[0]) == cols + ["technical"]
    assert {r["technical"] for r in rows} == {""}  # a clean record: no technical alarm
    assert [int(r["time_s"]) for r in rows] == list(range(1, 61))  # one row per second
    for t in ("hr", "rr", "spo2"):
        valid = [int(r[f"{t}_valid"]) for r in rows]
        assert valid == [0] * (W // FS - 1) + [1] * (60 - W // FS + 1)  # after warm-up
        assert {r[f"{t}_status"] for r in rows[: W // FS - 1]} == {"warmup"}
    summary = json.loads((tmp_path / "bidmc01_summary.json").read_text())
    num = RecordSource(records["clean"]).numerics
    for t, ch in (("hr", "HR"), ("rr", "RESP"), ("spo2", "SpO2")):
        # independent recomputation of the references and of RMSE/MAE from the CSV
        est = np.array([_f(r[t]) for r in rows])
        ok = np.array([r[f"{t}_valid"] == "1" for r in rows])
        ref = np.array(
            [
                np.nanmean(num[ch][k - 2 : k]) if np.isfinite(num[ch][k - 2 : k]).any() else np.nan
                for k in range(1, 61)
            ]
        )
        ref[0] = num[ch][0]
        np.testing.assert_allclose([_f(r[f"{t}_ref"]) for r in rows], ref, atol=1e-4)
        np.testing.assert_allclose([_f(r[f"{t}_ref_1hz"]) for r in rows], num[ch][:60], atol=1e-4)
        use = ok & np.isfinite(ref)
        m = summary["metrics"][t]
        assert m["n_window"] == use.sum() == 59 - 3  # seconds 32, 33, 34 have no reference
        assert m["no_ref_window"] == 3 and m["no_ref_1hz"] == 4
        err = est[use] - ref[use]
        assert m["rmse_window"] == pytest.approx(np.sqrt(np.mean(err**2)), rel=1e-5)
        assert m["mae_window"] == pytest.approx(np.mean(np.abs(err)), rel=1e-5)
        assert f"{m['rmse_window']:.2f}" in res.output
    png = (tmp_path / "bidmc01_vitals.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
    assert summary["seconds"] == 60 and summary["chunks"] == 60
    assert "real-time factor" in res.output and "p95" in res.output
    assert summary["latency_ms_p95"] >= summary["latency_ms_mean"] * 0.5 > 0


def _torch_steps(torch_model, record, channels, input_rate=FS):
    import torch

    src = RecordSource(record, channels)
    x = (src.signal - [STATS[c][0] for c in channels]) / [STATS[c][1] for c in channels]
    with torch.no_grad():
        y = torch_model.forward_steps(torch.tensor(x[None], dtype=torch.float32))
    return y[0, :, 0].numpy().astype(np.float64)


def test_streaming_matches_torch_forward_steps(models, records):
    """The app's per-second estimates are the torch model's outputs at the last sample of
    each second, whatever the chunking (1-s chunks from RecordSource, or odd sizes)."""
    path, torch_model, meta = models["hr"]
    ref = _torch_steps(torch_model, records["clean"], meta["channels"])
    at_seconds = ref[FS - 1 :: FS]
    monitor, source = open_record([path], records["clean"])
    result = run_record(monitor, source, speed=None)
    est = np.array([e.values["hr"] for e in result.estimates])
    np.testing.assert_allclose(est, at_seconds, rtol=2e-5, atol=2e-5)

    monitor2 = VitalsMonitor([path], channels=["II", "PLETH"])  # other column order
    x = source.signal[:, [source.channels.index("II"), source.channels.index("PLETH")]]
    got, a, sizes = [], 0, [1, 37, 200, 5, 1000, 125]
    while a < len(x):
        n = sizes[len(got) % len(sizes)]
        got += monitor2.push(x[a : a + n])
        a += n
    got += monitor2.flush()
    np.testing.assert_allclose([e.values["hr"] for e in got], est, rtol=1e-6, atol=1e-6)


def test_gaps_bridged_and_reset(models, records, tmp_path):
    """PLETH NaN 20-21 s (short: interpolated), II NaN 40-45 s (long: reset, re-warm)."""
    res = invoke(
        models["hr"][0],
        models["rr"][0],
        "--record",
        records["gaps"],
        "--speed",
        "max",
        "--out",
        tmp_path,
    )
    assert res.exit_code == 0, res.output
    rows = read_csv(tmp_path / "bidmc02_vitals.csv")
    assert len(rows) == 60
    status = {t: {int(r["time_s"]): r[f"{t}_status"] for r in rows} for t in ("hr", "rr")}
    # windows (k-2, k] covering an interpolated sample (20.0 .. 20.992 s): k = 21, 22
    for t in ("hr", "rr"):
        assert [status[t][k] for k in (20, 21, 22, 23)] == ["ok", "bridged", "bridged", "ok"]
    # hr needs II: seconds 41-45 are the gap, 46 re-warms (1 s of 2), 47 is valid again
    assert [status["hr"][k] for k in range(40, 48)] == ["ok"] + ["gap"] * 5 + ["warmup", "ok"]
    assert all(math.isnan(_f(r["hr"])) for r in rows[40:45])
    assert [status["rr"][k] for k in range(40, 48)] == ["ok"] * 8  # rr does not use II
    gaps = json.loads((tmp_path / "bidmc02_summary.json").read_text())["gaps"]
    assert gaps["hr"] == {"short_gaps": 1, "short_gap_s": 1.0, "long_gaps": 1, "long_gap_s": 5.0}
    assert gaps["rr"] == {"short_gaps": 1, "short_gap_s": 1.0, "long_gaps": 0, "long_gap_s": 0.0}
    assert "1 long, model reset" in res.output

    # after the long gap the model restarts from zero state: equal to a fresh torch run
    _, torch_model, meta = models["hr"]
    src = RecordSource(records["gaps"], meta["channels"])
    import torch

    x = (src.signal[45 * FS :] - [0.5, 0.1]) / [0.2, 0.3]
    with torch.no_grad():
        y = torch_model.forward_steps(torch.tensor(x[None], dtype=torch.float32))[0, :, 0]
    np.testing.assert_allclose(
        [_f(r["hr"]) for r in rows[45:]], y.numpy()[FS - 1 :: FS], rtol=2e-5, atol=2e-5
    )


def test_gap_at_chunk_end_held_then_long(models, tmp_path):
    """A NaN run open at a chunk's end is held back; when it grows past max_gap it becomes
    a long gap; a NaN start of stream is skipped (nothing to interpolate from)."""
    monitor = VitalsMonitor([models["hr"][0]], max_gap_s=1.0)
    sig = signals(10, FS)  # a pulse and an ECG: the signal-quality index passes them
    x = np.stack([sig["PLETH"], sig["II"]], 1)
    x[: FS // 2] = np.nan  # start
    x[3 * FS - 10 : 3 * FS + 50, 0] = np.nan  # 60 samples, across a chunk edge: bridged
    x[6 * FS - 10 : 7 * FS + 20] = np.nan  # 155 samples > 125: long
    out = []
    for k in range(10):
        got = monitor.push(x[k * FS : (k + 1) * FS])
        out += got
        if k == 2:
            assert got == []  # second 3 waits for the gap to close
    out += monitor.flush()
    status = [e.status["hr"] for e in out]
    assert [e.time_s for e in out] == list(range(1, 11))
    # fed from sample 62; the bridged samples 365..424 stay in the 2-s window up to 5 s
    assert status == [
        "warmup",
        "warmup",
        "bridged",
        "bridged",
        "bridged",
        "gap",
        "gap",
        "warmup",
        "warmup",
        "ok",
    ]
    g = monitor.gap_counts()["hr"]
    assert (g["short_gaps"], g["long_gaps"]) == (1, 2)
    # an open gap at the end of the stream is skipped at flush
    m2 = VitalsMonitor([models["hr"][0]])
    sig = signals(3, FS)
    y = np.stack([sig["PLETH"], sig["II"]], 1)
    y[-FS:] = np.nan
    ests = m2.push(y) + m2.flush()
    assert [e.status["hr"] for e in ests] == ["warmup", "ok", "gap"]


def test_alarm_end_to_end(models, records, tmp_path):
    monitor, source = open_record([models["hr"][0]], records["clean"])
    vals = [e.values["hr"] for e in run_record(monitor, source).estimates if e.valid["hr"]]
    thr = min(vals) - 0.5  # always above: triggers after the hold
    alarm = f"hr>{thr:.3f}:hold=3"
    res = invoke(
        models["hr"][0],
        models["rr"][0],
        "--record",
        records["clean"],
        "--speed",
        "max",
        "--no-ui",
        "--alarm",
        alarm,
        "--out",
        tmp_path,
    )
    assert res.exit_code == 0, res.output
    name = f"hr>{float(f'{thr:.3f}'):g}"
    rows = read_csv(tmp_path / "bidmc01_vitals.csv")
    on = [int(r[f"alarm_{name}"]) for r in rows]
    first_valid = W // FS  # second 2
    assert on == [0] * (first_valid + 1) + [1] * (60 - first_valid - 1)  # ON at second 4
    assert f"[     4 s] ALARM {name} ON" in res.output
    s = json.loads((tmp_path / "bidmc01_summary.json").read_text())
    assert s["alarms"][name]["episodes"] == 1 and s["alarms"][name]["active_s"] == 57


# ------------------------------------------------------------------------ bad input


def test_bad_inputs(models, records, tmp_path):
    hr = models["hr"][0]
    cases = [
        ((hr, "--record", tmp_path / "nothere"), "record not found"),
        (
            (hr, "--record", records["no_ii"]),
            "no channel 'II' needed by hr.onnx (it has: RESP, PLETH, V)",
        ),
        ((hr, "--record", records["clean"], "--alarm", "bp>3"), "unknown vital 'bp'"),
        ((hr, "--record", records["clean"], "--alarm", "spo2<90"), "needs a spo2 model"),
        ((hr, hr, "--record", records["clean"]), "two models estimate hr"),
        ((hr, "--record", records["clean"], "--speed", "fast"), "is not a speed"),
        ((tmp_path / "missing.onnx", "--record", records["clean"]), "ONNX model not found"),
    ]
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"not an onnx file")
    cases.append(((junk, "--record", records["clean"]), "not a valid ONNX model"))
    kws = tmp_path / "kws.onnx"
    export_vital_model(kws, "hr", task="kws")
    cases.append(((kws, "--record", records["clean"]), "is a 'kws' model, not a vital-sign"))
    fast = tmp_path / "rr250.onnx"
    export_vital_model(fast, "rr", sample_rate=250)
    cases.append(((hr, fast, "--record", records["clean"]), "different sample rates"))
    nodat = write_record(tmp_path, "bidmc07", seconds=5)
    Path(str(nodat) + ".dat").unlink()
    cases.append(((hr, "--record", nodat), "signal file"))
    for args, msg in cases:
        res = invoke(*args, "--out", tmp_path / "o", "--no-ui")
        assert res.exit_code != 0, (args, res.output)
        assert msg in res.output, (msg, res.output)
        assert isinstance(res.exception, SystemExit)


def test_truncated_record_streams_what_is_there(models, tmp_path):
    rec = write_record(tmp_path, "bidmc08", seconds=20)
    truncate_record(rec, 0.5)  # 3 channels x 2 bytes: 7500 + 1 bytes -> 1250 samples
    res = invoke(
        models["hr"][0], "--record", str(rec) + ".hea", "--speed", "max", "--out", tmp_path / "o"
    )
    assert res.exit_code == 0, res.output
    assert "truncated: the header says 2500 samples (20.0 s), the signal file holds 1250" in (
        res.output
    )
    rows = read_csv(tmp_path / "o" / "bidmc08_vitals.csv")
    assert len(rows) == 10
    assert json.loads((tmp_path / "o" / "bidmc08_summary.json").read_text())["truncated"]


def test_resampled_record_and_no_numerics(models, records, tmp_path):
    res = invoke(models["hr"][0], "--record", records["fs250"], "--speed", "max", "--out", tmp_path)
    assert res.exit_code == 0, res.output
    assert "resampling x1/2" in res.output
    rows = read_csv(tmp_path / "bidmc04_vitals.csv")
    assert len(rows) == 20 and rows[-1]["hr_status"] == "ok"
    # close to the same signal recorded at 125 Hz (the resampler only delays by 80 ms)
    monitor, source = open_record([models["hr"][0]], records["short"])
    ref = [e.values["hr"] for e in run_record(monitor, source).estimates]
    np.testing.assert_allclose([_f(r["hr"]) for r in rows][2:], ref[2:], atol=0.05)

    res = invoke(
        models["hr"][0], "--record", records["no_num"], "--speed", "max", "--out", tmp_path
    )
    assert res.exit_code == 0, res.output
    assert "numerics: none" in res.output and "no RMSE/MAE" in res.output
    rows = read_csv(tmp_path / "bidmc05_vitals.csv")
    assert len(rows) == 10 and all(r["hr_ref"] == "nan" for r in rows)


@pytest.mark.slow
def test_speed_10_paces(models, records, tmp_path):
    t0 = time.perf_counter()
    res = invoke(
        models["hr"][0], "--record", records["short"], "--speed", "10", "--no-ui", "--out", tmp_path
    )
    wall = time.perf_counter() - t0
    assert res.exit_code == 0, res.output
    s = json.loads((tmp_path / "bidmc06_summary.json").read_text())
    assert 1.9 <= s["wall_s"] <= 6.0 and 1.9 <= wall <= 8.0  # 20 s of signal at 10x


def test_dashboard_renders(models, records):
    from rich.console import Console

    from liquid_stream.apps.vitals.cli import Dashboard, sparkline

    monitor, source = open_record(
        [models["hr"][0], models["spo2"][0]], records["short"], alarms="hr>10:hold=1"
    )
    board = Dashboard(monitor, source, 10.0)
    console = Console(file=__import__("io").StringIO(), width=140, force_terminal=False)
    console.print(board)
    result = run_record(monitor, source, None, board.add)
    console.print(board)
    text = console.file.getvalue()
    assert "HR" in text and "SPO2" in text and "hr>10" in text and "t = 20 / 20 s" in text
    assert len(result.estimates) == 20
    assert sparkline([1, 2, 3, math.nan, 8]) == "▁▂▃ █"


@pytest.mark.slow
def test_run_path_imports_no_torch(models, records, tmp_path):
    code = f"""
import sys
from liquid_stream.apps.vitals.cli import vitals_cmd
try:
    vitals_cmd.main([{str(models["hr"][0])!r}, "--record", {str(records["short"])!r},
                     "--speed", "max", "--no-ui", "--out", {str(tmp_path)!r}],
                    standalone_mode=False)
finally:
    print("TORCH_LOADED" if "torch" in sys.modules else "NO_TORCH")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "NO_TORCH" in out.stdout, out.stdout
    assert (tmp_path / "bidmc06_vitals.csv").is_file()


def test_monitor_api_errors(models):
    with pytest.raises(VitalsError, match="at least one model"):
        VitalsMonitor([])
    with pytest.raises(VitalsError, match="channel 'II' needed by hr.onnx is not in the input"):
        VitalsMonitor([models["hr"][0]], channels=["PLETH", "RESP"])
    m = VitalsMonitor([models["hr"][0]])
    with pytest.raises(ValueError, match=r"expected \(T, 2\)"):
        m.push(np.zeros((5, 3)))
    est = m.push({"PLETH": np.full(FS, 0.5), "II": np.full(FS, 0.1)})
    assert [e.time_s for e in est] == [1] and est[0].status == {"hr": "warmup"}


@pytest.mark.slow
@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_sigterm_stops_like_ctrl_c_and_writes_what_was_streamed(models, records, tmp_path, sig):
    """`liquid-stream vitals` paced at real time, stopped by SIGTERM (what systemd, docker
    and `timeout` send) or SIGINT (Ctrl-C) after a few seconds: the same thing either way —
    exit 0, the CSV, plot and summary of the seconds streamed, marked interrupted."""
    import signal

    from fixtures_kws import sigint_default

    out = tmp_path / "out"
    cmd = [
        sys.executable,
        "-m",
        "liquid_stream.cli",
        "vitals",
        str(models["hr"][0]),
        "--record",
        str(records["clean"]),
        "--speed",
        "1",
        "--no-ui",
        "--out",
        str(out),
    ]
    p = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, preexec_fn=sigint_default
    )
    t0 = time.monotonic()
    while p.poll() is None and time.monotonic() - t0 < 8:  # start-up, then a few seconds
        time.sleep(0.1)
    assert p.poll() is None, p.communicate()[0]  # still streaming its 60 s record
    p.send_signal(getattr(signal, sig))
    text, _ = p.communicate(timeout=60)
    assert p.returncode == 0, text
    assert "interrupted: writing what was streamed so far" in text
    summary = json.loads((out / "bidmc01_summary.json").read_text())
    assert summary["interrupted"] is True
    assert 1 <= summary["seconds"] < 60
    rows = read_csv(out / "bidmc01_vitals.csv")
    assert len(rows) == summary["seconds"] and (out / "bidmc01_vitals.png").is_file()


def test_the_run_keeps_every_estimate_exactly_by_column(models, records):
    """``RunResult.estimates`` is an EstimateLog (columns, not one object per second): each
    estimate it gives back equals the one the monitor emitted, field by field (NaN where
    NaN), on a record with long and short gaps, two targets and an alarm that fires."""
    from liquid_stream.apps.vitals.run import EstimateLog

    paths = [models["hr"][0], models["rr"][0]]
    monitor, source = open_record(paths, records["gaps"], alarms="hr>0,rr<1000")
    emitted = []
    result = run_record(monitor, source, speed=None, on_estimate=emitted.append)
    log = result.estimates
    assert isinstance(log, EstimateLog) and len(log) == len(emitted) == 60
    statuses = {s for e in emitted for s in e.status.values()}
    assert {"ok", "gap"} <= statuses and any(e.events for e in emitted)

    def same(a, b) -> bool:
        for f in ("values", "ref", "ref_1hz"):
            x, y = getattr(a, f), getattr(b, f)
            if x.keys() != y.keys() or any(
                not (x[k] == y[k] or (math.isnan(x[k]) and math.isnan(y[k]))) for k in x
            ):
                return False
        rest = ("time_s", "status", "alarms", "events", "technical", "tech_events")
        return all(getattr(a, f) == getattr(b, f) for f in rest)

    assert all(same(a, b) for a, b in zip(log, emitted, strict=True))
    assert same(log[-1], emitted[-1]) and [e.time_s for e in log[5:8]] == [6, 7, 8]
    again = EstimateLog(emitted)
    assert all(same(a, b) for a, b in zip(again, emitted, strict=True))
