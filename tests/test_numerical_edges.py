"""Numerical edges of every layer and algorithm, in float32.

- |lambda| at the largest value each layer's config accepts (`models._validate.MAX_RADIUS`,
  or the smallest timescale `MIN_TIMESCALE` for S4D and S5), over a long sequence
  (L = 65536, each layer's default algorithm): |lambda| stays below 1, the forward pass and
  the gradient are finite, and the recurrence still contributes (the layer did not round to a
  skip connection).
- L = 1 and L = 0: a defined result for every algorithm, at the same edge.
- A NaN in the input reaches the outputs after it (all of them for the convolution) and is
  reported by the runner as a failed configuration when it is there from the first step.

Sizes are the smallest that exercise each path (H = 2, two complex states), so that the cost is
compilation, once per layer and algorithm.
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
from linrnn_bench.harness.errors import Diverged
from linrnn_bench.harness.runner import run_study
from linrnn_bench.harness.store import Store
from linrnn_bench.harness.studies import Study
from linrnn_bench.models._validate import MAX_RADIUS, MIN_TIMESCALE

MIMO = ("sequential", "native", "fused", "parallel", "chunked")
BANK = ("sequential", "native", "parallel", "convolution")
# Each layer at the edge its config allows: the decays (RotRNN, LRU) or the timescales (S4D,
# S5: |lambda| = exp(-Delta / 2) at Re(a) = -1/2) pinned at the float32 limit.
EDGES = {
    "rotrnn": dict(d_state=4, gamma_min=MAX_RADIUS, gamma_max=MAX_RADIUS),
    "lru": dict(d_state=2, r_min=MAX_RADIUS, r_max=MAX_RADIUS),
    "s4d": dict(d_state=4, dt_min=MIN_TIMESCALE, dt_max=MIN_TIMESCALE),
    "s5": dict(d_state=4, dt_min=MIN_TIMESCALE, dt_max=MIN_TIMESCALE),
}
# Every algorithm, on the cheapest layer of each structure (the engine sees only the discrete
# system, so RotRNN and S5 take the LRU's MIMO path), and every layer at its default.
CASES = [*(("lru", a) for a in MIMO), *(("s4d", a) for a in BANK),
         ("rotrnn", "auto"), ("s5", "auto")]
H = 2


def _normal(seed: int, shape: tuple[int, ...]) -> jax.Array:
    """Unit normal float32 inputs, drawn with numpy (an eager jax.random draw compiles a
    program per shape, about a second each)."""
    return jnp.asarray(np.random.default_rng(seed).standard_normal(shape), jnp.float32)


def _layer(name: str, algorithm: str, **extra):
    return models.build(name, d_model=H, key=jr.PRNGKey(0), algorithm=algorithm,
                        **{**EDGES[name], **extra})


@pytest.mark.parametrize("name", list(EDGES))
def test_largest_accepted_lambda_over_a_long_sequence(name):
    # Each layer's default algorithm; the others are checked against it at ordinary lengths
    # (tests/test_engine.py) and at the edges below. The gradient is what costs here.
    layer = _layer(name, "auto")
    system = layer.discrete_system()
    radius = np.abs(np.asarray(system.lam))
    assert radius.max() < 1.0 and radius.max() >= 1.0 - 2e-6
    u = _normal(1, (65536, H))

    @eqx.filter_jit
    def loss_and_grad(layer):
        def loss(layer):
            y = layer(u)
            return jnp.mean(y**2), y

        return eqx.filter_value_and_grad(loss, has_aux=True)(layer)

    (loss, y), grads = loss_and_grad(layer)
    assert np.isfinite(float(loss)) and bool(jnp.all(jnp.isfinite(y)))
    leaves = jax.tree_util.tree_leaves(eqx.filter(grads, eqx.is_inexact_array))
    assert leaves and all(bool(jnp.all(jnp.isfinite(g))) for g in leaves)
    # The recurrence still contributes: the output is not D u alone (a float32 lambda rounded
    # to 1 with B_bar rounded to 0 would leave exactly D u). At S4D's and S5's smallest
    # timescale B_bar ~ Delta = 2e-6, so the recurrent part is a random walk of about
    # 2e-6 sqrt(L) = 5e-4.
    assert float(jnp.max(jnp.abs(y - system.D[None] * u))) > 1e-4


def _first_output(system, u0: np.ndarray) -> np.ndarray:
    """y_0 = out(C B_bar u_0) + D u_0: the output of a one-step sequence, in numpy."""
    C, B = np.asarray(system.C), np.asarray(system.B)
    if system.structure == "bank":
        response = np.sum(C * B, axis=-1).real * u0  # channel h: sum_n C_hn B_hn u_h
    else:
        response = (C @ B).real @ u0
    return float(system.output_scale) * response + np.asarray(system.D) * u0


@pytest.mark.parametrize("name, algorithm", CASES)
def test_edges_of_every_algorithm(name, algorithm):
    layer = _layer(name, algorithm)
    system = layer.discrete_system()
    # At the largest accepted |lambda|, on a sequence with a NaN at step 5.
    u = np.random.default_rng(2).standard_normal((12, H)).astype(np.float32)
    u[5, 0] = np.nan
    u = jnp.asarray(u)
    y = np.asarray(layer(u))
    # The NaN reaches every later output of its channel; a recurrence leaves the earlier ones
    # finite (the FFT of the convolution spreads it over the whole sequence).
    assert np.isnan(y[5:, 0]).all()
    if layer.resolved_algorithm() != "convolution":
        assert np.isfinite(y[:5]).all()
        # Causal, so y_0 is the output of the one-step sequence u_0 (L = 1).
        np.testing.assert_allclose(y[0], _first_output(system, np.asarray(u[0])), rtol=1e-5,
                                   atol=1e-6)
    else:
        np.testing.assert_allclose(np.asarray(layer(u[:1]))[0],
                                   _first_output(system, np.asarray(u[0])), rtol=1e-5,
                                   atol=1e-6)
    # L = 0: an empty result, whatever the algorithm.
    assert layer(jnp.zeros((0, H))).shape == (0, H)
    assert layer.hidden_states(jnp.zeros((0, H))).shape == (0, system.state_size)


@dataclasses.dataclass(frozen=True)
class _Spec:
    seed: int


def _nonfinite(spec: _Spec) -> list[dict]:
    # As `harness.train.train` reports it: the rows so far, ending with the diverged step.
    step = 1 if spec.seed == 0 else 7
    raise Diverged(f"non-finite loss or gradient at step {step}",
                   [{"kind": "eval", "step": 0}, {"kind": "diverged", "step": step}])


def test_non_finite_at_the_first_step_is_a_failed_configuration_not_a_divergence(tmp_path):
    study = Study("edges", "toy", dict.fromkeys(("smoke", "cpu", "gpu")),
                  lambda config: [_Spec(0), _Spec(1)], _nonfinite)
    store = Store(tmp_path / "store.sqlite")
    summary = run_study(study, None, store=store, progress=False)
    assert summary.counts == {"failed": 1, "diverged": 1}
    runs = store.runs("edges").set_index("seed")
    # Step 1: the initial parameters or the data were non-finite; retried, not a result.
    assert runs.loc[0, "status"] == "failed"
    assert runs.loc[0, "error"].startswith("ConfigError: non-finite loss or gradient at step 1")
    assert store.read("edges", statuses=("failed",)).empty
    # Step 7: a divergence in training, a result with its rows.
    assert runs.loc[1, "status"] == "diverged"
    assert list(store.read("edges", statuses=("diverged",))["step"]) == [0, 7]
