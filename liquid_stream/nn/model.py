"""Liquid-S4 blocks and the sequence model (the S4 standard architecture).

Block (pre-norm):   x → norm → LiquidS4 → GELU → dropout → Linear(H→2H) → GLU → + x
Block (post-norm):  x → LiquidS4 → GELU → dropout → Linear(H→2H) → GLU → + x → norm
Model:  Linear(d_input→H) → n blocks → final norm (pre-norm only) → decoder

Decoders (``(B, L, H)`` → logits):
- ``pool``:   mean over time, then Linear(H→d_output)            → ``(B, d_output)``
- ``last``:   the last step, then Linear                          → ``(B, d_output)``
- ``window``: causal mean over the last W steps, then Linear, per step
              (at t < W the mean is over the t + 1 steps seen)     → ``(B, L, d_output)``
- ``pair``:   two sequences per example, ``x (B, 2, L, d_input)`` (LRA retrieval): both
              encoded by the same blocks and mean-pooled to a, b, then
              Linear(4H→H) → GELU → Linear(H→d_output) on [a, b, a·b, a − b] → ``(B, d_output)``;
              offline only (:mod:`liquid_stream.nn.pair`): no per-step output, no step form.

Activation checkpointing (``model.checkpoint_blocks = True``, e.g. ``train.checkpoint_blocks``
for Path-X at L = 16384): in training each block keeps only its input and recomputes its
activations in the backward pass, so activation memory is one block's plus an (B, L, H)
tensor per block. The recomputation leaves BatchNorm running statistics untouched (they
are updated once per step, as without checkpointing); dropout masks are replayed.
"""

from __future__ import annotations

import copy
import math
import numbers
from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..runtime.validate import (
    MAX_STD,
    StreamInputError,
    check_finite_result,
    check_shape,
    check_values,
    input_bound,
)
from .frontend import LogMel, LogMelConfig, LogMelStep, hold
from .kernel_base import SSM_PARAMETER_NAMES, SSMKernel
from .layer import LiquidS4, LiquidS4Step, SSMConfig, call_arguments, check_input, ssm_keywords
from .liquid import causal_window_sum
from .pair import NO_STEPS, NOT_STREAMABLE, PairDecoder
from .scalenorm import ScaleNorm, ScaleNormConfig, ScaleNormStep

STEP_DECODERS = ("pool", "last", "window")  # those with a per-step output and a step form
DECODERS = (*STEP_DECODERS, "pair")
NORMS = ("batch", "layer")


class Norm(nn.Module):
    """BatchNorm1d or LayerNorm over the H features of a ``(B, L, H)`` tensor."""

    def __init__(self, d_model: int, kind: str):
        super().__init__()
        if kind not in NORMS:
            raise ValueError(f"norm must be 'batch' or 'layer', got {kind!r}")
        self.kind = kind
        self.norm = nn.BatchNorm1d(d_model) if kind == "batch" else nn.LayerNorm(d_model)

    def forward(self, x: Tensor) -> Tensor:
        if self.kind == "batch":
            return self.norm(x.transpose(1, 2)).transpose(1, 2)
        return self.norm(x)

    def frozen(self, dtype: torch.dtype) -> nn.Module:
        """The eval-mode map: BatchNorm folded into x·a + b (running statistics), or LayerNorm."""
        if self.kind == "layer":
            return copy.deepcopy(self.norm).to(dtype)
        bn = self.norm
        var = bn.running_var.double() if bn.track_running_stats else None
        if var is None:
            raise ValueError("BatchNorm without running statistics cannot be streamed")
        a = torch.rsqrt(var + bn.eps)
        if bn.affine:
            a = a * bn.weight.detach().double()
        b = -bn.running_mean.double() * a
        if bn.affine:
            b = b + bn.bias.detach().double()
        return _Affine(a.to(dtype), b.to(dtype))


class _Affine(nn.Module):
    """x·a + b over the last (feature) axis: a BatchNorm in eval mode."""

    def __init__(self, a: Tensor, b: Tensor):
        super().__init__()
        self.register_buffer("a", a)
        self.register_buffer("b", b)

    def forward(self, x: Tensor) -> Tensor:
        return x * self.a + self.b


class LiquidS4Block(nn.Module):
    """One residual block around a :class:`LiquidS4` layer of config ``ssm``,
    ``(B, L, H) → (B, L, H)``."""

    def __init__(
        self,
        d_model: int,
        ssm: SSMConfig | None = None,
        norm: str = "batch",
        prenorm: bool = True,
        dropout: float = 0.0,
    ):
        super().__init__()
        self.prenorm = prenorm
        self.norm = Norm(d_model, norm)
        self.ssm = LiquidS4(d_model, config=ssm)
        self.dropout = nn.Dropout(dropout)
        self.out = nn.Linear(d_model, 2 * d_model)

    def forward(self, x: Tensor, rate: float = 1.0) -> Tensor:
        z = self.norm(x) if self.prenorm else x
        z = self.dropout(F.gelu(self.ssm(z, rate, check=False)))  # the model checked x
        z = F.glu(self.out(z), dim=-1)
        x = x + z
        return x if self.prenorm else self.norm(x)


class LiquidS4BlockStep(nn.Module):
    """Step form of :class:`LiquidS4Block` (eval mode): same map, chunk by chunk."""

    def __init__(self, block: LiquidS4Block, dtype: torch.dtype, **step_kwargs):
        super().__init__()
        self.prenorm = block.prenorm
        self.norm = block.norm.frozen(dtype)
        self.ssm = LiquidS4Step(block.ssm, dtype=dtype, **step_kwargs)
        self.out = copy.deepcopy(block.out).to(dtype)

    def init_state(self, batch: int) -> dict[str, Tensor]:
        return self.ssm.init_state(batch)

    def forward(self, x: Tensor, state: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        z = self.norm(x) if self.prenorm else x
        z, state = self.ssm(z, state)
        z = F.glu(self.out(F.gelu(z)), dim=-1)
        x = x + z
        return (x if self.prenorm else self.norm(x)), state


@contextmanager
def _running_stats_frozen(module: nn.Module) -> Iterator[None]:
    """BatchNorm layers of ``module`` normalise as usual but leave their running statistics
    (and ``num_batches_tracked``) as they were: momentum 0 for the duration."""
    saved = []
    for m in module.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.track_running_stats:
            saved.append((m, m.momentum, m.num_batches_tracked.clone()))
            m.momentum = 0.0
    try:
        yield
    finally:
        for m, momentum, tracked in saved:
            m.momentum = momentum
            m.num_batches_tracked.copy_(tracked)


def checkpointed(block: nn.Module, x: Tensor, rate: float) -> Tensor:
    """``block(x, rate)`` with its activations recomputed in the backward pass instead of
    stored; the recomputation (every call after the first) does not touch running stats."""
    from torch.utils.checkpoint import checkpoint

    calls = 0

    def run(x: Tensor) -> Tensor:
        nonlocal calls
        calls += 1
        if calls == 1:
            return block(x, rate)
        with _running_stats_frozen(block):
            return block(x, rate)

    return checkpoint(run, x, use_reentrant=False)


SIZE_ARGS = ("d_input", "d_output", "d_model", "n_layers", "d_state", "decoder_window")


def _check_sizes(config: dict) -> None:
    """ValueError naming the argument unless every size of ``config`` is an int >= 1 and
    ``frontend`` None or a dict (the rest is checked where it is used)."""
    for name in SIZE_ARGS:
        v = config[name]
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive int, got {v!r}")
    frontend = config["frontend"]
    if frontend is not None and not isinstance(frontend, dict):
        raise ValueError(f"frontend must be None or a dict of front-end settings, got {frontend!r}")


def check_rate(rate) -> float:
    """``rate`` as a float; ValueError unless it is a finite number > 0."""
    if (
        isinstance(rate, bool)
        or not isinstance(rate, numbers.Real)
        or not (math.isfinite(rate) and rate > 0)
    ):
        raise ValueError(f"rate must be a finite number > 0, got {rate!r}")
    return float(rate)


FRONTENDS = ("raw", "logmel", "scalenorm")


def build_frontend(spec: dict | None, d_input: int) -> LogMel | ScaleNorm | None:
    """The front end a model config's ``frontend`` dict names: None (``raw``, the samples
    go straight to the encoder), :class:`~liquid_stream.nn.frontend.LogMel` (mono audio →
    log-mel frames) or :class:`~liquid_stream.nn.scalenorm.ScaleNorm` (any channels → running
    scale-normalised, pooled frames; ``channels`` defaults to ``d_input``)."""
    kind = (spec or {}).get("kind", "raw")
    if kind not in FRONTENDS:
        raise ValueError(f"frontend.kind must be one of {FRONTENDS}, got {kind!r}")
    if kind == "raw":
        return None
    if kind == "logmel":
        if d_input != 1:
            raise ValueError(f"a log-mel front end takes mono audio (d_input 1), got {d_input}")
        return LogMel(LogMelConfig.from_dict(spec))
    cfg = ScaleNormConfig.from_dict({"channels": d_input, **spec})
    if cfg.channels != d_input:
        raise ValueError(f"frontend.channels {cfg.channels} differs from d_input {d_input}")
    return ScaleNorm(cfg)


def step_frontend(frontend: LogMel | ScaleNorm, dtype: torch.dtype) -> LogMelStep | ScaleNormStep:
    """The step form of a front end (its state is part of the streaming model's)."""
    if isinstance(frontend, LogMel):
        return LogMelStep(frontend, dtype)
    return ScaleNormStep(frontend, dtype)


class LiquidS4Model(nn.Module):
    """Encoder → stacked Liquid-S4 blocks → decoder.

    ``forward(x (B, L, d_input), rate=1.0)`` returns ``(B, d_output)`` for ``pool``/``last``
    and ``(B, L, d_output)`` for ``window``; ``pair`` takes ``x (B, 2, L, d_input)`` and
    returns ``(B, d_output)``. The layers' arguments (d_state, mode, liquid, …) are the
    fields of :class:`~liquid_stream.nn.layer.SSMConfig`, taken as flat keywords (the form of
    checkpoints and YAML configs; keyword-only, as is every argument after n_layers) and
    given to every block as one SSMConfig. Every constructor argument is kept in
    :attr:`config` (a flat dict), so ``LiquidS4Model(**model.config)`` rebuilds the
    architecture.
    Bad arguments raise a ValueError naming them (the sizes d_input, d_output, d_model,
    n_layers, d_state and decoder_window must be ints >= 1, ``frontend`` None or a dict;
    ``rate`` a finite number > 0).
    """

    @ssm_keywords  # the SSMConfig fields d_state … backend, after n_layers
    def __init__(
        self,
        d_input: int,
        d_output: int,
        d_model: int = 128,
        n_layers: int = 4,
        *,
        norm: str = "batch",
        prenorm: bool = True,
        dropout: float = 0.0,
        decoder: str = "pool",
        decoder_window: int = 1,
        output_scale: float | list[float] = 1.0,
        output_shift: float | list[float] = 0.0,
        frontend: dict | None = None,
        **ssm,
    ):
        super().__init__()
        args = {k: v for k, v in locals().items() if k not in ("self", "__class__", "ssm")}
        self.config = call_arguments(LiquidS4Model.__init__, args, ssm)
        _check_sizes(self.config)
        self.frontend = build_frontend(frontend, d_input)
        if self.frontend is not None and decoder == "pair":
            raise ValueError("a front end is for streaming models, not decoder pair")
        if decoder not in DECODERS:
            raise ValueError(f"decoder must be one of {DECODERS}, got {decoder!r}")
        self.d_input, self.d_output, self.decoder = d_input, d_output, decoder
        self.decoder_window, self.prenorm = decoder_window, prenorm
        d_features = d_input if self.frontend is None else self.frontend.n_features
        self.encoder = nn.Linear(d_features, d_model)
        ssm_config = SSMConfig.from_dict(self.config)  # one for all the layers
        self.blocks = nn.ModuleList(
            LiquidS4Block(d_model, ssm_config, norm, prenorm, dropout) for _ in range(n_layers)
        )
        self.final_norm = Norm(d_model, norm) if prenorm else nn.Identity()
        # [a, b, a·b, a − b] → H, then the head (liquid_stream.nn.pair); offline only
        self.pair_mlp = PairDecoder(d_model) if decoder == "pair" else None
        self.head = nn.Linear(d_model, d_output)
        self.checkpoint_blocks = False  # a training-time switch, not part of the config
        # Fixed output affine y = scale · head(·) + shift (regression targets in physical
        # units; a buffer, not a parameter: it is part of the config, never trained).
        scale = torch.as_tensor(output_scale, dtype=torch.float32).expand(d_output).clone()
        shift = torch.as_tensor(output_shift, dtype=torch.float32).expand(d_output).clone()
        if not (torch.isfinite(scale).all() and (scale != 0).all() and torch.isfinite(shift).all()):
            raise ValueError("output_scale must be finite and non-zero, output_shift finite")
        self.register_buffer("output_scale", scale, persistent=False)
        self.register_buffer("output_shift", shift, persistent=False)

    def decode(self, h: Tensor) -> Tensor:
        """The head and the output affine: ``scale · (W h + b) + shift``, ``(..., d_output)``."""
        return self.head(h) * self.output_scale + self.output_shift

    @property
    def is_causal(self) -> bool:
        """True when the whole model can run step by step (no bidirectional layer)."""
        return all(b.ssm.is_causal for b in self.blocks)

    def check_streamable(self) -> None:
        """ValueError unless this model has a step form (:meth:`streaming`): the one place
        that refuses the ``pair`` decoder (:mod:`liquid_stream.nn.pair`) and, through
        :meth:`SSMConfig.check_streamable <liquid_stream.nn.layer.SSMConfig.check_streamable>`,
        bidirectional layers."""
        if self.decoder == "pair":
            raise ValueError(NOT_STREAMABLE)
        for block in self.blocks:
            block.ssm.config.check_streamable()

    @property
    def hop(self) -> int:
        """Input samples per step of the stack: the front end's hop R, or 1 (raw input)."""
        return 1 if self.frontend is None else self.frontend.hop

    def features(self, x: Tensor, rate: float = 1.0) -> Tensor:
        """The sequence of features before the decoder, ``(B, L, H)``; with a front end
        ``(B, ⌊L/R⌋, H)``, one step per completed frame."""
        check_input(x, self.d_input, "x")
        check_rate(rate)
        if self.frontend is not None:
            if rate != 1.0:
                raise ValueError(
                    "a model with a front end runs at its front end's sample rate only "
                    "(rate 1); resample the input instead"
                )
            x = self.frontend(x)
        h = self.encoder(x)
        recompute = self.checkpoint_blocks and self.training and torch.is_grad_enabled()
        for block in self.blocks:
            h = checkpointed(block, h, rate) if recompute else block(h, rate)
        return self.final_norm(h)

    def forward(
        self, x: Tensor, rate: float = 1.0, steps: bool = False, readout: bool = False
    ) -> Tensor:
        """``x (B, L, d_input)`` → the decoder's output (``window``: one row per step of the
        stack, i.e. per frame with a front end). ``steps=True`` is :meth:`frame_steps`,
        one row per step of the stack (what a per-step loss is computed on);
        ``readout=True`` (``window`` only) is :meth:`window_and_readout`."""
        if readout:
            return self.window_and_readout(x, rate)
        if steps:
            return self.frame_steps(x, rate)
        if self.pair_mlp is not None:  # x (B, 2, L, d_input): liquid_stream.nn.pair
            return self.decode(self.pair_mlp(x, lambda seqs: self.features(seqs, rate)))
        h = self.features(x, rate)
        if self.decoder == "pool":
            return self.decode(h.mean(1))
        if self.decoder == "last":
            return self.decode(h[:, -1])
        return self.decode(self._window_mean(h))

    def _window_mean(self, v: Tensor) -> Tensor:
        """``v (B, L, d)`` → its causal mean over the last W steps (the t + 1 steps seen
        at t < W), ``(B, L, d)``."""
        count = torch.arange(1, v.shape[1] + 1, device=v.device, dtype=v.dtype).clamp(
            max=self.decoder_window
        )
        return (causal_window_sum(v.transpose(1, 2), self.decoder_window) / count).transpose(1, 2)

    def window_and_readout(self, x: Tensor, rate: float = 1.0) -> Tensor:
        """``window`` decoder: ``(B, F, 2·d_output)``, the output of :meth:`forward` and the
        per-frame readout ``p_t = decode(h_t)`` side by side. The decoder is affine, so

            forward_t = decode(mean_{j<W} h_{t−j}) = mean_{j<W} p_{t−j}

        and a loss on ``p`` (e.g. one pulse per heart beat, ``mse_beats``) shapes what the
        window output averages, with no change to the model or its step form."""
        if self.decoder != "window":
            raise ValueError(f"a per-frame readout needs the window decoder, not {self.decoder!r}")
        p = self.decode(self.features(x, rate))  # (B, F, d_output)
        return torch.cat([self._window_mean(p), p], dim=-1)

    def forward_steps(self, x: Tensor, rate: float = 1.0) -> Tensor:
        """Per-sample outputs ``(B, L, d_output)``, exactly what the streaming form emits.

        ``window``: same as :meth:`forward`; ``last``: the decoder at every step;
        ``pool``: the running mean since the start (the streaming pool output). With a
        front end, each frame's output is held until the next frame completes (zeros
        before the first, :func:`~liquid_stream.nn.frontend.hold`).
        """
        y = self.frame_steps(x, rate)
        if self.frontend is None:
            return y
        return hold(y, y.new_zeros(y.shape[0], y.shape[2]), 0, x.shape[1], self.hop)

    def frame_steps(self, x: Tensor, rate: float = 1.0) -> Tensor:
        """Per-step outputs of the stack ``(B, ⌊L/R⌋, d_output)`` (= :meth:`forward_steps`
        without a front end); what a per-step loss is computed on."""
        if self.decoder == "pair":
            raise ValueError(NO_STEPS)
        if self.decoder == "window":
            return self.forward(x, rate)
        logits = self.decode(self.features(x, rate))
        if self.decoder == "last":
            return logits
        count = torch.arange(1, logits.shape[1] + 1, device=x.device, dtype=logits.dtype)
        return logits.cumsum(1) / count[:, None]

    def streaming(
        self,
        sub_block: int = 16,
        max_chunk: int = 4096,
        dtype: torch.dtype = torch.float32,
        rate: float = 1.0,
    ) -> StreamingModel:
        """The exact step-wise form of this (causal) model, in eval mode; see
        :class:`StreamingModel`. ``sub_block`` S (a power of two) sets the within-chunk
        granularity: ~S/2 extra work per sample, log₂(max_chunk / S) scan levels."""
        return StreamingModel(self, sub_block, max_chunk, dtype, rate)


class StreamingModel(nn.Module):
    """Step form of a causal :class:`LiquidS4Model`: ``step(x (B, T, d_input), state)``.

    Reproduces :meth:`LiquidS4Model.forward_steps` for any chunking of the input
    (docs/design.md §5). Outputs are per step, ``(B, T, d_output)``:

    - ``last``:   the decoder applied at every step;
    - ``window``: the exact causal mean of the last W steps (W-step history kept in the
      state, sums in float64), then the decoder;
    - ``pool``:   the running mean since the last reset (sum and count in the state).

    The state is a flat dict of batch-first tensors (see :attr:`state_names`); a new
    stream starts from :meth:`init_state`.

    Input guard (the policy of :mod:`liquid_stream.runtime.validate`, shared with
    :class:`~liquid_stream.runtime.onnx_streamer.OnnxStreamer`): a chunk that is not a
    ``(B, T ≥ 1, d_input)`` tensor of the model's dtype with B the state's batch, that
    holds NaN, ±inf or a sample with ``|x| > 1e6`` (10⁶ standard deviations of the
    standardised input this model takes), or whose outputs or new state would not be
    finite, raises :class:`~liquid_stream.runtime.validate.StreamInputError` (a ``ValueError``);
    so does a state that is not one of this model's (its keys, and each entry's dtype and
    shape, the batch size excepted, must be those of :meth:`init_state`). The state passed
    in is never modified, so after a refusal the caller's state is the one to continue
    from. ``rate`` must be a finite number > 0 (ValueError).
    """

    def __init__(
        self,
        model: LiquidS4Model,
        sub_block: int = 16,
        max_chunk: int = 4096,
        dtype: torch.dtype = torch.float32,
        rate: float = 1.0,
    ):
        super().__init__()
        model.check_streamable()
        rate = check_rate(rate)
        model = model.eval()
        self.config = dict(model.config)
        self.decoder, self.window = model.decoder, model.decoder_window
        self.d_input, self.d_output = model.d_input, model.d_output
        self.sub_block, self.max_chunk, self.rate = sub_block, max_chunk, rate
        if model.frontend is not None and rate != 1.0:
            raise ValueError(
                "a model with a front end streams at its front end's sample rate only (rate 1)"
            )
        # front end (raw samples → frames) or None; the stack then steps once per frame
        self.frontend = None if model.frontend is None else step_frontend(model.frontend, dtype)
        self.hop = model.hop
        with torch.no_grad():
            self.encoder = copy.deepcopy(model.encoder).to(dtype)
            self.blocks = nn.ModuleList(
                LiquidS4BlockStep(b, dtype, sub_block=sub_block, max_chunk=max_chunk, rate=rate)
                for b in model.blocks
            )
            self.final_norm = (
                model.final_norm.frozen(dtype)
                if isinstance(model.final_norm, Norm)
                else nn.Identity()
            )
            # The output affine folds into the head: scale·(W h + b) + shift; exact because
            # every decoder (last / window mean / running mean) is affine-equivariant.
            head = copy.deepcopy(model.head).double()
            scale, shift = model.output_scale.double(), model.output_shift.double()
            head.weight.mul_(scale[:, None])
            head.bias.mul_(scale).add_(shift)
            self.head = head.to(dtype)
        self.dtype = dtype
        self.eval()
        one, two = self.init_state(1), self.init_state(2)
        self._state_keys = frozenset(one)
        # the batch-first state entries (others, e.g. ``ssm.fill``, are shared by the batch)
        self._batch_keys = [k for k, v in one.items() if v.dim() and two[k].shape[0] == 2]
        # what each entry must be: (shape, with None for the batch dimension; dtype)
        self._state_spec = {
            k: ((None, *v.shape[1:]) if k in self._batch_keys else tuple(v.shape), v.dtype)
            for k, v in one.items()
        }
        # the input is already standardised (|x| <= MAX_STD), or raw samples that a front end
        # takes (a log scale-norm: |x| <= LOG_MAX)
        self._input_range = input_bound(self.config.get("frontend"), self.d_input)

    def init_state(self, batch: int = 1) -> dict[str, Tensor]:
        """The state of a fresh stream (all zeros)."""
        state = {}
        for i, block in enumerate(self.blocks):
            for k, v in block.init_state(batch).items():
                state[f"block{i}.{k}"] = v
        f64 = dict(dtype=torch.float64, device=self.head.weight.device)
        if self.decoder in ("pool", "window"):
            state["decoder.sum"] = torch.zeros(batch, self.d_output, **f64)
            state["decoder.count"] = torch.zeros(batch, 1, **f64)
        if self.decoder == "window":
            state["decoder.history"] = torch.zeros(batch, self.window, self.d_output, **f64)
        if self.frontend is not None:  # the samples since the last frame; its held output
            state.update(self.frontend.init_state(batch, self.head.weight.device))
            state["frontend.held"] = self.head.weight.new_zeros(batch, self.d_output)
        return state

    @property
    def state_names(self) -> list[str]:
        return list(self.init_state(1))

    def forward(self, x: Tensor, state: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        """``x (B, T, d_input)`` → ``y (B, T, d_output)`` and the state after the chunk.

        Raises :class:`~liquid_stream.runtime.validate.StreamInputError` for a refused chunk (see
        the class docstring); ``state`` itself is never modified.
        """
        self._check_input(x, state)
        y, new = self._step(x, state)
        self._check_result(y, new)
        return y, new

    step = forward

    def _check_input(self, x: Tensor, state: dict[str, Tensor]) -> None:
        if not isinstance(x, Tensor):
            raise StreamInputError(f"x must be a torch.Tensor, got {type(x).__name__}")
        if not isinstance(state, dict):
            raise StreamInputError(
                f"state must be the dict of init_state(batch), got {type(state).__name__}"
            )
        if state.keys() != self._state_keys:
            missing = sorted(self._state_keys - state.keys())
            extra = sorted(state.keys() - self._state_keys)
            raise StreamInputError(
                f"state does not belong to this model (missing {missing}, unexpected {extra});"
                " start a stream with init_state(batch)"
            )
        batch = self._check_state(state, x.shape[0])
        check_shape(tuple(x.shape), self.d_input, batch)
        if x.shape[1] == 0:
            raise StreamInputError(
                f"the chunk has no time steps (shape {tuple(x.shape)}); feed T >= 1 steps"
            )
        dtype = self.encoder.weight.dtype
        if x.dtype != dtype:
            raise StreamInputError(
                f"x must be {dtype} (the dtype of this streaming model), got {x.dtype}"
            )
        if not bool((x.abs() <= MAX_STD).all()):  # NaN compares False
            check_values(x.detach().to("cpu", torch.float64).numpy(), *self._input_range)

    def _check_state(self, state: dict[str, Tensor], default_batch: int) -> int:
        """Refuse a state entry whose dtype or shape is not init_state's (the batch size
        excepted, which must be the same in every batch-first entry); return the batch."""
        batch = None
        for k, (shape, dtype) in self._state_spec.items():
            v = state[k]
            if not isinstance(v, Tensor):
                raise StreamInputError(
                    f"state does not belong to this model: {k!r} is a {type(v).__name__}, "
                    "not a tensor; start a stream with init_state(batch)"
                )
            got = tuple(v.shape)
            if shape[:1] == (None,):  # batch-first: the first one sets the batch
                batch = got[0] if batch is None and got else batch
                shape = (batch, *shape[1:])
            if v.dtype != dtype or got != shape:
                raise StreamInputError(
                    f"state does not belong to this model: {k!r} is {v.dtype} of shape {got}, "
                    f"expected {dtype} of shape {shape}; start a stream with init_state(batch)"
                )
        return default_batch if batch is None else int(batch)

    @staticmethod
    def _check_result(y: Tensor, new: dict[str, Tensor]) -> None:
        tensors = [y, *(v for v in new.values() if v.is_floating_point())]
        if bool(torch.stack([torch.isfinite(t).all() for t in tensors]).all()):
            return
        host = [t.detach().to("cpu", torch.float64).numpy() for t in tensors]
        check_finite_result(host[0], host[1:])

    def _step(self, x: Tensor, state: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        if self.frontend is None:
            return self._stack(x, state)
        # raw samples → the frames this chunk completes → the stack → held per sample
        phase = int(state["frontend.phase"][0])
        frames, new = self.frontend(x, state)
        if frames.shape[1] > 0:
            y, stack_state = self._stack(frames, state)
        else:  # no frame completed: the stack's state stays as it was
            y = frames.new_zeros(x.shape[0], 0, self.d_output)
            stack_state = {k: v for k, v in state.items() if not k.startswith("frontend.")}
        new.update(stack_state)
        y = hold(y, state["frontend.held"], phase, x.shape[1], self.hop)
        new["frontend.held"] = y[:, -1]
        return y, new

    def _stack(self, x: Tensor, state: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        """Encoder → blocks → head → decoder on ``x (B, T, d_features)``, one row per step."""
        new: dict[str, Tensor] = {}
        h = self.encoder(x)
        for i, block in enumerate(self.blocks):
            prefix = f"block{i}."
            sub = {k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)}
            h, sub = block(h, sub)
            new.update({prefix + k: v for k, v in sub.items()})
        logits = self.head(self.final_norm(h))
        if self.decoder == "last":
            return logits, new
        T = x.shape[1]
        steps = torch.cumsum(torch.ones_like(logits[:1, :, :1], dtype=torch.float64), 1)
        count = state["decoder.count"][:, None] + steps  # (B, T, 1) steps seen so far
        x64 = logits.double()
        if self.decoder == "pool":
            total = state["decoder.sum"][:, None] + torch.cumsum(x64, 1)
            mean = total / count
        else:  # exact sliding window: S_t = S_{t−1} + x_t − x_{t−W}
            ext = torch.cat([state["decoder.history"], x64], 1)  # (B, W+T, d)
            total = state["decoder.sum"][:, None] + torch.cumsum(ext[:, -T:] - ext[:, :T], 1)
            mean = total / count.clamp(max=self.window)
            new["decoder.history"] = ext[:, -self.window :]
        new["decoder.sum"] = total[:, -1]
        new["decoder.count"] = count[:, -1]
        return mean.to(logits.dtype), new


def parameter_groups(
    model: nn.Module,
    lr: float,
    weight_decay: float,
    ssm_lr: float = 1e-3,
    ssm_weight_decay: float = 0.0,
) -> list[dict]:
    """Split parameters into the SSM group (log_dt, Λ, B, P: own lr, no decay) and the rest."""
    ssm, rest = [], []
    for module in model.modules():
        for name, p in module.named_parameters(recurse=False):
            if not p.requires_grad:
                continue
            is_ssm = isinstance(module, SSMKernel) and name in SSM_PARAMETER_NAMES
            (ssm if is_ssm else rest).append(p)
    groups = [{"params": rest, "lr": lr, "weight_decay": weight_decay, "name": "default"}]
    if ssm:
        groups.append(
            {"params": ssm, "lr": ssm_lr, "weight_decay": ssm_weight_decay, "name": "ssm"}
        )
    return groups


def make_optimizer(
    model: nn.Module,
    lr: float,
    weight_decay: float,
    ssm_lr: float = 1e-3,
    ssm_weight_decay: float = 0.0,
) -> torch.optim.AdamW:
    """AdamW with the S4 convention: SSM parameters in their own group (lr 1e-3, wd 0)."""
    return torch.optim.AdamW(parameter_groups(model, lr, weight_decay, ssm_lr, ssm_weight_decay))
