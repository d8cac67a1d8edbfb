"""Long crops of BIDMC-shaped records with a target at every second: training and scoring a
vital-sign model the way it is used, as a stream whose state has seen minutes of signal.

Why: a model trained only on 32 s windows that start from a zero state is never asked what
to say after the window, yet the monitor streams it for hours: its SSM state then carries
signal from long before the trailing window, which training never showed it. Measured by
``liquid-stream evaluate`` on held-out randomised records (docs/benchmarks.md §5.2): the
window-trained `ppg` HR model of stage 2 had RMSE 2.30 bpm on 32 s windows from a zero
state but **6.75 bpm streamed** over the whole records (stage 1: 3.69 vs 6.76); trained on
these crops, 1.77 bpm streamed.

A crop of ``crop`` samples starting at sample ``s`` of a record carries, at every sample
``p`` of the crop that ends a second (``(s + p + 1) % fs == 0``) and has a full window
behind it inside the crop (``p >= window - 1``), the label of the window ending there:
:func:`.bidmc.window_targets` of the window starting at ``s + p + 1 - window`` (the mean of
the 1 Hz numerics over it). Every other step is NaN (no target). With a ``window`` decoder
the model's output at such a step is its estimate for exactly that window, after all of the
crop before it; the loss ``mse_per_step`` scores those steps. Crops with a NaN sample
(sensor-off) are skipped, as windows are.

**Channel-off augmentation** (``data.channel_off``, train crops only): with probability
``p`` per crop and epoch, one channel of a multi-channel crop, drawn uniformly, reads a
constant over a stretch of U(4, 64) s placed uniformly in the crop, as a detached sensor does
(the simulator's flat sensor-off stretches, training/data/vitals/vitals_sim.py, hold the channel's
zero-input reading). The constant is ``lo + U(−0.5, 1.5)·(hi − lo)`` of that channel in the
crop, so the model cannot tell a sensor-off stretch by its level. Labels are unchanged: the
patient's rate goes on, and the model must read it from the channels still attached (the
ECG when the PPG falls off). Draws are a function of (seed, epoch, index): resumable.

**Pulse-shape augmentation** (``data.pulse_eq``, train crops only): with probability ``p`` per
crop and epoch, every channel passes through its own random equaliser of the cardiac band
(:mod:`.pulse_eq`: another pulse morphology, the same beats and labels; knot gains within
±``data.pulse_eq_db``), before any
channel-off stretch. Its draws come from their own generator of (seed, epoch, index), so
turning it on changes no channel-off draw.

**Beat targets** (``data.beats`` = w > 0, HR only; records with R-peak times,
``<name>.beats.npy`` of training/data/vitals/vitals_sim.py): the crop's label row gains a second
column, the *beat density* at every sample,

    b(t) = 60 · Σ_j N(t; t_j + δ, σ²)      (bpm; δ = BEAT_SHIFT_S, σ = BEAT_SIGMA_S)

one unit-area bump per beat, ectopic ones included, δ after its R peak (a causal model has
then seen the QRS; a premature ventricular complex is up to ~0.3 s wide; ``data.beats_shift_s``
sets δ, e.g. later for a PPG, whose pulse peaks PTT + ~0.2 s after the R peak). Its mean over any
window is 60 × (beats in the window) / (window length): the rate a bedside monitor counts.
The loss ``mse_beats`` (training/metrics.py) asks the model's per-frame readout p_t (the
decoder applied to each frame, whose causal mean over W frames *is* the ``window``
decoder's output) to follow b at every frame, on top of the per-second labels: the model is
taught to emit one pulse per beat, so its window output counts beats instead of reading a
dominant period (which halves the rate of a bigeminy). ``data.beats_box_s`` > 0 scores both
sides as causal means over that many seconds (beats counted over a second, say, rather than
placed in their exact 80-ms frame). The exported graph is unchanged.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from liquid_stream.io.bidmc_vocab import TARGETS

from .bidmc import (
    BidmcDataError,
    WindowDataset,
    _numeric,
    concat_parts,
    read_record,
    wfdb_dir,
    window_starts,
    window_targets,
)
from .pulse_eq import GAIN_DB, pulse_eq
from .vitals_sim import BEATS_SUFFIX


@dataclass
class Crops:
    """Long crops with a target at every completed second (NaN elsewhere)."""

    x: np.ndarray  # (n, crop, C) float32, raw physical units
    y: np.ndarray  # (n, crop) float32, NaN where no target; (n, crop, 2) with beat density
    record: np.ndarray  # (n,) str
    start: np.ndarray  # (n,) int64
    channels: tuple[str, ...]
    target: str

    def __len__(self) -> int:
        return int(self.y.shape[0])


def crop_targets(
    values: np.ndarray, start: int, crop: int, window: int, fs: float, min_valid: float
) -> np.ndarray:
    """(crop,) labels of one crop (module docstring): NaN except at the second ends with a
    full window behind them inside the crop."""
    y = np.full(crop, np.nan)
    fs_i = int(round(fs))
    pos = np.arange(window - 1, crop, dtype=np.int64)
    ends = pos[(start + pos + 1) % fs_i == 0]
    if len(ends):
        y[ends] = window_targets(values, start + ends + 1 - window, window, fs, min_valid)
    return y


BEAT_SHIFT_S = 0.3  # the beat-density bump follows its R peak by this much (module docstring)
BEAT_SIGMA_S = 0.08  # and has this width (s)


def beat_density(
    beats: np.ndarray, n: int, fs: float, shift: float = BEAT_SHIFT_S, sigma: float = BEAT_SIGMA_S
) -> np.ndarray:
    """(n,) ``b(i / fs) = 60 Σ_j N(i / fs; t_j + shift, sigma²)`` in bpm (module docstring):
    one bump of area 60 bpm·s per beat time ``t_j`` (s), summed over ±5 σ."""
    out = np.zeros(n)
    half = int(np.ceil(5 * sigma * fs))
    norm = 60.0 / (sigma * math.sqrt(2 * math.pi))
    for t in np.asarray(beats, np.float64) + shift:
        c = int(round(t * fs))
        lo, hi = max(0, c - half), min(n, c + half + 1)
        if lo >= hi:
            continue
        u = (np.arange(lo, hi) / fs - t) / sigma
        out[lo:hi] += norm * np.exp(-0.5 * u * u)
    return out


def read_beats(root: str | os.PathLike, name: str) -> np.ndarray:
    """R-peak times (s) of record ``name`` in ``root`` (``<name>.beats.npy``)."""
    path = wfdb_dir(root) / f"{name}{BEATS_SUFFIX}"
    if not path.is_file():
        raise BidmcDataError(
            f"{name}: no beat times ({path.name}) for data.beats: generate the records with "
            "`liquid-stream data bidmc-sim --randomised` (which writes them)"
        )
    return np.load(path)


def load_wfdb_crops(
    root: str | os.PathLike,
    target: str,
    records: Sequence[str],
    channels: Sequence[str],
    crop: int,
    hop: int,
    window: int,
    sample_rate: int,
    min_valid: float = 0.5,
    beats: bool = False,
    beat_shift: float = BEAT_SHIFT_S,
) -> Crops:
    """Cut ``records`` of ``root`` into crops of ``crop`` samples every ``hop`` samples (a
    record shorter than ``crop`` gives none); ``beats``: labels ``(crop, 2)``, the second
    column the beat density with bumps ``beat_shift`` s after the R peaks (module
    docstring)."""
    if crop < window:
        raise BidmcDataError(f"a crop ({crop} samples) must hold a window ({window})")
    numeric = TARGETS[target][0]
    xs, ys, recs, sts = [], [], [], []
    for name in records:
        sig, fs, num = read_record(root, name, channels, sample_rate)
        values = _numeric(num, numeric, name)
        dens = beat_density(read_beats(root, name), sig.shape[0], fs, beat_shift) if beats else None
        for s in window_starts(sig.shape[0], crop, hop):
            x = sig[s : s + crop]
            if not np.isfinite(x).all():
                continue
            y = crop_targets(values, int(s), crop, window, fs, min_valid)
            if not np.isfinite(y).any():
                continue
            if dens is not None:
                y = np.stack([y, dens[s : s + crop]], axis=1)
            xs.append(x.astype(np.float32))
            ys.append(y.astype(np.float32))
            recs.append(name)
            sts.append(int(s))
    n_ch = len(channels)
    return Crops(
        x=np.stack(xs) if xs else np.zeros((0, crop, n_ch), np.float32),
        y=np.stack(ys) if ys else np.zeros((0, crop, 2) if beats else (0, crop), np.float32),
        record=np.asarray(recs, dtype=str),
        start=np.asarray(sts, np.int64),
        channels=tuple(channels),
        target=target,
    )


def concat_crops(parts: Sequence[Crops]) -> Crops:
    """The crops of ``parts`` (same channels and target) one after the other."""
    return parts[0] if len(parts) == 1 else Crops(**concat_parts(parts, "crops"))


OFF_SECONDS = (4.0, 64.0)  # length of a channel-off stretch, U(lo, hi) seconds
OFF_LEVEL = (-0.5, 1.5)  # its constant, as a fraction of the channel's range in the crop


def channel_off(
    x: np.ndarray, rng: np.random.Generator, p: float, fs: float
) -> tuple[np.ndarray, int | None]:
    """``x`` (crop, C) with, with probability ``p`` (and C > 1), one channel held at a
    constant over a random stretch (module docstring); returns (x, channel or None). ``x``
    itself is not modified."""
    if p <= 0 or x.shape[1] < 2 or rng.random() >= p:
        return x, None
    n = x.shape[0]
    c = int(rng.integers(x.shape[1]))
    length = min(n, int(round(rng.uniform(*OFF_SECONDS) * fs)))
    start = int(rng.integers(n - length + 1))
    lo, hi = float(x[:, c].min()), float(x[:, c].max())
    out = x.copy()
    out[start : start + length, c] = lo + rng.uniform(*OFF_LEVEL) * (hi - lo)
    return out, c


class CropDataset(WindowDataset):
    """``(x (crop, C) float32 tensor = (x − mean) / std, y (crop,) float32 with NaN)``: a
    :class:`.bidmc.WindowDataset` (same standardisation and checks) whose target is the
    crop's per-step label row. With ``channel_off > 0`` (train crops) each item may have one
    channel held constant over a stretch (:func:`channel_off`), with ``pulse_eq > 0`` its
    channels re-shaped by random equalisers (:func:`.pulse_eq.pulse_eq`), both drawn from
    (seed, epoch, i)."""

    def __init__(
        self,
        crops: Crops,
        mean,
        std,
        channel_off: float = 0.0,
        seed: int = 0,
        sample_rate: float = 125.0,
        pulse_eq: float = 0.0,
        pulse_eq_db: float = GAIN_DB,
    ):
        super().__init__(crops, mean, std)
        self.channel_off, self.seed, self.sample_rate = channel_off, seed, sample_rate
        self.pulse_eq, self.pulse_eq_db = pulse_eq, pulse_eq_db
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def features(self, i: int):
        import torch

        x = self.windows.x[i]
        if self.pulse_eq > 0:
            rng = np.random.default_rng([self.seed, self.epoch, int(i), 1])
            x = pulse_eq(x, rng, self.pulse_eq, self.sample_rate, self.pulse_eq_db)
        if self.channel_off > 0:
            rng = np.random.default_rng([self.seed, self.epoch, int(i)])
            x, _ = channel_off(x, rng, self.channel_off, self.sample_rate)
        return torch.from_numpy(np.ascontiguousarray((x - self.mean) / self.std, np.float32))

    def __getitem__(self, i: int):
        import torch

        return self.features(i), torch.from_numpy(np.ascontiguousarray(self.windows.y[i]))
