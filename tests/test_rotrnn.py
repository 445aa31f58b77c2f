"""RotRNN against its paper: the transition stays special orthogonal, E||x_t||^2 = 1 - gamma^2t.

Reference (the RotRNN paper, docs/sources.md): per head x_t = gamma A x_{t-1} + xi B u_t with
A = P Theta P^T, P = expm(M - M^T); y_t = C x_t + D u_t (+ C_reverse g_t, g the reversed scan).
The output and the per-head state norms against a float64 loop over this dense real recurrence
(`dense_reference`) are checked with every model's in tests/test_references.py.

Compilation dominates these tests' time (a new shape of ``jax.random.normal`` costs about a
second), so layers are initialised in float32 at one set of shapes and cast for float64 runs.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from helpers import cast, dense_parameters, inputs, precision, rotation_blocks, tol
from linrnn_bench.models.rotrnn import RotRNN, RotRNNConfig

# H channels, N real states in HEADS heads of N / HEADS = 4, L steps.
H, N, HEADS, L = 3, 12, 3, 16


def _check_special_orthogonal(Q: np.ndarray, atol: float):
    identity = np.broadcast_to(np.eye(Q.shape[-1]), Q.shape)
    np.testing.assert_allclose(np.swapaxes(Q, -1, -2) @ Q, identity, rtol=0, atol=atol)
    np.testing.assert_allclose(np.linalg.det(Q), 1.0, rtol=0, atol=atol)


@pytest.mark.parametrize("dtype, atol", [("float32", 1e-5), ("float64", 1e-12)])
def test_transition_stays_special_orthogonal_under_updates(getkey, dtype, atol):
    """A_h = P_h Theta_h P_h^T is in SO(N_h) whatever M is: random updates of every size."""
    layer = RotRNN(RotRNNConfig(d_model=H, d_state=N, heads=HEADS), key=getkey())
    rng = np.random.default_rng(4)
    with precision(dtype):
        layer = cast(layer, dtype)
        for scale in (0.0, 0.1, 1.0, 10.0):
            step = jnp.asarray(scale * rng.standard_normal(layer.M.shape), dtype)
            m = eqx.tree_at(lambda m: m.M, layer, layer.M + step)
            P = np.asarray(m.rotation_basis(), np.float64)
            A = np.stack([p @ rotation_blocks(a) @ p.T for p, a in zip(P, np.asarray(m.angles))])
            _check_special_orthogonal(P, atol)
            _check_special_orthogonal(A, atol)
            # The engine's eigenvalues are gamma e^{i theta}: modulus gamma_h in every head.
            lam = np.abs(np.asarray(m.discrete_system().lam)).reshape(HEADS, -1)
            gamma = np.asarray(m.decay())[:, None]
            np.testing.assert_allclose(lam, np.broadcast_to(gamma, lam.shape), **tol(dtype))


def test_expected_state_norm_follows_one_minus_gamma_power(getkey):
    """E||x^h_t||^2 = 1 - gamma_h^{2t} for white unit-variance inputs (t = 1, 2, ...).

    Exactly: x_t has covariance Sigma_t = sum_j gamma^{2j} xi^2 A^j B B^T A^{jT}, whose trace is
    1 - gamma^{2t}; for Gaussian inputs Var||x_t||^2 = 2 tr(Sigma_t^2). The Monte Carlo mean of
    S samples must lie within 5 of its standard errors sqrt(2 tr(Sigma_t^2) / S) of the truth,
    a relative tolerance of at most 5 sqrt(2 / S) = 3.9% at S = 2^15.
    """
    S = 2**15
    config = RotRNNConfig(d_model=H, d_state=N, heads=HEADS, gamma_min=0.5, gamma_max=0.95)
    layer = RotRNN(config, key=getkey())
    p = dense_parameters(layer)
    steps = np.arange(1, L + 1)
    expected = 1 - p["gamma"][None, :] ** (2 * steps[:, None])  # (L, heads)
    assert expected[0].max() < 0.8 and expected[-1].min() > 0.5  # a curve, not a constant

    sigma = np.zeros(p["A"].shape)
    variance = np.zeros((L, HEADS))
    BBt = (p["xi"][:, None, None] ** 2) * p["B"] @ np.swapaxes(p["B"], 1, 2)
    for t in range(L):
        sigma = p["gamma"][:, None, None] ** 2 * p["A"] @ sigma @ np.swapaxes(p["A"], 1, 2) + BBt
        np.testing.assert_allclose(np.trace(sigma, axis1=1, axis2=2), expected[t], rtol=1e-10)
        variance[t] = 2 * np.einsum("hij,hji->h", sigma, sigma)

    u = inputs(5, (S, L, H))
    batched = eqx.filter_jit(lambda m, x: jax.vmap(m.hidden_states)(x))
    states = batched(layer, u).reshape(S, L, HEADS, -1)  # (S, L, heads, pairs)
    measured = np.asarray(jnp.mean(jnp.sum(jnp.abs(states) ** 2, axis=-1), axis=0))
    z = np.abs(measured - expected) / np.sqrt(variance / S)
    assert z.max() <= 5, z.max()


def test_recurrent_mask_is_the_transition_and_input_map(getkey):
    config = RotRNNConfig(d_model=H, d_state=N, heads=HEADS, bidirectional=True)
    layer = RotRNN(config, key=getkey())
    mask = layer.recurrent_mask()
    assert jax.tree.structure(mask) == jax.tree.structure(layer)
    assert (mask.M, mask.angles, mask.gamma_loglog, mask.B) == (True, True, True, True)
    assert (mask.C, mask.D, mask.C_reverse) == (False, False, False)


def test_normalise_false_fixes_xi_to_one(getkey):
    layer = RotRNN(RotRNNConfig(d_model=H, d_state=N, heads=HEADS, normalise=False), key=getkey())
    np.testing.assert_array_equal(np.asarray(layer.input_scale()), np.ones(HEADS))


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(d_state=7), "d_state=7 must be even"),
        (dict(d_state=12, heads=4), "accepted heads for this d_state: [1, 2, 3, 6]"),
        (dict(gamma_min=0.99, gamma_max=0.9), "gamma_min=0.99 must not exceed gamma_max=0.9"),
        (dict(gamma_max=1.0), "gamma_max=1.0 must lie in (0.0, 1.0)"),
        (dict(max_phase=7.0), "max_phase=7.0 must lie in"),
        (dict(algorithm="convolution"),
         "accepted values: ['auto', 'sequential', 'native', 'fused', 'parallel', 'chunked']"),
    ],
)
def test_bad_config_is_an_error_naming_the_accepted_values(options, message):
    with pytest.raises(ValueError) as error:
        RotRNNConfig(**dict(dict(d_model=H, d_state=8), **options))
    assert message in str(error.value)


def test_unknown_gamma_init_names_both_inits():
    # Under pytest the jaxtyping hook rejects a value outside the Literal (a TypeError) before
    # __post_init__ (a ValueError) can; either message must name the accepted inits.
    with pytest.raises((TypeError, ValueError)) as error:
        RotRNNConfig(d_model=H, d_state=8, gamma_init="uniform")
    assert "'loglog_uniform'" in str(error.value) and "'ring'" in str(error.value)
