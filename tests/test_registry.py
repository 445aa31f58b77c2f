"""The layer contract, for every registered model: one registry line brings these tests.

Each layer is built once per module (``built``) at small shapes, H = 3 channels and
d_state = 12, so that compilation, which dominates the time, happens once per model.
"""

from __future__ import annotations

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import models
from conftest import tol
from models._registry import config_class
from test_rotrnn import inputs

H, D_STATE, L, BATCH = 3, 12, 16, 3
NAMES = models.names()


@pytest.fixture(scope="module", params=NAMES)
def built(request):
    """(name, layer, u, y = layer(u)); a fixed key, as module-scoped fixtures cannot use getkey."""
    name = request.param
    layer = models.build(name, d_model=H, d_state=D_STATE, key=jr.PRNGKey(0))
    u = inputs(30, (L, H))
    return name, layer, u, layer(u)


def test_registry_lists_the_four_papers_models():
    assert {"rotrnn", "lru", "s4d", "s5"} <= set(NAMES)


def test_call_maps_one_sequence_to_one_sequence(built):
    name, layer, u, y = built
    assert isinstance(layer, models.AbstractRecurrentLayer)
    assert isinstance(models.make_config(name, d_model=H, d_state=D_STATE), config_class(name))
    assert y.shape == (L, H) and y.dtype == u.dtype
    assert np.all(np.isfinite(np.asarray(y)))
    assert layer.resolved_algorithm() in models.ALGORITHMS
    # A causal layer: changing the last input leaves every earlier output alone.
    if not layer.discrete_system().bidirectional:
        y_changed = np.asarray(layer(u.at[-1].add(1.0)))
        np.testing.assert_allclose(y_changed[:-1], np.asarray(y[:-1]), **tol("float32"))
        assert not np.allclose(y_changed[-1], np.asarray(y[-1]))


def test_vmap_jit_and_gradients(built):
    """Batching is jax.vmap; under jit the outputs agree with eager ones; gradients are finite."""
    _, layer, u, y = built
    batch = jnp.stack([u] + [inputs(31 + i, (L, H)) for i in range(BATCH - 1)])

    @eqx.filter_jit
    @eqx.filter_value_and_grad(has_aux=True)
    def loss(m, x):
        out = jax.vmap(m)(x)
        return jnp.mean(out**2), out

    (_, y_batch), grads = loss(layer, batch)
    assert y_batch.shape == (BATCH, L, H)
    np.testing.assert_allclose(np.asarray(y_batch[0]), np.asarray(y), **tol("float32"))
    y_second = np.asarray(layer(batch[1]))
    np.testing.assert_allclose(np.asarray(y_batch[1]), y_second, **tol("float32"))
    leaves = jax.tree.leaves(grads)
    assert len(leaves) == len(jax.tree.leaves(eqx.filter(layer, eqx.is_inexact_array)))
    assert all(np.all(np.isfinite(np.asarray(g))) for g in leaves)
    assert any(np.abs(np.asarray(g)).max() > 0 for g in leaves)


def test_discrete_system_is_consistent_with_state_size(built):
    _, layer, _, _ = built
    system = layer.discrete_system()
    P = layer.state_size
    assert system.D.shape == (H,)
    if system.structure == "mimo":
        assert system.lam.shape == (P,)
        assert system.B.shape == (P, H) and system.C.shape == (H, P)
    elif system.structure == "bank":
        N = system.lam.shape[1]
        assert system.lam.shape == system.B.shape == system.C.shape == (H, N)
        assert P == H * N
    else:
        raise AssertionError(f"unknown structure {system.structure!r}")
    assert np.abs(np.asarray(system.lam)).max() < 1


def test_hidden_states_and_kernel(built):
    """States are (L, P); the kernel, convolved with u, reproduces the output (forward only)."""
    _, layer, u, y = built
    h = layer.hidden_states(u)
    assert h.shape == (L, layer.state_size) and jnp.iscomplexobj(h)
    system = layer.discrete_system()
    K = np.asarray(layer.kernel(L), np.float64)
    if system.bidirectional:
        return
    u64 = np.asarray(u, np.float64)
    if system.structure == "mimo":
        assert K.shape == (L, H, H)
        y_conv = np.stack([sum(K[l] @ u64[t - l] for l in range(t + 1)) for t in range(L)])
    else:
        assert K.shape == (L, H)
        y_conv = np.stack([sum(K[l] * u64[t - l] for l in range(t + 1)) for t in range(L)])
    y_conv = y_conv + np.asarray(system.D, np.float64) * u64
    np.testing.assert_allclose(y_conv, np.asarray(y), rtol=1e-3, atol=1e-4)


def test_recurrent_mask_has_the_layers_structure(built):
    _, layer, _, _ = built
    mask = layer.recurrent_mask()
    assert jax.tree.structure(mask) == jax.tree.structure(layer)
    leaves = jax.tree.leaves(mask)
    assert all(isinstance(leaf, bool) for leaf in leaves)
    assert any(leaves)


@pytest.mark.parametrize("name", NAMES)
def test_bidirectional_option_adds_a_reverse_output_map(name):
    if "bidirectional" not in [f.name for f in dataclasses.fields(config_class(name))]:
        pytest.skip(f"{name} has no bidirectional option")
    layer = models.build(name, d_model=H, d_state=D_STATE, key=jr.PRNGKey(1), bidirectional=True)
    system = layer.discrete_system()
    assert system.bidirectional and system.C_reverse.shape == system.C.shape


@pytest.mark.parametrize("name", NAMES)
def test_bad_options_are_errors_naming_what_is_accepted(name):
    fields = [f.name for f in dataclasses.fields(config_class(name))]
    with pytest.raises(ValueError) as error:
        models.build(name, d_model=H, d_state=D_STATE, key=jr.PRNGKey(0), not_an_option=1)
    assert "not_an_option" in str(error.value)
    assert all(field in str(error.value) for field in fields)
    with pytest.raises(ValueError) as error:
        models.make_config(name, d_model=0, d_state=D_STATE)
    assert "d_model" in str(error.value) and "0" in str(error.value)
    # A value outside a Literal is rejected by the jaxtyping hook under pytest (TypeError) or by
    # the config's own validation (ValueError); both name the accepted values.
    with pytest.raises((TypeError, ValueError)) as error:
        models.make_config(name, d_model=H, d_state=D_STATE, algorithm="fastest")
    assert "'sequential'" in str(error.value) and "'parallel'" in str(error.value)


def test_unknown_model_is_an_error_naming_the_models():
    with pytest.raises(ValueError) as error:
        models.build("transformer", d_model=H, d_state=D_STATE, key=jr.PRNGKey(0))
    assert "'transformer'" in str(error.value)
    assert all(name in str(error.value) for name in NAMES)
