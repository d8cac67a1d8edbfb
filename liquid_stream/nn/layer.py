"""The Liquid-S4 layer: S4 convolution + D·u + the liquid (PB or KB) term, or the exact
linear-LTC recurrence (``liquid="ltc"``, :mod:`liquid_stream.nn.ltc`).

For each of H channels (batch-first input ``u (B, L, H)``):

    y[t] = Σ_{j≤t} K̄[j] u[t−j] + D u[t] + y_liquid[t]

with K̄ from a DPLR (S4-LegS) or diagonal (S4D) kernel and y_liquid from
:mod:`liquid_stream.nn.liquid`. Everything is causal unless ``bidirectional=True``,
which adds an anti-causal kernel over the future (offline use only; such a
layer has no streaming form).

The layer equals the recurrence (docs/design.md §2)

    x_t = Ā x_{t−1} + B̄ u_t,   y_t = s·Re(C x_t) + D u_t   (+ liquid terms)

with the matrices of :meth:`LiquidS4.ssm_matrices`, to float64 precision. With
``liquid="ltc"`` the layer is instead the input-dependent recurrence of
:mod:`liquid_stream.nn.ltc` (evaluated by a scan, not a convolution).
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .cauchy import BACKENDS
from .diag import DiagKernel
from .dplr import DPLRKernel
from .fftconv import causal_fft_conv
from .kernel_base import Discrete
from .liquid import (
    LIQUID_KINDS,
    MAX_LIQUID_ORDER,
    correlation_signals,
    liquid_inputs,
    pb_coefficients,
    pb_term,
    shift,
)
from .ltc import LTCSystem, ltc_scan, ltc_system


def check_input(u: Tensor, width: int, name: str = "u") -> None:
    """Raise a clear ValueError unless ``u`` is a finite (B, L, width) float tensor."""
    if not isinstance(u, Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(u).__name__}")
    if u.dim() != 3 or u.shape[-1] != width:
        raise ValueError(f"{name} must have shape (B, L, {width}), got {tuple(u.shape)}")
    if not u.is_floating_point():
        raise ValueError(f"{name} must be a floating-point tensor, got {u.dtype}")
    if u.shape[1] == 0:
        raise ValueError(f"{name} has length 0")
    if not torch.isfinite(u).all():
        raise ValueError(f"{name} contains NaN or infinite values")


SSM_MODES = ("dplr", "diag")
NOT_STREAMABLE = (
    "a bidirectional (non-causal) layer has no step form: the model cannot be streamed; "
    "train it with bidirectional=False"
)


@dataclass(frozen=True)
class SSMConfig:
    """The arguments of one :class:`LiquidS4` layer but its width H, defined once: the
    layer, the block and :class:`~liquid_stream.nn.model.LiquidS4Model` take this object.
    Checkpoints and YAML configs hold its fields flat (``d_state: 64``, ``mode: dplr``, …):
    ``SSMConfig(**flat)`` / :meth:`from_dict` and :meth:`as_dict` convert; the model and the
    layer also take the flat keywords (:func:`ssm_keywords`).

    Attributes:
        d_state: N; the state has N // 2 conjugate pairs (N odd drops the real mode).
        mode: ``"dplr"`` (S4-LegS, Cauchy + Woodbury) or ``"diag"`` (S4D, Vandermonde).
        liquid: ``None``, ``"pb"`` (powers of B), ``"kb"`` (kernel × B) or ``"ltc"`` (the exact
            linear-LTC recurrence x_t = (Ā + B̃ tanh(u_t)) x_{t−1} + B̄ u_t; diag mode,
            causal; computed by a parallel scan instead of a convolution).
        liquid_order: P, highest correlation order (2 … 10; PB/KB).
        liquid_len: L̃, window of the PB correlation kernel.
        dt_min, dt_max: range of the log-uniform initial step sizes Δ.
        bidirectional: add an anti-causal kernel (non-streamable).
        init: diagonal init for ``mode="diag"``: ``legs``, ``lin``, ``inv``, or
            ``legs-inside`` (LegS with B scaled per mode so that the LTC liquid coefficient
            is B̄ itself at init: |B̄| ≤ ½ρ(1 − |Ā|), :class:`~liquid_stream.nn.diag.DiagKernel`).
        disc: ``bilinear`` (default) or ``zoh`` (diag only).
        backend: Cauchy backend for dplr: ``auto``, ``torch`` or ``keops``.

    Invalid combinations raise a ValueError naming the argument when the object is made.
    """

    d_state: int = 64
    mode: str = "dplr"
    liquid: str | None = None
    liquid_order: int = 2
    liquid_len: int = 1
    dt_min: float = 0.001
    dt_max: float = 0.1
    bidirectional: bool = False
    init: str = "legs"
    disc: str = "bilinear"
    backend: str = "auto"

    def __post_init__(self) -> None:
        liquid, mode = self.liquid, self.mode
        if liquid not in LIQUID_KINDS:
            raise ValueError(f"liquid must be None, 'pb', 'kb' or 'ltc', got {liquid!r}")
        if liquid == "ltc" and (mode != "diag" or self.bidirectional):
            raise ValueError(
                "liquid='ltc' is the causal diagonal recurrence: it needs mode='diag' and "
                f"bidirectional=False (got mode={mode!r}, bidirectional={self.bidirectional})"
            )
        order, length = self.liquid_order, self.liquid_len
        if not isinstance(order, int) or not 2 <= order <= MAX_LIQUID_ORDER:
            raise ValueError(f"liquid_order must be an int in 2…{MAX_LIQUID_ORDER}, got {order!r}")
        if not isinstance(length, int) or length < 1:
            raise ValueError(f"liquid_len must be a positive int, got {length!r}")
        if self.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {self.backend!r}")
        if mode not in SSM_MODES:
            raise ValueError(f"mode must be 'dplr' or 'diag', got {mode!r}")
        if mode == "dplr" and self.init != "legs":
            raise ValueError("mode='dplr' is initialised with S4-LegS only (init='legs')")

    @classmethod
    def from_dict(cls, flat: dict) -> SSMConfig:
        """The SSM fields of a flat dict (e.g. a model's ``config``; other keys ignored)."""
        return cls(**{k: flat[k] for k in SSM_FIELDS if k in flat})

    def as_dict(self) -> dict:
        """The fields as a flat dict (what checkpoints and YAML configs hold)."""
        return dataclasses.asdict(self)

    @property
    def is_causal(self) -> bool:
        """True when the layer's y[t] depends only on u[≤ t] (it has a step form)."""
        return not self.bidirectional

    def check_streamable(self) -> None:
        """ValueError (:data:`NOT_STREAMABLE`) unless the layer has a step form: the one
        place that refuses to stream a bidirectional layer or a model holding one."""
        if not self.is_causal:
            raise ValueError(NOT_STREAMABLE)


SSM_FIELDS = tuple(f.name for f in dataclasses.fields(SSMConfig))


def ssm_keywords(init: Callable) -> Callable:
    """Decorator for an ``__init__`` that takes :class:`SSMConfig`'s fields as ``**ssm``: its
    published signature (``inspect.signature``, ``help``) lists them as parameters with
    SSMConfig's defaults, in SSMConfig's order, before its own keyword-only ones: where
    ``init`` has ``*fields`` they may also be given by position, else they are keyword-only.
    These are the flat keywords of checkpoints and YAML configs (training/config.py reads
    the model's keys and defaults from this signature); the defaults stay defined once, in
    :class:`SSMConfig`. The function itself is unchanged."""
    sig = inspect.signature(init)
    params = sig.parameters.values()
    positional = any(p.kind is p.VAR_POSITIONAL for p in params)
    own = [p for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    at = next((i for i, p in enumerate(own) if p.kind is p.KEYWORD_ONLY), len(own))
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD if positional else inspect.Parameter.KEYWORD_ONLY
    fields = [
        inspect.Parameter(f.name, kind, default=f.default, annotation=f.type)
        for f in dataclasses.fields(SSMConfig)
    ]
    init.__signature__ = sig.replace(parameters=[*own[:at], *fields, *own[at:]])
    return init


def given_fields(init: Callable, fields: tuple, ssm: dict) -> dict:
    """The :class:`SSMConfig` fields a call of ``init`` (decorated with :func:`ssm_keywords`)
    gave, by position (``fields``, in SSMConfig's order) and by name (``ssm``); TypeError,
    as Python's own, for too many, repeated or unknown ones."""
    where = f"{init.__qualname__}()"
    if len(fields) > len(SSM_FIELDS):
        raise TypeError(
            f"{where} takes at most {len(SSM_FIELDS)} positional SSM fields, got {len(fields)}"
        )
    given = dict(zip(SSM_FIELDS[: len(fields)], fields, strict=True))
    for k in ssm:
        if k not in SSM_FIELDS:
            raise TypeError(f"{where} got an unexpected keyword argument {k!r}")
        if k in given:
            raise TypeError(f"{where} got multiple values for argument {k!r}")
    return {**given, **ssm}


def call_arguments(init: Callable, args: dict, ssm: dict) -> dict:
    """The arguments of a call of ``init`` (decorated with :func:`ssm_keywords`) as one flat
    dict in its published order, defaults filled in: ``args`` its named arguments (e.g. its
    ``locals()``), ``ssm`` its ``**ssm``. TypeError for a keyword it does not take."""
    defaults = {f.name: f.default for f in dataclasses.fields(SSMConfig)}
    values = {**defaults, **given_fields(init, (), ssm), **args}
    return {k: values[k] for k in inspect.signature(init).parameters if k != "self"}


class LiquidS4(nn.Module):
    """Liquid-S4 SSM layer, ``(B, L, H) → (B, L, H)`` (before the activation).

    Args:
        d_model: H, the number of independent channels.
        d_state, mode, …, backend: the fields of :class:`SSMConfig` (by position or name).
        config: a whole :class:`SSMConfig` instead (the fields given beside it replace its
            own): ``LiquidS4(H, config=SSMConfig(mode="diag"))`` is ``LiquidS4(H, mode="diag")``.
    """

    @ssm_keywords
    def __init__(self, d_model: int, *fields, config: SSMConfig | None = None, **ssm):
        super().__init__()
        if not isinstance(d_model, int) or d_model < 1:
            raise ValueError(f"d_model must be a positive int, got {d_model!r}")
        given = given_fields(LiquidS4.__init__, fields, ssm)
        cfg = SSMConfig(**given) if config is None else dataclasses.replace(config, **given)
        channels = 2 if cfg.bidirectional else 1
        args = (d_model, cfg.d_state, channels, cfg.dt_min, cfg.dt_max, cfg.disc)
        if cfg.mode == "dplr":
            self.kernel = DPLRKernel(*args, cfg.backend)
        else:
            self.kernel = DiagKernel(*args, cfg.init)
        self.config = cfg
        self.d_model, self.d_state, self.mode = d_model, cfg.d_state, cfg.mode
        self.liquid, self.liquid_order = cfg.liquid, cfg.liquid_order
        self.liquid_len, self.bidirectional = cfg.liquid_len, cfg.bidirectional
        self.D = nn.Parameter(torch.randn(d_model))

    @property
    def is_causal(self) -> bool:
        """True when y[t] depends only on u[≤ t] (i.e. the layer can stream)."""
        return self.config.is_causal

    def forward(self, u: Tensor, rate: float = 1.0, check: bool = True) -> Tensor:
        """``u (B, L, H)`` → ``(B, L, H)``; ``rate`` scales Δ (2.0 for half-rate input).
        ``check=False`` skips the input check (:func:`check_input`) for a caller that
        checked already: a model checks its input once, not at each of its layers (the
        finiteness check on every layer cost ~4 % of a KWS training step)."""
        if check:
            check_input(u, self.d_model)
        if u.dtype in (torch.float16, torch.bfloat16):  # mixed precision: the SSM runs in fp32
            with torch.autocast(u.device.type, enabled=False):
                return self.forward(u.float(), rate, check=False)
        x = u.transpose(1, 2).contiguous()  # (B, H, L)
        if self.liquid == "ltc":
            y, _ = ltc_scan(x, ltc_system(self.kernel, rate, x.dtype))
            return (y + self.D[:, None] * x).transpose(1, 2).contiguous()
        L = x.shape[-1]
        disc = self.kernel.discretize(rate)
        b, signals = disc.B_bar[None], x[None]  # (R, H, Mf), (R, B, H, L)
        if self.liquid == "kb":
            b = torch.cat([b, liquid_inputs(disc, self.liquid_order)])
            signals = torch.cat([signals, correlation_signals(x, self.liquid_order)])
        K = self.kernel.kernel(L, disc, b).to(x.dtype)  # (channels, R, H, L)
        y = causal_fft_conv(K[0], signals)  # (B, H, L)
        if self.bidirectional:  # anti-causal part: lags −1 … −(L−1)
            y_rev = causal_fft_conv(K[1, :1], shift(x.flip(-1), 1)[None])
            y = y + y_rev.flip(-1)
        y = y + self.D[:, None] * x
        if self.liquid == "pb":
            y = y + pb_term(x, disc, self.liquid_order, self.liquid_len)
        # contiguous (B, L, H): the block's GELU backward on the transposed view cost 4×
        # its time (measured: 5.4 vs 1.5 ms at 16 × 200 × 128; the step 19 % faster)
        return y.transpose(1, 2).contiguous()

    def discretize(self, rate: float = 1.0, dtype: torch.dtype = torch.float64) -> Discrete:
        """The discrete system computed from a ``dtype`` copy of the parameters (no grad)."""
        with torch.no_grad():
            return copy.deepcopy(self.kernel).to(dtype).discretize(rate)

    def ssm_matrices(self, rate: float = 1.0) -> dict:
        """The exact discrete system of this layer in float64 / complex128.

        Returns ``A_bar (H, M, M)``, ``B_bar (H, M)``, ``C (H, M)``, ``D (H,)``, ``scale``,
        in the liquid basis, such that x_t = Ā x_{t−1} + B̄ u_t,
        y_t = scale·Re(C x_t) + D u_t reproduces the S4 part of :meth:`forward`; the liquid
        terms follow from B̄^{∘p} and C as in :mod:`liquid_stream.nn.liquid`. Also returns
        ``pb_coef (P−1, H)`` and the liquid settings. For ``liquid="ltc"`` these are the
        linear part of its recurrence; :func:`liquid_stream.nn.ltc.ltc_system` gives the rest.
        """
        if not self.is_causal:
            raise ValueError("a bidirectional layer has no causal recurrence (ssm_matrices)")
        disc = self.discretize(rate)
        return {
            "A_bar": self.kernel.dense_A_bar(disc),
            "B_bar": disc.B_bar,
            "C": disc.C[0],
            "D": self.D.detach().double().clone(),
            "scale": disc.scale,
            "pb_coef": pb_coefficients(disc, self.liquid_order),
            "liquid": self.liquid,
            "liquid_order": self.liquid_order,
            "liquid_len": self.liquid_len,
        }


# ----------------------------------------------------------------------------------
# Step (streaming) form, next to the convolutional form above.
# ----------------------------------------------------------------------------------


def _kernel_dense(mats: dict, b: Tensor, n: int) -> Tensor:
    """K_r[j] = s·Re(C Āʲ b_r), j < n, by the literal recurrence (float64)."""
    A, C, s = mats["A_bar"], mats["C"], mats["scale"]
    x, K = b, []
    for _ in range(n):
        K.append(s * (C * x).sum(-1).real)
        x = torch.einsum("hmn,rhn->rhm", A, x)
    return torch.stack(K, -1)


def _diagonal_form(mats: dict, b: Tensor, cond_max: float, check_len: int = 2048):
    """Diagonalise Ā in float64; returns (λ, b', c', scale), or None where that is unsafe.

    Safe means: every channel's eigenvector matrix has condition number ≤ ``cond_max``
    and the diagonal system's kernel equals the dense one to 1e-10 (relative) over
    ``check_len`` steps. Conjugate pairs are folded into one mode with scale 2 when the
    folded system passes the same check.
    """
    A, C, s = mats["A_bar"], mats["C"], mats["scale"]
    if mats["A_bar_is_diag"]:
        return torch.diagonal(A, dim1=-2, dim2=-1), b, C, s
    lam, V = torch.linalg.eig(A)
    if torch.linalg.cond(V).max() > cond_max:
        return None
    b_d = torch.einsum("hmn,rhn->rhm", torch.linalg.inv(V), b)
    c_d = torch.einsum("hm,hmn->hn", C, V)
    candidates = []
    pos = lam.imag > 0
    if bool((pos.sum(-1) * 2 == lam.shape[-1]).all()):  # fold conjugate pairs
        keep = torch.argsort((~pos).to(torch.int8), dim=-1, stable=True)[:, : lam.shape[-1] // 2]
        rows = keep.expand(b_d.shape[0], -1, -1)
        candidates.append((lam.gather(1, keep), b_d.gather(2, rows), c_d.gather(1, keep), 2 * s))
    candidates.append((lam, b_d, c_d, s))
    K_dense = _kernel_dense(mats, b, check_len)
    j = torch.arange(check_len, dtype=torch.float64)
    for lam_c, b_c, c_c, s_c in candidates:
        K = s_c * torch.einsum("hm,rhm,hmj->rhj", c_c, b_c, lam_c[..., None] ** j).real
        if (K - K_dense).abs().max() <= 1e-10 * K_dense.abs().max():
            return lam_c, b_c, c_c, s_c
    return None


class LiquidS4Step(nn.Module):
    """Exact step-wise form of a causal :class:`LiquidS4` for chunks ``(B, T, H)``, any T ≥ 1.

    State (a dict of tensors):
      ``ssm.z``, ``ssm.buf``, ``ssm.fill``  the chunked SSM state (:class:`ChunkedSSM`;
                               R = 1, or 1 + the KB orders, inputs share one transition);
      ``u_buf`` (B, P−1, H)    the last P−1 inputs (liquid models);
      ``w_buf`` (B, L̃−1, H)    the last L̃−1 PB correlation values (PB with L̃ > 1);
      ``ltc.x`` (B, H, M, 2)    for ``liquid="ltc"`` (the only state): x_t as (Re, Im).

    Built from the float64 system of :meth:`LiquidS4.ssm_matrices`: diagonalised when
    that is numerically safe (always for S4D), else a dense real transition. An ``ltc``
    layer keeps its float64-computed coefficients and applies the recurrence itself,
    x_t = (Ā + B̃ tanh(u_t)) x_{t−1} + B̄ u_t, by the scan of its training forward.
    """

    def __init__(
        self,
        layer: LiquidS4,
        sub_block: int = 16,
        max_chunk: int = 4096,
        dtype: torch.dtype = torch.float32,
        rate: float = 1.0,
        cond_max: float = 1e3,
    ):
        super().__init__()
        layer.config.check_streamable()
        from .chunked import ChunkedSSM, diag_to_real

        # Tables are built on the CPU in float64, then moved to the layer's device.
        device = layer.D.device
        self.liquid, self.P, self.L_liq, self.H = (
            layer.liquid,
            layer.liquid_order,
            layer.liquid_len,
            layer.d_model,
        )
        if self.liquid == "ltc":
            self.transition = "ltc"
            with torch.no_grad():  # computed in float64 from the parameters, then cast
                system = ltc_system(layer.kernel, rate, torch.float64)
            self.ltc_scale = system.scale
            for name, t in system.to_real().items():  # (H, M, 2)
                self.register_buffer(f"ltc_{name}", t.to(dtype).contiguous())
            self.register_buffer("D", layer.D.detach().double().to(dtype))
            return
        mats = {
            k: v.cpu() if torch.is_tensor(v) else v for k, v in layer.ssm_matrices(rate).items()
        }
        mats["A_bar_is_diag"] = layer.mode == "diag"
        H = layer.d_model
        b = mats["B_bar"][None]
        if self.liquid == "kb":
            b = torch.cat([b, torch.stack([mats["B_bar"] ** p for p in range(2, self.P + 1)])])
        diag = _diagonal_form(mats, b, cond_max)
        if diag is not None:
            lam, b_d, c_d, s = diag
            A_real = diag_to_real(lam)
            b_real = torch.cat([b_d.real, b_d.imag], -1)
            c_real = torch.cat([s * c_d.real, -s * c_d.imag], -1)
        else:  # dense real form of the conjugate-symmetric DPLR system
            lam = None
            M = mats["A_bar"].shape[-1] // 2
            eye = torch.eye(M, dtype=torch.complex128)
            Tm = torch.cat([torch.cat([eye, 1j * eye], 1), torch.cat([eye, -1j * eye], 1)], 0)
            Tinv = torch.linalg.inv(Tm)
            A_c = Tinv @ mats["A_bar"] @ Tm
            b_c = torch.einsum("mn,rhn->rhm", Tinv, b)
            c_c = mats["scale"] * (mats["C"] @ Tm)
            for name, t in (("A", A_c), ("b", b_c), ("c", c_c)):
                if t.imag.abs().max() > 1e-9 * max(1.0, t.real.abs().max()):
                    raise RuntimeError(f"DPLR system is not conjugate-symmetric ({name})")
            A_real, b_real, c_real = A_c.real, b_c.real, c_c.real
        self.transition = "diag" if lam is not None else "dense"
        self.ssm = ChunkedSSM(A_real, b_real, c_real, lam, sub_block, max_chunk, dtype)
        self.register_buffer("D", mats["D"].to(dtype))
        if self.liquid == "pb":
            self.register_buffer("pb_coef", mats["pb_coef"].to(dtype))  # (P−1, H)
            self.register_buffer("window", torch.ones(H, 1, self.L_liq, dtype=dtype))
        self.to(device)

    @property
    def ltc(self) -> LTCSystem:
        """The LTC coefficients (complex, in the step dtype)."""
        names = ("A_bar", "B_liq", "B_bar", "C")
        return LTCSystem.from_real({k: getattr(self, f"ltc_{k}") for k in names}, self.ltc_scale)

    def init_state(self, batch: int) -> dict[str, Tensor]:
        """Zero state (the convolutional form's u[<0] = 0)."""
        z = self.D.new_zeros
        if self.liquid == "ltc":
            return {"ltc.x": z(batch, self.H, self.ltc_A_bar.shape[1], 2)}
        state = {f"ssm.{k}": v for k, v in self.ssm.init_state(batch).items()}
        if self.liquid is not None:
            state["u_buf"] = z(batch, self.P - 1, self.H)
        if self.liquid == "pb" and self.L_liq > 1:
            state["w_buf"] = z(batch, self.L_liq - 1, self.H)
        return state

    def forward(self, u: Tensor, state: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        """``u (B, T, H)`` → ``y (B, T, H)`` and the state after the chunk.

        Steps: :meth:`correlations` → the chunked SSM on the stacked signals
        (:meth:`ChunkedSSM._chunk <liquid_stream.nn.chunked.ChunkedSSM._chunk>`) → + D·u →
        :meth:`pb_term`; the ONNX exporter (:mod:`liquid_stream.export.to_onnx`) emits the
        same steps under the same names."""
        if self.liquid == "ltc":
            x0 = torch.view_as_complex(state["ltc.x"])
            y, x = ltc_scan(u.transpose(1, 2), self.ltc, x0)
            return (y.transpose(1, 2) + self.D * u), {"ltc.x": torch.view_as_real(x)}
        new: dict[str, Tensor] = {}
        corr: list[Tensor] = []
        if self.liquid is not None:
            corr, new["u_buf"] = self.correlations(u, state["u_buf"])
        signals = [u, *corr] if self.liquid == "kb" else [u]  # KB: one transition, R inputs
        ssm_state = {k[4:]: v for k, v in state.items() if k.startswith("ssm.")}
        y, ssm_state = self.ssm(torch.stack(signals, 2), ssm_state)  # (B, T, R, H) → (B, T, H)
        new.update({f"ssm.{k}": v for k, v in ssm_state.items()})
        y = y + self.D * u
        if self.liquid == "pb":
            mixed, w_buf = self.pb_term(corr, state.get("w_buf"))
            if w_buf is not None:
                new["w_buf"] = w_buf
            y = y + mixed
        return y, new

    def correlations(self, u: Tensor, u_buf: Tensor) -> tuple[list[Tensor], Tensor]:
        """The correlation signals v_p[t] = Π_{i<p} u[t−i], p = 2 … P, of the chunk
        ``u (B, T, H)``, the earlier inputs taken from ``u_buf (B, P−1, H)``; returns
        [v_2, …, v_P] and the new u_buf."""
        P, T = self.P, u.shape[1]
        ext = torch.cat([u_buf, u], 1)  # (B, P−1+T, H)
        v, corr = u, []
        for i in range(1, P):  # v_p = v_{p−1} · u[t−p+1]
            v = v * ext[:, P - 1 - i : P - 1 - i + T]
            corr.append(v)
        return corr, ext[:, -(P - 1) :]

    def pb_term(self, corr: list[Tensor], w_buf: Tensor | None) -> tuple[Tensor, Tensor | None]:
        """The PB term (step form of :func:`~liquid_stream.nn.liquid.pb_term`):
        w[t] = Σ_p pb_coef[p] v_p[t], summed over the last L̃ steps (the earlier L̃−1 values
        in ``w_buf (B, L̃−1, H)``); returns it (B, T, H) and the new w_buf (None for L̃ = 1)."""
        mixed = torch.einsum("ph,pbth->bth", self.pb_coef, torch.stack(corr))
        if self.L_liq == 1:
            return mixed, None
        ext_w = torch.cat([w_buf, mixed], 1)  # (B, L̃−1+T, H)
        mixed = F.conv1d(ext_w.transpose(1, 2), self.window, groups=self.H).transpose(1, 2)
        return mixed, ext_w[:, -(self.L_liq - 1) :]
