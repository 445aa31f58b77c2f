"""LRU, the Linear Recurrent Unit (Orvieto et al., ICML 2023; arXiv 2303.06349).

One complex diagonal recurrence of P states (Orvieto et al. 2023, docs/sources.md; Section 3):

    x_k      = diag(lambda) x_{k-1} + exp(gamma_log) * (B u_k)
    y_k      = Re(C x_k) + D * u_k
    lambda_j = exp(-exp(nu_log_j) + i exp(theta_log_j))          (|lambda_j| < 1 always)

This is already the engine's form: lambda, B_bar = exp(gamma_log) B and C go to the engine as
they are, with plain Re (no conjugate half is dropped).

Fields and the paper's symbols: ``nu_log`` log nu, ``theta_log`` log theta, ``gamma_log`` the
normaliser log gamma (``None`` with ``normaliser="none"``: no gamma factor), ``B_re + i B_im``
B, ``C_re + i C_im`` C, ``D`` D, ``C_reverse_re + i C_reverse_im`` the reverse scan's output map.
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
from ._registry import (
    Ablation,
    BenchmarkInfo,
    PaperSize,
    PublishedTime,
    TaskOptions,
    register,
)
from ._system import DiscreteSystem, optional_complex

Normaliser = Literal["learned", "none"]
NORMALISERS: tuple[str, ...] = ("learned", "none")


@dataclasses.dataclass(frozen=True)
class LRUConfig:
    """LRU hyperparameters.

    Attributes:
        d_model: H, input and output channels.
        d_state: P, the number of complex states.
        r_min, r_max: the ring |lambda| in [r_min, r_max] at initialisation; the default
            [0.9, 0.999] is the paper's sCIFAR and Pathfinder setting. Validated, not clamped:
            r_max must not exceed 1 - 1e-6 (`models._validate.MAX_RADIUS`), the largest
            |lambda| that float32 keeps below 1 with a finite normaliser gamma and gradient
            (the paper's code neither clamps nor checks it). One exception, the paper's code's
            default r_max = 1: its ring draws |lambda|^2 = u (r_max^2 - r_min^2) + r_min^2 with
            u in [0, 1), which never reaches 1, where ours draws u in (0, 1] (r = 1 would give
            |lambda| = 1, nu_log = -inf). So r_max = 1 is read as that half-open ring and
            stored as `MAX_RADIUS`: the two rings differ by at most 1e-6 in |lambda|. The Flax
            drop-in (`models.flax.linen.LRU`) goes through the same rule.
        max_phase: the phases arg(lambda) are initialised uniform in (0, max_phase].
        normaliser: ``"learned"`` (gamma_log initialised to log sqrt(1 - |lambda|^2), then
            trained) or ``"none"`` (no gamma factor: the ablation).
        bidirectional: add a reverse-time scan with its own output matrix, outputs summed.
        algorithm: the engine algorithm (`models.ALGORITHMS`, not ``"convolution"``).
    """

    d_model: int
    d_state: int
    r_min: float = 0.9
    r_max: float = 0.999
    max_phase: float = 6.28
    normaliser: Normaliser = "learned"
    bidirectional: bool = False
    algorithm: Algorithm = "auto"

    def __post_init__(self):
        _validate.positive_int("LRUConfig.d_model", self.d_model)
        _validate.positive_int("LRUConfig.d_state", self.d_state)
        # r_min = 0 is the paper's ListOps setting; r_max < 1 keeps nu_log finite, and the
        # paper's code's default r_max = 1 is its half-open ring (see the docstring).
        if _validate.is_number(self.r_max) and self.r_max == 1.0:
            object.__setattr__(self, "r_max", _validate.MAX_RADIUS)
        _validate.in_range("LRUConfig.r_min", self.r_min, 0.0, 1.0)
        _validate.radius("LRUConfig.r_max", self.r_max)
        _validate.ordered("LRUConfig.r_min", self.r_min, "r_max", self.r_max)
        _validate.in_range("LRUConfig.max_phase", self.max_phase, 0.0, 2 * math.pi)
        if self.max_phase <= 0.0:
            raise ValueError(
                f"LRUConfig.max_phase={self.max_phase!r} must be positive: theta_log = log(theta) "
                f"needs theta > 0. Accepted values: (0, {2 * math.pi}]."
            )
        _validate.choice("LRUConfig.normaliser", self.normaliser, NORMALISERS)
        _validate.choice("LRUConfig.bidirectional", self.bidirectional, (False, True))
        _validate.choice("LRUConfig.algorithm", self.algorithm, MIMO_ALGORITHMS)


def _uniform_open_closed(key: PRNGKeyArray, shape: tuple[int, ...]) -> Float[Array, "..."]:
    # u in (0, 1]: a draw of exactly 0 would give nu = inf (r_min = 0) or theta_log = -inf.
    return 1.0 - jr.uniform(key, shape)


def _init_nu_log(key: PRNGKeyArray, config: LRUConfig) -> Float[Array, " P"]:
    # Ring init: |lambda|^2 ~ U[r_min^2, r_max^2], nu = -log|lambda| = -0.5 log|lambda|^2.
    u = _uniform_open_closed(key, (config.d_state,))
    radius_sq = u * (config.r_max**2 - config.r_min**2) + config.r_min**2
    return jnp.log(-0.5 * jnp.log(radius_sq))


def _init_complex(key: PRNGKeyArray, shape: tuple[int, ...], scale: float):
    k_re, k_im = jr.split(key)
    return jr.normal(k_re, shape) * scale, jr.normal(k_im, shape) * scale


@register(
    "lru",
    LRUConfig,
    label="LRU",
    note="learned gamma normaliser",
    paper_size=PaperSize(128, 256, (), "LRU Table 9, ListOps: H = 128, N = 256"),
    task_options=(
        TaskOptions(preset="gpu", options=(("d_state", 256),), source="LRU Table 9 (N=256)"),
        TaskOptions("listops", options=(("r_min", 0.0), ("r_max", 0.99)),
                    source="LRU paper, ListOps ring [0, 0.99]"),
        TaskOptions("pathfinder", options=(("r_min", 0.9), ("r_max", 0.999)),
                    source="LRU Table 9, Pathfinder ring [0.9, 0.999]"),
        TaskOptions("pathx", options=(("r_min", 0.999), ("r_max", 0.9999),
                                      ("max_phase", math.pi / 10)),
                    source="LRU Table 9, Path-X ring [0.999, 0.9999], max phase pi/10"),
    ),
    ablations=(
        Ablation("lru-no-gamma", (("normaliser", "none"),), "LRU, gamma off",
                 "gamma normaliser off"),
    ),
    benchmark=BenchmarkInfo(
        128, "scan", "P = 128 complex states",
        (PublishedTime(1024, 67.0, 217.0), PublishedTime(4096, 397.0, 998.0)),
        "the minimal LRU on the project's machine, B = 8, H = 128, float32 (issue 2)",
    ),
)
class LRU(AbstractRecurrentLayer):
    """The LRU layer, one sequence ``(L, H) -> (L, H)``; see the module docstring.

    Arguments:
        config: an `LRUConfig`.
        key: PRNG key for the initialisation (the LRU paper): ring init of lambda,
            B ~ (N(0, 1) + i N(0, 1)) / sqrt(2 H), C ~ (N(0, 1) + i N(0, 1)) / sqrt(P),
            D ~ N(0, 1), gamma_log = log sqrt(1 - |lambda|^2).
    """

    nu_log: Float[Array, " P"]
    theta_log: Float[Array, " P"]
    gamma_log: Float[Array, " P"] | None
    B_re: Float[Array, "P H"]
    B_im: Float[Array, "P H"]
    C_re: Float[Array, "H P"]
    C_im: Float[Array, "H P"]
    D: Float[Array, " H"]
    C_reverse_re: Float[Array, "H P"] | None
    C_reverse_im: Float[Array, "H P"] | None
    algorithm: str = eqx.field(static=True)

    def __init__(self, config: LRUConfig, *, key: PRNGKeyArray):
        k_nu, k_theta, k_b, k_c, k_d, k_rev = jr.split(key, 6)
        H, P = config.d_model, config.d_state
        self.nu_log = _init_nu_log(k_nu, config)
        self.theta_log = jnp.log(config.max_phase * _uniform_open_closed(k_theta, (P,)))
        if config.normaliser == "learned":
            # gamma = sqrt(1 - |lambda|^2), |lambda|^2 = exp(-2 nu); expm1 keeps |lambda| ~ 1 exact.
            self.gamma_log = 0.5 * jnp.log(-jnp.expm1(-2.0 * jnp.exp(self.nu_log)))
        elif config.normaliser == "none":
            self.gamma_log = None
        else:
            raise ValueError(f"normaliser={config.normaliser!r}; accepted values: {NORMALISERS}.")
        self.B_re, self.B_im = _init_complex(k_b, (P, H), 1.0 / math.sqrt(2 * H))
        self.C_re, self.C_im = _init_complex(k_c, (H, P), 1.0 / math.sqrt(P))
        self.D = jr.normal(k_d, (H,))
        if config.bidirectional:
            self.C_reverse_re, self.C_reverse_im = _init_complex(k_rev, (H, P), 1.0 / math.sqrt(P))
        else:
            self.C_reverse_re = self.C_reverse_im = None
        self.algorithm = config.algorithm

    def eigenvalues(self) -> Complex[Array, " P"]:
        """lambda_j = exp(-exp(nu_log_j) + i exp(theta_log_j)), ``(P,)`` complex."""
        return jnp.exp(jax.lax.complex(-jnp.exp(self.nu_log), jnp.exp(self.theta_log)))

    def discrete_system(self) -> DiscreteSystem:
        B_bar = jax.lax.complex(self.B_re, self.B_im)
        if self.gamma_log is not None:
            B_bar = jnp.exp(self.gamma_log)[:, None] * B_bar
        return DiscreteSystem(
            lam=self.eigenvalues(),
            B=B_bar,
            C=jax.lax.complex(self.C_re, self.C_im),
            D=self.D,
            C_reverse=optional_complex(self.C_reverse_re, self.C_reverse_im),
            conj_sym=False,
            structure="mimo",
        )

    def recurrent_mask(self) -> PyTree[bool]:
        # The paper trains lambda, B and gamma with a smaller learning rate and no weight decay.
        def recurrent(m):
            group = (m.nu_log, m.theta_log, m.B_re, m.B_im)
            return group if m.gamma_log is None else (*group, m.gamma_log)

        return mask_where(self, recurrent)
