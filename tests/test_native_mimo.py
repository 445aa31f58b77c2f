"""`models._native.mimo`: the C++ fused input map, recurrence and readout, and its VJP.

Reference: the unfused computation (matmul, `models._scan`'s XLA loop, matmul), differentiated
by its own rules, in float64. The cases reach every branch of the kernel: one sequence and a
batch, both directions, a tail chunk (L not a multiple of 256), L = 1, and the split of one
sequence's states between threads (fewer sequences than threads, enough work to thread), with a
block size that does not divide P. The engine's and layers' tests run ``algorithm="fused"`` too
(tests/test_engine.py, tests/test_fused.py).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from linrnn_bench.models import _native
from linrnn_bench.models._scan import planar_scan

pytestmark = pytest.mark.skipif(
    not _native.available(), reason=f"native kernels: {_native.status().reason}"
)


def _mimo_output(*args, **kwargs):
    from linrnn_bench.models._native.mimo import mimo_output

    return mimo_output(*args, **kwargs)


def unfused(lam_re, lam_im, B_in, C_out, u, *, reverse=False):
    b = (u @ B_in.T).reshape(u.shape[0], 2, -1)
    h = planar_scan(lam_re, lam_im, b, reverse=reverse, algorithm="sequential")
    return h.reshape(u.shape[0], -1) @ C_out.T


def arguments(seed: int, length: int, channels: int, states: int, batch: int | None):
    rng = np.random.default_rng(seed)
    modulus, phase = rng.uniform(0.5, 0.999, states), rng.uniform(0, np.pi, states)
    shape = (length, channels) if batch is None else (batch, length, channels)
    return (
        modulus * np.cos(phase), modulus * np.sin(phase),
        rng.standard_normal((2 * states, channels)) / np.sqrt(channels),
        rng.standard_normal((channels, 2 * states)) / np.sqrt(states),
        rng.standard_normal(shape), rng.standard_normal(shape),
    )


# (L, H, P, batch): batch None is one unvmapped sequence. 2048 x 72 states in one sequence is
# enough work to split its states between two threads, in blocks of 48 and 24.
CASES = [(1, 3, 2, None), (37, 3, 4, None), (300, 5, 6, 3), (513, 8, 40, 2), (2048, 8, 72, None),
         (2048, 8, 72, 1)]


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("length, channels, states, batch", CASES)
def test_forward_and_vjp_equal_the_unfused_computation(length, channels, states, batch, reverse):
    *params, u, dy = arguments(length + states, length, channels, states, batch)
    with jax.enable_x64(True):
        params = [jnp.asarray(p) for p in params]
        u, dy = jnp.asarray(u), jnp.asarray(dy)

        def run(f):
            g = lambda *a: f(*a, reverse=reverse)  # noqa: E731
            if batch is not None:
                g = jax.vmap(g, in_axes=(None, None, None, None, 0))
            y, vjp = jax.vjp(jax.jit(g), *params, u)
            return y, vjp(dy)

        y, grads = run(_mimo_output)
        y_ref, grads_ref = run(unfused)
        np.testing.assert_allclose(y, y_ref, rtol=1e-12, atol=1e-12)
        for got, expected in zip(grads, grads_ref, strict=True):
            assert got.shape == expected.shape
            np.testing.assert_allclose(got, expected, rtol=1e-11, atol=1e-11)


def test_a_vmap_over_seeds_around_the_batch_gives_each_seed_its_own_parameters():
    """A seed group (`harness.train.train_group`) vmaps a batched layer once more, over its
    seeds: the kernel gets parameters (seeds, 1, ...) against u (seeds, batch, ...) and must
    read seed s's parameters for each of its sequences, forward and backward."""
    seeds, batch = 3, 2
    per_seed = [arguments(10 + s, 40, 4, 6, batch) for s in range(seeds)]
    with jax.enable_x64(True):
        stacked = [jnp.asarray(np.stack(x)) for x in zip(*per_seed)]
        *params, u, dy = stacked

        def run(f):
            g = jax.vmap(f, in_axes=(None, None, None, None, 0))  # over the batch
            g = jax.vmap(g)  # over the seeds
            y, vjp = jax.vjp(jax.jit(g), *params, u)
            return y, vjp(dy)

        y, grads = run(_mimo_output)
        y_ref, grads_ref = run(unfused)
        np.testing.assert_allclose(y, y_ref, rtol=1e-12, atol=1e-12)
        for got, expected in zip(grads, grads_ref, strict=True):
            assert got.shape == expected.shape
            np.testing.assert_allclose(got, expected, rtol=1e-11, atol=1e-11)


def test_float32_follows_float64():
    *params, u, dy = arguments(3, 1000, 8, 16, 2)
    f = jax.jit(jax.vmap(_mimo_output, in_axes=(None, None, None, None, 0)))
    y32 = f(*(jnp.asarray(p, jnp.float32) for p in params), jnp.asarray(u, jnp.float32))
    with jax.enable_x64(True):
        y64 = np.asarray(f(*(jnp.asarray(p) for p in params), jnp.asarray(u)))
    assert y32.dtype == jnp.float32
    np.testing.assert_allclose(y32, y64, rtol=0, atol=1e-4 * np.abs(y64).max())


def _temp_bytes(f, *args) -> int:
    return jax.jit(f).lower(*args).compile().memory_analysis().temp_size_in_bytes


def test_working_memory_is_the_saved_states_only():
    """Forward alone makes no state-sized buffer; forward+backward keeps one, the saved states
    (plus the batch's copies of the parameters and of their cotangents, small here)."""
    batch, length, channels, states = 4, 1024, 16, 32
    *params, u, dy = (jnp.asarray(a, jnp.float32)
                      for a in arguments(4, length, channels, states, batch))
    state_bytes = batch * length * 2 * states * 4
    mapped = jax.vmap(_mimo_output, in_axes=(None, None, None, None, 0))

    def train(params, u):
        y, vjp = jax.vjp(mapped, *params, u)
        return vjp(dy)

    assert _temp_bytes(mapped, *params, u) < 0.1 * state_bytes
    assert _temp_bytes(train, params, u) < 1.2 * state_bytes


def test_wrong_shapes_are_named():
    *params, u, _ = arguments(5, 10, 3, 4, None)
    params = [jnp.asarray(p, jnp.float32) for p in params]
    with pytest.raises((ValueError, TypeError), match=r"B_in \(2P, H\)|Expected type"):
        _mimo_output(*params[:2], params[2][:, :2], params[3], jnp.asarray(u, jnp.float32))


def test_half_precision_is_refused_with_the_alternative():
    *params, u, _ = arguments(6, 10, 3, 4, None)
    args = [jnp.asarray(p, jnp.float16) for p in (*params, u)]
    with pytest.raises(ValueError, match="float32 and float64.*algorithm='sequential'"):
        _mimo_output(*args)
