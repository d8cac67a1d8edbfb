"""Data-parallel training with torchrun (PyTorch DistributedDataParallel).

    torchrun --nproc_per_node=K -m liquid_stream.cli train TASK ...       # one machine
    liquid-stream train TASK ... --nproc K                                # the same, launched
    torchrun --nnodes=2 --nproc_per_node=K --rdzv-backend=c10d \\
             --rdzv-endpoint=HOST:29500 -m liquid_stream.cli train TASK ...  # on every node

Every process (rank) holds a replica of the model; each global batch of
``batch_size × world_size`` examples is cut into ``world_size`` contiguous per-rank
slices (:class:`~.sampler.EpochSampler`: the epoch's permutation is the single-process one,
seeded by (seed, epoch)), DDP averages the gradients, so an update equals the
single-process update on the whole global batch: **global batch = per-rank batch ×
world size × grad_accum**, and the learning rate applies to that global batch (scale it
yourself when you change the global batch). NCCL on CUDA (one GPU per rank:
``LOCAL_RANK``), gloo on CPU. BatchNorm becomes :class:`SyncBatchNorm1d` (statistics of
the global batch; torch's ``nn.SyncBatchNorm`` runs only on GPUs). Training sums are
all-reduced; validation, logs, plots and checkpoints are rank 0's. Checkpoints hold no
rank-specific state except rank 0's RNG, so a run resumes under another world size as
long as the global micro-batch (per-rank batch × world size) is the same.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn


@dataclass(frozen=True)
class DistInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1


def init_from_env(device_type: str) -> DistInfo:
    """Join the process group torchrun describes in the environment (``WORLD_SIZE``,
    ``RANK``, ``LOCAL_RANK``, ``MASTER_ADDR``…); a single process without it."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return DistInfo()
    info = DistInfo(int(os.environ["RANK"]), world, int(os.environ.get("LOCAL_RANK", "0")))
    if not dist.is_initialized():
        backend = "nccl" if device_type == "cuda" else "gloo"
        if device_type == "cuda":
            if info.local_rank >= torch.cuda.device_count():
                raise RuntimeError(
                    f"process with LOCAL_RANK {info.local_rank} needs its own GPU, but only "
                    f"{torch.cuda.device_count()} are visible: use --nproc ≤ the GPU count "
                    f"(or train.device=cpu for gloo on the CPU)"
                )
            torch.cuda.set_device(info.local_rank)
        dist.init_process_group(backend)
    return info


def all_reduce_sum(values: list[float], device: torch.device) -> list[float]:
    """Element-wise sum of a list of floats over all ranks (float64)."""
    if not (dist.is_available() and dist.is_initialized()):
        return list(values)
    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return t.tolist()


def barrier() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def shard(start: int, stop: int, rank: int, world: int) -> tuple[int, int]:
    """Rank ``rank``'s contiguous part of the global batch [start, stop): sizes differ by at
    most one (only the last, partial, global batch is uneven)."""
    n = stop - start
    lo = start + (n * rank) // world
    return lo, start + (n * (rank + 1)) // world


class _AllReduceSum(torch.autograd.Function):
    """Sum over ranks, differentiable: the backward pass sums the incoming gradients."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        y = x.clone()
        dist.all_reduce(y)
        return y

    @staticmethod
    def backward(ctx, g: torch.Tensor) -> torch.Tensor:
        g = g.clone()
        dist.all_reduce(g)
        return g


class SyncBatchNorm1d(nn.BatchNorm1d):
    """BatchNorm1d with the statistics of the global batch in training mode.

    Per channel c, over every rank's (B, L) positions: count n, Σx, Σx² are all-reduced
    (differentiably: the backward pass sums the gradients of every rank's loss); the
    mean μ = Σx / n and biased variance σ² = Σx²/n − μ² normalise, and the running
    statistics take the unbiased σ² n / (n − 1) with ``momentum``, exactly as one process
    with the whole batch would (sums in float64).
    Eval mode (and a single process) is plain BatchNorm1d."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not (self.training and dist.is_available() and dist.is_initialized()):
            return super().forward(x)
        if dist.get_world_size() == 1:
            return super().forward(x)
        C = x.shape[1]
        dims = [0, *range(2, x.dim())]
        xd = x.double()
        n_local = x.numel() // C
        stats = torch.cat([xd.sum(dims), (xd * xd).sum(dims), xd.new_tensor([n_local])])
        stats = _AllReduceSum.apply(stats)
        n = stats[-1]
        mean = stats[:C] / n
        var = (stats[C : 2 * C] / n - mean * mean).clamp_min(0)
        if self.track_running_stats:
            with torch.no_grad():
                self.num_batches_tracked += 1
                m = (
                    self.momentum
                    if self.momentum is not None
                    else 1 / float(self.num_batches_tracked)
                )
                self.running_mean.mul_(1 - m).add_(m * mean.to(self.running_mean.dtype))
                unbiased = var * n / (n - 1).clamp_min(1)
                self.running_var.mul_(1 - m).add_(m * unbiased.to(self.running_var.dtype))
        shape = [1, C] + [1] * (x.dim() - 2)
        y = (xd - mean.view(shape)) * torch.rsqrt(var + self.eps).view(shape)
        y = y.to(x.dtype)
        if self.affine:
            y = y * self.weight.view(shape) + self.bias.view(shape)
        return y

    @classmethod
    def convert(cls, module: nn.Module) -> nn.Module:
        """Replace every ``nn.BatchNorm1d`` in ``module`` by this class (same parameters and
        buffers)."""
        for name, child in module.named_children():
            if type(child) is nn.BatchNorm1d:
                new = cls(
                    child.num_features,
                    child.eps,
                    child.momentum,
                    child.affine,
                    child.track_running_stats,
                )
                new.load_state_dict(child.state_dict())
                new.to(next(child.buffers(), torch.empty(0)).device)
                setattr(module, name, new)
            else:
                cls.convert(child)
        return module


def launch(nproc: int, argv: list[str]) -> int:
    """``liquid-stream train … --nproc K``: rerun the same command under torchrun with K
    processes on this machine (``--standalone``); returns torchrun's exit status."""
    import subprocess

    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={nproc}",
        "-m",
        "liquid_stream.cli",
        *argv,
    ]
    return subprocess.call(cmd)
