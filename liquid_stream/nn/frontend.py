"""Streaming-exact log-mel front end: raw samples in, feature frames out, then the stack.

With ``frontend = {"kind": "logmel", ...}`` a :class:`~liquid_stream.nn.model.LiquidS4Model`
takes raw audio ``x (B, L, 1)`` and its Liquid-S4 stack runs at the frame rate
``sample_rate / hop`` (100 Hz for the standard 10 ms hop) instead of the sample rate:
~160× fewer steps per second of audio, the reason a keyword spotter trains on 2 CPU cores
(measured: 0.15 s per training step of 16 × 2 s crops for a 4 × 128 model on 2 cores,
augmentation included).

Frame k (k = 0, 1, …) covers the W samples that *end* at sample (k+1)·R − 1, with
samples before the start of the stream taken as zero (so the front end is causal and a
frame exists as soon as its last sample has arrived):

    f_k[n]  = x[(k+1)·R − W + n],   n = 0 … W−1       (W = win, R = hop; x[<0] = 0)
    X_k[j]  = Σ_n w[n] f_k[n] e^{−2πi j n / N}         j = 0 … N/2, w periodic Hann
    P_k[j]  = |X_k[j]|²
    E_k[m]  = Σ_j M[m, j] P_k[j]                       M: triangular mel filters (HTK)
    z_k[m]  = (log(E_k[m] + ε) − μ[m]) / σ[m]          ε = log floor, μ/σ fixed per band

With ``cmn_s`` = τ (off by default), each band's running mean is then taken away
(streaming cepstral-mean normalisation, on log-mel bands), with β = exp(−(R/fs)/τ) per
frame, the same weighted mean as the biosignal front end's (:mod:`liquid_stream.nn.scalenorm`):

    m_k = β·m_{k−1} + (1−β)·z_k,  m_{−1} = 0;   w_k = 1 − β^{k+1}
    ẑ_k = z_k − m_k / w_k                              (ẑ_0 = 0)

m_k / w_k is a mean of z_0 … z_k with weights summing to one, so a gain g on the input
(log E → log E + 2 ln g where E ≫ ε) and any fixed per-band colouring of the channel (a
microphone's or a room's average response: a constant per band in log E) leave ẑ
unchanged: the spotter's input no longer depends on the level or the frequency response of
the microphone, beyond what the training augmentation drew. Off in every preset: the main
job's spotter with it (τ = 1 s) detected 73.8 against 88.9 % at ≤ 5 false accepts per hour
on its 60-minute validation stream (docs/benchmarks.md §4.3).

A sequence of L samples gives ⌊L/R⌋ frames (the last L mod R samples wait for the next
frame). In torch (training and the step form) the frames are cut with ``unfold`` and
transformed by a real FFT of N points; the ONNX graph computes the same DFT as a strided
convolution with the 2·(N/2+1) windowed cos/sin rows as kernels (:func:`dft_basis`). The
two agree to float rounding (tests: ≤ 1e-9 against a literal float64 DFT); the FFT costs
a third of the convolution (6.7 vs 17 ms for 16 × 2 s crops on one thread).

Streaming (:class:`LogMelStep`): the state is the last W−1 samples (zeros at the start)
and the phase p = samples seen mod R (shared by the batch, like ``ssm.fill``); with
``cmn_s`` also m (B, n_mels) and w (1,), run frame by frame (the training forward takes m
blockwise, :func:`~liquid_stream.nn.ema.ema_mean`). A chunk
of T samples completes F = ⌊(p + T)/R⌋ frames; frame i of the chunk ends at chunk
sample R − p − 1 + i·R.

Per-sample outputs (:func:`hold`): the model's frame outputs y_k are held until the next
frame completes, ŷ[t] = y_{k(t)} with k(t) = ⌊(t+1)/R⌋ − 1 the last frame complete at
sample t, and ŷ[t] = 0 before the first frame; so the exported graph still answers one
row per input sample and every app works unchanged at any chunk size.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .ema import ema_mean


def check_fields(cfg, ints: tuple[str, ...], numbers: tuple[str, ...]) -> None:
    """ValueError naming ``frontend.<field>`` unless each of ``ints`` is a positive integer
    and each of ``numbers`` a finite number (the front-end configs' shared checks)."""
    for name in ints:
        v = getattr(cfg, name)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"frontend.{name} must be a positive integer, got {v!r}")
    for name in numbers:
        v = getattr(cfg, name)
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise ValueError(f"frontend.{name} must be a finite number, got {v!r}")


def config_from_dict(cls, d: dict | None):
    """A front-end config from a model config's ``frontend`` dict (``kind`` dropped);
    unknown keys refused with the known ones named."""
    d = {k: v for k, v in (d or {}).items() if k != "kind"}
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(d) - known)
    if unknown:
        raise ValueError(f"frontend: unknown field(s) {unknown}; known: {sorted(known)}")
    return cls(**d)


@dataclass(frozen=True)
class LogMelConfig:
    """Log-mel parameters (times in ms at ``sample_rate``); each default defined here once.

    25 ms Hann windows every 10 ms, 512-point DFT, 40 HTK mel bands over 20–7600 Hz: the
    standard keyword-spotting front end (e.g. the Speech Commands baselines)."""

    sample_rate: int = 16000
    win_ms: float = 25.0
    hop_ms: float = 10.0
    n_fft: int = 512
    n_mels: int = 40
    fmin: float = 20.0
    fmax: float = 7600.0
    log_floor: float = 1e-6
    mean: list[float] | None = field(default=None)  # per-band μ (None: 0)
    std: list[float] | None = field(default=None)  # per-band σ (None: 1)
    cmn_s: float | None = None  # τ of the running per-band mean taken away (None: off)

    @property
    def win(self) -> int:
        return round(self.sample_rate * self.win_ms / 1000)

    @property
    def hop(self) -> int:
        return round(self.sample_rate * self.hop_ms / 1000)

    @property
    def n_freq(self) -> int:
        return self.n_fft // 2 + 1

    @property
    def cmn_beta(self) -> float | None:
        """The per-frame decay β = exp(−(R/fs)/τ) of the running mean (None: no ``cmn_s``)."""
        if self.cmn_s is None:
            return None
        return math.exp(-self.hop / self.sample_rate / self.cmn_s)

    def __post_init__(self) -> None:
        check_fields(
            self,
            ("sample_rate", "n_fft", "n_mels"),
            ("win_ms", "hop_ms", "fmin", "fmax", "log_floor"),
        )

        def bad(name: str, why: str) -> ValueError:
            return ValueError(f"frontend.{name} {why}, got {getattr(self, name)!r}")

        if self.hop < 1:
            raise bad("hop_ms", "must be at least one sample")
        if not self.hop <= self.win <= self.n_fft:
            raise ValueError(
                f"frontend: need hop ≤ win ≤ n_fft samples, got hop {self.hop}, win "
                f"{self.win}, n_fft {self.n_fft}"
            )
        if not 0 <= self.fmin < self.fmax <= self.sample_rate / 2:
            raise ValueError(
                f"frontend: need 0 ≤ fmin < fmax ≤ sample_rate/2, got fmin {self.fmin}, "
                f"fmax {self.fmax}, sample_rate {self.sample_rate}"
            )
        if self.log_floor <= 0:
            raise bad("log_floor", "must be positive")
        if self.cmn_s is not None:  # optional: the shared number check, then its sign
            check_fields(self, (), ("cmn_s",))
            if self.cmn_s <= 0:
                raise bad("cmn_s", "must be positive")
        for name in ("mean", "std"):
            v = getattr(self, name)
            if v is None:
                continue
            if len(v) != self.n_mels or not all(math.isfinite(float(a)) for a in v):
                raise bad(name, f"must be {self.n_mels} finite numbers")
            if name == "std" and min(float(a) for a in v) <= 0:
                raise bad(name, "must be positive")

    @classmethod
    def from_dict(cls, d: dict | None) -> LogMelConfig:
        return config_from_dict(cls, d)

    def to_dict(self) -> dict:
        return {"kind": "logmel", **asdict(self)}


def mel_edges(n_mels: int, fmin: float, fmax: float) -> Tensor:
    """float64 ``(n_mels + 2,)``: the band edges (Hz) on the HTK mel scale
    m(f) = 2595·log₁₀(1 + f/700), equally spaced in mel from fmin to fmax; band m peaks at
    edge m + 1 (its centre)."""

    def mel(f):
        return 2595.0 * torch.log10(1.0 + f / 700.0)

    edges_mel = torch.linspace(
        float(mel(torch.tensor(float(fmin), dtype=torch.float64))),
        float(mel(torch.tensor(float(fmax), dtype=torch.float64))),
        n_mels + 2,
        dtype=torch.float64,
    )
    return 700.0 * (10.0 ** (edges_mel / 2595.0) - 1.0)


def mel_filterbank(n_fft: int, n_mels: int, sample_rate: float, fmin: float, fmax: float) -> Tensor:
    """float64 ``(n_mels, n_fft/2 + 1)`` triangular filters on the HTK mel scale: band m
    rises from edge m−1 to m and falls to m+1 (:func:`mel_edges`; peak value 1)."""
    edges = mel_edges(n_mels, fmin, fmax)
    freqs = torch.arange(n_fft // 2 + 1, dtype=torch.float64) * sample_rate / n_fft
    lo, mid, hi = edges[:-2, None], edges[1:-1, None], edges[2:, None]
    up = (freqs - lo) / (mid - lo)
    down = (hi - freqs) / (hi - mid)
    return torch.clamp(torch.minimum(up, down), min=0.0)


def hann(cfg: LogMelConfig) -> Tensor:
    """float64 ``(W,)``: the periodic Hann window w[n] = ½ − ½·cos(2πn/W)."""
    n = torch.arange(cfg.win, dtype=torch.float64)
    return 0.5 - 0.5 * torch.cos(2 * math.pi * n / cfg.win)


def dft_basis(cfg: LogMelConfig) -> Tensor:
    """float64 ``(2·n_freq, 1, W)``: rows w[n]·cos(2πjn/N) then −w[n]·sin(2πjn/N), so a
    stride-R convolution gives Re X_k[j] and Im X_k[j] of every frame."""
    W, N = cfg.win, cfg.n_fft
    n = torch.arange(W, dtype=torch.float64)
    window = hann(cfg)
    j = torch.arange(cfg.n_freq, dtype=torch.float64)[:, None]
    phase = 2 * math.pi * j * n / N
    return torch.cat([window * torch.cos(phase), -window * torch.sin(phase)])[:, None]


class LogMel(nn.Module):
    """``x (B, L, 1)`` raw samples → ``z (B, ⌊L/R⌋, n_mels)`` (see the module docstring).

    No parameters: the tables (DFT basis, mel filters, μ, σ) are fixed by the config, built
    in float64 and cast once per (dtype, device), so a float64 model computes them exactly
    and checkpoints carry nothing but the config."""

    def __init__(self, cfg: LogMelConfig):
        super().__init__()
        self.cfg = cfg
        self.win, self.hop, self.n_mels = cfg.win, cfg.hop, cfg.n_mels
        self.n_features = cfg.n_mels
        self._tables: dict[tuple, tuple[Tensor, ...]] = {}
        self._windows: dict[tuple, Tensor] = {}

    def tables(self, dtype: torch.dtype, device: torch.device) -> tuple[Tensor, ...]:
        """(basis (2·nf, 1, W), mel (nf, M), μ (M,), σ (M,)) in ``dtype`` on ``device``."""
        key = (dtype, device)
        if key not in self._tables:
            c = self.cfg
            mel = mel_filterbank(c.n_fft, c.n_mels, c.sample_rate, c.fmin, c.fmax).T
            mean = torch.zeros(c.n_mels) if c.mean is None else torch.tensor(c.mean)
            std = torch.ones(c.n_mels) if c.std is None else torch.tensor(c.std)
            self._tables[key] = tuple(
                t.double().contiguous().to(dtype=dtype, device=device)
                for t in (dft_basis(c), mel, mean, std)
            )
        return self._tables[key]

    def n_frames(self, length: int) -> int:
        return length // self.hop

    def frames(self, xs: Tensor) -> Tensor:
        """``xs (B, 1, (F−1)·R + W)`` → features ``(B, F, n_mels)`` of its F frames."""
        _, mel, mean, std = self.tables(xs.dtype, xs.device)
        window = self.window(xs.dtype, xs.device)
        f = xs[:, 0].unfold(-1, self.win, self.hop)  # (B, F, W): frame k = f[:, k]
        X = torch.fft.rfft(f * window, n=self.cfg.n_fft)  # (B, F, nf)
        power = X.real.square() + X.imag.square()
        return (torch.log(power @ mel + self.cfg.log_floor) - mean) / std

    def window(self, dtype: torch.dtype, device: torch.device) -> Tensor:
        """The Hann window ``(W,)`` in ``dtype`` on ``device`` (built in float64, cached)."""
        key = (dtype, device)
        if key not in self._windows:
            self._windows[key] = hann(self.cfg).to(dtype=dtype, device=device)
        return self._windows[key]

    def forward(self, x: Tensor) -> Tensor:
        B, L, _ = x.shape
        if L < self.hop:
            return x.new_zeros(B, 0, self.n_mels)
        xs = F.pad(x.transpose(1, 2), (self.win - self.hop, 0))  # x[<0] = 0
        z = self.frames(xs[..., : (self.n_frames(L) - 1) * self.hop + self.win])  # (B, F, M)
        beta = self.cfg.cmn_beta
        return z if beta is None else z - ema_mean(z, beta)


class LogMelStep(nn.Module):
    """Step form of :class:`LogMel`: ``x (B, T, 1)`` any T ≥ 1 → the frames it completes.

    State: ``frontend.buffer`` (B, W−1) the last W−1 samples, ``frontend.phase`` (1,) int64
    samples seen mod R (shared by the batch); with ``cmn_s`` also ``frontend.cmn`` (B, M)
    the running sum m and ``frontend.cmn_weight`` (1,) its weight w."""

    def __init__(self, frontend: LogMel, dtype: torch.dtype = torch.float32):
        super().__init__()
        self.f, self.dtype = LogMel(frontend.cfg), dtype
        self.cfg, self.win, self.hop = frontend.cfg, frontend.win, frontend.hop

    def init_state(self, batch: int, device: torch.device | None = None) -> dict[str, Tensor]:
        state = {
            "frontend.buffer": torch.zeros(batch, self.win - 1, dtype=self.dtype, device=device),
            "frontend.phase": torch.zeros(1, dtype=torch.int64, device=device),
        }
        if self.cfg.cmn_s is not None:
            state["frontend.cmn"] = torch.zeros(
                batch, self.cfg.n_mels, dtype=self.dtype, device=device
            )
            state["frontend.cmn_weight"] = torch.zeros(1, dtype=self.dtype, device=device)
        return state

    def cmn(self, z: Tensor, state: dict[str, Tensor], new: dict[str, Tensor]) -> Tensor:
        """The running per-band mean taken away from the chunk's frames ``z (B, F, M)``,
        frame by frame (the recurrence of the module docstring); m and w go into ``new``."""
        beta = self.cfg.cmn_beta
        m, w = state["frontend.cmn"], state["frontend.cmn_weight"]
        out = []
        for k in range(z.shape[1]):
            w = beta * w + (1 - beta)
            m = beta * m + (1 - beta) * z[:, k]
            out.append(z[:, k] - m / w)
        new["frontend.cmn"], new["frontend.cmn_weight"] = m, w
        return torch.stack(out, 1)

    def forward(self, x: Tensor, state: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        """``x (B, T, 1)`` → frames ``(B, F, n_mels)``, F = ⌊(p + T)/R⌋, and the new state."""
        p, T, R, W = int(state["frontend.phase"][0]), x.shape[1], self.hop, self.win
        ext = torch.cat([state["frontend.buffer"], x[..., 0]], 1)  # (B, W−1+T)
        n = (p + T) // R
        new = {
            "frontend.buffer": ext[:, -(W - 1) :],
            "frontend.phase": torch.full_like(state["frontend.phase"], (p + T) % R),
        }
        cmn = self.cfg.cmn_s is not None
        if cmn:  # unchanged unless a frame completes
            new["frontend.cmn"] = state["frontend.cmn"]
            new["frontend.cmn_weight"] = state["frontend.cmn_weight"]
        if n == 0:
            return x.new_zeros(x.shape[0], 0, self.cfg.n_mels), new
        start = R - p - 1  # frame i ends at chunk sample R − p − 1 + i·R
        z = self.f.frames(ext[:, None, start : start + (n - 1) * R + W])  # (B, n, M)
        return (self.cmn(z, state, new) if cmn else z), new


def hold(y: Tensor, held: Tensor, phase: int, length: int, hop: int) -> Tensor:
    """Per-sample outputs from frame outputs: ``y (B, F, d)`` of the frames completed in a
    chunk of ``length`` samples that started at phase p → ``(B, length, d)`` where sample t
    gets the last frame complete at t (``held (B, d)``, the previous chunk's last frame, or
    zeros, before the chunk's first frame)."""
    ext = torch.cat([held[:, None], y], 1)  # (B, 1+F, d)
    idx = (phase + torch.arange(1, length + 1, device=y.device)) // hop  # frames done by t
    return ext[:, idx]
