"""RotRNN (Biegun, Dolga, Cunningham, Barber; arXiv 2407.07239): a decayed rotation per head.

Per head h = 1..heads, with N_h = N / heads state dimensions (Biegun et al. 2024, docs/sources.md):

    x^h_t   = gamma_h A_h x^h_{t-1} + xi_h B_h u_t
    A_h     = P_h Theta_h P_h^T,          P_h = expm(M_h - M_h^T)       (orthogonal, det 1)
    Theta_h = blockdiag(R(theta_{h,1}), ..., R(theta_{h,N_h/2}))
    y_t     = C [x^1_t; ...; x^heads_t] + D * u_t
    gamma_h = exp(-exp(gamma_loglog_h)),  xi_h = sqrt((1 - gamma_h^2) / tr(B_h^T B_h))

Fields and the paper's symbols: ``M`` M_h, ``angles`` theta, ``gamma_loglog`` log(-log gamma),
``B`` B_h, ``C`` C, ``D`` D, ``C_reverse`` the reverse scan's output matrix (bidirectional).
``gamma_loglog`` is named for what it holds: in the LRU a ``*_log`` field is the log of its
symbol (``gamma_log`` = log gamma, ``nu_log`` = log nu with nu = -log|lambda|), so the log of
-log gamma is ``gamma_loglog``. The authors' code calls it ``gamma_log``, the name the Flax
drop-in (`models.flax.linen.RotRNN`) keeps.

Engine form. In the rotated basis z = P^T x a head is z_t = gamma Theta z_{t-1} + xi P^T B u_t,
and the block gamma R(theta) acts on (z_{2k}, z_{2k+1}) as multiplication of
w_k = z_{2k} + i z_{2k+1} by gamma e^{i theta_k}. So, with G = C_h P_h,

    lambda_k = gamma e^{i theta_k}
    B_bar[k] = xi ((P^T B)[2k] + i (P^T B)[2k+1])
    C_bar[:, k] = G[:, 2k] - i G[:, 2k+1]      since Re((a - i b)(z1 + i z2)) = a z1 + b z2,

and y = Re(C_bar w) + D u: plain Re (each real pair is one complex state, no conjugate half is
dropped). ``||w_t|| = ||z_t|| = ||x_t||`` because P is orthogonal, so the engine's state norm is
the paper's. States are ordered head-major, matching the columns of C.
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
from ._expm import expm_skew
from ._registry import (
    ENGINE_CAPABILITIES,
    EQUIVALENCE,
    Ablation,
    BenchmarkInfo,
    Equivalence,
    PaperSize,
    PublishedTime,
    TaskOptions,
    register,
)
from ._system import DiscreteSystem

GammaInit = Literal["loglog_uniform", "ring"]
GAMMA_INITS: tuple[str, ...] = ("loglog_uniform", "ring")


@dataclasses.dataclass(frozen=True)
class RotRNNConfig:
    """RotRNN hyperparameters; the gamma and phase defaults are the authors' code's.

    Attributes:
        d_model: H, input and output channels.
        d_state: N, the total real state dimension over all heads.
        heads: number of heads; N / heads must be even (one rotation per pair of dimensions).
            1 is the single-head RotRNN; the authors' sweeps use N / heads of 4 to 8 (ListOps:
            N = 128, 32 heads), which presets set.
        gamma_init: ``"loglog_uniform"`` (log(-log gamma) uniform) or ``"ring"`` (gamma^2
            uniform, LRU style); the authors' code has both and the paper's choice is unknown.
        gamma_min, gamma_max: the range of the decays gamma at initialisation. Validated, not
            clamped: gamma_max must not exceed 1 - 1e-6 (`models._validate.MAX_RADIUS`), the
            largest decay that float32 keeps below 1 with a finite normaliser xi and gradient
            (the authors' code neither clamps nor checks it).
        max_phase: angles theta are initialised uniform in [0, max_phase].
        normalise: True for xi_h as above; False fixes xi_h = 1 (the stability ablation).
        bidirectional: add a reverse-time scan with its own output matrix, outputs summed.
        algorithm: the engine algorithm (`models.ALGORITHMS`, not ``"convolution"``).
    """

    d_model: int
    d_state: int
    heads: int = 1
    gamma_init: GammaInit = "loglog_uniform"
    gamma_min: float = 0.9
    gamma_max: float = 0.999
    max_phase: float = 6.28
    normalise: bool = True
    bidirectional: bool = False
    algorithm: Algorithm = "auto"

    def __post_init__(self):
        _validate.positive_int("RotRNNConfig.d_model", self.d_model)
        _validate.positive_int("RotRNNConfig.d_state", self.d_state)
        _validate.positive_int("RotRNNConfig.heads", self.heads)
        if self.d_state % 2 != 0:
            raise ValueError(
                f"RotRNNConfig.d_state={self.d_state} must be even: the state rotates in pairs "
                f"of real dimensions. Accepted values: even positive integers."
            )
        if self.d_state % (2 * self.heads) != 0:
            valid = [h for h in range(1, self.d_state // 2 + 1) if self.d_state % (2 * h) == 0]
            raise ValueError(
                f"RotRNNConfig.heads={self.heads} does not split d_state={self.d_state} into "
                f"heads of even size (d_state / heads must be even); accepted heads for this "
                f"d_state: {valid}."
            )
        _validate.choice("RotRNNConfig.gamma_init", self.gamma_init, GAMMA_INITS)
        _validate.in_range("RotRNNConfig.gamma_min", self.gamma_min, 0.0, 1.0, closed=False)
        _validate.radius("RotRNNConfig.gamma_max", self.gamma_max)
        _validate.ordered("RotRNNConfig.gamma_min", self.gamma_min, "gamma_max", self.gamma_max)
        _validate.in_range("RotRNNConfig.max_phase", self.max_phase, 0.0, 2 * math.pi)
        _validate.choice("RotRNNConfig.normalise", self.normalise, (False, True))
        _validate.choice("RotRNNConfig.bidirectional", self.bidirectional, (False, True))
        _validate.choice("RotRNNConfig.algorithm", self.algorithm, MIMO_ALGORITHMS)


def _init_gamma_loglog(key: PRNGKeyArray, config: RotRNNConfig) -> Float[Array, " heads"]:
    low, high = config.gamma_min, config.gamma_max
    if config.gamma_init == "loglog_uniform":
        # log(-log gamma) ~ U[log(-log gamma_max), log(-log gamma_min)]
        return jr.uniform(
            key, (config.heads,), minval=math.log(-math.log(high)), maxval=math.log(-math.log(low))
        )
    elif config.gamma_init == "ring":
        # gamma^2 ~ U[gamma_min^2, gamma_max^2], then gamma_loglog = log(-log gamma)
        gamma_sq = jr.uniform(key, (config.heads,), minval=low**2, maxval=high**2)
        return jnp.log(-0.5 * jnp.log(gamma_sq))
    else:
        raise ValueError(f"gamma_init={config.gamma_init!r}; accepted values: {GAMMA_INITS}.")


def _init_readout(key: PRNGKeyArray, config: RotRNNConfig) -> Float[Array, "H N"]:
    shape = (config.d_model, config.d_state)
    return jr.normal(key, shape) / math.sqrt(config.d_model + config.d_state)


# The authors' head size on ListOps, N_h = N / heads = 4 real states (their sweep: N = 128 in
# 32 heads; their sweeps range over 4 to 8), kept at every width so that the accuracy and
# stability studies measure the authors' layer, not one with fewer, larger heads.
_HEAD_SIZE = 4


def _heads_at_head_size(d_model: int, d_state: int) -> dict[str, int]:
    """``heads``: as many heads of about `_HEAD_SIZE` states as divide N into even heads."""
    heads = max(1, d_state // _HEAD_SIZE)
    while heads > 1 and d_state % (2 * heads):
        heads -= 1
    return {"heads": heads}


@register(
    "rotrnn",
    RotRNNConfig,
    label="RotRNN",
    note="xi on, gamma log-log-uniform",
    paper_size=PaperSize(
        128, 128, (("heads", 32),),
        "RotRNN authors' ListOps sweep: N = 128 real states in 32 heads (N_h = 4); H unknown, 128",
    ),
    task_options=(
        TaskOptions(
            preset="gpu", options=(("d_state", 128), ("heads", 32)),
            source="RotRNN authors' ListOps sweep: N=128 in 32 heads (used for every task)",
        ),
    ),
    ablations=(
        Ablation("rotrnn-no-xi", (("normalise", False),), "RotRNN, xi off", "normaliser xi off"),
        Ablation("rotrnn-ring", (("gamma_init", "ring"),), "RotRNN, ring gamma",
                 "gamma^2 uniform on a ring"),
    ),
    width_options=_heads_at_head_size,
    benchmark=BenchmarkInfo(
        128, "scan", "N = 128 real state dimensions, 64 complex states",
        (PublishedTime(1024, 38.0, 105.0), PublishedTime(4096, 183.0, 482.0)),
        "the RotRNN authors' code on the project's machine, B = 8, H = 128, float32 (issue 2)",
    ),
    capabilities=ENGINE_CAPABILITIES | {EQUIVALENCE},
    equivalence=Equivalence(
        "lru", "linrnn_bench.models.equivalence:rotrnn_to_lru",
        "RotRNN paper: an LRU whose eigenvalues come in conjugate pairs is a multi-head RotRNN",
    ),
)
class RotRNN(AbstractRecurrentLayer):
    """The RotRNN layer, one sequence ``(L, H) -> (L, H)``; see the module docstring.

    Arguments:
        config: a `RotRNNConfig`.
        key: PRNG key for the initialisation (the RotRNN paper): M ~ N(0, 1), theta ~
            U[0, max_phase], B and C ~ N(0, 1) / sqrt(H + N), D ~ N(0, 1), gamma as configured.
    """

    M: Float[Array, "heads Nh Nh"]
    angles: Float[Array, "heads pairs"]
    gamma_loglog: Float[Array, " heads"]
    """log(-log gamma_h) of the RotRNN paper's per-head decay gamma_h = exp(-exp(gamma_loglog_h)),
    in (0, 1) for every real value, as the LRU's |lambda| = exp(-exp(nu_log)). Named loglog
    because it is not log gamma, which the LRU's ``gamma_log`` holds. Checkpoints store leaves
    by position, not by name, so those written when this field was ``gamma_log`` still load."""
    B: Float[Array, "heads Nh H"]
    C: Float[Array, "H N"]
    D: Float[Array, " H"]
    C_reverse: Float[Array, "H N"] | None
    normalise: bool = eqx.field(static=True)
    algorithm: str = eqx.field(static=True)

    def __init__(self, config: RotRNNConfig, *, key: PRNGKeyArray):
        k_m, k_angle, k_gamma, k_b, k_c, k_d, k_rev = jr.split(key, 7)
        heads, head_dim, H = config.heads, config.d_state // config.heads, config.d_model
        self.M = jr.normal(k_m, (heads, head_dim, head_dim))
        self.angles = jr.uniform(k_angle, (heads, head_dim // 2), maxval=config.max_phase)
        self.gamma_loglog = _init_gamma_loglog(k_gamma, config)
        self.B = jr.normal(k_b, (heads, head_dim, H)) / math.sqrt(H + config.d_state)
        self.C = _init_readout(k_c, config)
        self.D = jr.normal(k_d, (H,))
        self.C_reverse = _init_readout(k_rev, config) if config.bidirectional else None
        self.normalise = config.normalise
        self.algorithm = config.algorithm

    def rotation_basis(self) -> Float[Array, "heads Nh Nh"]:
        """P_h = expm(M_h - M_h^T): the exponential of a skew-symmetric matrix is in SO(N_h).

        Computed by `models._expm.expm_skew` (scaling and squaring with the Pade approximants of
        `jax.scipy.linalg.expm`, one scaling for all heads). Measured alone, float32, 32 heads
        of 4 x 4: a third to a half of `jax.scipy.linalg.expm`'s time, and a fifth to a third
        of it for the gradient; one head of 128 x 128: the same time.
        """
        return expm_skew(self.M - jnp.swapaxes(self.M, -1, -2))

    def decay(self) -> Float[Array, " heads"]:
        """gamma_h = exp(-exp(gamma_loglog_h)), in (0, 1)."""
        return jnp.exp(-jnp.exp(self.gamma_loglog))

    def input_scale(self) -> Float[Array, " heads"]:
        """xi_h = sqrt((1 - gamma_h^2) / tr(B_h^T B_h)), or 1 when ``normalise`` is False.

        With x_0 = 0 and white unit-covariance inputs this gives E||x^h_t||^2 = 1 - gamma_h^{2t}.
        """
        if not self.normalise:
            return jnp.ones_like(self.gamma_loglog)
        gamma = self.decay()
        return jnp.sqrt((1 - gamma**2) / jnp.sum(self.B**2, axis=(1, 2)))

    def _output_map(
        self, C: Float[Array, "H N"], P: Float[Array, "heads Nh Nh"]
    ) -> Complex[Array, "H pairs_total"]:
        # G = C_h P_h for every head; C_bar[:, k] = G[:, 2k] - i G[:, 2k+1] makes Re(C_bar w) = G z.
        heads, head_dim = P.shape[0], P.shape[1]
        G = jnp.einsum("dhi,hij->dhj", C.reshape(C.shape[0], heads, head_dim), P)
        return jax.lax.complex(G[..., 0::2], -G[..., 1::2]).reshape(C.shape[0], -1)

    def discrete_system(self) -> DiscreteSystem:
        P = self.rotation_basis()
        gamma, xi = self.decay(), self.input_scale()
        # Each 2x2 block gamma R(theta) is gamma e^{i theta} on z1 + i z2.
        lam = gamma[:, None] * jax.lax.complex(jnp.cos(self.angles), jnp.sin(self.angles))
        # xi P^T B, its rows paired into complex rows: the input of w = z1 + i z2.
        rotated_input = xi[:, None, None] * jnp.einsum("hji,hjd->hid", P, self.B)
        B_bar = jax.lax.complex(rotated_input[:, 0::2], rotated_input[:, 1::2])
        return DiscreteSystem(
            lam=lam.reshape(-1),
            B=B_bar.reshape(-1, self.B.shape[-1]),
            C=self._output_map(self.C, P),
            D=self.D,
            C_reverse=None if self.C_reverse is None else self._output_map(self.C_reverse, P),
            conj_sym=False,
            structure="mimo",
        )

    def recurrent_mask(self) -> PyTree[bool]:
        # The transition (M, theta, gamma) and the input map B: the LRU paper's group (lambda, B,
        # gamma), RotRNN's lambda being M and theta. The RotRNN paper states no parameter groups; a
        # public fork by one of its authors groups by parameter name and so puts only its
        # gamma_log (our gamma_loglog; and, in one setting, B) there, leaving M and theta with
        # weight decay.
        return mask_where(self, lambda m: (m.M, m.angles, m.gamma_loglog, m.B))
