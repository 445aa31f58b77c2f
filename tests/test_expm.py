"""`models._expm.expm_skew` against scipy's matrix exponential (float64 reference).

The claims of its docstring: the accuracy of `jax.scipy.linalg.expm` over the norms a layer
meets (and far beyond), one scaling for a batch of very different norms, an exactly special
orthogonal result, gradients equal to those through `jax.scipy.linalg.expm` and to finite
differences, and NaN (not a wrong answer) for non-finite or absurdly large input.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import jaxtyping
import numpy as np
import pytest
import scipy.linalg
from jax.test_util import check_grads

from linrnn_bench.models._expm import MAX_SQUARINGS, THETA_7, expm_skew


def skew(rng: np.random.Generator, shape: tuple[int, ...], scale: float) -> np.ndarray:
    """Random skew-symmetric matrices with spectral radius ``scale`` (each matrix)."""
    M = rng.standard_normal(shape)
    S = M - np.swapaxes(M, -1, -2)
    rho = np.abs(np.linalg.eigvals(S)).max(axis=-1)[..., None, None]
    return S * (scale / np.where(rho > 0, rho, 1.0))


def reference(S: np.ndarray) -> np.ndarray:
    flat = S.reshape(-1, *S.shape[-2:])
    return np.stack([scipy.linalg.expm(s) for s in flat]).reshape(S.shape)


def expm64(S: np.ndarray) -> np.ndarray:
    with jax.enable_x64(True):
        return np.asarray(jax.jit(expm_skew)(jnp.asarray(S, jnp.float64)))


# (spectral radius, float64 atol, float32 atol): the error of scaling and squaring grows with
# the number of squarings, about log2(rho / theta), and with rho itself (the exponential's
# condition number for a skew-symmetric matrix is at most rho).
SCALES = [(0.0, 1e-15, 1e-7), (1e-6, 1e-15, 1e-7), (0.3, 1e-14, 1e-6), (3.0, 1e-13, 2e-6),
          (30.0, 1e-12, 1e-5), (300.0, 1e-11, 1e-4), (3000.0, 1e-10, None)]


@pytest.mark.parametrize("rho, atol64, atol32", SCALES)
@pytest.mark.parametrize("shape", [(4, 4), (3, 8, 8), (2, 32, 32)])
def test_matches_scipy(rho, atol64, atol32, shape):
    S = skew(np.random.default_rng(0), shape, rho)
    expected = reference(S)
    np.testing.assert_allclose(expm64(S), expected, rtol=0, atol=atol64)
    if atol32 is not None:
        got = np.asarray(jax.jit(expm_skew)(jnp.asarray(S, jnp.float32)))
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, expected, rtol=0, atol=atol32)


def test_one_scaling_serves_a_batch_of_very_different_norms():
    """The batch shares the scaling of its largest matrix: the small ones lose no accuracy."""
    rng = np.random.default_rng(1)
    S = np.stack([skew(rng, (6, 6), rho) for rho in (1e-3, 0.5, 5.0, 500.0)])
    got, expected = expm64(S), reference(S)
    np.testing.assert_allclose(got[:3], expected[:3], rtol=0, atol=1e-13)
    np.testing.assert_allclose(got[3], expected[3], rtol=0, atol=1e-11)


@pytest.mark.parametrize("dtype, atol", [("float32", 2e-6), ("float64", 1e-14)])
def test_result_is_special_orthogonal(dtype, atol):
    S = skew(np.random.default_rng(2), (5, 16, 16), 40.0)
    with jax.enable_x64(dtype == "float64"):
        Q = np.asarray(jax.jit(expm_skew)(jnp.asarray(S, dtype)), np.float64)
    eye = np.broadcast_to(np.eye(16), Q.shape)
    np.testing.assert_allclose(np.swapaxes(Q, -1, -2) @ Q, eye, rtol=0, atol=atol)
    # det Q = 1 + tr(Q^T Q - I) / 2 to first order: up to n / 2 times the entries' error.
    np.testing.assert_allclose(np.linalg.det(Q), 1.0, rtol=0, atol=8 * atol)


def test_zero_gives_the_identity():
    eye = np.broadcast_to(np.eye(4), (2, 4, 4))
    np.testing.assert_allclose(expm64(np.zeros((2, 4, 4))), eye, rtol=0, atol=1e-15)


def _loss(expm):
    # The parametrisation as RotRNN uses it: S = M - M^T from an unconstrained M.
    def loss(M):
        P = expm(M - jnp.swapaxes(M, -1, -2))
        return jnp.sum(jnp.sin(P) * jnp.arange(P.size, dtype=P.dtype).reshape(P.shape))

    return loss


# Compiled once for every test below (a fresh function per test would compile again).
loss = jax.jit(_loss(expm_skew))
grad = jax.jit(jax.grad(_loss(expm_skew)))
grad_through_jax_expm = jax.jit(jax.grad(_loss(jax.scipy.linalg.expm)))


@pytest.mark.parametrize("scale", [0.1, 1.0, 5.0])
def test_gradient_equals_jax_expm_and_finite_differences(scale):
    M = scale * np.random.default_rng(3).standard_normal((3, 6, 6))
    with jax.enable_x64(True):
        M = jnp.asarray(M, jnp.float64)
        np.testing.assert_allclose(grad(M), grad_through_jax_expm(M), rtol=1e-10, atol=1e-10)
        check_grads(loss, (M,), order=1, modes=("rev",), atol=1e-5, rtol=1e-5)


def test_gradient_float32_follows_float64():
    # The float64 gradient at this shape is compiled by the test above.
    M = np.random.default_rng(4).standard_normal((3, 6, 6))
    got = grad(jnp.asarray(M, jnp.float32))
    with jax.enable_x64(True):
        expected = grad(jnp.asarray(M, jnp.float64))
    scale = np.abs(np.asarray(expected)).max()
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5 * scale)


def test_vmapped_over_matrices_with_their_own_scalings():
    """Under `jax.vmap` each mapped matrix gets its own scaling (the conditions become
    selects): still correct."""
    rng = np.random.default_rng(5)
    S = np.stack([skew(rng, (2, 5, 5), rho) for rho in (0.01, 50.0)])
    with jax.enable_x64(True):
        got = np.asarray(jax.jit(jax.vmap(expm_skew))(jnp.asarray(S, jnp.float64)))
    np.testing.assert_allclose(got, reference(S), rtol=0, atol=1e-12)


def test_vmapped_gradient_with_their_own_scalings_equals_each_gradient():
    """Under `jax.vmap` the squarings' loop runs as long as the largest scaling needs and its
    hand-written VJP freezes each matrix after its own s steps: the per-matrix gradients are
    those of each matrix alone, which pass through a different number of squarings."""
    rng = np.random.default_rng(6)
    # Each matrix's batch (3, 6, 6): the shape whose gradients the tests above compiled.
    M = np.stack([skew(rng, (3, 6, 6), rho) / 2 for rho in (0.01, 3.0, 50.0)])
    with jax.enable_x64(True):
        M = jnp.asarray(M, jnp.float64)
        got = jax.jit(jax.vmap(jax.grad(_loss(expm_skew))))(M)
        for m, g in zip(M, got, strict=True):
            np.testing.assert_allclose(g, grad(m), rtol=1e-12, atol=1e-12)
            np.testing.assert_allclose(g, grad_through_jax_expm(m), rtol=1e-10, atol=1e-10)


def test_gradient_keeps_a_few_matrices_whatever_the_squarings():
    """The squarings' VJP makes each power when it needs it (`models._expm`): the gradient's
    compiled temporaries are a handful of n x n matrices, not one per possible squaring
    (autodiff through `lax.cond`s on the digits of s kept 42 of them at n = 128)."""
    n = 128
    compiled = grad.lower(jnp.zeros((n, n), jnp.float32)).compile()
    matrices = compiled.memory_analysis().temp_size_in_bytes / (n * n * 4)
    assert matrices <= 16, f"the gradient of expm_skew keeps {matrices:.1f} matrices of n x n"


@pytest.mark.parametrize("bad", [np.inf, np.nan, 10.0 * THETA_7 * 2.0**MAX_SQUARINGS])
def test_non_finite_or_absurd_input_gives_nan(bad):
    """Diverged parameters show as NaN rather than as a clamped, wrong rotation."""
    # Compiled at the float32 shape test_matches_scipy compiled (the eager path runs in every
    # eager RotRNN build and discrete_system of the other tests).
    S = np.zeros((3, 8, 8), np.float32)
    S[1, 0, 1], S[1, 1, 0] = bad, -bad
    assert np.isnan(np.asarray(jax.jit(expm_skew)(jnp.asarray(S)))).all()


# Under pytest the jaxtyping annotations are checked first (pyproject.toml), with their own
# message naming the expected and actual shapes; outside it, expm_skew's ValueError.
BAD_INPUT = (ValueError, jaxtyping.TypeCheckError)


@pytest.mark.parametrize("shape", [(3,), (2, 3, 4)])
def test_non_square_input_is_rejected(shape):
    with pytest.raises(BAD_INPUT, match=r"square matrices|Expected type"):
        expm_skew(jnp.zeros(shape))


def test_integer_input_is_rejected():
    with pytest.raises(BAD_INPUT, match="real floating dtype|Expected type"):
        expm_skew(jnp.zeros((2, 2), jnp.int32))
