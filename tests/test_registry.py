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

from linrnn_bench import models
from helpers import inputs, tol
from linrnn_bench.models._registry import config_class

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


def test_parameters_are_strongly_typed(built):
    """No parameter carries a Python scalar's weak type: a training step's outputs are strongly
    typed, so a weak-typed initial parameter would compile the first step twice."""
    _, layer, _, _ = built
    leaves = jax.tree_util.tree_leaves_with_path(eqx.filter(layer, eqx.is_inexact_array))
    weak = [jax.tree_util.keystr(path) for path, leaf in leaves if leaf.weak_type]
    assert not weak, f"weak-typed parameters: {weak}"


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


# --------------------------------------------------------------------------------------------
# The registration: what the harness knows about a model comes from here


def test_every_registration_is_a_complete_identity_card():
    for info in models.infos():
        assert info is models.info(info.name) and info.origin == models.BUILTIN
        assert info.label and info.paper_size is not None and info.benchmark is not None
        assert info.capabilities >= models.ENGINE_CAPABILITIES
        assert info.option_names()[:2] == ("d_model", "d_state")
        if info.has(models.EQUIVALENCE):
            assert info.equivalence.target in NAMES and callable(info.equivalence.function())
    # Labels as the papers write them, in the order of every table.
    assert [(m.name, m.label) for m in models.infos()] == [
        ("rotrnn", "RotRNN"), ("lru", "LRU"), ("s4d", "S4D"), ("s5", "S5")]
    with pytest.raises(ValueError, match="Unknown capability 'telepathy'; accepted"):
        models.info("lru").has("telepathy")


def test_task_options_merge_the_entries_that_apply_in_order():
    # LRU Table 9: N = 256 at gpu scale, and the ring of each task at any scale.
    assert models.task_options("lru", "listops", "gpu") == {"d_state": 256, "r_min": 0.0,
                                                            "r_max": 0.99}
    assert models.task_options("lru", "listops", "cpu") == {"r_min": 0.0, "r_max": 0.99}
    assert models.task_options("lru", "digits", "cpu") == {}
    # S5: bidirectional everywhere at gpu scale, then the task's P and J.
    assert models.task_options("s5", "pathx", "gpu") == {"bidirectional": True, "d_state": 256,
                                                         "blocks": 16}
    assert models.task_options("rotrnn", "listops", "gpu") == {"d_state": 128, "heads": 32}


def test_width_options_keep_the_authors_head_size():
    width = models.info("rotrnn").width_options
    assert width(32, 32) == {"heads": 8} and width(128, 128) == {"heads": 32}
    # Every derived head count is valid for its state size.
    for d_state in range(2, 130, 2):
        models.make_config("rotrnn", d_model=4, d_state=d_state, **width(4, d_state))
    assert all(models.info(n).width_options is None for n in ("lru", "s4d", "s5"))


def test_ablations_become_variants_built_with_width_options():
    from linrnn_bench.harness.variants import build_options, check_variants, variant, variants

    assert list(variants()) == ["rotrnn", "rotrnn-no-xi", "rotrnn-ring", "lru", "lru-no-gamma",
                                "s4d", "s5"]
    no_xi = variant("rotrnn-no-xi")
    assert (no_xi.model, no_xi.options, no_xi.label) == ("rotrnn", (("normalise", False),),
                                                         "RotRNN, xi off")
    assert build_options(no_xi, 8, 32) == {"heads": 8, "normalise": False}
    # A study's explicit option reaches the models that take it, and only those.
    assert build_options(no_xi, 8, 32, {"heads": 2}) == {"heads": 2, "normalise": False}
    assert build_options(variant("lru-no-gamma"), 8, 32, {"heads": 2}) == {"normaliser": "none"}
    with pytest.raises(ValueError, match=r"unknown variant\(s\) \['gru'\]; accepted"):
        check_variants("where", ("lru", "gru"))
    with pytest.raises(ValueError, match="repeats"):
        check_variants("where", ("lru", "lru"))


def test_benchmark_shapes_keep_the_published_times():
    lru = models.info("lru").benchmark
    assert (lru.d_state, lru.structure) == (128, "scan")
    assert lru.published_ms(1024) == (67.0, 217.0) and lru.published_ms(2048) is None
    assert models.info("s4d").benchmark.structure == "convolution"


def test_every_study_pickles_for_the_worker_processes():
    # The processes executor sends the study to its workers: a closure as skip_reason would
    # fail there (and only there, after the grid started).
    import pickle

    from linrnn_bench.harness import studies

    for name in studies.names():
        study = studies.get(name)
        clone = pickle.loads(pickle.dumps(study))
        assert clone.name == name
        for info in models.infos():
            assert clone.skip_reason(info) == study.skip_reason(info)
