"""What every SSM kernel (DPLR or diagonal) provides to the layer.

A kernel owns the SSM parameters of H independent channels and exposes

- :meth:`SSMKernel.discretize` — the bilinear (or ZOH) discretisation at the current
  parameters and a rate factor, in the *liquid basis* (the basis in which Λ is
  diagonal, where the liquid powers B̄^{∘p} are taken);
- :meth:`SSMKernel.kernel` — the convolution kernels K[c, r, h, j] = s·Re(C_c Āʲ b_r)
  for j < L and any discrete input vectors b_r (B̄ itself, or B̄^{∘p} for KB);
- :meth:`SSMKernel.matrices` — the dense discrete system (Ā, B̄, C) for the recurrence.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

# Parameter names that go to the SSM optimiser group (lr 1e-3, weight decay 0).
SSM_PARAMETER_NAMES = ("log_dt", "Lambda_re_log", "Lambda_im", "B", "P")


@dataclass
class Discrete:
    """A discretised SSM in the liquid basis (Mf = state size of that basis).

    dt:    (H,)        step sizes Δ·rate
    A_bar: (H, Mf) the diagonal of Ā (diag), or the diagonal part E of Ā = diag(E) + β u vᵀ
           (dplr; β, u, v in ``extra``); :meth:`SSMKernel.dense_A_bar` gives the matrix
    B_bar: (H, Mf)
    C:     (channels, H, Mf)
    scale: s in y = s·Re(C x) + D u (2 with implicit conjugate pairs, else 1)
    extra: kernel-specific tensors reused by :meth:`SSMKernel.kernel`
    """

    dt: Tensor
    A_bar: Tensor
    B_bar: Tensor
    C: Tensor
    scale: float
    extra: dict


class SSMKernel(nn.Module):
    """Base class: parameter registration shared by the DPLR and diagonal kernels."""

    def __init__(self, d_model: int, d_state: int, channels: int, dt_min: float, dt_max: float):
        super().__init__()
        if d_state < 2:
            raise ValueError(f"d_state must be >= 2, got {d_state}")
        if not 0 < dt_min <= dt_max:
            raise ValueError(f"need 0 < dt_min <= dt_max, got {dt_min}, {dt_max}")
        self.H, self.N, self.channels = d_model, d_state, channels
        self.M = d_state // 2
        log_dt = torch.rand(d_model) * (math.log(dt_max) - math.log(dt_min)) + math.log(dt_min)
        self.log_dt = nn.Parameter(log_dt)

    def _register_complex(self, name: str, value: Tensor) -> None:
        """Store a complex parameter as a real (…, 2) tensor (AdamW/ONNX friendly)."""
        self.register_parameter(name, nn.Parameter(torch.view_as_real(value.cfloat()).clone()))

    def _set_Lambda(self, Lambda: Tensor) -> None:
        """Re Λ = −exp(Lambda_re_log) < 0 keeps every mode stable under any update."""
        self.Lambda_re_log = nn.Parameter(torch.log(-Lambda.real).float().clone())
        self.Lambda_im = nn.Parameter(Lambda.imag.float().clone())

    def Lambda(self, dtype: torch.dtype | None = None) -> Tensor:
        """Continuous diagonal part Λ (H, M), complex (computed in ``dtype`` if given)."""
        re, im = self.Lambda_re_log, self.Lambda_im
        if dtype is not None:
            re, im = re.to(dtype), im.to(dtype)
        return torch.complex(-torch.exp(re), im)

    def dt(self, rate: float, dtype: torch.dtype | None = None) -> Tensor:
        """Step size Δ·rate (H,). rate = 2 evaluates a 16 kHz model on 8 kHz input."""
        log_dt = self.log_dt if dtype is None else self.log_dt.to(dtype)
        return torch.exp(log_dt) * rate

    # Interface -------------------------------------------------------------------
    def discretize(self, rate: float = 1.0) -> Discrete:
        raise NotImplementedError

    def kernel(self, L: int, disc: Discrete, b: Tensor) -> Tensor:
        """K (channels, R, H, L) for discrete input vectors ``b (R, H, Mf)``."""
        raise NotImplementedError

    def dense_A_bar(self, disc: Discrete) -> Tensor:
        """Ā as a dense (H, Mf, Mf) matrix."""
        raise NotImplementedError


def complex_param(p: Tensor) -> Tensor:
    """View a real (…, 2) parameter as complex."""
    return torch.view_as_complex(p)
