"""Continuous-time diagonal systems for S5 and S4D: HiPPO-N eigenpairs, discretisation and the
timescales Delta.

HiPPO-LegS (Gu et al. 2020; the S4 paper's eq. 2), for n, k = 0..N-1:

    A_nk = -sqrt(2n+1) sqrt(2k+1)   if n > k
         = -(n + 1)                 if n = k
         = 0                        if n < k

Adding the rank-one term p p^T, p_n = sqrt(n + 1/2), gives HiPPO-N, the normal matrix S5
initialises from (the normal-plus-low-rank form of S4 Sec. 3.2; S5's HiPPO-N initialisation):

    S = A + p p^T = -1/2 I + K,        K = -K^T  (real, skew-symmetric)

So S = V Lambda V^*, V unitary, Re(Lambda) = -1/2, and i Im(Lambda) are the eigenvalues of K,
found with a Hermitian eigensolver on -iK. They come in conjugate pairs (K is real), which is
what S5's conjugate symmetry uses to keep half of them.

The map from continuous (Lambda, B) to the discrete recurrence x_t = lambda x_{t-1} + B_bar u_t
is elementwise for a diagonal system, with Delta > 0 the timescale of each state:

    zoh:       lambda = exp(Lambda Delta),
               B_bar  = (lambda - 1) / Lambda * B
    bilinear:  lambda = (1 + Lambda Delta/2) / (1 - Lambda Delta/2),
               B_bar  = Delta / (1 - Lambda Delta/2) * B

(as in S5's official `discretize_zoh` / `discretize_bilinear` and the `disc` option of S4D's
official kernel). Both map Re(Lambda) < 0 to |lambda| < 1.
"""

from __future__ import annotations

import math
from typing import Literal, TypeVar

import equinox as eqx
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import scipy.linalg
from jaxtyping import Array, Complex, Float, PRNGKeyArray

from . import _validate

Discretisation = Literal["zoh", "bilinear"]
DISCRETISATIONS: tuple[str, ...] = ("zoh", "bilinear")
Layer = TypeVar("Layer", bound=eqx.Module)


def legs_matrix(N: int) -> np.ndarray:
    """The HiPPO-LegS state matrix A, ``(N, N)`` float64 (module docstring)."""
    q = np.sqrt(2.0 * np.arange(N) + 1.0)
    return -(np.tril(np.outer(q, q), k=-1) + np.diag(np.arange(N) + 1.0))


def normal_matrix(N: int) -> np.ndarray:
    """HiPPO-N: S = A_LegS + p p^T with p_n = sqrt(n + 1/2), ``(N, N)`` float64."""
    p = np.sqrt(np.arange(N) + 0.5)
    return legs_matrix(N) + np.outer(p, p)


def normal_eigenpairs(N: int) -> tuple[np.ndarray, np.ndarray]:
    """Eigenpairs of HiPPO-N: ``S V = V diag(Lambda)``, V unitary, ascending Im(Lambda).

    Returns Lambda ``(N,)`` and V ``(N, N)``, both complex128.
    """
    S = normal_matrix(N)
    real = np.mean(np.diag(S))  # -1/2: S is -I/2 plus a skew-symmetric matrix
    K = S - real * np.eye(N)
    imag, V = np.linalg.eigh(-1j * K)  # -iK is Hermitian; K v = i w v
    return real + 1j * imag, V


def block_hippo_n(P: int, blocks: int, conj_sym: bool) -> tuple[np.ndarray, np.ndarray]:
    """S5's block-diagonal initialisation: the HiPPO-N eigenpairs of size P/J tiled J times.

    With ``conj_sym`` each block keeps the half of its eigenvalues with negative imaginary
    part (the official code's ``Lambda[:block_size]`` after an ascending eigensolver); the
    others are their conjugates.

    Returns:
        Lambda ``(P_s,)`` and V ``(P, P_s)`` block diagonal with orthonormal columns, where
        ``P_s = P/2`` if ``conj_sym`` else ``P``. ``V^*`` plays V^{-1} (the official ``Vinv``).
    """
    size = P // blocks
    Lambda, V = normal_eigenpairs(size)
    if conj_sym:
        Lambda, V = Lambda[: size // 2], V[:, : size // 2]
    return np.tile(Lambda, blocks), scipy.linalg.block_diag(*([V] * blocks))


def discretise(
    Lambda: Complex[Array, "..."], Delta: Float[Array, "..."], method: str
) -> tuple[Complex[Array, "..."], Complex[Array, "..."]]:
    """(lambda, gain) with ``B_bar = gain * B``; ``method`` is ``"zoh"`` or ``"bilinear"``.

    ``Lambda`` and ``Delta`` broadcast against each other (module docstring for the maths).
    """
    if method == "zoh":
        lam = jnp.exp(Lambda * Delta)
        return lam, (lam - 1.0) / Lambda
    elif method == "bilinear":
        half = Lambda * (Delta / 2.0)
        return (1.0 + half) / (1.0 - half), Delta / (1.0 - half)
    else:
        raise ValueError(f"Unknown discretisation {method!r}; accepted values: {DISCRETISATIONS}.")


def init_Delta_log(
    key: PRNGKeyArray, size: int, dt_min: float, dt_max: float
) -> Float[Array, " n"]:
    """log Delta ~ U[log dt_min, log dt_max], ``(size,)``: S4D's and S5's initial timescales."""
    return jr.uniform(key, (size,), minval=math.log(dt_min), maxval=math.log(dt_max))


def rescale_timescales(layer: Layer, factor: float) -> Layer:
    """A copy of ``layer`` with every timescale Delta (its field ``Delta_log``) times ``factor``."""
    _validate.finite("A timescale factor", factor, low=0.0, closed=False)
    return eqx.tree_at(lambda m: m.Delta_log, layer, layer.Delta_log + math.log(factor))
