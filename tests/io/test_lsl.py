"""Live input and output over Lab Streaming Layer (liquid_stream/io/lsl.py, apps/vitals/lsl.py,
``vitals --lsl``, ``data lsl-replay``) with the real liblsl, kept on this machine.

The module points LSLAPICFG at the machine-local config (resolve scope ``machine``, IPv6
off, known peer 127.0.0.1) before liblsl starts and turns onnxruntime's telemetry off, so
nothing here reaches another address (checked with ``strace -f -e trace=connect,sendto``).
Every stream name is unique to the run (other tests may publish streams at the same time).
"""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from liquid_stream.io import lsl

os.environ[lsl.CONFIG_ENV] = str(lsl.write_config(lsl.local_config_path()))  # before liblsl
# onnxruntime >= 1.29 on Linux sends telemetry (DNS for mobile.events.data.microsoft.com)
# unless this is set before its first session: off, so these tests reach no other address.
os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")

import pylsl  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the fixtures
from fixtures_vitals import export_vital_model, write_record  # noqa: E402

from liquid_stream.apps.vitals.lsl import open_lsl, run_lsl  # noqa: E402
from liquid_stream.apps.vitals.model import VitalsError  # noqa: E402
from liquid_stream.apps.vitals.record import RecordSource  # noqa: E402
from liquid_stream.apps.vitals.run import open_record, run_record  # noqa: E402
from liquid_stream.cli import main  # noqa: E402
from liquid_stream.io.bidmc_vocab import SIGNALS, signal_channel  # noqa: E402

SPEED = 20.0  # replays run 20x real time: a 30-s record in 1.5 s
TIMEOUT = 10.0


def unique(stem: str) -> str:
    return f"lstest-{stem}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("lsl_models")
    for target in ("hr", "rr"):
        export_vital_model(d / f"{target}.onnx", target, seed=1)
    return [d / "hr.onnx", d / "rr.onnx"]


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    d = tmp_path_factory.mktemp("lsl_records")
    return {
        # a short gap in PLETH (bridged) and a long one in II (model reset): NaN over LSL
        "125": write_record(
            d, "bidmc01", seconds=30, nan_spans=[("PLETH", 10, 1.0), ("II", 18, 4)]
        ),
        "250": write_record(d, "bidmc04", seconds=30, fs=250),
        "short": write_record(d, "bidmc06", seconds=4),
    }


class Replay:
    """``replay_record`` in a thread (waiting for its first consumer); ``stop()`` ends it."""

    def __init__(self, record, name, **kw):
        self.stop_event = threading.Event()
        self.report, self.error = None, None
        kw.setdefault("speed", SPEED)
        kw.setdefault("wait_for_consumer", TIMEOUT)

        def run():
            try:
                self.report = lsl.replay_record(record, name=name, stop=self.stop_event, **kw)
            except BaseException as e:  # noqa: BLE001 - reported by the test
                self.error = e

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def stop(self):
        self.stop_event.set()
        self.thread.join(TIMEOUT)
        assert not self.thread.is_alive()
        return self.report


def expected_run(models, record):
    """The record-replay path (``vitals --record``): VitalsMonitor on the record's file."""
    monitor, source = open_record(models, record)
    return run_record(monitor, source, speed=None)


def table(estimates, targets):
    values = np.array([[e.values[t] for t in targets] for e in estimates])
    status = [[e.status[t] for t in targets] for e in estimates]
    return [e.time_s for e in estimates], values, status


def pull_all(inlet, n, timeout=TIMEOUT):
    """``n`` samples of a plain inlet (or what came within ``timeout``)."""
    xs, tss, deadline = [], [], time.monotonic() + timeout
    while sum(map(len, tss)) < n and time.monotonic() < deadline:
        x, ts = inlet.pull_chunk(timeout=0.05, max_samples=1024, as_numpy=True)
        if len(ts):
            xs.append(np.asarray(x, np.float64).reshape(len(ts), -1))
            tss.append(np.asarray(ts))
    if not xs:
        return np.zeros((0, 0)), np.zeros(0)
    return np.concatenate(xs), np.concatenate(tss)


# ------------------------------------------------------------- live path == record path


@pytest.mark.parametrize(
    "rec, rename, block_s",
    [
        ("125", None, 1.0),  # the record's own labels, the models' rate, with NaN gaps
        ("250", {"PLETH": "PPG", "II": "ECG"}, 1.0),  # another rate (resampled), other labels
        ("250", {"PLETH": "PPG", "II": "ECG"}, 0.0),  # each arrival pushed at once
    ],
)
@pytest.mark.slow
def test_live_estimates_equal_the_record_path_and_are_published(
    models, records, rec, rename, block_s
):
    expected = expected_run(models, records[rec])
    src, out = unique("src"), unique("out")
    targets = expected.targets
    with lsl.LslPublisher(out, targets, expected.units, source=src) as pub:
        est_inlet, est_info = lsl.open_inlet(out, TIMEOUT)  # connected before any estimate
        replay = Replay(records[rec], src, rename=rename)
        monitor, reader = open_lsl(models, src, timeout=TIMEOUT)
        try:
            assert reader.rate == float(rec) and reader.total_samples == int(rec) * 30
            for ch, label in (rename or {}).items():
                assert reader.labels[reader.channels.index(ch)] == label
            assert (monitor.resampler is not None) == (rec != "125")
            result = run_lsl(monitor, reader, pub, block_s=block_s)
        finally:
            reader.close()
            report = replay.stop()
        published, stamps = pull_all(est_inlet, len(result.estimates))
        est_inlet.close_stream()
    assert replay.error is None and report.samples == int(rec) * 30 and not report.stopped
    assert result.error is None and result.duration_s == pytest.approx(30.0)

    t_exp, v_exp, s_exp = table(expected.estimates, targets)
    t_got, v_got, s_got = table(result.estimates, targets)
    assert t_got == t_exp == list(range(1, 31))
    assert s_got == s_exp
    assert {"ok", "warmup"} <= {s for row in s_got for s in row}
    if block_s:  # the chunks of the record path: the same numbers, bit for bit
        assert np.array_equal(v_got, v_exp, equal_nan=True)
    else:
        # other chunk boundaries: the float32 graph sums the same terms in another order
        # (OnnxStreamer: "exactly, up to float32 rounding"); a few ulps of ~75 bpm.
        np.testing.assert_allclose(v_got, v_exp, rtol=1e-5, atol=0)
        assert not np.array_equal(v_got, np.zeros_like(v_got))

    # the published stream: one sample per estimate, NaN where not valid, labels + units
    ok = np.array([[s == "ok" for s in row] for row in s_got])
    assert published.shape == (30, len(targets))
    assert np.array_equal(published, np.where(ok, v_got, np.nan), equal_nan=True)
    assert np.all(np.diff(stamps) > 0)
    assert lsl.stream_labels(est_info) == [lsl.ESTIMATE_LABELS[t] for t in targets]
    assert lsl.stream_units(est_info) == [expected.units[t] for t in targets]
    assert est_info.nominal_srate() == 1.0 and est_info.channel_count() == len(targets)


@pytest.mark.slow
def test_vitals_cli_lsl_equals_vitals_record(models, records, tmp_path):
    rec = records["250"]
    src, out = unique("cli"), unique("cli-out")
    runner = CliRunner()
    base = [*map(str, models), "--no-ui", "--alarm", "hr>80"]
    ref = runner.invoke(
        main,
        ["vitals", *base, "--record", str(rec), "--speed", "max", "--out", str(tmp_path / "rec")],
    )
    assert ref.exit_code == 0, ref.output
    replay = Replay(rec, src, rename={"PLETH": "PPG", "II": "ECG"})
    res = runner.invoke(
        main,
        [
            "vitals",
            *base,
            "--lsl",
            src,
            "--lsl-out",
            out,
            "--lsl-timeout",
            str(TIMEOUT),
            "--out",
            str(tmp_path / "lsl"),
        ],
    )
    replay.stop()
    assert res.exit_code == 0, res.output
    assert "Traceback" not in res.output
    assert f"LSL stream '{src}' at 250 Hz: RESP, PLETH <- 'PPG', II <- 'ECG'" in res.output
    assert "resampling x1/2" in res.output and "end: stream complete" in res.output
    assert f"publishing the estimates as LSL stream '{out}'" in res.output
    assert "[    30 s] hr " in res.output

    def rows(path):
        with open(path, newline="") as f:
            return list(csv.DictReader(f))

    a = rows(tmp_path / "rec" / "bidmc04_vitals.csv")
    b = rows(tmp_path / "lsl" / f"lsl-{src}_vitals.csv")
    cols = ["time_s", "hr", "hr_status", "rr", "rr_status", "alarm_hr>80"]
    assert len(a) == len(b) == 30
    assert [[r[c] for c in cols] for r in b] == [[r[c] for c in cols] for r in a]
    summary = json.loads((tmp_path / "lsl" / f"lsl-{src}_summary.json").read_text())
    assert summary["lsl"]["channels"] == {"RESP": "RESP", "PLETH": "PPG", "II": "ECG"}
    assert summary["lsl"]["published_samples"] == 30 and summary["resampled"]
    assert (
        summary["alarms"]
        == json.loads((tmp_path / "rec" / "bidmc04_summary.json").read_text())["alarms"]
    )


@pytest.mark.slow
def test_vitals_cli_lsl_without_model_uses_the_shipped_models_for_the_channels(records, tmp_path):
    src = unique("shipped")
    replay = Replay(records["short"], src, rename={"PLETH": "pleth", "II": "Fp1"})
    res = CliRunner().invoke(
        main,
        ["vitals", "--lsl", src, "--lsl-timeout", str(TIMEOUT), "--no-ui", "--out", str(tmp_path)],
    )
    replay.stop()
    assert res.exit_code == 0, res.output
    # (the record's RESP gives the RR)
    assert "no MODEL given: the shipped models vitals-ppg-hr, vitals-resp-rr" in res.output
    assert "ignored: 'Fp1'" in res.output and "[     4 s] hr" in res.output


@pytest.mark.slow
def test_vitals_cli_lsl_adds_the_spo2_model_for_an_oximeter_stream(tmp_path):
    """A live stream labelled like an oximeter's raw channels ("SpO2 IR", "SpO2 red") beside
    its PPG: with no MODEL the app adds the shipped SpO2 model and emits SpO2 estimates."""
    from liquid_stream.training.data.vitals.bidmc_sim import write_record as write_sim
    from liquid_stream.training.data.vitals.vitals_sim import simulate_randomised

    rec = simulate_randomised(np.random.default_rng([22, 0]), 0.6, force={"sensor_off": []})
    write_sim(tmp_path, "bidmc01", rec)
    src = unique("oximeter")
    replay = Replay(
        tmp_path / "bidmc01", src, rename={"IR": "SpO2 IR", "RED": "spo2_red", "II": "Fp1"}
    )
    res = CliRunner().invoke(
        main,
        [
            "vitals",
            "--lsl",
            src,
            "--lsl-timeout",
            str(TIMEOUT),
            "--no-ui",
            "--out",
            str(tmp_path / "out"),
        ],
    )
    replay.stop()
    assert res.exit_code == 0, res.output
    assert (
        "no MODEL given: the shipped models vitals-ppg-hr, vitals-resp-rr, vitals-oximeter-spo2"
    ) in res.output
    got = [float(v) for v in re.findall(r"spo2 ([0-9.]+) % \(ok\)", res.output)]
    truth = rec["truth"]["spo2"][-32 * 125 :].mean()  # the last estimate's 32 s window
    assert len(got) >= 3 and abs(got[-1] - truth) <= 2.0, (got[-3:], truth)


# ------------------------------------------------------------------ labels and errors


def test_label_mapping():
    for label, ch in [
        ("PPG", "PLETH"),
        ("pleth", "PLETH"),
        ("PLETH,", "PLETH"),
        ("BVP", "PLETH"),
        ("ECG", "II"),
        ("ECG II", "II"),
        ("ecg_ii", "II"),
        ("II", "II"),
        ("Lead II", "II"),
        ("resp", "RESP"),
        ("RESP", "RESP"),
        ("Respiration", "RESP"),
        ("Fp1", None),
        ("V", None),
        ("AVR", None),
        ("ECG I", None),
        ("", None),
    ]:
        assert signal_channel(label) == ch, label
    assert lsl.map_labels(["EEG", "PPG", "ECG", "x"]) == {1: "PLETH", 2: "II"}
    # a channel named twice: the label spelled like the channel wins, else the first
    assert lsl.map_labels(["PPG", "ECG", "PLETH", "II lead"]) == {1: "II", 2: "PLETH"}
    assert lsl.map_labels(["ppg", "BVP"]) == {0: "PLETH"}
    assert set(SIGNALS) == {"PLETH", "II", "RESP", "IR", "RED"}
    assert lsl.map_labels(["SpO2 IR", "spo2_red", "PPG"]) == {0: "IR", 1: "RED", 2: "PLETH"}


def _outlet(name, labels=None, rate=125.0, fmt=None, n=2):
    info = pylsl.StreamInfo(name, "Test", n, rate, fmt or pylsl.cf_float32, name)
    if labels:
        chans = info.desc().append_child("channels")
        for lab in labels:
            chans.append_child("channel").append_child_value("label", lab)
    return pylsl.StreamOutlet(info)


@pytest.mark.parametrize(
    "labels, rate, fmt, message",
    [
        (
            ["Fp1", "Fp2"],
            125.0,
            None,
            "has no channel the vital-sign models read (PLETH / II "
            "/ RESP / IR / RED, or PPG, ECG, Resp ...): its 2 channel(s) are labelled 'Fp1', 'Fp2'",
        ),
        (None, 125.0, None, "its 2 channel(s) have no labels in its description"),
        (["PPG", "ECG"], 0.0, None, "has an irregular rate (nominal rate 0)"),
        (["PPG", "ECG"], 125.0, "string", "carries strings (a marker stream)"),
    ],
)
def test_unusable_stream_is_a_one_line_error(labels, rate, fmt, message):
    name = unique("bad")
    outlet = _outlet(name, labels, rate, pylsl.cf_string if fmt else None)
    with pytest.raises(lsl.LslError) as exc:
        lsl.LslReader(name, timeout=TIMEOUT)
    assert message in str(exc.value) and name in str(exc.value)
    assert "\n" not in str(exc.value)
    del outlet


def test_labels_given_for_a_stream_without_them_and_cli_errors(models):
    name = unique("nolabels")
    outlet = _outlet(name)
    with lsl.LslReader(name, timeout=TIMEOUT, labels=["PPG", "x"]) as r:
        assert (r.channels, r.labels, r.ignored, r.total_samples) == (
            ["PLETH"],
            ["PPG"],
            ["x"],
            None,
        )
    with pytest.raises(lsl.LslError, match="3 label"):
        lsl.LslReader(name, timeout=TIMEOUT, labels=["PPG", "ECG", "RESP"])
    # the models need PLETH and II; the stream maps only PLETH: named, with its labels
    res = CliRunner().invoke(
        main, ["vitals", *map(str, models), "--lsl", name, "--lsl-labels", "PPG,EEG"]
    )
    assert res.exit_code == 1 and "Traceback" not in res.output
    assert f"LSL stream '{name}': channel 'II' needed by hr.onnx" in res.output
    assert "its channels: 'PPG', 'EEG'; mapped: PLETH" in res.output
    with pytest.raises(VitalsError, match="channel 'II' needed"):
        open_lsl(models, name, timeout=TIMEOUT, labels=["PPG", "EEG"])
    del outlet
    for args, message in [
        (["--lsl", "a", "--record", "b"], "give --record RECORD or --lsl NAME"),
        ([], "give --record RECORD or --lsl NAME"),
        (["--record", "b", "--lsl-out", "c"], "--lsl-out needs --lsl"),
    ]:
        res = CliRunner().invoke(main, ["vitals", *args])
        assert res.exit_code == 2 and message in res.output


@pytest.mark.slow
def test_no_stream_found_is_a_clear_error():
    name = unique("absent")
    t = time.monotonic()
    with pytest.raises(lsl.LslError) as exc:
        lsl.LslReader(name, timeout=0.3)
    assert time.monotonic() - t < 5
    msg = str(exc.value)
    assert msg.startswith(f"no LSL stream named '{name}' found within 0.3 s") and "\n" not in msg
    res = CliRunner().invoke(main, ["vitals", "--lsl", name, "--lsl-timeout", "0.3"])
    assert res.exit_code == 1 and f"Error: no LSL stream named '{name}'" in res.output
    assert "Traceback" not in res.output


# ------------------------------------------------------------------------------- replay


@pytest.mark.slow
def test_replay_publishes_the_record_exactly_and_loops(records):
    rec = records["short"]
    signal = RecordSource(rec).signal  # (500, 3): RESP, PLETH, II
    name = unique("loop")
    replay = Replay(rec, name, loop=True, speed=50.0)
    with lsl.LslReader(name, timeout=TIMEOUT) as r:
        assert r.total_samples is None  # a loop announces no length
        assert r.channels == ["RESP", "PLETH", "II"] and r.units == {
            "RESP": "NU",
            "PLETH": "NU",
            "II": "mV",
        }
        got, deadline = [], time.monotonic() + TIMEOUT
        while sum(map(len, got)) < 2 * len(signal) + 50 and time.monotonic() < deadline:
            got.append(r.pull())
            time.sleep(0.01)
    report = replay.stop()
    x = np.concatenate(got)
    assert len(x) >= 2 * len(signal) + 50
    n = len(x)
    assert np.array_equal(x, np.tile(signal, (n // len(signal) + 1, 1))[:n])
    assert report.loops >= 2 and report.stopped

    with pytest.raises(lsl.LslError, match="has no channel 'SpO2' to rename"):
        lsl.replay_record(rec, name=unique("x"), rename={"SpO2": "x"})
    with pytest.raises(lsl.LslError, match="no consumer connected to LSL stream"):
        lsl.replay_record(rec, name=unique("x"), wait_for_consumer=0.2)


@pytest.mark.slow
def test_data_lsl_replay_command(records):
    rec = records["short"]
    name = unique("cmd")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "liquid_stream.cli",
            "data",
            "lsl-replay",
            str(rec),
            "--name",
            name,
            "--speed",
            "50",
            "--rename",
            "II=ECG II",
            "--linger",
            "5",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    try:
        with lsl.LslReader(name, timeout=30.0) as r:
            assert r.labels == ["RESP", "PLETH", "ECG II"] and r.total_samples == 500
            got, deadline = [], time.monotonic() + TIMEOUT
            while not r.ended and time.monotonic() < deadline:
                got.append(r.pull())
                time.sleep(0.01)
        out, _ = proc.communicate(timeout=TIMEOUT)
    finally:
        proc.kill()
    assert proc.returncode == 0, out
    assert np.array_equal(np.concatenate(got), RecordSource(rec).signal)
    assert f"LSL stream '{name}': record bidmc06, 125 Hz, channels RESP, PLETH, ECG II" in out
    assert "published 500 samples (4.0 s of signal, 1 pass(es))" in out
    bad = CliRunner().invoke(main, ["data", "lsl-replay", str(rec), "--rename", "PLETH"])
    assert bad.exit_code == 2 and "is not CHANNEL=LABEL" in bad.output


# ------------------------------------------------------------------------------- config


def _config_in_subprocess(env):
    code = (
        "import os; from liquid_stream.io import lsl; p = lsl.ensure_config(); "
        "print(p); print(os.environ['LSLAPICFG'])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.split("\n")
    return out[0], out[1]


def test_config_is_machine_local_unless_the_user_sets_one(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != lsl.CONFIG_ENV}
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    path, var = _config_in_subprocess(env)
    assert path == var == str(tmp_path / "cache" / "liquid-stream" / "lsl_api.cfg")
    text = Path(path).read_text()
    assert text == lsl.LOCAL_CONFIG
    for line in ("IPv6 = disable", "ResolveScope = machine", "KnownPeers = {127.0.0.1}"):
        assert line in text
    # the scope is a [multicast] key in liblsl's syntax (api_config.cpp)
    assert text.index("[multicast]") < text.index("ResolveScope") < text.index("[lab]")
    user = tmp_path / "mine.cfg"
    path, var = _config_in_subprocess({**env, lsl.CONFIG_ENV: str(user)})
    assert path == var == str(user) and not user.exists()  # the user's choice, untouched


MULTICAST_PORT = 16571  # liblsl's default [ports] MulticastPort (not set by LOCAL_CONFIG)


def _sockets(pid: int) -> dict[str, list[int]]:
    """Local ports of process ``pid``'s sockets per /proc/net table (tcp, udp, tcp6, udp6)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    out = {}
    for table_ in ("tcp", "udp", "tcp6", "udp6"):
        p = Path(f"/proc/{pid}/net/{table_}")
        rows = [r.split() for r in p.read_text().splitlines()[1:]] if p.exists() else []
        out[table_] = [int(r[1].rsplit(":", 1)[1], 16) for r in rows if r[9] in inodes]
    return out


@pytest.mark.skipif(not Path("/proc/self/net/udp").exists(), reason="no procfs")
def test_liblsl_reads_the_config(tmp_path):
    """What an outlet opens shows which config liblsl read. Under the machine-local config:
    no IPv6 socket, and one discovery responder on the multicast port (for 127.0.0.1, the
    machine scope's only address). With only IPv6 disabled (liblsl's default scope, site):
    responders for the broadcast and multicast groups as well (a file liblsl cannot parse
    would give its defaults wholesale: that scope, and IPv6 where the host has it)."""
    code = (
        "import sys, time, pylsl; "
        "o = pylsl.StreamOutlet(pylsl.StreamInfo(sys.argv[1], 'T', 1, 10.0, 'float32', 'x')); "
        "print('ready', flush=True); time.sleep(30)"
    )
    configs = {
        "local": lsl.LOCAL_CONFIG,
        "site_v4": "[ports]\nIPv6 = disable\n[log]\nlevel = -2\n",
    }
    socks = {}
    for which, content in configs.items():
        cfg = lsl.write_config(tmp_path / which / "lsl_api.cfg", content)
        proc = subprocess.Popen(
            [sys.executable, "-c", code, unique("cfg")],
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, lsl.CONFIG_ENV: str(cfg)},
            cwd=tmp_path,
        )
        try:
            assert proc.stdout.readline().strip() == "ready"
            socks[which] = _sockets(proc.pid)
        finally:
            proc.kill()
            proc.wait()
    responders = {k: v["udp"].count(MULTICAST_PORT) for k, v in socks.items()}
    assert responders["local"] == 1 < responders["site_v4"]
    assert socks["local"]["tcp6"] == socks["local"]["udp6"] == []
