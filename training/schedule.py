"""The learning-rate schedule: a factor on every parameter group's base lr, per step."""

from __future__ import annotations

import math

import torch

from .config import OptimConfig


class Schedule:
    """Learning-rate factor per optimizer step.

    ``cosine``: linear warmup over ``warmup_steps`` then cosine to ``min_lr_ratio`` at
    ``total_steps`` (= epochs × steps per epoch; ``max_steps`` does not change it).
    ``multistep``: ×``gamma`` at every epoch in ``milestones`` (applied per epoch).
    """

    def __init__(self, optim: OptimConfig, steps_per_epoch: int):
        self.kind = optim.schedule
        self.warmup = optim.warmup_steps
        self.total = optim.epochs * steps_per_epoch
        self.milestones = sorted(optim.milestones)
        self.gamma = float(optim.gamma)
        self.min_ratio = float(optim.min_lr_ratio)
        self.last_factor = 1.0

    def factor(self, step: int, epoch: int) -> float:
        if self.kind == "multistep":
            return self.gamma ** sum(1 for m in self.milestones if epoch >= m)
        if step < self.warmup:
            return (step + 1) / self.warmup
        progress = min(1.0, (step - self.warmup) / max(1, self.total - self.warmup))
        return self.min_ratio + (1 - self.min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))

    def apply(
        self, optimizer: torch.optim.Optimizer, base_lrs: list[float], step: int, epoch: int
    ) -> float:
        """Set every group's lr to its base lr × the factor of (step, epoch)."""
        self.last_factor = self.factor(step, epoch)
        for group, lr in zip(optimizer.param_groups, base_lrs, strict=True):
            group["lr"] = lr * self.last_factor
        return self.last_factor

    def state_dict(self) -> dict:
        return {
            "kind": self.kind,
            "warmup": self.warmup,
            "total": self.total,
            "milestones": list(self.milestones),
            "gamma": self.gamma,
            "min_ratio": self.min_ratio,
            "last_factor": self.last_factor,
        }

    def load_state_dict(self, state: dict) -> None:
        self.kind, self.warmup, self.total = state["kind"], state["warmup"], state["total"]
        self.milestones, self.gamma = list(state["milestones"]), state["gamma"]
        self.min_ratio, self.last_factor = state["min_ratio"], state["last_factor"]
