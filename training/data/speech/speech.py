"""Speech Commands v0.02 in its real on-disk layout.

Layout (Warden 2018)::

    <root>/<word>/<speaker>_nohash_<n>.wav    16 kHz mono int16, <= 1 s
    <root>/validation_list.txt                paths relative to root, one a line
    <root>/testing_list.txt
    <root>/_background_noise_/*.wav           long noise recordings (augmentation)

Train = every other WAV of the selected words. The layout (root, list files, word
folders) is checked eagerly in ``__init__``; each WAV is validated when it is read.

Samples are int16 / 32768, zero-padded at the end to 1 s (16000 samples), then
standardised with ``normalizer = (mean, std)`` (see :func:`compute_normalizer`: the
statistics of the padded train clips, as in the S4 code base). ``rate=2`` returns
``x[::2]`` (8000 samples), the paper's 8 kHz zero-shot test (run the model with Δ
doubled, ``rate=2.0``).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset, Subset

from liquid_stream.io.wav import read_pcm16

from .augment import AugmentConfig, Augmenter, speed_perturb
from .kws_stream import speech_span

SR = 16000

SC35_WORDS: tuple[str, ...] = (
    "backward",
    "bed",
    "bird",
    "cat",
    "dog",
    "down",
    "eight",
    "five",
    "follow",
    "forward",
    "four",
    "go",
    "happy",
    "house",
    "learn",
    "left",
    "marvin",
    "nine",
    "no",
    "off",
    "on",
    "one",
    "right",
    "seven",
    "sheila",
    "six",
    "stop",
    "three",
    "tree",
    "two",
    "up",
    "visual",
    "wow",
    "yes",
    "zero",
)
SC10_WORDS: tuple[str, ...] = (
    "yes",
    "no",
    "up",
    "down",
    "left",
    "right",
    "on",
    "off",
    "stop",
    "go",
)
SUBSETS = {"sc35": SC35_WORDS, "sc10": SC10_WORDS}
SPLITS = ("train", "val", "test")
NOISE_DIR = "_background_noise_"
SILENCE = "_silence_"
CLIP_ENDS = ("file", "speech")  # SpeechStream's clip_end: where a keyword ends
LIST_FILES = {"val": "validation_list.txt", "test": "testing_list.txt"}


# ---------------------------------------------------------------------------- WAV


def read_wav(path: str | os.PathLike, max_samples: int | None = SR) -> np.ndarray:
    """Read a 16 kHz mono 16-bit PCM WAV as int16, with errors that name the file
    (:func:`liquid_stream.io.wav.read_pcm16` at 16 kHz).

    Raises ``FileNotFoundError`` if it is missing, ``ValueError`` if it is unreadable,
    truncated (fewer data bytes than its header says), not 16 kHz, not mono, not
    16-bit, or longer than ``max_samples``.
    """
    return read_pcm16(path, rate=SR, max_samples=max_samples)


# ---------------------------------------------------------------------------- layout


def _read_list(root: Path, name: str) -> list[str]:
    p = root / name
    if not p.is_file():
        raise FileNotFoundError(
            f"{p} not found: a Speech Commands v0.02 root needs validation_list.txt and "
            "testing_list.txt next to the word folders"
        )
    return [ln.strip() for ln in p.read_text().splitlines() if ln.strip()]


def scan_split(root: str | os.PathLike, split: str, words: Sequence[str]) -> list[str]:
    """Relative paths of the WAVs of ``words`` in ``split`` (sorted), checking the layout."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"Speech Commands root not found: {root}")
    val = _read_list(root, "validation_list.txt")
    test = _read_list(root, "testing_list.txt")
    on_disk: dict[str, list[str]] = {}
    missing = []
    for w in words:
        d = root / w
        files = sorted(f for f in os.listdir(d) if f.endswith(".wav")) if d.is_dir() else []
        if not files:
            missing.append(w)
        on_disk[w] = [f"{w}/{f}" for f in files]
    if missing:
        raise ValueError(
            f"partial Speech Commands dataset at {root}: no WAV files for "
            f"{len(missing)} of {len(words)} words: {', '.join(missing)}"
        )
    wordset = set(words)
    if split == "train":
        held = set(val) | set(test)
        return sorted(p for w in words for p in on_disk[w] if p not in held)
    listed = sorted(p for p in (val if split == "val" else test) if p.split("/")[0] in wordset)
    present = {p for w in words for p in on_disk[w]}
    absent = [p for p in listed if p not in present]
    if absent:
        name = "validation_list.txt" if split == "val" else "testing_list.txt"
        raise FileNotFoundError(
            f"{len(absent)} files listed in {root / name} are missing, e.g. {absent[:3]}"
        )
    return listed


def require_clips(ds: SpeechCommands, need: int = 1, task: str = "") -> None:
    """Raise ``ValueError`` (naming the split, its size and ``need``) when the split of
    ``ds`` has fewer than ``need`` clips of its words: e.g. a ``testing_list.txt`` left
    empty by ``liquid-stream data speech-synth --per-word 2``."""
    if len(ds) >= need:
        return
    where = (
        f"listed in {ds.root / LIST_FILES[ds.split]}"
        if ds.split in LIST_FILES
        else f"in the word folders of {ds.root} outside the two lists"
    )
    raise ValueError(
        f"{task + ': ' if task else ''}the {ds.split} split has {len(ds)} clips of the "
        f"{ds.subset} words ({where}); it needs at least {need}"
    )


def noise_files(root: str | os.PathLike) -> list[Path]:
    d = Path(root) / NOISE_DIR
    return sorted(d.glob("*.wav")) if d.is_dir() else []


# ---------------------------------------------------------------------------- RNG


class _Augmented:
    """Per-item randomness: deterministic in (seed, epoch, index) after ``set_epoch``,
    otherwise drawn from torch's global RNG (seeded per DataLoader worker)."""

    seed: int
    epoch: int | None = None

    def set_epoch(self, epoch: int) -> None:
        """Make augmentation a function of (seed, epoch, index): reproducible and resumable."""
        self.epoch = int(epoch)

    def _item_rng(self, index: int, stream: int = 0) -> np.random.Generator:
        """The item's generator; ``stream`` > 0: an independent one for the same item."""
        if self.epoch is None:
            return np.random.default_rng(int(torch.randint(0, 2**62, (1,)).item()))
        return np.random.default_rng([self.seed, self.epoch, index, *([stream] * (stream > 0))])

    def _load_noise(self, root: Path) -> list[np.ndarray]:
        if getattr(self, "_noise", None) is None:
            self._noise = [
                read_wav(p, max_samples=None).astype(np.float32) / 32768.0
                for p in noise_files(root)
            ]
        return self._noise

    def _noise_crop(self, rng: np.random.Generator, n: int, root: Path) -> np.ndarray:
        noise = self._load_noise(root)
        src = noise[rng.integers(len(noise))]
        if len(src) < n:
            src = np.tile(src, -(-n // len(src)))
        start = rng.integers(0, len(src) - n + 1)
        return src[start : start + n]


def _standardise(x: np.ndarray, normalizer: tuple[float, float] | None) -> np.ndarray:
    if normalizer is None:
        return x
    mean, std = normalizer
    return ((x - mean) / std).astype(np.float32)


# ---------------------------------------------------------------------------- datasets


class SpeechCommands(_Augmented, Dataset):
    """Isolated 1 s clips → ``(x (L, 1) float32, y int)``, L = 16000 // rate.

    ``subset``: ``"sc35"`` (all 35 words) or ``"sc10"``; ``labels`` are the words in that
    order, ``files`` the relative paths of the split (sorted). ``augment`` (train split
    only): random time shift of up to ±``shift_ms`` (zero fill) and, with probability
    ``noise_prob``, a random crop of a ``_background_noise_`` file added at a gain uniform
    in [0, ``noise_max_gain``]; both before standardisation.
    """

    def __init__(
        self,
        root: str | os.PathLike,
        split: str = "train",
        subset: str = "sc35",
        normalizer: tuple[float, float] | None = None,
        augment: bool = False,
        noise_prob: float = 0.8,
        noise_max_gain: float = 0.1,
        shift_ms: float = 100,
        rate: int = 1,
        seed: int = 0,
    ):
        if subset not in SUBSETS:
            raise ValueError(f"subset must be one of {sorted(SUBSETS)}, got {subset!r}")
        if rate not in (1, 2):
            raise ValueError(f"rate must be 1 (16 kHz) or 2 (8 kHz, x[::2]), got {rate!r}")
        if augment and split != "train":
            raise ValueError("augmentation is for the train split only")
        self.root = Path(root)
        self.split = split
        self.subset = subset
        self.labels = list(SUBSETS[subset])
        self.files = scan_split(self.root, split, self.labels)
        self._index = {w: i for i, w in enumerate(self.labels)}
        self.targets = [self._index[p.split("/")[0]] for p in self.files]
        self.normalizer = (
            None if normalizer is None else (float(normalizer[0]), float(normalizer[1]))
        )
        self.augment = augment
        self.noise_prob = noise_prob
        self.noise_max_gain = noise_max_gain
        self.shift = int(round(shift_ms * SR / 1000))
        self.rate = rate
        self.seed = seed
        self._noise = None
        if augment and noise_prob > 0 and not noise_files(self.root):
            raise FileNotFoundError(
                f"augmentation with noise needs {self.root / NOISE_DIR}/*.wav "
                "(or pass noise_prob=0)"
            )

    def __len__(self) -> int:
        return len(self.files)

    def raw(self, index: int) -> np.ndarray:
        """The clip as float32 in [-1, 1), zero-padded to 16000 samples (no augmentation)."""
        x = np.zeros(SR, dtype=np.float32)
        s = read_wav(self.root / self.files[index])
        x[: len(s)] = s.astype(np.float32) / 32768.0
        return x

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        x = self.raw(index)
        if self.augment:
            rng = self._item_rng(index)
            if self.shift:
                k = int(rng.integers(-self.shift, self.shift + 1))
                if k > 0:
                    x = np.concatenate([np.zeros(k, np.float32), x[:-k]])
                elif k < 0:
                    x = np.concatenate([x[-k:], np.zeros(-k, np.float32)])
            if rng.random() < self.noise_prob:
                gain = rng.uniform(0.0, self.noise_max_gain)
                x = x + np.float32(gain) * self._noise_crop(rng, SR, self.root)
        x = _standardise(x, self.normalizer)
        if self.rate == 2:
            x = x[::2]
        return torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)).unsqueeze(-1), int(
            self.targets[index]
        )


def compute_normalizer(train_set: SpeechCommands) -> tuple[float, float]:
    """(mean, std) over every sample of the zero-padded 1 s train clips (float64 sums,
    no augmentation, 16 kHz). Use it for every split and for the 8 kHz test. Accepts a
    :class:`SpeechCommands`, a ``torch.utils.data.Subset`` of one (read from the files
    directly), or any dataset of unstandardised ``(x, y)``."""
    base, idx = train_set, None
    if isinstance(train_set, Subset) and isinstance(train_set.dataset, SpeechCommands):
        base, idx = train_set.dataset, list(train_set.indices)
    if isinstance(base, SpeechCommands):
        files = base.files if idx is None else [base.files[i] for i in idx]
        s = s2 = 0.0
        for p in files:
            x = read_wav(base.root / p).astype(np.float64) / 32768.0
            s += x.sum()
            s2 += (x * x).sum()
        n = SR * len(files)
    else:  # any dataset of (x, y) with unstandardised x
        s = s2 = 0.0
        n = 0
        for i in range(len(train_set)):
            x = np.asarray(train_set[i][0], dtype=np.float64)
            s += x.sum()
            s2 += (x * x).sum()
            n += x.size
    if n == 0:
        raise ValueError("cannot compute a normalizer from an empty train set")
    mean = s / n
    std = float(np.sqrt(max(s2 / n - mean * mean, 0.0)))
    if std == 0.0:
        raise ValueError("train set is all silence (std 0); cannot standardise")
    return float(mean), std


def speech_end(x: np.ndarray, rel_db: float = -40.0, frame: int = 160) -> int:
    """One past the last sample of the last ``frame``-sample block whose RMS is within
    ``rel_db`` dB of the loudest block (``len(x)`` if every block is silent or x is short):
    the end of :func:`~.kws_stream.speech_span`."""
    return speech_span(x, rel_db, frame)[1]


def make_step_labels(
    length: int,
    events: Sequence[tuple[int, int]],
    tail: int,
    hold: int,
    silence: int,
) -> np.ndarray:
    """Per-step labels of a stream: ``events`` are ``(end, cls)`` with ``end`` the index one
    past the clip's last sample; steps ``[end - tail, end + hold)`` (clipped to
    ``[0, length)``; ``tail < 0`` starts after ``end``) get ``cls``, later events
    overwriting earlier ones, every other step ``silence``. ``cls = silence`` (a
    non-keyword clip) marks nothing."""
    y = np.full(length, silence, dtype=np.int64)
    for end, cls in events:
        if cls == silence:
            continue
        a, b = max(0, end - tail), min(length, end + hold)
        if a < b:
            y[a:b] = cls
    return y


class SpeechStream(_Augmented, Dataset):
    """Random crops of continuous audio for training a causal per-step (``window``) decoder.

    Each item is ``length`` samples (16 kHz; ``length // 2`` at ``rate=2``) cut from a
    sequence of clips of ``split``, laid end to end with random silent gaps of
    ``gap_ms`` (uniform in [lo, hi]) and started at a random point inside the first clip
    (so crops begin mid-clip). A clip is a keyword of ``subset`` with probability
    ``keyword_prob``, otherwise a non-keyword: a clip of a Speech Commands word outside
    ``subset`` found in ``root`` (none for sc35, then every clip is a keyword). A
    background-noise crop is added to the whole item with probability ``noise_prob`` at a
    gain uniform in [0, ``noise_max_gain``]; then the normaliser is applied.

    Labelling rule (``y`` int64, one per step): with ``end`` the index one past the last
    sample of a keyword clip's WAV data (its file length, not the 1 s padding; with
    ``clip_end="speech"``, one past its last active sample instead, see
    :func:`speech_end`), the steps ``[end - label_tail, end + label_hold)`` carry the
    clip's class (``label_tail`` and ``label_hold`` given in ms, converted at 16 kHz); a
    later clip's span overwrites an earlier one where they overlap; every other step —
    gaps, non-keywords, the start of each keyword — is the extra class ``_silence_`` =
    ``len(labels)``. So a causal model is asked to name a keyword only once it has heard
    (most of) it; a negative ``label_tail`` starts the span that long *after* the end (the
    model then has heard the word's last sound and |label_tail| ms more). At ``rate=2``
    both ``x`` and ``y`` are taken ``[::2]``. ``labels`` lists the classes, ``_silence_``
    last.

    ``augment`` (an :class:`~.augment.AugmentConfig`): each clip is speed-perturbed before
    it is placed (so its label span follows it), then the whole item goes through the
    room → microphone → noise → gain chain of :mod:`.augment` (reverberation, band-limit
    and EQ, background noise at a random SNR from the ``_background_noise_`` files, gain)
    in place of the fixed ``noise_prob`` / ``noise_max_gain`` noise; all drawn from
    (seed, epoch, index), so reproducible per epoch. ``label_hop`` R > 1 returns the label
    of every R-th step, ``y[R−1::R]`` (the step at which a front end's frame completes:
    the labels of a model whose stack runs once per R samples).
    """

    def __init__(
        self,
        root: str | os.PathLike,
        split: str = "train",
        subset: str = "sc35",
        length: int = 3 * SR,
        num_items: int = 1000,
        normalizer: tuple[float, float] | None = None,
        label_tail_ms: float = 100,
        label_hold_ms: float = 100,
        clip_end: str = "file",
        gap_ms: tuple[float, float] = (0, 500),
        keyword_prob: float = 0.8,
        noise_prob: float = 0.8,
        noise_max_gain: float = 0.1,
        rate: int = 1,
        seed: int = 0,
        augment: AugmentConfig | None = None,
        label_hop: int = 1,
    ):
        if rate not in (1, 2):
            raise ValueError(f"rate must be 1 or 2, got {rate!r}")
        if label_hop < 1 or (label_hop > 1 and rate != 1):
            raise ValueError(f"label_hop must be >= 1 (and rate 1 when > 1), got {label_hop!r}")
        self.augment = augment
        # the room → microphone → noise → gain chain of each item (speed is per clip, and
        # a time shift would move the labels): built once, not per item
        self._chain = (
            None
            if augment is None
            else Augmenter(dataclasses.replace(augment, speed=False, shift=False), SR)
        )
        self.label_hop = int(label_hop)
        self.clips = SpeechCommands(root, split, subset)
        require_clips(self.clips, 1, "SpeechStream")  # items are made of this split's clips
        self.root = self.clips.root
        self.words = self.clips.labels
        self.labels = [*self.words, SILENCE]
        self.silence = len(self.words)
        others = [
            d
            for d in SC35_WORDS
            if d not in self.words
            and (self.root / d).is_dir()
            and any((self.root / d).glob("*.wav"))
        ]
        self.other_files = scan_split(self.root, split, others) if others else []
        self.length = int(length)
        self.num_items = int(num_items)
        self.normalizer = normalizer
        self.tail = int(round(label_tail_ms * SR / 1000))
        self.hold = int(round(label_hold_ms * SR / 1000))
        if self.hold + self.tail <= 0:
            raise ValueError(
                f"label_tail_ms + label_hold_ms must be > 0 (the span [end - tail, "
                f"end + hold) of a keyword's label), got {label_tail_ms} + "
                f"{label_hold_ms}"
            )
        if clip_end not in CLIP_ENDS:
            raise ValueError(f"clip_end must be 'file' or 'speech', got {clip_end!r}")
        self.clip_end = clip_end
        self.gap = (int(round(gap_ms[0] * SR / 1000)), int(round(gap_ms[1] * SR / 1000)))
        self.keyword_prob = keyword_prob if self.other_files else 1.0
        self.noise_prob = noise_prob
        self.noise_max_gain = noise_max_gain
        self.rate = rate
        self.seed = seed
        self._noise = None
        if noise_prob > 0 and not noise_files(self.root):
            raise FileNotFoundError(
                f"SpeechStream with noise needs {self.root / NOISE_DIR}/*.wav (or noise_prob=0)"
            )

    def __len__(self) -> int:
        return self.num_items

    def compose(self, index: int) -> tuple[np.ndarray, np.ndarray, list[tuple[int, int]]]:
        """Item ``index`` before standardisation and rate: ``(x (length,) float32 in
        [-1, 1), y (length,) int64, events)``, ``events`` the ``(end, cls)`` of every clip
        placed (``cls = len(words)`` for a non-keyword), ``end`` possibly beyond the crop."""
        rng = self._item_rng(index)
        aug = self.augment
        # augmentation draws from its own generator (seeded from the item's), so the
        # composition of an item is the same with and without it
        arng = None if aug is None else self._item_rng(index, stream=1)
        n = self.length
        x = np.zeros(n, dtype=np.float32)
        events: list[tuple[int, int]] = []
        pos = None
        while pos is None or pos < n:
            if rng.random() < self.keyword_prob:
                i = int(rng.integers(len(self.clips.files)))
                rel, cls = self.clips.files[i], self.clips.targets[i]
            else:
                rel = self.other_files[int(rng.integers(len(self.other_files)))]
                cls = self.silence
            s = read_wav(self.root / rel).astype(np.float32) / 32768.0
            if aug is not None and aug.speed and arng.random() < aug.speed_prob:
                s = speed_perturb(s, float(arng.uniform(*aug.speed_factor))).astype(np.float32)
            if pos is None:
                pos = -int(rng.integers(0, len(s)))  # start inside the first clip
            a, b = max(pos, 0), min(pos + len(s), n)
            if a < b:
                x[a:b] = s[a - pos : b - pos]
            end = len(s) if self.clip_end == "file" else speech_end(s)
            events.append((pos + end, cls))
            pos += len(s) + int(rng.integers(self.gap[0], self.gap[1] + 1))
        y = make_step_labels(n, events, self.tail, self.hold, self.silence)
        if aug is not None:  # room, microphone, noise, gain (timing unchanged)
            x, _ = self._chain(x, arng, noise=self._noise_source())
            return x.astype(np.float32), y, events
        if rng.random() < self.noise_prob:
            gain = rng.uniform(0.0, self.noise_max_gain)
            x = x + np.float32(gain) * self._noise_crop(rng, n, self.root)
        return x, y, events

    def _noise_source(self):
        """The background noise of the augmentation: random crops of the noise files."""
        if not noise_files(self.root):
            return None
        return lambda rng, n: self._noise_crop(rng, n, self.root)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        x, y, _ = self.compose(index)
        x = _standardise(x, self.normalizer)
        if self.rate == 2:
            x, y = x[::2], y[::2]
        if self.label_hop > 1:
            R = self.label_hop
            y = y[R - 1 :: R]
        return (
            torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)).unsqueeze(-1),
            torch.from_numpy(np.ascontiguousarray(y)),
        )
