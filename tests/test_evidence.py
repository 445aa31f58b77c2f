"""The evidence the report argues from: statistics, trivial baselines, tuning, findings.

The statistics are checked against scipy and against numbers computed by hand; the accuracy
section against a synthetic store whose winners, baselines and learning-rate choices are known.
"""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
import pandas as pd
import pytest
from scipy import optimize, stats

from linrnn_bench.harness import stats as inference
from linrnn_bench.harness.report import summaries
from linrnn_bench.harness.studies.accuracy import report as accuracy
from linrnn_bench.harness.report.artifacts import Finding, Table
from linrnn_bench.harness.store import Store
from linrnn_bench.harness.studies import accuracy as accuracy_study
from helpers import assert_printable

_PROV = {"git_commit": "0" * 40, "git_dirty": False, "versions": {"jax": "0.10.2"},
         "python": "3.11.9", "backend": "cpu", "device_kind": "cpu", "device_count": 1,
         "cpu_count": 2, "machine": "x86_64", "seconds": 1.0, "study_version": 2}


# --------------------------------------------------------------------------------------------
# Statistics


def _sign_flip_by_hand(d: np.ndarray) -> float:
    """The exact two-sided sign-flip p, every flip written out."""
    flips = [abs(sum(s * x for s, x in zip(signs, d)))
             for signs in itertools.product((-1, 1), repeat=len(d))]
    return sum(f >= abs(d.sum()) - 1e-12 for f in flips) / len(flips)


def test_paired_comparison_matches_scipy_and_by_hand():
    rng = np.random.default_rng(0)
    scores = pd.DataFrame({"a": rng.normal(50, 2, 7), "b": rng.normal(40, 2, 7),
                           "c": rng.normal(49, 2, 7)})
    pairs = inference.pairwise(scores, higher_is_better=True).set_index(["first", "second"])
    for (a, b), row in pairs.iterrows():
        d = (scores[a] - scores[b]).to_numpy()
        ref = stats.ttest_rel(scores[a], scores[b])
        ci = ref.confidence_interval(0.95)
        assert (row["low"], row["high"]) == pytest.approx((ci.low, ci.high), rel=1e-10)
        assert row["p_t"] == pytest.approx(ref.pvalue, rel=1e-10)
        assert row["diff"] == pytest.approx(d.mean())
        assert row["effect"] == pytest.approx(d.mean() / d.std(ddof=1))  # d_z
        assert row["test"] == "exact sign-flip" and row["n"] == 7
        assert row["p"] == pytest.approx(_sign_flip_by_hand(d))
        assert row["smallest_p"] == pytest.approx(2 / 2**7)
        assert row["m"] == 3
    # Holm: sorted p1 <= p2 <= p3 become 3 p1, max(3 p1, 2 p2), max(.., p3), capped at 1.
    p = np.array([0.01, 0.04, 0.03, float("nan")])
    assert np.allclose(inference.holm(p)[:3], [0.03, 0.06, 0.06])
    assert math.isnan(inference.holm(p)[3])
    assert np.allclose(inference.holm(np.array([[0.01, 0.04, 0.03], [0.5, 0.001, 0.2]])),
                       [[0.03, 0.06, 0.06], [0.5, 0.003, 0.4]])
    # a beats b on every seed: p = 2/2^7 = 0.0156, times 3 by Holm: 0.047 <= 0.05.
    assert pairs.loc[("a", "b"), "p_holm"] == pytest.approx(3 * 2 / 2**7)
    assert pairs.loc[("a", "b"), "significant"] and pairs.loc[("a", "b"), "better"] == "a"
    lower = inference.pairwise(scores, higher_is_better=False).set_index(["first", "second"])
    assert lower.loc[("a", "b"), "better"] == "b"  # for a loss the smaller mean wins
    # Beyond ten seeds the test is the paired t.
    many = inference.paired(rng.normal(1, 1, 12), rng.normal(0, 1, 12))
    assert many.test == "paired t" and many.p == many.p_t and many.mdd == many.mdd_t


def test_small_n_cannot_reach_alpha_and_says_so():
    c = inference.paired([60.0, 62.0, 61.0], [50.0, 52.0, 54.0])
    assert c.p == pytest.approx(0.25) and c.smallest_p == pytest.approx(0.25)
    assert math.isinf(c.mdd) and math.isfinite(c.mdd_t)
    assert "n = 3 cannot reach alpha = 0.05 with an exact test" in inference.mdd_text(c)
    assert math.isinf(inference.sign_flip_mdd(5)) and math.isfinite(inference.sign_flip_mdd(6))
    family = inference.pairwise(pd.DataFrame({"x": [1.0, 2.0, 3.0], "y": [0.0, 0.5, 1.0]}),
                                higher_is_better=True)
    assert summaries.family_verdict(family).startswith("n = 3 cannot reach alpha = 0.05")
    text = summaries.comparison_text(next(family.itertuples()))
    assert "the exact test cannot reach the Holm level at n = 3" in text
    # What a paired t-test could detect, at the family's Holm level (here m = 1: 5%).
    assert f"a paired t-test there could detect {family['mdd_t_family'].iloc[0]:.2f}" in text
    assert family["mdd_t_family"].iloc[0] == pytest.approx(
        inference.paired_t_mdd(3, 0.05) * family["sd"].iloc[0])


def test_minimum_detectable_difference_has_its_power():
    for n in (3, 5, 10, 30):
        effect = inference.paired_t_mdd(n)
        df, critical = n - 1, stats.t.ppf(0.975, n - 1)
        power = (stats.nct.sf(critical, df, effect * math.sqrt(n))
                 + stats.nct.cdf(-critical, df, effect * math.sqrt(n)))
        assert power == pytest.approx(0.80, abs=1e-4)
    assert inference.paired_t_mdd(10) == pytest.approx(0.9958, abs=2e-3)  # G*Power's d_z
    # Harder to detect with fewer pairs, at a stricter alpha, and with the exact test.
    assert inference.paired_t_mdd(5) > inference.paired_t_mdd(10)
    assert inference.sign_flip_mdd(8, 0.05 / 3) > inference.sign_flip_mdd(8)
    assert inference.sign_flip_mdd(8) >= inference.paired_t_mdd(8)
    c = inference.paired([3.0, 1.0, 2.0, 5.0, 4.0, 2.5, 3.5], [0.0] * 7)
    assert c.mdd == pytest.approx(inference.sign_flip_mdd(7) * c.sd)


def test_unpaired_matches_scipy():
    a, b = [1.0, 2.0, 3.0], [4.0, 5.0, 6.5]
    c = inference.unpaired(a, b)
    ref = stats.ttest_ind(a, b, equal_var=False)
    assert (c.low, c.high) == pytest.approx(tuple(ref.confidence_interval()))
    assert c.p_t == pytest.approx(ref.pvalue)
    # The permutation p: 2 of the 20 splits are as extreme; p is the larger of it and Welch's.
    assert stats.permutation_test((a, b), lambda x, y: np.mean(x) - np.mean(y),
                                  permutation_type="independent").pvalue == pytest.approx(0.1)
    assert c.p == pytest.approx(max(0.1, ref.pvalue)) and c.smallest_p == pytest.approx(0.1)
    assert c.test == "Welch t and exact permutation" and math.isinf(c.mdd)
    assert math.isfinite(c.mdd_t)


def test_across_tasks_friedman_with_ties_and_wilcoxon_holm():
    scores = pd.DataFrame({"a": [90, 80, 70, 0.1], "b": [85, 75, 60, 0.2], "c": [80, 70, 65, 0.3],
                           "d": [70, 60, 50, 0.4]}, index=["t1", "t2", "t3", "mse"])
    higher = {"t1": True, "t2": True, "t3": True, "mse": False}
    out = inference.across_tasks(scores, higher)
    assert out["ranks"].loc["mse"].tolist() == [1.0, 2.0, 3.0, 4.0]  # lower MSE ranks first
    assert summaries.average_ranks(scores, higher).equals(out["ranks"])
    oriented = scores.copy()
    oriented.loc["mse"] *= -1
    ref = stats.friedmanchisquare(*[oriented[c] for c in oriented.columns])
    assert out["chi2"] == pytest.approx(ref.statistic) and out["p"] == pytest.approx(ref.pvalue)
    pairs = out["pairs"].set_index(["first", "second"])
    ab = oriented["a"] - oriented["b"]
    assert pairs.loc[("a", "b"), "p"] == pytest.approx(stats.wilcoxon(ab).pvalue)
    assert out["smallest_p"] == pytest.approx(0.125) and out["weak"]
    assert not pairs["significant"].any()  # four tasks cannot reach 5%
    # An exact tie (the RotRNN = S4D on ListOps): scipy's Friedman is tie-corrected
    # (the uncorrected statistic is smaller), and each tie-break is checked.
    tied = pd.DataFrame({"lru": [40.0, 80.0, 70.0, 60.0], "rot": [37.0, 75.0, 60.0, 61.0],
                         "s4d": [37.0, 70.0, 65.0, 50.0]}, index=list("wxyz"))
    out = inference.across_tasks(tied, dict.fromkeys("wxyz", True))
    r = out["ranks"].mean().to_numpy()
    uncorrected = 12 * 4 / (3 * 4) * (np.sum(r**2) - 3 * 16 / 4)
    assert out["chi2"] > uncorrected
    assert out["tie_breaks"] == 2
    broken = [stats.friedmanchisquare([1, 1, 1, 2], [2, 2, 3, 1], [3, 3, 2, 3]).pvalue,
              stats.friedmanchisquare([1, 1, 1, 2], [3, 2, 3, 1], [2, 3, 2, 3]).pvalue]
    assert (out["p_best"], out["p_worst"]) == pytest.approx((min(broken), max(broken)))
    rot_s4d = out["pairs"].set_index(["first", "second"]).loc[("rot", "s4d")]
    both = [stats.wilcoxon([e, 5.0, -5.0, 11.0]).pvalue for e in (-1.0, 1.0)]
    assert rot_s4d["p"] == pytest.approx(max(both)) and rot_s4d["ties"] == 1


def test_baseline_margin_mean_interval_and_refused_bootstrap():
    ok, margin = summaries.beats_baseline([40.0, 42.0, 44.0], 30.0, higher_is_better=True)
    assert ok and margin == pytest.approx(12.0 / (2.0 / math.sqrt(3)))
    ok, margin = summaries.beats_baseline([0.5, 0.6], 0.55, higher_is_better=False)
    assert not ok and margin == pytest.approx(0.0)
    mean, low, high, n = inference.mean_interval([1.0, 2.0, 4.0])
    ref = stats.ttest_1samp([1.0, 2.0, 4.0], 0.0).confidence_interval()
    assert (mean, low, high, n) == pytest.approx((7 / 3, ref.low, ref.high, 3))
    with pytest.raises(inference.TooFewError, match="at least 30 values"):
        inference.percentile_bootstrap([1.0, 2.0, 3.0])
    low, high = inference.percentile_bootstrap(np.arange(40.0))
    assert low < 19.5 < high
    assert summaries.coefficient_of_variation([1.0, 3.0]) == pytest.approx(0.5)


def _summary_cv(values: pd.Series) -> float:
    """The stability summary's spread as it was computed on its own: pandas' population
    standard deviation over the mean of the non-NaN values (an infinite one makes it NaN)."""
    values = values.dropna()
    with np.errstate(invalid="ignore"):  # inf - inf, where the values hold an infinite one
        if len(values) < 2 or values.mean() == 0:
            return float("nan")
        return float(values.std(ddof=0) / values.mean())


@pytest.mark.parametrize("values", [
    [], [2.0], [math.nan, 2.0], [0.0, 0.0], [-1.0, 1.0], [1.0, 3.0], [1.0, math.nan, 3.0],
    [0.1, 0.7, 1e-300, 3.3, 1e12], [-2.0, -1.0], [1.0, math.inf], [math.inf, -math.inf, 2.0],
    [math.inf, math.nan], [-math.inf, 1.0, 2.0],
    list(np.random.default_rng(0).lognormal(size=90)),
])
def test_the_stability_summary_spread_is_the_coefficient_of_variation(values):
    """The summary's spread (`studies.stability.report._statistics._cv`) is `coefficient_of_variation`
    to the bit, with the one difference kept: an infinite norm (one that overflowed) makes it NaN
    where the per-run spread leaves it out."""
    from linrnn_bench.harness.studies.stability.report._statistics import _cv

    series = pd.Series(values, dtype=float)
    expected = _summary_cv(series)
    for got in (summaries.coefficient_of_variation(series, drop_infinite=False), _cv(series)):
        assert got == expected or (math.isnan(got) and math.isnan(expected)), (got, expected)
    finite = pd.Series([v for v in values if math.isfinite(v)], dtype=float)
    dropped = summaries.coefficient_of_variation(series)
    reference = _summary_cv(finite)
    assert dropped == reference or (math.isnan(dropped) and math.isnan(reference))


# --------------------------------------------------------------------------------------------
# The trivial baseline and the selection rule


def test_trivial_baseline_from_the_data():
    train = np.array([0, 1, 1, 2, 1])
    test = np.array([1, 1, 0, 2])
    out = accuracy_study.trivial_baseline("class", train, test)
    assert out["baseline_test_accuracy"] == pytest.approx(0.5)  # always class 1
    freq = np.array([1, 3, 1]) / 5
    assert out["baseline_test_loss"] == pytest.approx(-np.mean(np.log(freq[test])))
    per_step = accuracy_study.trivial_baseline(
        "per_step", np.array([[-1, 3, 3], [-1, -1, 4]]), np.array([[3, -1, 4]]))
    assert per_step["baseline_test_accuracy"] == pytest.approx(0.5)  # class 3 on scored steps
    reg = accuracy_study.trivial_baseline("regression", np.array([1.0, 3.0]), np.array([0.0, 4.0]))
    assert reg == {"baseline_test_accuracy": None, "baseline_test_loss": pytest.approx(4.0)}


def test_select_uses_validation_only():
    final = pd.DataFrame({
        accuracy_study.LR: [1e-3, 1e-3, 3e-3, 3e-3],
        accuracy_study.RECURRENT_LR: [1e-3] * 4,
        "val_accuracy": [0.6, 0.7, 0.66, 0.66],
        "test_accuracy": [0.1, 0.1, 0.9, 0.9],  # never read
        "val_loss": [2.0, 2.0, 1.0, 1.0],
    })
    assert accuracy_study.select(final, "accuracy") == (3e-3, 1e-3)  # 0.66 > 0.65
    assert accuracy_study.select(final, "loss") == (3e-3, 1e-3)
    tied = final.assign(val_accuracy=0.5)
    assert accuracy_study.select(tied, "accuracy") == (1e-3, 1e-3)  # ties: smaller rates


def test_grid_tunes_the_named_tasks_at_every_pair():
    full = accuracy_study.STUDY.config("cpu-full")
    for config, pairing in ((accuracy_study.STUDY.config("cpu"), "paired"), (full, "paired"),
                            (dataclasses.replace(full, lr_pairing="product", lr_extend=0),
                             "product")):
        assert config.lr_pairing == pairing
        # The equal-width runs (cpu-full's parameter-matched ListOps runs are counted by
        # tests/test_accuracy_matched.py).
        specs = [s for s in accuracy_study.grid(config) if s.parameter_budget is None]
        recipe = (config.train.lr, config.train.recurrent_lr)
        grid = (set(zip(config.lr_grid, config.recurrent_lr_grid)) if pairing == "paired" else
                {(a, b) for a in config.lr_grid for b in config.recurrent_lr_grid})
        cells = len(config.models) * len(config.seeds)
        # A tuned task at its tuning seeds (the others join at the selected pair, `bind`).
        tuning = len(config.models) * len(accuracy_study.tune_seeds(config))
        expected = sum(tuning * len(grid | {recipe}) if t in config.tune_tasks else cells
                       for t in config.tasks)
        assert len(specs) == expected
        assert len({accuracy_study.STUDY.run_id(s) for s in specs}) == len(specs)
        for task in config.tasks:
            rates = {(s.train.lr, s.train.recurrent_lr) for s in specs if s.task == task}
            assert rates == (grid | {recipe} if task in config.tune_tasks else {recipe})
    with pytest.raises(ValueError, match="paired.*one length"):
        accuracy_study.AccuracyConfig(tasks=("digits",), tune_tasks=("digits",), lr_grid=(1e-3,),
                                      recurrent_lr_grid=(1e-3, 1e-2), lr_pairing="paired")
    with pytest.raises(ValueError, match="tune_tasks.*distinct members"):
        accuracy_study.AccuracyConfig(tasks=("digits",), tune_tasks=("listops",),
                                      lr_grid=(1e-3,), recurrent_lr_grid=(1e-3,))
    with pytest.raises(ValueError, match="needs a non-empty lr_grid"):
        accuracy_study.AccuracyConfig(tasks=("digits",), tune_tasks=("digits",))


# --------------------------------------------------------------------------------------------
# The accuracy section on a synthetic store with a known answer

# (model, lr) -> test accuracy per seed; lr 1e-3 is the one recipe (also the tuned pick for
# the LRU), 3e-3 is better on validation for RotRNN. Baseline: 20 %. Seed 9 is the tuning seed,
# trained at both rates; seeds 0-2 are held out, trained at their model's selected rate alone
# (``tuning_seeds``), and are the only ones the tuned configuration compares.
_RUNS = {
    ("lru", 1e-3): (0.50, 0.52, 0.54),
    ("rotrnn", 3e-3): (0.60, 0.62, 0.61),
}
_TUNING_SEED = {("lru", 1e-3): 0.70, ("lru", 3e-3): 0.40, ("rotrnn", 1e-3): 0.30,
                ("rotrnn", 3e-3): 0.90}


def _record(store: Store) -> None:
    runs = [((model, lr), seed, acc) for (model, lr), accs in _RUNS.items()
            for seed, acc in enumerate(accs)]
    runs += [(key, 9, acc) for key, acc in _TUNING_SEED.items()]
    for (model, lr), seed, acc in runs:
        run_id = f"{model}-{lr}-{seed}"
        store.record(
            run_id=run_id, study="accuracy", status="done",
            config={"network": {"layer": model, "depth": 2}, "task": "listops",
                    "train": {"lr": lr, "recurrent_lr": 1e-3}, "seed": seed,
                    "recipe_lr": 1e-3, "recipe_recurrent_lr": 1e-3},
            config_hash=run_id, seed=seed, provenance=_PROV,
            rows=[{"kind": "eval", "step": 10, "val_accuracy": acc, "val_loss": 1.0},
                  {"kind": "final", "val_accuracy": acc + 0.01, "test_accuracy": acc,
                   "val_loss": 1.0, "test_loss": 1.0, "selection": "accuracy",
                   "params": 100, "steps": 10, "train_seconds": 1.0,
                   "baseline_test_accuracy": 0.2, "baseline_test_loss": 2.3}],
        )


def test_section_tunes_tests_and_states_findings(tmp_path):
    store = Store(tmp_path / "s.sqlite")
    _record(store)
    artifacts = {a.name: a for a in accuracy.build(store)}
    assert_printable(artifacts.values())
    tuned = artifacts["accuracy_tuned"]
    assert isinstance(tuned, Table)
    assert tuned.frame.at["LRU", "ListOps"] == pytest.approx(52.0)  # lr 1e-3 wins on val
    assert tuned.frame.at["RotRNN", "ListOps"] == pytest.approx(61.0)  # lr 3e-3 wins
    assert tuned.frame.at["Trivial baseline", "ListOps"] == pytest.approx(20.0)
    informative = artifacts["accuracy_informative"].frame
    assert informative.at["ListOps", "informative"] == "yes"
    se = np.std([60, 62, 61], ddof=1) / math.sqrt(3)
    assert informative.at["ListOps", "tuned: margin (s.e.)"] == pytest.approx((61 - 20) / se)
    significance = artifacts["accuracy_significance"].frame
    row = significance.loc[("ListOps", "RotRNN − LRU")]
    ref = stats.ttest_rel([60, 62, 61], [50, 52, 54])
    assert (row["95% CI low"], row["95% CI high"]) == pytest.approx(
        tuple(ref.confidence_interval()))
    assert row["p"] == pytest.approx(0.25) and row["test"] == "exact sign-flip"
    assert row["significant"] == "no" and math.isinf(row["MDD"])
    finding = artifacts["accuracy_findings"]
    assert isinstance(finding, Finding)
    assert any(line.startswith("Informative tasks") and "ListOps" in line
               for line in finding.lines)
    line = next(line for line in finding.lines if line.startswith("On ListOps"))
    assert line.startswith("On ListOps (n = 3): largest difference RotRNN − LRU +9.0 pp, 95% CI [")
    assert "significant" not in line and len(line) <= 200
    # What n = 3 cannot decide is said once, at the top of the report, not per pair.
    design = artifacts["accuracy_design"]
    assert isinstance(design, Finding) and design.design
    assert design.lines[0].startswith(
        "Tuned comparisons on ListOps, n = 3 held-out paired seeds per cell and 1 model pair "
        "(Holm level 0.05/1 = 0.05); the exact test's smallest p, 0.25, cannot reach it (that "
        "needs n ≥ 6)")
    # The tuning seed chose the rates and is in no tuned mean or test.
    assert set(significance["paired seeds"]) == {3}
    # The by-task figure: each mean with its 95 % t interval over the seeds (n = 3, t with 2
    # degrees of freedom), the numbers drawn beside it; its axis zoomed to the data, the
    # baseline (20 %) named in the title when it is off scale, else drawn.
    by_task = artifacts["accuracy_by_task"]
    drawn = by_task.data[by_task.data["mark"] == "mean"].set_index("model")
    ci = stats.ttest_1samp([60.0, 62.0, 61.0], 0.0).confidence_interval(0.95)
    assert (drawn.at["RotRNN", "ci95_low"], drawn.at["RotRNN", "ci95_high"]) == pytest.approx(
        (ci.low, ci.high))
    assert drawn.at["RotRNN", "n"] == 3 and drawn.at["RotRNN", "task"] == "ListOps"
    assert "95 % confidence interval" in by_task.caption and "n = 3 seeds" in by_task.caption
    ax = by_task.figure.axes[0]
    low, high = ax.get_ylim()
    assert low > 0 and high < 100  # zoomed, not 0-100
    assert ("baseline 20.0 %" in ax.get_title()) != (low <= 20.0 <= high)
    assert artifacts["accuracy_sensitivity"].name == "accuracy_sensitivity"
    assert type(artifacts["accuracy_sensitivity"]).__name__ == "Figure"


def test_significance_table_recomputes_with_scipy(tmp_path):
    """The significance table from a synthetic store, recomputed here from the seeds' numbers
    with scipy alone (t interval, sign flips by enumeration, Holm by hand, MDD from nct)."""
    rng = np.random.default_rng(3)
    seeds = 7
    accs = {"lru": 0.60 + 0.02 * rng.standard_normal(seeds),
            "rotrnn": 0.55 + 0.02 * rng.standard_normal(seeds),
            "s5": 0.59 + 0.02 * rng.standard_normal(seeds)}
    store = Store(tmp_path / "s.sqlite")
    for model, values in accs.items():
        for seed, acc in enumerate(values):
            run_id = f"{model}-{seed}"
            store.record(
                run_id=run_id, study="accuracy", status="done",
                config={"network": {"layer": model, "depth": 1}, "task": "digits",
                        "train": {"lr": 1e-3, "recurrent_lr": 1e-3}, "seed": seed},
                config_hash=run_id, seed=seed, provenance=_PROV,
                rows=[{"kind": "final", "val_accuracy": acc, "test_accuracy": float(acc),
                       "val_loss": 1.0, "test_loss": 1.0, "selection": "accuracy",
                       "params": 100, "steps": 10, "train_seconds": 1.0,
                       "baseline_test_accuracy": 0.1, "baseline_test_loss": 2.3}])
    artifacts = {a.name: a for a in accuracy.build(store)}
    table = artifacts["accuracy_significance"].frame
    labels = {"lru": "LRU", "rotrnn": "RotRNN", "s5": "S5"}
    order = ["rotrnn", "lru", "s5"]  # the report's model order (harness.report.style)
    pairs = list(itertools.combinations(order, 2))
    raw = {}
    for a, b in pairs:
        d = 100 * accs[a] - 100 * accs[b]
        flips = np.array(list(itertools.product((-1.0, 1.0), repeat=seeds)))
        raw[a, b] = np.mean(np.abs(flips @ d) >= abs(d.sum()) - 1e-9)
    ascending = sorted(raw, key=raw.get)
    holm_p, running = {}, 0.0
    for i, key in enumerate(ascending):
        running = max(running, min(1.0, (len(ascending) - i) * raw[key]))
        holm_p[key] = running
    for first, second in pairs:
        key = (first, second)
        row = table.loc[("Sequential digits", f"{labels[first]} − {labels[second]}")]
        d = 100 * accs[first] - 100 * accs[second]
        ci = stats.ttest_1samp(d, 0.0).confidence_interval()
        sd = d.std(ddof=1)
        # At the Holm level of the family's first step, 5% / m for the m = 3 pairs.
        critical = stats.t.ppf(1 - 0.05 / len(pairs) / 2, seeds - 1)
        # (the lower tail, below 1e-15 there, is NaN in scipy's nct far out: counted as 0)
        effect = optimize.brentq(lambda e: stats.nct.sf(critical, seeds - 1, e * math.sqrt(seeds))
                                 + np.nan_to_num(stats.nct.cdf(-critical, seeds - 1,
                                                               e * math.sqrt(seeds)))
                                 - 0.8, 0.01, 50)
        assert row["paired seeds"] == seeds
        assert row["difference"] == pytest.approx(d.mean())
        assert (row["95% CI low"], row["95% CI high"]) == pytest.approx((ci.low, ci.high))
        assert row["d_z"] == pytest.approx(d.mean() / sd)
        assert row["p"] == pytest.approx(raw[key])
        assert row["p (Holm)"] == pytest.approx(holm_p[key])
        assert row["MDD (paired t, Holm)"] == pytest.approx(effect * sd, rel=1e-3)
        assert (row["significant"] == "yes") == (holm_p[key] <= 0.05)


# --------------------------------------------------------------------------------------------
# The stability verdict


def _trained_rows(spreads: dict[str, tuple[float, ...]]) -> pd.DataFrame:
    """Layer rows of 2-block runs whose norm grows linearly by ``spread`` over 5 evaluations."""
    records = []
    for variant, per_seed in spreads.items():
        for seed, spread in enumerate(per_seed):
            for step in range(0, 250, 50):
                for layer in (1, 2):
                    records.append({"run_id": f"{variant}-{seed}", "cfg.variant": variant,
                                    "cfg.network.layer": variant.split("-")[0],
                                    "cfg.network.depth": 2, "seed": seed, "step": step,
                                    "layer": layer, "norm_mean": 1.0 + spread * step / 200})
    return pd.DataFrame.from_records(records)


def test_stability_verdict_is_computed_for_whichever_layers_are_present():
    from linrnn_bench.harness.studies.stability import report as report
    from linrnn_bench.harness.studies.stability.report.findings import _finding, spread_families

    rng = np.random.default_rng(0)
    eight = lambda centre: tuple(centre * (1 + 0.1 * rng.standard_normal(8)))  # noqa: E731
    steady = (0.010, 0.011, 0.012, 0.013, 0.014, 0.015, 0.016, 0.017)
    # S5's seeds have RotRNN's spreads in another order: differences +-0.001 .. 0.007 that
    # sum to zero, so p = 1.
    trained = _trained_rows({"rotrnn": steady, "lru": eight(1.0),
                             "s5": steady[1::2] + steady[0::2], "lru-no-gamma": eight(2.1)})
    spread = report.spread_by_run(trained)
    cv = spread.set_index("run_id")["cv"]
    lru0 = spread.set_index("run_id").loc["lru-0"]
    values = 1.0 + trained.loc[trained["run_id"] == "lru-0", "norm_mean"].to_numpy()[::2] - 1.0
    assert cv["lru-0"] == pytest.approx(np.std(values) / np.mean(values))
    assert lru0["drift"] == pytest.approx(values[-1])
    finding = _finding(spread, "listops", "cpu", ())
    _, verdict, ablations = finding.lines
    assert "lowest S5" in verdict or "lowest RotRNN" in verdict
    # Eight seeds, three pairs: each LRU pair has p = 2/256, Holm 3x that: significant.
    assert "lower after Holm: RotRNN < LRU, S5 < LRU (stability_pairs_listops)." in verdict
    assert "RotRNN < S5" not in verdict and "S5 < RotRNN" not in verdict
    families = spread_families(spread)
    assert list(families["m"]) == [3, 3, 3] and (families["test"] == "exact sign-flip").all()
    assert np.isfinite(families["mdd_family"]).all() and families["effect"].notna().all()
    assert ablations.startswith("Ablations at depth 2: LRU, gamma off")
    # The same code says the opposite when the data do.
    flipped = _finding(report.spread_by_run(_trained_rows(
        {"rotrnn": eight(1.0), "lru": eight(0.015)})), "listops", "cpu", ())
    assert "lower after Holm: LRU < RotRNN" in flipped.lines[1]
    # Three seeds cannot reach 5% with the exact test, and the finding says so once.
    few = _finding(report.spread_by_run(_trained_rows(
        {"rotrnn": (0.01, 0.02, 0.015), "lru": (0.9, 1.0, 1.1)})), "listops", "cpu", ())
    assert few.lines[1].startswith("At n = 3 paired seeds no comparison below can be declared")
    assert "no pair decidable at this n" in few.lines[2]


def _claim_arrays(seeds: int, rotrnn_drift: float, lru_drift: float) -> dict:
    """Stationary norms ``(seeds, steps, layers)`` of 2-block networks whose log norm moves
    linearly through 5 evaluations by the given amount (plus a little per-seed noise)."""
    rng = np.random.default_rng(0)
    steps = np.array([0, 100, 200, 300, 400])
    out = {}
    for variant, drift in (("rotrnn", rotrnn_drift), ("lru", lru_drift)):
        slope = drift * (1 + 0.1 * rng.standard_normal((seeds, 1, 1)))
        norms = np.exp(slope * np.linspace(0, 1, 5)[None, :, None] + np.zeros((seeds, 5, 2)))
        out[2, variant] = {"norms": norms, "steps": steps, "seeds": list(range(seeds)),
                           "dropped": 0, "burn_in": 80}  # 20% of 400 steps: from step 100
    return out


@pytest.mark.parametrize("seeds, rotrnn, lru, expected", [
    (10, 0.1, 1.0, ": supported;"),
    (10, 1.0, 0.1, ": contradicted (RotRNN's drifts more);"),
    (5, 0.1, 1.0, ": undecidable at this n (smallest p 0.0625), the interval leaning towards "
                  "the claim;"),
])
def test_the_stability_verdict_on_the_papers_claim_reads_true_either_way(seeds, rotrnn, lru,
                                                                         expected):
    from linrnn_bench.harness.studies.stability.report import findings as stability_findings

    stationary = pd.DataFrame({"cfg.network.d_model": [32]})
    line = stability_findings.claim_verdict(_claim_arrays(seeds, rotrnn, lru), stationary,
                                            "listops", 400)
    assert line.startswith("The RotRNN paper's claim (its norm drifts less through training "
                           "than the LRU's; drift after the first 20% of training) on ListOps, "
                           f"depth 2, n = {seeds} paired")
    assert expected in line and line.endswith(
        "width 32, 400 steps (papers: 6 blocks, H = 128, 80,000 steps).")
    # Without either layer's runs there is no verdict to state.
    only = {k: v for k, v in _claim_arrays(seeds, rotrnn, lru).items() if k[1] == "rotrnn"}
    assert stability_findings.claim_verdict(only, stationary, "listops", 400) is None
