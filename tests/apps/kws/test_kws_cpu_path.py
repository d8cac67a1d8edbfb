"""The cheap `kws` paths detect what the 10 ms path detects (issue 63 item 5).

The shipped spotter's graph costs about as much per 10 ms call as per 100 ms call, so
`kws` calls it less often: a file in calls of the model's export chunk (100 ms), a live
input holding blocks back while no detection can come from them
(``KeywordSpotter.quiet_samples``). Here, on a real speech WAV (espeak-ng keywords,
bench/kws_cpu.py's stream) through the real shipped model:

- the file batches are the 100 ms calls, bit for bit (the same calls of the graph): the
  same detections at the same samples with the same scores;
- the 100 ms calls, the file batches and the held-back live path detect the same keywords
  as the 10 ms path (a call every 10 ms block) at the same samples, but for a float tie:
  the graph is exact for any chunking only to float32 rounding (10 ms and 100 ms calls
  differ by ~1e-6 of the logits), so a crossing whose smoothed score lands within 1e-6 of
  the threshold may move by one sample (1 of 138 detections on bench/kws_cpu.py's 5-minute
  stream, 62.5 µs; none on this one);
- the held-back path emits each detection in a call of its own block only (on the block's
  arrival: no later than the 10 ms path);
- a refused sample stops every path at the same sample after the same detections;
- the shared rule (``detect_events``) equals the rule written sample by sample, and
  ``quiet_samples`` is a true bound (no input fires within it).

No timing assertions: the CPU numbers are bench/kws_cpu.py's.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from liquid_stream.apps.common.audio import WavSource, read_wav
from liquid_stream.apps.kws.cli import KwsWorker, kws_cmd
from liquid_stream.apps.kws.spotter import KeywordSpotter, KeywordTracker, detect_events
from liquid_stream.models import KWS, shipped

ROOT = Path(__file__).resolve().parents[3]
SR = 16000
DET_LINE = re.compile(r"^\d\d:\d\d:\d\d\.\d{3}  \S+  [0-9.]+$")


def _bench():
    spec = importlib.util.spec_from_file_location("kws_cpu", ROOT / "bench" / "kws_cpu.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def speech_wav(tmp_path_factory):
    if shutil.which("espeak-ng") is None:
        pytest.skip("espeak-ng not installed")
    path = tmp_path_factory.mktemp("kws_cpu") / "stream.wav"
    info = _bench().keyword_stream(path, seconds=45.0, seed=1)
    return path, info


class FakeMic:
    """A live source: the WAV's blocks of ``block`` samples, as a microphone's queue
    gives them (kind "mic": the worker's live path), without waiting."""

    kind = "mic"
    dropped = overflows = 0
    name = "fake microphone"

    def __init__(self, x: np.ndarray, rate: int, block: int):
        self.x, self.rate, self.block = x, rate, block

    def blocks(self, drain: bool = False):
        for pos in range(0, len(self.x), self.block):
            yield self.x[pos : pos + self.block]

    def stop(self) -> None:
        pass


def write_float_wav(path: Path, x: np.ndarray, rate: int) -> None:
    """A mono IEEE-float WAV (a NaN in it reaches the spotter as NaN)."""
    data = np.asarray(x, "<f4").tobytes()
    fmt = struct.pack("<HHIIHH", 3, 1, rate, 4 * rate, 4, 32)
    body = b"WAVEfmt " + struct.pack("<I", len(fmt)) + fmt
    body += b"fact" + struct.pack("<II", 4, len(x)) + b"data" + struct.pack("<I", len(data)) + data
    path.write_bytes(b"RIFF" + struct.pack("<I", len(body)) + body)


def run_path(source, chunk_ms: float, **worker_kw):
    """Detections ``(sample, keyword)`` of a worker on ``source``, the calls it made
    ``(first sample, length, detections)``, and the worker."""
    spotter = KeywordSpotter(shipped(KWS), chunk_ms=chunk_ms, threads=1)
    calls = []
    detect = spotter.detect

    def logged(x):
        n0 = spotter.tracker._n
        dets = detect(x)
        calls.append((n0, len(x), dets))
        return dets

    spotter.detect = logged
    worker = KwsWorker(spotter, source, **worker_kw)
    worker.run()  # in this thread
    dets = [(round(d.time_s * SR), d.keyword, d.score) for _, _, ds in calls for d in ds]
    return dets, calls, worker


def assert_same_but_ties(got, ref, threshold: float, tie: float = 1e-6) -> None:
    """The same keywords in the same order at the same samples, but where the smoothed
    score at the crossing is within ``tie`` of the threshold on one of the two paths
    (float32 rounding of the graph): there one sample apart at most."""
    assert [w for _, w, _ in got] == [w for _, w, _ in ref], (got, ref)
    for (t, _, s), (t0, _, s0) in zip(got, ref, strict=True):
        if t != t0:
            assert abs(t - t0) <= 1, (t, t0, s, s0)
            assert min(abs(s - threshold), abs(s0 - threshold)) < tie, (t, t0, s, s0)


@pytest.mark.tts
def test_every_path_detects_the_same_at_the_same_samples(speech_wav):
    wav, info = speech_wav
    x, rate, _ = read_wav(wav)
    assert rate == SR
    ten, ten_calls, _ = run_path(WavSource(wav, 10, realtime=False), 10.0, hold=False)
    assert {n for _, n, _ in ten_calls[:-1]} == {160}  # the 10 ms path: a call a block
    # the stream's keywords are heard (an untrained or broken model would detect ~none)
    assert len(ten) >= 0.5 * info["keywords"], (ten, info)
    hundred, calls, _ = run_path(WavSource(wav, 100, realtime=False), 100.0, hold=False)
    assert {n for _, n, _ in calls[:-1]} == {1600}
    spotter = KeywordSpotter(shipped(KWS), threads=1)
    assert spotter.batch == 1600  # the shipped graph's export chunk: its one-MatMul call
    batched, calls, _ = run_path(WavSource(wav, 100, realtime=False), 10.0, batch=1600)
    assert {n for _, n, _ in calls[:-1]} == {1600}
    held, calls, worker = run_path(FakeMic(x, SR, 160), 10.0)
    assert worker.error is None and worker.samples == len(x)
    assert len(calls) < len(ten_calls) / 3  # blocks were held back and run together
    assert batched == hundred  # bit for bit: the same calls of the graph
    thr = float(spotter.thresholds.min())
    for got in (hundred, batched, held):
        assert_same_but_ties(got, ten, thr)
    # latency: every detection of the held-back path comes from a call of its own 10 ms
    # block alone, i.e. on that block's arrival, as in the 10 ms path
    firing = [(n0, n) for n0, n, dets in calls if dets]
    assert firing and all(n == 160 for _, n in firing), firing
    for n0, n, dets in calls:
        for d in dets:
            assert n0 < round(d.time_s * SR) <= n0 + n


@pytest.mark.tts
def test_kws_command_paths_print_the_same_detections(speech_wav):
    wav, _ = speech_wav
    out = {}
    for extra in ([], ["--chunk-ms", "100"], ["--live-calls"]):
        r = CliRunner().invoke(
            kws_cmd, [str(shipped(KWS)), "--input", str(wav), "--fast", "--no-ui", *extra]
        )
        assert r.exit_code == 0, r.output
        out[" ".join(extra)] = [ln for ln in r.output.splitlines() if DET_LINE.match(ln)]
    assert out[""] and out[""] == out["--chunk-ms 100"], out  # the same calls of the graph
    # a microphone's calls: the same keywords at the same millisecond (a float tie may move
    # a crossing by one sample, so across a millisecond: at most 1 ms then)
    live = [ln.split("  ") for ln in out["--live-calls"]]
    ref = [ln.split("  ") for ln in out[""]]
    assert [w for _, w, _ in live] == [w for _, w, _ in ref], out
    ms = [
        [
            int(t[-3:]) + 1000 * (int(t[:2]) * 3600 + int(t[3:5]) * 60 + int(t[6:8]))
            for t, _, _ in lines
        ]
        for lines in (live, ref)
    ]
    assert max(abs(a - b) for a, b in zip(*ms, strict=True)) <= 1, out
    r = CliRunner().invoke(kws_cmd, ["--live-calls", "--no-ui"])
    assert r.exit_code != 0 and "--live-calls needs --input" in r.output


@pytest.mark.tts
def test_a_refused_sample_stops_every_path_at_it_after_the_same_detections(speech_wav, tmp_path):
    wav, _ = speech_wav
    x, _, _ = read_wav(wav)
    ten, _, _ = run_path(WavSource(wav, 10, realtime=False), 10.0, hold=False)
    assert ten
    bad_at = ten[len(ten) // 2][0] + 1234  # mid-stream, inside a 100 ms batch
    y = x.astype(np.float32).copy()
    y[bad_at] = np.nan
    bad = tmp_path / "bad.wav"
    write_float_wav(bad, y, SR)
    runs = {
        "10 ms": run_path(WavSource(bad, 10, realtime=False), 10.0, hold=False),
        "batched": run_path(WavSource(bad, 100, realtime=False), 10.0, batch=1600),
        "held": run_path(FakeMic(y, SR, 160), 10.0),
    }
    ref_dets, _, ref_worker = runs["10 ms"]
    # the 10 ms path ran the whole blocks before the bad one, and detected what it did
    assert ref_worker.error is not None
    assert ref_dets == [d for d in ten if d[0] <= bad_at // 160 * 160]
    thr = KeywordSpotter(shipped(KWS), threads=1).thresholds.min()
    for name, (dets, _, worker) in runs.items():
        assert_same_but_ties(dets, ref_dets, thr)
        assert worker.error.time_s == pytest.approx(bad_at / SR), name
        assert worker.samples == bad_at // 160 * 160, name  # the whole blocks before it


def literal_rule(s, thresholds, refractory):
    """The detection rule written sample by sample."""
    armed, last, out = np.ones(s.shape[1], bool), -np.inf, []
    for t in range(len(s)):
        row = s[t] >= thresholds
        armed |= ~row
        fire = row & armed
        if fire.any() and t - last >= refractory:
            k = int(np.argmax(np.where(fire, s[t], -1.0)))
            armed[k] = False
            last = t
            out.append((t, k))
    return out


@pytest.mark.parametrize("refractory", [0, 1, 2.5, 50, 33.000000000001, np.inf])
@pytest.mark.parametrize("seed", range(4))
def test_detect_events_runs_equal_the_rule_sample_by_sample(seed, refractory):
    rng = np.random.default_rng(seed)
    k = int(rng.integers(1, 6))
    p = rng.random((4000, k)) ** 6
    s = np.stack([np.convolve(p[:, j], np.ones(15) / 15)[: len(p)] for j in range(k)], 1)
    if seed % 2:
        s = np.round(s * 20) / 20  # plateaus and ties
    thr = rng.uniform(0.05, 0.3, k)
    ref = literal_rule(s, thr, refractory)
    assert ref
    armed, last, got, pos = np.ones(k, bool), -np.inf, [], 0
    while pos < len(s):  # in random pieces, as the live app feeds it
        n = int(rng.integers(1, 400))
        fired, last = detect_events(s[pos : pos + n], thr, refractory, armed, last, pos)
        got += fired
        pos += n
    assert got == ref


@pytest.mark.parametrize("seed", range(6))
def test_quiet_samples_is_a_true_bound(seed):
    """After any history, the worst input (the posterior of one keyword at 1 from the
    next sample on) fires no detection within quiet_samples() samples."""
    rng = np.random.default_rng(seed)
    k, w = 3, int(rng.integers(1, 400))
    thresholds = rng.uniform(0.3, 0.9, k)
    refractory = float(rng.choice([0.0, 37.0, 800.0]))
    classes = np.arange(k)  # keyword i = class i; class k = no keyword
    for trial in range(20):
        tr = KeywordTracker([f"k{i}" for i in range(k)], classes, thresholds, w, refractory, SR)
        hist = rng.normal(0, 3, (int(rng.integers(1, 2000)), k + 1)).astype(np.float32)
        hist[:, : rng.integers(0, k + 1)] += float(rng.uniform(-2, 4))
        for part in np.array_split(hist, 3):
            tr.update(part)
        q = tr.quiet_samples()
        for target in range(k):
            probe = KeywordTracker(tr.keywords, classes, thresholds, w, refractory, SR)
            probe.__dict__.update(
                {
                    key: (v.copy() if isinstance(v, np.ndarray) else v)
                    for key, v in tr.__dict__.items()
                }
            )
            worst = np.full((q + w + 5, k + 1), -30.0, np.float32)
            worst[:, target] = 30.0  # posterior 1 for this keyword from now on
            n0 = probe._n
            probe.update(worst)
            for d in probe.detections:
                assert round(d.time_s * SR) - 1 - n0 >= q, (seed, trial, q, d)


def test_microphone_drain_joins_a_backlog_in_one_block():
    """MicSource.blocks(drain=True): a consumer that fell behind gets the queued blocks in
    one block (one model call instead of one a block); without drain, one at a time."""
    import queue
    import threading

    from liquid_stream.apps.common.audio import MicSource

    def source(blocks):
        mic = object.__new__(MicSource)  # no device: the queue as the callback fills it
        mic.queue, mic._stop, mic.first_block_at = queue.Queue(), threading.Event(), None
        for b in blocks:
            mic.queue.put(b)
        return mic

    blocks = [np.full(160, i, np.float32) for i in range(3)]
    mic = source(blocks)
    got = next(mic.blocks(drain=True))
    assert np.array_equal(got, np.concatenate(blocks)) and mic.queue.empty()
    mic = source(blocks)
    it = mic.blocks()
    assert [len(next(it)) for _ in range(3)] == [160, 160, 160]
