"""The stationary-regime metric on cases whose answer theory gives (EVIDENCE.md, section 3).

Synthetic layers: diagonal systems with real decays gamma driven by unit white noise, measured
through the study's own row maker (`harness.studies.stability_probe.stationary_rows`) and the
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
from linrnn_bench.harness.studies.stability import report as report
from linrnn_bench.harness.studies import stability_probe, stability
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
            rows = stability_probe.stationary_rows(int(step), norms[s, i], lengths, 0.25,
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
    # The per-mode check: decays up to 0.98 remember 50 steps, so the modes need a window
    # opening at step 150 (151 in float32): met at 400 steps (window from 301), not at 8.
    assert long["settled"].all() and not short["settled"].any()
    assert (long["needed_from"] <= 151).all() and (long["unsettled_share"] == 0).all()
    text = report.regime_text(long)
    assert "Per-mode regime check" in text and "met for every variant" in text
    text = report.regime_text(short)
    assert "NOT met for normalised in 48 of 48" in text and "unnormalised in 48 of 48" in text
    assert "slowest carrying memory" in text
    # A layer whose eigenvalue left the disc has no stationary level, which the check says,
    # and the others are still reported met.
    unstable = synthetic[(False, 400)].copy()
    unstable["settled"], unstable["memory_slowest"] = False, np.nan
    mixed = report.regime_text(pd.concat([synthetic[(True, 400)], unstable]))
    assert "unnormalised in 48 of 48 layer measurements (an eigenvalue left" in mixed
    assert "met for normalised." in mixed
    # Rows stored before the per-mode check (study version 4): the energy check, as then.
    old = [c for c in ("settled", "unsettled_share", "memory_slowest", "needed_from")]
    text = report.regime_text(long.drop(columns=old))
    assert "Regime check" in text and ": met:" in text
    assert "NOT met for normalised" in report.regime_text(short.drop(columns=old))
    unstable = synthetic[(False, 400)].drop(columns=old)
    unstable["energy_reached"] = np.nan
    mixed = report.regime_text(pd.concat([synthetic[(True, 400)].drop(columns=old), unstable]))
    assert "no stationary level for unnormalised" in mixed and "met for the others" in mixed
    # In the transient the metric ranks the layers backwards (why the regime is checked).
    depth = {}
    for normalised in (True, False):
        ((_, a),) = report.stationary_arrays(synthetic[(normalised, 8)]).items()
        depth[normalised] = report.components_by_seed(a["norms"], a["steps"])["depth"].mean()
    assert depth[True] > depth[False]


def test_the_stream_lays_every_example_once_before_any_repeats():
    from linrnn_bench.tasks._base import Split

    lengths = np.array([3, 1, 2])
    inputs = np.array([[1, 2, 3, 0], [4, 0, 0, 0], [5, 6, 0, 0]], np.int32)
    split = Split(inputs=inputs, labels=np.zeros(3, np.int32), lengths=lengths)
    out = stability_probe.stream(split, 6, 2, pair=False)  # 6 = the three examples' steps
    assert out.shape == (2, 6) and np.all(out != 0)  # no padding inside a stream
    pieces = {(1, 2, 3), (4,), (5, 6)}
    for row in out.tolist():  # each row: every example once, whole, in some order
        found, i = set(), 0
        while i < 6:
            piece = next(p for p in pieces if tuple(row[i:i + len(p)]) == p)
            found.add(piece)
            i += len(piece)
        assert found == pieces


def test_the_per_mode_check_on_cases_whose_answer_is_known():
    # One mode of memory 100 with 97% of the energy: it needs a window from step 300.
    regime = state_norm.mode_regime(np.array([0.99, 0.5]), np.array([1.0, 1.0]), 299)
    assert not regime.settled and regime.needed_from == 300
    assert regime.slowest == pytest.approx(100.0)
    assert regime.unsettled_share == pytest.approx((1 / (1 - 0.99**2)) / (
        1 / (1 - 0.99**2) + 1 / (1 - 0.25)))
    assert state_norm.mode_regime(np.array([0.99, 0.5]), np.array([1.0, 1.0]), 300).settled
    # A slow mode holding under 1% of the energy may still settle: the fast one decides.
    weights = np.array([0.005 * (1 - 0.999**2), 0.995 * (1 - 0.5**2)])
    regime = state_norm.mode_regime(np.array([0.999, 0.5]), weights, 6)
    assert regime.settled and regime.slowest == pytest.approx(2.0)
    assert regime.unsettled_share == pytest.approx(0.005)
    # Many modes each under 1% (S4D's 1024 states): their memories still count.
    assert not state_norm.mode_regime(np.full(1024, 0.9), np.ones(1024), 29).settled
    assert state_norm.mode_regime(np.full(1024, 0.9), np.ones(1024), 30).settled
    # A fed mode on or outside the unit circle has no stationary level: never settled.
    regime = state_norm.mode_regime(np.array([1.0, 0.5]), np.ones(2), 10**6)
    assert not regime.settled and regime.needed_from is None and regime.unsettled_share == 1.0


def test_window_mask_and_pairs():
    mask = stability_probe.window_mask(np.array([10, 4]), 10, 0.2)
    assert mask[0].nonzero()[0].tolist() == [8, 9] and mask[1].nonzero()[0].tolist() == [3]
    names = ("lru-no-gamma", "rotrnn", "lru", "rotrnn-no-xi", "s5")
    assert report.comparison_pairs(names) == [
        ("rotrnn", "lru"), ("rotrnn", "s5"), ("lru", "s5"), ("rotrnn", "rotrnn-no-xi"),
        ("lru", "lru-no-gamma")]


def test_a_task_that_cannot_lengthen_falls_back_to_the_probe_batch():
    options = tasks.preset_options("digits", "smoke")
    assert tasks.lengthened("digits", options, 500, 4) is None
    fallback = (np.zeros((2, 64), np.int32), np.array([64, 64]))
    probe = stability_probe.LongProbe("digits", options, 500, 4, 0.1, fallback=fallback,
                                       source="generator")
    assert not probe.lengthened and probe.sequences is fallback[0]
    # The stream needs no generator: any task's training examples, back to back.
    probe = stability_probe.LongProbe("digits", options, 500, 4, 0.1, fallback=fallback)
    assert probe.lengthened and probe.sequences.shape[:2] == (4, 500 * 8)
    assert probe.ladder == (500, 707, 1000, 1414, 2000, 2828, 4000)
    with pytest.raises(ValueError, match="accepted: \\['stream', 'generator'\\]"):
        stability_probe.LongProbe("digits", options, 500, 4, 0.1, fallback=fallback,
                                   source="nosuch")
    longer = tasks.lengthened("listops", tasks.preset_options("listops", "cpu"), 500, 16)
    assert (longer["min_length"], longer["max_length"], longer["num_val"]) == (500, 1000, 16)
    assert (longer["max_depth"], longer["max_args"]) == (10, 10)  # LRA's rules
    with pytest.raises(ValueError, match="window must lie in"):
        stability.StabilityConfig(window=0.0)


def test_a_layer_outside_the_stationary_regime_leaves_the_families_and_seeds_compare_unpaired():
    import pandas as pd

    from linrnn_bench.harness import stats as inference
    from linrnn_bench.harness.studies.stability.report import _statistics, findings
    from linrnn_bench.harness.studies.stability.report._data import C

    # S5's eigenvalue left the unit disc (no energy fraction); the LRU's window was transient.
    stationary = pd.DataFrame({"cfg.variant": ["rotrnn", "s5", "lru", "lru"],
                               C.energy_reached: [0.97, None, 0.95, 0.5]})
    assert findings._unsettled(stationary, ("rotrnn", "s5", "lru")) == ["s5", "lru"]
    assert findings._unsettled(stationary.iloc[:1], ("rotrnn",)) == []
    # With the per-mode check (study version 5) its verdict decides, whatever the energy.
    stationary[C.settled] = [True, False, True, True]
    assert findings._unsettled(stationary, ("rotrnn", "s5", "lru")) == ["s5"]
    # The seed component, unpaired: each pair is `harness.stats.unpaired`, Holm over the family.
    values = {"rotrnn": pd.Series([0.1, 0.2, 0.15, 0.12, 0.18]),
              "lru": pd.Series([0.4, 0.5, 0.35, 0.45, 0.42])}
    family = _statistics._pair_family(values, [("rotrnn", "lru")], paired=False)
    reference = inference.unpaired(values["rotrnn"], values["lru"])
    assert family["p"].iloc[0] == reference.p and family["test"].iloc[0] == reference.test
    assert family["mdd_family"].iloc[0] == reference.mdd  # m = 1: the family's level is 5%


def test_an_overflowed_norm_outside_the_window_leaves_the_window_finite():
    # A layer that left the unit disc overflows on long sequences; only its window is read.
    norms = np.ones((2, 1, 10))
    norms[:, :, :5] = np.inf  # before the window (the last 20 %): ignored
    rows = stability_probe.stationary_rows(3, norms, np.array([10, 10]), 0.2, None, None,
                                            lengthened=True)
    assert rows[0]["norm_stationary"] == 1.0 and rows[0]["norm_rms"] == 1.0


def test_the_stream_grows_for_a_slow_layer_and_not_for_one_without_a_stationary_level():
    options = tasks.preset_options("digits", "smoke")
    probe = stability_probe.LongProbe("digits", options, 500, 2, 0.1, fallback=None)
    lengths = []

    def measure(step, network, state, length, needed):
        lengths.append(length)
        return [{"settled": stability_probe._window_start(length, 0.1) >= (needed or 10**9),
                 "needed_from": needed}]

    for needed, expected in ((1500, [500, 2000]), (None, [2000])):
        lengths.clear()
        probe._measure = lambda s, n, st, L, needed=needed: measure(s, n, st, L, needed)
        probe(0, None, None)
        assert lengths == expected  # 2000: the first of 500 ... 4000 whose window opens >= 1500


@pytest.mark.parametrize("value", [np.inf, np.nan])
def test_a_run_whose_stationary_norm_overflowed_is_left_out_and_counted(synthetic, value):
    """A run whose probe overflowed at some evaluation (an S5 network at depth 2 on the
    cpu-full stream did) has no components: it is dropped and counted, never a traceback."""
    rows = synthetic[(True, 400)].copy()
    hit = (rows["run_id"] == "True-0") & (rows["step"] == EVALS[-1]) & (rows["layer"] == 2)
    rows.loc[hit, "norm_stationary"] = value
    ((_, a),) = report.stationary_arrays(rows).items()
    assert a["dropped"] == 1 and a["norms"].shape == (SEEDS - 1, STEPS, LAYERS)
    assert np.isfinite(report.components_by_seed(a["norms"], a["steps"])["depth"]).all()
