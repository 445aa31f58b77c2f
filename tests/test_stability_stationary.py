"""The stationary-regime metric on cases whose answer theory gives (EVIDENCE.md, section 3).

Synthetic layers: diagonal systems with real decays gamma driven by unit white noise, measured
through the study's own row maker (`harness.studies._stability_probe.stationary_rows`) and the
report's components.
"Normalised" scales each state's input by sqrt(1 - gamma^2) (RotRNN's xi): its stationary norm
is sqrt(P) whatever the decays. "Unnormalised" does not: its stationary norm
sqrt(sum 1 / (1 - gamma^2)) moves with every decay, across layers, seeds and training.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest

from linrnn_bench import tasks
from linrnn_bench.harness import state_norm
from linrnn_bench.harness.report import stability as report
from linrnn_bench.harness.studies import _stability_probe, stability
from linrnn_bench.models import DiscreteSystem

P, SEEDS, STEPS, LAYERS, EXAMPLES = 8, 4, 4, 3, 64
EVALS = np.arange(STEPS) * 100


def _system(gamma: np.ndarray, scale: np.ndarray) -> DiscreteSystem:
    return DiscreteSystem(lam=jnp.asarray(gamma, jnp.complex64),
                          B=jnp.asarray(np.diag(scale), jnp.complex64),
                          C=jnp.eye(P, dtype=jnp.complex64), D=jnp.zeros(P), structure="mimo")


def _rows(normalised: bool, length: int, rng: np.random.Generator) -> pd.DataFrame:
    """The stationary rows of a synthetic trained network per seed and evaluation step, as the
    store gives them back (the report's columns)."""
    start = rng.uniform(0.9, 0.97, size=(SEEDS, 1, LAYERS, P))
    # Training moves the decays towards the unit circle (by up to 0.02), as a drift does.
    move = np.linspace(0, 1, STEPS)[None, :, None, None] * rng.uniform(
        0.0, 0.02, size=(SEEDS, 1, LAYERS, P))
    gamma = np.clip(start + move, 0.5, 0.98)  # (seeds, steps, layers, P)
    scale = np.sqrt(1.0 - gamma**2) if normalised else np.ones_like(gamma)
    h = np.zeros((SEEDS, STEPS, EXAMPLES, LAYERS, P))
    energy = np.zeros_like(h)
    norms = np.empty((SEEDS, STEPS, EXAMPLES, LAYERS, length))
    for t in range(length):
        drive = scale[:, :, None] * rng.standard_normal(h.shape)
        h = gamma[:, :, None] * h + drive
        energy += drive**2
        norms[..., t] = np.linalg.norm(h, axis=-1)
    records = []
    lengths = np.full(EXAMPLES, length)
    for s in range(SEEDS):
        for i, step in enumerate(EVALS):
            systems = [_system(gamma[s, i, k], scale[s, i, k]) for k in range(LAYERS)]
            rows = _stability_probe.stationary_rows(int(step), norms[s, i], lengths, 0.25,
                                                    energy[s, i], systems, lengthened=True)
            records += [{**r, "run_id": f"{normalised}-{s}", "seed": s,
                         "cfg.variant": "normalised" if normalised else "unnormalised",
                         "cfg.network.layer": "synthetic", "cfg.network.depth": LAYERS,
                         "cfg.train.steps": int(EVALS[-1])} for r in rows]
    return pd.DataFrame.from_records(records)


@pytest.fixture(scope="module")
def synthetic():
    rng = np.random.default_rng(0)
    return {(normalised, length): _rows(normalised, length, rng)
            for normalised in (True, False) for length in (400, 8)}


def test_the_components_rank_the_unnormalised_layer_less_stable(synthetic):
    components = {}
    for normalised in (True, False):
        rows = synthetic[(normalised, 400)]
        arrays = report.stationary_arrays(rows)
        ((_, a),) = arrays.items()
        assert a["norms"].shape == (SEEDS, STEPS, LAYERS) and a["dropped"] == 0
        components[normalised] = report.components_by_seed(a["norms"], a["steps"])
    for key in ("depth", "seed", "drift"):
        assert np.all(components[True][key] < components[False][key]), key
    assert components[True]["settle"].mean() < components[False]["settle"].mean()
    # The absolute level: sqrt(P) for the normalised layer, far above it for the other.
    normalised, other = synthetic[(True, 400)], synthetic[(False, 400)]
    np.testing.assert_allclose(normalised["norm_stationary"], np.sqrt(P), rtol=0.15)
    assert other["norm_stationary"].min() > 2 * np.sqrt(P)
    # The closed form fed the actual input's energy explains both (white input): ratio ~1.
    for rows in (normalised, other):
        np.testing.assert_allclose(rows["norm_ratio"], 1.0, atol=0.15)
        assert (rows["energy_reached"] >= state_norm.STATIONARY_FRACTION).all()


def test_the_regime_check_tells_a_transient_probe(synthetic):
    long = pd.concat([synthetic[(True, 400)], synthetic[(False, 400)]])
    short = pd.concat([synthetic[(True, 8)], synthetic[(False, 8)]])
    assert (short["energy_reached"] < state_norm.STATIONARY_FRACTION).all()
    assert "Regime check" in report.regime_text(long) and ": met:" in report.regime_text(long)
    text = report.regime_text(short)
    assert "NOT met for normalised" in text and "unnormalised" in text
    # A layer whose eigenvalue left the disc has no stationary level (energy NaN), which the
    # check says, and the others are still reported met.
    unstable = synthetic[(False, 400)].copy()
    unstable["energy_reached"] = np.nan
    mixed = report.regime_text(pd.concat([synthetic[(True, 400)], unstable]))
    assert "no stationary level for unnormalised" in mixed and "met for the others" in mixed
    # In the transient the metric ranks the layers backwards (why the regime is checked).
    depth = {}
    for normalised in (True, False):
        ((_, a),) = report.stationary_arrays(synthetic[(normalised, 8)]).items()
        depth[normalised] = report.components_by_seed(a["norms"], a["steps"])["depth"].mean()
    assert depth[True] > depth[False]


def test_window_mask_and_pairs():
    mask = _stability_probe.window_mask(np.array([10, 4]), 10, 0.2)
    assert mask[0].nonzero()[0].tolist() == [8, 9] and mask[1].nonzero()[0].tolist() == [3]
    names = ("lru-no-gamma", "rotrnn", "lru", "rotrnn-no-xi", "s5")
    assert report.comparison_pairs(names) == [
        ("rotrnn", "lru"), ("rotrnn", "s5"), ("lru", "s5"), ("rotrnn", "rotrnn-no-xi"),
        ("lru", "lru-no-gamma")]


def test_a_task_that_cannot_lengthen_falls_back_to_the_probe_batch():
    options = tasks.preset_options("digits", "smoke")
    assert tasks.lengthened("digits", options, 500, 4) is None
    fallback = (np.zeros((2, 64), np.int32), np.array([64, 64]))
    probe = _stability_probe.LongProbe("digits", options, 500, 4, 0.1, fallback=fallback)
    assert not probe.lengthened and probe.sequences is fallback[0]
    longer = tasks.lengthened("listops", tasks.preset_options("listops", "cpu"), 500, 16)
    assert (longer["min_length"], longer["max_length"], longer["num_val"]) == (500, 1000, 16)
    assert (longer["max_depth"], longer["max_args"]) == (10, 10)  # LRA's rules
    with pytest.raises(ValueError, match="window must lie in"):
        stability.StabilityConfig(window=0.0)


def test_a_layer_outside_the_stationary_regime_leaves_the_families_and_seeds_compare_unpaired():
    import pandas as pd

    from linrnn_bench.harness import stats as inference
    from linrnn_bench.harness.report.stability import _statistics, findings
    from linrnn_bench.harness.report.stability._data import C

    # S5's eigenvalue left the unit disc (no energy fraction); the LRU's window was transient.
    stationary = pd.DataFrame({"cfg.variant": ["rotrnn", "s5", "lru", "lru"],
                               C.energy_reached: [0.97, None, 0.95, 0.5]})
    assert findings._unsettled(stationary, ("rotrnn", "s5", "lru")) == ["s5", "lru"]
    assert findings._unsettled(stationary.iloc[:1], ("rotrnn",)) == []
    # The seed component, unpaired: each pair is `harness.stats.unpaired`, Holm over the family.
    values = {"rotrnn": pd.Series([0.1, 0.2, 0.15, 0.12, 0.18]),
              "lru": pd.Series([0.4, 0.5, 0.35, 0.45, 0.42])}
    family = _statistics._pair_family(values, [("rotrnn", "lru")], paired=False)
    reference = inference.unpaired(values["rotrnn"], values["lru"])
    assert family["p"].iloc[0] == reference.p and family["test"].iloc[0] == reference.test
    assert family["mdd_family"].iloc[0] == reference.mdd  # m = 1: the family's level is 5%
