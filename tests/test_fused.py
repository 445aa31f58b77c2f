"""The fused, chunked layer op (`models._fused`) against the unfused engine path and finite
differences.

The unfused path is the composition the fused op replaces: ``b = u B_in^T`` for the whole
sequence, `models._scan.planar_scan` (itself checked against float64 loops and autodiff in
test_engine.py), then ``y = h C_out^T``. Chunks of 4 steps make every case cross several
chunk boundaries; lengths cover one step, fewer steps than a chunk, an exact multiple of the
chunk and a ragged tail.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

from helpers import tol
from linrnn_bench.models._fused import fused_recurrence
from linrnn_bench.models._scan import planar_scan

CHUNK = 4
LENGTHS = [1, 3, 8, 11]


def _unfused(lam_re, lam_im, B_in, C_out, u, reverse):
    length = u.shape[0]
    b = (u @ B_in.T).reshape(length, 2, -1)
    h = planar_scan(lam_re, lam_im, b, reverse=reverse)
    return h.reshape(length, -1) @ C_out.T


def _fused(lam_re, lam_im, B_in, C_out, u, reverse):
    return fused_recurrence(lam_re, lam_im, B_in, C_out, u, reverse=reverse, chunk=CHUNK)


def _arguments(seed, length, dtype, *, P=5, H=3, batch=None):
    """(lam_re, lam_im, B_in, C_out, u, dy): a stable lambda (|lam| in [0.5, 0.99])."""
    rng = np.random.default_rng(seed)
    lam = rng.uniform(0.5, 0.99, P) * np.exp(1j * rng.uniform(0, 2 * np.pi, P))
    lead = () if batch is None else (batch,)
    arrays = (
        lam.real,
        lam.imag,
        rng.normal(size=(2 * P, H)) / np.sqrt(H),
        rng.normal(size=(H, 2 * P)) / np.sqrt(2 * P),
        rng.normal(size=(*lead, length, H)),
        rng.normal(size=(*lead, length, H)),
    )
    return tuple(jnp.asarray(x, dtype) for x in arrays)


def _close(actual, expected, dtype):
    np.testing.assert_allclose(np.asarray(actual), np.asarray(expected), **tol(dtype))


@jax.jit(static_argnums=(0, 1))
def _value_and_vjp(fn, reverse, args, dy):
    y, vjp = jax.vjp(lambda *a: fn(*a, reverse), *args)
    return y, vjp(dy)


# float64 at every length (tolerances that only exact chunking meets); float32 at the ragged
# length, which crosses full chunks and a tail, for float32's round-off and dtype. float32 at the
# shorter lengths ran the same code paths float64 checks there, and was dropped for time; the
# layers' float32 chunked path (full chunk and tail) is also checked below.
@pytest.mark.parametrize(
    "length, dtype", [*((n, np.float64) for n in LENGTHS), (LENGTHS[-1], np.float32)]
)
@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reverse"])
def test_fused_equals_unfused_forward_and_vjp(dtype, reverse, length):
    with jax.enable_x64(dtype == np.float64):
        *args, dy = _arguments(length, length, dtype)
        y, grads = _value_and_vjp(_fused, reverse, tuple(args), dy)
        y_ref, grads_ref = _value_and_vjp(_unfused, reverse, tuple(args), dy)
        assert y.dtype == dtype and y.shape == dy.shape
        _close(y, y_ref, dtype)
        for name, got, want in zip(["lam_re", "lam_im", "B_in", "C_out", "u"], grads, grads_ref):
            assert got.dtype == dtype, name
            _close(got, want, dtype)


@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reverse"])
def test_fused_batched_by_vmap_sums_parameter_gradients(reverse):
    # Under vmap the custom rule returns one parameter cotangent per sequence; JAX sums them.
    dtype = np.float64
    with jax.enable_x64(True):
        *args, dy = _arguments(20, 10, dtype, batch=4)

        def batched(fn):
            def run(lam_re, lam_im, B_in, C_out, u, reverse):
                one = lambda x: fn(lam_re, lam_im, B_in, C_out, x, reverse)  # noqa: E731
                return jax.vmap(one)(u)

            return run

        y, grads = _value_and_vjp(batched(_fused), reverse, tuple(args), dy)
        y_ref, grads_ref = _value_and_vjp(batched(_unfused), reverse, tuple(args), dy)
        _close(y, y_ref, dtype)
        for got, want in zip(grads, grads_ref):
            assert got.shape == want.shape
            _close(got, want, dtype)


@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reverse"])
@pytest.mark.parametrize("length", [1, 9])
def test_fused_gradients_match_finite_differences(reverse, length):
    with jax.enable_x64(True):
        *args, _ = _arguments(30 + length, length, np.float64, P=3, H=2)
        check_grads(jax.jit(lambda *a: _fused(*a, reverse)), tuple(args), order=1, modes=["rev"])


def test_fused_saves_only_the_states_entering_each_chunk():
    length, P = 22, 5
    *args, _ = _arguments(40, length, np.float32, P=P)
    _, vjp = jax.vjp(lambda *a: _fused(*a, False), *args)
    saved = sum(leaf.size for leaf in jax.tree_util.tree_leaves(vjp))
    # The arguments themselves and one (2, P) state per full chunk plus the tail's, never h.
    entering = (length // CHUNK + 1) * 2 * P
    assert saved == sum(a.size for a in args) + entering


def test_bad_chunk_is_an_error():
    *args, _ = _arguments(60, 4, np.float32)
    with pytest.raises(ValueError, match="positive integer chunk, got 0"):
        fused_recurrence(*args, chunk=0)


# --------------------------------------------------------------------------------------------
# Through the layers: algorithm="chunked" (and the C++ "fused", models._native.mimo) computes
# what "sequential" computes


@eqx.filter_jit
def _layer_pullback(layer, u, dy):
    """The layer's output on ``u`` and the cotangents of its parameters and of ``u`` for ``dy``.

    Compiled, and at module level: one program per layer structure (the sequential layer's is
    compiled once for both parametrisations of its model), which costs a fraction of the
    hundreds of eager operations of the same computation.
    """
    y, vjp = eqx.filter_vjp(lambda m, x: m(x), layer, u)
    return y, vjp(dy)


@eqx.filter_jit
def _layer_states(layer, u):
    # A program of its own, as _layer_pullback: both layers' discrete systems are then computed
    # by the same compiled operations, so the states compare at the tolerance below.
    return layer.hidden_states(u)


@pytest.mark.parametrize("algorithm", ["chunked", "fused"])
@pytest.mark.parametrize("model", ["rotrnn", "lru", "s5"])
def test_chunked_layers_equal_sequential_forward_and_gradients(model, algorithm, getkey):
    from linrnn_bench import models

    key = getkey()
    # Short chunks through the layer's own call: bidirectional, so both directions are fused.
    # test_flax's shapes (H = 3, d_state = 4), whose eager initialisation is then compiled.
    layers = {
        algorithm: models.build(model, d_model=3, d_state=4, key=key, bidirectional=True,
                                algorithm=algorithm)
        for algorithm in ("sequential", algorithm)
    }
    # Traced, not run: the same method, without compiling the discrete system op by op.
    assert eqx.filter_eval_shape(lambda layer: layer.resolved_algorithm(),
                                 layers[algorithm]) == algorithm
    # > CHUNK = 256 steps: crosses a chunk boundary. numpy draws: an eager jax.random draw
    # compiles a program per shape.
    rng = np.random.default_rng(0)
    u = jnp.asarray(rng.standard_normal((300, 3)), jnp.float32)
    dy = jnp.asarray(rng.standard_normal(u.shape), jnp.float32)

    y_seq, grads_seq = _layer_pullback(layers["sequential"], u, dy)
    y_chunk, grads_chunk = _layer_pullback(layers[algorithm], u, dy)
    np.testing.assert_allclose(y_chunk, y_seq, **tol(jnp.float32))
    leaves_seq, leaves_chunk = jax.tree.leaves(grads_seq), jax.tree.leaves(grads_chunk)
    assert len(leaves_seq) == len(leaves_chunk) > 1
    for g_chunk, g_seq in zip(leaves_chunk, leaves_seq):
        scale = max(1.0, float(jnp.max(jnp.abs(g_seq))))
        np.testing.assert_allclose(g_chunk, g_seq, rtol=1e-4, atol=1e-5 * scale)
    # Hidden states come from the recurrence the fused paths fuse.
    np.testing.assert_allclose(
        _layer_states(layers[algorithm], u), _layer_states(layers["sequential"], u), rtol=1e-6
    )


# Named "refused", not "algorithm": a config check, which runs where the native kernels do not
# (conftest skips tests parametrised with algorithm="fused" there).
@pytest.mark.parametrize("refused", ["chunked", "fused"])
def test_chunked_is_refused_for_a_bank(refused):
    from linrnn_bench import models

    with pytest.raises(ValueError, match=f"S4DConfig.algorithm='{refused}' is not accepted"):
        models.make_config("s4d", d_model=4, d_state=8, algorithm=refused)
