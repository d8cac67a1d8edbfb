"""Streaming-exact scale normalisation front end: the model's answer in any signal units.

With ``frontend = {"kind": "scalenorm", ...}`` a :class:`~liquid_stream.nn.model.LiquidS4Model`
takes raw biosignal samples ``x (B, L, C)`` in whatever units the sensor writes (ADC counts,
mV, "NU") and each channel is first standardised by its own causal running mean and
running RMS (by default; the ``log`` and ``shared_scale`` options below), then
average-pooled by R samples, so the stack runs at ``sample_rate / R``.
Why: a fixed input standardisation learnt from the training set makes the model depend on
the units of the signal (measured: the same PPG in raw ADC units read ~91 bpm whatever its
rate); a running normalisation makes the input exactly invariant to ``x → a·x + b``
(a > 0), and the pooling makes CPU training affordable (125 Hz → 25 Hz with R = 5).

Per channel, with β = exp(−1/(τ·fs)) (time constant τ seconds) and the stream's first
sample x₀ as the origin (so large offsets cost no float32 precision), the centred input

    u_t = x_t − x₀                                      (``log`` false, the default)
    u_t = ln(clamp(max(x_t, φ) / max(x₀, φ), 1e−30, 1e30)),  φ = 1e−30     (``log`` true)

and then (u₀ = 0 in both: the origin is 0 in u; d₀ = 0, so z₀ = 0)

    w_t = 1 − β^{t+1}                                   total weight of the samples so far
    m_t = β·m_{t−1} + (1−β)·u_t,           m_{−1} = 0
    μ_t = m_t / w_t                                     exponentially weighted mean of u
    d_t = u_t − μ_t
    v_t = β·v_{t−1} + (1−β)·d_t²,          v_{−1} = 0
    σ²_t = v_t / w_t                                    exponentially weighted variance
    z_{t,c} = clip(d_{t,c} / sqrt(σ²_{t,s(c)} + ε), −c, c)
              s(c) = c (own scale, the default) or s(c) = 0 (``shared_scale``: channel 0's)
    f_k = (1/R)·Σ_{t=kR}^{kR+R−1} z_t                   frame k, complete at sample kR+R−1
    g_k = (1/R)·Σ_{t=kR}^{kR+R−1} |z_t − z_{t−1}|       (``slope`` only; z_{−1} = 0)

Default (``log`` and ``shared_scale`` false): under x → a·x + b (a > 0), x₀ and μ move
with the map, d and sqrt(σ²) scale by a, so z is unchanged up to ε (ε = 1e-12 in squared
signal units: invisible for any real sensor's scale). A flat stretch (sensor off) makes σ²
decay; the clip at ±c bounds what the stack sees when the signal comes back (and keeps
every state finite).

Why the two options: a pulse oximeter's SpO2 is carried by the ratio of ratios
R = (AC/DC)_red / (AC/DC)_ir of its two raw intensity channels. The default destroys it
twice: its offset invariance removes DC, and dividing each channel by its own RMS removes
the AC amplitude ratio between the channels.

* ``log``: the channels are Beer–Lambert intensities, x = DC·exp(−k·p(t)); u = ln(x/x₀)
  removes any per-channel gain a > 0 exactly (u is invariant to x → a·x), and
  d = u − μ ≈ −k·(p − p̄) is the AC/DC modulation depth. Not invariant to an offset
  x → x + b: an intensity has a physical zero. A sample ≤ φ (zero, negative, 1e-38) reads
  as the floor φ; the clamp keeps u finite (|u| ≤ ln 1e30 ≈ 69) and the clip at ±c keeps z
  bounded. The ratio is taken before the log (precision for x ≈ x₀ in float32). A stream
  must start on a real sample: with x₀ ≤ φ every x ≥ 1 clamps at the same u = ln 1e30
  and the frames stay 0 until the stream is restarted.
* ``shared_scale``: every channel is divided by channel 0's running RMS (channel 0 is the
  reference: an oximeter's IR), so amplitude ratios between channels survive; z is still
  invariant to a gain common to all channels (and, without ``log``, to an offset per
  channel). With ``log`` too, the frames carry R (std(f_red)/std(f_ir) ≈ R for a pulse
  inside the clip), and z is invariant to a separate gain per channel. The variance
  state stays per channel (σ²_{t,c} for every c, only column 0 used), so the state
  layout does not change.

``slope``: each channel also gives g_k, the mean absolute slope of z within frame k (its
total variation over the frame, per sample), so the frames are ``(f_k, g_k)`` per channel
(``n_features`` = 2·C, every channel's f first, then every channel's g). Why: pooling R
samples into their mean cancels a QRS complex against its own S wave (at R = 10 a QRS of
~80 ms is one frame, up then down); g_k keeps it: on an ECG g is large for the frame that
holds the QRS and near 0 elsewhere, whatever the QRS's polarity. g is a function of z, so
it keeps z's invariance to x → a·x + b. Off by default (every shipped model).

A sequence of L samples gives ⌊L/R⌋ frames (the last L mod R samples wait for the next).
The training forward computes m and v blockwise (:func:`~liquid_stream.nn.ema.ema_mean`: a
Toeplitz product within blocks of 64 samples, a scan across them); the step form runs the
recurrence literally.

Streaming (:class:`ScaleNormStep`): state ``frontend.origin`` (B, C) x₀,
``frontend.mean`` (B, C) m, ``frontend.var`` (B, C) v (every channel's, also with
``shared_scale``), ``frontend.weight`` (1,) w,
``frontend.acc`` (B, C) the sum of z over the samples of the frame in progress, and
``frontend.phase`` (1,) int64 samples seen mod R (shared by the batch, like the log-mel
front end's); with ``slope`` also ``frontend.last`` (B, C) z_{t−1} and ``frontend.slope``
(B, C) the sum of |z_t − z_{t−1}| over the frame in progress.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
from torch import Tensor, nn

from .ema import ema_mean
from .frontend import check_fields, config_from_dict


@dataclass(frozen=True)
class ScaleNormConfig:
    """Scale normalisation parameters; each default defined here once.

    τ = 8 s: a few breaths and many heart beats, short enough to follow a change of sensor
    gain within ~30 s (4τ); R = 5 turns BIDMC's 125 Hz into 25 Hz, which keeps HR up to
    180 bpm (3 Hz) and its harmonics far below the 12.5 Hz Nyquist rate.

    ``log`` false, ``shared_scale`` false: the default front end (each channel centred on its
    first sample, divided by its own running RMS: invariant to x → a·x + b). ``log``: the
    channels are positive intensities, centred as u = ln(x/x₀) (invariant to a gain per
    channel, not to an offset). ``shared_scale``: every channel divided by channel 0's
    running RMS (amplitude ratios between channels kept). Both: a pulse oximeter's (IR, RED)
    with IR as channel 0 (the module docstring).
    """

    sample_rate: float = 125.0
    channels: int = 1
    tau_s: float = 8.0
    hop: int = 5
    clip: float = 8.0
    eps: float = 1e-12
    log: bool = False
    shared_scale: bool = False
    slope: bool = False

    def __post_init__(self) -> None:
        positive = ("sample_rate", "tau_s", "clip", "eps")
        check_fields(self, ("channels", "hop"), positive)
        for name in ("log", "shared_scale", "slope"):
            if not isinstance(v := getattr(self, name), bool):
                raise ValueError(f"frontend.{name} must be true or false, got {v!r}")
        for name in positive:
            if getattr(self, name) <= 0:
                raise ValueError(f"frontend.{name} must be positive, got {getattr(self, name)!r}")

    @property
    def beta(self) -> float:
        """The per-sample decay β = exp(−1/(τ·fs))."""
        return math.exp(-1.0 / (self.tau_s * self.sample_rate))

    @property
    def n_features(self) -> int:
        """C frame means, and with ``slope`` C frame slopes after them."""
        return self.channels * (2 if self.slope else 1)

    @classmethod
    def from_dict(cls, d: dict | None) -> ScaleNormConfig:
        return config_from_dict(cls, d)

    def to_dict(self) -> dict:
        return {"kind": "scalenorm", **asdict(self)}


LOG_FLOOR = 1e-30  # φ: a sample ≤ φ reads as φ in ``log`` mode
LOG_RATIO = (1e-30, 1e30)  # the clamp of max(x, φ)/max(x₀, φ) before the log


def centred(x: Tensor, origin: Tensor, log: bool) -> Tensor:
    """u = x − x₀, or with ``log`` u = ln(clamp(max(x, φ)/max(x₀, φ), 1e−30, 1e30));
    ``origin`` x₀ broadcast against ``x``. u = 0 where x = x₀ (exactly, in any dtype)."""
    if not log:
        return x - origin
    ratio = x.clamp_min(LOG_FLOOR) / origin.clamp_min(LOG_FLOOR)
    return torch.log(torch.clamp(ratio, *LOG_RATIO))


def scale_var(var: Tensor, shared: bool) -> Tensor:
    """``var (..., C)`` → the variance each channel is divided by: its own, or with
    ``shared`` channel 0's ``(..., 1)`` (broadcast over the channels)."""
    return var[..., :1] if shared else var


class ScaleNorm(nn.Module):
    """``x (B, L, C)`` → frames ``(B, ⌊L/R⌋, C)`` (see the module docstring). No parameters."""

    def __init__(self, cfg: ScaleNormConfig):
        super().__init__()
        self.cfg = cfg
        self.hop, self.n_features = cfg.hop, cfg.n_features

    def n_frames(self, length: int) -> int:
        return length // self.hop

    def normalise(self, x: Tensor) -> Tensor:
        """Per-sample ``z (B, L, C)`` before pooling."""
        c = self.cfg
        origin = x[:, :1]  # (B, 1, C)
        u = centred(x, origin, c.log)  # (B, L, C); offsets cost no precision: u₀ = 0
        d = u - ema_mean(u, c.beta)
        var = scale_var(ema_mean(d * d, c.beta), c.shared_scale)  # (B, L, C) or (B, L, 1)
        return torch.clamp(d / torch.sqrt(var + c.eps), -c.clip, c.clip)

    def forward(self, x: Tensor) -> Tensor:
        """``x (B, L, C)`` → frames ``(B, ⌊L/R⌋, n_features)``."""
        B, L, C = x.shape
        n = self.n_frames(L)
        if n == 0:
            return x.new_zeros(B, 0, self.n_features)
        z = self.normalise(x)[:, : n * self.hop]  # (B, nR, C)
        f = z.reshape(B, n, self.hop, C).mean(2)  # (B, n, C)
        if not self.cfg.slope:
            return f
        dz = torch.diff(z, dim=1, prepend=z.new_zeros(B, 1, C)).abs()  # |z_t − z_{t−1}|
        return torch.cat([f, dz.reshape(B, n, self.hop, C).mean(2)], -1)  # (B, n, 2C)


class ScaleNormStep(nn.Module):
    """Step form of :class:`ScaleNorm`: ``x (B, T, C)`` any T ≥ 1 → the frames it completes,
    the recurrence of the module docstring run sample by sample."""

    def __init__(self, frontend: ScaleNorm, dtype: torch.dtype = torch.float32):
        super().__init__()
        self.cfg, self.dtype, self.hop = frontend.cfg, dtype, frontend.hop
        self.n_features = frontend.n_features

    def init_state(self, batch: int, device: torch.device | None = None) -> dict[str, Tensor]:
        C = self.cfg.channels

        def zeros(*shape):
            return torch.zeros(*shape, dtype=self.dtype, device=device)

        state = {
            "frontend.origin": zeros(batch, C),
            "frontend.mean": zeros(batch, C),
            "frontend.var": zeros(batch, C),
            "frontend.weight": zeros(1),
            "frontend.acc": zeros(batch, C),
            "frontend.phase": torch.zeros(1, dtype=torch.int64, device=device),
        }
        if self.cfg.slope:
            state.update({"frontend.last": zeros(batch, C), "frontend.slope": zeros(batch, C)})
        return state

    def forward(self, x: Tensor, state: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        """``x (B, T, C)`` → frames ``(B, F, C)``, F = ⌊(p + T)/R⌋, and the new state."""
        c, R = self.cfg, self.hop
        beta = c.beta
        origin, m, v = state["frontend.origin"], state["frontend.mean"], state["frontend.var"]
        w, acc = state["frontend.weight"], state["frontend.acc"]
        last, sacc = state.get("frontend.last"), state.get("frontend.slope")
        p = int(state["frontend.phase"][0])
        if float(w[0]) == 0.0:  # the stream's first sample is the origin
            origin = x[:, 0]
        frames = []
        for t in range(x.shape[1]):
            ut = centred(x[:, t], origin, c.log)  # (B, C)
            w = beta * w + (1 - beta)
            m = beta * m + (1 - beta) * ut
            d = ut - m / w
            v = beta * v + (1 - beta) * d * d
            sd = torch.sqrt(scale_var(v, c.shared_scale) / w + c.eps)  # (B, C) or (B, 1)
            zt = torch.clamp(d / sd, -c.clip, c.clip)
            acc = acc + zt
            if c.slope:
                sacc, last = sacc + (zt - last).abs(), zt
            p += 1
            if p == R:
                frames.append(torch.cat([acc, sacc], -1) / R if c.slope else acc / R)
                acc, p = torch.zeros_like(acc), 0
                sacc = None if sacc is None else torch.zeros_like(sacc)
        new = {
            "frontend.origin": origin,
            "frontend.mean": m,
            "frontend.var": v,
            "frontend.weight": w,
            "frontend.acc": acc,
            "frontend.phase": torch.full_like(state["frontend.phase"], p),
        }
        if c.slope:
            new.update({"frontend.last": last, "frontend.slope": sacc})
        if not frames:
            return x.new_zeros(x.shape[0], 0, self.n_features), new
        return torch.stack(frames, 1), new
