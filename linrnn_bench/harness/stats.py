"""The statistics every comparison in the report (and any study) rests on, on `scipy.stats`.

Each comparison reports its size, its uncertainty and its power (docs: EVIDENCE.md, section 1):
the difference with its 95 % interval, an effect size, the p-value of the test used (exact where
n is small), the correction across its family, and the **minimum detectable difference** (MDD):
the smallest true difference the test detects with 80 % power at this n and alpha.

- **Paired** (`paired`): models compared on the same seeds. The interval is the paired t
  interval (`scipy.stats.ttest_rel(...).confidence_interval`), the effect size d_z = mean
  difference / s.d. of the differences. At n <= `EXACT_MAX_N` the p-value is the exact sign-flip
  test (`scipy.stats.permutation_test`, ``permutation_type="samples"``, all 2^n flips); its
  smallest two-sided p is 2 / 2^n, so n = 3 (0.25) and n = 5 (0.0625) cannot reach 0.05 and
  their MDD is infinite. Above, the paired t-test. The paired t's MDD comes from the noncentral
  t (`scipy.stats.nct`); the exact test's from a fixed-seed simulation of normal differences.
- **Unpaired** (`unpaired`): Welch's t interval (`scipy.stats.ttest_ind`, ``equal_var=False``),
  Hedges' effect size, and as p the larger of Welch's p and a permutation p (exact when the
  number of splits is at most `PERMUTATION_RESAMPLES`, else that many random splits from a
  fixed seed): each alone fails calibration at some n and spread ratio, the larger does not.
  Its MDD is Welch's, simulated (the noncentral-t formula overstates the power at small n).
- **Families** (`holm`): Holm's step-down adjustment controls the family-wise error rate
  without assuming independence. A pair whose own p is below alpha / m is rejected by Holm
  whatever the other pairs do, so the MDD at alpha / m is what a family of m can detect.
- **Across tasks** (`across_tasks`): the Friedman test (`scipy.stats.friedmanchisquare`, with
  its tie correction) and pairwise Wilcoxon signed-rank tests (`scipy.stats.wilcoxon`) with
  Holm, the approach of Benavoli, Corani and Mangili (JMLR 2016) rather than a mean-rank post-hoc
  test. A claim must hold for every way of breaking exact ties, so each test is repeated for
  every tie-break and its largest p-value kept. With n tasks the smallest exact two-sided
  Wilcoxon p is 2 / 2^n: fewer than six tasks cannot support a pairwise claim at 0.05.
- **Not offered:** the percentile bootstrap. At the n the presets use (3, 5, 10 seeds) its 95 %
  intervals of a mean cover far less than 95 % (tests/test_calibration.py shows it), so
  `percentile_bootstrap` refuses any n below `BOOTSTRAP_MIN_N`.

Every procedure used here is simulated under the null, and at a stated true difference, at
n = 3, 5 and 10 by tests/test_calibration.py. Every function is a pure function of its
arguments (random draws come from fixed seeds), so a report stays a pure function of its store.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd
from scipy import optimize, stats

ALPHA = 0.05  # significance level of every test
LEVEL = 0.95  # confidence level of every interval
POWER = 0.80  # the power at which a minimum detectable difference is stated
EXACT_MAX_N = 10  # paired: the exact sign-flip test up to here (2^10 = 1024 flips), t above
PERMUTATION_RESAMPLES = 9_999  # unpaired: exact up to this many splits, else this many random
SEED = 0  # of every random draw (random splits, the exact test's power simulation)
MDD_DRAWS = 10_000  # simulated samples behind the exact sign-flip test's MDD
BOOTSTRAP_MIN_N = 30  # the percentile bootstrap under-covers below (calibration test)
MAX_TIE_BREAKS = 4_096  # tie-breaks enumerated before a claim is refused as unverifiable


class TooFewError(ValueError):
    """A procedure was asked for at an n where it is not calibrated."""


# --------------------------------------------------------------------------------------------
# One comparison


@dataclass(frozen=True)
class Comparison:
    """One comparison, first minus second, in the metric's own units.

    ``test`` names the test behind ``p``; ``smallest_p`` is the smallest p it can give at this
    n (0 for a t-test); ``mdd`` is the minimum detectable difference of that test (80 % power
    at ``alpha``; infinite when ``smallest_p`` > alpha), ``mdd_t`` that of the t-test on the
    same data (what a normal-theory test could detect); ``effect`` is d_z (paired) or Hedges' g
    (unpaired), ``sd`` the standard deviation the MDD scales (of the differences, or pooled).
    """

    n: int
    diff: float
    low: float
    high: float
    effect: float
    p: float
    p_t: float
    test: str
    smallest_p: float
    sd: float
    mdd: float
    mdd_t: float

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


_NAN_COMPARISON = dict(diff=math.nan, low=math.nan, high=math.nan, effect=math.nan, p=math.nan,
                       p_t=math.nan, smallest_p=math.nan, sd=math.nan, mdd=math.nan,
                       mdd_t=math.nan)


def _finite(values: Sequence[float] | np.ndarray | pd.Series) -> np.ndarray:
    x = pd.to_numeric(pd.Series(values), errors="coerce").to_numpy(dtype=float)
    return x[np.isfinite(x)]


def _mean_statistic(x: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(x, axis=axis)


def sign_flip_p(differences: np.ndarray, axis: int = -1) -> np.ndarray | float:
    """The exact two-sided sign-flip p-value of mean 0 (every one of the 2^n flips), along
    ``axis``. Valid when the differences are symmetric about 0 under the null."""
    d = np.asarray(differences, dtype=float)
    result = stats.permutation_test((d,), _mean_statistic, permutation_type="samples",
                                    n_resamples=np.inf, vectorized=True, axis=axis)
    return result.pvalue if np.ndim(result.pvalue) else float(result.pvalue)


def smallest_sign_flip_p(n: int) -> float:
    """The smallest two-sided p the exact sign-flip test can give with n pairs: 2 / 2^n."""
    return min(1.0, 2.0 / 2.0**n) if n >= 1 else 1.0


def paired(first: Sequence[float], second: Sequence[float], *, alpha: float = ALPHA,
           level: float = LEVEL, power: float = POWER) -> Comparison:
    """First minus second on the pairs where both are finite (e.g. two models' per-seed test
    accuracy on one task, seed by seed).

    Degenerate cases: with fewer than 2 pairs everything but ``n`` and ``diff`` is NaN; when
    every difference is equal (s.d. 0) the interval is that value, d_z is +-inf (NaN at 0),
    the t-test's p is NaN, and the exact test still gives its p.
    """
    a = pd.to_numeric(pd.Series(first), errors="coerce").to_numpy(dtype=float)
    b = pd.to_numeric(pd.Series(second), errors="coerce").to_numpy(dtype=float)
    both = np.isfinite(a) & np.isfinite(b)
    d = a[both] - b[both]
    n = int(d.size)
    exact = n <= EXACT_MAX_N
    test = "exact sign-flip" if exact else "paired t"
    if n < 2:
        return Comparison(n=n, test=test, **{**_NAN_COMPARISON,
                                             "diff": float(d.mean()) if n else math.nan})
    mean, sd = float(d.mean()), float(d.std(ddof=1))
    if sd == 0.0:
        low = high = mean
        effect = math.nan if mean == 0.0 else math.copysign(math.inf, mean)
        p_t = math.nan
    else:
        result = stats.ttest_rel(a[both], b[both])
        interval = result.confidence_interval(level)
        low, high, p_t = float(interval.low), float(interval.high), float(result.pvalue)
        effect = mean / sd
    mdd_t = paired_t_mdd(n, alpha, power) * sd
    if exact:
        p = float(sign_flip_p(d))
        smallest = smallest_sign_flip_p(n)
        mdd = sign_flip_mdd(n, alpha, power) * sd
    else:
        p, smallest, mdd = p_t, 0.0, mdd_t
    return Comparison(n=n, diff=mean, low=low, high=high, effect=effect, p=p, p_t=p_t,
                      test=test, smallest_p=smallest, sd=sd, mdd=mdd, mdd_t=mdd_t)


def _difference_of_means(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(x, axis=axis) - np.mean(y, axis=axis)


def permutation_p(first: np.ndarray, second: np.ndarray, axis: int = -1) -> np.ndarray | float:
    """Two-sided permutation p-value of equal means for two independent groups along ``axis``:
    exact over every split when there are at most `PERMUTATION_RESAMPLES`, else that many
    random splits drawn from `SEED` (p = (b + 1) / (R + 1), still a valid test)."""
    result = stats.permutation_test(
        (np.asarray(first, dtype=float), np.asarray(second, dtype=float)), _difference_of_means,
        permutation_type="independent", n_resamples=PERMUTATION_RESAMPLES, vectorized=True,
        axis=axis, rng=np.random.default_rng(SEED))
    return result.pvalue if np.ndim(result.pvalue) else float(result.pvalue)


def smallest_permutation_p(n1: int, n2: int) -> float:
    """The smallest two-sided p an exact permutation test of two groups can give: 2 over the
    number of splits (at most 1), or 1 / (R + 1) when the splits are sampled."""
    splits = math.comb(n1 + n2, n1)
    if splits > PERMUTATION_RESAMPLES:
        return 1.0 / (PERMUTATION_RESAMPLES + 1)
    return min(1.0, 2.0 / splits)


def unpaired(first: Sequence[float], second: Sequence[float], *, alpha: float = ALPHA,
             level: float = LEVEL, power: float = POWER) -> Comparison:
    """First minus second for two independent groups (their finite values): Welch's interval,
    Hedges' g (difference over the pooled s.d., small-sample corrected), and as ``p`` the larger
    of Welch's p and the permutation p. Each alone fails calibration somewhere the presets go:
    the permutation test is exact only when the groups' spreads are equal (at 5 against 5 with
    a 2:1 spread it rejects 5.8 % of true nulls), Welch's t is approximate at 3 against 3; the
    larger p rejects only when both do. The MDD is Welch's (`welch_mdd`), infinite where the
    permutation test cannot reach ``alpha``."""
    a, b = _finite(first), _finite(second)
    n1, n2 = int(a.size), int(b.size)
    n = n1 + n2
    exact = math.comb(n, n1) <= PERMUTATION_RESAMPLES
    test = "Welch t and exact permutation" if exact else "Welch t and permutation"
    if n1 < 2 or n2 < 2:
        diff = float(a.mean() - b.mean()) if n1 and n2 else math.nan
        return Comparison(n=n, test=test, **{**_NAN_COMPARISON, "diff": diff})
    diff = float(a.mean() - b.mean())
    s1, s2 = float(a.std(ddof=1)), float(b.std(ddof=1))
    pooled = math.sqrt(((n1 - 1) * s1**2 + (n2 - 1) * s2**2) / (n - 2))
    if s1 == 0.0 and s2 == 0.0:
        low = high = diff
        p_t = math.nan
        effect = math.nan if diff == 0.0 else math.copysign(math.inf, diff)
    else:
        result = stats.ttest_ind(a, b, equal_var=False)
        interval = result.confidence_interval(level)
        low, high, p_t = float(interval.low), float(interval.high), float(result.pvalue)
        effect = diff / pooled * (1.0 - 3.0 / (4.0 * n - 9.0))
    p_perm = float(permutation_p(a, b))
    p = max(p_perm, p_t) if math.isfinite(p_t) else p_perm
    smallest = smallest_permutation_p(n1, n2)
    mdd_t = welch_mdd(n1, n2, s1, s2, alpha, power)
    mdd = mdd_t if smallest <= alpha else math.inf
    return Comparison(n=n, diff=diff, low=low, high=high, effect=effect, p=p, p_t=p_t,
                      test=test, smallest_p=smallest, sd=pooled, mdd=mdd, mdd_t=mdd_t)


def mean_interval(values: Sequence[float], level: float = LEVEL) -> tuple[float, float, float, int]:
    """``(mean, low, high, n)``: the t interval of the mean of the finite values
    (`scipy.stats.ttest_1samp(...).confidence_interval`); NaN bounds below 2 values, the mean
    itself when every value is equal."""
    x = _finite(values)
    n = int(x.size)
    if n < 2:
        return (float(x.mean()) if n else math.nan), math.nan, math.nan, n
    mean = float(x.mean())
    if float(x.std(ddof=1)) == 0.0:
        return mean, mean, mean, n
    interval = stats.ttest_1samp(x, 0.0).confidence_interval(level)
    return mean, float(interval.low), float(interval.high), n


def nonnegative_interval(values: Sequence[float], level: float = LEVEL
                         ) -> tuple[float, float, float, int]:
    """`mean_interval` of a quantity that cannot be negative (a standard deviation, an RMS, a
    CV, an MSE), its lower bound raised to 0 where the t interval crosses it. Cutting off
    values the mean cannot take loses no coverage of it (calibrated at n = 5 and 10 by
    tests/test_calibration.py)."""
    mean, low, high, n = mean_interval(values, level)
    return mean, (max(low, 0.0) if math.isfinite(low) else low), high, n


def percentile_bootstrap(values: Sequence[float], statistic=np.mean, *, level: float = LEVEL,
                         resamples: int = 10_000) -> tuple[float, float]:
    """The percentile bootstrap interval (`scipy.stats.bootstrap`) of ``statistic``, from a
    fixed seed. Refused (`TooFewError`) below `BOOTSTRAP_MIN_N` values, where it under-covers."""
    x = _finite(values)
    if x.size < BOOTSTRAP_MIN_N:
        raise TooFewError(
            f"a percentile bootstrap needs at least {BOOTSTRAP_MIN_N} values (got {x.size}): "
            "below that its intervals cover less than they claim; use mean_interval")
    result = stats.bootstrap((x,), lambda s, axis=-1: statistic(s, axis=axis),
                             confidence_level=level, n_resamples=resamples, method="percentile",
                             vectorized=True, rng=np.random.default_rng(SEED))
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


# --------------------------------------------------------------------------------------------
# Minimum detectable differences (in units of the standard deviation; multiply by it)


def _solve_effect(power_at, power: float) -> float:
    """The effect at which ``power_at`` (increasing) reaches ``power``. A NaN power (scipy's
    noncentral t far in its tail, where the power is 1) counts as 1."""
    raw = power_at

    def power_at(effect: float) -> float:
        value = raw(effect)
        return 1.0 if math.isnan(value) else value

    high = 1.0
    while power_at(high) < power:
        high *= 2.0
        if high > 1e6:
            return math.inf
    return float(optimize.brentq(lambda e: power_at(e) - power, 0.0, high, xtol=1e-4))


@functools.lru_cache(maxsize=None)
def paired_t_mdd(n: int, alpha: float = ALPHA, power: float = POWER) -> float:
    """The standardised effect d_z that the two-sided paired t-test at ``alpha`` detects with
    probability ``power`` from n pairs: under a true d_z the statistic is noncentral t with
    n - 1 degrees of freedom and noncentrality d_z sqrt(n). NaN below n = 2."""
    if n < 2:
        return math.nan
    df = n - 1
    critical = float(stats.t.ppf(1.0 - alpha / 2.0, df))

    def power_at(effect: float) -> float:
        nc = effect * math.sqrt(n)
        return float(stats.nct.sf(critical, df, nc) + stats.nct.cdf(-critical, df, nc))

    return _solve_effect(power_at, power)


def welch_mdd(n1: int, n2: int, sd1: float, sd2: float, alpha: float = ALPHA,
              power: float = POWER) -> float:
    """The difference of means Welch's two-sided test at ``alpha`` detects with probability
    ``power``, in the data's units, for normal groups with these standard deviations. Simulated
    (`MDD_DRAWS` draws from `SEED`, the same for every difference): the noncentral t with the
    Welch-Satterthwaite degrees of freedom overstates the power at small n (it ignores that the
    test estimates them; 0.70 instead of 0.80 at 3 against 3). NaN below 2 per group."""
    if n1 < 2 or n2 < 2:
        return math.nan
    se = math.sqrt(sd1**2 / n1 + sd2**2 / n2)
    if se == 0.0:
        return 0.0
    return _welch_mdd_in_se(n1, n2, round(sd2 / se, 6), alpha, power) * se


@functools.lru_cache(maxsize=None)
def _welch_mdd_in_se(n1: int, n2: int, share: float, alpha: float, power: float) -> float:
    """`welch_mdd` in units of the standard error, for the second group's s.d. ``share`` (in
    standard errors; the first group's follows)."""
    sd2 = share
    sd1 = math.sqrt(max(n1 * (1.0 - sd2**2 / n2), 0.0))
    rng = np.random.default_rng(SEED)
    first, second = rng.standard_normal((MDD_DRAWS, n1)) * sd1, rng.standard_normal(
        (MDD_DRAWS, n2)) * sd2

    def power_at(effect: float) -> float:
        p = stats.ttest_ind(first + effect, second, equal_var=False, axis=-1).pvalue
        return float(np.mean(p <= alpha))

    return _solve_effect(power_at, power)


def sign_patterns(n: int) -> np.ndarray:
    """Every one of the 2^n sign vectors, ``(2^n, n)`` of +-1."""
    return 1.0 - 2.0 * ((np.arange(2**n)[:, None] >> np.arange(n)[None, :]) & 1)


def sign_flip_p_matrix(differences: np.ndarray) -> np.ndarray:
    """The exact sign-flip p-values of many samples at once, ``(draws, n) -> (draws,)``, by
    enumerating the sign patterns as a matrix (the same p as `sign_flip_p`, for simulation).
    A flip counts as extreme when its |sum| reaches the observed one up to rounding."""
    d = np.asarray(differences, dtype=float)
    patterns = sign_patterns(d.shape[-1])
    observed = np.abs(d.sum(axis=-1))
    out = np.empty(d.shape[0])
    for start in range(0, d.shape[0], 2_000):
        flipped = np.abs(d[start:start + 2_000] @ patterns.T)
        tolerance = 1e-12 * np.maximum(1.0, observed[start:start + 2_000, None])
        out[start:start + 2_000] = np.mean(
            flipped >= observed[start:start + 2_000, None] - tolerance, axis=-1)
    return out


@functools.lru_cache(maxsize=None)
def sign_flip_mdd(n: int, alpha: float = ALPHA, power: float = POWER) -> float:
    """The standardised effect d_z the exact two-sided sign-flip test at ``alpha`` detects with
    probability ``power`` from n normal differences; infinite when 2 / 2^n > alpha (the test
    cannot reject at all). Simulated: `MDD_DRAWS` standard normal samples from `SEED`, shifted
    by the effect (the same draws for every effect), their exact p-values by enumeration: a
    flipped sum of z + e is (flipped sum of z) + e (sum of the signs), so one product serves
    every effect."""
    if n < 2:
        return math.nan
    if smallest_sign_flip_p(n) > alpha:
        return math.inf
    noise = np.random.default_rng(SEED).standard_normal((MDD_DRAWS, n))
    patterns = sign_patterns(n)
    flipped, shift = noise @ patterns.T, patterns.sum(axis=1)
    observed = noise.sum(axis=1)

    def power_at(effect: float) -> float:
        level = np.abs(observed + effect * n)[:, None]
        extreme = np.abs(flipped + effect * shift) >= level - 1e-12 * np.maximum(1.0, level)
        return float(np.mean(np.mean(extreme, axis=1) <= alpha))

    return _solve_effect(power_at, power)


def mdd_text(c: Comparison, alpha: float = ALPHA, units: str = "") -> str:
    """The MDD of a comparison in words, or why there is none."""
    if math.isnan(c.mdd):
        return "no detectable difference can be stated (fewer than 2 pairs)"
    if math.isinf(c.mdd):
        what = "an exact test" if c.test.startswith("exact") else "this test"
        return (f"n = {c.n} cannot reach alpha = {alpha:g} with {what} (smallest p "
                f"{c.smallest_p:.3g})")
    return f"{c.mdd:.3g}{units}"


# --------------------------------------------------------------------------------------------
# Families


def holm(pvalues: Sequence[float] | np.ndarray) -> np.ndarray:
    """Holm's step-down adjustment along the last axis (NaN stays NaN and is not counted).

    Sorted ascending, the i-th of m p-values (0-based) becomes max_{j <= i} min(1, (m - j) p_j);
    a hypothesis is rejected at level alpha when its adjusted p-value is at most alpha.
    (`scipy.stats.false_discovery_control` is Benjamini-Hochberg, a different error rate.)
    """
    p = np.asarray(pvalues, dtype=float)
    order = np.argsort(p, axis=-1, kind="stable")  # NaN sort last
    ranked = np.take_along_axis(p, order, axis=-1)
    m = np.sum(np.isfinite(p), axis=-1, keepdims=True)
    factor = m - np.arange(p.shape[-1])
    adjusted = np.minimum(1.0, np.maximum.accumulate(np.where(
        np.isfinite(ranked), factor * ranked, -np.inf), axis=-1))
    adjusted = np.where(np.isfinite(ranked), adjusted, np.nan)
    out = np.empty_like(adjusted)
    np.put_along_axis(out, order, adjusted, axis=-1)
    return out


def pairwise(scores: pd.DataFrame, higher_is_better: bool, *, alpha: float = ALPHA
             ) -> pd.DataFrame:
    """Every pair of columns of ``scores`` (one row per seed, NaN where a run did not finish)
    compared with `paired`, Holm-adjusted over the pairs (one family).

    Returns one row per pair: ``first``, ``second``, the `Comparison` fields, ``m`` (the
    family's size), ``p_holm``, ``significant`` (p_holm <= alpha), ``better`` (the model a
    significant difference favours, else ""), ``mdd_family``: the MDD of the pair's test at
    alpha / m, where a pair is rejected by Holm whatever the others do (infinite where that
    test cannot reach alpha / m at this n), and ``mdd_t_family``: that of a paired t-test at
    alpha / m (what a normal-theory test at the family's level could detect).
    """
    records = []
    for a, b in itertools.combinations(scores.columns, 2):
        records.append({"first": a, "second": b, **paired(scores[a], scores[b],
                                                          alpha=alpha).as_dict()})
    columns = ["first", "second", *Comparison.__dataclass_fields__]
    frame = pd.DataFrame.from_records(records, columns=columns)
    m = int(np.isfinite(frame["p"].to_numpy(dtype=float)).sum())
    frame["m"] = m
    frame["p_holm"] = holm(frame["p"].to_numpy(dtype=float)) if len(frame) else []
    frame["significant"] = frame["p_holm"] <= alpha
    sign = 1.0 if higher_is_better else -1.0
    favours = np.where(sign * frame["diff"] > 0, frame["first"], frame["second"])
    frame["better"] = np.where(frame["significant"], favours, "")
    family_alpha = alpha / max(m, 1)
    frame["mdd_family"] = [
        math.nan if row.n < 2 else (
            (sign_flip_mdd(row.n, family_alpha) if row.test == "exact sign-flip"
             else paired_t_mdd(row.n, family_alpha)) * row.sd)
        for row in frame.itertuples()]
    frame["mdd_t_family"] = [math.nan if row.n < 2 else paired_t_mdd(row.n, family_alpha) * row.sd
                             for row in frame.itertuples()]
    return frame


# --------------------------------------------------------------------------------------------
# Across tasks


def tie_breaks(scores: np.ndarray) -> Iterator[np.ndarray]:
    """Every strict ranking consistent with ``scores`` ``(tasks, models)``: per task, each
    order of its exactly tied models. Yields ``(tasks, models)`` arrays of ranks 1..k
    (1 = the largest score)."""
    per_task = []
    for row in np.asarray(scores, dtype=float):
        groups: dict[float, list[int]] = {}
        for j, v in enumerate(row):
            groups.setdefault(v, []).append(j)
        base = stats.rankdata(-row, method="min")
        options = []
        for perms in itertools.product(*(itertools.permutations(g) for g in groups.values())):
            ranks = np.empty(row.size)
            for group in perms:
                for offset, j in enumerate(group):
                    ranks[j] = base[j] + offset
            options.append(ranks)
        per_task.append(options)
    for choice in itertools.product(*per_task):
        yield np.stack(choice)


def count_tie_breaks(scores: np.ndarray) -> int:
    """How many strict rankings `tie_breaks` yields."""
    total = 1
    for row in np.asarray(scores, dtype=float):
        _, counts = np.unique(row, return_counts=True)
        total *= math.prod(math.factorial(int(c)) for c in counts)
    return total


def smallest_wilcoxon_p(n: int) -> float:
    """The smallest two-sided p of the exact Wilcoxon signed-rank test on n non-zero
    differences: 2 / 2^n."""
    return smallest_sign_flip_p(n)


def _wilcoxon_worst_p(d: np.ndarray) -> float:
    """The largest two-sided Wilcoxon signed-rank p over every way of breaking the exact ties
    (zero differences) to either side: each zero becomes +-eps, below every non-zero |d|."""
    d = np.asarray(d, dtype=float)
    zeros = np.flatnonzero(d == 0.0)
    if d.size == 0:
        return math.nan
    nonzero = np.abs(d[d != 0.0])
    eps = (nonzero.min() if nonzero.size else 1.0) / 2.0
    worst = 0.0
    for signs in itertools.product((-1.0, 1.0), repeat=zeros.size):
        broken = d.copy()
        broken[zeros] = eps * np.asarray(signs)
        worst = max(worst, float(stats.wilcoxon(broken).pvalue))
    return worst


def across_tasks(scores: pd.DataFrame, higher_is_better: dict[str, bool], *,
                 alpha: float = ALPHA) -> dict[str, object]:
    """Ranks and tests across tasks from each (task, model)'s mean score.

    Arguments:
        scores: one row per task, one column per model (every cell finite).
        higher_is_better: per task, whether a larger score is better.

    Returns a dict: ``ranks`` (per task, 1 = best, ties share the mean rank), ``chi2``/``p``
    (Friedman, tie-corrected, from scipy), ``p_worst``/``p_best`` (Friedman's p over every
    tie-break), ``tie_breaks`` (how many), ``pairs`` (one row per pair: the median and mean of
    the oriented differences, ``p`` = the largest Wilcoxon p over tie-breaks, ``p_holm``,
    ``significant``, ``better``), ``smallest_p`` (of the exact Wilcoxon test at this number of
    tasks) and ``weak`` (fewer than five tasks).
    """
    sign = np.array([1.0 if higher_is_better[t] else -1.0 for t in scores.index])
    oriented = scores.to_numpy(dtype=float) * sign[:, None]
    n_tasks, k = oriented.shape
    ranks = pd.DataFrame(np.vstack([stats.rankdata(-row, method="average") for row in oriented]),
                         index=scores.index, columns=scores.columns)
    out: dict[str, object] = {"ranks": ranks, "n_tasks": n_tasks, "k": k,
                              "smallest_p": smallest_wilcoxon_p(n_tasks), "weak": n_tasks < 5}
    out.update(chi2=math.nan, p=math.nan, p_worst=math.nan, p_best=math.nan,
               tie_breaks=count_tie_breaks(oriented), pairs=pd.DataFrame())
    if n_tasks < 2 or k < 2:
        return out
    if k >= 3 and not np.all(oriented == oriented[:, :1]):
        # Friedman needs three models; with every model tied on every task it is undefined.
        result = stats.friedmanchisquare(*oriented.T)
        out.update(chi2=float(result.statistic), p=float(result.pvalue))
        if out["tie_breaks"] <= MAX_TIE_BREAKS:
            ps = [float(stats.friedmanchisquare(*(-r).T).pvalue) for r in tie_breaks(oriented)]
            out.update(p_worst=max(ps), p_best=min(ps))
    records = []
    for i, j in itertools.combinations(range(k), 2):
        d = oriented[:, i] - oriented[:, j]
        records.append({"first": scores.columns[i], "second": scores.columns[j],
                        "n": n_tasks, "median": float(np.median(d)), "mean": float(d.mean()),
                        "ties": int(np.sum(d == 0.0)), "p": _wilcoxon_worst_p(d)})
    pairs = pd.DataFrame.from_records(records)
    pairs["p_holm"] = holm(pairs["p"].to_numpy(dtype=float))
    pairs["significant"] = pairs["p_holm"] <= alpha
    pairs["better"] = np.where(pairs["significant"],
                               np.where(pairs["median"] > 0, pairs["first"], pairs["second"]),
                               "")
    out["pairs"] = pairs
    return out
