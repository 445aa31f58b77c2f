"""Calibration of every test and interval the report uses (`harness.stats`), at the n the
presets use (3, 5 and 10 seeds; paired and unpaired), by simulation.

Under no true difference (10,000 draws from a fixed seed) a test's false-positive rate must be
at most alpha and an interval's coverage at least 95 %, each within Monte Carlo error (three
binomial standard errors); under a stated true difference, a test's power must be what the
module's minimum detectable difference claims. Everything is vectorised: scipy's tests are
called once on all draws along ``axis``, and exact permutation tests enumerate their
assignments as a matrix (the module's own `sign_flip_p_matrix`; each is checked against the
scipy call the report makes on a few draws). A procedure that fails here is not offered at that
n: the percentile bootstrap is refused below `BOOTSTRAP_MIN_N`, and its failure is asserted.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from linrnn_bench.harness import stats as inference

DRAWS = 10_000
ALPHA = inference.ALPHA
SEED = 20260521
NS = (3, 5, 10)


def _fpr_bound(alpha: float = ALPHA, draws: int = DRAWS) -> float:
    return alpha + 3.0 * math.sqrt(alpha * (1.0 - alpha) / draws)


def _coverage_bound(level: float = inference.LEVEL, draws: int = DRAWS) -> float:
    return level - 3.0 * math.sqrt(level * (1.0 - level) / draws)


def _rng(*key: int) -> np.random.Generator:
    return np.random.default_rng([SEED, *key])


def _paired_draws(n: int, shift: float = 0.0, key: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``(draws, n)`` first and second scores sharing a per-seed component (a seed's data
    order helps or hurts both models), first shifted by ``shift`` standard deviations of the
    differences."""
    rng = _rng(n, key)
    common = rng.normal(0.0, 3.0, (DRAWS, n))
    noise = rng.normal(0.0, math.sqrt(0.5), (2, DRAWS, n))  # differences have s.d. 1
    return common + noise[0] + shift, common + noise[1]


@pytest.mark.parametrize("n", NS)
def test_paired_t_interval_and_test_hold_their_level(n):
    a, b = _paired_draws(n)
    result = stats.ttest_rel(a, b, axis=-1)
    ci = result.confidence_interval(inference.LEVEL)
    assert np.mean(result.pvalue <= ALPHA) <= _fpr_bound()
    assert np.mean((ci.low <= 0.0) & (0.0 <= ci.high)) >= _coverage_bound()
    # What is calibrated is what the report computes: the module's comparison, draw by draw.
    for i in range(5):
        c = inference.paired(a[i], b[i])
        assert (c.low, c.high, c.p_t) == pytest.approx((ci.low[i], ci.high[i],
                                                        result.pvalue[i]))
    # The one-sample t interval (the stability table's mean spread) is the same interval.
    one = stats.ttest_1samp(a - b, 0.0, axis=-1).confidence_interval()
    assert np.allclose(one.low, ci.low) and np.allclose(one.high, ci.high)


@pytest.mark.parametrize("n", NS)
def test_paired_t_power_is_what_its_mdd_claims(n):
    effect = inference.paired_t_mdd(n)
    a, b = _paired_draws(n, shift=effect, key=1)
    power = np.mean(stats.ttest_rel(a, b, axis=-1).pvalue <= ALPHA)
    assert power == pytest.approx(inference.POWER, abs=3.0 * math.sqrt(0.16 / DRAWS))


@pytest.mark.parametrize("n", NS)
def test_exact_sign_flip_holds_its_level(n):
    a, b = _paired_draws(n, key=2)
    p = inference.sign_flip_p_matrix(a - b)
    assert np.mean(p <= ALPHA) <= _fpr_bound()
    # Exact under any symmetric null, heavy tails included.
    heavy = _rng(n, 3).standard_t(2, (DRAWS, n))
    assert np.mean(inference.sign_flip_p_matrix(heavy) <= ALPHA) <= _fpr_bound()
    if inference.smallest_sign_flip_p(n) > ALPHA:
        assert p.min() == pytest.approx(inference.smallest_sign_flip_p(n))  # cannot reject
    # The matrix enumeration is the scipy test the report calls.
    assert np.allclose(inference.sign_flip_p(a[:50] - b[:50]), p[:50])
    assert inference.paired(a[0], b[0]).p == pytest.approx(p[0])


@pytest.mark.parametrize("n", NS)
def test_exact_sign_flip_power_is_what_its_mdd_claims(n):
    effect = inference.sign_flip_mdd(n)
    if inference.smallest_sign_flip_p(n) > ALPHA:
        # n = 3 and 5 cannot reach alpha: no effect, however large, is detected.
        assert math.isinf(effect)
        a, b = _paired_draws(n, shift=100.0, key=4)
        assert np.mean(inference.sign_flip_p_matrix(a - b) <= ALPHA) == 0.0
        return
    a, b = _paired_draws(n, shift=effect, key=4)
    power = np.mean(inference.sign_flip_p_matrix(a - b) <= ALPHA)
    # Both the claim (MDD_DRAWS draws) and this check carry Monte Carlo error.
    tolerance = 3.0 * math.sqrt(0.16 / DRAWS + 0.16 / inference.MDD_DRAWS)
    assert power == pytest.approx(inference.POWER, abs=tolerance)


@pytest.mark.parametrize("n", NS)
def test_holm_controls_the_family_of_a_task(n):
    """Four models, six pairs, no true difference: Holm over the exact tests (the report's
    family per task) rejects any pair in at most alpha of the draws."""
    rng = _rng(n, 5)
    scores = rng.normal(0.0, 3.0, (DRAWS, n))[None] + rng.normal(0.0, 1.0, (4, DRAWS, n))
    p = np.stack([inference.sign_flip_p_matrix(scores[i] - scores[j])
                  for i, j in itertools.combinations(range(4), 2)], axis=-1)
    assert np.mean(np.any(inference.holm(p) <= ALPHA, axis=-1)) <= _fpr_bound()


def _unpaired_draws(n: int, sd2: float, shift: float = 0.0, key: int = 0
                    ) -> tuple[np.ndarray, np.ndarray]:
    rng = _rng(n, 10 + key)
    return rng.normal(shift, 1.0, (DRAWS, n)), rng.normal(0.0, sd2, (DRAWS, n))


@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("sd2", (1.0, 2.0))
def test_welch_interval_and_test_hold_their_level(n, sd2):
    """Equal spreads and 2:1 (at 3 against 3 with 4:1, Welch's test is slightly liberal)."""
    a, b = _unpaired_draws(n, sd2)
    result = stats.ttest_ind(a, b, equal_var=False, axis=-1)
    ci = result.confidence_interval(inference.LEVEL)
    assert np.mean(result.pvalue <= ALPHA) <= _fpr_bound()
    assert np.mean((ci.low <= 0.0) & (0.0 <= ci.high)) >= _coverage_bound()
    c = inference.unpaired(a[0], b[0])
    assert (c.low, c.high, c.p_t) == pytest.approx((ci.low[0], ci.high[0], result.pvalue[0]))


@pytest.mark.parametrize("n", NS)
def test_welch_power_is_what_its_mdd_claims(n):
    mdd = inference.welch_mdd(n, n, 1.0, 2.0)
    a, b = _unpaired_draws(n, 2.0, shift=mdd, key=1)
    power = np.mean(stats.ttest_ind(a, b, equal_var=False, axis=-1).pvalue <= ALPHA)
    tolerance = 3.0 * math.sqrt(0.16 / DRAWS + 0.16 / inference.MDD_DRAWS)
    assert power == pytest.approx(inference.POWER, abs=tolerance)


def _splits(n: int, limit: int, rng: np.random.Generator) -> np.ndarray:
    """Group labels (+1 first, -1 second) of every split of 2n values into two groups of n, or
    of ``limit`` random splits when there are more (the module's randomised test)."""
    if math.comb(2 * n, n) <= limit:
        rows = []
        for first in itertools.combinations(range(2 * n), n):
            row = -np.ones(2 * n)
            row[list(first)] = 1.0
            rows.append(row)
        return np.array(rows)
    rows = np.tile(np.r_[np.ones(n), -np.ones(n)], (limit, 1))
    return rng.permuted(rows, axis=1)


@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("sd2", (1.0, 2.0))
def test_unpaired_test_holds_its_level(n, sd2):
    """The unpaired p: the larger of Welch's and the permutation p (exact over every split at
    3 and 5 per group, 999 random splits at 10, as the module's randomised test). The
    permutation test alone is exact only at equal spreads (at 5 against 5 with a 2:1 spread it
    rejects about 5.8 %), hence the larger of the two."""
    a, b = _unpaired_draws(n, sd2, key=2)
    pooled = np.concatenate([a, b], axis=1)
    splits = _splits(n, 999, _rng(n, 6))
    statistic = np.abs(pooled @ splits.T) / n  # |difference of means| of every split
    observed = np.abs(a.mean(axis=1) - b.mean(axis=1))[:, None]
    extreme = np.sum(statistic >= observed - 1e-12, axis=1)
    exact = math.comb(2 * n, n) <= 999
    # Exact: a fraction of all splits (the observed is one). Random: (b + 1) / (R + 1).
    p_perm = extreme / len(splits) if exact else (extreme + 1) / (len(splits) + 1)
    if sd2 == 1.0:
        assert np.mean(p_perm <= ALPHA) <= _fpr_bound()  # exchangeable: exact
    p = np.maximum(p_perm, stats.ttest_ind(a, b, equal_var=False, axis=-1).pvalue)
    assert np.mean(p <= ALPHA) <= _fpr_bound()
    if exact:
        assert np.allclose(inference.permutation_p(a[:20], b[:20]), p_perm[:20])
        assert p_perm.min() >= inference.smallest_permutation_p(n, n) - 1e-12
        assert inference.unpaired(a[0], b[0]).p == pytest.approx(p[0])


@pytest.mark.parametrize("n", NS)
def test_wilcoxon_across_tasks_holds_its_level(n):
    """The signed-rank test across n tasks (exact, as the report calls it)."""
    d = _rng(n, 7).normal(size=(DRAWS, n))
    p = stats.wilcoxon(d, axis=-1, method="exact").pvalue
    assert np.mean(p <= ALPHA) <= _fpr_bound()
    assert p.min() >= inference.smallest_wilcoxon_p(n) - 1e-12


@pytest.mark.parametrize("n", NS)
def test_friedman_holds_its_level(n):
    """Four models over n tasks, no true difference: scipy's chi-squared p-value."""
    scores = _rng(n, 8).normal(size=(DRAWS, n, 4))
    p = stats.friedmanchisquare(*np.moveaxis(scores, -1, 0), axis=-1).pvalue
    assert np.mean(p <= ALPHA) <= _fpr_bound()


@pytest.mark.parametrize("n", NS)
def test_percentile_bootstrap_undercovers_and_is_refused(n):
    """Why the module refuses it: at 3, 5 and 10 values the 95 % percentile interval of a mean
    covers well under 95 % (resample means of all draws at once, from resampling counts)."""
    x = _rng(n, 9).normal(size=(DRAWS, n))
    rng = _rng(n, 10)
    counts = np.stack([np.bincount(rng.integers(0, n, n), minlength=n) for _ in range(999)])
    means = x @ counts.T / n
    low, high = np.quantile(means, [0.025, 0.975], axis=1)
    coverage = np.mean((low <= 0.0) & (0.0 <= high))
    assert coverage < _coverage_bound()
    assert n < inference.BOOTSTRAP_MIN_N
    with pytest.raises(inference.TooFewError):
        inference.percentile_bootstrap(x[0])


@pytest.mark.parametrize("n", (5, 10))
def test_an_interval_of_a_nonnegative_quantity_stays_on_its_support_and_covers(n):
    # Per seed, a spread (the s.d. of ten layers' log norms, as the stability components are):
    # positive and skewed. Its mean over n seeds gets the t interval with the lower bound
    # raised to 0 (`nonnegative_interval`): never below 0, and covering the true mean.
    rng = _rng(n, 7)
    spreads = rng.standard_normal((DRAWS, n, 10)).std(axis=-1, ddof=1)
    truth = float(_rng(n, 8).standard_normal((200_000, 10)).std(axis=-1, ddof=1).mean())
    mean, t_sd = spreads.mean(axis=1), spreads.std(axis=1, ddof=1)
    half = stats.t.ppf(0.975, n - 1) * t_sd / math.sqrt(n)
    low, high = np.maximum(mean - half, 0.0), mean + half
    assert np.mean((low <= truth) & (truth <= high)) >= _coverage_bound()
    # The module's interval, draw by draw on a few draws; and a sample whose t interval crosses
    # 0 stays on the support.
    for row in spreads[:20]:
        got = inference.nonnegative_interval(row)
        ref = stats.ttest_1samp(row, 0.0).confidence_interval(inference.LEVEL)
        assert got[1:3] == pytest.approx((max(ref.low, 0.0), ref.high))
    _, low_bound, _, _ = inference.nonnegative_interval([0.001, 0.002, 0.5, 0.001, 0.003])
    assert low_bound == 0.0
