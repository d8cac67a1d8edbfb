"""The data order of a run: which training examples, in which order, in each epoch.

The order of epoch ``e`` is a permutation drawn from a generator seeded by ``(seed, e)``,
so a data position is just ``(epoch, start)`` and a resumed run reads the same examples
in the same order as an uninterrupted one."""

from __future__ import annotations

import torch
from torch.utils.data import Dataset, Sampler

from .distributed import shard
from .rng import mix_seed


class EpochSampler(Sampler):
    """A fresh permutation per epoch from a generator seeded by ``(seed, epoch)``,
    starting at ``start`` (the position inside the epoch, for mid-epoch resume).

    With ``world > 1`` (data parallel) every rank draws the same permutation, cut into
    global batches of ``batch_size × world`` examples, and yields its contiguous share of
    each (:func:`~liquid_stream.training.distributed.shard`); a last global batch with fewer
    examples than ranks is dropped. ``start`` counts examples of the whole permutation, so
    the state does not depend on the rank or the world size."""

    def __init__(
        self,
        n: int,
        seed: int,
        shuffle: bool = True,
        rank: int = 0,
        world: int = 1,
        batch_size: int = 1,
    ):
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
            self.generator.manual_seed(mix_seed(self.seed, self.epoch))
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


def set_dataset_epoch(ds: Dataset, epoch: int) -> None:
    """Call ``set_epoch`` on the dataset (through Subset / ConcatDataset wrappers), so
    datasets that augment draw their randomness from (seed, epoch, index): resumable."""
    if hasattr(ds, "set_epoch"):
        ds.set_epoch(epoch)
    if hasattr(ds, "dataset"):
        set_dataset_epoch(ds.dataset, epoch)
    for sub in getattr(ds, "datasets", ()):
        set_dataset_epoch(sub, epoch)
