"""The native kernel (`models._native`): the XLA loop's recurrence, batched, threaded, in place.

The engine-level tests (`test_engine.py`: every algorithm against a float64 numpy loop, the
custom VJP against autodiff and finite differences, float32 at 65536 steps) include
``"native"``; these cover what is particular to the kernel.
"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from helpers import tol
from linrnn_bench.models import _engine, _native
from linrnn_bench.models._scan import planar_scan
from linrnn_bench.models._system import DiscreteSystem

native_only = pytest.mark.skipif(
    not _native.available(), reason=f"native kernel: {_native.status().reason}"
)


def test_the_kernels_build_where_a_compiler_is_found():
    # Every native test skips where the kernels cannot be built; this one fails instead when a
    # compiler is there (a compile error must not pass as a skip), printing the compiler's words.
    if os.environ.get(_native.SWITCH_ENV, "1") == "0" or _native._compiler() is None:
        pytest.skip("no compiler, or switched off")
    assert _native.available(), _native.status().reason


def _inputs(seed, shape, P, dtype=np.float32):
    rng = np.random.default_rng(seed)
    radius = rng.uniform(0.5, 0.999, P)
    angle = rng.uniform(0, 2 * np.pi, P)
    lam_re, lam_im = radius * np.cos(angle), radius * np.sin(angle)
    b = rng.normal(size=(*shape, 2, P))
    return (jnp.asarray(lam_re, dtype), jnp.asarray(lam_im, dtype), jnp.asarray(b, dtype))


def _both(lam_re, lam_im, b, reverse, batch_dims):
    def one(algorithm):
        f = lambda x: planar_scan(lam_re, lam_im, x, reverse=reverse, algorithm=algorithm)  # noqa: E731
        for _ in range(batch_dims):
            f = jax.vmap(f)
        return jax.jit(f)(b)

    return one("native"), one("sequential")


@native_only
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize(
    "shape,P",
    [
        ((1, 3000), 40),  # one sequence, enough work to split its states between threads
        ((3, 700), 128),  # more sequences than threads: whole sequences per task
        ((2, 3, 50), 7),  # nested vmap, a state count that is no multiple of a cache line
        ((4, 1), 16),  # L = 1
    ],
)
def test_equals_the_xla_loop_batched_and_threaded(shape, P, reverse):
    lam_re, lam_im, b = _inputs(len(shape) * P, shape, P)
    native, xla = _both(lam_re, lam_im, b, reverse, batch_dims=len(shape) - 1)
    np.testing.assert_allclose(np.asarray(native), np.asarray(xla), **tol(np.float32))
    # The fused backward pass (planar_adjoint): cotangents of lambda (summed over the batch)
    # and of b, against the XLA loop's scan-and-reduction.
    weights = jnp.asarray(np.random.default_rng(0).normal(size=b.shape), jnp.float32)

    def grads(algorithm):
        def loss(lr, li, x):
            f = lambda y: planar_scan(lr, li, y, reverse=reverse, algorithm=algorithm)  # noqa: E731
            for _ in range(len(shape) - 1):
                f = jax.vmap(f)
            return jnp.sum(weights * f(x))

        return jax.jit(jax.grad(loss, argnums=(0, 1, 2)))(lam_re, lam_im, b)

    for got, want in zip(grads("native"), grads("sequential")):
        scale = float(jnp.max(jnp.abs(want)))
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=2e-4, atol=2e-5 * scale)


@native_only
def test_float64():
    with jax.enable_x64(True):
        lam_re, lam_im, b = _inputs(1, (2, 300), 24, np.float64)
        native, xla = _both(lam_re, lam_im, b, False, batch_dims=1)
        assert native.dtype == jnp.float64
        np.testing.assert_allclose(np.asarray(native), np.asarray(xla), **tol(np.float64))


@native_only
def test_per_sequence_lambda_under_vmap():
    # lam batched with b: every sequence runs its own system.
    lam_re, lam_im, b = _inputs(2, (3, 100), 8)
    lam_re = lam_re[None] * jnp.asarray([1.0, 0.5, -0.9])[:, None]
    lam_im = jnp.broadcast_to(lam_im, lam_re.shape)

    def run(algorithm):
        f = lambda lr, li, x: planar_scan(lr, li, x, algorithm=algorithm)  # noqa: E731
        return jax.jit(jax.vmap(f))(lam_re, lam_im, b)

    np.testing.assert_allclose(np.asarray(run("native")), np.asarray(run("sequential")),
                               **tol(np.float32))


@native_only
@pytest.mark.parametrize("in_place", [False, True])
def test_in_place_on_an_intermediate_and_with_the_input_still_live(in_place):
    # b is made inside the program (so XLA may hand its buffer to the kernel) and used again
    # after the scan (so it must not be overwritten): both give the loop's states.
    lam_re, lam_im, b = _inputs(3, (2, 500), 32)

    def program(native):
        def f(x):
            y = 2.0 * x
            if native:
                h = _native.planar_scan(lam_re, lam_im, y, reverse=False, in_place=in_place)
            else:
                h = planar_scan(lam_re, lam_im, y, algorithm="sequential")
            return h, y

        return jax.jit(jax.vmap(f))(b)

    (h_n, y_n), (h_x, _) = program(True), program(False)
    np.testing.assert_allclose(np.asarray(h_n), np.asarray(h_x), **tol(np.float32))
    np.testing.assert_array_equal(np.asarray(y_n), 2.0 * np.asarray(b))


@native_only
def test_in_place_on_a_donated_buffer():
    lam_re, lam_im, b = _inputs(5, (2, 400), 16)
    expected = np.asarray(_both(lam_re, lam_im, b, False, batch_dims=1)[1])
    scan = jax.jit(
        jax.vmap(lambda x: _native.planar_scan(lam_re, lam_im, x, reverse=False, in_place=True)),
        donate_argnums=0,
    )
    np.testing.assert_allclose(np.asarray(scan(jnp.array(b))), expected, **tol(np.float32))


@native_only
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    "shape,P",
    [
        ((1, 900), 100),  # one sequence split between threads; rows of 100 states: the imaginary
        # half of a row is not 32-byte aligned, so plain stores write it
        ((3, 300), 128),  # whole sequences per task, every row aligned
        ((2, 50), 7),  # fewer states than one vector: all plain stores
    ],
)
def test_streaming_stores_write_the_same_states(monkeypatch, shape, P, dtype):
    # A fresh output at least LINRNN_STREAMING_BYTES large (default: the last-level cache) is
    # written with non-temporal stores; 0 forces that path here. The same arithmetic runs in
    # both paths, so the states agree bit for bit with the plain stores of an in-place run.
    with jax.enable_x64(dtype == np.float64):
        lam_re, lam_im, b = _inputs(7, shape, P, dtype)
        for reverse in (False, True):
            def run(in_place):
                return jax.jit(jax.vmap(lambda x: _native.planar_scan(
                    lam_re, lam_im, x, reverse=reverse, in_place=in_place)))(b)

            monkeypatch.setenv("LINRNN_STREAMING_BYTES", "0")
            streamed = np.asarray(run(False))
            monkeypatch.setenv("LINRNN_STREAMING_BYTES", str(2**62))
            plain = np.asarray(run(False))
            np.testing.assert_array_equal(streamed, plain)
            np.testing.assert_array_equal(streamed, np.asarray(run(True)))
            expected = _both(lam_re, lam_im, b, reverse, batch_dims=1)[1]
            np.testing.assert_allclose(streamed, np.asarray(expected), **tol(dtype))


@native_only
def test_other_dtypes_are_refused_with_the_accepted_ones():
    lam_re, lam_im, b = _inputs(4, (10,), 4)
    with pytest.raises(ValueError, match=r"float32 and float64; got float16"):
        _native.planar_scan(lam_re.astype(jnp.float16), lam_im.astype(jnp.float16),
                            b.astype(jnp.float16), reverse=False)


def _mimo_system() -> DiscreteSystem:
    P, H = 4, 3
    return DiscreteSystem(
        lam=jnp.full((P,), 0.5 + 0.1j, jnp.complex64), B=jnp.ones((P, H), jnp.complex64),
        C=jnp.ones((H, P), jnp.complex64), D=jnp.ones((H,)),
    )


@native_only
def test_unavailable_kernel_is_reported_never_silent(monkeypatch):
    system = _mimo_system()
    off = _native.Status(False, "switched off by LINRNN_NATIVE=0", "")
    monkeypatch.setattr(_native, "status", lambda: off)
    # auto resolves to the XLA loop (a bank to the convolution), and says so ...
    assert _engine.resolve_algorithm("auto", system, backend="cpu") == "sequential"
    bank = DiscreteSystem(lam=jnp.full((3, 2), 0.5 + 0.1j, jnp.complex64),
                          B=jnp.ones((3, 2), jnp.complex64), C=jnp.ones((3, 2), jnp.complex64),
                          D=jnp.ones((3,)), structure="bank")
    assert _engine.resolve_algorithm("auto", bank, backend="cpu") == "convolution"
    # ... while asking for the kernel names the reason and the alternatives.
    for algorithm in ("native", "fused"):
        with pytest.raises(ValueError,
                           match=f"'{algorithm}' is not available.*LINRNN_NATIVE=0.*'sequential'"):
            _engine.resolve_algorithm(algorithm, system)


@native_only
def test_native_is_cpu_only():
    for algorithm in ("native", "fused"):
        with pytest.raises(ValueError, match=f"'{algorithm}' is a CPU kernel.*'gpu'.*'parallel'"):
            _engine.resolve_algorithm(algorithm, _mimo_system(), backend="gpu")


@native_only
def test_library_name_tracks_its_inputs(monkeypatch, tmp_path):
    # A stale or foreign library is never loaded: the name hashes the sources, flags, compiler,
    # jaxlib and CPU; the cache directory follows LINRNN_NATIVE_CACHE.
    monkeypatch.setenv(_native.CACHE_ENV, str(tmp_path))
    compiler = _native._compiler()
    first = _native.library_path(compiler)
    assert first.parent == tmp_path and first.suffix == ".so"
    monkeypatch.setattr(_native, "FLAGS", (*_native.FLAGS, "-DCHANGED"))
    assert _native.library_path(compiler) != first
