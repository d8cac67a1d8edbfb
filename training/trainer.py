"""One trainer for every task: AdamW (SSM group), schedules, AMP, checkpoints, exact resume.

    trainer = Trainer(model, train_set, val_set, OptimConfig(**cfg["optim"]),
                      TrainConfig(**cfg["train"]), out_dir, task_meta,
                      loss="ce", config=cfg)          # or "mse", "ce_per_step"
    trainer.resume("runs/x/last.pt")                   # optional
    summary = trainer.fit()
    trainer.evaluate(test_set)

Exact resume: a step is one optimizer update (``grad_accum`` micro-batches). The order of
the training examples in epoch ``e`` is a permutation drawn from a generator seeded by
``(seed, e)`` (:class:`~.sampler.EpochSampler`), so the data position is just ``(epoch, batch)``;
every DataLoader gets its own generator (so iterating one never touches the global torch
RNG); checkpoints are written only at step boundaries and hold the model, optimizer,
schedule, GradScaler, the python / numpy / torch (CPU + CUDA) RNG states, the sampler
state (seed, epoch, position, generator state) and the running epoch sums. A run resumed
from ``last.pt`` therefore makes the same updates, in the same order, from the same
state — the same loss sequence as an uninterrupted run (on the same device and thread
count; with ``num_workers > 0`` resumes at epoch boundaries are exact, and mid-epoch ones
are exact unless the dataset draws random numbers in its workers).

Outputs in ``out_dir``: the logs (:mod:`.runlog`: ``metrics.csv``, ``steps.csv``,
``curves.png``, ``tb/``), ``last.pt`` and ``best.pt`` (atomic; loadable with
``torch.load(weights_only=True)``).

Crash consistency: ``last.pt`` is the run's single source of truth. It records the best
checkpoint so far (its state, or just its metrics when it is ``last.pt``'s own state: see
:func:`~liquid_stream.nn.checkpoint.embedded_best`) and how many rows of ``metrics.csv`` and
``steps.csv`` it covers; rows are appended before the checkpoint that covers them, and
``best.pt`` is written after ``last.pt``. A kill anywhere, then a resume from ``last.pt``,
cuts the logs to exactly those rows (TensorBoard: purges the steps after them), rewrites
``best.pt`` if it is not the recorded best, and continues — the logs and checkpoints then
match an uninterrupted run row for row. A run that does not resume starts its logs afresh.

Weight averaging (``optim.ema`` = d > 0): after optimizer step t (1, 2, …) every floating
entry w of the model's state becomes part of an exponential moving average

    w̄_t = d_t · w̄_{t-1} + (1 − d_t) · w_t,   d_t = min(d, (1 + t) / (10 + t)),   w̄_0 = w_0

(the ramp keeps the first steps from being dominated by the initial weights; integer
buffers are copied). Validation, ``best.pt`` and so the test and every export use w̄;
``last.pt`` holds the raw weights (its ``model``) and w̄ (``trainer["ema"]``), so a resume
is exact, and always embeds its best checkpoint in full (w̄ is not its own ``model``).
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import time
import warnings
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Dataset
from tqdm import tqdm

from liquid_stream.nn.checkpoint import (
    BEST_KEY,
    CheckpointError,
    atomic_torch_save,
    checkpoint_dict,
    embedded_best,
    load_checkpoint,
)
from liquid_stream.nn.model import make_optimizer

from .config import OptimConfig, TrainConfig
from .distributed import DistInfo, SyncBatchNorm1d, all_reduce_sum, barrier, init_from_env
from .metrics import (
    LOSSES,
    REGRESSION,
    TargetBalance,
    compute_loss,
    evaluate_model,
    forward_for_loss,
    summarize,
    sums_zero,
)
from .rng import mix_seed, resolve_device, rng_state, set_rng_state
from .runlog import RunLog
from .sampler import EpochSampler, set_dataset_epoch
from .schedule import Schedule


class NonFiniteLossError(RuntimeError):
    """Training stopped because the loss became NaN or infinite."""


# Crash-test hook (tests/training/test_crash_resume.py): LIQUID_STREAM_KILL_AT="POINT:step=N[,...]"
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
            raise ValueError(
                f"{KILL_ENV}: expected POINT:step=N with POINT in {KILL_POINTS}, got {item!r}"
            )
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


def cpu_has_bf16() -> bool:
    """Whether this CPU computes bf16 natively (AVX512-BF16 or AMX tiles): where torch's
    CPU autocast pays."""
    probes = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(getattr(torch.cpu, p, lambda: False)() for p in probes)


class Trainer:
    """Trains ``model`` on ``train_set``; see the module docstring."""

    def __init__(
        self,
        model: torch.nn.Module,
        train_set: Dataset,
        val_set: Dataset | None,
        optim_cfg: OptimConfig,
        train_cfg: TrainConfig,
        out_dir,
        task_meta: dict,
        loss: str = "ce",
        config: dict | None = None,
    ):
        if loss not in LOSSES:
            raise ValueError(f"loss must be one of {LOSSES}, got {loss!r}")
        self.optim_cfg, self.train_cfg = optim_cfg, train_cfg
        self.out = Path(out_dir)
        self.out.mkdir(parents=True, exist_ok=True)
        self.meta, self.loss_kind, self.config = dict(task_meta), loss, config or {}
        self.device, self.dist = self._place()
        self.model, self.train_model = self._prepare(model)
        self.train_set, self.val_set = train_set, val_set
        o, t = optim_cfg, train_cfg
        self.optimizer = make_optimizer(
            self.model,
            lr=o.lr,
            weight_decay=o.weight_decay,
            ssm_lr=o.ssm_lr,
            ssm_weight_decay=o.ssm_weight_decay,
        )
        self.base_lrs = [g["lr"] for g in self.optimizer.param_groups]
        self.batch_size, self.accum = o.batch_size, o.grad_accum
        self.eval_batch_size = o.eval_batch_size or self.batch_size
        self.seed = t.seed
        W = self.dist.world_size
        self.global_batch = self.batch_size * W  # examples per micro-batch, all ranks
        self.sampler = EpochSampler(
            len(train_set), self.seed, rank=self.dist.rank, world=W, batch_size=self.batch_size
        )
        self.batches_per_epoch = len(self.sampler.global_batches())  # whole epoch: start 0
        self.steps_per_epoch = math.ceil(self.batches_per_epoch / self.accum)
        self.schedule = Schedule(o, self.steps_per_epoch)
        self.amp_dtype = self._amp_dtype()
        self.scaler = torch.amp.GradScaler("cuda") if self.amp_dtype == torch.float16 else None
        # the position in the run and its record (all in trainer_state)
        self.epoch, self.batch_in_epoch, self.step = 0, 0, 0
        self.epoch_sums = sums_zero()
        self.best: float | None = None
        self.best_epoch: float | None = None
        self.best_step: int | None = None
        # the best checkpoint's {"model", "trainer", "metrics"} (CPU copies), embedded in
        # last.pt; the step of the best.pt known to be on disk
        self._best: dict | None = None
        self._best_on_disk: int | None = None
        self.step_losses: list[float] = []  # losses of the steps run by this process
        self.last_metrics: dict = {}
        self._t0, self._elapsed0 = time.perf_counter(), 0.0
        # when to stop, validate and save; what to monitor
        self.max_steps = t.max_steps
        self.eval_every, self.save_every = t.eval_every, t.save_every_steps
        self.progress = t.progress and self.dist.is_main
        self.higher_is_better = loss not in REGRESSION
        # per-step labels are mostly the no-event class: monitor the balanced accuracy
        # (mean per-class recall), which a model answering "silence" everywhere cannot game
        self.monitor = (
            "val_rmse" if loss in REGRESSION else {"ce_per_step": "val_bacc"}.get(loss, "val_acc")
        )
        weights = self.meta.get("class_weights")
        self.class_weight = None if weights is None else torch.tensor(weights, dtype=torch.float32)
        self.target_weight = self._target_balance(optim_cfg.target_balance, loss, train_set)
        beats = (self.meta.get("extra") or {}).get("beats") or {}
        self.beat_weight = float(beats.get("weight", 1.0))  # mse_beats (training/metrics.py)
        self.beat_box = int(beats.get("box_frames", 1))
        self.log = RunLog(self.out, self.dist.is_main, loss, float(t.plot_every_s))
        self._kill_at = _kill_points(os.environ.get(KILL_ENV))
        # the weight average w̄ (optim.ema > 0), a copy of the model's state
        self.ema: dict[str, torch.Tensor] | None = None
        if optim_cfg.ema > 0:
            self.ema = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
        self._seed_rank()

    def _place(self) -> tuple[torch.device, DistInfo]:
        """The device, and the process group torchrun describes (one GPU per rank)."""
        device = resolve_device(self.train_cfg.device)
        dist = init_from_env(device.type)
        if device.type == "cuda" and dist.enabled:
            device = torch.device("cuda", dist.local_rank)
        if device.type == "cpu" and self.train_cfg.threads:
            torch.set_num_threads(self.train_cfg.threads)
        return device, dist

    def _prepare(self, model: torch.nn.Module) -> tuple[torch.nn.Module, torch.nn.Module]:
        """The model on the device, and what the training forward runs (DDP when parallel)."""
        if self.train_cfg.checkpoint_blocks:
            model.checkpoint_blocks = True  # activation memory of one block (long L)
        if not self.dist.enabled:
            model = model.to(self.device)
            return model, model
        from torch.nn.parallel import DistributedDataParallel

        model = SyncBatchNorm1d.convert(model).to(self.device)
        ids = [self.dist.local_rank] if self.device.type == "cuda" else None
        return model, DistributedDataParallel(model, device_ids=ids)

    def _amp_dtype(self) -> torch.dtype | None:
        """Autocast's dtype with ``train.amp``: on CUDA bf16 where supported, else fp16; on
        the CPU bf16 only, which pays only where the CPU has bf16 instructions (the cpu KWS
        preset on an AVX512-BF16 Zen 5: 1.15-1.57x faster a step, but its spotters detected
        less; docs/benchmarks.md §4.1, so no preset uses it)."""
        if not self.train_cfg.amp:
            return None
        if self.device.type == "cpu":
            if self.train_cfg.amp_dtype != "bf16":
                raise ValueError(
                    "train.amp on the CPU autocasts to bf16 only; set "
                    "train.amp_dtype=bf16 (fp16 needs CUDA)"
                )
            if not cpu_has_bf16():
                warnings.warn(
                    "train.amp: this CPU has no bf16 instructions (AVX512-BF16 or "
                    "AMX); autocast to bf16 is emulated here and may be slower than "
                    "float32",
                    stacklevel=2,
                )
            return torch.bfloat16
        bf16 = self.train_cfg.amp_dtype == "bf16" and torch.cuda.is_bf16_supported()
        return torch.bfloat16 if bf16 else torch.float16

    def _crash_point(self, name: str) -> None:
        """The crash-test hook (``KILL_ENV``): a real SIGKILL of this process, here."""
        if self.step in self._kill_at.get(name, ()):
            os.kill(os.getpid(), signal.SIGKILL)

    def _seed_rank(self) -> None:
        """Ranks > 0 draw their own random numbers (dropout…), seeded by (seed, step, rank);
        the parameters are rank 0's anyway (DDP broadcasts them)."""
        if self.dist.rank > 0:
            torch.manual_seed(mix_seed(self.seed + self.step, 1_000_003 + self.dist.rank))

    # -------------------------------------------------------------------- helpers
    def autocast(self):
        if self.amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.amp_dtype)

    def _loader(self) -> DataLoader:
        return DataLoader(
            self.train_set,
            batch_size=self.batch_size,
            sampler=self.sampler,
            num_workers=self.train_cfg.num_workers,
            generator=torch.Generator().manual_seed(mix_seed(self.seed + 1, self.epoch)),
            pin_memory=self.device.type == "cuda",
            drop_last=False,
            persistent_workers=False,
        )

    @contextlib.contextmanager
    def averaged(self):
        """The model holds the weight average w̄ inside the block (no-op without ``ema``)."""
        if self.ema is None:
            yield
            return
        raw = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
        self.model.load_state_dict(self.ema)
        try:
            yield
        finally:
            self.model.load_state_dict(raw)

    @torch.no_grad()
    def _update_ema(self) -> None:
        """w̄ ← d_t w̄ + (1 − d_t) w after step t (the module docstring's rule)."""
        if self.ema is None:
            return
        d = min(float(self.optim_cfg.ema), (1 + self.step) / (10 + self.step))
        for k, w in self.model.state_dict().items():
            avg = self.ema[k]
            if avg.is_floating_point():
                avg.lerp_(w.to(avg.dtype), 1.0 - d)  # avg + (1 - d)(w - avg)
            else:
                avg.copy_(w)

    @property
    def elapsed(self) -> float:
        return self._elapsed0 + time.perf_counter() - self._t0

    @staticmethod
    def _target_balance(alpha: float, loss: str, train_set) -> TargetBalance | None:
        """``optim.target_balance`` α > 0: the weights of the training targets (a regression
        task whose dataset holds its targets as ``windows.y``: the BIDMC windows and crops)."""
        if alpha <= 0:
            return None
        if loss not in REGRESSION:
            raise ValueError(
                f"optim.target_balance weighs a regression loss; this task's loss is {loss!r}"
            )
        y = getattr(getattr(train_set, "windows", None), "y", None)
        if y is None:
            raise ValueError(
                "optim.target_balance needs a dataset that holds its targets "
                "(windows.y: the BIDMC windows or crops)"
            )
        return TargetBalance.from_targets(y, alpha)

    def evaluate(self, dataset: Dataset, rate: float = 1.0, confusion: bool = False) -> dict:
        """Metrics of the model on ``dataset``: scalars only, unless ``confusion`` (then
        also the confusion matrix and per-class accuracies). Per-step tasks always get
        the balanced accuracy ``bacc``."""
        per_class = confusion or self.loss_kind == "ce_per_step"
        n_classes = int(self.meta.get("d_output", 0)) if per_class else None
        res = evaluate_model(
            self.model,
            dataset,
            self.loss_kind,
            self.device,
            self.eval_batch_size,
            rate,
            n_classes=n_classes if self.loss_kind not in REGRESSION else None,
            num_workers=self.train_cfg.num_workers,
            autocast=self.autocast(),
            progress=self.progress,
            class_weight=self.class_weight,
        )
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
            "sampler": {
                **self.sampler.state_dict(),
                "epoch": self.epoch,
                "start": self.batch_in_epoch * self.global_batch,
            },
            "epoch": self.epoch,
            "batch_in_epoch": self.batch_in_epoch,
            "step": self.step,
            "best": self.best,
            "best_epoch": self.best_epoch,
            "best_step": self.best_step,
            "logs": dict(self.log.rows),
            "monitor": self.monitor,
            "epoch_sums": dict(self.epoch_sums),
            "elapsed_s": self.elapsed,
            "loss": self.loss_kind,
            "batch_size": self.batch_size,
            "world_size": self.dist.world_size,
            "grad_accum": self.accum,
            "ema": None if self.ema is None else {k: v.detach().cpu() for k, v in self.ema.items()},
        }

    def _checkpoint(self, metrics: dict | None = None) -> dict:
        clean = {k: float(v) for k, v in (metrics or {}).items() if isinstance(v, int | float)}
        return checkpoint_dict(
            self.model,
            meta=self.meta,
            config=self.config,
            trainer=self.trainer_state(),
            metrics=clean,
        )

    def save(self, name: str, metrics: dict | None = None) -> Path:
        """Write the current state to ``out/name`` (atomic). ``last.pt`` also records the
        best checkpoint so far (``BEST_KEY``), so that it alone says what best.pt holds."""
        path = self.out / name
        if not self.dist.is_main:
            return path
        obj = self._checkpoint(metrics)
        if name == "last.pt" and self._best is not None:
            # the best is this very state (and its weights, not an average): no second copy
            own = self.best_step == self.step and self.ema is None
            obj[BEST_KEY] = {"metrics": self._best["metrics"]} if own else self._best
        atomic_torch_save(obj, path)
        return path

    def _write_best(self) -> None:
        """best.pt from the recorded best (what embedded_best rebuilds from last.pt)."""
        obj = {
            k: v
            for k, v in checkpoint_dict(self.model, self.meta, config=self.config).items()
            if k != "model"
        }
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
            print(
                f"note: rewrote {path} from {source}: the best model is step "
                f"{self.best_step} (epoch {self.best_epoch})"
            )
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
        if (self.ema is None) != (st.get("ema") is None):
            raise CheckpointError(
                f"{path} was trained with optim.ema={'on' if st.get('ema') is not None else 'off'}"
                f"; this run has it {'on' if self.ema is not None else 'off'}"
            )
        if self.ema is not None:
            for k, v in st["ema"].items():
                self.ema[k].copy_(v)
        best = embedded_best(ckpt)
        self._best = (
            None
            if best is None
            else _cpu_copy(
                {
                    "model": best["model"],
                    "trainer": best["trainer"],
                    "metrics": best.get("metrics", {}),
                }
            )
        )
        self.epoch_sums = dict(st["epoch_sums"])
        self._elapsed0, self._t0 = float(st.get("elapsed_s", 0.0)), time.perf_counter()
        set_rng_state(st["rng"])
        self._seed_rank()
        self.log.sync(st.get("logs"), self.step)
        if self.dist.is_main:
            none_yet = "best_step" in st and st["best_step"] is None  # (absent: older file)
            self._sync_best(best, none_yet, path)

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
        clip = float(self.optim_cfg.grad_clip)
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
        self._update_ema()

    def fit(self) -> dict:
        """Train until ``epochs`` (or ``max_steps``); returns the final summary.

        Raises :class:`NonFiniteLossError` on a NaN/inf loss (``last.pt`` keeps the last
        good state)."""
        epochs = self.optim_cfg.epochs
        stopped = self.max_steps is not None and self.step >= self.max_steps
        self.log.start()
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        while self.epoch < epochs and not stopped:
            stopped = self._train_epoch(epochs)
            self._end_epoch(epochs, stopped)
        if self.dist.is_main and self._best is not None and self._best_on_disk != self.best_step:
            self._write_best()
        self.log.plot(force=True)
        self.log.close()
        return {
            **self.last_metrics,
            "epoch": self.epoch,
            "step": self.step,
            "stopped_by_max_steps": stopped,
            "best": self.best,
            "best_epoch": self.best_epoch,
            "monitor": self.monitor,
            "elapsed_s": round(self.elapsed, 2),
        }

    def _train_epoch(self, epochs: int) -> bool:
        """The rest of the current epoch, from ``batch_in_epoch``: ``accum`` micro-batches
        per optimizer step. Returns True when ``max_steps`` stopped it."""
        self.sampler.set_epoch(self.epoch, self.batch_in_epoch * self.global_batch)
        set_dataset_epoch(self.train_set, self.epoch)
        loader = self._loader()
        bar = tqdm(
            total=self.batches_per_epoch,
            initial=self.batch_in_epoch,
            ncols=100,
            desc=f"epoch {self.epoch + 1}/{epochs}",
            leave=False,
            disable=None if self.progress else True,
        )
        group_losses: list[float] = []
        with bar:
            for x, y in loader:
                g0 = (self.batch_in_epoch // self.accum) * self.accum  # the step's first
                group = min(self.accum, self.batches_per_epoch - g0)  # its micro-batches
                group_losses.append(self._micro_batch(x, y, group))
                self.batch_in_epoch += 1
                bar.update(1)
                if self.batch_in_epoch - g0 < group:
                    continue
                self._optimizer_step()
                self._log_step(sum(group_losses) / len(group_losses))
                group_losses = []
                bar.set_postfix(loss=f"{self.step_losses[-1]:.4f}", step=self.step)
                if self.max_steps is not None and self.step >= self.max_steps:
                    return True
                if self.save_every and self.step % self.save_every == 0:
                    self.save("last.pt")
        return False

    def _micro_batch(self, x: torch.Tensor, y: torch.Tensor, group: int) -> float:
        """Forward and backward of one micro-batch of a step of ``group`` micro-batches
        (gradients accumulate); returns its mean loss over all ranks."""
        x = x.to(self.device, non_blocking=True)  # (B, L, d_input)
        y = y.to(self.device, non_blocking=True)  # (B,) or (B, L) labels, (B, d) targets
        loss, sums, bad = self._loss(x, y)
        # Every rank learns whether any rank failed (before DDP's backward, which would wait
        # forever for a rank that stopped) and gets the global sums.
        keys = list(sums)
        total = all_reduce_sum([float(bad is not None), *(sums[k] for k in keys)], self.device)
        if total[0] and bad is None:
            bad = "loss on another rank (non-finite)"
        if bad is not None:
            raise self._nonfinite(bad, self.batch_in_epoch)
        glob = dict(zip(keys, total[1:], strict=True))
        # Each rank's mean loss weighs n_rank / n_global of the global batch's mean (DDP
        # averages over ranks, hence the factor world_size).
        scaled = loss * (sums["n"] * self.dist.world_size / glob["n"]) / group
        if self.scaler is not None:
            scaled = self.scaler.scale(scaled)
        scaled.backward()
        for k in self.epoch_sums:
            self.epoch_sums[k] += glob[k]
        return glob["loss"] / glob["n"]

    def _loss(
        self, x: torch.Tensor, y: torch.Tensor
    ) -> tuple[torch.Tensor | None, dict, str | None]:
        """The loss of this rank's micro-batch, its sums, and what was non-finite (or None)."""
        try:
            with self.autocast():
                out = forward_for_loss(self.train_model, x, self.loss_kind)
            loss, sums = compute_loss(
                out,
                y,
                self.loss_kind,
                getattr(self.model, "output_scale", None),
                self.class_weight,
                self.target_weight,
                self.beat_weight,
                self.beat_box,
            )
        except ValueError as e:  # the layers refuse NaN/inf activations
            if "NaN or infinite" not in str(e):
                raise
            return None, sums_zero(), f"activations ({e}; loss nan)"
        value = loss.item()
        return loss, sums, None if math.isfinite(value) else f"loss ({value})"

    def _log_step(self, loss: float) -> None:
        self.step_losses.append(loss)
        self.log.append(
            "steps.csv",
            {
                "step": self.step,
                "epoch": self.epoch + 1,
                "loss": loss,
                "lr": self.optimizer.param_groups[0]["lr"],
            },
        )
        self._crash_point("after_step_row")

    def _end_epoch(self, epochs: int, stopped: bool) -> None:
        """After an epoch's loop: a finished epoch moves the position to the next one; at
        a validation epoch (or a stop) validate and checkpoint, else just save last.pt."""
        finished = self.batch_in_epoch >= self.batches_per_epoch
        epoch_pos = self.epoch + self.batch_in_epoch / self.batches_per_epoch
        train_metrics = summarize(self.epoch_sums, self.loss_kind)
        if finished:
            self.epoch += 1
            self.batch_in_epoch = 0
            self.epoch_sums = sums_zero()
        if finished and (self.epoch % self.eval_every == 0 or self.epoch == epochs) or stopped:
            self._end_of_period(epoch_pos, train_metrics)
        elif finished:
            self.save("last.pt")

    def _end_of_period(self, epoch_pos: float, train_metrics: dict) -> None:
        """Validate, log the row, keep the best and write the checkpoints (rank 0)."""
        if not self.dist.is_main:  # validation, logs and checkpoints are rank 0's
            barrier()
            return
        row = self._validation_row(epoch_pos, train_metrics)
        better = self._update_best(row, epoch_pos)
        self.last_metrics = row
        # Crash-consistent order: the row (last.pt counts it), last.pt (the truth: state,
        # best record, rows), then best.pt (rebuilt from last.pt on resume if a kill
        # intervenes); a row whose last.pt was never written is cut and redone on resume.
        self.log.validation(row)
        self._crash_point("after_epoch_row")
        if better:
            with self.averaged():  # copied inside: the state's tensors are the model's own
                state = self._checkpoint(row)
                self._best = _cpu_copy({k: state[k] for k in ("model", "trainer", "metrics")})
        self.save("last.pt", row)
        self._crash_point("after_last_ckpt")
        if better:
            self._write_best()
        self.log.plot(force=False)
        barrier()

    def _validation_row(self, epoch_pos: float, train_metrics: dict) -> dict:
        """The metrics.csv row: position, lr, train and validation metrics, time."""
        with self.averaged():
            val = self.evaluate(self.val_set) if self.val_set is not None else {}
        row: dict = {
            "epoch": round(epoch_pos, 4),
            "step": self.step,
            "lr": float(self.optimizer.param_groups[0]["lr"]),
        }
        row.update({f"train_{k}": float(v) for k, v in train_metrics.items()})
        row.update({f"val_{k}": float(v) for k, v in val.items()})
        row["time_s"] = round(self.elapsed, 2)
        return row

    def _update_best(self, row: dict, epoch_pos: float) -> bool:
        """Whether ``row`` beats the best so far on the monitored metric (train_loss
        without validation); records it when it does."""
        key = self.monitor if self.monitor in row else "train_loss"
        score = row[key]
        better = self.best is None or (
            score > self.best
            if self.higher_is_better and key != "train_loss"
            else score < self.best
        )
        if better:
            self.best, self.best_epoch, self.best_step = float(score), float(epoch_pos), self.step
        return better
