"""Every registered layer against a slow reference of its paper's equations, through the VJP.

The reference is written in jnp without the engine (a loop over time, or the explicit powers
lambda^(t-s)), so `jax.vjp` differentiates it independently of the fast path. One case table per
model: a model registered without one fails here, so that a new layer brings its reference.
Forward passes and hidden states against float64 numpy loops stay in each model's own file.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import numpy as np
import pytest

import models
from conftest import tol
from helpers import (
    cast,
    complex_jnp,
    dense_jnp,
    inputs,
    perturbed_s4d,
    perturbed_s5,
    precision,
    slow_s4d,
    slow_s5,
)


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


H = 3
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
