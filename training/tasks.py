"""Task registry: ``TASKS[name](cfg) → (train_set, val_set, test_set, meta, loss)``.

A builder takes the resolved config (see :mod:`.config`) and returns three map-style
datasets yielding ``(x (L, d_input) float32, y)``, the task ``meta`` (stored in every
checkpoint: a :class:`~liquid_stream.runtime.meta.ModelMeta` as a plain dict, ``task``,
``labels``, ``sample_rate``, ``input_mean``, ``input_std``, ``d_input``, ``d_output``,
...) and the loss kind (``"ce"``, ``"mse"`` or
``"ce_per_step"``). Every builder has a ``data_defaults`` dict: the keys allowed in the
config's ``data:`` section. ``stats=(mean, std)`` (from a checkpoint's meta) makes a
builder reuse that input standardisation instead of computing it from the train set.

- ``toy``: tone bursts in noise labelled sample by sample (the task of
  ``liquid_stream.demo``), generated in memory, deterministic; for tests and CI.
- ``speech``: Speech Commands (SC35/SC10) through ``training/data/speech/speech.py``.
- ``speech-stream``: random crops of concatenated Speech Commands clips + noise
  (``SpeechStream``) with per-step labels (keyword classes + ``_silence_``), for a causal
  ``window`` decoder that runs on continuous audio.
- ``bidmc``: BIDMC HR / RR / SpO2 regression (WFDB records, Monash .ts, or simulated).
- ``listops``, ``imdb``, ``aan``, ``lra-cifar``, ``pathfinder``, ``pathx``: the six Long
  Range Arena tasks; ``scifar``: sequential CIFAR-10; ``fashion-mnist``: sequential
  Fashion-MNIST (the real images available offline, the image tasks' stand-in).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from liquid_stream.io.bidmc_vocab import TARGETS as BIDMC_TARGETS
from liquid_stream.runtime.meta import ModelMeta

from .data.tones import TONE_LABELS, tone_bursts

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
    """Run the registered builder for ``cfg["task"]``; a split with no examples is refused
    here, before any training (``ValueError`` naming the split and its size)."""
    name = cfg["task"]
    if name not in TASKS:
        raise KeyError(f"unknown task {name!r}; known: {', '.join(TASKS)}")
    built = TASKS[name](cfg, stats=stats)
    check_split_sizes(name, built[:3])
    return built


SPLIT_UNITS = {"speech": "clips", "speech-stream": "crops", "bidmc": "windows"}


def check_split_sizes(task: str, sets, need: int = 1) -> None:
    """Raise ``ValueError`` unless each of the (train, val, test) datasets has ``need`` items."""
    for split, ds in zip(("train", "val", "test"), sets, strict=True):
        n = 0 if ds is None else len(ds)
        if n < need:
            unit = SPLIT_UNITS.get(task, "examples")
            raise ValueError(f"{task}: the {split} split has {n} {unit}; it needs at least {need}")


def _limit(idx: np.ndarray, k: int | None, seed: int) -> np.ndarray:
    """At most ``k`` of the indices ``idx`` (a fixed, seeded choice, kept sorted)."""
    if k is None or len(idx) <= int(k):
        return idx
    return np.sort(np.random.default_rng(seed).permutation(idx)[: int(k)])


def _limit_splits(idx: list[np.ndarray], d: dict, seed: int) -> list[np.ndarray]:
    """Train / val / test indices cut to data.max_train / max_eval / max_eval (seeds seed,
    seed + 1, seed + 2)."""
    ks = (d["max_train"], d["max_eval"], d["max_eval"])
    return [_limit(i, k, seed + j) for j, (i, k) in enumerate(zip(idx, ks, strict=True))]


def _saved_stats(stats) -> tuple[list[float], list[float]]:
    """A checkpoint's input standardisation ``(mean, std)`` as lists of floats."""
    return [float(v) for v in np.ravel(stats[0])], [float(v) for v in np.ravel(stats[1])]


# ------------------------------------------------------------------------------- toy


TOY_LABELS = list(TONE_LABELS)


@register(
    "toy",
    {
        "n_train": 64,
        "n_val": 32,
        "n_test": 32,
        "length": 512,
        "sample_rate": 8000,
        "noise": 0.3,
        "seed": 1234,
    },
)
def build_toy(cfg: dict, stats=None):
    import torch
    from torch.utils.data import TensorDataset

    d = cfg["data"]
    rng = np.random.default_rng(d["seed"])
    splits = [
        tone_bursts(rng, d[k], d["length"], d["sample_rate"], d["noise"])
        for k in ("n_train", "n_val", "n_test")
    ]
    if stats is None:
        mean, std = float(splits[0][0].mean()), float(splits[0][0].std())
    else:
        mean, std = (v[0] for v in _saved_stats(stats))
    sets = [
        TensorDataset(torch.from_numpy((x - mean) / std), torch.from_numpy(y)) for x, y in splits
    ]
    meta = ModelMeta(
        task="toy",
        labels=list(TOY_LABELS),
        sample_rate=int(d["sample_rate"]),
        input_mean=[mean],
        input_std=[std],
        d_input=1,
        d_output=len(TOY_LABELS),
    )
    return sets[0], sets[1], sets[2], meta.to_dict(), "ce_per_step"


# ---------------------------------------------------------------------------- speech
# The loader lives in training/data/speech/speech.py (liquid_stream.training.data.speech.speech):
#   SpeechCommands(root, split="train"|"val"|"test", subset="sc35"|"sc10", normalizer=(mean,
#   std), augment, rate=1|2, seed) -> (x (16000 // rate, 1) float32, y int), with .labels,
#   .targets and set_epoch(); compute_normalizer(train_set) -> (mean, std); SC35_WORDS;
#   ensure_synth(per_word) -> root of the cached synthetic set (speech_synth.py).
# Each builder imports its data modules itself (explicit imports, inside the function: the
# data modules import torch or scipy; this module, which config validation reads, does not).


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


def _speech_meta(
    task: str, d: dict, labels: list, normalizer, root, extra: dict | None = None, **fields
) -> ModelMeta:
    """Checkpoint/ONNX metadata shared by the speech tasks (raw 16 kHz mono input):
    ``fields`` are further :class:`ModelMeta` fields, ``extra`` further provenance."""
    return ModelMeta(
        task=task,
        labels=labels,
        sample_rate=int(d["sample_rate"]),
        input_mean=[normalizer[0]],
        input_std=[normalizer[1]],
        d_input=1,
        d_output=len(labels),
        extra={"subset": d["subset"], "data_root": str(root), **(extra or {})},
        **fields,
    )


def _speech_source(sc, d: dict, seed: int, stats, per_class: int | None, task: str):
    """The dataset root (data.root, else the cached synthetic set) and the (mean, std)
    normaliser: from a checkpoint's ``stats`` when given, else over the train clips
    (at most ``per_class`` per word)."""
    from .data.speech.speech_synth import ensure_synth

    root = d["root"] or ensure_synth(int(d["synth_per_word"]))
    if stats is not None:
        return root, tuple(v[0] for v in _saved_stats(stats))
    train = sc.SpeechCommands(root, "train", d["subset"], seed=seed)
    sc.require_clips(train, 1, task)
    clips = per_class_subset(train, per_class, seed)
    return root, tuple(float(v) for v in sc.compute_normalizer(clips))


@register(
    "speech",
    {
        "root": None,
        "subset": "sc35",
        "synth_per_word": 30,
        "max_train_per_class": None,
        "max_eval_per_class": None,
        "augment": False,
        "sample_rate": 16000,
    },
)
def build_speech(cfg: dict, stats=None, rate: int = 1):
    """Speech Commands (real v0.02 layout at data.root, else the cached synthetic set).
    ``rate=2``: the val/test splits at 8 kHz (x[::2]) for the zero-shot evaluation."""
    from .data.speech import speech as sc

    d, seed = cfg["data"], int(cfg["train"]["seed"])
    root, normalizer = _speech_source(sc, d, seed, stats, d["max_train_per_class"], "speech")

    def split(name, normalizer, augment=False, r=1):
        ds = sc.SpeechCommands(
            root, name, d["subset"], normalizer=normalizer, augment=augment, rate=r, seed=seed
        )
        sc.require_clips(ds, 1, "speech")
        limit = d["max_train_per_class"] if name == "train" else d["max_eval_per_class"]
        return per_class_subset(ds, limit, seed)

    train = split("train", normalizer, bool(d["augment"]))
    val, test = split("val", normalizer, r=rate), split("test", normalizer, r=rate)
    labels = list(getattr(train, "dataset", train).labels)
    meta = _speech_meta("speech", d, labels, normalizer, root)
    return train, val, test, meta.to_dict(), "ce"


# --------------------------------------------------------------------- speech-stream
# Streaming-ready keyword spotting: random crops of Speech Commands clips laid end to end
# with silent gaps and background noise (SpeechStream in training/data/speech/speech.py), one
# label per step (the keyword just heard, else _silence_), for a causal `window` decoder.


@register(
    "speech-stream",
    {
        "root": None,
        "subset": "sc35",
        "synth_per_word": 30,
        "sample_rate": 16000,
        "length": 32000,
        "n_train": 400,
        "n_val": 64,
        "n_test": 128,
        "label_tail_ms": 100.0,
        "label_hold_ms": 200.0,
        "clip_end": "speech",
        "gap_ms": [0.0, 500.0],
        "keyword_prob": 0.8,
        "noise_prob": 0.8,
        "noise_max_gain": 0.1,
        "normalizer_per_class": None,
        "silence_weight": 1.0,
        "augment": None,
        "spec_augment": None,
    },
)
def build_speech_stream(cfg: dict, stats=None, rate: int = 1):
    """:class:`SpeechStream` crops of the official train/val/test splits (real v0.02 root at
    data.root, else the cached synthetic set, as for ``speech``). Labels: the words of
    data.subset, then ``_silence_``; loss ``ce_per_step``. The train crops are a function
    of (seed, epoch, index) (the trainer calls ``set_epoch``); val and test are fixed
    (seeds ``seed + 1`` / ``seed + 2``, epoch 0). The normaliser is that of the 1 s
    SpeechCommands train clips (at most ``normalizer_per_class`` per word when set), as
    in ``speech``. ``rate=2``: val/test at 8 kHz (x and y taken [::2]).
    ``silence_weight`` < 1 down-weights the ``_silence_`` steps in the loss (most steps
    are silence; a small model otherwise learns to answer silence everywhere).
    ``augment`` (a mapping of :class:`~liquid_stream.training.data.speech.augment.AugmentConfig`
    fields, or null): the train crops' augmentation toward real microphones and rooms.
    ``spec_augment`` (a mapping of
    :class:`~liquid_stream.training.data.speech.spec_augment.SpecAugmentConfig` fields, or null;
    log-mel models only): vocal-tract warp and SpecAugment masks of the training
    features, recorded in ``meta["spec_augment"]``; the trainer installs it
    (:func:`~liquid_stream.training.data.speech.spec_augment.install`).

    With a log-mel front end (``model.frontend.kind: logmel``) the model takes raw samples
    (no normaliser: mean 0, std 1), its labels are those of the steps where a frame
    completes (``label_hop``), and ``meta["frontend_stats"]`` holds the per-band mean and
    std of the log-mel features over the first 64 train crops (epoch 0), which the model's
    front end subtracts and divides by (fixed, part of its config)."""
    from .data.speech import speech as sc

    d, seed = cfg["data"], int(cfg["train"]["seed"])
    frontend = (cfg.get("model") or {}).get("frontend") or {}
    logmel = frontend.get("kind", "raw") == "logmel"
    if logmel:
        if rate != 1:
            raise ValueError("a log-mel model is evaluated at its 16 kHz front end only")
        from .data.speech.speech_synth import ensure_synth

        root = d["root"] or ensure_synth(int(d["synth_per_word"]))
        normalizer = (0.0, 1.0)
        from liquid_stream.nn.frontend import LogMelConfig

        hop = LogMelConfig.from_dict(frontend).hop
    else:
        root, normalizer = _speech_source(
            sc, d, seed, stats, d["normalizer_per_class"], "speech-stream"
        )
        hop = 1
    aug = None
    if d["augment"] is not None:  # {} = every default of AugmentConfig
        from .data.speech.augment import AugmentConfig

        aug = AugmentConfig.from_dict(d["augment"])
    spec = None
    if d["spec_augment"] is not None:  # {} = every default of SpecAugmentConfig
        from .data.speech import spec_augment as sa

        if not logmel:  # refused here, before the run starts (install checks it again)
            raise ValueError(sa.NEEDS_LOGMEL)
        spec = sa.SpecAugmentConfig.from_dict(d["spec_augment"])
    gap = tuple(float(v) for v in d["gap_ms"])
    if len(gap) != 2 or gap[0] < 0 or gap[1] < gap[0]:
        raise ValueError(f"data.gap_ms must be [lo, hi] with 0 <= lo <= hi, got {d['gap_ms']!r}")

    def split(name, n_items, split_seed, r=1, augment=None):
        return sc.SpeechStream(
            root,
            name,
            d["subset"],
            length=int(d["length"]),
            num_items=int(n_items),
            normalizer=normalizer,
            label_tail_ms=float(d["label_tail_ms"]),
            label_hold_ms=float(d["label_hold_ms"]),
            clip_end=d["clip_end"],
            gap_ms=gap,
            keyword_prob=float(d["keyword_prob"]),
            noise_prob=float(d["noise_prob"]),
            noise_max_gain=float(d["noise_max_gain"]),
            rate=r,
            seed=split_seed,
            augment=augment,
            label_hop=hop,
        )

    train = split("train", d["n_train"], seed, augment=aug)
    val = split("val", d["n_val"], seed + 1, rate)
    test = split("test", d["n_test"], seed + 2, rate)
    for ds in (val, test):
        ds.set_epoch(0)  # fixed crops: the same items on every evaluation
    labels = list(train.labels)
    meta = _speech_meta(
        "speech-stream",
        d,
        labels,
        normalizer,
        root,
        silence_class=int(train.silence),
        extra={
            "clip_end": d["clip_end"],
            "label_tail_ms": float(d["label_tail_ms"]),
            "label_hold_ms": float(d["label_hold_ms"]),
            **({"spec_augment": spec.to_dict()} if spec is not None else {}),
        },
    )
    if float(d["silence_weight"]) != 1.0:  # the loss weight of the (dominant) _silence_ steps
        meta.class_weights = [1.0] * (len(labels) - 1) + [float(d["silence_weight"])]
    if logmel and not (frontend.get("mean") and frontend.get("std")):
        meta.frontend_stats = logmel_stats(train, frontend)
    return train, val, test, meta.to_dict(), "ce_per_step"


def logmel_stats(train, frontend: dict, n_items: int = 64) -> dict:
    """Per-band mean and std of the log-mel features of the first ``n_items`` train crops
    (epoch 0; the train set's epoch is restored), as plain lists for the model config."""
    import torch

    from liquid_stream.nn.frontend import LogMel, LogMelConfig

    cfg = LogMelConfig.from_dict({k: v for k, v in frontend.items() if k not in ("mean", "std")})
    epoch = train.epoch
    train.set_epoch(0)
    try:
        x = torch.stack([train[i][0] for i in range(min(n_items, len(train)))]).double()
    finally:
        train.epoch = epoch
    z = LogMel(cfg)(x).reshape(-1, cfg.n_mels)
    return {"mean": z.mean(0).tolist(), "std": z.std(0).clamp(min=1e-3).tolist()}


# ----------------------------------------------------------------------------- bidmc
# Vital-sign regression (HR / RR / SpO2) from PPG + ECG windows (training/data/vitals/bidmc.py):
# PhysioNet BIDMC WFDB records or the Monash BIDMC32 .ts files at data.root, else the
# cached simulated BIDMC records (training/data/vitals/bidmc_sim.py). The model maps a 32 s
# window (4000 samples at 125 Hz) to the mean of the 1 Hz numerics over it; with a
# `window` decoder of W = 4000 steps the last step of the per-step output is exactly that
# estimate, so the same model streams: at every step it estimates the trailing 32 s.

BIDMC_SIMS = ("classic", "randomised")  # data.sim: which simulator when data.root is null
BIDMC_FORMATS = ("auto", "wfdb", "ts")  # data.format
BIDMC_PROTOCOLS = ("record", "shuffled")  # data.protocol


def bidmc_split_seed(cfg: dict) -> int:
    """The seed of a bidmc run's record split: ``data.split_seed``, or ``train.seed`` when
    that is null (the default, and every run made before the option). Runs of different
    training seeds that share a split seed hold out the same records, so their models can be
    compared, or averaged (an ensemble), on records none of them trained on."""
    s = (cfg.get("data") or {}).get("split_seed")
    return int(cfg["train"]["seed"] if s is None else s)


def _named(w, prefix: str):
    """``w`` (windows or crops) with ``prefix`` before each record id (another folder's)."""
    if prefix:
        w.record = np.asarray([prefix + str(r) for r in w.record], dtype=str)
    return w


def bidmc_windows(d: dict, seed: int, only: str | None = None, signals: bool = True):
    """(format, root, train, val, test) ``Windows`` of the data section ``d``.

    WFDB: ``protocol`` ``record`` (no recording in two splits) or ``shuffled`` (all
    windows, 70/15/15, as the S4 code). ``.ts``: ``record`` is the archive's fixed
    TRAIN/TEST split (val = 15 % of TRAIN, seeded), ``shuffled`` merges TRAIN+TEST.

    ``only`` (``"train"``, ``"val"`` or ``"test"``; WFDB, ``record`` protocol): the same
    splits, but only that one holds its samples, the others are indexes (``x`` of shape
    ``(n, 0, C)``): the split is drawn from an index of every record, then that split's
    records are read again. Evaluation holds 15 % of the windows instead of all of them.
    ``signals=False`` (WFDB): every split an index (a crop run of a self-normalising model
    needs the windows' targets and records, not their samples: 5.1 GB for 2997 records)."""
    if only not in (None, "train", "val", "test"):
        raise ValueError(f"only must be 'train', 'val' or 'test', got {only!r}")
    from .data.vitals import bidmc as bd

    root = d["root"]
    if root is None and d["sim"] == "randomised":
        from .data.vitals.vitals_sim import ensure_vitals_sim

        root = ensure_vitals_sim(
            int(d["sim_records"]),
            float(d["sim_minutes"]),
            int(d["sim_seed"]),
            tuple(d["sim_families"]),
        )
    elif root is None:
        from .data.vitals.bidmc_sim import ensure_bidmc_sim

        root = ensure_bidmc_sim(int(d["sim_records"]), float(d["sim_minutes"]), int(d["sim_seed"]))
    fmt = bd.find_format(root) if d["format"] == "auto" else d["format"]
    protocol = d["protocol"]
    if protocol not in BIDMC_PROTOCOLS:
        raise ValueError(f"data.protocol must be 'record' or 'shuffled', got {protocol!r}")
    if fmt == "wfdb":
        args = (
            root,
            d["target"],
            tuple(d["channels"]),
            int(d["window"]),
            int(d["hop"]),
            int(d["sample_rate"]),
        )
        index = only is not None and protocol == "record"
        w = bd.load_wfdb_windows(
            *args, min_valid=float(d["min_valid"]), signals=signals and not index
        )
        splits = list(bd.split_windows(w, protocol, seed))
        if index:
            k = ("train", "val", "test").index(only)
            names = list(dict.fromkeys(splits[k].record))  # in the index's order
            if names and signals:
                skipped = splits[k].skipped
                splits[k] = bd.load_wfdb_windows(
                    *args, records=names, min_valid=float(d["min_valid"])
                )
                splits[k].skipped = skipped  # every record's counts, as without ``only``
        return (fmt, root, *splits)
    if fmt != "ts":
        raise ValueError(f"data.format must be auto, wfdb or ts, got {fmt!r}")
    train, test = bd.load_ts_windows(root, d["target"])
    if protocol == "shuffled":
        merged = bd.concat_windows(train, test)
        return (fmt, root, *bd.split_windows(merged, "shuffled", seed))
    rng = np.random.default_rng(seed)
    perm = rng.permutation(len(train))
    n_val = int(round(0.15 * len(train)))
    return fmt, root, train.subset(np.sort(perm[n_val:])), train.subset(np.sort(perm[:n_val])), test


@register(
    "bidmc",
    {
        "root": None,
        "format": "auto",
        "target": "hr",
        "protocol": "record",
        "channels": ["PLETH", "II"],
        "window": 4000,
        "hop": 250,
        "sample_rate": 125,
        "min_valid": 0.5,
        "sim": "classic",
        "sim_families": ["nk2", "param"],
        "sim_records": 24,
        "sim_minutes": 8.0,
        "sim_seed": 0,
        "max_train": None,
        "crop_s": None,
        "crop_hop_s": 48.0,
        "channel_off": 0.0,
        "pulse_eq": 0.0,
        "pulse_eq_db": None,
        "split_seed": None,
        "extra_train": [],
        "beats": 0.0,
        "beats_shift_s": 0.3,
        "beats_box_s": 0.0,
    },
)
def build_bidmc(cfg: dict, stats=None, rate: int = 1, windows=None):
    """BIDMC HR / RR / SpO2 regression (loss ``mse`` at the window's last step, in units
    of the train targets' std; RMSE / MAE in physical units). ``meta`` carries what the
    vitals app needs: target, units, channels, window, target_mean / target_std (the
    model's output affine, set by the caller from ``meta`` before building the model).

    ``data.extra_train``: WFDB record folders whose every record joins the training split
    only (e.g. records drawn at the ends of a target's range); the val / test split of
    ``data.root`` is the one it has without them. Their records are named ``k:bidmcN`` in the
    split's record list (k: the folder's position)."""
    if rate != 1:
        raise ValueError("bidmc has no resampled evaluation")
    from .data.vitals import bidmc as bd

    d, seed = cfg["data"], int(cfg["train"]["seed"])
    target = d["target"]
    if target not in BIDMC_TARGETS:
        raise ValueError(f"data.target must be one of {', '.join(BIDMC_TARGETS)}, got {target!r}")
    frontend = (cfg.get("model") or {}).get("frontend") or {}
    scalenorm = frontend.get("kind") == "scalenorm"  # the model normalises itself, in any units
    # a crop run of such a model reads its crops from the records: the windows' samples
    # would only take memory
    index_only = bool(d.get("crop_s")) and scalenorm and d["protocol"] == "record"
    fmt, root, train, val, test = windows or bidmc_windows(
        d, bidmc_split_seed(cfg), signals=not index_only
    )
    if d["max_train"] is not None and len(train) > int(d["max_train"]):
        train = train.subset(_limit(np.arange(len(train)), d["max_train"], seed))
    crops = bool(d.get("crop_s")) and fmt == "wfdb"  # train and score as a stream
    extra_roots = [str(r) for r in d.get("extra_train") or []]
    if extra_roots and fmt != "wfdb":
        raise ValueError("data.extra_train needs WFDB records in data.root")
    extra_w = [  # every record of each folder, index only with crops (the crops are read below)
        _named(
            bd.load_wfdb_windows(
                r,
                target,
                tuple(d["channels"]),
                int(d["window"]),
                int(d["hop"]),
                int(d["sample_rate"]),
                min_valid=float(d["min_valid"]),
                signals=not crops,
            ),
            f"{k}:",
        )
        for k, r in enumerate(extra_roots, 1)
    ]
    if extra_w and not crops:  # (with crops, the train crops are cut from each folder below)
        train = bd.concat_windows(train, *extra_w)
    if len(train) == 0:
        raise ValueError(f"no training windows for {target} in {root}")
    if target == "spo2" and not ("PLETH" in train.channels or {"IR", "RED"} <= set(train.channels)):
        raise ValueError(
            "data.target spo2 needs the oximeter's IR and RED channels (or PLETH): SpO2 is "
            "read from the PPG"
        )
    if scalenorm:
        mean, std = [0.0] * len(train.channels), [1.0] * len(train.channels)
    elif stats is None:
        mean, std = bd.channel_stats(train.x)
    else:
        mean, std = _saved_stats(stats)
    sets = [bd.WindowDataset(w, mean, std) for w in (train, val, test)]
    loss = "mse"
    beats = float(d["beats"])  # the weight of the per-frame beat loss (bidmc_crops.py)
    if beats > 0 and (not crops or target != "hr"):
        raise ValueError(
            "data.beats (a per-beat target) needs data.target hr and data.crop_s "
            "(crops of WFDB records with beat times)"
        )
    if float(d["pulse_eq"]) > 0 and not crops:
        raise ValueError(
            "data.pulse_eq re-shapes the train crops: it needs data.crop_s (and WFDB records)"
        )
    if crops:  # bidmc_crops.py
        from .data.vitals import bidmc_crops as bc
        from .data.vitals import pulse_eq

        fs = int(d["sample_rate"])
        crop, hop = int(round(float(d["crop_s"]) * fs)), int(round(float(d["crop_hop_s"]) * fs))
        extra_cut = [
            (r, sorted({str(n).split(":", 1)[1] for n in e.record}), f"{k}:")
            for k, (r, e) in enumerate(zip(extra_roots, extra_w, strict=True), 1)
        ]

        def crops_of(w):  # the train split: data.root's records, then extra_train's
            cut = [(root, sorted({str(r) for r in w.record}), "")]
            cut += extra_cut if w is train else []
            return bc.concat_crops(
                [
                    _named(
                        bc.load_wfdb_crops(
                            src,
                            target,
                            names,
                            train.channels,
                            crop,
                            hop,
                            int(d["window"]),
                            fs,
                            float(d["min_valid"]),
                            beats=beats > 0,
                            beat_shift=float(d["beats_shift_s"]),
                        ),
                        p,
                    )
                    for src, names, p in cut
                ]
            )

        sets = [
            bc.CropDataset(
                crops_of(w),
                mean,
                std,
                channel_off=float(d["channel_off"]) if w is train else 0.0,
                seed=seed,
                sample_rate=fs,
                pulse_eq=float(d["pulse_eq"]) if w is train else 0.0,
                pulse_eq_db=pulse_eq.gain_bound_db(d["pulse_eq_db"]),
            )
            for w in (train, val, test)
        ]
        loss = "mse_beats" if beats > 0 else "mse_per_step"
    y = np.concatenate([train.y] + ([e.y for e in extra_w] if crops else [])).astype(np.float64)
    extra = {
        "format": fmt,
        "protocol": d["protocol"],
        "data_root": str(root),
        "windows": {"train": len(train), "val": len(val), "test": len(test)},
    }
    if beats > 0:  # what the trainer's loss needs (training/metrics.py, mse_beats)
        hop = int(frontend.get("hop", 1))  # input samples per frame of the model
        box = max(1, round(float(d["beats_box_s"]) * int(d["sample_rate"]) / hop))
        extra["beats"] = {
            "weight": beats,
            "shift_s": float(d["beats_shift_s"]),
            "sigma_s": bc.BEAT_SIGMA_S,
            "box_frames": box,
        }
    if fmt == "wfdb":  # which recordings each split holds (the apps stream held-out ones)
        parts = (("train", train), ("val", val), ("test", test))
        extra["records"] = {k: sorted({str(r) for r in w.record}) for k, w in parts}
        if extra_w:
            names = {str(r) for e in extra_w for r in e.record}
            extra["records"]["train"] = sorted(set(extra["records"]["train"]) | names)
            extra["extra_train"] = {
                r: len(set(e.record)) for r, e in zip(extra_roots, extra_w, strict=True)
            }
    meta = ModelMeta(
        task="bidmc",
        target=target,
        units=BIDMC_TARGETS[target][1],
        labels=[target],
        channels=list(train.channels),
        sample_rate=int(d["sample_rate"]),
        window=int(d["window"]),
        input_mean=mean,
        input_std=std,
        target_mean=float(y.mean()),
        target_std=float(max(y.std(), 1e-3)),
        d_input=len(train.channels),
        d_output=1,
        extra=extra,
    )
    return sets[0], sets[1], sets[2], meta.to_dict(), loss


# --------------------------------------------------------------------------- listops
# LRA ListOps (training/data/lra/listops.py): TSV files at data.root, else a generated set
# cached under $LIQUID_STREAM_CACHE. Tokens are one-hot encoded (16 = 15 symbols + padding,
# lra_text.TokenDataset) and right-padded to data.max_length; the paper's pool decoder
# averages over all steps.


@register(
    "listops",
    {
        "root": None,
        "max_length": 2000,
        "n_train": 96000,
        "n_val": 2000,
        "n_test": 2000,
        "min_length": 500,
        "max_depth": 10,
        "max_args": 10,
        "seed": 0,
    },
)
def build_listops(cfg: dict, stats=None):
    from .data.lra import listops as lo
    from .data.lra.lra_text import TokenDataset

    d = cfg["data"]
    root = d.get("root")
    if root is None:  # a generated set, cached by its settings
        root = lo.ensure_listops(
            d["n_train"],
            d["n_val"],
            d["n_test"],
            seed=d["seed"],
            min_length=d["min_length"],
            max_length=d["max_length"],
            max_depth=d["max_depth"],
            max_args=d["max_args"],
        )
    data = lo.read_dataset(root, d["max_length"])
    vocab = len(lo.VOCAB) + 1  # + padding (id 0)
    sets = [TokenDataset(*data[s], d["max_length"], vocab_size=vocab) for s in lo.SPLITS]
    meta = ModelMeta(
        task="listops",
        labels=[str(i) for i in range(10)],
        d_input=vocab,
        d_output=10,
        extra={"vocab": list(lo.VOCAB), "data_root": str(root), "max_length": int(d["max_length"])},
    )
    return sets[0], sets[1], sets[2], meta.to_dict(), "ce"


# ---------------------------------------------------------------------------- images
# Pixel sequences (training/data/lra/images.py): sCIFAR (CIFAR-10, 1024 steps × RGB), LRA-CIFAR
# (grayscale, 1024 × 1) and sequential Fashion-MNIST (784 × 1; Debian dataset-fashion-mnist,
# the real images available offline). CIFAR-10 is read from the python batches at data.root
# (it cannot be downloaded here); data.source=fashion-mnist runs the same path on real pixels.

IMAGE_SOURCES = ("cifar10", "fashion-mnist")


def build_images(cfg: dict, stats=None, task: str = "scifar"):
    """Train / val (a seeded ``val_fraction`` of the train images) / test (the official test
    set) as :class:`SequenceImageDataset` (``x (H·W, C)`` standardised with the train
    images' per-channel mean / std)."""
    from .data.lra import images as im

    d, seed = cfg["data"], int(cfg["train"]["seed"])
    if d["source"] not in IMAGE_SOURCES:
        raise ValueError(
            f"data.source must be one of {', '.join(IMAGE_SOURCES)}, got {d['source']!r}"
        )
    root = d["root"]
    if d["source"] == "cifar10":
        if root is None:
            raise ValueError(
                "CIFAR-10 is not available offline: pass --data PATH (the python batches, "
                "cifar-10-batches-py/) or use the real images we have, --set "
                "data.source=fashion-mnist"
            )
        data = im.read_cifar10(root)
    else:
        root = root or im.FASHION_MNIST_DIR
        data = im.read_fashion_mnist(root)
    (x_all, y_all), (x_test, y_test) = data["train"], data["test"]
    train_idx, val_idx = im.split_train_val(len(y_all), float(d["val_fraction"]), seed)
    train_idx, val_idx, test_idx = _limit_splits(
        [train_idx, val_idx, np.arange(len(y_test))], d, seed
    )
    if stats is None:
        mean, std = im.channel_stats(x_all[train_idx], d["mode"])
    else:
        mean, std = _saved_stats(stats)

    def split(x, y, idx):
        return im.SequenceImageDataset(x[idx], y[idx], d["mode"], mean, std)

    sets = [
        split(x_all, y_all, train_idx),
        split(x_all, y_all, val_idx),
        split(x_test, y_test, test_idx),
    ]
    x0 = sets[0][0][0]
    meta = ModelMeta(
        task=task,
        labels=list(data["labels"]),
        input_mean=mean,
        input_std=std,
        d_input=int(x0.shape[-1]),
        d_output=len(data["labels"]),
        extra={
            "source": d["source"],
            "mode": d["mode"],
            "length": int(x0.shape[0]),
            "image_shape": list(x_all.shape[1:]),
            "data_root": str(root),
        },
    )
    return sets[0], sets[1], sets[2], meta.to_dict(), "ce"


def _register_image_task(name: str, source: str, mode: str) -> None:
    defaults = {
        "source": source,
        "root": None,
        "mode": mode,
        "val_fraction": 0.1,
        "max_train": None,
        "max_eval": None,
    }
    register(name, defaults)(lambda cfg, stats=None: build_images(cfg, stats, task=name))


_register_image_task("scifar", "cifar10", "rgb")
_register_image_task("lra-cifar", "cifar10", "gray")
_register_image_task("fashion-mnist", "fashion-mnist", "gray")


# ------------------------------------------------------------------------- LRA text
# Byte-level text (training/data/lra/lra_text.py): IMDB sentiment (aclImdb folder, L = 4096)
# and AAN citation matching (the LRA new_aan_pairs TSVs, two documents of L = 4000 each,
# the `pair` decoder). Tokens are one-hot rows of 257 (256 bytes + padding): the encoder
# Linear is then an embedding table. Neither corpus can be generated: data.root is required.


def _text_root(d: dict, what: str):
    if d["root"] is None:
        raise ValueError(f"{what} is not available offline: pass --data PATH")
    return d["root"]


def _subset(parts: tuple, idx: np.ndarray) -> tuple:
    """The items ``idx`` of parallel per-example sequences (``TokenSequences``, labels)."""
    return tuple(p[idx] for p in parts)


@register(
    "imdb",
    {"root": None, "max_length": 4096, "val_fraction": 0.0, "max_train": None, "max_eval": None},
)
def build_imdb(cfg: dict, stats=None):
    """IMDB reviews, byte-level, positive / negative. LRA has no validation split and
    validates on the test set (``val_fraction: 0``, as LRA and the S4 code); a fraction > 0
    holds out that part of the train reviews instead."""
    from .data.lra import lra_text as tx

    d, seed = cfg["data"], int(cfg["train"]["seed"])
    data = tx.read_imdb(
        _text_root(d, "IMDB (aclImdb)"),
        int(d["max_length"]),
        val_fraction=float(d["val_fraction"]),
        seed=seed,
    )
    parts = [data[s] for s in ("train", "val", "test")]
    idx = _limit_splits([np.arange(len(p[-1])) for p in parts], d, seed)
    L = int(d["max_length"])
    sets = [tx.TokenDataset(*_subset(p, i), max_length=L) for p, i in zip(parts, idx, strict=True)]
    meta = ModelMeta(
        task="imdb",
        labels=["neg", "pos"],
        d_input=tx.VOCAB_SIZE,
        d_output=2,
        extra={
            "max_length": L,
            "data_root": str(d["root"]),
            "val_split": "train holdout" if d["val_fraction"] else "test",
        },
    )
    return sets[0], sets[1], sets[2], meta.to_dict(), "ce"


@register("aan", {"root": None, "max_length": 4000, "max_train": None, "max_eval": None})
def build_aan(cfg: dict, stats=None):
    """AAN document pairs (label 1: linked by citation), byte-level, ``x (2, L, 257)``; the
    model must use the ``pair`` decoder (LRA's [a, b, a·b, a − b] retrieval head)."""
    from .data.lra import lra_text as tx

    d, seed = cfg["data"], int(cfg["train"]["seed"])
    if cfg["model"].get("decoder") != "pair":
        raise ValueError("aan compares two documents: it needs model.decoder = pair")
    data = tx.read_aan(_text_root(d, "AAN (LRA tsv_data)"), int(d["max_length"]))
    parts = [data[s] for s in ("train", "val", "test")]
    idx = _limit_splits([np.arange(len(p[-1])) for p in parts], d, seed)
    L = int(d["max_length"])
    sets = [
        tx.PairTokenDataset(*_subset(p, i), max_length=L) for p, i in zip(parts, idx, strict=True)
    ]
    meta = ModelMeta(
        task="aan",
        labels=["unrelated", "cited"],
        d_input=tx.VOCAB_SIZE,
        d_output=2,
        extra={"max_length": L, "data_root": str(d["root"])},
    )
    return sets[0], sets[1], sets[2], meta.to_dict(), "ce"


# ------------------------------------------------------------------- pathfinder / path-x
# LRA Pathfinder (32 × 32 → L = 1024) and Path-X (128 × 128 → L = 16384): are the two dots
# connected by a dashed path? (training/data/lra/pathfinder.py). The LRA folder (PNG + metadata)
# at data.root, else a set drawn by our generator, cached by its settings. One pool of
# images split 80 / 10 / 10 (seeded), pixels scaled to [−1, 1] as in the S4 code.


def build_pathfinder(cfg: dict, stats=None, task: str = "pathfinder"):
    from .data.lra import pathfinder as pf
    from .data.lra.images import SequenceImageDataset

    d, seed = cfg["data"], int(cfg["train"]["seed"])
    R = int(d["resolution"])
    root = d["root"]
    if root is None:
        nd = d["n_distractors"]
        root = pf.ensure_pathfinder(
            int(d["n_images"]),
            R,
            seed=int(d["seed"]),
            difficulty=d["difficulty"],
            progress=True,
            n_distractors=None if nd is None else int(nd),
        )
    images, labels = pf.read_dataset(root, d["difficulty"], resolution=R)
    idx = pf.split_indices(len(labels), seed, float(d["val_fraction"]), float(d["test_fraction"]))
    idx = _limit_splits(list(idx), d, seed)
    mean, std = [pf.PIXEL_MEAN], [pf.PIXEL_STD]  # fixed scaling to [−1, 1], as the S4 code
    sets = [SequenceImageDataset(images[i], labels[i], "gray", mean, std) for i in idx]
    meta = ModelMeta(
        task=task,
        labels=["disconnected", "connected"],
        d_input=1,
        d_output=2,
        input_mean=mean,
        input_std=std,
        extra={
            "resolution": R,
            "length": R * R,
            "difficulty": d["difficulty"],
            "data_root": str(root),
        },
    )
    return sets[0], sets[1], sets[2], meta.to_dict(), "ce"


def _register_pathfinder(name: str, resolution: int) -> None:
    defaults = {
        "root": None,
        "resolution": resolution,
        "difficulty": "curv_contour_length_14",
        "n_images": 200000,
        "n_distractors": None,
        "seed": 0,
        "val_fraction": 0.1,
        "test_fraction": 0.1,
        "max_train": None,
        "max_eval": None,
    }
    register(name, defaults)(lambda cfg, stats=None: build_pathfinder(cfg, stats, task=name))


_register_pathfinder("pathfinder", 32)
_register_pathfinder("pathx", 128)
