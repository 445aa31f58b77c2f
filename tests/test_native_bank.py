"""The fused native bank kernel (`models._native.bank`) against the definition and the engine.

Truth is a float64 numpy loop of the bank's equations, channel by channel,

    h_t[h, n] = lam[h, n] h_{t-1}[h, n] + B[h, n] u_t[h],     y_t[h] = s Re(sum_n C[h, n] h_t[h, n])

(and the same run from the end with C_reverse), then the engine's convolution and sequential
paths on the same systems, and for the VJP autodiff of the engine's sequential path (whose own
VJP is checked against plain autodiff in test_engine.py) and central finite differences.
Shapes are chosen to reach every branch of the kernel: H not a multiple of the vector width
(a zero-padded last block of channels), N not a multiple of the states walked together (the
one-state remainder loop), L a multiple of the chunk, not one, shorter than it, and 1.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

from linrnn_bench import models
from helpers import tol
from linrnn_bench.models import _engine, _native
from linrnn_bench.models._native import bank
from linrnn_bench.models._system import DiscreteSystem

pytestmark = pytest.mark.skipif(
    not _native.available(), reason=f"native kernels unavailable: {_native.status().reason}"
)


def random_bank(seed, *, H=11, N=5, bidirectional=True, conj_sym=True, dtype=jnp.float64):
    """A bank with |lam| in [0.5, 0.99] and O(1) B, C, D, as a `DiscreteSystem`."""
    rng = np.random.default_rng(seed)
    complex_dtype = jnp.result_type(dtype, jnp.complex64)

    def c(scale=1.0):
        return jnp.asarray(scale * (rng.normal(size=(H, N)) + 1j * rng.normal(size=(H, N))),
                           complex_dtype)

    lam = rng.uniform(0.5, 0.99, (H, N)) * np.exp(1j * rng.uniform(0, 2 * np.pi, (H, N)))
    return DiscreteSystem(
        lam=jnp.asarray(lam, complex_dtype), B=c(), C=c(N**-0.5),
        D=jnp.asarray(rng.normal(size=H), dtype),
        C_reverse=c(N**-0.5) if bidirectional else None, conj_sym=conj_sym, structure="bank",
    )


def numpy_bank(system: DiscreteSystem, u: np.ndarray, reverse: bool) -> np.ndarray:
    """The definition, in complex128, one time step at a time (no D u)."""
    lam, B = np.asarray(system.lam, complex), np.asarray(system.B, complex)
    C = np.asarray(system.C_reverse if reverse else system.C, complex)
    h = np.zeros_like(lam)
    y = np.zeros(u.shape)
    for t in range(u.shape[0])[::-1] if reverse else range(u.shape[0]):
        h = lam * h + B * u[t][:, None]
        y[t] = system.output_scale * np.sum(C * h, axis=-1).real
    return y


def native_apply(system: DiscreteSystem, u, chunk: int = bank.CHUNK):
    """`models._engine.apply` computed by the kernel: both directions plus D u."""
    y = bank.bank_output(system, u, chunk=chunk)
    if system.bidirectional:
        y = y + bank.bank_output(system, u, reverse=True, chunk=chunk)
    return y + system.D[None] * u


# --------------------------------------------------------------------------------------------
# Forward: the definition, then the engine


@pytest.mark.parametrize("conj_sym", [False, True])
@pytest.mark.parametrize("length", [1, 3, 16, 21])
def test_forward_matches_numpy_loop(length, conj_sym):
    # chunk = 4: L = 16 is a multiple of it, 21 is not, 3 and 1 are shorter; the default chunk
    # makes every one of them a single short chunk.
    u = np.random.default_rng(100 + length).normal(size=(length, 11))
    with jax.enable_x64(True):
        system = random_bank(length, conj_sym=conj_sym)
        run = jax.jit(bank.bank_output, static_argnames=("reverse", "chunk"))
        for reverse in (False, True):
            expected = numpy_bank(system, u, reverse)
            for chunk in (4, bank.CHUNK):
                y = run(system, jnp.asarray(u), reverse=reverse, chunk=chunk)
                assert y.dtype == jnp.float64 and y.shape == u.shape
                np.testing.assert_allclose(np.asarray(y), expected, **tol(np.float64))


def test_forward_float32_matches_numpy_loop():
    system = random_bank(7, dtype=jnp.float32)
    u = np.random.default_rng(8).normal(size=(300, system.d_model)).astype(np.float32)
    y = jax.jit(bank.bank_output, static_argnames=("reverse", "chunk"))(
        system, jnp.asarray(u), chunk=64
    )
    assert y.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(y), numpy_bank(system, u, False), **tol(np.float32))


def test_s4d_layer_matches_convolution_and_sequential():
    # float32 round-off over L = 400 steps: conftest's float32 tolerance (rtol 2e-4, atol 2e-5)
    # relative to outputs of order 1-10; the engine's two paths agree with each other to it too.
    layer = models.build("s4d", d_model=20, d_state=14, key=jr.PRNGKey(0), bidirectional=True)
    system = layer.discrete_system()
    # numpy: an eager jax.random draw compiles a program per shape
    u = jnp.asarray(np.random.default_rng(1).standard_normal((2, 400, 20)), jnp.float32)

    @jax.jit
    def outputs(system, u):
        batched = lambda f: jax.vmap(f, in_axes=(None, 0))(system, u)  # noqa: E731
        return (
            batched(lambda s, x: native_apply(s, x, chunk=64)),
            batched(lambda s, x: _engine.apply(s, x, algorithm="convolution")),
            batched(lambda s, x: _engine.apply(s, x, algorithm="sequential")),
        )

    native, convolution, sequential = outputs(system, u)
    assert native.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(native), np.asarray(convolution), **tol(np.float32))
    np.testing.assert_allclose(np.asarray(native), np.asarray(sequential), **tol(np.float32))


# --------------------------------------------------------------------------------------------
# VJP


def _grads(apply_fn, system, u, weights, batch_system: bool):
    """Cotangents of sum(sin(y) * weights) w.r.t. the system and u, y vmapped over the batch."""

    def loss(s, x):
        y = jax.vmap(apply_fn, in_axes=(0 if batch_system else None, 0))(s, x)
        return jnp.sum(jnp.sin(y) * weights)

    return jax.jit(jax.grad(loss, argnums=(0, 1)))(system, u)


@pytest.mark.parametrize("batch_system", [False, True], ids=["shared-system", "per-sequence"])
@pytest.mark.parametrize("conj_sym", [False, True])
def test_vjp_matches_autodiff_of_sequential(conj_sym, batch_system):
    # L = 23 with chunk 5: four full chunks and a tail, in both directions.
    rng = np.random.default_rng(20)
    batch, length = 3, 23
    with jax.enable_x64(True):
        system = random_bank(21, conj_sym=conj_sym)
        if batch_system:
            system = jax.tree_util.tree_map(
                lambda x: jnp.stack([x, 0.9 * x, 1.1 * x]) if x is not system.lam
                else jnp.stack([x, 0.95 * x, x]), system
            )
        u = jnp.asarray(rng.normal(size=(batch, length, 11)))
        weights = jnp.asarray(rng.normal(size=(batch, length, 11)))
        got = _grads(lambda s, x: native_apply(s, x, chunk=5), system, u, weights, batch_system)
        want = _grads(lambda s, x: _engine.apply(s, x, algorithm="sequential"), system, u,
                      weights, batch_system)
        for a, b in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want),
                        strict=True):
            assert a.shape == b.shape and a.dtype == b.dtype
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), **tol(np.float64))


def test_vjp_matches_finite_differences():
    # JAX's gradient of a real loss at z = x + iy is dL/dx - i dL/dy, so Re(sum(grad * v)) =
    # dL/dx Re v + dL/dy Im v is the derivative along v, for every parameter and u at once.
    rng = np.random.default_rng(30)
    with jax.enable_x64(True):
        system = random_bank(31, H=3, N=2)
        u = jnp.asarray(rng.normal(size=(9, 3)))
        weights = jnp.asarray(rng.normal(size=(9, 3)))

        def loss(s, x):
            return jnp.sum(jnp.sin(native_apply(s, x, chunk=4)) * weights)

        grads = jax.jit(jax.grad(loss, argnums=(0, 1)))(system, u)
        direction = jax.tree_util.tree_map(
            lambda x: jnp.asarray(
                rng.normal(size=x.shape) + (1j * rng.normal(size=x.shape) if
                                            jnp.iscomplexobj(x) else 0), x.dtype),
            (system, u),
        )
        along = sum(
            float(jnp.sum(jnp.real(g * v)))
            for g, v in zip(jax.tree_util.tree_leaves(grads), jax.tree_util.tree_leaves(direction))
        )
        eps = 1e-6
        shifted = [jax.tree_util.tree_map(lambda x, v, e=e: x + e * v, (system, u), direction)
                   for e in (eps, -eps)]
        difference = (float(loss(*shifted[0])) - float(loss(*shifted[1]))) / (2 * eps)
        np.testing.assert_allclose(along, difference, rtol=1e-7)


def test_vjp_saves_only_inputs_and_checkpoints():
    system = random_bank(40, H=8, N=4, bidirectional=False, dtype=jnp.float32)
    u = jnp.ones((1000, 8), jnp.float32)
    _, vjp = jax.vjp(lambda s, x: bank.bank_output(s, x, chunk=100), system, u)
    saved = sum(leaf.size for leaf in jax.tree_util.tree_leaves(vjp) if leaf.ndim)
    # u, the (6, H, N) parameters and 10 checkpoints of 2 H N: never the (L, 2 H N) states.
    assert saved == u.size + 6 * 8 * 4 + 10 * 2 * 8 * 4


# --------------------------------------------------------------------------------------------
# Errors


def test_mimo_system_and_missing_reverse_map_are_errors():
    system = random_bank(50, bidirectional=False, dtype=jnp.float32)
    u = jnp.zeros((4, 11), jnp.float32)
    with pytest.raises(ValueError, match="C_reverse"):
        bank.bank_output(system, u, reverse=True)
    with pytest.raises(ValueError, match="chunk"):
        bank.bank_output(system, u, chunk=0)
    mimo = DiscreteSystem(lam=jnp.ones(3, jnp.complex64), B=jnp.ones((3, 2), jnp.complex64),
                          C=jnp.ones((2, 3), jnp.complex64), D=jnp.ones(2))
    with pytest.raises(ValueError, match="structure='bank'"):
        bank.bank_output(mimo, jnp.zeros((4, 2), jnp.float32))


def test_unavailable_library_raises_with_the_reason(monkeypatch):
    monkeypatch.setattr(bank, "status", lambda: _native.Status(False, "no compiler (test)", ""))
    system = random_bank(51, dtype=jnp.float32)
    with pytest.raises(_native.NativeUnavailable, match="no compiler"):
        bank.bank_output(system, jnp.zeros((4, 11), jnp.float32))
