"""One trainer for every task: AdamW (SSM group), schedules, AMP, checkpoints, exact resume.

    trainer = Trainer(model, train_set, val_set, cfg["optim"], cfg["train"], out_dir,
                      task_meta, loss="ce")            # or "mse", "ce_per_step"
    trainer.resume("runs/x/last.pt")                   # optional
    summary = trainer.fit()
    trainer.evaluate(test_set)

Exact resume: a step is one optimizer update (``grad_accum`` micro-batches). The order of
the training examples in epoch ``e`` is a permutation drawn from a generator seeded by
``(seed, e)`` (:class:`EpochSampler`), so the data position is just ``(epoch, batch)``;
every DataLoader gets its own generator (so iterating one never touches the global torch
RNG); checkpoints are written only at step boundaries and hold the model, optimizer,
schedule, GradScaler, the python / numpy / torch (CPU + CUDA) RNG states, the sampler
state (seed, epoch, position, generator state) and the running epoch sums. A run resumed
from ``last.pt`` therefore makes the same updates, in the same order, from the same
state — the same loss sequence as an uninterrupted run (on the same device and thread
count; with ``num_workers > 0`` resumes at epoch boundaries are exact, and mid-epoch ones
are exact unless the dataset draws random numbers in its workers).

Outputs in ``out_dir``: ``metrics.csv`` (one row per validation), ``steps.csv`` (loss and
lr of every step), ``curves.png``, ``tb/`` (TensorBoard, when installed), ``last.pt`` and
``best.pt`` (atomic; loadable with ``torch.load(weights_only=True)``).

Crash consistency: ``last.pt`` is the run's single source of truth. It records the best
checkpoint so far (its state, or just its metrics when it is ``last.pt``'s own state: see
:func:`~liquid_stream.checkpoint.embedded_best`) and how many rows of ``metrics.csv`` and
``steps.csv`` it covers; rows are appended before the checkpoint that covers them, and
``best.pt`` is written after ``last.pt``. A kill anywhere, then a resume from ``last.pt``,
cuts the logs to exactly those rows (TensorBoard: purges the steps after them), rewrites
``best.pt`` if it is not the recorded best, and continues — the logs and checkpoints then
match an uninterrupted run row for row. A run that does not resume starts its logs afresh.
"""

from __future__ import annotations

import contextlib
import csv
import io
import math
import os
import random
import signal
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, Sampler

from liquid_stream.checkpoint import (
    BEST_KEY,
    CheckpointError,
    atomic_torch_save,
    checkpoint_dict,
    embedded_best,
    load_checkpoint,
)
from liquid_stream.model import make_optimizer

from .distributed import SyncBatchNorm1d, all_reduce_sum, barrier, init_from_env, shard

LOSSES = ("ce", "mse", "ce_per_step")
LOG_FILES = ("metrics.csv", "steps.csv")  # row counts recorded in every checkpoint


class NonFiniteLossError(RuntimeError):
    """Training stopped because the loss became NaN or infinite."""


# Crash-test hook (tests/test_crash_resume.py): LIQUID_STREAM_KILL_AT="POINT:step=N[,...]"
# SIGKILLs this process when it reaches POINT with ``step == N``. POINT is one of
# after_step_row (steps.csv row of step N written), after_epoch_row (metrics.csv row
# written, last.pt not yet), after_last_ckpt (last.pt written, best.pt not yet).
KILL_ENV = "LIQUID_STREAM_KILL_AT"
KILL_POINTS = ("after_step_row", "after_epoch_row", "after_last_ckpt")


def _kill_points(spec: str | None) -> dict[str, set[int]]:
    points: dict[str, set[int]] = {}
    for item in filter(None, (spec or "").replace(" ", "").split(",")):
        name, _, arg = item.partition(":step=")
        if name not in KILL_POINTS or not arg.isdigit():
            raise ValueError(f"{KILL_ENV}: expected POINT:step=N with POINT in {KILL_POINTS}, "
                             f"got {item!r}")  # fmt: skip
        points.setdefault(name, set()).add(int(arg))
    return points


def _cpu_copy(obj):
    """A deep copy with every tensor cloned to the CPU (a snapshot that later in-place
    updates of parameters / optimizer moments cannot change)."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu", copy=True)
    if isinstance(obj, dict):
        return {k: _cpu_copy(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return type(obj)(_cpu_copy(v) for v in obj)
    return obj


def _csv_rows(path: Path) -> list[dict]:
    """The complete rows of a CSV log (a row cut short by a kill is not one)."""
    if not path.is_file():
        return []
    data = path.read_bytes()
    text = data[: data.rfind(b"\n") + 1].decode("utf-8", errors="replace")
    return list(csv.DictReader(io.StringIO(text, newline="")))


def _cut_csv(path: Path, rows: int) -> int:
    """Cut a CSV log to its header and first ``rows`` complete rows (all of them when it
    has fewer) with a single truncate; returns the number of rows kept."""
    if not path.is_file():
        return 0
    data = path.read_bytes()
    lines = data.split(b"\n")[:-1]  # complete lines (the last piece has no newline)
    keep = min(rows + 1, len(lines)) if rows > 0 else 0
    size = sum(len(line) + 1 for line in lines[:keep])
    if size != len(data):
        os.truncate(path, size)
    kept = max(keep - 1, 0)
    if kept < rows:
        print(f"note: {path.name} has {kept} rows, the checkpoint covers {rows}")
    return kept


# ------------------------------------------------------------------ device and seeds


def resolve_device(name: str = "auto") -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("--device cuda was requested but CUDA is not available")
    if name not in ("cpu", "cuda"):
        raise ValueError(f"device must be auto, cpu or cuda, got {name!r}")
    return torch.device(name)


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch (CPU and every CUDA device)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def _mix(seed: int, epoch: int) -> int:
    return (int(seed) * 1_000_003 + int(epoch) * 7919 + 17) % 2**63


def rng_state() -> dict:
    """All global RNG states as tensors / plain python (``weights_only``-loadable)."""
    version, keys, gauss = random.getstate()
    kind, mt, pos, has_gauss, cached = np.random.get_state()
    state = {
        "python": {"version": version, "state": list(keys), "gauss": gauss},
        "numpy": {
            "kind": str(kind),
            "keys": torch.from_numpy(np.asarray(mt, np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        },
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }
    return state


def set_rng_state(state: dict) -> None:
    p = state["python"]
    random.setstate((p["version"], tuple(p["state"]), p["gauss"]))
    n = state["numpy"]
    np.random.set_state(
        (n["kind"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"],
         n["cached_gaussian"])
    )  # fmt: skip
    torch.set_rng_state(state["torch"].cpu())
    if state.get("cuda") and torch.cuda.is_available():
        cuda = state["cuda"][: torch.cuda.device_count()]
        torch.cuda.set_rng_state_all([s.cpu() for s in cuda])


class EpochSampler(Sampler):
    """A fresh permutation per epoch from a generator seeded by ``(seed, epoch)``,
    starting at ``start`` (the position inside the epoch, for mid-epoch resume).

    With ``world > 1`` (data parallel) every rank draws the same permutation, cut into
    global batches of ``batch_size × world`` examples, and yields its contiguous share of
    each (:func:`~liquid_stream.training.distributed.shard`); a last global batch with fewer
    examples than ranks is dropped. ``start`` counts examples of the whole permutation, so
    the state does not depend on the rank or the world size."""

    def __init__(self, n: int, seed: int, shuffle: bool = True, rank: int = 0, world: int = 1,
                 batch_size: int = 1):  # fmt: skip
        self.n, self.seed, self.shuffle = n, seed, shuffle
        self.rank, self.world, self.batch_size = rank, world, batch_size
        self.epoch, self.start = 0, 0
        self.generator = torch.Generator()

    def global_batches(self) -> list[tuple[int, int]]:
        """[start, stop) of the global batches left in this epoch."""
        G = self.batch_size * self.world
        out = [(s, min(s + G, self.n)) for s in range(self.start, self.n, G)]
        return [(a, b) for a, b in out if b - a >= self.world]

    def _ranges(self) -> list[tuple[int, int]]:
        """This rank's [lo, hi) ranges of the epoch's permutation, from ``start``."""
        if self.world == 1:
            return [(self.start, self.n)]
        return [shard(a, b, self.rank, self.world) for a, b in self.global_batches()]

    def set_epoch(self, epoch: int, start: int = 0) -> None:
        self.epoch, self.start = epoch, start

    def __iter__(self):
        if self.shuffle:
            self.generator.manual_seed(_mix(self.seed, self.epoch))
            order = torch.randperm(self.n, generator=self.generator).tolist()
        else:
            order = list(range(self.n))
        return iter([i for lo, hi in self._ranges() for i in order[lo:hi]])

    def __len__(self) -> int:
        return sum(hi - lo for lo, hi in self._ranges())

    def state_dict(self) -> dict:
        return {
            "seed": self.seed,
            "epoch": self.epoch,
            "start": self.start,
            "shuffle": self.shuffle,
            "generator": self.generator.get_state(),
        }

    def load_state_dict(self, state: dict) -> None:
        self.seed, self.epoch, self.start = state["seed"], state["epoch"], state["start"]
        self.shuffle = state["shuffle"]
        self.generator.set_state(state["generator"])


class Schedule:
    """Learning-rate factor per optimizer step.

    ``cosine``: linear warmup over ``warmup_steps`` then cosine to ``min_lr_ratio`` at
    ``total_steps`` (= epochs × steps per epoch; ``max_steps`` does not change it).
    ``multistep``: ×``gamma`` at every epoch in ``milestones`` (applied per epoch).
    """

    def __init__(self, optim_cfg: dict, steps_per_epoch: int):
        self.kind = optim_cfg["schedule"]
        self.warmup = int(optim_cfg["warmup_steps"])
        self.total = int(optim_cfg["epochs"]) * steps_per_epoch
        self.milestones = sorted(int(m) for m in optim_cfg["milestones"])
        self.gamma = float(optim_cfg["gamma"])
        self.min_ratio = float(optim_cfg.get("min_lr_ratio", 0.0))
        self.last_factor = 1.0

    def factor(self, step: int, epoch: int) -> float:
        if self.kind == "multistep":
            return self.gamma ** sum(1 for m in self.milestones if epoch >= m)
        if step < self.warmup:
            return (step + 1) / self.warmup
        progress = min(1.0, (step - self.warmup) / max(1, self.total - self.warmup))
        return self.min_ratio + (1 - self.min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))

    def apply(self, optimizer, base_lrs, step: int, epoch: int) -> float:
        self.last_factor = self.factor(step, epoch)
        for group, lr in zip(optimizer.param_groups, base_lrs, strict=True):
            group["lr"] = lr * self.last_factor
        return self.last_factor

    def state_dict(self) -> dict:
        return {
            "kind": self.kind, "warmup": self.warmup, "total": self.total,
            "milestones": list(self.milestones), "gamma": self.gamma,
            "min_ratio": self.min_ratio, "last_factor": self.last_factor,
        }  # fmt: skip

    def load_state_dict(self, state: dict) -> None:
        self.kind, self.warmup, self.total = state["kind"], state["warmup"], state["total"]
        self.milestones, self.gamma = list(state["milestones"]), state["gamma"]
        self.min_ratio, self.last_factor = state["min_ratio"], state["last_factor"]


# ------------------------------------------------------------------------ loss / metrics


def _sums_zero() -> dict:
    return {"n": 0.0, "loss": 0.0, "correct": 0.0, "count": 0.0, "se": 0.0, "ae": 0.0}


def compute_loss(
    out: torch.Tensor,
    y: torch.Tensor,
    kind: str,
    scale: torch.Tensor | None = None,
    class_weight: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict]:
    """Mean loss and the (detached) sums for the epoch metrics.

    ``mse``: per-step outputs ``(B, L, d)`` (a ``window`` decoder) are scored at the last
    step; ``scale`` (the model's ``output_scale``, the targets' std) makes the loss
    ``mean(((out − y) / scale)²)`` while RMSE / MAE stay in the targets' physical units.
    ``ce`` / ``ce_per_step``: ``class_weight`` (C,) weights the cross-entropy per class
    (e.g. a small weight on the ``_silence_`` steps that dominate streaming labels).
    """
    out = out.float()
    if kind in ("ce", "ce_per_step"):
        if kind == "ce_per_step" and out.dim() != 3:
            raise ValueError(
                f"ce_per_step needs per-step logits (B, L, C) (a window/last decoder with "
                f"forward_steps), got {tuple(out.shape)}"
            )
        logits, target = out.reshape(-1, out.shape[-1]), y.reshape(-1).long()
        w = None if class_weight is None else class_weight.float().to(logits.device)
        loss = F.cross_entropy(logits, target, weight=w)
        with torch.no_grad():
            correct = (logits.argmax(-1) == target).sum().item()
        count = target.numel()
        sums = {"correct": float(correct), "count": float(count), "se": 0.0, "ae": 0.0}
    elif kind == "mse":
        if out.dim() == 3:
            out = out[:, -1]
        target = y.float().reshape(out.shape)
        unit = 1.0 if scale is None else scale.float().to(out.device)
        loss = F.mse_loss(out / unit, target / unit)
        with torch.no_grad():
            d = out - target
            sums = {"correct": 0.0, "count": float(d.numel()),
                    "se": d.pow(2).sum().item(), "ae": d.abs().sum().item()}  # fmt: skip
    else:
        raise ValueError(f"loss must be one of {LOSSES}, got {kind!r}")
    n = float(y.shape[0])
    return loss, {"n": n, "loss": loss.item() * n, **sums}


def summarize(sums: dict, kind: str) -> dict:
    """Epoch metrics from accumulated sums: loss + accuracy, or loss + RMSE / MAE."""
    out = {"loss": sums["loss"] / max(sums["n"], 1.0)}
    if kind == "mse":
        out["rmse"] = math.sqrt(sums["se"] / max(sums["count"], 1.0))
        out["mae"] = sums["ae"] / max(sums["count"], 1.0)
    else:
        out["acc"] = sums["correct"] / max(sums["count"], 1.0)
    return out


def forward_for_loss(model, x: torch.Tensor, kind: str, rate: float = 1.0) -> torch.Tensor:
    """``model(x)``; per-step outputs (``forward_steps``) for ``ce_per_step`` with a
    ``pool``/``last`` decoder."""
    inner = getattr(model, "module", model)  # DistributedDataParallel wraps the model
    if kind == "ce_per_step" and getattr(inner, "decoder", "window") != "window":
        return model(x, rate=rate, steps=True)
    return model(x, rate=rate)


def evaluate_model(
    model: torch.nn.Module,
    dataset: Dataset,
    loss: str,
    device: torch.device | str = "cpu",
    batch_size: int = 32,
    rate: float = 1.0,
    n_classes: int | None = None,
    num_workers: int = 0,
    autocast: contextlib.AbstractContextManager | None = None,
    progress: bool = False,
    class_weight: torch.Tensor | None = None,
) -> dict:
    """Loss and accuracy (with a confusion matrix when ``n_classes`` is given) or
    RMSE / MAE of ``model`` on ``dataset``; restores the model's train/eval mode."""
    device = torch.device(device)
    loader = DataLoader(
        dataset, batch_size=batch_size, shuffle=False, num_workers=num_workers,
        generator=torch.Generator().manual_seed(0), pin_memory=device.type == "cuda",
    )  # fmt: skip
    was_training = model.training
    model.eval()
    sums = _sums_zero()
    confusion = np.zeros((n_classes, n_classes), np.int64) if n_classes else None
    try:
        from tqdm import tqdm

        it = tqdm(loader, desc="eval", leave=False, disable=None if progress else True)
    except ImportError:  # pragma: no cover
        it = loader
    with torch.no_grad():
        for x, y in it:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            with autocast or contextlib.nullcontext():
                out = forward_for_loss(model, x, loss, rate)
            _, s = compute_loss(out, y, loss, getattr(model, "output_scale", None), class_weight)
            for k in sums:
                sums[k] += s[k]
            if confusion is not None:
                pred = out.float().argmax(-1).reshape(-1).cpu().numpy()
                true = y.reshape(-1).long().cpu().numpy()
                confusion += np.bincount(
                    true * n_classes + pred, minlength=n_classes * n_classes
                ).reshape(n_classes, n_classes)
    model.train(was_training)
    result = summarize(sums, loss)
    if confusion is not None:
        result["confusion"] = confusion
        totals = confusion.sum(1)
        result["per_class_acc"] = [
            float(confusion[i, i] / totals[i]) if totals[i] else float("nan")
            for i in range(n_classes)
        ]
        present = [a for a, t in zip(result["per_class_acc"], totals, strict=True) if t]
        result["bacc"] = float(np.mean(present)) if present else float("nan")
    return result


# ------------------------------------------------------------------------------ trainer


def _set_dataset_epoch(ds, epoch: int) -> None:
    """Call ``set_epoch`` on the dataset (through Subset / ConcatDataset wrappers), so
    datasets that augment draw their randomness from (seed, epoch, index): resumable."""
    if hasattr(ds, "set_epoch"):
        ds.set_epoch(epoch)
    if hasattr(ds, "dataset"):
        _set_dataset_epoch(ds.dataset, epoch)
    for sub in getattr(ds, "datasets", ()):
        _set_dataset_epoch(sub, epoch)


class Trainer:
    """Trains ``model`` on ``train_set``; see the module docstring."""

    def __init__(
        self,
        model: torch.nn.Module,
        train_set: Dataset,
        val_set: Dataset | None,
        optim_cfg: dict,
        train_cfg: dict,
        out_dir,
        task_meta: dict,
        loss: str = "ce",
        config: dict | None = None,
    ):
        if loss not in LOSSES:
            raise ValueError(f"loss must be one of {LOSSES}, got {loss!r}")
        self.optim_cfg, self.train_cfg = dict(optim_cfg), dict(train_cfg)
        self.out = Path(out_dir)
        self.out.mkdir(parents=True, exist_ok=True)
        self.meta, self.loss_kind, self.config = dict(task_meta), loss, config or {}
        self.device = resolve_device(self.train_cfg.get("device", "auto"))
        self.dist = init_from_env(self.device.type)
        if self.device.type == "cuda" and self.dist.enabled:
            self.device = torch.device("cuda", self.dist.local_rank)
        if self.device.type == "cpu" and self.train_cfg.get("threads"):
            torch.set_num_threads(int(self.train_cfg["threads"]))
        if self.train_cfg.get("checkpoint_blocks"):
            model.checkpoint_blocks = True  # activation memory of one block (long L)
        if self.dist.enabled:
            model = SyncBatchNorm1d.convert(model)
        self.model = model.to(self.device)
        self.train_model = self.model  # what the training forward runs (DDP when parallel)
        if self.dist.enabled:
            from torch.nn.parallel import DistributedDataParallel

            ids = [self.dist.local_rank] if self.device.type == "cuda" else None
            self.train_model = DistributedDataParallel(self.model, device_ids=ids)
        self.train_set, self.val_set = train_set, val_set
        o = self.optim_cfg
        self.optimizer = make_optimizer(
            model, lr=o["lr"], weight_decay=o["weight_decay"], ssm_lr=o["ssm_lr"],
            ssm_weight_decay=o["ssm_weight_decay"],
        )  # fmt: skip
        self.base_lrs = [g["lr"] for g in self.optimizer.param_groups]
        self.batch_size, self.accum = int(o["batch_size"]), int(o["grad_accum"])
        self.eval_batch_size = int(o.get("eval_batch_size") or self.batch_size)
        self.seed = int(self.train_cfg.get("seed", 0))
        W = self.dist.world_size
        self.global_batch = self.batch_size * W  # examples per micro-batch, all ranks
        self.sampler = EpochSampler(len(train_set), self.seed, rank=self.dist.rank, world=W,
                                    batch_size=self.batch_size)  # fmt: skip
        self.batches_per_epoch = len(self.sampler.global_batches())  # whole epoch: start 0
        self.steps_per_epoch = math.ceil(self.batches_per_epoch / self.accum)
        self.schedule = Schedule(o, self.steps_per_epoch)
        amp = bool(self.train_cfg.get("amp")) and self.device.type == "cuda"
        self.amp_dtype = None
        if amp:
            want = self.train_cfg.get("amp_dtype", "bf16")
            bf16_ok = torch.cuda.is_bf16_supported()
            self.amp_dtype = torch.bfloat16 if want == "bf16" and bf16_ok else torch.float16
        self.scaler = (
            torch.amp.GradScaler("cuda") if self.amp_dtype == torch.float16 else None
        )
        self.epoch, self.batch_in_epoch, self.step = 0, 0, 0
        self.best: float | None = None
        self.best_epoch: float | None = None
        self.best_step: int | None = None
        # the best checkpoint's {"model", "trainer", "metrics"} (CPU copies), embedded in
        # last.pt; the step of the best.pt known to be on disk
        self._best: dict | None = None
        self._best_on_disk: int | None = None
        self._log_rows = dict.fromkeys(LOG_FILES, 0)  # rows in metrics.csv / steps.csv
        self._logs_ready = False  # started afresh or cut to the resumed checkpoint
        self._tb_purge: int | None = None  # TensorBoard purge_step (resume / fresh start)
        self.epoch_sums = _sums_zero()
        self.step_losses: list[float] = []  # losses of the steps run by this process
        self.max_steps = self.train_cfg.get("max_steps")
        self.eval_every = max(1, int(self.train_cfg.get("eval_every") or 1))
        self.save_every = int(self.train_cfg.get("save_every_steps") or 0)
        self.progress = bool(self.train_cfg.get("progress", True)) and self.dist.is_main
        self._seed_rank()
        self.higher_is_better = loss != "mse"
        # per-step labels are mostly the no-event class: monitor the balanced accuracy
        # (mean per-class recall), which a model answering "silence" everywhere cannot game
        self.monitor = {"mse": "val_rmse", "ce_per_step": "val_bacc"}.get(loss, "val_acc")
        weights = self.meta.get("class_weights")
        self.class_weight = (
            None if weights is None else torch.tensor(weights, dtype=torch.float32)
        )
        self._writer = None
        self._tb_checked = False
        self._last_plot: float | None = None
        self._t0 = time.perf_counter()
        self._elapsed0 = 0.0
        self.last_metrics: dict = {}
        self._kill_at = _kill_points(os.environ.get(KILL_ENV))

    def _crash_point(self, name: str) -> None:
        """The crash-test hook (``KILL_ENV``): a real SIGKILL of this process, here."""
        if self.step in self._kill_at.get(name, ()):
            os.kill(os.getpid(), signal.SIGKILL)

    # -------------------------------------------------------------------- helpers
    def autocast(self):
        if self.amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast("cuda", dtype=self.amp_dtype)

    def _loader(self) -> DataLoader:
        nw = int(self.train_cfg.get("num_workers") or 0)
        return DataLoader(
            self.train_set, batch_size=self.batch_size, sampler=self.sampler, num_workers=nw,
            generator=torch.Generator().manual_seed(_mix(self.seed + 1, self.epoch)),
            pin_memory=self.device.type == "cuda", drop_last=False,
            persistent_workers=False,
        )  # fmt: skip

    @property
    def elapsed(self) -> float:
        return self._elapsed0 + time.perf_counter() - self._t0

    def evaluate(self, dataset: Dataset, rate: float = 1.0, confusion: bool = False) -> dict:
        """Metrics of the model on ``dataset``: scalars only, unless ``confusion`` (then
        also the confusion matrix and per-class accuracies). Per-step tasks always get
        the balanced accuracy ``bacc``."""
        per_class = confusion or self.loss_kind == "ce_per_step"
        n_classes = int(self.meta.get("d_output", 0)) if per_class else None
        res = evaluate_model(
            self.model, dataset, self.loss_kind, self.device, self.eval_batch_size, rate,
            n_classes=n_classes if self.loss_kind != "mse" else None,
            num_workers=int(self.train_cfg.get("num_workers") or 0),
            autocast=self.autocast(), progress=self.progress, class_weight=self.class_weight,
        )  # fmt: skip
        if not confusion:
            res = {k: v for k, v in res.items() if k not in ("confusion", "per_class_acc")}
        return res

    # ----------------------------------------------------------------- checkpoints
    def trainer_state(self) -> dict:
        return {
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.schedule.state_dict(),
            "scaler": self.scaler.state_dict() if self.scaler is not None else None,
            "rng": rng_state(),
            # the data position itself (not where this process's loader started), so that
            # a resumed run's checkpoints equal an uninterrupted run's
            "sampler": {**self.sampler.state_dict(), "epoch": self.epoch,
                        "start": self.batch_in_epoch * self.global_batch},  # fmt: skip
            "epoch": self.epoch,
            "batch_in_epoch": self.batch_in_epoch,
            "step": self.step,
            "best": self.best,
            "best_epoch": self.best_epoch,
            "best_step": self.best_step,
            "logs": dict(self._log_rows),
            "monitor": self.monitor,
            "epoch_sums": dict(self.epoch_sums),
            "elapsed_s": self.elapsed,
            "loss": self.loss_kind,
            "batch_size": self.batch_size,
            "world_size": self.dist.world_size,
            "grad_accum": self.accum,
        }

    def _checkpoint(self, metrics: dict | None = None) -> dict:
        clean = {k: float(v) for k, v in (metrics or {}).items() if isinstance(v, int | float)}
        return checkpoint_dict(
            self.model, meta=self.meta, config=self.config, trainer=self.trainer_state(),
            metrics=clean,
        )  # fmt: skip

    def save(self, name: str, metrics: dict | None = None) -> Path:
        """Write the current state to ``out/name`` (atomic). ``last.pt`` also records the
        best checkpoint so far (``BEST_KEY``), so that it alone says what best.pt holds."""
        path = self.out / name
        if not self.dist.is_main:
            return path
        obj = self._checkpoint(metrics)
        if name == "last.pt" and self._best is not None:
            own = self.best_step == self.step  # the best is this very state: no second copy
            obj[BEST_KEY] = {"metrics": self._best["metrics"]} if own else self._best
        atomic_torch_save(obj, path)
        return path

    def _write_best(self) -> None:
        """best.pt from the recorded best (what embedded_best rebuilds from last.pt)."""
        obj = {k: v for k, v in checkpoint_dict(self.model, self.meta, config=self.config).items()
               if k != "model"}  # fmt: skip
        atomic_torch_save({**obj, **self._best}, self.out / "best.pt")
        self._best_on_disk = self.best_step

    def _sync_best(self, best: dict | None, none_yet: bool, source) -> None:
        """On resume: make best.pt the best that the checkpoint records (a kill between
        last.pt and best.pt left the older one)."""
        path = self.out / "best.pt"
        if best is None:
            if none_yet and path.is_file():  # no validation yet: not this run's best.pt
                path.unlink()
                print(f"note: removed {path}: {source} records no best model yet")
            return
        try:
            disk = load_checkpoint(path)
            theirs, ours = disk["model"], best["model"]
            same = (
                disk["trainer"]["step"] == self.best_step
                and theirs.keys() == ours.keys()
                and all(torch.equal(v, theirs[k]) for k, v in ours.items())
            )
        except (CheckpointError, KeyError, TypeError):
            same = False
        if not same:
            atomic_torch_save(best, path)
            print(f"note: rewrote {path} from {source}: the best model is step "
                  f"{self.best_step} (epoch {self.best_epoch})")  # fmt: skip
        self._best_on_disk = self.best_step

    def resume(self, path) -> None:
        """Restore everything from a checkpoint written by :meth:`save` (exact resume)."""
        ckpt = load_checkpoint(path)
        st = ckpt.get("trainer")
        if not isinstance(st, dict):
            raise CheckpointError(f"{path} has no trainer state (not written by the trainer)")
        saved_global = st.get("batch_size", 0) * st.get("world_size", 1)
        if (saved_global, st.get("grad_accum")) != (self.global_batch, self.accum):
            raise CheckpointError(
                f"{path} was trained with batch_size={st.get('batch_size')} per rank × "
                f"{st.get('world_size', 1)} rank(s), grad_accum={st.get('grad_accum')}; this "
                f"run has {self.batch_size} × {self.dist.world_size}, {self.accum}: the "
                f"global batch and the data position would not match"
            )
        try:
            self.model.load_state_dict(ckpt["model"])
            self.optimizer.load_state_dict(st["optimizer"])
        except (RuntimeError, ValueError, KeyError) as e:
            raise CheckpointError(f"{path} does not match this model / optimizer: {e}") from e
        self.schedule.load_state_dict(st["scheduler"])
        if self.scaler is not None and st.get("scaler"):
            self.scaler.load_state_dict(st["scaler"])
        self.sampler.load_state_dict(st["sampler"])
        self.epoch, self.batch_in_epoch, self.step = st["epoch"], st["batch_in_epoch"], st["step"]
        self.best, self.best_epoch = st["best"], st["best_epoch"]
        self.best_step = st.get("best_step")  # None: no validation yet, or an older file
        best = embedded_best(ckpt)
        self._best = None if best is None else _cpu_copy(
            {"model": best["model"], "trainer": best["trainer"],
             "metrics": best.get("metrics", {})})  # fmt: skip
        self.epoch_sums = dict(st["epoch_sums"])
        self._elapsed0, self._t0 = float(st.get("elapsed_s", 0.0)), time.perf_counter()
        set_rng_state(st["rng"])
        self._seed_rank()
        if self.dist.is_main:
            self._sync_logs(st.get("logs"))
            none_yet = "best_step" in st and st["best_step"] is None  # (absent: older file)
            self._sync_best(best, none_yet, path)
        self._logs_ready = True

    def _seed_rank(self) -> None:
        """Ranks > 0 draw their own random numbers (dropout…), seeded by (seed, step, rank);
        the parameters are rank 0's anyway (DDP broadcasts them)."""
        if self.dist.rank > 0:
            torch.manual_seed(_mix(self.seed + self.step, 1_000_003 + self.dist.rank))

    # --------------------------------------------------------------------- logging
    def _sync_logs(self, rows: dict | None) -> None:
        """Cut metrics.csv / steps.csv to the rows the resumed checkpoint covers (rows
        written after it — an epoch row whose last.pt was never written — are redone);
        TensorBoard purges every step after the last kept validation row."""
        for name in LOG_FILES:
            path = self.out / name
            if rows is None:  # a checkpoint without row counts: the rows up to its step
                n = 0
                for r in _csv_rows(path):
                    if not str(r.get("step", "")).isdigit() or int(r["step"]) > self.step:
                        break
                    n += 1
            else:
                n = int(rows.get(name, 0))
            self._log_rows[name] = _cut_csv(path, n)
        kept = _csv_rows(self.out / "metrics.csv")
        self._tb_purge = int(kept[-1]["step"]) + 1 if kept else 0

    def _start_logs(self) -> None:
        """A run that did not resume starts its logs afresh (rows already in ``out_dir``
        belong to a killed or older run)."""
        if self._logs_ready:
            return
        self._logs_ready = True
        if not self.dist.is_main:
            return
        for name in LOG_FILES:
            self._log_rows[name] = _cut_csv(self.out / name, 0)
        tb = self.out / "tb"
        self._tb_purge = 0 if tb.is_dir() and any(tb.iterdir()) else None

    def _append_csv(self, name: str, row: dict) -> None:
        if not self.dist.is_main:
            return
        path = self.out / name
        new = not path.is_file() or path.stat().st_size == 0
        with open(path, "a", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(row))
            if new:
                w.writeheader()
            w.writerow(row)
        self._log_rows[name] = self._log_rows.get(name, 0) + 1

    def _tb(self):
        if not self._tb_checked:
            self._tb_checked = True
            try:
                from torch.utils.tensorboard import SummaryWriter

                self._writer = SummaryWriter(str(self.out / "tb"), purge_step=self._tb_purge)
            except ImportError:
                print("note: tensorboard is not installed; skipping TensorBoard logs "
                      "(metrics.csv and curves.png are still written)")  # fmt: skip
        return self._writer

    def _log_epoch(self, row: dict) -> None:
        self._append_csv("metrics.csv", row)
        writer = self._tb()
        if writer is not None:
            for k, v in row.items():
                if k not in ("epoch", "step") and isinstance(v, float) and math.isfinite(v):
                    writer.add_scalar(k, v, row["step"])
            writer.flush()

    def _plot(self, force: bool) -> None:
        """Redraw curves.png (at most every ``plot_every_s`` seconds, and at the end)."""
        if not self.dist.is_main:
            return
        every = float(self.train_cfg.get("plot_every_s", 30.0) or 0.0)
        now = time.perf_counter()
        if not force and self._last_plot is not None and now - self._last_plot < every:
            return
        if not (self.out / "metrics.csv").is_file():
            return
        self._last_plot = now
        try:
            plot_curves(self.out / "metrics.csv", self.out / "curves.png", self.loss_kind)
        except Exception as e:  # noqa: BLE001 - a plot must never stop training
            print(f"note: could not draw curves.png: {e}")

    # ------------------------------------------------------------------------ train
    def _nonfinite(self, what: str, batch: int) -> NonFiniteLossError:
        last = self.out / "last.pt"
        kept = f"the last good checkpoint is {last}" if last.is_file() else "no checkpoint yet"
        return NonFiniteLossError(
            f"non-finite {what} at step {self.step + 1} (epoch {self.epoch + 1}, "
            f"batch {batch + 1}): training stopped early; {kept}. Try a lower optim.lr, "
            f"optim.grad_clip, or train.amp=false."
        )

    def _optimizer_step(self) -> None:
        self.schedule.apply(self.optimizer, self.base_lrs, self.step, self.epoch)
        clip = float(self.optim_cfg.get("grad_clip") or 0.0)
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        if clip > 0:  # after DDP's all-reduce: the same global gradient on every rank
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip)
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1

    def fit(self) -> dict:
        """Train until ``epochs`` (or ``max_steps``); returns the final summary.

        Raises :class:`NonFiniteLossError` on a NaN/inf loss (``last.pt`` keeps the last
        good state)."""
        epochs = int(self.optim_cfg["epochs"])
        stopped = self.max_steps is not None and self.step >= self.max_steps
        self._start_logs()
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        try:
            from tqdm import tqdm
        except ImportError:  # pragma: no cover
            tqdm = None
        while self.epoch < epochs and not stopped:
            self.sampler.set_epoch(self.epoch, self.batch_in_epoch * self.global_batch)
            _set_dataset_epoch(self.train_set, self.epoch)
            loader = self._loader()
            bar = None
            if tqdm is not None:
                bar = tqdm(
                    total=self.batches_per_epoch, initial=self.batch_in_epoch, ncols=100,
                    desc=f"epoch {self.epoch + 1}/{epochs}", leave=False,
                    disable=None if self.progress else True,
                )  # fmt: skip
            group_losses: list[float] = []
            for x, y in loader:
                b = self.batch_in_epoch
                g0 = (b // self.accum) * self.accum
                group = min(self.accum, self.batches_per_epoch - g0)
                x = x.to(self.device, non_blocking=True)
                y = y.to(self.device, non_blocking=True)
                bad, sums = None, _sums_zero()
                try:
                    with self.autocast():
                        out = forward_for_loss(self.train_model, x, self.loss_kind)
                    loss, sums = compute_loss(
                        out, y, self.loss_kind, getattr(self.model, "output_scale", None),
                        self.class_weight,
                    )
                    value = loss.item()
                    if not math.isfinite(value):
                        bad = f"loss ({value})"
                except ValueError as e:  # the layers refuse NaN/inf activations
                    if "NaN or infinite" not in str(e):
                        raise
                    bad = f"activations ({e}; loss nan)"
                # Every rank learns whether any rank failed (before DDP's backward, which
                # would wait forever for a rank that stopped) and gets the global sums.
                keys = list(sums)
                total = all_reduce_sum([float(bad is not None), *(sums[k] for k in keys)],
                                       self.device)  # fmt: skip
                if total[0] and bad is None:
                    bad = "loss on another rank (non-finite)"
                if bad is not None:
                    if bar is not None:
                        bar.close()
                    raise self._nonfinite(bad, b)
                glob = dict(zip(keys, total[1:], strict=True))
                # Each rank's mean loss weighs n_rank / n_global of the global batch's mean
                # (DDP averages over ranks, hence the factor world_size).
                share = sums["n"] * self.dist.world_size / glob["n"]
                scaled = loss * share / group
                if self.scaler is not None:
                    scaled = self.scaler.scale(scaled)
                scaled.backward()
                for k in self.epoch_sums:
                    self.epoch_sums[k] += glob[k]
                value = glob["loss"] / glob["n"]
                group_losses.append(value)
                self.batch_in_epoch += 1
                if bar is not None:
                    bar.update(1)
                if self.batch_in_epoch - g0 < group:
                    continue
                self._optimizer_step()
                step_loss = sum(group_losses) / len(group_losses)
                group_losses = []
                self.step_losses.append(step_loss)
                self._append_csv("steps.csv", {
                    "step": self.step, "epoch": self.epoch + 1,
                    "loss": step_loss, "lr": self.optimizer.param_groups[0]["lr"],
                })  # fmt: skip
                self._crash_point("after_step_row")
                if bar is not None:
                    bar.set_postfix(loss=f"{step_loss:.4f}", step=self.step)
                if self.max_steps is not None and self.step >= self.max_steps:
                    stopped = True
                    break
                if self.save_every and self.step % self.save_every == 0:
                    self.save("last.pt")
            if bar is not None:
                bar.close()
            finished = self.batch_in_epoch >= self.batches_per_epoch
            epoch_pos = self.epoch + self.batch_in_epoch / self.batches_per_epoch
            train_metrics = summarize(self.epoch_sums, self.loss_kind)
            if finished:
                self.epoch += 1
                self.batch_in_epoch = 0
                self.epoch_sums = _sums_zero()
            if finished and (self.epoch % self.eval_every == 0 or self.epoch == epochs) or stopped:
                self._end_of_period(epoch_pos, train_metrics)
            elif finished:
                self.save("last.pt")
        if self.dist.is_main and self._best is not None and self._best_on_disk != self.best_step:
            self._write_best()
        self._plot(force=True)
        if self._writer is not None:
            self._writer.close()
        return {
            **self.last_metrics,
            "epoch": self.epoch, "step": self.step, "stopped_by_max_steps": stopped,
            "best": self.best, "best_epoch": self.best_epoch, "monitor": self.monitor,
            "elapsed_s": round(self.elapsed, 2),
        }  # fmt: skip

    def _end_of_period(self, epoch_pos: float, train_metrics: dict) -> None:
        if not self.dist.is_main:  # validation, logs and checkpoints are rank 0's
            barrier()
            return
        val = self.evaluate(self.val_set) if self.val_set is not None else {}
        row: dict = {"epoch": round(epoch_pos, 4), "step": self.step,
                     "lr": float(self.optimizer.param_groups[0]["lr"])}  # fmt: skip
        row.update({f"train_{k}": float(v) for k, v in train_metrics.items()})
        row.update({f"val_{k}": float(v) for k, v in val.items()})
        row["time_s"] = round(self.elapsed, 2)
        key = self.monitor if self.monitor in row else "train_loss"
        score = row[key]
        better = (
            self.best is None
            or (score > self.best if self.higher_is_better and key != "train_loss"
                else score < self.best)
        )  # fmt: skip
        if better:
            self.best, self.best_epoch, self.best_step = float(score), float(epoch_pos), self.step
        self.last_metrics = row
        # Crash-consistent order: the row (last.pt counts it), last.pt (the truth: state,
        # best record, rows), then best.pt (rebuilt from last.pt on resume if a kill
        # intervenes); a row whose last.pt was never written is cut and redone on resume.
        self._log_epoch(row)
        self._crash_point("after_epoch_row")
        if better:
            state = self._checkpoint(row)
            self._best = _cpu_copy({k: state[k] for k in ("model", "trainer", "metrics")})
        self.save("last.pt", row)
        self._crash_point("after_last_ckpt")
        if better:
            self._write_best()
        self._plot(force=False)
        barrier()


# ------------------------------------------------------------------------------ plots


def plot_curves(metrics_csv, png, loss_kind: str = "ce") -> None:
    """Loss (train/val) and accuracy or RMSE against epoch, from ``metrics.csv``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with open(metrics_csv, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        return
    ep = [float(r["epoch"]) for r in rows]

    def col(name):
        return [float(r[name]) if r.get(name) not in (None, "") else np.nan for r in rows]

    metric = "rmse" if loss_kind == "mse" else "acc"
    fig, ax = plt.subplots(1, 2, figsize=(10, 3.6))
    for split in ("train", "val"):
        if f"{split}_loss" in rows[0]:
            ax[0].plot(ep, col(f"{split}_loss"), "o-", ms=3, label=split)
        if f"{split}_{metric}" in rows[0]:
            ax[1].plot(ep, col(f"{split}_{metric}"), "o-", ms=3, label=split)
    ax[0].set(xlabel="epoch", ylabel="loss", title="loss")
    ax[1].set(xlabel="epoch", ylabel=metric, title=metric)
    for a in ax:
        a.grid(alpha=0.3)
        a.legend()
    fig.tight_layout()
    tmp = Path(png).with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=100)
    plt.close(fig)
    tmp.replace(png)
