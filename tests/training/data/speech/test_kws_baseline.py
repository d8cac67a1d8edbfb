"""The classical keyword-spotting baseline (training/data/speech/kws_baseline.py): its DTW
recursion against an enumeration of every warping path, its streaming state, its features'
gain invariance, and that it finds a warped template in a noisy stream."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from fixtures_speech import tiny_root
from scipy.signal import chirp

from liquid_stream.training.data.speech import kws_baseline
from liquid_stream.training.data.speech.kws_baseline import (
    LEVEL_CAP_DB,
    N_FEATURES,
    Template,
    TemplateMatcher,
    level_above_floor,
    load_templates,
    mfcc,
    score_frames,
)

SR = 16000


def brute_force(dist: np.ndarray) -> np.ndarray:
    """Score of one template at every end frame: over every path (start at cell 0 at any
    frame s, one cell per frame, steps of 0 / 1 / 2 cells, never two stays in a row, no stay
    on cell 0, end on the last cell at t) the least total distance D, scored −D / frames."""
    T, m = dist.shape
    out = np.full(T, -np.inf)
    for t in range(T):
        best = None
        for s in range(t + 1):
            n = t - s + 1
            for steps in itertools.product((0, 1, 2), repeat=n - 1):
                cells, ok = [0], True
                for k, d in enumerate(steps):
                    nxt = cells[-1] + d
                    if nxt == 0 or nxt > m - 1 or (d == 0 and k > 0 and steps[k - 1] == 0):
                        ok = False
                        break
                    cells.append(nxt)
                if not ok or cells[-1] != m - 1:
                    continue
                D = sum(dist[s + k, c] for k, c in enumerate(cells))
                if best is None or D < best[0]:
                    best = (D, n)
        if best is not None:
            out[t] = -best[0] / best[1]
    return out


@pytest.mark.parametrize("seed", range(4))
def test_recursion_equals_every_path_enumerated(seed):
    rng = np.random.default_rng(seed)
    lengths = [int(v) for v in rng.integers(1, 5, size=3)]
    templates = [
        Template(k, rng.normal(size=(m, N_FEATURES)), "")
        for k, m in zip(["a", "b", "a"], lengths, strict=True)
    ]
    matcher = TemplateMatcher(templates, ["a", "b"])
    frames = rng.normal(size=(8, N_FEATURES))
    got = np.concatenate([matcher.update(frames[:3]), matcher.update(frames[3:])])
    dist = matcher.distances(frames)
    edges = np.cumsum([0, *lengths])
    ref = [brute_force(dist[:, edges[j] : edges[j + 1]]) for j in range(3)]
    want = np.stack([np.maximum(ref[0], ref[2]), ref[1]], 1)  # a keyword: its best template
    finite = np.isfinite(want)
    assert np.array_equal(np.isfinite(got), finite)
    np.testing.assert_allclose(got[finite], want[finite], rtol=0, atol=1e-12)


def test_streaming_state_any_chunking_and_reset(monkeypatch):
    rng = np.random.default_rng(7)
    templates = [Template(k, rng.normal(size=(6, N_FEATURES)), "") for k in ("a", "b", "c")]
    matcher = TemplateMatcher(templates, ["a", "b", "c"])
    frames = rng.normal(size=(50, N_FEATURES))
    whole = score_frames(matcher, frames)
    pieces, pos = [], 0
    matcher.reset()
    for n in (1, 7, 2, 19, 21):
        pieces.append(matcher.update(frames[pos : pos + n]))
        pos += n
    assert np.array_equal(np.concatenate(pieces), whole)
    assert np.array_equal(score_frames(matcher, frames), whole)  # reset: the same again
    monkeypatch.setattr(kws_baseline, "BLOCK_FRAMES", 6)  # long inputs go in blocks
    assert np.array_equal(score_frames(matcher, frames), whole)


def test_level_above_floor_is_the_literal_running_minimum():
    rng = np.random.default_rng(1)
    lv = rng.normal(scale=15, size=300)
    n = 40
    want = [min(LEVEL_CAP_DB, lv[k] - lv[max(0, k - n + 1) : k + 1].min()) for k in range(300)]
    np.testing.assert_array_equal(level_above_floor(lv, n), want)


def test_features_do_not_depend_on_the_input_gain():
    rng = np.random.default_rng(2)
    t = np.arange(SR) / SR
    x = 0.3 * chirp(t, 300, 1.0, 3000) * (t > 0.3) + 0.03 * rng.normal(size=SR)
    a, b = mfcc(x), mfcc(10.0 * x)
    assert a.shape == (100, N_FEATURES)
    # log(g² P + ε) = log P + 2 log g up to the log floor ε = 1e-6, far below these frames'
    # band energies (at 10x less gain the floor shows in the lowest mel bands: 0.01)
    np.testing.assert_allclose(a, b, atol=1e-3)
    assert a[31:, 0].min() == LEVEL_CAP_DB and a[:25, 0].max() < 10  # the chirp vs background


def _word(kind: str, seconds: float) -> np.ndarray:
    t = np.arange(int(seconds * SR)) / SR
    f0, f1 = (400, 3000) if kind == "up" else (3000, 400)
    return 0.4 * chirp(t, f0, seconds, f1, method="logarithmic")


def test_finds_a_warped_template_in_a_noisy_stream():
    rng = np.random.default_rng(3)

    def recorded(word):  # a template recorded over the stream's kind of background
        x = np.concatenate([np.zeros(SR // 2), word]) + 0.01 * rng.normal(size=SR // 2 + len(word))
        return mfcc(x)[50:90]

    templates = [
        Template("yes", recorded(_word("up", 0.4)), "t0"),
        Template("no", recorded(_word("down", 0.4)), "t1"),
    ]
    matcher = TemplateMatcher(templates, ["yes", "no"])
    x = 0.01 * rng.normal(size=4 * SR)
    x[SR : SR + int(0.5 * SR)] += _word("up", 0.5)  # 1.25x slower than its template
    x[int(2.5 * SR) : int(2.5 * SR) + int(0.32 * SR)] += _word("down", 0.32)  # faster
    s = score_frames(matcher, mfcc(x))
    for k, end_s in ((0, 1.5), (1, 2.82)):
        peak = int(np.argmax(s[:, k]))
        assert abs((peak + 1) * 0.01 - end_s) <= 0.03  # the match ends where the word ends
        assert s[peak, k] > s[peak, 1 - k] + 1.0  # and the other keyword's template is far


def test_templates_one_per_speaker_from_the_train_split(tmp_path):
    root = tiny_root(tmp_path / "sc", words=("yes", "no"), per_word=6)  # clips 2-5: train
    tpl = load_templates(root, ["yes", "no"], per_keyword=3, seed=0)
    assert [t.keyword for t in tpl] == ["yes"] * 3 + ["no"] * 3
    for word in ("yes", "no"):
        src = [t.source for t in tpl if t.keyword == word]
        speakers = {s.split("/")[1].split("_nohash_")[0] for s in src}
        assert len(speakers) == 3 and not speakers & {"00000000", "00000001"}  # not val/test
    assert all(t.frames.shape[1] == N_FEATURES and len(t.frames) > 30 for t in tpl)
    with pytest.raises(ValueError, match="per_keyword"):
        load_templates(root, ["yes"], per_keyword=0)
    with pytest.raises(ValueError, match="unknown keyword"):
        TemplateMatcher(tpl, ["yes"])
