"""S4D: a diagonal state matrix (Gu et al., "On the Parameterization and
Initialization of Diagonal State Space Models").

Per channel h with M = N // 2 complex modes (their conjugates implicit, s = 2):

    bilinear:  Ā = (1 + ΔΛ/2) / (1 − ΔΛ/2),   B̄ = Δ B / (1 − ΔΛ/2)
    ZOH:       Ā = exp(ΔΛ),                   B̄ = (Ā − 1) / Λ · B
    K̄[j] = 2·Re Σ_m C_m B̄_m Ā_mʲ          (a Vandermonde product; no truncation needed)
"""

from __future__ import annotations

import torch
from torch import Tensor

from .cauchy import vandermonde
from .hippo import diag_init
from .kernel_base import Discrete, SSMKernel, complex_param

DIAG_INITS = ("legs", "lin", "inv", "legs-inside")  # the ``init`` values of DiagKernel
# ``init="legs-inside"``: B scaled so that |B̄| ≤ INSIDE_MARGIN·ρ(1 − |Ā|) for every mode at
# init, i.e. the LTC recurrence's liquid coefficient is B̄ itself (its clamp inactive).
INSIDE_MARGIN = 0.5


class DiagKernel(SSMKernel):
    """S4D kernel: inits ``legs`` / ``lin`` / ``inv`` (and ``legs-inside``: LegS with B scaled
    per mode so that |B̄| ≤ ½·ρ(1 − |Ā|), the bound under which the LTC liquid coefficient
    B̃ = B̄ · min(1, ρ(1 − |Ā|)/|B̄|) is B̄ itself; :mod:`liquid_stream.nn.ltc`); ``bilinear`` or
    ``zoh`` discretisation."""

    def __init__(
        self,
        d_model: int,
        d_state: int = 64,
        channels: int = 1,
        dt_min: float = 0.001,
        dt_max: float = 0.1,
        disc: str = "bilinear",
        init: str = "legs",
    ):
        super().__init__(d_model, d_state, channels, dt_min, dt_max)
        if disc not in ("bilinear", "zoh"):
            raise ValueError(f"unknown disc {disc!r}; expected 'bilinear' or 'zoh'")
        self.disc = disc
        if init not in DIAG_INITS:
            raise ValueError(f"unknown diag init {init!r}; expected one of {', '.join(DIAG_INITS)}")
        inside = init == "legs-inside"
        Lambda, B = diag_init(d_state, "legs" if inside else init)
        H = d_model
        self._set_Lambda(Lambda.expand(H, -1))
        self._register_complex("B", B.expand(H, -1))
        self._register_complex("C", torch.randn(channels, H, self.M, dtype=torch.cfloat))
        if inside:
            self._fit_liquid_bound()

    @torch.no_grad()
    def _fit_liquid_bound(self, margin: float = INSIDE_MARGIN) -> None:
        """Scale B per (h, m) so that |B̄| ≤ margin·ρ(1 − |Ā|) (B̄ is linear in B)."""
        from .ltc import LTC_RHO

        A_bar, B_bar = self.bar(1.0, torch.float64)
        room = margin * LTC_RHO * (1 - A_bar.abs())
        factor = torch.clamp(room / B_bar.abs().clamp_min(1e-300), max=1.0)  # (H, M)
        self.B.mul_(factor[..., None].to(self.B.dtype))

    def bar(self, rate: float = 1.0, dtype: torch.dtype | None = None) -> tuple[Tensor, Tensor]:
        """(Ā, B̄), each (H, M) complex, computed from a ``dtype`` view of the parameters
        (float64 for the LTC recurrence, whose states amplify rounding in Ā by 1/(1 − |Ā|))."""
        Lam, dt = self.Lambda(dtype), self.dt(rate, dtype)[:, None]
        dtL = dt * Lam  # (H, M)
        B = complex_param(self.B).to(dtL.dtype)
        if self.disc == "bilinear":
            return (1 + dtL / 2) / (1 - dtL / 2), dt * B / (1 - dtL / 2)
        return torch.exp(dtL), torch.expm1(dtL) / Lam * B

    def discretize(self, rate: float = 1.0) -> Discrete:
        dt = self.dt(rate)
        A_bar, B_bar = self.bar(rate)
        # log Ā in float64: its rounding is amplified j-fold in Āʲ = exp(j·log Ā).
        dtL64 = self.dt(rate, torch.float64)[:, None] * self.Lambda(torch.float64)
        if self.disc == "bilinear":
            log_A_bar = torch.log1p(dtL64 / 2) - torch.log1p(-dtL64 / 2)
        else:
            log_A_bar = dtL64
        C = complex_param(self.C)
        return Discrete(dt, A_bar, B_bar, C, 2.0, {"log_A_bar": log_A_bar})

    def dense_A_bar(self, disc: Discrete) -> Tensor:
        return torch.diag_embed(disc.A_bar)

    def kernel(self, L: int, disc: Discrete, b: Tensor) -> Tensor:
        C = disc.C
        ch, H, M = C.shape
        R = b.shape[0]
        v = (C[:, None] * b[None]).reshape(ch * R, H, M).transpose(0, 1)  # (H, ch·R, M)
        K = vandermonde(v.contiguous(), disc.extra["log_A_bar"], L)  # (H, ch·R, L)
        return disc.scale * K.transpose(0, 1).reshape(ch, R, H, L)
