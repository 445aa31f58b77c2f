"""LRU against its paper: the ring initialisation, the scales of B and C, the normaliser.

Reference (the LRU paper, docs/sources.md): x_k = lambda x_{k-1} + gamma (B u_k),
y_k = Re(C x_k) + D u_k,
lambda = exp(-exp(nu_log) + i exp(theta_log)), gamma = exp(gamma_log) (1 without normaliser).
The output and the states against a float64 loop over this recurrence (`complex_reference`) are
checked with every model's in tests/test_references.py.
"""

from __future__ import annotations

import math

import jax
import numpy as np
import pytest

from linrnn_bench.models.lru import LRU, LRUConfig

# H channels, P complex states.
H, P = 3, 12


@pytest.mark.parametrize(
    "r_min, r_max, max_phase",
    [(0.9, 0.999, 6.28), (0.0, 0.99, 2 * math.pi), (0.999, 0.9999, math.pi / 10)],
)
def test_ring_initialisation(getkey, r_min, r_max, max_phase):
    """|lambda| in [r_min, r_max], phases in [0, max_phase], |lambda|^2 and phase uniform.

    Bounds allow float32 round-off of exp(-exp(log(nu))) (relative 1e-6). Means of n = 4096
    uniform draws must lie within 5 standard errors (width / sqrt(12 n)) of the midpoint.
    """
    n = 4096
    config = LRUConfig(d_model=H, d_state=n, r_min=r_min, r_max=r_max, max_phase=max_phase)
    layer = LRU(config, key=getkey())
    lam = np.asarray(layer.eigenvalues()).astype(np.complex128)
    radius, phase = np.abs(lam), np.exp(np.asarray(layer.theta_log, np.float64))
    assert radius.min() >= r_min * (1 - 1e-6) and radius.max() <= r_max * (1 + 1e-6)
    assert phase.min() >= 0 and phase.max() <= max_phase * (1 + 1e-6)
    width_sq = r_max**2 - r_min**2
    assert abs(np.mean(radius**2) - (r_min**2 + r_max**2) / 2) <= 5 * width_sq / math.sqrt(12 * n)
    assert abs(np.mean(phase) - max_phase / 2) <= 5 * max_phase / math.sqrt(12 * n)
    # The normaliser starts at gamma = sqrt(1 - |lambda|^2), |lambda|^2 = exp(-2 exp(nu_log)).
    exact = np.sqrt(-np.expm1(-2 * np.exp(np.asarray(layer.nu_log, np.float64))))
    np.testing.assert_allclose(np.exp(np.asarray(layer.gamma_log, np.float64)), exact, rtol=1e-5)


def test_input_and_output_scales(getkey):
    """B ~ (N(0,1) + i N(0,1)) / sqrt(2H), C ~ (N(0,1) + i N(0,1)) / sqrt(P): sample variances."""
    layer = LRU(LRUConfig(d_model=H, d_state=4096), key=getkey())
    for part, variance in [(layer.B_re, 1 / (2 * H)), (layer.B_im, 1 / (2 * H))]:
        # The sample variance of n normal draws has relative standard error sqrt(2 / n).
        assert abs(np.var(np.asarray(part)) / variance - 1) <= 5 * math.sqrt(2 / part.size)
    for part in (layer.C_re, layer.C_im):
        assert abs(np.var(np.asarray(part)) * 4096 - 1) <= 5 * math.sqrt(2 / part.size)


def test_no_normaliser_means_no_gamma(getkey):
    layer = LRU(LRUConfig(d_model=H, d_state=P, normaliser="none"), key=getkey())
    assert layer.gamma_log is None
    system = layer.discrete_system()
    np.testing.assert_array_equal(np.asarray(system.B), np.asarray(layer.B_re + 1j * layer.B_im))


@pytest.mark.parametrize("normaliser", ["learned", "none"])
def test_recurrent_mask_is_lambda_b_and_gamma(getkey, normaliser):
    config = LRUConfig(d_model=H, d_state=P, normaliser=normaliser, bidirectional=True)
    layer = LRU(config, key=getkey())
    mask = layer.recurrent_mask()
    assert jax.tree.structure(mask) == jax.tree.structure(layer)
    assert (mask.nu_log, mask.theta_log, mask.B_re, mask.B_im) == (True,) * 4
    assert mask.gamma_log is (True if normaliser == "learned" else None)
    assert (mask.C_re, mask.C_im, mask.D, mask.C_reverse_re, mask.C_reverse_im) == (False,) * 5


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(r_min=0.95, r_max=0.9), "r_min=0.95 must not exceed r_max=0.9"),
        (dict(r_max=1.5), "r_max=1.5 must lie in (0.0, 1.0)"),
        (dict(r_min=-0.1), "r_min=-0.1 must lie in [0.0, 1.0]"),
        (dict(max_phase=0.0), "max_phase=0.0 must be positive"),
        (dict(max_phase=7.0), "max_phase=7.0 must lie in"),
        (dict(algorithm="convolution"),
         "accepted values: ['auto', 'sequential', 'native', 'fused', 'parallel', 'chunked']"),
    ],
)
def test_bad_config_is_an_error_naming_the_accepted_values(options, message):
    with pytest.raises(ValueError) as error:
        LRUConfig(**dict(dict(d_model=H, d_state=P), **options))
    assert message in str(error.value)


def test_unknown_normaliser_names_both_normalisers():
    # Under pytest the jaxtyping hook rejects a value outside the Literal (a TypeError) before
    # __post_init__ (a ValueError) can; either message must name the accepted normalisers.
    with pytest.raises((TypeError, ValueError)) as error:
        LRUConfig(d_model=H, d_state=P, normaliser="fixed")
    assert "'learned'" in str(error.value) and "'none'" in str(error.value)
