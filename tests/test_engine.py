"""The shared engine against a float64 numpy loop of the recurrence, and its hand-written VJP.

Truth is built by construction: `_reference` runs h_t = lam h_{t-1} + B u_t step by step in
complex128 on the dense form of the system (a bank is expanded to its block-diagonal (H N) x H
input map), so every algorithm, direction and output convention is checked against the
definition rather than against another fast path.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import jaxtyping
import numpy as np
import pytest
import scipy.signal
from jax import lax

from helpers import tol
from linrnn_bench.models import _engine, _native
from linrnn_bench.models._scan import linear_scan, planar_scan, to_planar
from linrnn_bench.models._system import DiscreteSystem

# --------------------------------------------------------------------------------------------
# Systems and the float64 reference


@dataclasses.dataclass(frozen=True)
class NumpySystem:
    """A system in numpy complex128, with the same fields and layout as `DiscreteSystem`."""

    lam: np.ndarray
    B: np.ndarray
    C: np.ndarray
    D: np.ndarray
    C_reverse: np.ndarray | None
    conj_sym: bool
    structure: str

    def to_jax(self, real_dtype=jnp.float32) -> DiscreteSystem:
        complex_dtype = jnp.result_type(real_dtype, jnp.complex64)

        def c(x):
            return None if x is None else jnp.asarray(x, complex_dtype)

        return DiscreteSystem(
            lam=c(self.lam),
            B=c(self.B),
            C=c(self.C),
            D=jnp.asarray(self.D, real_dtype),
            C_reverse=c(self.C_reverse),
            conj_sym=self.conj_sym,
            structure=self.structure,
        )

    def dense(self):
        """(lam (P,), B (P, H), C (H, P), C_reverse): a bank as one block-diagonal system."""
        if self.structure == "mimo":
            return self.lam, self.B, self.C, self.C_reverse
        H, N = self.lam.shape
        rows = np.arange(H * N)
        channel = rows // N
        B = np.zeros((H * N, H), complex)
        B[rows, channel] = self.B.reshape(-1)

        def out(C):
            if C is None:
                return None
            dense_c = np.zeros((H, H * N), complex)
            dense_c[channel, rows] = C.reshape(-1)
            return dense_c

        return self.lam.reshape(-1), B, out(self.C), out(self.C_reverse)


def _complex(rng, shape, scale=1.0):
    return scale * (rng.normal(size=shape) + 1j * rng.normal(size=shape))


def _eigenvalues(rng, shape, r_min=0.5, r_max=0.99):
    return rng.uniform(r_min, r_max, shape) * np.exp(1j * rng.uniform(0, 2 * np.pi, shape))


def random_system(seed, structure, *, H=3, P=5, N=3, bidirectional=False, conj_sym=False):
    rng = np.random.default_rng(seed)
    if structure == "mimo":
        lam = _eigenvalues(rng, (P,))
        B, C = _complex(rng, (P, H), H**-0.5), _complex(rng, (H, P), P**-0.5)
        C_reverse = _complex(rng, (H, P), P**-0.5) if bidirectional else None
    else:
        lam = _eigenvalues(rng, (H, N))
        B, C = _complex(rng, (H, N)), _complex(rng, (H, N), N**-0.5)
        C_reverse = _complex(rng, (H, N), N**-0.5) if bidirectional else None
    D = rng.normal(size=H)
    return NumpySystem(lam, B, C, D, C_reverse, conj_sym, structure)


def _loop(lam, b, reverse):
    h = np.zeros_like(b)
    state = np.zeros_like(b[0])
    for t in range(b.shape[0])[::-1] if reverse else range(b.shape[0]):
        state = lam * state + b[t]
        h[t] = state
    return h


def _reference(system: NumpySystem, u: np.ndarray):
    """Forward states h, reverse states g, and the outputs out(C h), out(C_reverse g), D u."""
    lam, B, C, C_reverse = system.dense()
    scale = 2.0 if system.conj_sym else 1.0
    b = u.astype(complex) @ B.T
    h, g = _loop(lam, b, reverse=False), _loop(lam, b, reverse=True)
    y_forward = scale * (h @ C.T).real
    y_reverse = np.zeros_like(y_forward) if C_reverse is None else scale * (g @ C_reverse.T).real
    return h, g, y_forward, y_reverse, system.D * u


# Jitted once per shape: one XLA compilation instead of one per operation in eager mode.
_apply = jax.jit(_engine.apply, static_argnames="algorithm")
_scan = jax.jit(_engine.scan, static_argnames=("algorithm", "reverse"))
_kernel = jax.jit(_engine.kernel, static_argnums=1, static_argnames="reverse")
_powers = jax.jit(_engine.powers, static_argnums=1)


@jax.jit(static_argnames="algorithm")
def _outputs_and_states(system, u, algorithm):
    # One compilation for the three: XLA shares the scans that apply and the states have in common.
    return (
        _engine.apply(system, u, algorithm=algorithm),
        _engine.hidden_states(system, u, algorithm=algorithm),
        _engine.hidden_states(system, u, algorithm=algorithm, reverse=True),
    )


def _close(actual, expected, dtype):
    np.testing.assert_allclose(np.asarray(actual), expected, **tol(dtype))


CASES = [
    pytest.param(structure, algorithm, bidirectional, id=f"{structure}-{algorithm}-{kind}")
    for structure, algorithms in [
        ("mimo", ["sequential", "native", "fused", "parallel", "chunked"]),
        ("bank", ["sequential", "native", "parallel", "convolution"]),
    ]
    for algorithm in algorithms
    for bidirectional, kind in [(False, "forward-Re"), (True, "bidirectional-2Re")]
]


# --------------------------------------------------------------------------------------------
# Every algorithm equals the loop


@pytest.mark.parametrize("structure,algorithm,bidirectional", CASES)
def test_apply_and_states_match_numpy_loop(structure, algorithm, bidirectional):
    # Odd L exercises the odd-length levels of the parallel scan; float64 makes the comparison
    # tight enough to catch a wrong power or a missing conjugation.
    system = random_system(
        1, structure, bidirectional=bidirectional, conj_sym=bidirectional
    )
    u = np.random.default_rng(2).normal(size=(37, 3))
    h, g, y_forward, y_reverse, du = _reference(system, u)
    with jax.enable_x64(True):
        jsys, ju = system.to_jax(jnp.float64), jnp.asarray(u)
        assert _engine.resolve_algorithm(algorithm, jsys) == algorithm
        y, states, reverse_states = _outputs_and_states(jsys, ju, algorithm)
        assert y.dtype == jnp.float64 and y.shape == u.shape
        _close(y, y_forward + y_reverse + du, np.float64)
        _close(states, h, np.float64)
        _close(reverse_states, g, np.float64)


@pytest.mark.parametrize("algorithm", ["sequential", "native", "parallel"])
@pytest.mark.parametrize("length", [1, 2, 16])
def test_scan_matches_loop_for_every_length(algorithm, length):
    rng = np.random.default_rng(length)
    lam, b = _eigenvalues(rng, (4,)), _complex(rng, (length, 4))
    for reverse in (False, True):
        h = _scan(jnp.asarray(lam, jnp.complex64), jnp.asarray(b, jnp.complex64),
                  reverse=reverse, algorithm=algorithm)
        _close(h, _loop(lam, b, reverse), np.float32)


def test_convolution_equals_recurrence_for_banks():
    length = 1000
    system = random_system(5, "bank", H=4, N=6, bidirectional=True, conj_sym=True)
    u = jnp.asarray(np.random.default_rng(6).normal(size=(length, 4)), jnp.float32)
    jsys = system.to_jax()
    y_conv = _apply(jsys, u, algorithm="convolution")
    y_scan = _apply(jsys, u, algorithm="sequential")
    np.testing.assert_allclose(np.asarray(y_conv), np.asarray(y_scan), **tol(np.float32))


# --------------------------------------------------------------------------------------------
# Kernel and powers


@pytest.mark.parametrize("structure", ["mimo", "bank"])
@pytest.mark.parametrize("reverse", [False, True])
def test_kernel_is_the_impulse_response(structure, reverse):
    system = random_system(7, structure, bidirectional=True, conj_sym=(structure == "bank"))
    length, H = 23, 3
    # Column j of the MIMO kernel answers an impulse on input j; a bank's channels are
    # independent, so one impulse on every channel at once gives each channel's kernel.
    impulses = [np.eye(H)[j] for j in range(H)] if structure == "mimo" else [np.ones(H)]
    responses = []
    for impulse in impulses:
        u = np.zeros((length, H))
        u[-1 if reverse else 0] = impulse
        _, _, y_forward, y_reverse, _ = _reference(system, u)
        responses.append(y_reverse[::-1] if reverse else y_forward)
    expected = np.stack(responses, axis=-1) if structure == "mimo" else responses[0]
    with jax.enable_x64(True):
        k = _kernel(system.to_jax(jnp.float64), length, reverse=reverse)
        assert k.shape == expected.shape
        _close(k, expected, np.float64)


@pytest.mark.parametrize("length", [1, 2, 5, 16, 37])
def test_powers_are_exact_powers(length):
    lam = _eigenvalues(np.random.default_rng(length), (2, 3))
    expected = lam[None] ** np.arange(length)[:, None, None]
    with jax.enable_x64(True):
        p = _powers(jnp.asarray(lam), length)
        assert p.shape == (length, 2, 3)
        _close(p, expected, np.float64)


# --------------------------------------------------------------------------------------------
# The hand-written backward pass


def _autodiff_scan(lam, b, reverse):
    """The plain `lax.scan` recurrence, differentiated by JAX's own rules."""

    def step(h, b_t):
        h = lam * h + b_t
        return h, h

    return lax.scan(step, jnp.zeros_like(b[0]), b, reverse=reverse)[1]


def _scan_inputs(seed, length=29, P=4):
    rng = np.random.default_rng(seed)
    lam = jnp.asarray(_eigenvalues(rng, (P,), 0.3, 0.95))
    return lam, jnp.asarray(_complex(rng, (length, P))), jnp.asarray(_complex(rng, (length, P)))


@pytest.mark.parametrize("algorithm", ["sequential", "native", "parallel"])
@pytest.mark.parametrize("reverse", [False, True])
def test_custom_vjp_matches_autodiff(algorithm, reverse):
    with jax.enable_x64(True):
        lam, b, cotangent = _scan_inputs(8)

        @jax.jit
        def both(lam, b, cotangent):
            h, vjp = jax.vjp(
                lambda l, x: linear_scan(l, x, reverse=reverse, algorithm=algorithm), lam, b
            )
            h_ref, vjp_ref = jax.vjp(lambda l, x: _autodiff_scan(l, x, reverse), lam, b)
            return (h, *vjp(cotangent)), (h_ref, *vjp_ref(cotangent))

        for got, want in zip(*both(lam, b, cotangent)):
            _close(got, np.asarray(want), np.float64)


@pytest.mark.parametrize("algorithm", ["sequential", "native", "parallel"])
@pytest.mark.parametrize("reverse", [False, True])
def test_custom_vjp_matches_finite_differences(algorithm, reverse):
    # JAX's gradient of a real loss at z = x + iy is dL/dx - i dL/dy, so the derivative along
    # a complex direction v is Re(sum(grad * v)).
    with jax.enable_x64(True):
        lam, b, weights = _scan_inputs(9)

        def loss(lam, b):
            h = linear_scan(lam, b, reverse=reverse, algorithm=algorithm)
            return jnp.sum(jnp.real(weights * h) + 0.1 * jnp.abs(h) ** 2)

        loss = jax.jit(loss)
        grad_lam, grad_b = jax.jit(jax.grad(loss, argnums=(0, 1)))(lam, b)
        rng = np.random.default_rng(10)
        v_lam, v_b = jnp.asarray(_complex(rng, lam.shape)), jnp.asarray(_complex(rng, b.shape))
        eps = 1e-6

        def central_difference(d_lam, d_b):
            up = loss(lam + eps * d_lam, b + eps * d_b)
            down = loss(lam - eps * d_lam, b - eps * d_b)
            return float((up - down) / (2 * eps))

        along_lam = float(jnp.real(jnp.sum(grad_lam * v_lam)))
        along_b = float(jnp.real(jnp.sum(grad_b * v_b)))
        np.testing.assert_allclose(along_lam, central_difference(v_lam, 0.0), rtol=1e-7)
        np.testing.assert_allclose(along_b, central_difference(0.0, v_b), rtol=1e-7)


def test_custom_vjp_saves_only_the_states():
    lam, b, _ = _scan_inputs(11, length=64)
    lam_re, lam_im = jnp.real(lam).astype(jnp.float32), jnp.imag(lam).astype(jnp.float32)
    planar = to_planar(b).astype(jnp.float32)
    assert "custom_vjp_call" in str(jax.make_jaxpr(planar_scan)(lam_re, lam_im, planar))
    _, vjp = jax.vjp(planar_scan, lam_re, lam_im, planar)
    saved = sum(leaf.size for leaf in jax.tree_util.tree_leaves(vjp))
    # h (L 2 P) and lambda (2 P): autodiff through the in-place loop would save L copies of h.
    assert saved == planar.size + lam_re.size + lam_im.size


def test_second_derivative_matches_autodiff():
    with jax.enable_x64(True):
        lam, b, weights = _scan_inputs(12, length=17, P=3)

        def loss(scan_fn, lam):
            return jnp.sum(jnp.real(weights * scan_fn(lam, b)) ** 2)

        def custom(lam, b):
            return linear_scan(lam, b)

        def plain(lam, b):
            return _autodiff_scan(lam, b, False)

        direction = jnp.asarray(_complex(np.random.default_rng(13), lam.shape))

        def hvp(scan_fn):
            def directional_gradient(l):
                return jnp.real(jnp.sum(jax.grad(lambda m: loss(scan_fn, m))(l) * direction))

            return jax.grad(directional_gradient)(lam)

        hvp = jax.jit(hvp, static_argnums=0)
        _close(hvp(custom), np.asarray(hvp(plain)), np.float64)


@pytest.mark.parametrize("algorithm", ["sequential", "native", "fused"])
def test_batched_gradient_through_apply_matches_autodiff(algorithm):
    # Under vmap the per-sequence lam cotangents of the custom rule must be summed over the batch
    # (the parallel algorithm shares the rule and is checked unbatched above); the native kernel
    # gets every argument with the batch dimension (vmap_method="broadcast_all").
    system = random_system(14, "mimo", bidirectional=True, conj_sym=True)
    u = np.random.default_rng(15).normal(size=(4, 21, 3))

    def reference_apply(s, u):
        lam = s.lam.reshape(-1)
        b = _engine.input_sequence(s, u)
        y = _engine.readout(s, _autodiff_scan(lam, b, False), s.C)
        y = y + _engine.readout(s, _autodiff_scan(lam, b, True), s.C_reverse)
        return y + s.D[None] * u

    def loss(apply_fn, s, u):
        return jnp.sum(jnp.sin(jax.vmap(apply_fn, in_axes=(None, 0))(s, u)))

    with jax.enable_x64(True):
        jsys, ju = system.to_jax(jnp.float64), jnp.asarray(u)
        gradient = jax.jit(jax.grad(loss, argnums=1), static_argnums=0)
        grads = gradient(lambda s, x: _engine.apply(s, x, algorithm=algorithm), jsys, ju)
        expected = gradient(reference_apply, jsys, ju)
        for name in ("lam", "B", "C", "C_reverse", "D"):
            _close(getattr(grads, name), np.asarray(getattr(expected, name)), np.float64)


# --------------------------------------------------------------------------------------------
# Robustness


@pytest.mark.parametrize(
    "structure,algorithm",
    [("mimo", "sequential"), ("mimo", "native"), ("mimo", "fused"), ("mimo", "parallel"),
     ("bank", "convolution")],
)
def test_float32_finite_and_accurate_at_65536_steps(structure, algorithm):
    length, H = 65536, 2
    radii = np.array([1 - 1e-6, 1 - 1e-3])
    angles = np.array([1e-3, 2.0])
    if structure == "mimo":
        lam = radii * np.exp(1j * angles)
        B, C = np.ones((2, H), complex), np.ones((H, 2), complex)
    else:
        lam = np.stack([radii * np.exp(1j * angles)] * H)
        B, C = np.ones((H, 2), complex), np.ones((H, 2), complex)
    reference = NumpySystem(lam, B, C, np.ones(H), None, True, structure)
    system = reference.to_jax()
    u = jnp.asarray(np.random.default_rng(16).normal(size=(length, H)), jnp.float32)
    # The reference uses lam as rounded to complex64: that rounding alone moves 1 - |lam| by
    # a few per cent, a different system, not an error of the algorithm.
    reference = dataclasses.replace(reference, lam=np.asarray(system.lam, np.complex128))

    @jax.jit
    def value_and_grad(system, u):
        def loss(system, u):
            y = _engine.apply(system, u, algorithm=algorithm)
            return jnp.mean(y**2), y

        return jax.value_and_grad(loss, argnums=(0, 1), has_aux=True)(system, u)

    (_, y), grads = value_and_grad(system, u)
    assert bool(jnp.all(jnp.isfinite(y)))
    for leaf in jax.tree_util.tree_leaves(grads):
        assert bool(jnp.all(jnp.isfinite(leaf)))
    # Against float64: scipy's IIR filter runs the same recurrence per state.
    lam_flat, B_dense, C_dense, _ = reference.dense()
    b = np.asarray(u, np.float64) @ B_dense.T
    h = np.stack(
        [scipy.signal.lfilter([1.0], [1.0, -lam_p], b[:, p]) for p, lam_p in enumerate(lam_flat)],
        axis=1,
    )
    expected = 2 * (h @ C_dense.T).real + np.asarray(u, np.float64)
    error = np.max(np.abs(np.asarray(y, np.float64) - expected)) / np.max(np.abs(expected))
    assert error < 1e-4


# --------------------------------------------------------------------------------------------
# Algorithm resolution and errors


def test_auto_resolves_by_structure_and_backend():
    mimo = random_system(17, "mimo").to_jax()
    bank = random_system(17, "bank").to_jax()
    native = _native.available()
    assert _engine.resolve_algorithm("auto", bank) == ("native" if native else "convolution")
    assert _engine.resolve_algorithm("auto", bank, backend="gpu") == "convolution"
    cpu = "fused" if native else "sequential"
    assert _engine.resolve_algorithm("auto", mimo, backend="cpu") == cpu
    assert _engine.resolve_algorithm("auto", mimo, backend="gpu") == "parallel"
    assert _engine.resolve_algorithm("auto", mimo) == cpu  # tests run on CPU
    assert _engine.resolve_algorithm("parallel", bank) == "parallel"


def test_unknown_algorithm_lists_the_accepted_values():
    system = random_system(18, "mimo").to_jax()
    u = jnp.ones((4, 3))
    accepted = r"'chunky'.*accepted values.*'auto'.*'sequential'.*'parallel'.*'convolution'"
    with pytest.raises(ValueError, match=accepted):
        _engine.apply(system, u, algorithm="chunky")
    with pytest.raises(ValueError, match=r"'chunky'.*accepted values.*'sequential'.*'parallel'"):
        linear_scan(system.lam, jnp.ones((4, 5), jnp.complex64), algorithm="chunky")


def test_convolution_needs_a_bank():
    system = random_system(19, "mimo").to_jax()
    advice = r"convolution.*structure='bank'.*'sequential' or 'parallel'"
    with pytest.raises(ValueError, match=advice):
        _engine.apply(system, jnp.ones((4, 3)), algorithm="convolution")


@pytest.fixture
def without_jaxtyping():
    """Turns off the run-time shape checks so that the engine's own messages are reached."""
    previous = jaxtyping.config.jaxtyping_disable
    jaxtyping.config.update("jaxtyping_disable", True)
    yield
    jaxtyping.config.update("jaxtyping_disable", previous)


def test_wrong_channel_count_is_an_error():
    system = random_system(20, "mimo").to_jax()
    with pytest.raises(ValueError, match=r"shape \(L, H\) with H = 3, got shape \(4, 5\)"):
        _engine.apply(system, jnp.ones((4, 5)))


def test_batched_input_is_an_error(without_jaxtyping):
    system = random_system(21, "mimo").to_jax()
    with pytest.raises(ValueError, match=r"got shape \(2, 4, 3\)\. Batch with jax\.vmap"):
        _engine.apply(system, jnp.ones((2, 4, 3)))
    with pytest.raises(ValueError, match=r"lam of shape \(P,\) and b of shape \(L, P\)"):
        _engine.scan(system.lam, jnp.ones((2, 4, 5), jnp.complex64))


def test_batched_input_is_a_type_error_under_jaxtyping():
    system = random_system(22, "mimo").to_jax()
    with pytest.raises(TypeError):
        _engine.apply(system, jnp.ones((2, 4, 3)))


def test_complex_input_is_an_error(without_jaxtyping):
    system = random_system(23, "mimo").to_jax()
    with pytest.raises(ValueError, match=r"real floating-point.*complex64"):
        _engine.apply(system, jnp.ones((4, 3), jnp.complex64))


def test_inconsistent_system_shapes_are_errors():
    good = random_system(24, "mimo", bidirectional=True).to_jax()
    with pytest.raises(ValueError, match=r"C has shape \(3, 4\), expected \(3, 5\)"):
        DiscreteSystem(good.lam, good.B, good.C[:, :4], good.D)
    with pytest.raises(ValueError, match=r"'mimo' DiscreteSystem needs lam of shape \(P,\)"):
        DiscreteSystem(good.lam[None], good.B, good.C, good.D)
    bank = random_system(24, "bank").to_jax()
    bank_lam = r"'bank' DiscreteSystem needs lam of shape \(H, N\) with H = 2"
    with pytest.raises(ValueError, match=bank_lam):
        DiscreteSystem(bank.lam, bank.B, bank.C, bank.D[:2], structure="bank")
    with pytest.raises(ValueError, match=r"C_reverse has shape"):
        DiscreteSystem(bank.lam, bank.B, bank.C, bank.D, C_reverse=bank.C[:, :2], structure="bank")


def test_reverse_kernel_needs_a_bidirectional_system():
    with pytest.raises(ValueError, match=r"C_reverse set"):
        _engine.kernel(random_system(25, "bank").to_jax(), 8, reverse=True)
