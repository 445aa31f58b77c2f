"""The matrix exponential of a batch of real skew-symmetric matrices (RotRNN's P_h).

RotRNN recomputes ``P_h = expm(S_h)``, ``S_h = M_h - M_h^T``, on every call.
`jax.scipy.linalg.expm` (jax 0.10) maps a batch by `jax.vmap`, under which its choice of Pade
degree (a `lax.switch` on each matrix's norm) becomes a select that evaluates every branch, and
its squarings (a scan of 16 `lax.cond` steps) a select that squares 16 times whatever the norm.
Here one scaling serves the whole batch, so the conditions stay scalar and only the squarings
needed run. The Pade approximant is differentiated by autodiff through its operations, the
squarings by a hand-written VJP (below).

Algorithm: scaling and squaring with the diagonal Pade approximant r_m (Higham, "The scaling and
squaring method for the matrix exponential revisited", SIAM J. Matrix Anal. Appl. 26, 2005), as
in `jax.scipy.linalg.expm`: m = 7 for float32 (theta_7 = 3.9257), m = 13 for float64
(theta_13 = 5.3719), with

    exp(S) = r_m(S / 2^s)^(2^s),   s = max(0, ceil(log2(rho_bound / theta_m))).

Higham's bound (backward error at most the unit round-off when ||S / 2^s|| <= theta_m) holds in
any consistent norm. A skew-symmetric S is normal, so ||S||_2 = rho(S), its spectral radius, and
rho(S)^4 = rho(S^4) <= ||S^4||_1 gives the bound ``rho_bound = ||S^4||_1^(1/4)`` (the largest
over the batch). S^2 and S^4 are powers the approximant needs anyway, so the bound costs no
matmul, and it is much tighter than ||S||_1 (a random 128 x 128 S with N(0, 2) entries: ||S||_1
= 162, the bound 36, rho = 31; two squarings fewer).

For skew-symmetric X the approximant is exactly orthogonal with determinant 1, not only to the
truncation error: r_m(X) = q(X)^{-1} q(-X) with q(-X) = q(X)^T, and q(X), q(X)^T commute. So P_h
stays in SO(N_h) to round-off whatever the scaling.

The squarings are a loop of exactly s matmuls (`lax.fori_loop` with a traced trip count) with
a hand-written VJP (`_power_of_two`): the cotangent of E^(2^s) is pulled back through the
squarings in the order they ran, so nothing of the loop is saved and no branch per possible
squaring exists (below). A bound beyond ``theta_m 2^MAX_SQUARINGS`` (entries of order 1e10:
diverged parameters) or a non-finite S gives NaN, so the divergence is seen rather than hidden by
a clamped scaling.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jaxtyping import Array, Float, Int

# Pade [m/m] numerator coefficients b_0..b_m (Higham 2005, Table 2.3 and the code of Algorithm 2.3).
_PADE_7 = (17297280.0, 8648640.0, 1995840.0, 277200.0, 25200.0, 1512.0, 56.0, 1.0)
_PADE_13 = (
    64764752532480000.0, 32382376266240000.0, 7771770303897600.0, 1187353796428800.0,
    129060195264000.0, 10559470521600.0, 670442572800.0, 33522128640.0, 1323241920.0,
    40840800.0, 960960.0, 16380.0, 182.0, 1.0,
)
# theta_m: the largest ||X|| for which r_m's backward error is at most the unit round-off
# (Higham 2005, Table 2.3 for double; the single-precision value as in jax.scipy.linalg.expm).
THETA_7 = 3.925724783138660
THETA_13 = 5.371920351148152
# At most this many squarings: ||S||_2 up to theta * 2^31 (about 1e10); beyond, NaN.
MAX_SQUARINGS = 31


def expm_skew(S: Float[Array, "*batch n n"]) -> Float[Array, "*batch n n"]:
    """exp(S) for real skew-symmetric matrices S (``S^T = -S``), batched over leading axes.

    Float32 and float64 (other real dtypes are computed in float32). Accuracy: that of
    `jax.scipy.linalg.expm` (the same approximants and thresholds); the result is orthogonal
    with determinant 1 to round-off. Skew-symmetry is assumed, not checked: for another matrix
    the scaling's bound does not hold.
    """
    if S.ndim < 2 or S.shape[-1] != S.shape[-2]:
        raise ValueError(f"expm_skew needs square matrices (..., n, n); got shape {S.shape}.")
    if not jnp.issubdtype(S.dtype, jnp.floating):
        raise ValueError(f"expm_skew needs a real floating dtype; got {S.dtype}.")
    if S.dtype != jnp.float64:
        S = S.astype(jnp.float32)
    double = S.dtype == jnp.float64
    theta = THETA_13 if double else THETA_7

    S2 = S @ S
    S4 = S2 @ S2
    # rho(S) <= ||S^4||_1^(1/4): the scaling is a non-differentiable integer choice.
    bound = jnp.max(jnp.sum(jnp.abs(lax.stop_gradient(S4)), axis=-2)) ** 0.25
    ok = jnp.isfinite(bound) & (bound <= theta * 2.0**MAX_SQUARINGS)
    squarings = jnp.where(ok, jnp.maximum(0.0, jnp.ceil(jnp.log2(bound / theta))), 0.0)
    squarings = squarings.astype(jnp.int32)
    c = jnp.exp2(-squarings.astype(S.dtype))
    X, X2, X4 = c * S, c**2 * S2, c**4 * S4
    X6 = X4 @ X2
    eye = jnp.broadcast_to(jnp.eye(S.shape[-1], dtype=S.dtype), S.shape)
    if double:
        b = _PADE_13
        U = X @ (
            X6 @ (b[13] * X6 + b[11] * X4 + b[9] * X2)
            + b[7] * X6 + b[5] * X4 + b[3] * X2 + b[1] * eye
        )
        V = X6 @ (b[12] * X6 + b[10] * X4 + b[8] * X2) + b[6] * X6 + b[4] * X4 + b[2] * X2
        V = V + b[0] * eye
    else:
        b = _PADE_7
        U = X @ (b[7] * X6 + b[5] * X4 + b[3] * X2 + b[1] * eye)
        V = b[6] * X6 + b[4] * X4 + b[2] * X2 + b[0] * eye
    # r_m(X) = (V - U)^{-1} (V + U): q(X) = V - U, q(-X) = V + U.
    E = jnp.linalg.solve(V - U, V + U)

    return jnp.where(ok, _power_of_two(E, squarings), jnp.nan)


@jax.custom_vjp
def _power_of_two(
    E: Float[Array, "*batch n n"], squarings: Int[Array, ""]
) -> Float[Array, "*batch n n"]:
    """E^(2^squarings): ``squarings`` matmuls, Y_{k+1} = Y_k^2 from Y_0 = E."""
    return lax.fori_loop(0, squarings, lambda _, Y: Y @ Y, E)


# The VJP of the squarings. Through Y_{k+1} = Y_k^2 a cotangent G pulls back to
# T_k(G) = G Y_k^T + Y_k^T G, and the cotangent of E is T_0 T_1 ... T_{s-1} (G), which autodiff
# evaluates from T_{s-1} down, so it must keep (or recompute) every Y_k: as `lax.cond`s on the
# binary digits of s that was 31 matrices per head in the buffer assignment whatever s is (a
# branch per digit, 1 + 2 + ... + 16 squarings), half of RotRNN's working memory at B = 8,
# L = 1024 beside its states. But every Y_k is a power of E, so the left and right products by
# the Y_k^T all commute, and so do the T_k: applied from T_0 up, each Y_k is made when it is
# needed and dropped. 3 x s matmuls, as autodiff with rematerialisation, and two matrices kept.
# (The Y_k commute to round-off; the gradient equals autodiff's to round-off, tests/test_expm.py.)
def _power_of_two_fwd(E, squarings):
    return _power_of_two(E, squarings), (E, squarings)


def _power_of_two_bwd(residuals, G):
    E, squarings = residuals

    def step(_, carry):
        Y, G = carry
        Yt = jnp.swapaxes(Y, -1, -2)
        return Y @ Y, G @ Yt + Yt @ G

    _, G_E = lax.fori_loop(0, squarings, step, (E, G))
    # squarings is an integer: its cotangent is float0 (no derivative).
    return G_E, np.zeros(np.shape(squarings), jax.dtypes.float0)


_power_of_two.defvjp(_power_of_two_fwd, _power_of_two_bwd)
