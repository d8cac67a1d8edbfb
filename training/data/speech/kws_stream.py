"""Build a long labelled 16 kHz keyword-spotting test stream from a Speech Commands root.

    x, rows = build_kws_stream(root, minutes=2, keywords=["yes", "no"], seed=0)

Clips come from the TEST split (``testing_list.txt``) of a Speech Commands v0.02 layout
(``<root>/<word>/*.wav`` 16 kHz mono), or from the VALIDATION split
(``validation_list.txt``, ``split="validation"``): the stream on which a detection
threshold is chosen (``kws-tune``), so that the test stream is never used for it.
The stream is a sequence of clips separated by random gaps (``gap_s``); each clip is a
keyword (one of ``keywords``) with probability ``keyword_prob``, else a non-keyword (any
other word of the split; none present → keywords only). A crop of the
``_background_noise_`` recordings (concatenated and looped) is added under everything at
``noise_gain``. ``rows`` hold one :class:`~liquid_stream.io.labels.TrueEvent` per clip:
``start_s`` / ``end_s`` are the first / one-past-last sample of the clip's speech (10 ms
blocks within 40 dB of its loudest block, as the ``speech-stream`` task's ``speech_end``),
``is_keyword`` says whether the word is a keyword. A clip is drawn uniformly from its
word's clips, with replacement; ``distinct=True`` draws each word's clips without
replacement instead (a shuffled deck per word, shuffled again once used up), so no clip
comes back before every clip of its word has been used: with replacement an hour of the
50 validation speakers placed one `off` clip 9 times, and so counted its false accepts 9
times. Everything is a function of ``seed``. Torch-free.

The streams are evaluation data of the keyword-spotting app (``kws-eval``, ``kws-tune``
read them through :mod:`liquid_stream.io.labels`); the builder lives with the data tools
because, without a Speech Commands root, ``liquid-stream data kws-stream`` uses the
cached synthetic set (:func:`.speech_synth.ensure_synth`), and the apps import no training
code (tests/test_layering.py).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from liquid_stream.io.labels import TrueEvent, write_label_csv
from liquid_stream.io.wav import WavError, read_wav, write_wav

if TYPE_CHECKING:
    from .speech_synth import Voice

SR = 16000
SC10 = ("yes", "no", "up", "down", "left", "right", "on", "off", "stop", "go")
NOISE_DIR = "_background_noise_"


def speech_span(x: np.ndarray, rel_db: float = -40.0, frame: int = 160) -> tuple[int, int]:
    """``(start, end)`` sample indices of the speech: the first and one past the last
    ``frame``-sample block whose RMS is within ``rel_db`` dB of the loudest block."""
    n = len(x) // frame
    if n == 0:
        return 0, len(x)
    rms = np.sqrt(np.mean(np.asarray(x[: n * frame], np.float64).reshape(n, frame) ** 2, 1))
    if rms.max() == 0:
        return 0, len(x)
    active = np.flatnonzero(rms >= rms.max() * 10 ** (rel_db / 20))
    return int(active[0] * frame), int((active[-1] + 1) * frame)


SPLIT_LISTS = {"testing": "testing_list.txt", "validation": "validation_list.txt"}


def clips_of_test_split(root: str | os.PathLike, split: str = "testing") -> dict[str, list[Path]]:
    """The test (or validation) split of a Speech Commands root: word → WAV paths (sorted)."""
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"Speech Commands root not found: {root}")
    if split not in SPLIT_LISTS:
        raise ValueError(f"split must be one of {sorted(SPLIT_LISTS)}, got {split!r}")
    listing = root / SPLIT_LISTS[split]
    if not listing.is_file():
        raise FileNotFoundError(f"{listing} not found: not a Speech Commands v0.02 root")
    words: dict[str, list[Path]] = {}
    for line in listing.read_text().splitlines():
        rel = line.strip()
        if not rel or "/" not in rel:
            continue
        word = rel.split("/")[0]
        if word == NOISE_DIR:
            continue
        p = root / rel
        if not p.is_file():
            raise FileNotFoundError(f"{p} is listed in {listing} but missing")
        words.setdefault(word, []).append(p)
    return {w: sorted(v) for w, v in sorted(words.items())}


def _load(path: Path) -> np.ndarray:
    x, rate, _ = read_wav(path)
    if rate != SR:
        raise WavError(f"{path}: {rate} Hz, expected {SR} Hz (Speech Commands)")
    return x


def noise_source(root: Path) -> np.ndarray | None:
    """The root's ``_background_noise_`` recordings concatenated and scaled to peak 1
    (None when it has none): what :func:`noise_crop` cuts the noise bed from."""
    files = sorted((root / NOISE_DIR).glob("*.wav")) if (root / NOISE_DIR).is_dir() else []
    if not files:
        return None
    src = np.concatenate([_load(p) for p in files])
    return src / max(float(np.abs(src).max()), 1e-9)


def _noise_bed(root: Path, n: int, rng: np.random.Generator) -> np.ndarray:
    return noise_crop(noise_source(root), n, rng)


def noise_crop(src: np.ndarray | None, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` samples of ``src`` (looped if shorter) from a random start; zeros if None."""
    if src is None:
        return np.zeros(n, np.float32)
    if len(src) < n:
        src = np.tile(src, -(-n // len(src)))
    start = int(rng.integers(0, len(src) - n + 1))
    return src[start : start + n].astype(np.float32)


def build_kws_stream(
    root: str | os.PathLike,
    minutes: float = 2.0,
    keywords: list[str] | tuple[str, ...] = SC10,
    seed: int = 0,
    keyword_prob: float = 0.7,
    gap_s: tuple[float, float] = (0.5, 2.0),
    noise_gain: float = 0.02,
    lead_s: float = 1.0,
    split: str = "testing",
    distinct: bool = False,
) -> tuple[np.ndarray, list[TrueEvent]]:
    """The stream (float32 at 16 kHz) and its labels; see the module docstring."""
    root = Path(root)
    name = split
    split = clips_of_test_split(root, name)
    missing = [k for k in keywords if k not in split]
    if missing:
        raise ValueError(
            f"no {name}-split clips for keyword(s) {', '.join(missing)} in {root}; "
            f"words there: {', '.join(split) or 'none'}"
        )
    others = [w for w in split if w not in keywords]
    if minutes <= 0:
        raise ValueError("minutes must be > 0")
    rng = np.random.default_rng(seed)
    n = int(round(minutes * 60 * SR))
    x = np.zeros(n, np.float32)
    rows: list[TrueEvent] = []
    cache: dict[Path, np.ndarray] = {}
    decks: dict[str, list[Path]] = {}  # distinct: each word's clips not drawn yet
    pos = int(round(lead_s * SR))
    while True:
        is_kw = not others or rng.random() < keyword_prob
        word = str(rng.choice(list(keywords) if is_kw else others))
        files = split[word]
        if distinct:
            if not decks.get(word):
                decks[word] = [files[int(i)] for i in rng.permutation(len(files))]
            path = decks[word].pop()
        else:
            path = files[int(rng.integers(len(files)))]
        clip = cache.get(path)
        if clip is None:
            clip = cache[path] = _load(path)
        if pos + len(clip) > n:
            break
        x[pos : pos + len(clip)] += clip
        a, b = speech_span(clip)
        rows.append(TrueEvent((pos + a) / SR, (pos + b) / SR, word, bool(is_kw)))
        pos += len(clip) + int(round(rng.uniform(*gap_s) * SR))
    if noise_gain > 0:
        x += np.float32(noise_gain) * _noise_bed(root, n, rng)
    return x, rows


def write_kws_stream(
    out_wav: str | os.PathLike, out_csv: str | os.PathLike, x: np.ndarray, rows: list[TrueEvent]
) -> None:
    """Write the stream as 16-bit WAV and the labels as ``start_s,end_s,word,is_keyword``."""
    Path(out_wav).parent.mkdir(parents=True, exist_ok=True)
    Path(out_csv).parent.mkdir(parents=True, exist_ok=True)
    write_wav(out_wav, x, SR)
    write_label_csv(out_csv, rows)


# ---------------------------------------------------------------------------- sentences
#
# Sentence mode (``build_kws_sentences``, ``liquid-stream data kws-stream --mode
# sentences``): synthetic spoken sentences instead of Speech Commands clips. A sentence is
# a template such as "please {} the music" spoken by one synthetic voice (the TTS speakers
# of training/data/speech/speech_synth.py: espeak-ng, flite, festival, piper where installed).
# With probability ``near_miss_prob`` the keyword's slot holds a phonetic neighbour
# instead (training/data/speech/phonetic.py: "please shop the music"; never a homophone, an
# inflection or another keyword), else the keyword itself. The sentence is synthesised
# piece by piece (the words before the slot, the slot's word, the words after it), each
# piece trimmed to its speech (40 dB) with 5 ms fades and the pieces joined with short
# pauses (``pause_s``), so the keyword's first and last sample in the stream are known
# exactly, not estimated. Rows (:class:`TrueEvent`, the same CSV as the clip mode): one per
# piece, ``[start_s, end_s]`` its speech (``speech_span``); the keyword's piece has
# ``is_keyword`` 1, a near miss's piece the neighbour word and 0, the other pieces their
# text (e.g. ``the music``) and 0. Sentences are separated by ``gap_s`` pauses after a
# ``lead_s`` lead-in; a noise bed (the ``_background_noise_`` files of ``noise_root``, else
# white + pink + brown noise) goes under everything at ``noise_gain``. Voices come from a
# pool of ``n_voices`` speakers drawn from ``seed`` and ``split`` ("testing" and
# "validation" get different voices), each sentence one of them with its own small speed /
# pitch jitter and level. Everything is a function of the arguments.

SENTENCE_TEMPLATES: dict[str, tuple[str, ...]] = {
    "yes": (
        "{} I would like that",
        "I said {} to her",
        "oh {} that is fine",
        "the answer is {}",
        "well {} of course",
    ),
    "no": (
        "{} thank you",
        "I said {} to him",
        "the answer is {}",
        "oh {} not again",
        "{} I don't think so",
    ),
    "up": (
        "turn the volume {}",
        "pick it {} please",
        "look {} at the sky",
        "move it {} a bit",
        "she looked {} at me",
    ),
    "down": (
        "turn it {} a little",
        "sit {} over there",
        "put the box {}",
        "slow {} please",
        "we walked {} the hill",
    ),
    "left": (
        "turn {} at the corner",
        "the door to the {}",
        "move it {} a bit",
        "she {} early",
        "keep {} here",
    ),
    "right": (
        "turn {} at the lights",
        "you are {}",
        "that is {}",
        "move it {} a bit",
        "keep {} here",
    ),
    "on": (
        "turn the lights {}",
        "switch it {} now",
        "put the kettle {}",
        "come {} then",
        "leave it {} please",
    ),
    "off": (
        "turn it {} now",
        "switch the radio {}",
        "take your shoes {}",
        "the lights are {}",
        "please back {}",
    ),
    "stop": (
        "please {} the music",
        "{} it now",
        "the bus will {} soon",
        "we had to {} there",
        "{} that noise",
    ),
    "go": (
        "let's {} home",
        "ready set {}",
        "you can {} now",
        "we should {} soon",
        "time to {} outside",
    ),
}
# for keywords without their own templates (and those whose templates all name a keyword)
GENERIC_TEMPLATES = (
    "I said {} again",
    "the word is {}",
    "{} is what she said",
    "please say {} now",
    "then {} came next",
    "and {}",
)
SENTENCE_CHUNK = 8  # sentences planned and rendered together (festival: one process)


@dataclass(frozen=True)
class SentencePlan:
    """One sentence: its pieces (the slot's word at ``slot``), who says it and how."""

    keyword: str  # the keyword whose template this is
    pieces: tuple[str, ...]  # the texts synthesised one by one
    slot: int  # index of the keyword's (or the near miss's) piece
    near_miss: bool  # the slot holds a neighbour of the keyword, not the keyword
    voice: Voice
    speed_jitter: float
    pitch_jitter: float
    peak: float  # the sentence's peak level
    pauses_s: tuple[float, ...]  # between consecutive pieces
    gap_s: float  # after the sentence
    noise_seed: int

    @property
    def text(self) -> str:
        return " ".join(self.pieces)


@dataclass(frozen=True)
class PlacedSentence:
    """A sentence in the stream: its plan, first sample and the pieces' speech spans
    (absolute samples, one per piece)."""

    plan: SentencePlan
    start: int
    spans: tuple[tuple[int, int], ...]


@dataclass
class SentenceStream:
    x: np.ndarray  # float32 at 16 kHz
    rows: list[TrueEvent]
    sentences: list[PlacedSentence]
    neighbours: dict[str, list[str]]  # keyword -> the near misses drawn from


def _template_words(t: str) -> list[str]:
    return [w.strip(".,!?").lower() for w in t.replace("{}", " ").split()]


def sentence_templates(keyword: str, banned: set[str]) -> tuple[str, ...]:
    """The templates of ``keyword`` (or the generic ones) whose other words are not in
    ``banned`` (the keywords and their homophones); ValueError if none is left."""
    for pool in (SENTENCE_TEMPLATES.get(keyword, ()), GENERIC_TEMPLATES):
        ok = tuple(t for t in pool if not banned.intersection(_template_words(t)))
        if ok:
            return ok
    raise ValueError(f"every sentence template for {keyword!r} names a keyword or homophone")


def _pieces(template: str, word: str) -> tuple[tuple[str, ...], int]:
    before, after = (s.strip() for s in template.split("{}", 1))
    return tuple(p for p in (before, word, after) if p), 1 if before else 0


def _render_pieces(plans: list[SentencePlan]) -> list[list[np.ndarray]]:
    """Each plan's pieces as 16 kHz float64 speech (trimmed, 5 ms fades), festival pieces
    rendered in one festival process."""
    from .speech_synth import ClipJob, _festival, _resample, _tts, trim_silence

    def job(i: int, j: int, p: SentencePlan) -> ClipJob:  # level and offset are set later
        v, sj, pj = p.voice, p.speed_jitter, p.pitch_jitter
        return ClipJob(f"s{i}/p{j}", p.pieces[j], v, sj, pj, 1.0, 0.0, -120.0, p.noise_seed + j)

    jobs = [[job(i, j, p) for j in range(len(p.pieces))] for i, p in enumerate(plans)]
    fest = [j for js in jobs for j in js if j.voice.engine == "festival"]
    first = _festival(fest, 1.0) if fest else {}
    out = []
    for js in jobs:
        pieces = []
        for job in js:
            x, rate = first[job.relpath] if job.relpath in first else _tts(job, 1.0)
            speech = trim_silence(_resample(x, rate))
            if len(speech) == 0:
                raise RuntimeError(f"TTS produced silence for {job.word!r} ({job.voice.key()})")
            fade = min(80, len(speech) // 4)
            if fade:
                ramp = np.linspace(0.0, 1.0, fade)
                speech = speech.copy()
                speech[:fade] *= ramp
                speech[-fade:] *= ramp[::-1]
            pieces.append(speech)
        out.append(pieces)
    return out


def render_sentence(plan: SentencePlan, pieces: list[np.ndarray] | None = None):
    """``(audio, spans)``: the sentence as float32 at 16 kHz (peak ``plan.peak``) and each
    piece's speech span ``(start, end)`` in samples of it."""
    pieces = _render_pieces([plan])[0] if pieces is None else pieces
    gaps = [int(round(s * SR)) for s in plan.pauses_s]
    n = sum(map(len, pieces)) + sum(gaps)
    y = np.zeros(n)
    spans, pos = [], 0
    for j, p in enumerate(pieces):
        y[pos : pos + len(p)] = p
        a, b = speech_span(p)
        spans.append((pos + a, pos + b))
        pos += len(p) + (gaps[j] if j < len(gaps) else 0)
    y *= plan.peak / max(float(np.abs(y).max()), 1e-9)
    return y.astype(np.float32), spans


def _banned_words(keywords: list[str]) -> set[str]:
    """The keywords and, where the pronouncing dictionary is installed, their homophones."""
    from . import phonetic

    banned = set(keywords)
    if phonetic.dict_available():
        for k in keywords:
            try:
                banned.update(phonetic.homophones(k))
            except ValueError:  # not in the dictionary
                pass
    return banned


def sentence_neighbours(keywords: list[str], k: int = 10) -> dict[str, list[str]]:
    """Each keyword's ``k`` nearest phonetic neighbours that are not a keyword nor a
    keyword's homophone (raises :class:`.phonetic.PhoneticDictMissing` without the
    dictionary, ValueError for a keyword not in it)."""
    from . import phonetic

    banned = _banned_words(keywords)
    out = {}
    for kw in keywords:
        out[kw] = [n.word for n in phonetic.find_neighbours(kw, k, exclude=banned)]
        if not out[kw]:
            raise ValueError(f"no phonetic neighbours found for {kw!r}")
    return out


def sentence_stream(
    minutes: float = 2.0,
    keywords: list[str] | tuple[str, ...] = SC10,
    seed: int = 0,
    near_miss_prob: float = 0.5,
    gap_s: tuple[float, float] = (0.5, 2.0),
    pause_s: tuple[float, float] = (0.04, 0.16),
    noise_gain: float = 0.02,
    lead_s: float = 1.0,
    split: str = "testing",
    engines: list[str] | tuple[str, ...] | str | None = None,
    n_voices: int = 24,
    near_k: int = 10,
    noise_root: str | os.PathLike | None = None,
) -> SentenceStream:
    """The sentence-mode stream, its rows and the placed sentences (see above)."""
    from .speech_synth import _pitch_jitter, _rng, colored_noise, make_speakers, usable_engines

    keywords = [k.lower() for k in keywords]
    if minutes <= 0:
        raise ValueError("minutes must be > 0")
    if not keywords:
        raise ValueError("no keywords")
    if not 0 <= near_miss_prob <= 1:
        raise ValueError(f"near_miss_prob must be in [0, 1], got {near_miss_prob}")
    if split not in SPLIT_LISTS:
        raise ValueError(f"split must be one of {sorted(SPLIT_LISTS)}, got {split!r}")
    if noise_root is not None and not Path(noise_root).is_dir():
        raise FileNotFoundError(f"noise root not found: {noise_root}")
    near = sentence_neighbours(keywords, near_k) if near_miss_prob > 0 else {}
    banned = _banned_words(keywords)
    templates = {k: sentence_templates(k, banned) for k in keywords}
    engines = usable_engines(engines)
    rng = _rng(seed, "kws-sentences", split)
    voices = make_speakers(n_voices, int(rng.integers(2**31)), engines)

    def plan() -> SentencePlan:
        kw = str(rng.choice(keywords))
        is_near = near_miss_prob > 0 and rng.random() < near_miss_prob
        word = str(rng.choice(near[kw])) if is_near else kw
        pieces, slot = _pieces(str(rng.choice(templates[kw])), word)
        voice = voices[int(rng.integers(len(voices)))]
        return SentencePlan(
            keyword=kw,
            pieces=pieces,
            slot=slot,
            near_miss=bool(is_near),
            voice=voice,
            speed_jitter=float(rng.uniform(0.93, 1.07)),
            pitch_jitter=_pitch_jitter(voice, rng),
            peak=float(rng.uniform(0.15, 0.9)),
            pauses_s=tuple(float(rng.uniform(*pause_s)) for _ in pieces[1:]),
            gap_s=float(rng.uniform(*gap_s)),
            noise_seed=int(rng.integers(2**31)),
        )

    n = int(round(minutes * 60 * SR))
    x = np.zeros(n, np.float32)
    rows: list[TrueEvent] = []
    placed: list[PlacedSentence] = []
    pos = int(round(lead_s * SR))
    full = False
    while not full:
        plans = [plan() for _ in range(SENTENCE_CHUNK)]
        for p, pieces in zip(plans, _render_pieces(plans), strict=True):
            y, spans = render_sentence(p, pieces)
            if pos + len(y) > n:
                full = True
                break
            x[pos : pos + len(y)] += y
            spans = tuple((pos + a, pos + b) for a, b in spans)
            placed.append(PlacedSentence(p, pos, spans))
            for j, (a, b) in enumerate(spans):
                is_kw = j == p.slot and not p.near_miss
                rows.append(TrueEvent(a / SR, b / SR, p.pieces[j], is_kw))
            pos += len(y) + int(round(p.gap_s * SR))
    if noise_gain > 0:
        src = noise_source(Path(noise_root)) if noise_root is not None else None
        if src is None:
            nrng = _rng(seed, "kws-sentences-noise")
            src = np.concatenate(
                [colored_noise(c, 20 * SR, nrng) for c in ("white", "pink", "brown")]
            )
        x += np.float32(noise_gain) * noise_crop(src, n, rng)
    return SentenceStream(x, rows, placed, near)


def build_kws_sentences(
    minutes: float = 2.0, keywords: list[str] | tuple[str, ...] = SC10, seed: int = 0, **kw
) -> tuple[np.ndarray, list[TrueEvent]]:
    """The sentence-mode stream and its labels (:func:`sentence_stream`'s arguments), for
    :func:`write_kws_stream` like :func:`build_kws_stream`'s."""
    s = sentence_stream(minutes, keywords, seed, **kw)
    return s.x, s.rows
