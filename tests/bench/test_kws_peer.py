"""bench/kws_peer.py, the spotter next to pocketsphinx (issue 63 item 4): its threshold
and matching logic.

- :func:`allocate` (per-keyword thresholds under a false-accept budget) and
  :func:`allocate_min_fa` (the fewest false accepts for a number of detections) are the best
  of every combination, ties and the budget that nothing meets included (brute force);
- ``best_at`` (a method at a matched false-accept rate), the refractory rule and the count
  of cognate hits on non-English prompts, on small hand-made cases;
- with pocketsphinx installed (else skipped, with the reason), on a real stream of
  espeak-ng words: one decode with every keyword at every threshold of a grid as alias
  words gives, per threshold, exactly the detections of a plain pocketsphinx decode of the
  dictionary words at that threshold alone (the bench's one-pass sweep), and thresholds
  chosen on the stream at a budget of c false accepts keep ≤ c there when every keyword
  is scored together, and find spoken keywords;
- without pocketsphinx the bench stops with a one-line note on how to install it.
No timing assertions.
"""

from __future__ import annotations

import importlib.util
import itertools
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

from liquid_stream.apps.common.audio import read_wav
from liquid_stream.apps.kws.spotter import Detection
from liquid_stream.io.labels import TrueEvent

ROOT = Path(__file__).resolve().parents[2]
SR = 16000


def _bench():
    bench = str(ROOT / "bench")
    sys.path.insert(0, bench)  # the bench imports its sibling kws_robustness
    try:
        spec = importlib.util.spec_from_file_location("kws_peer", ROOT / "bench" / "kws_peer.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules["kws_peer"] = mod  # its dataclass looks its module up
        spec.loader.exec_module(mod)
    finally:
        sys.path.remove(bench)
    return mod


kp = _bench()


def _brute(curves, capacity):
    combos = list(itertools.product(*[range(len(c)) for c in curves]))

    def tot(js, i):
        return sum(c[j][i] for c, j in zip(curves, js, strict=True))

    ok = [js for js in combos if tot(js, 1) <= capacity]
    if not ok:  # each keyword at its fewest false accepts, then most detections, then strictest
        return tuple(min(range(len(c)), key=lambda j, c=c: (c[j][1], -c[j][0], j)) for c in curves)
    return max(ok, key=lambda js: (tot(js, 0), -tot(js, 1), -sum(js)))


@pytest.mark.parametrize("seed", range(40))
def test_allocate_is_the_best_combination(seed):
    rng = np.random.default_rng(seed)
    k = int(rng.integers(1, 5))
    curves = []
    for _ in range(k):
        n = int(rng.integers(1, 6))
        det = np.sort(rng.integers(0, 6, n))  # looser thresholds: more of both, not always
        fa = np.sort(rng.integers(0, 5, n)) if rng.random() < 0.7 else rng.integers(0, 5, n)
        curves.append([(int(d), int(f)) for d, f in zip(det, fa, strict=True)])
    for cap in range(0, 9):
        assert kp.allocate(curves, cap) == _brute(curves, cap), (curves, cap)


def _brute_min_fa(curves, target):
    combos = list(itertools.product(*[range(len(c)) for c in curves]))

    def tot(js, i):
        return sum(c[j][i] for c, j in zip(curves, js, strict=True))

    ok = [js for js in combos if tot(js, 0) >= target]
    return min(ok, key=lambda js: (tot(js, 1), sum(js), -tot(js, 0))) if ok else None


@pytest.mark.parametrize("seed", range(40))
def test_allocate_min_fa_is_the_strictest_combination_detecting_enough(seed):
    rng = np.random.default_rng(100 + seed)
    curves = []
    for _ in range(int(rng.integers(1, 5))):
        n = int(rng.integers(1, 6))
        det = np.sort(rng.integers(0, 6, n))
        fa = np.sort(rng.integers(0, 5, n)) if rng.random() < 0.7 else rng.integers(0, 5, n)
        curves.append([(int(d), int(f)) for d, f in zip(det, fa, strict=True)])
    for target in range(0, 16):
        assert kp.allocate_min_fa(curves, target) == _brute_min_fa(curves, target), (curves, target)


def test_allocate_ties_and_an_unmeetable_budget():
    # equal detections: fewer false accepts, then the stricter (smaller index) thresholds
    assert kp.allocate([[(0, 0), (3, 1), (3, 1)], [(0, 0), (2, 0)]], 5) == (1, 1)
    assert kp.allocate([[(2, 0), (2, 0), (4, 3)]], 2) == (0,)
    # no threshold of the first keyword keeps 0 false accepts: its fewest, the other's best
    assert kp.allocate([[(5, 2), (6, 4)], [(0, 0), (1, 0)]], 0) == (0, 1)


def test_checked_allocate_steps_down_until_the_keywords_together_keep_the_budget():
    curves = [[(0, 0), (2, 1), (3, 2)], [(0, 0), (1, 2)]]
    assert kp.allocate(curves, 3) == kp.allocate(curves, 2) == (2, 0)
    assert kp.allocate(curves, 1) == (1, 0)
    together = {(2, 0): 4, (1, 0): 1, (0, 0): 0}  # (2, 0) scored together: 4 false accepts
    assert kp.checked_allocate(curves, 3, together.__getitem__) == (1, 0)
    assert kp.checked_allocate(curves, 0, together.__getitem__) == (0, 0)
    # none keeps the budget: of those tried, the fewest together (then the larger budget)
    worse = {(2, 0): 4, (1, 0): 3, (0, 0): 3}
    assert kp.checked_allocate(curves, 2, worse.__getitem__) == (1, 0)


def test_best_at_reads_the_curve_at_a_matched_false_accept_rate():
    pts = [
        {"detection_rate": 0.5, "false_accepts_per_hour": 0.0},
        {"detection_rate": 0.8, "false_accepts_per_hour": 6.0},
        {"detection_rate": 0.8, "false_accepts_per_hour": 3.0},
        {"detection_rate": 0.9, "false_accepts_per_hour": 12.0},
    ]
    assert kp.best_at(pts, 5.0) is pts[2]
    assert kp.best_at(pts, 6.0) is pts[2]  # same detection, fewer false accepts
    assert kp.best_at(pts, 12.0) is pts[3]
    assert kp.best_at(pts, 0.0) is pts[0]
    assert kp.best_at(pts[1:], 2.9) is None


def test_refractory_keeps_the_first_of_detections_within_a_second():
    times = [(2.5, "go"), (0.0, "yes"), (0.5, "no"), (1.0, "up"), (1.9, "on"), (3.4, "off")]
    dets = [Detection(t, k, 0.0) for t, k in times]
    kept = kp.refractory(dets)
    assert [(d.time_s, d.keyword) for d in kept] == [(0.0, "yes"), (1.0, "up"), (2.5, "go")]


def test_cognate_hits_are_counted_apart():
    s = kp.Stream(
        "non-English: es",
        np.zeros(SR * 20, np.int16),
        [],
        prompts=[
            {"start_s": 1.0, "end_s": 3.0, "name": "a", "words": ["gracias", "no"]},
            {"start_s": 6.0, "end_s": 8.0, "name": "b", "words": ["hola"]},
            {"start_s": 12.0, "end_s": 14.0, "name": "c", "words": ["non", "possible"]},
        ],
    )
    dets = [
        Detection(t, k, 0.0)
        for t, k in [
            (2.0, "no"),
            (3.9, "no"),
            (4.5, "no"),  # in a (and its 1 s tolerance), then after it
            (2.5, "yes"),
            (7.0, "no"),
            (13.0, "no"),
            (0.5, "no"),
        ]
    ]
    assert kp.cognate_split(dets, s) == (7, 3)
    assert kp.words_of("¿No, señor? Non-stop 24 h") == {"no", "señor", "non", "stop", "h"}


@pytest.mark.skipif(
    not Path("/usr/share/asterisk/sounds/es").is_dir(),
    reason="asterisk-core-sounds-es-wav not installed",
)
def test_foreign_stream_lays_transcribed_prompts_end_to_end():
    s = kp.foreign_stream(Path("/usr/share/asterisk/sounds"), "es", 0.5, None, seed=3)
    assert s is not None and s.seconds == pytest.approx(30.0)
    assert len(s.prompts) >= 3 and not any(e.is_keyword for e in s.truth)
    ends = 0.0
    for p in s.prompts:
        assert p["start_s"] >= ends + 0.5 - 1e-9 and p["end_s"] > p["start_s"]
        assert not p["name"].startswith(("phonetic/", "silence/")) and p["words"]
        ends = p["end_s"]
    assert np.abs(s.pcm).max() > 1000  # speech, not the noise bed alone


# --------------------------------------------------------------------- with pocketsphinx


def _say(word: str) -> np.ndarray:
    from scipy.signal import resample_poly

    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "w.wav"
        subprocess.run(
            ["espeak-ng", "-v", "en-us", "-s", "150", "-w", str(p), word],
            check=True,
            capture_output=True,
        )
        x, rate, _ = read_wav(p)
    return resample_poly(x, SR, rate) if rate != SR else x


WORDS = (
    "yes",
    "house",
    "stop",
    "left",
    "marvin",
    "go",
    "right",
    "down",
    "seven",
    "no",
    "off",
    "up",
    "on",
    "bird",
)


@pytest.fixture(scope="module")
def speech():
    pytest.importorskip("pocketsphinx", reason="no pocketsphinx: pip install -e '.[peer]'")
    if shutil.which("espeak-ng") is None:
        pytest.skip("espeak-ng not installed")
    from liquid_stream.training.data.speech.kws_stream import speech_span

    rng = np.random.default_rng(0)
    parts, truth, pos = [np.zeros(SR)], [], SR
    for w in WORDS:
        y = _say(w)
        y = 0.5 * y / np.abs(y).max()
        a, b = speech_span(y)
        truth.append(TrueEvent((pos + a) / SR, (pos + b) / SR, w, w in kp.SC10))
        gap = np.zeros(int(rng.uniform(1.0, 1.5) * SR))
        parts += [y, gap]
        pos += len(y) + len(gap)
    x = np.concatenate(parts) + 0.001 * rng.standard_normal(pos)
    pcm, clipped = kp.to_pcm16(x)
    assert clipped == 0
    return kp.Stream("espeak", pcm, truth)


def _plain_decode(pcm, words, exponent):
    """pocketsphinx as one would use it: the dictionary's words (every pronunciation) at
    one threshold, in 100 ms calls; → keyword: sorted detection times."""
    from pocketsphinx import Config, Decoder

    d = Decoder(Config(lm=None, loglevel="ERROR"))
    lines = []
    for w in words:
        n = 1
        while d.lookup_word(w if n == 1 else f"{w}({n})") is not None:
            lines.append(f"{w if n == 1 else f'{w}({n})'} /1e{exponent:+d}/")
            n += 1
    with tempfile.NamedTemporaryFile("w", suffix=".kws", delete=False) as f:
        f.write("\n".join(lines) + "\n")
    d.add_kws("plain", f.name)
    Path(f.name).unlink()
    d.activate_search("plain")
    raw = np.asarray(pcm, "<i2").tobytes()
    d.start_utt()
    for pos in range(0, len(raw), 3200):
        d.process_raw(raw[pos : pos + 3200], False, False)
    d.end_utt()
    out = {w: [] for w in words}
    for seg in d.seg() or []:
        out[seg.word.strip().split("(")[0]].append((seg.end_frame + 1) * kp.FRAME_S)
    return {w: sorted(t) for w, t in out.items()}, len(lines)


@pytest.mark.tts
def test_one_decode_of_aliases_is_a_decode_per_threshold(speech):
    words = ["yes", "stop", "go", "no", "on", "right"]  # "on" has two pronunciations
    exps = [5, -3, -10]  # the plain decode writes 1e+5 …; the bench its own way
    peer = kp.PeerSpotter(words, {w: exps for w in words})
    hits = peer.decode(speech.pcm)
    total = 0
    for i, e in enumerate(exps):
        plain, n_lines = _plain_decode(speech.pcm, words, e)
        assert n_lines == len(words) + 1
        for w in words:
            assert hits[w][i].tolist() == pytest.approx(plain[w], abs=1e-9), (w, e)
            total += len(plain[w])
    assert total > 5  # the comparison is not of empty lists
    assert len(hits["yes"][2]) >= len(hits["yes"][0])  # a looser threshold: no fewer


@pytest.mark.tts
def test_thresholds_chosen_at_a_budget_keep_it_on_their_stream(speech):
    peer = kp.Peer(list(kp.SC10), calib_minutes=0.5)
    peer.fit(speech)
    for k in kp.SC10:  # the grid runs from strict to loose, FINE_STEP apart
        lv = peer.levels[k]
        assert lv == sorted(lv, reverse=True) and np.allclose(np.diff(lv), -kp.FINE_STEP)
    n_kw = sum(e.is_keyword for e in speech.truth)
    for c in range(4):
        setting = peer.choose(c)
        r = kp.score(peer.detections(setting, speech), speech, kp.SC10)
        assert r["targets"] == n_kw
        assert r["false_accepts"] <= c, (c, peer.describe(setting))
        # the keywords it left on at this point are heard: at least 3 of the 10 spoken
        assert r["detected"] >= 3, (c, peer.describe(setting))
        # every keyword chosen is at a threshold of its grid, or off
        assert all(0 <= j <= len(peer.levels[k]) for k, j in zip(kp.SC10, setting, strict=True))


def test_without_pocketsphinx_the_bench_stops_with_a_one_line_note(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "pocketsphinx", None)  # import pocketsphinx fails
    with pytest.raises(SystemExit) as e:
        kp.main(["--val", "nope.wav", "nope.csv", "--test", "nope.wav", "nope.csv"])
    note = str(e.value.code)
    assert note == kp.INSTALL_NOTE and "\n" not in note
    assert "pip install" in note and ".[peer]" in note
