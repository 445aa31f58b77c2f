"""The statistics the report's comparisons rest on, in one place, each with the test it names.

Every function is a pure function of its arguments (bootstraps draw from a generator seeded by
the caller), so a report stays a pure function of the store.

- Within a task, models are compared on the same seeds (a seed fixes the data order for every
  model), so a difference is tested on the per-seed differences: a paired t-test and its t
  interval (`paired_differences`), the p-values of a task's pairs adjusted by Holm's step-down
  method (`holm`), which controls the family-wise error rate without assuming independence.
- A model beats a task's trivial baseline when its mean is better by more than ``z`` standard
  errors (`beats_baseline`).
- Across tasks, models are ranked per task and the ranks averaged; the Friedman test asks
  whether any average ranks differ, and the Nemenyi critical difference says which pairs do
  (Demsar 2006, "Statistical comparisons of classifiers over multiple data sets", JMLR 7).
- A statistic over few seeds gets a percentile bootstrap interval (`bootstrap_ci`), stated
  with its number of seeds: with three seeds it is coarse.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import pandas as pd
from scipy import stats

LEVEL = 0.95  # confidence level of every interval in the report
ALPHA = 0.05  # significance level of every test in the report


def mean_se(values: Sequence[float] | pd.Series | np.ndarray) -> tuple[float, float, int]:
    """``(mean, standard error, n)`` of the finite values; se is NaN when n < 2.

        mean = (1/n) sum_i x_i,    se = s / sqrt(n),    s^2 = (1/(n-1)) sum_i (x_i - mean)^2
    """
    x = pd.to_numeric(pd.Series(values), errors="coerce").to_numpy(dtype=float)
    x = x[np.isfinite(x)]
    n = int(x.size)
    if n == 0:
        return math.nan, math.nan, 0
    mean = float(x.mean())
    se = float(x.std(ddof=1) / math.sqrt(n)) if n > 1 else math.nan
    return mean, se, n


def t_interval(x: np.ndarray, level: float = LEVEL) -> tuple[float, float, float, float]:
    """``(mean, low, high, p)``: the t interval of the mean of ``x`` and the two-sided p-value
    of the one-sample t-test of mean 0. NaN where fewer than 2 values; where every value is
    equal, the interval is that value and p is 1 (0 differences) or 0 (a constant non-zero
    difference, which no seed contradicts)."""
    x = np.asarray(x, dtype=float)
    x = x[np.isfinite(x)]
    n = x.size
    if n < 2:
        mean = float(x.mean()) if n else math.nan
        return mean, math.nan, math.nan, math.nan
    mean, sd = float(x.mean()), float(x.std(ddof=1))
    if sd == 0.0:
        return mean, mean, mean, (1.0 if mean == 0.0 else 0.0)
    se = sd / math.sqrt(n)
    half = float(stats.t.ppf(0.5 + level / 2, n - 1)) * se
    p = float(2 * stats.t.sf(abs(mean / se), n - 1))
    return mean, mean - half, mean + half, p


def holm(pvalues: Sequence[float]) -> np.ndarray:
    """Holm's step-down adjustment of ``pvalues`` (NaN stays NaN and is not counted).

    Sorted ascending, the i-th of m p-values (0-based) becomes max_{j <= i} min(1, (m - j) p_j);
    a hypothesis is rejected at level alpha when its adjusted p-value is below alpha.
    """
    p = np.asarray(pvalues, dtype=float)
    out = np.full(p.shape, math.nan)
    finite = np.flatnonzero(np.isfinite(p))
    m = finite.size
    running = 0.0
    for rank, i in enumerate(finite[np.argsort(p[finite], kind="stable")]):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return out


def paired_differences(
    scores: pd.DataFrame, higher_is_better: bool, level: float = LEVEL, alpha: float = ALPHA
) -> pd.DataFrame:
    """Every pair of models compared on the seeds both finished.

    Arguments:
        scores: one column per model, one row per seed (NaN where that run did not finish).
        higher_is_better: accuracy (True) or a loss (False); the difference is always "first
            minus second" in the metric's own units.

    Returns:
        One row per pair (first, second): ``n`` (paired seeds), ``diff`` (mean of first -
        second), ``low``/``high`` (its t interval at ``level``), ``p`` (paired t-test),
        ``p_holm`` (Holm-adjusted over the task's pairs), ``significant`` (p_holm < alpha), and
        ``better``: the model the significant difference favours, else "".
    """
    records = []
    for a, b in itertools.combinations(scores.columns, 2):
        both = scores[[a, b]].dropna()
        mean, low, high, p = t_interval((both[a] - both[b]).to_numpy())
        records.append({"first": a, "second": b, "n": len(both), "diff": mean, "low": low,
                        "high": high, "p": p})
    frame = pd.DataFrame.from_records(
        records, columns=["first", "second", "n", "diff", "low", "high", "p"])
    frame["p_holm"] = holm(frame["p"].to_numpy()) if len(frame) else []
    frame["significant"] = frame["p_holm"] < alpha
    favours = np.where(frame["diff"] > 0, frame["first"], frame["second"])
    if not higher_is_better:
        favours = np.where(frame["diff"] < 0, frame["first"], frame["second"])
    frame["better"] = np.where(frame["significant"], favours, "")
    return frame


def beats_baseline(
    values: Sequence[float], baseline: float, higher_is_better: bool, z: float = 3.0
) -> tuple[bool, float]:
    """Whether the mean of ``values`` is better than ``baseline`` by more than ``z`` standard
    errors, and the margin in standard errors (NaN with fewer than 2 values or zero spread,
    where it is then +-inf if the mean differs)."""
    mean, se, n = mean_se(values)
    if n == 0 or not math.isfinite(baseline):
        return False, math.nan
    gain = (mean - baseline) if higher_is_better else (baseline - mean)
    if n < 2:
        return False, math.nan
    if se == 0.0:
        margin = math.inf if gain > 0 else (-math.inf if gain < 0 else 0.0)
    else:
        margin = gain / se
    return bool(margin > z), float(margin)


def bootstrap_ci(
    values: Sequence[float],
    statistic: Callable[[np.ndarray], float] = np.mean,
    *,
    level: float = LEVEL,
    resamples: int = 10_000,
    seed: int = 0,
) -> tuple[float, float]:
    """The percentile bootstrap interval of ``statistic`` over resamples of ``values``.

    Resamples are drawn with replacement from a generator seeded by ``seed`` (the report's
    bytes stay a function of the store). ``statistic`` reduces all resamples at once, called as
    ``statistic(resamples, axis=1)`` (as numpy's reductions are). NaN with fewer than 2 values.
    """
    x = np.asarray(values, dtype=float)
    x = x[np.isfinite(x)]
    if x.size < 2:
        return math.nan, math.nan
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, x.size, size=(resamples, x.size))
    boot = statistic(x[draws], axis=1)
    tail = (1.0 - level) / 2
    return float(np.quantile(boot, tail)), float(np.quantile(boot, 1.0 - tail))


def bootstrap_difference(
    first: Sequence[float],
    second: Sequence[float],
    *,
    level: float = LEVEL,
    resamples: int = 10_000,
    seed: int = 0,
) -> tuple[float, float, float]:
    """``(difference of means, low, high)``: first minus second with a percentile bootstrap
    interval, each group resampled on its own (unpaired: e.g. two layers' per-seed spreads)."""
    a = np.asarray(first, dtype=float)
    b = np.asarray(second, dtype=float)
    a, b = a[np.isfinite(a)], b[np.isfinite(b)]
    if a.size < 2 or b.size < 2:
        diff = float(a.mean() - b.mean()) if a.size and b.size else math.nan
        return diff, math.nan, math.nan
    rng = np.random.default_rng(seed)
    boot = (a[rng.integers(0, a.size, size=(resamples, a.size))].mean(axis=1)
            - b[rng.integers(0, b.size, size=(resamples, b.size))].mean(axis=1))
    tail = (1.0 - level) / 2
    return (float(a.mean() - b.mean()), float(np.quantile(boot, tail)),
            float(np.quantile(boot, 1.0 - tail)))


def average_ranks(scores: pd.DataFrame, higher_is_better: Mapping[str, bool]) -> pd.DataFrame:
    """Per task (row) the rank of each model (column), 1 = best, ties sharing the mean rank.

    Arguments:
        scores: one row per task, one column per model (the mean test metric over seeds).
        higher_is_better: per task, whether a larger value is better.
    """
    ranks = {}
    for task, row in scores.iterrows():
        sign = -1.0 if higher_is_better[task] else 1.0
        ranks[task] = stats.rankdata(sign * row.to_numpy(dtype=float), method="average")
    return pd.DataFrame.from_dict(ranks, orient="index", columns=scores.columns)


def friedman(ranks: pd.DataFrame) -> tuple[float, float]:
    """The Friedman statistic chi^2_F and its p-value from the per-task ranks ``(N, k)``:

        chi^2_F = 12 N / (k (k + 1)) [sum_j R_j^2 - k (k + 1)^2 / 4],   R_j the average ranks,

    chi-squared with k - 1 degrees of freedom (Demsar 2006, eq. 1). NaN below 2 tasks or 2
    models, or when every task ranks the models identically tied.
    """
    n, k = ranks.shape
    if n < 2 or k < 2:
        return math.nan, math.nan
    r = ranks.mean(axis=0).to_numpy()
    chi2 = 12.0 * n / (k * (k + 1)) * (float(np.sum(r**2)) - k * (k + 1) ** 2 / 4.0)
    return chi2, float(stats.chi2.sf(chi2, k - 1))


def nemenyi_cd(k: int, n: int, alpha: float = ALPHA) -> float:
    """The Nemenyi critical difference of average ranks for k models over n tasks:

        CD = q_alpha sqrt(k (k + 1) / (6 n)),   q_alpha = studentized range(1 - alpha; k, inf) / sqrt(2)

    (Demsar 2006, Section 3.2.2); two models whose average ranks differ by more are different.
    """
    if k < 2 or n < 1:
        return math.nan
    q = float(stats.studentized_range.ppf(1.0 - alpha, k, np.inf)) / math.sqrt(2.0)
    return q * math.sqrt(k * (k + 1) / (6.0 * n))


def coefficient_of_variation(values: Sequence[float]) -> float:
    """Population standard deviation over mean; NaN below 2 values or at mean 0."""
    x = np.asarray(values, dtype=float)
    x = x[np.isfinite(x)]
    if x.size < 2 or x.mean() == 0:
        return math.nan
    return float(x.std(ddof=0) / x.mean())
