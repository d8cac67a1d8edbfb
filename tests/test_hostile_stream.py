"""Hostile inputs to the streaming paths (issue 60: part E for ``kws --input``, and the
server's edges), each with real components: real WAV files, real onnxruntime sessions,
real ``liquid-stream`` subprocesses, real servers on 127.0.0.1 and real WebSocket clients.

- **Audio input memory.** ``kws --input`` read the whole WAV (about 5x its size in
  memory); :class:`~liquid_stream.apps.common.audio.WavSource` now reads it in slabs as it
  streams: the memory it allocates while streaming a 10-minute file stays under a few MB
  (the old source held the file's bytes and its float32 samples, ~57 MB), and the
  blocks are exactly the samples of the whole-file reader (checked against scipy's).
- **Server edges.** ``stream-to`` ends with one ``Error:`` line (no traceback) when the
  server closes the connection, on shutdown (1001) or a keepalive ping timeout (1011);
  a single out-of-range sample of a bed is a gap, not a lost block; a binary block of
  the wrong channel count is refused even when its size is whole rows; a vitals stream
  whose rate cannot carry its channels is refused at open; a connection that opens no
  stream is closed after the server's stated open timeout.

Peak memory against input length (the 200 MB goal on a 2-hour WAV) is a benchmark, not a
test: ``python bench/input_memory.py``.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
import tracemalloc
import wave
from pathlib import Path

import numpy as np
import pytest
import scipy.io.wavfile
from fixtures_vitals import signals
from test_serve import check_vitals, cut, start_server, wait_for

from liquid_stream.apps.batch.vitals import estimate_event
from liquid_stream.apps.common.audio import AudioError, WavSource, read_wav
from liquid_stream.apps.serve.client import ServeClient, ServeClientError
from liquid_stream.apps.serve.server import ServerThread, StreamServer, kws_host, vitals_host
from liquid_stream.apps.vitals.monitor import VitalsMonitor
from liquid_stream.models import shipped

os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")  # before the first session (test_serve)

PPG = ["vitals-ppg-hr", "vitals-ppg-rr"]
PPG_ECG = ["vitals-ppg-ecg-hr", "vitals-ppg-ecg-rr"]
FS = 125
SCRIPT = Path(sys.executable).parent / "liquid-stream"
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def write_noise_wav(path: Path, seconds: float, rate: int = 16000, seed: int = 0) -> Path:
    """A 16-bit mono WAV of quiet noise, written a minute at a time."""
    rng = np.random.default_rng(seed)
    n = int(seconds * rate)
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        for a in range(0, n, 60 * rate):
            x = rng.normal(0, 1000, min(n, a + 60 * rate) - a)
            w.writeframes(np.clip(np.round(x), -32768, 32767).astype("<i2").tobytes())
    return path


def one_error_line(stderr: str) -> str:
    """The last non-empty line, the only ``Error:`` line, with no traceback anywhere."""
    assert "Traceback" not in stderr, stderr
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert lines and lines[-1].startswith("Error: "), stderr
    assert sum(ln.startswith("Error:") for ln in lines) == 1, stderr
    return lines[-1]


# ============================================================================ WAV input


@pytest.mark.slow
def test_wav_source_streams_a_long_file_in_bounded_memory(tmp_path):
    """A 10-minute 16 kHz WAV (18 MB of int16, 38 MB as float32) streamed in 10 ms blocks:
    every sample comes out, and the memory allocated meanwhile peaks under 4 MB (the
    slabs of the reader), where the old source read the whole file first (> 55 MB)."""
    wav = write_noise_wav(tmp_path / "long.wav", 600)
    tracemalloc.start()
    try:
        src = WavSource(wav, block_ms=10, realtime=False)
        n, blocks, energy = 0, 0, 0.0
        for b in src.blocks():
            blocks += 1
            n += len(b)
            energy += float(np.square(b, dtype=np.float64).sum())
            assert len(b) == 160
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert n == 600 * 16000 and src.duration_s == 600.0
    assert blocks == n // 160
    assert 0.9 < np.sqrt(energy / n) * 32768 / 1000 < 1.1  # the noise's level: real samples
    assert peak < 4 * 2**20, f"peak {peak / 2**20:.1f} MB allocated while streaming"


@pytest.mark.parametrize(
    "dtype, channels", [("<i2", 1), ("u1", 2), ("<i4", 1), ("<f4", 3), ("<f8", 1)]
)
def test_wav_source_blocks_are_the_files_samples(tmp_path, dtype, channels):
    """Blocks of any size (17 samples, 10 ms, 1 s; slabs cut across them) concatenate to
    channel 0 of the file, decoded as scipy reads it and scaled to [-1, 1]."""
    rng = np.random.default_rng(1)
    n = 70001  # more than a slab of the reader, not a multiple of any block
    x = rng.uniform(-0.9, 0.9, (n, channels))
    kind = np.dtype(dtype)
    if kind.kind == "f":
        data = x.astype(kind)
    elif kind.kind == "u":
        data = np.round(x * 127 + 128).astype(kind)
    else:
        data = np.round(x * (2 ** (8 * kind.itemsize - 1) - 1)).astype(kind)
    path = tmp_path / "x.wav"
    scipy.io.wavfile.write(path, 11025, data if channels > 1 else data[:, 0])
    _, back = scipy.io.wavfile.read(path)
    back = back.reshape(n, channels)[:, 0]
    if kind.kind == "f":
        want = back.astype(np.float32)
    elif kind.kind == "u":
        want = ((back.astype(np.float32) - 128.0) / 128.0).astype(np.float32)
    else:
        want = back.astype(np.float32) / np.float32(2 ** (8 * kind.itemsize - 1))
    for block_ms in (17 / 11.025, 10, 1000):
        src = WavSource(path, block_ms=block_ms, realtime=False)
        got = np.concatenate(list(src.blocks()))
        assert got.dtype == np.float32 and np.array_equal(got, want), block_ms
        assert (src.notes != []) == (channels > 1)
    assert np.array_equal(read_wav(path)[0], want)


def test_a_wav_cut_while_it_streams_is_one_clear_error(tmp_path):
    """The file shrinks after the source opened it (a recording being rotated): the
    blocks read so far come out, then one AudioError naming the file."""
    wav = write_noise_wav(tmp_path / "cut.wav", 20)
    src = WavSource(wav, block_ms=100, realtime=False)
    it = src.blocks()
    first = next(it)
    assert len(first) == 1600
    os.truncate(wav, 44 + 2 * 16000 * 3)  # 3 s of the 20 s left
    with pytest.raises(AudioError, match="cut.wav: truncated WAV") as err:
        for _ in it:
            pass
    assert "\n" not in str(err.value)


# ============================================================================= servers


@pytest.fixture(scope="module")
def srv():
    hosts = [
        vitals_host("ppg", [shipped(m) for m in PPG]),
        vitals_host("ppg-ecg", [shipped(m) for m in PPG_ECG]),
    ]
    with ServerThread(StreamServer(hosts, port=0, max_streams=16)) as s:
        yield s


def bed(seconds: float, channels: list[str], seed: int) -> np.ndarray:
    sig = signals(seconds, FS, seed)
    return np.stack([sig[c] for c in channels], 1)


def monitor_events(models, channels, blocks, out_of_range="refuse") -> list[dict]:
    """The bed alone: a VitalsMonitor fed ``blocks``, as the server's events."""
    mon = VitalsMonitor(
        [shipped(m) for m in models], channels=channels, input_rate=FS, out_of_range=out_of_range
    )
    ests = []
    for b in blocks:
        ests += mon.push(np.asarray(b, np.float64))
    ests += mon.flush()
    return [estimate_event(e, mon.units) for e in ests]


@pytest.mark.slow
def test_an_out_of_range_sample_is_a_gap_not_a_lost_block(srv):
    """One PLETH sample of 1e9 (a corrupt value) in a bed's 1-s block: the server makes
    that sample a gap and keeps the rest of the block, as ``vitals --record`` does, and
    tells the client once, in one line. The bed's estimates equal a monitor fed the same
    blocks with ``out_of_range="gap"``; before, the whole block was refused (1 s of every
    channel lost), so the estimates differed."""
    chans = ["PLETH", "II"]
    x = bed(40, chans, seed=5)
    x[20 * FS + 60, 0] = 1e9
    x[30 * FS + 7, 1] = -3e8  # and one on the ECG lead
    blocks = cut(x, FS)
    with ServeClient(srv.url, stream_id="spiky") as c:
        c.open("ppg-ecg", channels=chans, sample_rate=FS, overflow="wait")
        events = []
        for b in blocks:
            c.send(b)
            events += c.drain()
        events += c.close()
    errs = [e["message"] for e in events if e["type"] == "error"]
    assert len(errs) == 2, errs
    assert "PLETH sample value 1e+09 at 20.480 s is outside the accepted range" in errs[0]
    assert "II sample value -3e+08 at 30.056 s" in errs[1]
    assert all("1 sample(s) of this block made a gap, the rest used" in m for m in errs)
    assert all("\n" not in m for m in errs)
    want = monitor_events(PPG_ECG, chans, blocks, out_of_range="gap")
    check_vitals(events, want, "spiky")
    assert len([e for e in events if e["type"] == "estimate"]) == 40


def test_a_block_of_the_wrong_channels_is_refused(srv):
    """A two-channel bed (PLETH, II) gets binary frames that start with their channel
    count (the default framing of a vitals stream, what ServeClient sends): a block of 3
    channels whose size is whole 2-channel rows (4 x 3 floats = 6 rows of 2), a frame
    with no count (raw rows), a JSON block of the wrong shape: each an error naming the
    channels, nothing changed: the bed's estimates equal the good blocks alone. A client
    may still ask for bare rows (``"framing": "raw"``)."""
    chans = ["PLETH", "II"]
    x = bed(20, chans, seed=6)
    good = cut(x, FS)
    three = np.full((4, 3), 0.5, "<f4")
    faults = [
        (3).to_bytes(4, "little") + three.tobytes(),  # size divides into 2-channel rows
        np.full((6, 2), 0.5, "<f4").tobytes(),  # no count: its first float is no count
        json.dumps({"op": "samples", "data": three.tolist()}),
    ]
    with ServeClient(srv.url, stream_id="wrong-ch") as c:
        opened = c.open("ppg-ecg", channels=chans, sample_rate=FS, overflow="wait")
        assert opened["framing"] == "counted"
        events = []
        for i, b in enumerate(good):
            c.send(b)
            if i < len(faults):
                c.send_raw(faults[i])
            events += c.drain()
        events += c.close()
    errs = [e["message"] for e in events if e["type"] == "error"]
    assert len(errs) == 3, errs
    assert "a count of 3 channels, the stream has 2 (PLETH, II)" in errs[0]
    assert "block refused" in errs[0] and "the stream has 2" in errs[1]
    assert "(T, 2) rows" in errs[2]
    check_vitals(events, monitor_events(PPG_ECG, chans, good), "wrong-ch")
    with ServeClient(srv.url) as c:  # bare rows, asked for
        c.ws.send(
            json.dumps(
                {
                    "op": "open",
                    "model": "ppg",
                    "channels": ["PLETH"],
                    "sample_rate": FS,
                    "framing": "raw",
                }
            )
        )
        assert c.recv(10)["framing"] == "raw"
        with pytest.raises(ServeClientError, match='framing must be "counted" or "raw"'):
            with ServeClient(srv.url) as d:
                d.ws.send(
                    json.dumps(
                        {
                            "op": "open",
                            "model": "ppg",
                            "channels": ["PLETH"],
                            "sample_rate": FS,
                            "framing": "packed",
                        }
                    )
                )
                raise ServeClientError(d.recv(10)["message"])


def test_a_vitals_rate_too_low_for_its_channels_is_refused(srv):
    """A 1 Hz PLETH stream (nothing of the pulse survives) is refused at open with the
    rate the channel needs; an ECG lead needs 60 Hz (its QRS band); rates that carry the
    channels open."""
    refused = [
        (
            "ppg",
            ["PLETH"],
            1,
            "sample_rate 1 Hz is too low for ppg: its PLETH channel needs at least 16 Hz",
        ),
        ("ppg", ["PLETH"], 12.5, "PLETH channel needs at least 16 Hz"),
        ("ppg-ecg", ["PLETH", "II"], 25, "its II channel needs at least 60 Hz"),
    ]
    for model, chans, rate, why in refused:
        with ServeClient(srv.url) as c, pytest.raises(ServeClientError, match=why):
            c.open(model, channels=chans, sample_rate=rate)
    for model, chans, rate in [("ppg", ["PLETH"], 25), ("ppg-ecg", ["PLETH", "II"], 62.5)]:
        with ServeClient(srv.url) as c:
            assert c.open(model, channels=chans, sample_rate=rate)["type"] == "opened"
            c.close()
    wait_for(lambda: srv.call(lambda: len(srv.server.streams)) == 0, what="streams closed")


@pytest.mark.slow
def test_a_connection_that_never_opens_is_closed_after_the_timeout(tmp_path):
    """open_timeout_s = 1: a connection that sends nothing, and one that sends only
    messages that are not an open, are each told why and closed (1008) after it; a
    stream opened in time stays open past it."""
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import connect

    server = StreamServer(
        [vitals_host("ppg", [shipped(m) for m in PPG])], port=0, open_timeout_s=1.0
    )
    with ServerThread(server) as s:
        ok = ServeClient(s.url, stream_id="in-time")
        ok.open("ppg", channels=["PLETH"], sample_rate=FS)
        for chatter in (False, True):
            ws = connect(s.url, open_timeout=10, legacy=True)
            msgs, sending = [], chatter
            try:
                end = time.monotonic() + 30
                while time.monotonic() < end:
                    if sending:
                        try:
                            ws.send("hello")
                        except ConnectionClosed:  # closing: read what came before it
                            sending = False
                    try:
                        msgs.append(json.loads(ws.recv(0.3 if chatter else 30)))
                    except TimeoutError:
                        continue
                pytest.fail(f"not closed within 30 s (chatter={chatter}): {msgs}")
            except ConnectionClosed as e:
                assert e.rcvd is not None and e.rcvd.code == 1008, e
                assert e.rcvd.reason == "no stream opened within 1 s of connecting"
            finally:
                ws.close()
            assert msgs[-1]["message"] == "no stream opened within 1 s of connecting; closing"
            assert all("open the stream first" in m["message"] for m in msgs[:-1])
            assert chatter == (len(msgs) > 1)
        ok.send(np.full((FS, 1), 0.5))  # still open, well past the timeout
        assert ok.close() is not None and ok.closed["type"] == "closed"
    with pytest.raises(ValueError, match="open_timeout_s must be a positive"):
        StreamServer([kws_host(shipped("kws-sc10"), "kws")], open_timeout_s=0)


# ============================================================================ stream-to


def stream_to(url: str, wav: Path) -> subprocess.Popen:
    """``liquid-stream stream-to URL --input WAV`` (real time), started and opened."""
    proc = subprocess.Popen(
        [str(SCRIPT), "stream-to", url, "--input", str(wav)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
    )
    ready, _, _ = select.select([proc.stderr], [], [], 60)
    line = proc.stderr.readline() if ready else ""
    if not line.startswith("stream "):
        proc.kill()
        raise AssertionError(f"stream-to did not open: {line!r} {proc.stderr.read()}")
    return proc


@pytest.mark.slow
def test_stream_to_is_one_line_when_the_server_shuts_down(tmp_path):
    """SIGTERM to `liquid-stream serve` while `stream-to` sends a WAV in real time: the
    server closes the connection (1001, going away) and stream-to exits 1 with one
    ``Error:`` line naming it; before, a websockets traceback."""
    wav = write_noise_wav(tmp_path / "talk.wav", 60)
    server, url = start_server(["--kws", "kws-sc10"])
    client = None
    try:
        client = stream_to(url, wav)
        time.sleep(0.5)  # a few blocks on the way
        server.send_signal(signal.SIGTERM)
        assert server.wait(30) == 0
        out, err = client.communicate(timeout=60)
    finally:
        for p in (server, client):
            if p is not None and p.poll() is None:
                p.kill()
    assert client.returncode == 1, (out, err)
    line = one_error_line(err)
    assert "connection closed by the server, code 1001" in line, line
    assert "the server is shutting down" in line, line


@pytest.mark.slow
def test_stream_to_is_one_line_on_a_ping_timeout(tmp_path):
    """`stream-to` stopped (SIGSTOP: a suspended laptop, a debugger) for longer than the
    server's keepalive allows: the server closes the connection (1011, ping timeout);
    once resumed, stream-to exits 1 with one ``Error:`` line naming it; the server goes
    on (the stream is forgotten)."""
    from websockets.protocol import State

    wav = write_noise_wav(tmp_path / "talk.wav", 60)
    server = StreamServer([kws_host(shipped("kws-sc10"), "kws")], port=0, ping_s=0.5)
    with ServerThread(server) as s:
        client = stream_to(s.url, wav)
        try:
            wait_for(lambda: s.call(lambda: len(s.server.streams)) == 1, what="the stream")
            client.send_signal(signal.SIGSTOP)

            def closing() -> bool:  # the server sent its close frame (1011)
                return all(st.conn.state is not State.OPEN for st in s.server.streams.values())

            wait_for(lambda: s.call(closing), timeout=60, what="the ping timeout")
            client.send_signal(signal.SIGCONT)  # within the server's close timeout (10 s)
            out, err = client.communicate(timeout=60)
            wait_for(lambda: s.call(lambda: len(s.server.streams)) == 0, what="the stream gone")
        finally:
            if client.poll() is None:
                client.send_signal(signal.SIGCONT)
                client.kill()
    assert client.returncode == 1, (out, err)
    line = one_error_line(err)
    assert "connection closed by the server, code 1011" in line, line
    assert "keepalive ping" in line, line


def test_serving_beyond_the_loopback_without_a_token_is_refused_before_any_model_loads(
    tmp_path, monkeypatch
):
    """``serve --host 0.0.0.0`` with no token: one line naming the token, at once — the
    check comes before the models are loaded (here a model file that does not exist, whose
    own error would come first otherwise; before, the refusal took ~10 s of loading)."""
    from hostile import assert_one_line_error, invoke

    monkeypatch.delenv("LIQUID_STREAM_TOKEN", raising=False)
    r = invoke(["serve", "--host", "0.0.0.0", "--kws", str(tmp_path / "missing.onnx")])
    assert_one_line_error(r, ["0.0.0.0", "--token"])
