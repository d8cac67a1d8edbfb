"""Training-time augmentation of log-mel features: SpecAugment masks and a vocal-tract warp.

The audio chain of :mod:`.augment` moves a clip toward real microphones and rooms; this
module acts on what the model sees after its front end, the normalised log-mel frames
``z (B, F, M)`` (F frames, M bands; 0 is each band's training mean):

* **vocal-tract warp** (VTLP, Jaitly & Hinton 2013): a speaker whose vocal tract is
  shorter by a factor α has its spectral envelope stretched, S_α(f) = S(f / α). Band m of
  the warped frame is the original frame read at the band position of the frequency
  f_m / α (f_m the band's centre on the front end's HTK mel scale), by linear
  interpolation between the two neighbouring bands; positions outside [0, M − 1] take the
  edge band. One α per crop, uniform in ``warp``; ``(1, 1)`` is the identity, exactly.
* **frequency masks** (SpecAugment, Park et al. 2019): ``freq_masks`` times, a band width
  w ~ U{0 … freq_width} and a start s ~ U{0 … M − w}; bands [s, s + w) are set to 0.
* **time masks**: ``time_masks`` times per crop, w ~ U{0 … time_width} frames, bands of
  all frames [s, s + w) set to 0.

Masks set the *normalised* feature to 0, i.e. to the band's mean log energy over the
training crops: a hole the model must bridge from other bands or neighbouring frames,
not silence. Nothing here runs outside training: :func:`install` adds it as a forward hook
on the model's front end that acts only while the module is in training mode, so
evaluation, the step form and the exported graph are unchanged (the exactness contract
does not see it). Draws come from torch's global generator, which the trainer seeds and
checkpoints, so a run is reproducible and resumes exactly (like dropout).

Why: a keyword spotter trained on a few synthetic voice families learns the families; a
family it never heard costs most of its detections (docs/benchmarks.md §4.3). A warped
envelope is a new vocal-tract length, and masks make the model use more than one cue.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

import torch
from torch import Tensor, nn

from liquid_stream.nn.frontend import mel_edges

NEEDS_LOGMEL = "data.spec_augment needs a log-mel front end (model.frontend.kind: logmel)"


@dataclass(frozen=True)
class SpecAugmentConfig:
    """Which feature augmentations run and their ranges; each default defined here once
    (a mild policy for 2 s crops of 40 bands at 100 frames/s)."""

    warp: tuple[float, float] = (0.9, 1.1)  # vocal-tract factor α range; (1, 1): off
    freq_masks: int = 2
    freq_width: int = 4  # bands, at most
    time_masks: int = 2
    time_width: int = 5  # frames (10 ms each at the standard hop), at most

    def __post_init__(self) -> None:
        lo, hi = self.warp
        if not (math.isfinite(lo) and math.isfinite(hi) and 0 < lo <= hi):
            raise ValueError(
                f"spec_augment.warp must be (lo, hi) with 0 < lo <= hi, got {self.warp!r}"
            )
        for name in ("freq_masks", "freq_width", "time_masks", "time_width"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"spec_augment.{name} must be an int >= 0, got {v!r}")

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SpecAugmentConfig:
        """From a config mapping: missing keys keep the defaults; unknown keys refused."""
        if not isinstance(d, Mapping):
            raise ValueError(f"spec_augment must be a mapping, got {type(d).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"spec_augment: unknown field(s) {unknown}; known: {sorted(known)}")
        kw = dict(d)
        if "warp" in kw:
            w = kw["warp"]
            if not isinstance(w, list | tuple) or len(w) != 2:
                raise ValueError(f"spec_augment.warp must be a (lo, hi) pair, got {w!r}")
            kw["warp"] = (float(w[0]), float(w[1]))
        return cls(**kw)

    def to_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}


def mel_centres(n_mels: int, fmin: float, fmax: float) -> Tensor:
    """float64 ``(n_mels,)``: the centre frequencies (Hz) of the front end's mel bands
    (:func:`liquid_stream.nn.frontend.mel_edges`: band m peaks at edge m + 1)."""
    return mel_edges(n_mels, fmin, fmax)[1:-1]


def warp_positions(alpha: Tensor, centres: Tensor) -> Tensor:
    """``(B, M)`` fractional band positions p[b, m] at which band m of a frame warped by
    α_b reads the original: the position of f_m / α_b on the band centres (linear in Hz
    between neighbouring centres), clamped to [0, M − 1]."""
    M = centres.shape[0]
    f = centres[None, :] / alpha[:, None]  # (B, M) Hz
    idx = torch.searchsorted(centres, f.contiguous()).clamp(1, M - 1)  # right neighbour
    left, right = centres[idx - 1], centres[idx]
    pos = (idx - 1).to(f.dtype) + (f - left) / (right - left)
    return pos.clamp(0.0, M - 1.0)


def warp_bands(z: Tensor, pos: Tensor) -> Tensor:
    """``z (B, F, M)`` read at the fractional band positions ``pos (B, M)``: linear
    interpolation between bands ⌊p⌋ and ⌊p⌋ + 1 (an integer p gives that band exactly)."""
    M = z.shape[-1]
    i0 = pos.floor().long().clamp(0, M - 1)
    i1 = (i0 + 1).clamp(max=M - 1)
    t = (pos - i0.to(pos.dtype)).to(z.dtype)[:, None, :]  # (B, 1, M)
    g0 = z.gather(2, i0[:, None, :].expand(-1, z.shape[1], -1))
    g1 = z.gather(2, i1[:, None, :].expand(-1, z.shape[1], -1))
    return g0 + t * (g1 - g0)


def draw_masks(n: int, max_width: int, size: int, batch: int, device) -> Tensor:
    """``(B, size)`` bool: the union of ``n`` intervals per row, width ~ U{0 … max_width}
    (at most ``size``), start ~ U{0 … size − width}."""
    masked = torch.zeros(batch, size, dtype=torch.bool, device=device)
    if n == 0 or max_width == 0 or size == 0:
        return masked
    ar = torch.arange(size, device=device)
    for _ in range(n):
        w = torch.randint(0, min(max_width, size) + 1, (batch, 1), device=device)
        s = (torch.rand(batch, 1, device=device) * (size - w + 1)).floor().long()
        masked |= (ar >= s) & (ar < s + w)
    return masked


class SpecAugment(nn.Module):
    """``z (B, F, M)`` → warped and masked ``z`` (module docstring); draws from torch's
    global generator."""

    def __init__(self, cfg: SpecAugmentConfig, n_mels: int, fmin: float, fmax: float):
        super().__init__()
        self.cfg = cfg
        self.register_buffer("centres", mel_centres(n_mels, fmin, fmax), persistent=False)

    def forward(self, z: Tensor) -> Tensor:
        B, F, M = z.shape
        c = self.cfg
        lo, hi = c.warp
        if hi > lo or lo != 1.0:
            alpha = lo + (hi - lo) * torch.rand(B, dtype=torch.float64)
            pos = warp_positions(alpha, self.centres.double().cpu())
            z = warp_bands(z, pos.to(z.device))
        fm = draw_masks(c.freq_masks, c.freq_width, M, B, z.device)[:, None, :]  # (B, 1, M)
        tm = draw_masks(c.time_masks, c.time_width, F, B, z.device)[:, :, None]  # (B, F, 1)
        return z.masked_fill(fm | tm, 0.0)


def install(model: nn.Module, cfg: SpecAugmentConfig) -> SpecAugment:
    """Put :class:`SpecAugment` after ``model.frontend`` (a log-mel front end) as a forward
    hook that acts in training mode only. Returns the augmenter."""
    fe = getattr(model, "frontend", None)
    fcfg = getattr(fe, "cfg", None)
    if fcfg is None or not hasattr(fcfg, "n_mels"):
        raise ValueError(NEEDS_LOGMEL)
    aug = SpecAugment(cfg, fcfg.n_mels, fcfg.fmin, fcfg.fmax)

    def hook(module: nn.Module, _inputs, out: Tensor) -> Tensor:
        return aug(out) if module.training else out

    fe.register_forward_hook(hook)
    return aug
