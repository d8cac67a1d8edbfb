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
``noise_gain``. ``rows`` hold one :class:`~liquid_stream.labels.TrueEvent` per clip:
``start_s`` / ``end_s`` are the first / one-past-last sample of the clip's speech (10 ms
blocks within 40 dB of its loudest block, as the ``speech-stream`` task's ``speech_end``),
``is_keyword`` says whether the word is a keyword. A clip is drawn uniformly from its
word's clips, with replacement; ``distinct=True`` draws each word's clips without
replacement instead (a shuffled deck per word, shuffled again once used up), so no clip
comes back before every clip of its word has been used: with replacement an hour of the
50 validation speakers placed one `off` clip 9 times, and so counted its false accepts 9
times. Everything is a function of ``seed``. Torch-free.

The streams are evaluation data of the keyword-spotting app (``kws-eval``, ``kws-tune``
read them through :mod:`liquid_stream.labels`); the builder lives with the data tools
because, without a Speech Commands root, ``liquid-stream data kws-stream`` uses the
cached synthetic set (:func:`.speech_synth.ensure_synth`), and the apps import no training
code (tests/test_layering.py).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from liquid_stream.labels import TrueEvent, write_label_csv
from liquid_stream.wav import WavError, read_wav, write_wav

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
