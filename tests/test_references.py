"""Every registered layer against slow references of its paper's equations.

Two references per model, each with one case table: a model registered without them fails
here, so that a new layer brings its references.

- A float64 numpy loop over the paper's recurrence (tests/helpers.py), independent of the
  model's file and of the engine: the forward output under each algorithm a case names, and
  the forward hidden states.
- A slow reference in jnp without the engine (a loop over time, or the explicit powers
  lambda^(t-s)), so that `jax.vjp` differentiates it independently of the fast path: output and
  gradients.

What only one model has (its paper's invariants, its initialisation, its options) stays in that
model's own file.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import numpy as np
import pytest

from linrnn_bench import models
from helpers import (
    bank_reference,
    cast,
    complex_jnp,
    complex_reference,
    dense_jnp,
    dense_reference,
    diagonal_reference,
    inputs,
    perturbed_s4d,
    perturbed_s5,
    precision,
    slow_s4d,
    slow_s5,
    tol,
    with_algorithm,
)
from linrnn_bench.models import _native


H = 3


# --------------------------------------------------------------------------------------------
# Forward output and hidden states against the float64 loop


@dataclasses.dataclass(frozen=True)
class LoopCase:
    """One layer checked against its model's float64 loop.

    Attributes:
        dtype: the precision of the layer and of the check.
        options: the layer's options.
        algorithms: the algorithms the same parameters run under (the first builds the layer,
            and its hidden states are checked).
    """

    dtype: str
    options: dict[str, Any]
    algorithms: tuple[str, ...]


def _flattened(h: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The engine's states ``(L, P)`` are the reference's, flattened."""
    return h.reshape(x.shape), x


def _head_norms(h: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """||h_t|| per head: the engine's states live in the rotated basis z = P^T x, the
    reference's ``(L, heads, N_h)`` in the original one, and P is orthogonal."""
    by_head = h.reshape(x.shape[0], x.shape[1], -1)  # (L, heads, N_h / 2)
    return np.linalg.norm(by_head, axis=-1), np.linalg.norm(x, axis=-1)


@dataclasses.dataclass(frozen=True)
class Loop:
    """A model's float64 loop and the layers it is checked on.

    Attributes:
        reference: ``(layer, u) -> (y (L, H), forward states)`` in float64 numpy.
        cases: the layers checked.
        d_state: the layers' state size.
        length: L of the input.
        states: ``(engine states, reference states) -> (a, b)``, the two as comparable arrays.
        randomise: ``(layer, key) -> layer`` with random parameters, so that nothing rests on the
            initial values (None: the initialisation is already generic).
        auto: what ``algorithm="auto"`` resolves to on this machine (None: not checked).
    """

    reference: Callable[[Any, Any], tuple[np.ndarray, np.ndarray]]
    cases: tuple[LoopCase, ...]
    d_state: int
    length: int
    states: Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]] = _flattened
    randomise: Callable[[Any, Any], Any] | None = None
    auto: Callable[[], str] | None = None


# (init, discretisation, bidirectional, train_B) of S4D: every value of each option in four
# structures. S5's (conj_sym, discretisation, bidirectional) with one C_init each: every value of
# each option, and every pair of options in both states.
S4D_CASES = (("lin", "zoh", False, True), ("lin", "bilinear", True, False),
             ("inv", "zoh", True, True), ("inv", "bilinear", False, False))
S5_CASES = ((True, "zoh", True, "trunc_standard_normal"), (True, "bilinear", False, "lecun_normal"),
            (False, "zoh", False, "complex_normal"), (False, "bilinear", True, "lecun_normal"))

LOOPS: dict[str, Loop] = {
    "rotrnn": Loop(
        dense_reference,
        (
            LoopCase("float32", {"heads": 3, "normalise": True, "gamma_init": "loglog_uniform",
                                 "gamma_min": 0.6}, ("auto",)),
            LoopCase("float64", {"heads": 3, "bidirectional": True, "normalise": False,
                                 "gamma_init": "ring", "gamma_min": 0.6}, ("parallel",)),
        ),
        12, 16, states=_head_norms,
    ),
    "lru": Loop(
        complex_reference,
        (
            LoopCase("float32", {"normaliser": "learned"}, ("auto",)),
            LoopCase("float64", {"bidirectional": True, "normaliser": "none"}, ("parallel",)),
        ),
        12, 16,
    ),
    "s4d": Loop(
        bank_reference,
        tuple(
            LoopCase("float32", {"init": i, "discretisation": d, "bidirectional": b,
                                 "train_B": t}, ("auto", "convolution"))
            for i, d, b, t in S4D_CASES
        ),
        8, 12, randomise=perturbed_s4d,
        # The CPU default: the fused native recurrence where it builds, else the convolution.
        auto=lambda: "native" if _native.available() else "convolution",
    ),
    "s5": Loop(
        diagonal_reference,
        tuple(
            LoopCase("float32", {"blocks": 2, "conj_sym": c, "discretisation": d,
                                 "bidirectional": b, "C_init": init}, ("auto", "parallel"))
            for c, d, b, init in S5_CASES
        ),
        8, 12, randomise=perturbed_s5,
        auto=lambda: "fused" if _native.available() else "sequential",
    ),
}


@eqx.filter_jit
def _forward(layer, u):
    return layer(u)


@eqx.filter_jit
def _states(layer, u):
    return layer.hidden_states(u)


def _loop_layers(name: str, getkey):
    """Each case of ``name``'s loop: (case, its layer under each algorithm, the input's seed)."""
    assert name in LOOPS, (
        f"Model {name!r} has no float64 loop reference: add one to tests/test_references.py LOOPS."
    )
    loop = LOOPS[name]
    for seed, case in enumerate(loop.cases):
        key = getkey()
        build = lambda algorithm: models.build(  # noqa: E731
            name, d_model=H, d_state=loop.d_state, key=key, algorithm=algorithm, **case.options
        )
        layer = build(case.algorithms[0])
        if loop.randomise is not None:
            layer = loop.randomise(layer, getkey())
        layers = [layer] + [with_algorithm(layer, build(a)) for a in case.algorithms[1:]]
        yield case, layers, seed


@pytest.mark.parametrize("name", models.names())
def test_forward_matches_the_float64_loop(getkey, name):
    """y of every case, under each of its algorithms (the same parameters), both directions
    where the case is bidirectional; the dtype is kept."""
    loop = LOOPS.get(name)
    for case, layers, seed in _loop_layers(name, getkey):
        with precision(case.dtype):
            u = inputs(seed, (loop.length, H), case.dtype)
            for algorithm, layer in zip(case.algorithms, layers):
                layer = cast(layer, case.dtype)
                if algorithm != "auto":
                    assert layer.resolved_algorithm() == algorithm
                elif loop.auto is not None:
                    assert layer.resolved_algorithm() == loop.auto()
                y_ref, _ = loop.reference(layer, u)
                y = _forward(layer, u)
                assert y.dtype == np.dtype(case.dtype)
                np.testing.assert_allclose(
                    np.asarray(y), y_ref, **tol(case.dtype), err_msg=f"{case} {algorithm}"
                )


@pytest.mark.parametrize("name", models.names())
def test_states_match_the_float64_loop(getkey, name):
    """The forward hidden states ``(L, P)`` of every case (its first algorithm) are the loop's."""
    loop = LOOPS.get(name)
    for case, (layer, *_), seed in _loop_layers(name, getkey):
        with precision(case.dtype):
            layer, u = cast(layer, case.dtype), inputs(seed, (loop.length, H), case.dtype)
            _, x_ref = loop.reference(layer, u)
            h = np.asarray(_states(layer, u))
            assert h.shape == (u.shape[0], layer.state_size)
            np.testing.assert_allclose(*loop.states(h, x_ref), **tol(case.dtype), err_msg=str(case))


# --------------------------------------------------------------------------------------------
# Output and gradients against the slow jnp reference


@dataclasses.dataclass(frozen=True)
class Reference:
    """A model's slow reference and the layers it is checked on.

    Attributes:
        slow: ``(layer, u) -> y`` in jnp, differentiable in the layer's fields.
        cases: the layer options of each case (every case is bidirectional, so that both
            directions' parameters are checked).
        d_state: the layers' state size.
        length: L of the input.
        dtype: the precision of the check.
        randomise: ``(layer, key) -> layer`` with random parameters, so that nothing rests on the
            initial values (None: the initialisation is already generic).
    """

    slow: Callable[[Any, Any], Any]
    cases: tuple[dict[str, Any], ...]
    d_state: int
    length: int
    dtype: str
    randomise: Callable[[Any, Any], Any] | None = None


REFERENCES: dict[str, Reference] = {
    "rotrnn": Reference(dense_jnp, ({"heads": 3, "bidirectional": True},), 12, 16, "float64"),
    "lru": Reference(complex_jnp, ({"bidirectional": True},), 12, 16, "float64"),
    "s4d": Reference(
        slow_s4d,
        (
            {"init": "lin", "discretisation": "bilinear", "bidirectional": True, "train_B": False},
            {"init": "inv", "discretisation": "zoh", "bidirectional": True, "train_B": True},
        ),
        8, 12, "float32", perturbed_s4d,
    ),
    "s5": Reference(
        slow_s5,
        (
            {"blocks": 2, "conj_sym": True, "discretisation": "zoh", "bidirectional": True},
            {"blocks": 2, "conj_sym": False, "discretisation": "bilinear", "bidirectional": True},
        ),
        8, 12, "float32", perturbed_s5,
    ),
}


@eqx.filter_jit
def _pullbacks(layer, u, cotangent, slow):
    # One compiled program for both pullbacks: compilation is most of this test's time.
    y_fast, vjp_fast = eqx.filter_vjp(lambda m, x: m(x), layer, u)
    y_slow, vjp_slow = eqx.filter_vjp(slow, layer, u)
    return y_fast, vjp_fast(cotangent), y_slow, vjp_slow(cotangent)


@pytest.mark.parametrize("name", models.names())
def test_vjp_matches_the_slow_reference(getkey, name):
    """Output and gradients of every parameter and of the input, both scan directions."""
    assert name in REFERENCES, (
        f"Model {name!r} has no slow reference: add one to tests/test_references.py REFERENCES."
    )
    ref = REFERENCES[name]
    for seed, options in enumerate(ref.cases):
        layer = models.build(name, d_model=H, d_state=ref.d_state, key=getkey(), **options)
        if ref.randomise is not None:
            layer = ref.randomise(layer, getkey())
        with precision(ref.dtype):
            layer = cast(layer, ref.dtype)
            u = inputs(2 * seed, (ref.length, H), ref.dtype)
            cotangent = inputs(2 * seed + 1, (ref.length, H), ref.dtype)
            y, grads, y_slow, grads_slow = _pullbacks(layer, u, cotangent, ref.slow)
            bound = tol(ref.dtype)
            np.testing.assert_allclose(y, y_slow, **bound)
            leaves, leaves_slow = jax.tree.leaves(grads), jax.tree.leaves(grads_slow)
            assert len(leaves) == len(leaves_slow) == len(jax.tree.leaves((layer, u)))
            for g, g_slow in zip(leaves, leaves_slow):
                scale = float(np.max(np.abs(np.asarray(g_slow))))
                assert scale > 0, f"{name} {options}: a parameter does not reach the output"
                np.testing.assert_allclose(
                    g, g_slow, rtol=bound["rtol"], atol=bound["atol"] * max(1.0, scale)
                )
