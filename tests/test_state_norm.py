"""The state norm's closed forms and components, checked on cases whose answer theory gives.

The synthetic layers are diagonal systems with real decays gamma, driven by unit white noise:
"normalised" scales each state's input by sqrt(1 - gamma^2) (RotRNN's xi), so its stationary
norm is sqrt(P) whatever gamma; "unnormalised" does not, so its stationary norm
sqrt(sum 1 / (1 - gamma^2)) moves with every decay. Decays differ across layers and seeds and
move through training, as a trained network's do.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from linrnn_bench.harness import state_norm
from linrnn_bench.models import DiscreteSystem

P = 16  # states per layer


def _system(gamma: np.ndarray, normalised: bool) -> DiscreteSystem:
    scale = np.sqrt(1.0 - gamma**2) if normalised else np.ones_like(gamma)
    return DiscreteSystem(lam=jnp.asarray(gamma, jnp.complex64),
                          B=jnp.asarray(np.diag(scale), jnp.complex64),
                          C=jnp.eye(P, dtype=jnp.complex64), D=jnp.zeros(P), structure="mimo")


def _simulate(gamma: np.ndarray, normalised: bool, length: int, window: int,
              rng: np.random.Generator) -> np.ndarray:
    """Mean ||h_t|| over the last ``window`` steps of ``length``, one value per row of gamma
    ``(..., P)``: the recurrence run step by step on white noise (64 sequences each)."""
    scale = np.sqrt(1.0 - gamma**2) if normalised else np.ones_like(gamma)
    h = np.zeros((64, *gamma.shape))
    norms = []
    for t in range(length):
        h = gamma * h + scale * rng.standard_normal(h.shape)
        if t >= length - window:
            norms.append(np.linalg.norm(h, axis=-1))
    return np.mean(norms, axis=(0, 1))


def _decays(rng: np.random.Generator, seeds: int, steps: int, layers: int) -> np.ndarray:
    """Decays in [0.9, 0.99] per (seed, layer, state), moving by up to 0.005 over training."""
    start = rng.uniform(0.9, 0.985, size=(seeds, 1, layers, P))
    move = np.linspace(0.0, 1.0, steps)[None, :, None, None] * rng.uniform(
        -0.005, 0.005, size=(seeds, 1, layers, P))
    return np.clip(start + move, 0.0, 0.99)


def test_closed_form_matches_a_simulated_recurrence():
    rng = np.random.default_rng(0)
    gamma = rng.uniform(0.5, 0.95, size=P)
    for normalised in (True, False):
        system = _system(gamma, normalised)
        h = np.zeros((20000, P))
        for _ in range(30):
            h = gamma * h + np.abs(np.diag(np.asarray(system.B))) * rng.standard_normal(h.shape)
        measured = np.mean(np.sum(h**2, axis=1))
        predicted = np.sum(state_norm.closed_form_energy(system, 30)[-1])
        assert measured == pytest.approx(predicted, rel=0.02)
    # The normalised system's stationary energy is P whatever its decays.
    assert np.sum(state_norm.stationary_energy(_system(gamma, True))) == pytest.approx(P)


def test_regime_check_knows_how_long_a_layer_remembers():
    slow = _system(np.full(P, 0.99), normalised=True)
    # 1 - gamma^(2t) >= 0.9 from t = ceil(log 0.1 / (2 log gamma)): 115 at gamma = 0.99.
    gamma = float(np.float32(0.99))
    first = int(np.ceil(np.log(0.1) / (2 * np.log(gamma))))
    assert first == 115 and state_norm.steps_to_stationary(slow) == first
    assert state_norm.energy_reached(slow, first - 1) < 0.9 <= state_norm.energy_reached(slow, first)
    assert not state_norm.regime_met([slow], 39)  # ListOps' 11-39 tokens: transient
    assert state_norm.regime_met([slow, _system(np.full(P, 0.5), True)], 500)
    with pytest.raises(ValueError, match="fraction must lie in"):
        state_norm.steps_to_stationary(slow, 1.0)


def test_components_rank_the_normalised_layer_as_theory_does_where_stationary():
    """Stationary probes: the unnormalised layer's norm varies more across layers, seeds and
    training than the normalised one's. Transient probes (t << 1 / (1 - gamma)): the ranking
    reverses — the unnormalised norm is sqrt(P t) whatever gamma, the normalised one carries
    sqrt(1 - gamma^2) — which is why the regime is checked before a verdict."""
    rng = np.random.default_rng(1)
    seeds, steps, layers = 4, 5, 3
    gamma = _decays(rng, seeds, steps, layers)
    long, short = {}, {}
    for normalised in (True, False):
        long[normalised] = _simulate(gamma, normalised, 1000, 100, rng)
        short[normalised] = _simulate(gamma, normalised, 8, 1, rng)
    for component in (state_norm.depth_component, state_norm.seed_component,
                      state_norm.drift_component):
        assert np.all(component(long[True]) < component(long[False])), component.__name__
    assert np.mean(state_norm.depth_component(short[True])) > np.mean(
        state_norm.depth_component(short[False]))
    systems = [_system(gamma[0, -1, k], True) for k in range(layers)]
    assert state_norm.regime_met(systems, 1000 - 100)
    assert not state_norm.regime_met(systems, 8)


def test_settle_step_and_shapes():
    steps = np.array([0, 100, 200, 300, 400])
    norms = np.ones((2, 5, 2))
    norms[0, :, 0] = [1.0, 2.0, 1.5, 1.05, 1.0]  # within 10 % of its end from step 300 on
    norms[1, :, 1] = [3.0, 1.0, 1.0, 1.0, 1.0]  # settled from step 100 on
    assert state_norm.settle_step(norms, steps).tolist() == [300, 100]
    assert state_norm.settle_step(np.ones((1, 5, 1)), steps).tolist() == [0]
    assert state_norm.depth_component(np.ones((3, 4, 1))).tolist() == [0.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="finite and positive"):
        state_norm.drift_component(np.full((2, 3, 1), np.nan))
    with pytest.raises(ValueError, match="at least two seeds"):
        state_norm.seed_component(np.ones((1, 3, 2)))
    with pytest.raises(ValueError, match="increasing"):
        state_norm.settle_step(norms, steps[::-1])


def test_a_system_outside_the_unit_disc_has_no_stationary_level():
    # A trained layer can leave the disc: its energy never settles, and the functions say so
    # at once instead of searching ever longer horizons.
    gamma = np.full(P, 0.5)
    gamma[0] = 1.01
    system = _system(gamma, False)
    assert not state_norm.has_stationary_level(system)
    assert np.isnan(state_norm.energy_reached(system, 100))
    assert state_norm.steps_to_stationary(system) is None
    assert not state_norm.regime_met([system], 10_000)
    inside = _system(np.full(P, 0.5), True)
    assert state_norm.has_stationary_level(inside) and state_norm.steps_to_stationary(inside) >= 1
