"""Task registry: ``TASKS[name](cfg) → (train_set, val_set, test_set, meta, loss)``.

A builder takes the resolved config (see :mod:`.config`) and returns three map-style
datasets yielding ``(x (L, d_input) float32, y)``, the task ``meta`` (stored in every
checkpoint: ``task``, ``labels``, ``sample_rate``, ``input_mean``, ``input_std``,
``d_input``, ``d_output``, ...) and the loss kind (``"ce"``, ``"mse"`` or
``"ce_per_step"``). Every builder has a ``data_defaults`` dict: the keys allowed in the
config's ``data:`` section. ``stats=(mean, std)`` (from a checkpoint's meta) makes a
builder reuse that input standardisation instead of computing it from the train set.

- ``toy``: tone bursts in noise labelled sample by sample (the task of
  ``liquid_stream.demo``), generated in memory, deterministic; for tests and CI.
- ``speech``: Speech Commands (SC35/SC10) through ``training/data/speech.py``.
- ``speech-stream``: random crops of concatenated Speech Commands clips + noise
  (``SpeechStream``) with per-step labels (keyword classes + ``_silence_``), for a causal
  ``window`` decoder that runs on continuous audio.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

import numpy as np

Builder = Callable[..., tuple]
TASKS: dict[str, Builder] = {}


def register(name: str, data_defaults: dict):
    def deco(fn):
        fn.data_defaults = dict(data_defaults)
        TASKS[name] = fn
        return fn

    return deco


def data_defaults_for(name: str) -> dict:
    return dict(TASKS[name].data_defaults)


def build_task(cfg: dict, stats=None):
    """Run the registered builder for ``cfg["task"]``."""
    name = cfg["task"]
    if name not in TASKS:
        raise KeyError(f"unknown task {name!r}; known: {', '.join(TASKS)}")
    return TASKS[name](cfg, stats=stats)


# ------------------------------------------------------------------------------- toy


TOY_LABELS = ["silence", "440 Hz", "880 Hz"]


def tone_bursts(
    rng: np.random.Generator, n: int, length: int, sr: int, noise: float
) -> tuple[np.ndarray, np.ndarray]:
    """Noise with non-overlapping tone bursts (440/880 Hz); per-sample labels 0/1/2."""
    x = noise * rng.standard_normal((n, length))
    y = np.zeros((n, length), np.int64)
    t = np.arange(length) / sr
    lo, hi = max(8, length // 8), max(16, length // 2)
    for b in range(n):
        pos = int(rng.integers(0, lo))
        while pos < length:
            end = min(pos + int(rng.integers(lo, hi)), length)
            cls = int(rng.integers(1, 3))
            amp = rng.uniform(0.3, 1.0)
            phase = rng.uniform(0, 6.3)
            x[b, pos:end] += amp * np.sin(2 * np.pi * 440.0 * cls * t[pos:end] + phase)
            y[b, pos:end] = cls
            pos = end + int(rng.integers(lo // 2, hi))
    return x.astype(np.float32)[..., None], y


@register(
    "toy",
    {"n_train": 64, "n_val": 32, "n_test": 32, "length": 512, "sample_rate": 8000,
     "noise": 0.3, "seed": 1234},
)  # fmt: skip
def build_toy(cfg: dict, stats=None):
    import torch
    from torch.utils.data import TensorDataset

    d = cfg["data"]
    rng = np.random.default_rng(d["seed"])
    splits = [tone_bursts(rng, d[k], d["length"], d["sample_rate"], d["noise"])
              for k in ("n_train", "n_val", "n_test")]  # fmt: skip
    if stats is None:
        mean, std = float(splits[0][0].mean()), float(splits[0][0].std())
    else:
        mean, std = float(np.ravel(stats[0])[0]), float(np.ravel(stats[1])[0])
    sets = [
        TensorDataset(torch.from_numpy((x - mean) / std), torch.from_numpy(y)) for x, y in splits
    ]
    meta = {
        "task": "toy",
        "labels": list(TOY_LABELS),
        "sample_rate": int(d["sample_rate"]),
        "input_mean": [mean],
        "input_std": [std],
        "d_input": 1,
        "d_output": len(TOY_LABELS),
    }
    return sets[0], sets[1], sets[2], meta, "ce_per_step"


# ---------------------------------------------------------------------------- speech
# The loader lives in training/data/speech.py (liquid_stream.training.data.speech):
#   SpeechCommands(root, split="train"|"val"|"test", subset="sc35"|"sc10", normalizer=(mean,
#   std), augment, rate=1|2, seed) -> (x (16000 // rate, 1) float32, y int), with .labels,
#   .targets and set_epoch(); compute_normalizer(train_set) -> (mean, std); SC35_WORDS;
#   ensure_synth(per_word) -> root of the cached synthetic set (speech_synth.py).

SPEECH_MODULE = "liquid_stream.training.data.speech"
SYNTH_MODULE = "liquid_stream.training.data.speech_synth"


def _import(name: str):
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name and name.startswith(e.name):
            raise RuntimeError(
                f"the speech task needs the Speech Commands loader training/data/ ({name}), "
                "which is not installed yet"
            ) from e
        raise


def _targets(ds) -> list[int]:
    t = getattr(ds, "targets", None)
    if t is not None and len(t) == len(ds):
        return [int(v) for v in t]
    return [int(ds[i][1]) for i in range(len(ds))]


def per_class_subset(ds, k: int | None, seed: int = 0):
    """At most ``k`` items of every class (a fixed, seeded choice); ``ds`` when k is None."""
    if k is None:
        return ds
    from torch.utils.data import Subset

    targets = np.asarray(_targets(ds))
    rng = np.random.default_rng(seed)
    keep = []
    for c in np.unique(targets):
        idx = np.nonzero(targets == c)[0]
        keep.extend(rng.permutation(idx)[:k].tolist())
    sub = Subset(ds, sorted(keep))
    sub.targets = [int(targets[i]) for i in sub.indices]
    return sub


def _speech_meta(task: str, d: dict, labels: list, normalizer, root, **extra) -> dict:
    """Checkpoint/ONNX metadata shared by the speech tasks (raw 16 kHz mono input)."""
    return {
        "task": task,
        "subset": d["subset"],
        "labels": labels,
        "sample_rate": int(d["sample_rate"]),
        "input_mean": [normalizer[0]],
        "input_std": [normalizer[1]],
        "d_input": 1,
        "d_output": len(labels),
        "data_root": str(root),
        **extra,
    }


def _speech_source(sc, d: dict, seed: int, stats, per_class: int | None):
    """The dataset root (data.root, else the cached synthetic set) and the (mean, std)
    normaliser: from a checkpoint's ``stats`` when given, else over the train clips
    (at most ``per_class`` per word)."""
    root = d["root"] or _import(SYNTH_MODULE).ensure_synth(int(d["synth_per_word"]))
    if stats is not None:
        return root, (float(np.ravel(stats[0])[0]), float(np.ravel(stats[1])[0]))
    clips = per_class_subset(
        sc.SpeechCommands(root, "train", d["subset"], seed=seed), per_class, seed
    )
    return root, tuple(float(v) for v in sc.compute_normalizer(clips))


@register(
    "speech",
    {"root": None, "subset": "sc35", "synth_per_word": 30, "max_train_per_class": None,
     "max_eval_per_class": None, "augment": False, "sample_rate": 16000},
)  # fmt: skip
def build_speech(cfg: dict, stats=None, rate: int = 1):
    """Speech Commands (real v0.02 layout at data.root, else the cached synthetic set).
    ``rate=2``: the val/test splits at 8 kHz (x[::2]) for the zero-shot evaluation."""
    sc = _import(SPEECH_MODULE)
    d, seed = cfg["data"], int(cfg["train"]["seed"])
    root, normalizer = _speech_source(sc, d, seed, stats, d["max_train_per_class"])

    def split(name, normalizer, augment=False, r=1):
        ds = sc.SpeechCommands(root, name, d["subset"], normalizer=normalizer, augment=augment,
                               rate=r, seed=seed)  # fmt: skip
        limit = d["max_train_per_class"] if name == "train" else d["max_eval_per_class"]
        return per_class_subset(ds, limit, seed)

    train = split("train", normalizer, bool(d["augment"]))
    val, test = split("val", normalizer, r=rate), split("test", normalizer, r=rate)
    labels = list(getattr(train, "dataset", train).labels)
    meta = _speech_meta("speech", d, labels, normalizer, root)
    return train, val, test, meta, "ce"


# --------------------------------------------------------------------- speech-stream
# Streaming-ready keyword spotting: random crops of Speech Commands clips laid end to end
# with silent gaps and background noise (SpeechStream in training/data/speech.py), one
# label per step (the keyword just heard, else _silence_), for a causal `window` decoder.


@register(
    "speech-stream",
    {"root": None, "subset": "sc35", "synth_per_word": 30, "sample_rate": 16000,
     "length": 32000, "n_train": 400, "n_val": 64, "n_test": 128,
     "label_tail_ms": 100.0, "label_hold_ms": 200.0, "clip_end": "speech",
     "gap_ms": [0.0, 500.0], "keyword_prob": 0.8, "noise_prob": 0.8,
     "noise_max_gain": 0.1, "normalizer_per_class": None},
)  # fmt: skip
def build_speech_stream(cfg: dict, stats=None, rate: int = 1):
    """:class:`SpeechStream` crops of the official train/val/test splits (real v0.02 root at
    data.root, else the cached synthetic set, as for ``speech``). Labels: the words of
    data.subset, then ``_silence_``; loss ``ce_per_step``. The train crops are a function
    of (seed, epoch, index) (the trainer calls ``set_epoch``); val and test are fixed
    (seeds ``seed + 1`` / ``seed + 2``, epoch 0). The normaliser is that of the 1 s
    SpeechCommands train clips (at most ``normalizer_per_class`` per word when set), as
    in ``speech``. ``rate=2``: val/test at 8 kHz (x and y taken [::2])."""
    sc = _import(SPEECH_MODULE)
    d, seed = cfg["data"], int(cfg["train"]["seed"])
    root, normalizer = _speech_source(sc, d, seed, stats, d["normalizer_per_class"])
    gap = tuple(float(v) for v in d["gap_ms"])
    if len(gap) != 2 or gap[0] < 0 or gap[1] < gap[0]:
        raise ValueError(f"data.gap_ms must be [lo, hi] with 0 <= lo <= hi, got {d['gap_ms']!r}")

    def split(name, n_items, split_seed, r=1):
        return sc.SpeechStream(
            root, name, d["subset"], length=int(d["length"]), num_items=int(n_items),
            normalizer=normalizer, label_tail_ms=float(d["label_tail_ms"]),
            label_hold_ms=float(d["label_hold_ms"]), clip_end=d["clip_end"], gap_ms=gap,
            keyword_prob=float(d["keyword_prob"]), noise_prob=float(d["noise_prob"]),
            noise_max_gain=float(d["noise_max_gain"]), rate=r, seed=split_seed,
        )  # fmt: skip

    train = split("train", d["n_train"], seed)
    val = split("val", d["n_val"], seed + 1, rate)
    test = split("test", d["n_test"], seed + 2, rate)
    for ds in (val, test):
        ds.set_epoch(0)  # fixed crops: the same items on every evaluation
    labels = list(train.labels)
    meta = _speech_meta(
        "speech-stream", d, labels, normalizer, root,
        silence_class=int(train.silence), clip_end=d["clip_end"],
        label_tail_ms=float(d["label_tail_ms"]), label_hold_ms=float(d["label_hold_ms"]),
    )  # fmt: skip
    return train, val, test, meta, "ce_per_step"
