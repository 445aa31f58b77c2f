"""S4D's convolution against its recurrences, and its initialisations and options.

The output and the states against a float64 numpy loop per channel (`bank_reference`, under the
CPU default and the convolution) are checked with every model's in tests/test_references.py.
"""

from __future__ import annotations

import dataclasses
import math

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from helpers import as64, tol, with_algorithm
from helpers import perturbed_s4d as perturbed

from linrnn_bench import models
from linrnn_bench.models import _native
from linrnn_bench.models.s4d import S4D, S4DConfig

F32 = tol(np.float32)
H, N, L = 3, 8, 12  # one set of shapes, so compiled code is shared between tests
# (init, discretisation, bidirectional, train_B): the structures the convolution is checked in.
CASES = [
    ("lin", "bilinear", True, False),
    ("inv", "zoh", True, True),
]


# Jitted once per layer structure: eager calls would retrace the engine's scan every time.
@eqx.filter_jit
def forward(layer, u):
    return layer(u)


@pytest.mark.parametrize("init,discretisation,bidirectional,train_B", CASES)
def test_convolution_equals_recurrence(getkey, init, discretisation, bidirectional, train_B):
    key = getkey()
    config = S4DConfig(
        H, N, init=init, discretisation=discretisation, bidirectional=bidirectional,
        train_B=train_B,
    )
    layer = perturbed(S4D(config, key=key), getkey())
    layer = with_algorithm(layer, S4D(dataclasses.replace(config, algorithm="convolution"), key=key))
    u = jr.normal(getkey(), (L, H))
    y = forward(layer, u)
    recurrences = ("sequential", "parallel", "native") if _native.available() else (
        "sequential", "parallel")
    for algorithm in recurrences:
        template = S4D(dataclasses.replace(config, algorithm=algorithm), key=key)
        other = with_algorithm(layer, template)
        assert other.resolved_algorithm() == algorithm
        np.testing.assert_allclose(forward(other, u), y, **F32)
    # The kernel is the impulse response of the forward recurrence: K_l = y_l - D delta_l.
    system = layer.discrete_system()
    forward_only = models.DiscreteSystem(
        lam=system.lam, B=system.B, C=system.C, D=system.D, conj_sym=True, structure="bank"
    )
    impulse = jnp.zeros((L, H)).at[0].set(1.0)
    response = models.apply(forward_only, impulse, algorithm="sequential")
    response = response - impulse * layer.D[None, :]
    np.testing.assert_allclose(layer.kernel(L), response, **F32)


def test_initialisation_lin_and_inv(getkey):
    lin = S4D(S4DConfig(H, N, dt_min=0.01, dt_max=0.02), key=getkey())
    inv = S4D(S4DConfig(H, N, init="inv", train_B=False), key=getkey())
    for layer in (lin, inv):
        np.testing.assert_allclose(-np.exp(as64(layer.A_real_log)), -0.5, rtol=1e-6)
    # S4D-Lin: a_n = -1/2 + i pi n;  S4D-Inv: a_n = -1/2 + i (N/pi)(N/(2n+1) - 1).
    for n in range(N // 2):
        np.testing.assert_allclose(lin.A_imag[:, n], math.pi * n, rtol=1e-6)
        np.testing.assert_allclose(inv.A_imag[:, n], N / math.pi * (N / (2 * n + 1) - 1), rtol=1e-6)
    assert np.all(np.asarray(lin.B_re) == 1) and np.all(np.asarray(lin.B_im) == 0)
    assert inv.B_re is None and inv.B_im is None
    system = inv.discrete_system()  # B fixed at 1: B_bar is the ZOH gain (lambda - 1)/a
    a = -0.5 + 1j * as64(inv.A_imag)
    np.testing.assert_allclose(system.B, (np.asarray(system.lam, np.complex128) - 1) / a, **F32)
    Delta = np.exp(as64(lin.Delta_log))
    assert Delta.shape == (H,)
    assert np.all((Delta >= 0.01 * (1 - 1e-6)) & (Delta <= 0.02 * (1 + 1e-6)))
    for layer in (lin, inv):
        assert np.all(np.abs(layer.discrete_system().lam) < 1)


def test_output_map_is_complex_standard_normal(getkey):
    # E|C_n|^2 = 1 with real and imaginary parts of variance 1/2 (torch.randn's complex
    # convention, which the authors' code uses). 64 x 64 draws: standard errors about 0.02.
    layer = S4D(S4DConfig(64, 128), key=getkey())
    C_re, C_im = as64(layer.C_re), as64(layer.C_im)
    assert abs(np.mean(C_re**2 + C_im**2) - 1.0) < 0.1
    assert abs(np.var(C_re) - 0.5) < 0.05 and abs(np.var(C_im) - 0.5) < 0.05
    assert abs(np.mean(C_re)) < 0.05 and abs(np.mean(C_im)) < 0.05


def test_rescaled_multiplies_every_timescale(getkey):
    layer = S4D(S4DConfig(H, N), key=getkey())
    doubled = layer.rescaled(2.0)
    np.testing.assert_allclose(np.exp(doubled.Delta_log), 2 * np.exp(layer.Delta_log), rtol=1e-6)
    a = -np.exp(as64(layer.A_real_log)) + 1j * as64(layer.A_imag)
    expected = np.exp(a * 2 * np.exp(as64(layer.Delta_log))[:, None])
    np.testing.assert_allclose(doubled.discrete_system().lam, expected, **F32)
    with pytest.raises(ValueError, match="timescale factor must be a finite number > 0"):
        layer.rescaled(-1.0)


@pytest.mark.parametrize("train_B", [True, False])
def test_recurrent_mask(getkey, train_B):
    layer = S4D(S4DConfig(H, N, train_B=train_B, bidirectional=True), key=getkey())
    mask = layer.recurrent_mask()
    assert jax.tree_util.tree_structure(mask) == jax.tree_util.tree_structure(layer)
    recurrent = {"A_real_log", "A_imag", "Delta_log"} | ({"B_re", "B_im"} if train_B else set())
    for name in ("A_real_log", "A_imag", "B_re", "B_im", "C_re", "C_im", "C_reverse_re",
                 "C_reverse_im", "D", "Delta_log"):
        if getattr(layer, name) is None:
            assert getattr(mask, name) is None and not train_B and name.startswith("B_")
        else:
            assert getattr(mask, name) is (name in recurrent), name


@pytest.mark.parametrize(
    "options,message",
    [
        (dict(d_state=7), "d_state=7 must be even"),
        (dict(init="legs"), r"'legs'[\s\S]*'inv'"),
        (dict(discretisation="euler"), r"'euler'[\s\S]*'bilinear'"),
        (dict(dt_min=0.1, dt_max=0.01), "dt_min=0.1 must not exceed"),
        (dict(dt_min=-0.1), "dt_min=-0.1 must lie in"),
        (dict(algorithm="fft"), r"'fft'[\s\S]*'convolution'"),
        (dict(d_model=0), "d_model must be a positive integer"),
    ],
)
def test_bad_config_is_rejected(options, message):
    # Under pytest the jaxtyping hook checks Literal fields before __post_init__ runs, and its
    # TypeError also names the bad value and the accepted ones; elsewhere the ValueError does.
    with pytest.raises((ValueError, TypeError), match=message):
        S4DConfig(**{"d_model": 2, "d_state": 8, **options})


def test_built_by_the_registry(getkey):
    layer = models.build("s4d", d_model=H, d_state=N, key=getkey(), init="inv")
    assert isinstance(layer, S4D) and layer.state_size == H * N // 2
    assert forward(layer, jnp.ones((L, H))).shape == (L, H)
