"""S5 (Smith, Warrington, Linderman, ICLR 2023, arXiv 2208.04933): one MIMO diagonal SSM per layer.

In the eigenbasis V of the HiPPO-N initialisation (A = V Lambda V^{-1}, `models._hippo`):

    x'(t) = Lambda x(t) + B~ u(t),     y(t) = C~ x(t) + D u(t),     B~ = V^{-1} B,  C~ = C V

discretised with one timescale Delta_p per state (ZOH or bilinear, `models._hippo.discretise`):

    x_t = lambda * x_{t-1} + B_bar u_t,     y_t = out(C~ x_t) + D * u_t

out = 2 Re under conjugate symmetry (only one of each conjugate pair of eigenvalues is kept, so
the layer stores P_s = P/2 states), else Re. Bidirectional: a reverse-time scan with the same
lambda, B_bar and its own C~, outputs summed (the official `apply_ssm`).

Fields and paper symbols (P_s states stored, H channels):
    Lambda_re + i Lambda_im   Lambda (P_s,)
    B_re + i B_im             B~ = V^{-1} B (P_s, H);  B ~ lecun-normal of shape (P, H)
    C_re + i C_im             C~ (H, P_s);  C_reverse_* the reverse scan's, or None
    D                         D (H,) ~ N(0, 1)
    Delta_log                 log Delta (P_s,) ~ U[log dt_min, log dt_max]

Initialisers follow the official code (lindermanlab/S5, `ssm.py`, `ssm_init.py`, `train.py`),
including its fan-in conventions: jax's `lecun_normal` reads B's shape (P, H) with fan-in P;
``C_init="trunc_standard_normal"`` despite its name draws each row of C (complex, H x P) with
`lecun_normal`, so real and imaginary parts are truncated normals of variance 1/P;
``"lecun_normal"`` uses fan-in H P; ``"complex_normal"`` samples C~ directly (parts of variance
1/2, no V).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Literal

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Complex, Float, PRNGKeyArray, PyTree

from . import _validate
from ._base import AbstractRecurrentLayer, mask_where
from ._engine import MIMO_ALGORITHMS, Algorithm
from ._hippo import DISCRETISATIONS, Discretisation, block_hippo_n, discretise, init_Delta_log
from ._hippo import rescale_timescales
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

CInit = Literal["trunc_standard_normal", "lecun_normal", "complex_normal"]
C_INITS: tuple[str, ...] = ("trunc_standard_normal", "lecun_normal", "complex_normal")


@dataclasses.dataclass(frozen=True)
class S5Config:
    """S5's options; defaults are the official `run_train.py` defaults, except ``blocks``.

    Attributes:
        d_model: H, input and output channels.
        d_state: P, the state size before conjugate-symmetric halving.
        blocks: J, the number of HiPPO-N blocks of size P/J on the diagonal of the initial A.
            1 here (one HiPPO-N of size P, valid for any P); the official default, 8, is tied
            to its P = 256, and every official run sets J with P (the S5 paper's code).
        conj_sym: keep one eigenvalue of each conjugate pair (P/2 states, output 2 Re).
        C_init: how C is drawn (module docstring); the official run scripts set it per task
            (e.g. "lecun_normal" for ListOps, Image, Speech; "complex_normal" for Path-X).
        discretisation: "zoh" or "bilinear".
        dt_min, dt_max: the range of the log-uniform initial timescales. Validated, not
            clamped: dt_min >= about 2e-6 (`models._validate.MIN_TIMESCALE`, below which
            float32 rounds lambda to 1 and B_bar to 0) and dt_max finite (an infinite one gives
            NaN outputs); with ``"bilinear"``, every initial |lambda| at most 1 - 1e-6.
            ``clip_eigs`` is the official code's clamp of Re(Lambda) in training.
        clip_eigs: clip Re(Lambda) at -1e-4 on every call, which keeps |lambda| < 1 however
            training moves Lambda (the official option, recommended there for long sequences).
        bidirectional: add a reverse-time scan with its own C~.
        algorithm: the engine algorithm (`models.ALGORITHMS` except "convolution").
    """

    d_model: int
    d_state: int
    blocks: int = 1
    conj_sym: bool = True
    C_init: CInit = "trunc_standard_normal"
    discretisation: Discretisation = "zoh"
    dt_min: float = 0.001
    dt_max: float = 0.1
    clip_eigs: bool = False
    bidirectional: bool = False
    algorithm: Algorithm = "auto"

    def __post_init__(self):
        _validate.positive_int("S5Config.d_model", self.d_model)
        _validate.positive_int("S5Config.d_state", self.d_state)
        _validate.positive_int("S5Config.blocks", self.blocks)
        if self.d_state % self.blocks:
            raise ValueError(
                f"S5Config.d_state={self.d_state} must be divisible by blocks={self.blocks}; "
                "choose a number of blocks J that divides P."
            )
        if self.conj_sym and (self.d_state // self.blocks) % 2:
            raise ValueError(
                f"S5Config with conj_sym=True needs an even block size d_state/blocks, got "
                f"{self.d_state}/{self.blocks}; change blocks or set conj_sym=False."
            )
        _validate.choice("S5Config.C_init", self.C_init, C_INITS)
        _validate.choice("S5Config.discretisation", self.discretisation, DISCRETISATIONS)
        _validate.timescales("S5Config", self.dt_min, self.dt_max)
        if self.discretisation == "bilinear":
            Lambda, _ = block_hippo_n(self.d_state, self.blocks, self.conj_sym)
            _validate.bilinear_radius("S5Config", Lambda, self.dt_min, self.dt_max)
        _validate.choice("S5Config.algorithm", self.algorithm, MIMO_ALGORITHMS)


def _input_map(key: PRNGKeyArray, V: Complex[Array, "P Ps"], H: int) -> Complex[Array, "Ps H"]:
    """B~ = V^{-1} B with B lecun-normal (P, H); V^{-1} = V^* as V has orthonormal columns."""
    B = jax.nn.initializers.lecun_normal()(key, (V.shape[0], H))
    return V.conj().T @ B


def _output_map(
    key: PRNGKeyArray, V: Complex[Array, "P Ps"], H: int, C_init: str
) -> Complex[Array, "H Ps"]:
    """C~ = C V with C complex (H, P), or C~ drawn directly for "complex_normal"."""
    if C_init == "complex_normal":
        C = jr.normal(key, (H, V.shape[1], 2)) * math.sqrt(0.5)
        return jax.lax.complex(C[..., 0], C[..., 1])
    elif C_init == "trunc_standard_normal":
        init = jax.nn.initializers.lecun_normal(batch_axis=0)  # fan-in P, one row at a time
    elif C_init == "lecun_normal":
        init = jax.nn.initializers.lecun_normal()  # fan-in H P
    else:
        raise ValueError(f"S5 C_init={C_init!r} is not accepted; accepted values: {list(C_INITS)}.")
    C = init(key, (H, V.shape[0], 2))
    return jax.lax.complex(C[..., 0], C[..., 1]) @ V


@register(
    "s5",
    S5Config,
    label="S5",
    note="paper initialisation",
    paper_size=PaperSize(
        128, 16, (("blocks", 8),), "S5 official ListOps run: H = 128, P = 16, J = 8"
    ),
    task_options=(
        TaskOptions(preset="gpu", options=(("bidirectional", True),),
                    source="S5: bidirectional on every task"),
        TaskOptions("listops", "gpu", (("d_state", 16), ("blocks", 8)),
                    source="S5 settings: ListOps P=16, J=8"),
        TaskOptions("pathfinder", "gpu", (("d_state", 256), ("blocks", 8)),
                    source="S5 settings: P=256, J=8"),
        TaskOptions("pathx", "gpu", (("d_state", 256), ("blocks", 16)),
                    source="S5 settings: P=256, J=16"),
    ),
    benchmark=BenchmarkInfo(
        128, "scan", "P = 128, 64 conjugate-symmetric states stored",
        (PublishedTime(1024, 37.5, 116.0), PublishedTime(4096, 210.0, 517.0)),
        "the official S5 on the project's machine, B = 8, H = 128, float32 (issue 2)",
    ),
    capabilities=ENGINE_CAPABILITIES | {RESCALE},
)
class S5(AbstractRecurrentLayer):
    """S5 layer: ``(L, H) -> (L, H)``. Maths, fields and initialisation: module docstring."""

    Lambda_re: Float[Array, " P"]
    Lambda_im: Float[Array, " P"]
    B_re: Float[Array, "P H"]
    B_im: Float[Array, "P H"]
    C_re: Float[Array, "H P"]
    C_im: Float[Array, "H P"]
    C_reverse_re: Float[Array, "H P"] | None
    C_reverse_im: Float[Array, "H P"] | None
    D: Float[Array, " H"]
    Delta_log: Float[Array, " P"]
    conj_sym: bool = eqx.field(static=True)
    discretisation: str = eqx.field(static=True)
    clip_eigs: bool = eqx.field(static=True)
    algorithm: str = eqx.field(static=True)

    def __init__(self, config: S5Config, *, key: PRNGKeyArray):
        if not isinstance(config, S5Config):
            raise TypeError(f"S5 needs an S5Config, got {type(config).__name__}.")
        k_B, k_C, k_C_reverse, k_D, k_Delta = jr.split(key, 5)
        Lambda, V = block_hippo_n(config.d_state, config.blocks, config.conj_sym)
        V = jnp.asarray(V)
        H = config.d_model
        self.Lambda_re, self.Lambda_im = jnp.asarray(Lambda.real), jnp.asarray(Lambda.imag)
        B = _input_map(k_B, V, H)
        self.B_re, self.B_im = B.real, B.imag
        C = _output_map(k_C, V, H, config.C_init)
        self.C_re, self.C_im = C.real, C.imag
        if config.bidirectional:
            C_reverse = _output_map(k_C_reverse, V, H, config.C_init)
            self.C_reverse_re, self.C_reverse_im = C_reverse.real, C_reverse.imag
        else:
            self.C_reverse_re = self.C_reverse_im = None
        self.D = jr.normal(k_D, (H,))
        self.Delta_log = init_Delta_log(k_Delta, V.shape[1], config.dt_min, config.dt_max)
        self.conj_sym = config.conj_sym
        self.discretisation = config.discretisation
        self.clip_eigs = config.clip_eigs
        self.algorithm = config.algorithm

    def discrete_system(self) -> DiscreteSystem:
        """lambda = disc(Lambda, Delta), B_bar = gain * B~, C = C~ (module docstring)."""
        Lambda_re = jnp.minimum(self.Lambda_re, -1e-4) if self.clip_eigs else self.Lambda_re
        Lambda = jax.lax.complex(Lambda_re, self.Lambda_im)
        lam, gain = discretise(Lambda, jnp.exp(self.Delta_log), self.discretisation)
        return DiscreteSystem(
            lam=lam,
            B=gain[:, None] * jax.lax.complex(self.B_re, self.B_im),
            C=jax.lax.complex(self.C_re, self.C_im),
            D=self.D,
            C_reverse=optional_complex(self.C_reverse_re, self.C_reverse_im),
            conj_sym=self.conj_sym,
            structure="mimo",
        )

    def recurrent_mask(self) -> PyTree[bool]:
        """Lambda, B~ and the timescales: the official code's ``ssm`` optimiser group."""
        return mask_where(self, lambda m: (m.Lambda_re, m.Lambda_im, m.B_re, m.B_im, m.Delta_log))

    def rescaled(self, factor: float) -> S5:
        """A copy with every timescale Delta times ``factor`` (the official ``step_rescale``)."""
        return rescale_timescales(self, factor)
