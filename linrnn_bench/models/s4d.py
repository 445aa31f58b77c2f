"""S4D (Gu, Gupta, Goel, Re, NeurIPS 2022, arXiv 2206.11893): a bank of H diagonal SISO SSMs.

Channel h is its own single-input single-output system of N states, N/2 of them stored because
the spectrum is closed under conjugation (n = 0..N/2-1):

    x'_hn(t) = a_hn x_hn(t) + B_hn u_h(t),     y_h(t) = 2 Re(sum_n C_hn x_hn(t)) + D_h u_h(t)
    a_hn = -exp(A_real_log_hn) + i A_imag_hn

discretised with one timescale Delta_h per channel (`models._hippo.discretise`; ZOH:
lambda = exp(Delta a), B_bar = (lambda - 1)/a * B) and computed as the paper's causal
convolution with the Vandermonde kernel K_hl = 2 Re sum_n C_hn B_bar_hn lambda_hn^l (the
default on accelerators, ``algorithm="convolution"``) or, the CPU default, as the same
recurrence fused with its readout in a C++ kernel that never stores the states
(``algorithm="native"``, `models._native.bank`; faster than the convolution on CPU, measured in
docs/performance.md); the two agree to float32 round-off (tests).

Initialisation (the paper's S4D-Lin and S4D-Inv; the authors' `s4d.py` and `dplr`):
    S4D-Lin   a_n = -1/2 + i pi n
    S4D-Inv   a_n = -1/2 + i (N/pi) (N/(2n+1) - 1)
    B = 1; C complex normal with E|C_n|^2 = 1: real and imaginary parts each N(0, 1/2), the
    convention of the code's ``torch.randn(..., dtype=torch.cfloat)``; D ~ N(0, 1);
    log Delta_h ~ U[log dt_min, log dt_max]. (The full kernel stores the conjugate half, with
    negative imaginary parts; conjugating a, B and C leaves 2 Re(...) unchanged and C's law is
    circular, so both halves give the same layer distribution.)

Fields (N below counts stored states, d_state/2): A_real_log, A_imag (H, N); B_re + i B_im = B
(H, N), or None when B is fixed at 1; C_re + i C_im = C (H, N); C_reverse_* the reverse scan's C,
or None; D (H,); Delta_log = log Delta (H,).

Bidirectional: a reverse-time scan with the same lambda, B_bar and its own C (the authors' code
shares A, B and Delta between its two kernel channels). Here the reverse output at step t is
out(C_reverse g_t), with g_t = lambda g_{t+1} + B_bar u_t including the current input, as in S5;
S4's `FFTConv` shifts its reverse kernel by one step ("a deliberate off-by-one" in its code), so
its reverse output is out(C_reverse g_{t+1}), strictly anticausal.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Literal

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, Float, PRNGKeyArray, PyTree

from . import _validate
from ._base import AbstractRecurrentLayer, mask_where
from ._engine import BANK_ALGORITHMS, Algorithm
from ._hippo import DISCRETISATIONS, Discretisation, discretise, init_Delta_log, rescale_timescales
from ._registry import (
    ENGINE_CAPABILITIES,
    RESCALE,
    BenchmarkInfo,
    PaperSize,
    PublishedTime,
    TaskOptions,
    register,
)
from ._system import DiscreteSystem, optional_complex

Init = Literal["lin", "inv"]
INITS: tuple[str, ...] = ("lin", "inv")


@dataclasses.dataclass(frozen=True)
class S4DConfig:
    """S4D's options; defaults from the paper and the authors' code.

    Attributes:
        d_model: H, channels (one SISO system each).
        d_state: N, states per channel before conjugate-symmetric halving; even.
        init: "lin" (S4D-Lin) or "inv" (S4D-Inv) imaginary parts.
        discretisation: "zoh" (the code's default) or "bilinear".
        dt_min, dt_max: the range of the log-uniform initial timescales. Validated, not
            clamped (the authors' code does neither): dt_min >= about 2e-6
            (`models._validate.MIN_TIMESCALE`, below which float32 rounds lambda to 1 and
            B_bar to 0) and dt_max finite (an infinite one gives NaN outputs); with
            ``"bilinear"``, every initial |lambda| at most 1 - 1e-6 (S4D-Inv's large Im(a)
            reach 1 in float32 from Delta of about 1 at N = 256).
        train_B: train B (initialised to 1), as the authors' full kernel (`SSMKernelDiag`)
            does, in the A/Delta group; False fixes B = 1, as their minimal `s4d.py` does.
        bidirectional: add a reverse-time scan with its own C.
        algorithm: the engine algorithm; "auto" runs the native recurrence on CPU (the
            convolution where the native kernels cannot be built) and convolves elsewhere.
    """

    d_model: int
    d_state: int
    init: Init = "lin"
    discretisation: Discretisation = "zoh"
    dt_min: float = 0.001
    dt_max: float = 0.1
    train_B: bool = True
    bidirectional: bool = False
    algorithm: Algorithm = "auto"

    def __post_init__(self):
        _validate.positive_int("S4DConfig.d_model", self.d_model)
        _validate.positive_int("S4DConfig.d_state", self.d_state)
        if self.d_state % 2:
            raise ValueError(
                f"S4DConfig.d_state={self.d_state} must be even: S4D stores N/2 states of a "
                "conjugate-symmetric spectrum."
            )
        _validate.choice("S4DConfig.init", self.init, INITS)
        _validate.choice("S4DConfig.discretisation", self.discretisation, DISCRETISATIONS)
        _validate.timescales("S4DConfig", self.dt_min, self.dt_max)
        if self.discretisation == "bilinear":
            a = -0.5 + 1j * np.asarray(_imaginary_parts(self.init, self.d_state))
            _validate.bilinear_radius("S4DConfig", a, self.dt_min, self.dt_max)
        _validate.choice("S4DConfig.algorithm", self.algorithm, BANK_ALGORITHMS)


def _imaginary_parts(init: str, N: int) -> Float[Array, " half"]:
    """Im(a_n), n = 0..N/2-1, for S4D-Lin or S4D-Inv (module docstring)."""
    n = jnp.arange(N // 2, dtype=float)
    if init == "lin":
        return math.pi * n
    elif init == "inv":
        return (N / math.pi) * (N / (2.0 * n + 1.0) - 1.0)
    else:
        raise ValueError(f"S4D init={init!r} is not accepted; accepted values: {list(INITS)}.")


def _output_map(key: PRNGKeyArray, shape: tuple[int, int]) -> tuple[Array, Array]:
    """(Re C, Im C), each N(0, 1/2), so that E|C_n|^2 = 1."""
    C = jr.normal(key, (*shape, 2)) * math.sqrt(0.5)
    return C[..., 0], C[..., 1]


@register(
    "s4d",
    S4DConfig,
    label="S4D",
    note="paper initialisation",
    paper_size=PaperSize(
        128, 64, (), "S4D: N = 64 states per channel (the paper's default), H = 128"
    ),
    task_options=(
        TaskOptions(preset="gpu", options=(("d_state", 64),), source="S4D: N=64 per channel"),
    ),
    benchmark=BenchmarkInfo(
        64, "convolution", "N = 64 states per channel, 32 stored (conjugate pairs)",
        (PublishedTime(1024, 144.0, 262.0), PublishedTime(4096, 592.0, 1080.0)),
        "the Annotated S4's S4D on the project's machine, B = 8, H = 128, float32 (issue 2)",
    ),
    capabilities=ENGINE_CAPABILITIES | {RESCALE},
)
class S4D(AbstractRecurrentLayer):
    """S4D layer: ``(L, H) -> (L, H)``. Maths, fields and initialisation: module docstring."""

    A_real_log: Float[Array, "H N"]
    A_imag: Float[Array, "H N"]
    B_re: Float[Array, "H N"] | None
    B_im: Float[Array, "H N"] | None
    C_re: Float[Array, "H N"]
    C_im: Float[Array, "H N"]
    C_reverse_re: Float[Array, "H N"] | None
    C_reverse_im: Float[Array, "H N"] | None
    D: Float[Array, " H"]
    Delta_log: Float[Array, " H"]
    discretisation: str = eqx.field(static=True)
    algorithm: str = eqx.field(static=True)

    def __init__(self, config: S4DConfig, *, key: PRNGKeyArray):
        if not isinstance(config, S4DConfig):
            raise TypeError(f"S4D needs an S4DConfig, got {type(config).__name__}.")
        k_C, k_C_reverse, k_D, k_Delta = jr.split(key, 4)
        shape = (config.d_model, config.d_state // 2)
        # Re(a) = -exp(log 1/2) = -1/2. A float dtype, not a Python scalar's weak type: the
        # first training step would otherwise compile twice (weak in, strong out).
        self.A_real_log = jnp.full(shape, math.log(0.5), dtype=float)
        self.A_imag = jnp.broadcast_to(_imaginary_parts(config.init, config.d_state), shape)
        if config.train_B:
            self.B_re, self.B_im = jnp.ones(shape), jnp.zeros(shape)
        else:
            self.B_re = self.B_im = None
        self.C_re, self.C_im = _output_map(k_C, shape)
        if config.bidirectional:
            self.C_reverse_re, self.C_reverse_im = _output_map(k_C_reverse, shape)
        else:
            self.C_reverse_re = self.C_reverse_im = None
        self.D = jr.normal(k_D, (config.d_model,))
        self.Delta_log = init_Delta_log(k_Delta, config.d_model, config.dt_min, config.dt_max)
        self.discretisation = config.discretisation
        self.algorithm = config.algorithm

    def discrete_system(self) -> DiscreteSystem:
        """lambda = disc(a, Delta), B_bar = gain * B, per channel (module docstring)."""
        a = jax.lax.complex(-jnp.exp(self.A_real_log), self.A_imag)
        lam, gain = discretise(a, jnp.exp(self.Delta_log)[:, None], self.discretisation)
        B = optional_complex(self.B_re, self.B_im)
        return DiscreteSystem(
            lam=lam,
            B=gain if B is None else gain * B,
            C=jax.lax.complex(self.C_re, self.C_im),
            D=self.D,
            C_reverse=optional_complex(self.C_reverse_re, self.C_reverse_im),
            conj_sym=True,
            structure="bank",
        )

    def recurrent_mask(self) -> PyTree[bool]:
        """A, B (when trained) and Delta: the group the authors train at lr 0.001, no decay."""
        if self.B_re is None:
            return mask_where(self, lambda m: (m.A_real_log, m.A_imag, m.Delta_log))
        return mask_where(self, lambda m: (m.A_real_log, m.A_imag, m.B_re, m.B_im, m.Delta_log))

    def rescaled(self, factor: float) -> S4D:
        """A copy with every timescale Delta times ``factor`` (S4's ``rate``)."""
        return rescale_timescales(self, factor)
