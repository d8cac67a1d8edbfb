"""Classical keyword-spotting baseline: MFCC templates matched by subsequence DTW.

The pre-neural way to spot a small vocabulary (template matching, e.g. Sakoe & Chiba
1978; the streaming form of Sakurai et al.'s SPRING, 2007): a few recorded examples of each
keyword are the templates, and every incoming frame extends a dynamic-time-warping match
of every template that may have started at any earlier frame.

Features (:func:`mfcc`): the log-mel frames of the models' own front end
(:class:`~liquid_stream.nn.frontend.LogMel`, 25 ms / 10 ms, 40 bands), an orthonormal DCT-II
over the bands, cepstra 1 … 12 (c0, the log energy, is left out: a gain moves only c0),
and in its place the frame's level above the background — its mel energy in dB minus
the least of that over the last 2 s (a causal noise-floor tracker), capped at 20 dB — so
that a quiet stretch of background does not match the quiet edges of a template and the
feature does not depend on the input gain. Each cepstrum is divided by its standard
deviation over the templates' frames (a diagonal Mahalanobis distance), the level by 5 dB
(nearly every template frame sits at the cap, so its own spread is ~0)::

    c_k[q] = Σ_m z_k[m] · √(2/M) · cos(π q (m + ½) / M),   q = 1 … 12
    e_k    = min(20, ē_k − min_{k−199 ≤ j ≤ k} ē_j),   ē_k = 10 log10 Σ_m exp(z_k[m])
    d(k, i) = ‖([e_k, c_k] − τ_i) / σ‖₂                τ_i: template cell i

Matching (:class:`TemplateMatcher`), per template of ``m`` cells and frame ``t``: a path
takes one template cell per frame, starting at cell 0 at any frame and moving on by 0, 1
or 2 cells a frame, never staying twice in a row (Itakura's constraint: the spoken word may
run from half to twice the template's speed; without it a path could sit on one cell that
matches the background for as long as it likes). With ``A`` the least total distance of a
path that reached cell i by a move (or starts there) and ``S`` by a stay::

    A_t[0] = d(t, 0)                                                    (a match starts)
    A_t[i] = d(t, i) + min(B_{t−1}[i−1], B_{t−1}[i−2])    B = min(A, S)  (i ≥ 1)
    S_t[i] = d(t, i) + A_{t−1}[i]                                       (i ≥ 1; S_t[0] = ∞)

each with the number of frames of its path (1 at a start, +1 per frame), so
``B_t[m−1]`` is the least total distance of any such path ending on the template's last
cell at t, and the template's score at t is ``−B_t[m−1] / N``: minus the mean distance
along that path. Short templates match pieces of many words well (a vowel and a stop
closure look like "up"), so each template's score is standardised by its own mean and
standard deviation over a calibration stream (:meth:`TemplateMatcher.calibrate`, the
"z-norm" of query-by-example spoken-term detection); a keyword's score is then the best
standardised score of its templates. The app's decision rule
(:func:`liquid_stream.apps.kws.spotter.detect_events`: threshold, re-arm, refractory) turns scores
into detections, with the threshold chosen on a validation stream as for the models.
Everything is float64 numpy; the per-frame distances to every template cell are one matrix
product per block of frames, the recursion a loop over frames of vector operations.

Measured (docs/benchmarks.md §4.4, ``bench/kws_baseline.py``): on the main job's test
stream of 50 held-out synthetic speakers, 8.6 % of the keywords at 21 false accepts per
hour with 10 templates per keyword (4.7 % at 9 / h with 30), where the main job's
Liquid-S4 spotter detects 87.8–92.5 % at 3 / h: template matching does not carry across
the varied voices of the synthetic set.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from scipy.special import logsumexp

from liquid_stream.nn.frontend import LogMel, LogMelConfig

from .kws_stream import SR, noise_crop, noise_source, speech_span
from .speech import read_wav, scan_split

N_CEPS = 12  # cepstra 1 … 12 (c0 dropped)
N_FEATURES = N_CEPS + 1  # and the level above the background
FLOOR_FRAMES = 200  # the noise floor: the least frame level over the last 2 s
LEVEL_CAP_DB = 20.0
LEVEL_SCALE_DB = 5.0  # the level's scale in the distance (the templates' own spread is ~0)
BLOCK_FRAMES = 6000  # frames per block of the feature computation (60 s)
HOP = LogMelConfig().hop


def dct_matrix(n_mels: int, n_ceps: int = N_CEPS) -> np.ndarray:
    """``(n_mels, n_ceps)``: the orthonormal DCT-II rows q = 1 … n_ceps (c0 left out)."""
    m = np.arange(n_mels) + 0.5
    q = np.arange(1, n_ceps + 1)
    return np.sqrt(2.0 / n_mels) * np.cos(np.pi * np.outer(m, q) / n_mels)


def level_above_floor(level_db: np.ndarray, n: int = FLOOR_FRAMES) -> np.ndarray:
    """``min(LEVEL_CAP_DB, level[k] − min(level[k−n+1 … k]))`` (fewer frames at the start)."""
    lv = np.asarray(level_db, np.float64)
    if len(lv) == 0:
        return lv
    padded = np.concatenate([np.full(n - 1, np.inf), lv])
    floor = np.lib.stride_tricks.sliding_window_view(padded, n).min(1)
    return np.minimum(LEVEL_CAP_DB, lv - floor)


def mfcc(x: np.ndarray, cfg: LogMelConfig | None = None) -> np.ndarray:
    """Causal feature frames ``(⌊L/R⌋, N_FEATURES)`` float64 of samples ``x (L,)`` at
    16 kHz: ``[e, c1 … c12]`` of the module docstring, frame k ending at sample
    (k+1)·R − 1. The log-mel frames are those of :class:`LogMel`, computed in blocks of
    :data:`BLOCK_FRAMES` frames (each with its W − R samples of history), so a long stream
    needs little memory."""
    cfg = LogMelConfig() if cfg is None else cfg
    front = LogMel(cfg)
    W, R = cfg.win, cfg.hop
    x = np.asarray(x, np.float64)
    n = len(x) // R
    dct = dct_matrix(cfg.n_mels)
    ceps, level = [], []
    padded = np.concatenate([np.zeros(W - R), x])  # padded[j + W − R] = x[j]
    for k0 in range(0, n, BLOCK_FRAMES):
        k1 = min(n, k0 + BLOCK_FRAMES)
        seg = padded[k0 * R : (k1 - 1) * R + W]  # frames k0 … k1−1
        with torch.no_grad():
            z = front.frames(torch.from_numpy(seg)[None, None])[0].numpy()
        ceps.append(z @ dct)
        level.append(logsumexp(z, axis=1) * (10.0 / np.log(10.0)))  # dB of Σ_m E_m
    if not ceps:
        return np.zeros((0, N_FEATURES))
    e = level_above_floor(np.concatenate(level))
    return np.concatenate([e[:, None], np.concatenate(ceps)], 1)


@dataclass(frozen=True)
class Template:
    """One example of a keyword: its MFCC frames over the clip's speech."""

    keyword: str
    frames: np.ndarray  # (m, N_FEATURES)
    source: str  # the WAV it came from, relative to the root


def load_templates(
    root: str | os.PathLike,
    keywords: tuple[str, ...] | list[str],
    per_keyword: int,
    seed: int = 0,
    split: str = "train",
    noise_gain: float = 0.02,
) -> list[Template]:
    """``per_keyword`` templates of each keyword, drawn without replacement from the
    clips of ``split`` (a Speech Commands v0.02 root), one per speaker while speakers last
    (speaker = the file name's part before ``_nohash_``); each the frames of its speech
    (:func:`~.kws_stream.speech_span`, 40 dB below the loudest 10 ms block). Templates are
    recorded in the streams' background: the clip, after 0.5 s of silence, gets a crop of
    the root's ``_background_noise_`` at ``noise_gain`` (kws-stream's noise bed and level;
    on clean clips the empty mel bands sit at the log floor, and the cepstra of a clean
    template and of the same word over any background differ more than two words do)."""
    if per_keyword < 1:
        raise ValueError(f"per_keyword must be >= 1, got {per_keyword}")
    root = Path(root)
    rng = np.random.default_rng(seed)
    files = scan_split(root, split, list(keywords))
    noise = noise_source(root) if noise_gain > 0 else None  # loaded once
    pad = SR // 2
    out = []
    for word in keywords:
        mine = [f for f in files if f.split("/")[0] == word]
        if not mine:
            raise ValueError(f"no {split}-split clips of {word!r} in {root}")
        first, again, seen = [], [], set()  # a speaker's first clip, then the others
        for i in rng.permutation(len(mine)):
            spk = _speaker(mine[i])
            (again if spk in seen else first).append(mine[i])
            seen.add(spk)
        chosen = (first + again)[:per_keyword]
        for rel in chosen:
            s = read_wav(root / rel).astype(np.float64) / 32768.0
            a, b = speech_span(s)
            x = np.concatenate([np.zeros(pad), s])
            if noise is not None:
                x = x + noise_gain * noise_crop(noise, len(x), rng)
            f = mfcc(x)[(pad + a) // HOP : (pad + b) // HOP]
            if len(f):
                out.append(Template(word, f, rel))
    return out


def _speaker(rel: str) -> str:
    return rel.split("/")[-1].split("_nohash_")[0]


class TemplateMatcher:
    """Streaming subsequence DTW of many templates (the module docstring's recursion).

    ``update(frames)`` takes the next feature frames ``(T, N_FEATURES)`` and returns every
    keyword's score ``(T, K)`` at each of them (−inf until a first match can end);
    ``reset()`` starts a new stream. State: ``A`` / ``S`` (least path distance into every
    template cell by a move / by a stay) and ``NA`` / ``NS`` (their paths' frame counts)."""

    def __init__(self, templates: list[Template], keywords: list[str] | tuple[str, ...]):
        if not templates:
            raise ValueError("TemplateMatcher needs at least one template")
        self.keywords = list(keywords)
        bad = sorted({t.keyword for t in templates} - set(self.keywords))
        if bad:
            raise ValueError(f"templates of unknown keyword(s): {', '.join(bad)}")
        cells = np.concatenate([t.frames for t in templates])  # (C, d)
        self.sigma = cells.std(0) + 1e-9
        self.sigma[0] = LEVEL_SCALE_DB  # nearly every template frame is at the cap
        self.cells = cells / self.sigma
        self.sq = np.sum(self.cells**2, 1)  # (C,)
        lengths = np.array([len(t.frames) for t in templates])
        ends = np.cumsum(lengths)
        starts = ends - lengths
        self.first = np.zeros(len(cells), bool)
        self.first[starts] = True
        # cell i may come from i−1 (not at a template's first cell) and i−2 (not at its
        # first two cells)
        self.from1 = ~self.first
        self.from2 = self.from1.copy()
        self.from2[starts[lengths > 1] + 1] = False
        self.last = ends - 1  # (J,) each template's last cell
        self.kw_of = np.array([self.keywords.index(t.keyword) for t in templates])
        self.mu = np.zeros(len(templates))  # z-norm of each template's score (calibrate)
        self.sd = np.ones(len(templates))
        self.reset()

    def calibrate(self, frames: np.ndarray) -> None:
        """Set each template's score mean and standard deviation from a stream's frames
        (over the frames where a match can end); the state is reset before and after."""
        self.mu, self.sd = np.zeros(len(self.last)), np.ones(len(self.last))
        self.reset()
        s = self._run(frames)
        self.reset()
        for j in range(s.shape[1]):
            v = s[np.isfinite(s[:, j]), j]
            if len(v) > 1:
                self.mu[j], self.sd[j] = v.mean(), v.std() + 1e-9

    def reset(self) -> None:
        C = len(self.cells)
        self.A, self.S = np.full(C, np.inf), np.full(C, np.inf)  # by a move / by a stay
        self.NA, self.NS = np.ones(C), np.ones(C)  # frames on those paths

    def distances(self, frames: np.ndarray) -> np.ndarray:
        """``(T, C)``: the scaled Euclidean distance of each frame to each cell."""
        f = np.asarray(frames, np.float64) / self.sigma
        d2 = np.sum(f**2, 1)[:, None] + self.sq[None, :] - 2.0 * (f @ self.cells.T)
        return np.sqrt(np.maximum(d2, 0.0))

    def update(self, frames: np.ndarray) -> np.ndarray:
        s = (self._run(frames) - self.mu) / self.sd  # (T, J)
        scores = np.full((len(s), len(self.keywords)), -np.inf)
        for k in range(len(self.keywords)):
            mine = self.kw_of == k
            if mine.any():
                scores[:, k] = s[:, mine].max(1)
        return scores

    def _run(self, frames: np.ndarray) -> np.ndarray:
        """The raw template scores ``(T, J)`` (−mean distance; −inf before a first end),
        :data:`BLOCK_FRAMES` frames at a time (the distances of a block are ``(T, C)``)."""
        frames = np.asarray(frames, np.float64)
        n = BLOCK_FRAMES
        if len(frames) > n:
            return np.concatenate([self._run(frames[i : i + n]) for i in range(0, len(frames), n)])
        dist = self.distances(frames)
        T, C = dist.shape
        out = np.full((T, len(self.last)), -np.inf)
        A, S, NA, NS = self.A, self.S, self.NA, self.NS
        inf = np.full(2, np.inf)
        ones = np.ones(2)
        for t in range(T):
            stay = S < A
            B = np.where(stay, S, A)
            NB = np.where(stay, NS, NA)
            b1 = np.where(self.from1, np.concatenate([inf[:1], B[:-1]]), np.inf)
            b2 = np.where(self.from2, np.concatenate([inf, B[:-2]]), np.inf)
            two = b2 < b1
            n1 = np.concatenate([ones[:1], NB[:-1]])
            n2 = np.concatenate([ones, NB[:-2]])
            S, NS = dist[t] + A, NA + 1.0
            S[self.first] = np.inf
            A, NA = dist[t] + np.where(two, b2, b1), np.where(two, n2, n1) + 1.0
            A[self.first], NA[self.first] = dist[t, self.first], 1.0
            last = self.last
            end_stay = S[last] < A[last]
            out[t] = -np.where(end_stay, S[last] / NS[last], A[last] / NA[last])
        self.A, self.S, self.NA, self.NS = A, S, NA, NS
        return out


def score_frames(matcher: TemplateMatcher, frames: np.ndarray) -> np.ndarray:
    """Keyword scores ``(F, K)`` of a whole stream's feature frames (:func:`mfcc`), from a
    fresh matcher state; frame k is scored at time (k+1)·HOP / SR."""
    matcher.reset()
    return matcher.update(frames)
