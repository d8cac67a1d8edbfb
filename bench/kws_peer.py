"""The keyword spotter next to a peer in the same run: pocketsphinx's keyword search.

    python bench/kws_peer.py [MODEL] --val val.wav val.csv --test test.wav test.csv \\
        [--noise-root SPEECH_ROOT] [--snr 20 10 5] [--foreign-minutes 5] [--out R.json]

MODEL is an exported spotter (default: the shipped ``kws-sc10``). The streams come from
``liquid-stream data kws-stream`` (``--split validation`` for ``--val``, the test split
for ``--test``; speakers never seen by the model), e.g. from a synthetic set of a seed the
shipped model never used::

    liquid-stream data speech-synth runs/kws-peer/speech --per-word 100 --speakers 400 --seed 9
    liquid-stream data kws-stream runs/kws-peer/val.wav --labels runs/kws-peer/val.csv \\
        --data runs/kws-peer/speech --split validation --minutes 20 --seed 1 --distinct
    liquid-stream data kws-stream runs/kws-peer/test.wav --labels runs/kws-peer/test.csv \\
        --data runs/kws-peer/speech --minutes 20 --seed 2 --distinct

The peer is pocketsphinx 5 (``pip install -e '.[peer]'``; its wheel bundles the en-US
acoustic model and the CMU dictionary) in keyword-search mode: the ten keywords as
keyphrases (every pronunciation of the dictionary: ``on`` has two), each with its own
threshold, decoded continuously over the stream in 100 ms calls (no language model, no
restart). Its search does not depend on the thresholds (they only decide which frames are
reported), so every keyword is given once per threshold of a grid as an alias word of the
same pronunciation (``yes__p0__l3``): one decode gives the detections of every threshold
of the grid, exactly those of a decode with that threshold alone
(tests/bench/test_kws_peer.py checks it). The grid per keyword is set on the first
``--calib-minutes`` of the VALIDATION stream (a coarse pass, 1e+40 … 1e-40 in steps of
1e5): from one step above its highest threshold with a detection down to the first one
with more than 300 false accepts / h, in steps of 10^2.5. A detection's time is the end
of its last frame; of detections less than 1 s apart (any keyword) the first is kept,
the app's refractory period (and what the usual pocketsphinx loop, which restarts the
search after each detection, does).

Three methods, every threshold chosen on the VALIDATION stream only:
- **kws-sc10, one threshold**: the app's rule (``kws-tune``: one threshold for every
  keyword × smoothing window, the highest detection at ≤ B false accepts / h; replayed
  on the model's posteriors, :func:`liquid_stream.apps.kws.tune.posterior_trace`, 100 ms
  calls); the model's own shipped point (its metadata) is a row of its own;
- **kws-sc10, per keyword**: a threshold per keyword (the app takes a dict), and
- **pocketsphinx, per keyword**: its kws threshold per keyword (or the keyword off),
  both chosen by :func:`allocate`: the per-keyword thresholds with the most validation
  detections whose false accepts sum to ≤ B·hours (each keyword scored alone; exact, by
  dynamic programming over the false-accept count), then scored all together, and
  stepped down to a smaller sum until together they keep ≤ B·hours
  (:func:`checked_allocate`: the refractory period couples the keywords).
Each method's *ladder* of points, all chosen on validation: its point at ≤ c false
accepts for every c = 0 … 200 / h, and, for the strict side (a short validation stream
has no false accept to give below some point), the point with the fewest validation
false accepts that still detects ≥ d of its keywords (ties: the stricter thresholds), for
d = 5 %, 10 %, … 95 %, 97.5 %, 99 %, 100 % (:func:`allocate_min_fa`). Per set, the table
gives (detection, false accepts / h):
- ``val ≤ B / h``: each method's point chosen on validation at that budget;
- ``≤ x / h here``: the best of its ladder's points with ≤ x / h on this set (matched
  false-accept rates: the points are chosen on validation, read off on this set;
  –: none of them is that low here);
- ``at <method>'s FA/h``: every method at ≤ the false accepts / h the other reaches on
  this set with its ``val ≤ 5 / h`` point.

Sets: the clean test stream; the same with noise at ``--snr`` dB (bench/kws_robustness.py's
``add_noise_over_words``: the SNR over the labelled words, the noise crops of
``--noise-root``'s ``_background_noise_`` files, else pink noise); and real non-English
speech for false accepts: the prompts of Debian's ``asterisk-core-sounds-{es,fr,it,ru}-wav``
(one human speaker each, 8 kHz telephone prompts resampled to 16 kHz; those with a line in
the package's transcript, the NATO alphabet folder ``phonetic/`` left out), shuffled and
laid end to end with 0.5–2 s gaps under kws-stream's noise bed, ``--foreign-minutes`` per
language. A keyword heard in a prompt whose transcript holds one of its cognates
(``no``: Spanish "no", French / Italian "non") is counted apart. The English asterisk
sounds are never used here (they are the project's final check). Every stream is quantised
to 16-bit (both methods hear the same samples; the noisy ones are clipped, the table says
how much).
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import json
import math
import re
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from fractions import Fraction
from importlib.metadata import version
from pathlib import Path

import numpy as np
from kws_robustness import add_noise_over_words, background_noise, span_mask
from scipy.signal import resample_poly

from liquid_stream.apps.common.audio import read_wav
from liquid_stream.apps.kws.spotter import (
    Detection,
    KeywordSpotter,
    detect_events,
    evaluate_detections,
)
from liquid_stream.apps.kws.tune import (
    SMOOTH_GRID_MS,
    THRESHOLD_GRID,
    choose,
    posterior_trace,
    replay,
    smooth,
)
from liquid_stream.io.labels import TrueEvent, read_label_csv
from liquid_stream.io.wav import read_pcm16
from liquid_stream.models import KWS, shipped
from liquid_stream.training.data.speech.kws_stream import SC10, noise_crop, noise_source

ROOT = Path(__file__).resolve().parents[1]
SR = 16000
FRAME_S = 0.01  # pocketsphinx's frame step (frate 100)
CHUNK = 1600  # samples per call, both methods
REFRACTORY = 1.0
TOLERANCE = 1.0
COARSE = tuple(float(e) for e in range(40, -41, -5))  # calibration thresholds, 10^e
FINE_STEP = 2.5
CAL_FA_PER_HOUR = 300.0
VAL_BUDGETS = (2.0, 5.0, 10.0, 20.0, 50.0)
HERE_BUDGETS = (2.0, 5.0, 10.0, 20.0, 50.0)
MATCH_BUDGET = 5.0
LADDER_MAX_FA = 200.0
DETECTION_TARGETS = tuple(d / 100 for d in (*range(5, 100, 5), 97.5, 99, 100))
LANGUAGES = ("es", "fr", "it", "ru")
COGNATES = {"no": ("no", "non")}
INSTALL_NOTE = (
    "bench/kws_peer.py needs pocketsphinx >= 5 (the peer): "
    "pip install -e '.[peer]'  (or: pip install 'pocketsphinx>=5')"
)


def load_pocketsphinx():
    """The pocketsphinx module, or SystemExit with :data:`INSTALL_NOTE` (one line)."""
    try:
        import pocketsphinx
    except ImportError:
        raise SystemExit(INSTALL_NOTE) from None
    return pocketsphinx


# ------------------------------------------------------------------------------ the peer


def threshold_text(e: float) -> str:
    """10^e as the keyphrase file writes it (atof: no fractional exponent)."""
    return f"{10.0**e:.6e}"


class PeerSpotter:
    """pocketsphinx's keyword search with every keyword at every threshold of its grid.

    ``levels``: keyword → threshold exponents (10^e), strictest first. :meth:`decode`
    returns ``hits[keyword][i]``: the detection times (s, sorted) at threshold
    10^levels[keyword][i], pronunciations pooled."""

    def __init__(self, keywords, levels: dict[str, list[float]]):
        ps = load_pocketsphinx()
        self.keywords = list(keywords)
        self.levels = {k: [float(e) for e in levels[k]] for k in self.keywords}
        self.decoder = ps.Decoder(ps.Config(lm=None, loglevel="ERROR"))
        self.prons = {k: self.pronunciations(k) for k in self.keywords}
        lines = []
        for k in self.keywords:
            for p, phones in enumerate(self.prons[k]):
                for i, e in enumerate(self.levels[k]):
                    name = f"{k}__p{p}__l{i}"
                    self.decoder.add_word(name, phones, False)
                    lines.append(f"{name} /{threshold_text(e)}/")
        self.n_keyphrases = len(lines)
        with tempfile.NamedTemporaryFile("w", suffix=".kws", delete=False) as f:
            f.write("\n".join(lines) + "\n")
        try:
            self.decoder.add_kws("peer", f.name)
        finally:
            Path(f.name).unlink()
        self.decoder.activate_search("peer")
        self.cpu_s = 0.0
        self.audio_s = 0.0

    def pronunciations(self, word: str) -> list[str]:
        out, alt = [], word
        while (phones := self.decoder.lookup_word(alt)) is not None:
            out.append(phones)
            alt = f"{word}({len(out) + 1})"
        if not out:
            raise SystemExit(f"pocketsphinx's dictionary has no {word!r}")
        return out

    def decode(self, pcm: np.ndarray) -> dict[str, list[np.ndarray]]:
        """One continuous pass over 16 kHz int16 ``pcm`` in 100 ms calls."""
        t0 = time.process_time()
        raw = np.asarray(pcm, "<i2").tobytes()
        d = self.decoder
        d.start_utt()
        for pos in range(0, len(raw), 2 * CHUNK):
            d.process_raw(raw[pos : pos + 2 * CHUNK], False, False)
        d.end_utt()
        hits = {k: [[] for _ in self.levels[k]] for k in self.keywords}
        for seg in d.seg() or []:
            k, _, level = seg.word.strip().split("__")
            hits[k][int(level[1:])].append((seg.end_frame + 1) * FRAME_S)
        self.cpu_s += time.process_time() - t0
        self.audio_s += len(pcm) / SR
        return {k: [np.sort(np.array(t)) for t in v] for k, v in hits.items()}


def fine_levels(cal_hits: dict[str, list[np.ndarray]], truth, hours: float) -> dict:
    """Per keyword, the grid of the main decode from the coarse calibration pass (module
    docstring): exponents from one coarse step above the highest with a detection down to
    the first with more than CAL_FA_PER_HOUR false accepts / h, every FINE_STEP."""
    out = {}
    for k, per in cal_hits.items():
        fired = [i for i, t in enumerate(per) if len(t)]
        top = COARSE[max(fired[0] - 1, 0)] if fired else COARSE[-1]
        bottom = COARSE[-1]
        for i in fired:
            det = refractory([Detection(float(t), k, 0.0) for t in per[i]])
            fa = evaluate_detections(det, truth, [k], hours * 3600, TOLERANCE)["false_accepts"]
            if fa / hours > CAL_FA_PER_HOUR:
                bottom = COARSE[i]
                break
        n = int(round((top - bottom) / FINE_STEP))
        out[k] = [top - FINE_STEP * j for j in range(n + 1)]
    return out


# ------------------------------------------------------------------------------- scoring


def refractory(dets: list[Detection], seconds: float = REFRACTORY) -> list[Detection]:
    """The detections sorted by time, less any within ``seconds`` of the last one kept."""
    out: list[Detection] = []
    for d in sorted(dets, key=lambda d: d.time_s):
        if not out or d.time_s - out[-1].time_s >= seconds:
            out.append(d)
    return out


def allocate(curves: list[list[tuple[int, int]]], capacity: int) -> tuple[int, ...]:
    """Per-keyword operating points: ``curves[k][j] = (detected, false accepts)`` of
    keyword k at its j-th threshold (strictest first). Returns the j per keyword with the
    most detections whose false accepts sum to ≤ ``capacity`` (ties: fewer false accepts,
    then the stricter thresholds: the smaller sum of j); none fits: each keyword at its
    fewest false accepts (ties: more detections, then the stricter)."""
    if capacity < sum(min(fa for _, fa in c) for c in curves):
        return tuple(min(range(len(c)), key=lambda j, c=c: (c[j][1], -c[j][0], j)) for c in curves)
    best: dict[int, tuple[int, int, tuple[int, ...]]] = {0: (0, 0, ())}  # fa → (det, -Σj, js)
    for c in curves:
        nxt: dict[int, tuple[int, int, tuple[int, ...]]] = {}
        for fa0, (det0, neg0, js) in best.items():
            for j, (det, fa) in enumerate(c):
                f = fa0 + fa
                if f > capacity:
                    continue
                cand = (det0 + det, neg0 - j, (*js, j))
                if f not in nxt or cand[:2] > nxt[f][:2]:
                    nxt[f] = cand
        best = nxt
    f, (_, _, js) = max(best.items(), key=lambda kv: (kv[1][0], -kv[0], kv[1][1]))
    return js


def allocate_min_fa(curves: list[list[tuple[int, int]]], target: int) -> tuple[int, ...] | None:
    """The strict side of :func:`allocate`: the j per keyword with the fewest false accepts
    whose detections sum to ≥ ``target`` (ties: the stricter thresholds, the smaller sum
    of j, then more detections); None if no choice detects that many."""
    # total detections (capped at target) → (false accepts, Σj, -detections, js)
    best: dict[int, tuple[int, int, int, tuple[int, ...]]] = {0: (0, 0, 0, ())}
    for c in curves:
        nxt: dict[int, tuple[int, int, int, tuple[int, ...]]] = {}
        for d0, (fa0, sj0, nd0, js) in best.items():
            for j, (det, fa) in enumerate(c):
                d = min(d0 + det, target)
                cand = (fa0 + fa, sj0 + j, nd0 - det, (*js, j))
                if d not in nxt or cand[:3] < nxt[d][:3]:
                    nxt[d] = cand
        best = nxt
    return best[target][3] if target in best else None


def checked_allocate(curves, capacity: int, combined_fa) -> tuple[int, ...]:
    """:func:`allocate` at ``capacity``, else ``capacity`` − 1, …, 0: the first choice whose
    keywords *together* (``combined_fa(js)``: the false accepts of all of them at once,
    the refractory period across keywords included) keep ≤ ``capacity`` false accepts;
    none does: the one of those tried with the fewest."""
    tried = []
    for c in range(capacity, -1, -1):
        js = allocate(curves, c)
        fa = combined_fa(js)
        if fa <= capacity:
            return js
        tried.append((fa, capacity - c, js))
    return min(tried)[2]


def on_val(method, setting) -> dict:
    """``method``'s score at ``setting`` on its validation stream (cached)."""
    cache = method.__dict__.setdefault("_val_cache", {})
    if setting not in cache:
        cache[setting] = score(method.detections(setting, method.val), method.val, method.keywords)
    return cache[setting]


def best_at(points: list[dict], fa_per_hour: float) -> dict | None:
    """Of scored points (``detection_rate``, ``false_accepts_per_hour``), the one with the
    highest detection at ≤ ``fa_per_hour`` (ties: fewer false accepts); None if none."""
    ok = [p for p in points if p["false_accepts_per_hour"] <= fa_per_hour + 1e-9]
    if not ok:
        return None
    return max(ok, key=lambda p: (p["detection_rate"] or 0.0, -p["false_accepts_per_hour"]))


def score(dets: list[Detection], stream: Stream, keywords) -> dict:
    return evaluate_detections(dets, stream.truth, list(keywords), stream.seconds, TOLERANCE)


# ------------------------------------------------------------------------------- streams


@dataclass
class Stream:
    name: str
    pcm: np.ndarray  # int16, 16 kHz
    truth: list[TrueEvent]
    note: str = ""
    prompts: list[dict] = field(default_factory=list)  # the non-English sets: spans, words

    @property
    def seconds(self) -> float:
        return len(self.pcm) / SR

    @property
    def hours(self) -> float:
        return self.seconds / 3600

    @property
    def audio(self) -> np.ndarray:
        return self.pcm.astype(np.float32) / 32768.0


def to_pcm16(x: np.ndarray) -> tuple[np.ndarray, float]:
    """int16 samples of float ``x`` and the fraction clipped."""
    y = np.round(np.asarray(x, np.float64) * 32768.0)
    clipped = float(np.mean((y > 32767) | (y < -32768)))
    return np.clip(y, -32768, 32767).astype(np.int16), clipped


def noisy_streams(test: Stream, snrs, noise_root: Path | None, seed: int = 1) -> list[Stream]:
    x = test.pcm.astype(np.float64) / 32768.0
    noise, desc = background_noise(noise_root, len(x), seed)
    words = span_mask(test.truth, len(x))
    out = []
    for snr in snrs:
        pcm, clipped = to_pcm16(add_noise_over_words(x, noise, float(snr), words))
        out.append(
            Stream(
                f"test, SNR {snr:g} dB",
                pcm,
                test.truth,
                f"noise: {desc}; {100 * clipped:.3f} % of samples clipped",
            )
        )
    return out


def words_of(text: str) -> set[str]:
    return set(re.findall(r"[^\W\d_]+", text.lower()))


def transcripts(lang: str) -> dict[str, str]:
    """name (``digits/1``) → text, from the package's ``core-sounds-LANG.txt.gz``."""
    path = Path(f"/usr/share/doc/asterisk-core-sounds-{lang}/core-sounds-{lang}.txt.gz")
    if not path.is_file():
        return {}
    out = {}
    for line in gzip.open(path, "rt", encoding="utf-8-sig").read().splitlines():
        name, sep, text = line.partition(":")
        if sep and not name.startswith(";") and name.strip():
            out.setdefault(name.strip(), text.strip())
    return out


def foreign_stream(
    root: Path, lang: str, minutes: float, noise_root: Path | None, seed: int = 0
) -> Stream | None:
    """The prompts of ``root/lang`` (module docstring) laid end to end, or None if the
    language is not installed."""
    folder = (root / lang).resolve()
    texts = transcripts(lang)
    files = sorted(
        p
        for p in folder.rglob("*.wav")
        if p.relative_to(folder).parts[0] not in ("phonetic", "silence")
        and str(p.relative_to(folder).with_suffix("")) in texts
    )
    if not files:
        return None
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(files))
    n = int(round(minutes * 60 * SR))
    x = np.zeros(n, np.float64)
    pos, prompts, truth = int(SR * 0.5), [], []
    for i in order:
        p = files[int(i)]
        y, rate, _ = read_wav(p)
        if rate != SR:
            r = Fraction(SR, rate)
            y = resample_poly(y, r.numerator, r.denominator)
        if pos + len(y) > n:
            break
        x[pos : pos + len(y)] = y
        name = str(p.relative_to(folder).with_suffix(""))
        prompts.append(
            {
                "start_s": pos / SR,
                "end_s": (pos + len(y)) / SR,
                "name": name,
                "words": sorted(words_of(texts[name])),
            }
        )
        truth.append(TrueEvent(pos / SR, (pos + len(y)) / SR, f"{lang}:{name}", False))
        pos += len(y) + int(round(rng.uniform(0.5, 2.0) * SR))
    src = noise_source(noise_root) if noise_root is not None else None
    if src is not None:  # kws-stream's noise bed
        bed = 0.02 * noise_crop(src, n, rng)
    else:
        bed = 0.005 * background_noise(None, n, seed + 7)[0]
    pcm, _ = to_pcm16(x + bed)
    return Stream(
        f"non-English: {lang}", pcm, truth, f"{len(prompts)} prompts of {folder.name}", prompts
    )


def cognate_split(dets: list[Detection], stream: Stream) -> tuple[int, int]:
    """(false accepts, of which cognate hits) on a non-English stream: a detection of
    keyword k in a prompt (its span + the tolerance) whose transcript holds a cognate."""
    cog = 0
    starts = [p["start_s"] for p in stream.prompts]
    for d in dets:
        i = int(np.searchsorted(starts, d.time_s, side="right")) - 1
        if i < 0:
            continue
        p = stream.prompts[i]
        if d.time_s <= p["end_s"] + TOLERANCE and set(COGNATES.get(d.keyword, ())) & set(
            p["words"]
        ):
            cog += 1
    return len(dets), cog


# ------------------------------------------------------------------------------- methods


class SpotterOne:
    """kws-sc10 with one threshold (kws-tune's grid and rule)."""

    name = "kws-sc10, one threshold"

    def __init__(self, model: str, keywords):
        self.model, self.keywords = model, list(keywords)
        self.traces: dict[str, dict] = {}
        self.cpu_s = self.audio_s = 0.0

    def trace(self, stream: Stream) -> dict:
        if stream.name not in self.traces:
            t0 = time.process_time()
            p, dt, labels = posterior_trace(self.model, stream.audio, chunk_ms=CHUNK * 1000 / SR)
            self.cpu_s += time.process_time() - t0
            self.audio_s += stream.seconds
            if labels != self.keywords:
                raise SystemExit(f"the model's keywords {labels} are not {self.keywords}")
            self.dt = dt
            self.traces[stream.name] = {
                sm: smooth(p, max(1, int(round(sm / 1000 / dt)))) for sm in SMOOTH_GRID_MS
            }
        return self.traces[stream.name]

    def fit(self, val: Stream) -> None:
        tr = self.trace(val)
        self.rows = []
        for sm, s in tr.items():
            for thr in THRESHOLD_GRID:
                r = replay(s, self.dt, thr, self.keywords, val.truth, REFRACTORY, TOLERANCE)
                self.rows.append(
                    {
                        "smooth_ms": sm,
                        "threshold": thr,
                        "detection_rate": r["detection_rate"] or 0.0,
                        "false_accepts_per_hour": r["false_accepts_per_hour"],
                    }
                )
        self.val, self.val_hours = val, val.hours

    def choose(self, fa_count: int) -> tuple:
        pick = choose(self.rows, (fa_count + 1e-6) / self.val_hours)
        return (pick["smooth_ms"], (pick["threshold"],) * len(self.keywords))

    def strict(self, target: int) -> tuple | None:
        """The setting with the fewest validation false accepts detecting ≥ ``target``
        keywords there (ties: the higher threshold, then the shorter window)."""
        n = sum(e.is_keyword for e in self.val.truth)
        ok = [r for r in self.rows if r["detection_rate"] * n >= target - 1e-9]
        if not ok:
            return None
        r = min(ok, key=lambda r: (r["false_accepts_per_hour"], -r["threshold"], r["smooth_ms"]))
        return (r["smooth_ms"], (r["threshold"],) * len(self.keywords))

    def detections(self, setting: tuple, stream: Stream) -> list[Detection]:
        sm, thr = setting
        s = self.trace(stream)[sm]
        fired, _ = detect_events(
            s, np.asarray(thr, np.float64), REFRACTORY / self.dt, np.ones(len(thr), bool), -np.inf
        )
        return [Detection((t + 1) * self.dt, self.keywords[j], float(s[t, j])) for t, j in fired]

    def describe(self, setting: tuple) -> str:
        return f"{setting[0]:g} ms, {setting[1][0]:.2f}"


class SpotterPerKeyword(SpotterOne):
    """kws-sc10 with a threshold per keyword (:func:`allocate`, per smoothing window)."""

    name = "kws-sc10, per keyword"

    def __init__(self, one: SpotterOne):
        self.__dict__.update({k: v for k, v in one.__dict__.items() if k != "rows"})
        self.one = one

    def trace(self, stream: Stream) -> dict:
        return self.one.trace(stream)

    def fit(self, val: Stream) -> None:
        self.val, self.val_hours = val, val.hours
        grid = sorted(THRESHOLD_GRID, reverse=True)  # strictest first
        self.grid, self.curves = grid, {}
        for sm, s in self.trace(val).items():
            cur = []
            for j, k in enumerate(self.keywords):
                c = []
                for thr in grid:
                    r = replay(s[:, [j]], self.dt, thr, [k], val.truth, REFRACTORY, TOLERANCE)
                    c.append((r["detected"], r["false_accepts"]))
                cur.append(c)
            self.curves[sm] = cur

    def setting(self, sm: float, js: tuple[int, ...]) -> tuple:
        return (sm, tuple(self.grid[j] for j in js))

    def choose(self, fa_count: int) -> tuple:
        best = None
        for sm, cur in self.curves.items():
            js = checked_allocate(
                cur, fa_count, lambda js, sm=sm: on_val(self, self.setting(sm, js))["false_accepts"]
            )
            r = on_val(self, self.setting(sm, js))
            fa = r["false_accepts"]
            key = (fa <= fa_count, r["detected"], -fa, -sum(js), -sm)
            if best is None or key > best[0]:
                best = (key, self.setting(sm, js))
        return best[1]

    def strict(self, target: int) -> tuple | None:
        best = None
        for sm, cur in self.curves.items():
            js = allocate_min_fa(cur, target)
            if js is None:
                continue
            r = on_val(self, self.setting(sm, js))
            key = (r["false_accepts"], -r["detected"], sm)
            if best is None or key < best[0]:
                best = (key, self.setting(sm, js))
        return None if best is None else best[1]

    def describe(self, setting: tuple) -> str:
        return f"{setting[0]:g} ms, " + " ".join(
            f"{k} {t:.2f}" for k, t in zip(self.keywords, setting[1], strict=True)
        )


class Peer:
    """pocketsphinx's keyword search with a threshold per keyword (or off)."""

    name = "pocketsphinx, per keyword"

    def __init__(self, keywords, calib_minutes: float):
        self.keywords, self.calib_minutes = list(keywords), calib_minutes
        self.hits: dict[str, dict] = {}

    def fit(self, val: Stream) -> None:
        n = min(len(val.pcm), int(self.calib_minutes * 60 * SR))
        cal = PeerSpotter(self.keywords, {k: list(COARSE) for k in self.keywords})
        cal_hits = cal.decode(val.pcm[:n])
        truth = [e for e in val.truth if e.end_s <= n / SR]
        self.levels = fine_levels(cal_hits, truth, n / SR / 3600)
        self.calib_cpu_s = cal.cpu_s
        self.spotter = PeerSpotter(self.keywords, self.levels)
        self.val, self.val_hours = val, val.hours
        hits = self.decode(val)
        self.curves = []
        for k in self.keywords:
            c = [(0, 0)]  # j = 0: off (the keyword never fires)
            for t in hits[k]:
                r = score(refractory([Detection(float(x), k, 0.0) for x in t]), val, [k])
                c.append((r["detected"], r["false_accepts"]))
            self.curves.append(c)

    def decode(self, stream: Stream) -> dict:
        if stream.name not in self.hits:
            self.hits[stream.name] = self.spotter.decode(stream.pcm)
        return self.hits[stream.name]

    @property
    def cpu_s(self) -> float:
        return self.spotter.cpu_s

    @property
    def audio_s(self) -> float:
        return self.spotter.audio_s

    def choose(self, fa_count: int) -> tuple:
        return checked_allocate(self.curves, fa_count, lambda js: on_val(self, js)["false_accepts"])

    def strict(self, target: int) -> tuple | None:
        return allocate_min_fa(self.curves, target)

    def detections(self, setting: tuple, stream: Stream) -> list[Detection]:
        hits = self.decode(stream)
        dets = [
            Detection(float(t), k, 0.0)
            for k, j in zip(self.keywords, setting, strict=True)
            if j > 0
            for t in hits[k][j - 1]
        ]
        return refractory(dets)

    def describe(self, setting: tuple) -> str:
        return " ".join(
            f"{k} " + ("off" if j == 0 else f"1e{self.levels[k][j - 1]:+g}")
            for k, j in zip(self.keywords, setting, strict=True)
        )


# ---------------------------------------------------------------------------------- main


def git_state() -> str:
    def git(*a):
        return subprocess.run(["git", "-C", str(ROOT), *a], capture_output=True, text=True).stdout

    dirty = [ln[3:] for ln in git("status", "--porcelain", "-uno").splitlines() if ln.strip()]
    if git("status", "--porcelain", "--", "bench/kws_peer.py").strip():
        dirty.append("bench/kws_peer.py")
    return git("rev-parse", "--short", "HEAD").strip() + (
        f" (+ uncommitted changes to {', '.join(sorted(set(dirty)))})" if dirty else ""
    )


def cell(p: dict | None, with_det: bool = True) -> str:
    if p is None:
        return "–"
    fa = f"{p['false_accepts_per_hour']:.1f}"
    if not with_det:
        return fa
    return f"{100 * (p['detection_rate'] or 0.0):.1f} % ({fa})"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "model",
        nargs="?",
        default=None,
        help="exported keyword spotter (.onnx) [default: the shipped kws-sc10]",
    )
    ap.add_argument(
        "--val",
        nargs=2,
        required=True,
        metavar=("WAV", "CSV"),
        help="validation stream (thresholds are chosen on it)",
    )
    ap.add_argument("--test", nargs=2, required=True, metavar=("WAV", "CSV"))
    ap.add_argument(
        "--noise-root",
        default=None,
        help="folder with _background_noise_/*.wav [default: pink noise]",
    )
    ap.add_argument("--snr", type=float, nargs="*", default=[20.0, 10.0, 5.0])
    ap.add_argument("--foreign-root", default="/usr/share/asterisk/sounds")
    ap.add_argument("--languages", nargs="*", default=list(LANGUAGES))
    ap.add_argument("--foreign-minutes", type=float, default=5.0, help="per language")
    ap.add_argument(
        "--calib-minutes",
        type=float,
        default=5.0,
        help="of the validation stream: pocketsphinx's threshold grid",
    )
    ap.add_argument("--out", default=None, help="write the scored points as JSON here")
    a = ap.parse_args(argv)
    load_pocketsphinx()
    argv = sys.argv[1:] if argv is None else argv
    command = "python " + shlex.join(["bench/kws_peer.py", *argv])
    model = a.model or str(shipped(KWS))
    kws = list(SC10)
    t_start = time.time()

    def stream(pair, name):
        return Stream(name, read_pcm16(pair[0], rate=SR), read_label_csv(pair[1]))

    val, test = stream(a.val, "validation"), stream(a.test, "test")
    noise_root = Path(a.noise_root) if a.noise_root else None
    sets = [test, *noisy_streams(test, a.snr, noise_root)]
    foreign, missing = [], []
    for lang in a.languages:
        s = foreign_stream(Path(a.foreign_root), lang, a.foreign_minutes, noise_root)
        (foreign if s is not None else missing).append(s if s is not None else lang)
    if missing:
        print(
            f"non-English: no prompts for {', '.join(missing)} (apt-get install "
            + " ".join(f"asterisk-core-sounds-{m}-wav" for m in missing)
            + ")",
            file=sys.stderr,
        )

    one = SpotterOne(model, kws)
    one.fit(val)
    print("kws-sc10: validation scored", file=sys.stderr, flush=True)
    per = SpotterPerKeyword(one)
    per.fit(val)
    peer = Peer(kws, a.calib_minutes)
    peer.fit(val)
    print(
        f"pocketsphinx: validation scored ({peer.spotter.n_keyphrases} keyphrases)",
        file=sys.stderr,
        flush=True,
    )
    methods = [one, per, peer]

    cmax = int(math.floor(LADDER_MAX_FA * val.hours + 1e-9))
    n_val = sum(e.is_keyword for e in val.truth)
    ladders = {}
    for m in methods:
        seen, lad = set(), []
        cands = [m.choose(c) for c in range(cmax + 1)]
        cands += [m.strict(int(math.ceil(d * n_val - 1e-9))) for d in DETECTION_TARGETS]
        for st in cands:
            if st is not None and st not in seen:
                seen.add(st)
                lad.append(st)
        ladders[m.name] = lad
    budgets = {
        b: {m.name: m.choose(int(math.floor(b * val.hours + 1e-9))) for m in methods}
        for b in VAL_BUDGETS
    }
    shipped_setting = None
    meta = KeywordSpotter(model, threads=1)
    shipped_setting = (float(meta.smooth_ms), tuple(float(t) for t in meta.thresholds))
    if shipped_setting[0] not in SMOOTH_GRID_MS:
        shipped_setting = None

    def evaluate(m, setting, s: Stream) -> dict:
        dets = m.detections(setting, s)
        r = score(dets, s, kws)
        if s.prompts:
            r["fa_all"], r["fa_cognate"] = cognate_split(dets, s)
            r["fa_by_keyword"] = {k: v["false_accepts"] for k, v in r["per_keyword"].items()}
        return r

    results = {}
    for s in [val, *sets, *foreign]:
        res = {}
        for m in methods:
            pts = [dict(evaluate(m, st, s), setting=st) for st in ladders[m.name]]
            at_b = {
                b: dict(evaluate(m, budgets[b][m.name], s), setting=budgets[b][m.name])
                for b in VAL_BUDGETS
            }
            res[m.name] = {"ladder": pts, "budgets": at_b}
        if shipped_setting is not None:
            res["shipped"] = evaluate(one, shipped_setting, s)
        results[s.name] = res
        print(f"{s.name}: scored", file=sys.stderr, flush=True)

    # ------------------------------------------------------------------ the tables
    names = [m.name for m in methods]
    print(f"\n# kws peer: {Path(model).name} next to pocketsphinx {version('pocketsphinx')}")
    print(f"\nCommand: `{command}`  ")
    print(
        f"Date: {datetime.datetime.now():%Y-%m-%d %H:%M}; commit {git_state()}; "
        f"{time.time() - t_start:.0f} s wall, OMP/ORT 1 thread  "
    )
    print(
        f"Validation {val.seconds / 60:.0f} min ({sum(e.is_keyword for e in val.truth)} "
        f"keywords): every threshold is chosen on it; test {test.seconds / 60:.0f} min "
        f"({sum(e.is_keyword for e in test.truth)} keywords), one false accept = "
        f"{1 / test.hours:.1f} / h. Cells: detection (false accepts / h).  "
    )
    print(
        f"CPU per hour of audio: kws-sc10 {one.cpu_s / one.audio_s * 3600:.0f} s "
        f"(100 ms calls), pocketsphinx {peer.cpu_s / peer.audio_s * 3600:.0f} s with "
        f"{peer.spotter.n_keyphrases} keyphrases (every threshold of its grid at once; "
        f"a decode at one threshold per keyword costs less)  "
    )
    print(
        "pocketsphinx grid (10^e, strictest … loosest, from the first "
        f"{a.calib_minutes:g} min of validation): "
        + "; ".join(f"{k} {peer.levels[k][0]:+g} … {peer.levels[k][-1]:+g}" for k in kws)
    )

    def here_rows(res):
        rows = []
        for b in VAL_BUDGETS:
            rows.append((f"val ≤ {b:g} / h", [res[n]["budgets"][b] for n in names]))
        if "shipped" in res:
            rows.append(("shipped point (model metadata)", [res["shipped"], None, None]))
        for x in HERE_BUDGETS:
            rows.append((f"≤ {x:g} / h here", [best_at(res[n]["ladder"], x) for n in names]))
        for n in (names[0], names[2]):
            f = res[n]["budgets"][MATCH_BUDGET]["false_accepts_per_hour"]
            rows.append(
                (
                    f"at {n.split(',')[0]}'s FA/h ({f:.1f}; its val ≤ {MATCH_BUDGET:g} / h point)",
                    [best_at(res[m]["ladder"], f) for m in names],
                )
            )
        return rows

    for s in sets:
        res = results[s.name]
        print(
            f"\n## {s.name} ({s.seconds / 60:.0f} min, "
            f"{sum(e.is_keyword for e in s.truth)} keywords)" + (f"; {s.note}" if s.note else "")
        )
        print("\n| operating point | " + " | ".join(names) + " |")
        print("|---|" + "---|" * len(names))
        for label, cells in here_rows(res):
            print(f"| {label} | " + " | ".join(cell(p) for p in cells) + " |")

    if foreign:
        hours = sum(s.hours for s in foreign)
        langs = [s.name.split(": ")[1] for s in foreign]
        print(
            f"\n## non-English speech, false accepts ({', '.join(langs)}: "
            f"{hours * 60:.3g} min, {sum(len(s.prompts) for s in foreign)} prompts; one false "
            f"accept = {1 / hours:.1f} / h)\n"
        )
        print(
            "| method | chosen on val at | test detection (FA/h) | FA/h, all | FA/h without "
            "cognate hits | " + " | ".join(langs) + " | most false accepts |"
        )
        print("|---|---|---|---|---|" + "---|" * len(langs) + "---|")
        for b in VAL_BUDGETS:
            for n in names:
                rs = [results[s.name][n]["budgets"][b] for s in foreign]
                fa = sum(r["fa_all"] for r in rs)
                cog = sum(r["fa_cognate"] for r in rs)
                byk = {k: sum(r["fa_by_keyword"][k] for r in rs) for k in kws}
                most = sorted((kv for kv in byk.items() if kv[1]), key=lambda kv: -kv[1])[:4]
                top = ", ".join(f"{k} {v}" for k, v in most) or "–"
                print(
                    f"| {n} | ≤ {b:g} / h | {cell(results[test.name][n]['budgets'][b])} | "
                    f"{fa / hours:.1f} ({fa}) | {(fa - cog) / hours:.1f} ({fa - cog}) | "
                    + " | ".join(str(r["fa_all"]) for r in rs)
                    + f" | {top} |"
                )
        if shipped_setting is not None:
            rs = [results[s.name]["shipped"] for s in foreign]
            fa, cog = sum(r["fa_all"] for r in rs), sum(r["fa_cognate"] for r in rs)
            print(
                f"| {names[0]} | shipped point | {cell(results[test.name]['shipped'])} | "
                f"{fa / hours:.1f} ({fa}) | {(fa - cog) / hours:.1f} ({fa - cog}) | "
                + " | ".join(str(r["fa_all"]) for r in rs)
                + " | |"
            )

    print(f"\nChosen on validation at ≤ {MATCH_BUDGET:g} / h:")
    for m in methods:
        st = budgets[MATCH_BUDGET][m.name]
        v = results[val.name][m.name]["budgets"][MATCH_BUDGET]
        print(f"- {m.name}: {m.describe(st)} (validation {cell(v)})")
    if a.out:
        out = Path(a.out)
        out.parent.mkdir(parents=True, exist_ok=True)

        def clean(o):
            if isinstance(o, dict):
                return {
                    str(k): clean(v)
                    for k, v in o.items()
                    if k not in ("per_keyword", "false_accept_times")
                }
            if isinstance(o, list | tuple):
                return [clean(v) for v in o]
            if isinstance(o, np.generic):
                return o.item()
            return o

        out.write_text(
            json.dumps(
                {"command": command, "levels": peer.levels, "results": clean(results)}, indent=1
            )
            + "\n"
        )
        print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
