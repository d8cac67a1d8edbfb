"""Losses and metrics: the training loss of a batch, epoch metrics from running sums, and
the evaluation of a model on a dataset (accuracy, balanced accuracy, confusion matrix,
RMSE / MAE)."""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset
from tqdm import tqdm

from liquid_stream.nn.liquid import causal_window_sum

LOSSES = ("ce", "mse", "ce_per_step", "mse_per_step", "mse_beats")
REGRESSION = ("mse", "mse_per_step", "mse_beats")


@dataclass(frozen=True)
class TargetBalance:
    """Loss weights of a regression target, w(y) = (p(y) / p̄)^(−α): rare targets weigh more.

    p is the density of the training targets over bins of ``width`` (physical units), smoothed
    by a Gaussian kernel of ``smooth`` bins (the label-distribution smoothing of Yang et al.,
    "Delving into Deep Imbalanced Regression", ICML 2021), so that an empty bin beside full
    ones does not get an infinite weight; the weights are scaled to mean 1 over the training
    targets (the loss keeps its size: same learning rates). A target outside the bins takes
    the nearest bin's weight. Why: a simulator that draws the rate uniformly inside a range
    and reaches its ends only through excursions makes the ends rare, and the model's
    estimates there regress towards the middle (docs/benchmarks.md §5.2)."""

    lo: float
    width: float
    table: torch.Tensor  # (n_bins,) float32 weights

    @classmethod
    def from_targets(
        cls, y: np.ndarray, alpha: float, width: float = 1.0, smooth: float = 2.0
    ) -> TargetBalance:
        y = np.asarray(y, np.float64).ravel()
        y = y[np.isfinite(y)]
        if y.size == 0:
            raise ValueError("target balance: the training set has no finite target")
        lo = math.floor(float(y.min()) / width) * width
        k = np.floor((y - lo) / width).astype(np.int64)
        counts = np.bincount(k, minlength=int(k.max()) + 1).astype(np.float64)
        r = int(math.ceil(3 * smooth))
        kernel = np.exp(-0.5 * (np.arange(-r, r + 1) / smooth) ** 2)
        p = np.convolve(np.pad(counts, r), kernel / kernel.sum(), mode="valid")  # (n_bins,)
        w = np.maximum(p, 1e-12 * p.max()) ** -float(alpha)
        w /= (w * counts).sum() / counts.sum()  # mean 1 over the training targets
        return cls(lo, float(width), torch.tensor(w, dtype=torch.float32))

    def __call__(self, y: torch.Tensor) -> torch.Tensor:
        k = torch.floor((y - self.lo) / self.width).long().clamp(0, len(self.table) - 1)
        return self.table.to(y.device)[k]


def sums_zero() -> dict:
    """The running sums of an epoch (what :func:`compute_loss` returns, all zero)."""
    return {"n": 0.0, "loss": 0.0, "correct": 0.0, "count": 0.0, "se": 0.0, "ae": 0.0}


def compute_loss(
    out: torch.Tensor,
    y: torch.Tensor,
    kind: str,
    scale: torch.Tensor | None = None,
    class_weight: torch.Tensor | None = None,
    target_weight: TargetBalance | None = None,
    beat_weight: float = 1.0,
    beat_box: int = 1,
) -> tuple[torch.Tensor, dict]:
    """Mean loss and the (detached) sums for the epoch metrics.

    ``mse``: per-step outputs ``(B, L, d)`` (a ``window`` decoder) are scored at the last
    step; ``mse_per_step``: at every step whose target ``(B, L)`` is finite (long crops,
    training/data/vitals/bidmc_crops.py); ``scale`` (the model's ``output_scale``, the targets'
    std) makes the loss ``mean(((out − y) / scale)²)`` while RMSE / MAE stay in the
    targets' physical units.
    ``ce`` / ``ce_per_step``: ``class_weight`` (C,) weights the cross-entropy per class
    (e.g. a small weight on the ``_silence_`` steps that dominate streaming labels).
    ``target_weight`` (regression): each scored target's squared error weighs w(y)
    (:class:`TargetBalance`); the sums (RMSE / MAE) stay unweighted.
    ``mse_beats``: ``out (B, F, 2)`` = the window output and the per-frame readout
    (:meth:`LiquidS4Model.window_and_readout`), ``y (B, T, 2)`` = the per-second labels and
    the beat density b (training/data/vitals/bidmc_crops.py): ``mse_per_step`` on the first plus
    ``beat_weight · mean_frames(((box(p) − box(b̄)) / scale)²)``, b̄ the density's mean over
    each frame's samples and box the causal mean over the last ``beat_box`` frames (1: the
    frames themselves; a few: the beats counted over a second or so, not their exact
    frame); RMSE / MAE are the per-second labels' only.
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
        if target_weight is None:
            loss = F.mse_loss(out / unit, target / unit)
        else:
            loss = (target_weight(target) * ((out - target) / unit).pow(2)).mean()
        with torch.no_grad():
            d = out - target
            sums = {
                "correct": 0.0,
                "count": float(d.numel()),
                "se": d.pow(2).sum().item(),
                "ae": d.abs().sum().item(),
            }
    elif kind == "mse_beats":  # out (B, F, 2): window output, per-frame readout
        # y (B, T, 2): per-second labels (NaN elsewhere), beat density (bidmc_crops.py)
        loss, sums = compute_loss(
            out[..., :1], y[..., 0], "mse_per_step", scale, None, target_weight
        )
        dens = y[..., 1].float()
        r = dens.shape[1] // out.shape[1]
        dens = dens.reshape(dens.shape[0], out.shape[1], r).mean(-1)  # the frame's mean
        unit = 1.0 if scale is None else scale.float().to(out.device)[0]
        p = out[..., 1]
        if beat_box > 1:  # causal box means (zeros before the start, like the window)
            p, dens = (causal_window_sum(v[:, None], beat_box)[:, 0] / beat_box for v in (p, dens))
        beat = ((p - dens) / unit).pow(2).mean()
        loss = loss + beat_weight * beat
        n = float(y.shape[0])
        return loss, {**sums, "loss": loss.item() * n}
    elif kind == "mse_per_step":  # per-step targets (B, L), NaN where a step has none
        if out.dim() != 3:
            raise ValueError(f"mse_per_step needs per-step outputs (B, L, d), got {out.shape}")
        target = y.float().reshape(y.shape[0], -1)  # (B, T) at the input rate
        r = target.shape[1] // out.shape[1]  # a front end that pools by r answers per frame
        if r * out.shape[1] != target.shape[1]:
            raise ValueError(f"targets of {target.shape[1]} steps for {out.shape[1]} outputs")
        target = target[:, r - 1 :: r]  # frame k answers for its last input sample
        ok = torch.isfinite(target)
        unit = 1.0 if scale is None else scale.float().to(out.device)[0]
        d = out[..., 0][ok] - target[ok]
        se = (d / unit).pow(2)
        if target_weight is not None:
            se = target_weight(target[ok]) * se
        loss = se.mean() if d.numel() else out.sum() * 0.0
        with torch.no_grad():
            sums = {
                "correct": 0.0,
                "count": float(d.numel()),
                "se": d.pow(2).sum().item(),
                "ae": d.abs().sum().item(),
            }
    else:
        raise ValueError(f"loss must be one of {LOSSES}, got {kind!r}")
    n = float(y.shape[0])
    return loss, {"n": n, "loss": loss.item() * n, **sums}


def summarize(sums: dict, kind: str) -> dict:
    """Epoch metrics from accumulated sums: loss + accuracy, or loss + RMSE / MAE."""
    out = {"loss": sums["loss"] / max(sums["n"], 1.0)}
    if kind in REGRESSION:
        out["rmse"] = math.sqrt(sums["se"] / max(sums["count"], 1.0))
        out["mae"] = sums["ae"] / max(sums["count"], 1.0)
    else:
        out["acc"] = sums["correct"] / max(sums["count"], 1.0)
    return out


def forward_for_loss(model, x: torch.Tensor, kind: str, rate: float = 1.0) -> torch.Tensor:
    """``model(x)``; per-step outputs (``forward_steps``) for ``ce_per_step`` with a
    ``pool``/``last`` decoder."""
    inner = getattr(model, "module", model)  # DistributedDataParallel wraps the model
    if kind == "mse_beats":
        return model(x, rate=rate, readout=True)
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
        dataset,
        batch_size=batch_size,
        shuffle=False,
        num_workers=num_workers,
        generator=torch.Generator().manual_seed(0),
        pin_memory=device.type == "cuda",
    )
    was_training = model.training
    model.eval()
    sums = sums_zero()
    confusion = np.zeros((n_classes, n_classes), np.int64) if n_classes else None
    it = tqdm(loader, desc="eval", leave=False, disable=None if progress else True)
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
