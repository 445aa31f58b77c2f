"""A multi-head RotRNN and the LRU that `rotrnn_to_lru` builds compute the same function."""

from __future__ import annotations

import math

import equinox as eqx
import jax.numpy as jnp
import numpy as np
import pytest

from helpers import cast, complex_reference, dense_reference, inputs, precision, tol
from linrnn_bench.models.equivalence import rotrnn_to_lru
from linrnn_bench.models.lru import LRU
from linrnn_bench.models.rotrnn import RotRNN, RotRNNConfig

# The RotRNN tests' shapes (H channels, N real states in HEADS heads, L steps), so that the
# compilations are shared.
H, N, HEADS, L = 3, 12, 3, 16

# Angles the LRU cannot store as they are (theta_log = log theta needs theta > 0): negative,
# zero, beyond 2 pi, exactly 2 pi; one row per head, N / HEADS / 2 = 2 angles each.
AWKWARD_ANGLES = [[-1.0, 0.0], [7.5, 2 * math.pi], [-4.0, 3.0]]


@pytest.mark.parametrize(
    "dtype, bidirectional, normalise",
    [("float32", False, False), ("float64", True, True)],
)
def test_rotrnn_and_its_lru_agree(getkey, dtype, bidirectional, normalise):
    config = RotRNNConfig(
        d_model=H, d_state=N, heads=HEADS, bidirectional=bidirectional, normalise=normalise
    )
    rotrnn = RotRNN(config, key=getkey())
    with precision(dtype):
        rotrnn = cast(rotrnn, dtype)
        rotrnn = eqx.tree_at(lambda m: m.angles, rotrnn, jnp.asarray(AWKWARD_ANGLES, dtype))
        lru = rotrnn_to_lru(rotrnn)
        u = inputs(20, (L, H), dtype)
        assert isinstance(lru, LRU) and lru.state_size == N
        assert np.all(np.isfinite(np.asarray(lru.theta_log)))

        # Conjugate pairs, of modulus gamma_h and phase +-theta.
        lam = np.asarray(lru.eigenvalues())
        np.testing.assert_allclose(lam[N // 2 :], np.conj(lam[: N // 2]), **tol(dtype))
        expected = np.repeat(np.asarray(rotrnn.decay()), N // HEADS // 2) * np.exp(
            1j * np.asarray(AWKWARD_ANGLES).reshape(-1)
        )
        np.testing.assert_allclose(lam[: N // 2], expected, **tol(dtype))

        # Same outputs (to round-off), same state norms.
        y_rot, y_lru = np.asarray(rotrnn(u)), np.asarray(lru(u))
        np.testing.assert_allclose(y_lru, y_rot, **tol(dtype))
        np.testing.assert_allclose(y_lru, dense_reference(rotrnn, u)[0], **tol(dtype))
        np.testing.assert_allclose(y_lru, complex_reference(lru, u)[0], **tol(dtype))
        norm_rot = np.linalg.norm(np.asarray(rotrnn.hidden_states(u)), axis=-1)
        norm_lru = np.linalg.norm(np.asarray(lru.hidden_states(u)), axis=-1)
        np.testing.assert_allclose(norm_lru, norm_rot, **tol(dtype))
