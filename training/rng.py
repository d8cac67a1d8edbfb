"""The device and the random numbers of a run: device choice, seeding, and the global RNG
states (python, numpy, torch CPU + CUDA) as ``weights_only``-loadable checkpoint values."""

from __future__ import annotations

import random

import numpy as np
import torch


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


def mix_seed(seed: int, epoch: int) -> int:
    """One 63-bit seed from ``(seed, epoch)`` (the epoch's permutation, loader, rank)."""
    return (int(seed) * 1_000_003 + int(epoch) * 7919 + 17) % 2**63


def rng_state() -> dict:
    """All global RNG states as tensors / plain python (``weights_only``-loadable)."""
    version, keys, gauss = random.getstate()
    kind, mt, pos, has_gauss, cached = np.random.get_state()
    return {
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


def set_rng_state(state: dict) -> None:
    """Restore what :func:`rng_state` returned."""
    p = state["python"]
    random.setstate((p["version"], tuple(p["state"]), p["gauss"]))
    n = state["numpy"]
    np.random.set_state(
        (
            n["kind"],
            n["keys"].numpy().astype(np.uint32),
            n["pos"],
            n["has_gauss"],
            n["cached_gaussian"],
        )
    )
    torch.set_rng_state(state["torch"].cpu())
    if state.get("cuda") and torch.cuda.is_available():
        cuda = state["cuda"][: torch.cuda.device_count()]
        torch.cuda.set_rng_state_all([s.cpu() for s in cuda])
