"""Report-specific helpers on top of `harness.stats` (which holds every test and interval).

- A cell's mean with its standard error (`mean_se`), and whether a model beats a task's trivial
  baseline by more than ``z`` standard errors (`beats_baseline`): a screening margin, not a test.
- Per-task ranks of the models, 1 = best (`average_ranks`), and the spread of a run's norms
  (`coefficient_of_variation`).
- The geometric mean of positive values with its 95 % interval (`geometric_interval`): the t
  interval of the mean of their logarithms (`harness.stats.mean_interval`), exponentiated, for
  quantities drawn on a log axis (norms, ratios).

The comparisons themselves (paired and unpaired tests, Holm, Friedman, Wilcoxon across tasks,
minimum detectable differences) are `harness.stats`, on scipy.stats, calibrated by
tests/test_calibration.py.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
from scipy import stats

from ..stats import ALPHA, LEVEL  # noqa: F401  (the report's levels, re-exported)
from ..stats import mean_interval


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


def geometric_interval(values: Sequence[float] | pd.Series | np.ndarray, level: float = LEVEL
                       ) -> tuple[float, float, float, int]:
    """``(geometric mean, low, high, n)`` of the finite positive values: the t interval of the
    mean of their natural logarithms (`harness.stats.mean_interval`, t with n - 1 degrees of
    freedom) mapped back by exp, so that it is the interval of the geometric mean and stays
    positive. NaN bounds below 2 values; non-positive values have no logarithm and are left out
    (n counts the values used)."""
    x = pd.to_numeric(pd.Series(values), errors="coerce").to_numpy(dtype=float)
    x = x[np.isfinite(x) & (x > 0)]
    centre, low, high, n = mean_interval(np.log(x), level)
    return math.exp(centre) if n else math.nan, math.exp(low), math.exp(high), n


def coefficient_of_variation(values: Sequence[float], *, drop_infinite: bool = True) -> float:
    """Population standard deviation over mean of the finite values; NaN below 2 values or at
    mean 0. An infinite value (a norm that overflowed) is left out, or with ``drop_infinite``
    false makes the spread NaN (it cannot be stated)."""
    x = np.asarray(values, dtype=float)
    if not drop_infinite and np.isinf(x).any():
        return math.nan
    x = x[np.isfinite(x)]
    if x.size < 2 or x.mean() == 0:
        return math.nan
    return float(x.std(ddof=0) / x.mean())


def detectable_text(row, unit: str = "", spec: str = ".2f") -> str:
    """The difference a comparison's test could detect (80 % power) at the level it is judged
    at, Holm's first step (alpha / m; a `harness.stats.pairwise` row), in words; where the exact
    test cannot reach that level at this n, what a paired t-test at it could detect."""
    family = getattr(row, "mdd_family", math.nan)
    if math.isfinite(family):
        return f"MDD {family:{spec}}{unit} at the Holm level"
    t_family = getattr(row, "mdd_t_family", math.nan)
    if math.isfinite(t_family):
        return (f"the exact test cannot reach the Holm level at n = {row.n}; a paired t-test "
                f"there could detect {t_family:{spec}}{unit}")
    return "no detectable difference can be stated"


def comparison_text(row, unit: str = "", spec: str = ".2f") -> str:
    """One pair of a `harness.stats.pairwise` family in words: "A − B: +1.87 pp [-1.17, +4.90],
    d_z = 0.9, Holm p = 0.62, MDD ..."."""
    effect = "g" if str(getattr(row, "test", "")).startswith("Welch") else "d_z"
    return (f"{row.first} − {row.second}: {row.diff:+{spec}}{unit} [{row.low:+{spec}}, "
            f"{row.high:+{spec}}], {effect} = {row.effect:.2f}, Holm p = {row.p_holm:.2g}, "
            f"{detectable_text(row, unit, spec)}")


def family_verdict(family: pd.DataFrame, alpha: float = ALPHA) -> str:
    """What a `harness.stats.pairwise` family supports, in one sentence that is true whichever
    way the data come out: an n that cannot reach ``alpha`` is said as such."""
    n = int(family["n"].max()) if len(family) else 0
    smallest = float(family["smallest_p"].max()) if len(family) else math.nan
    supported = family[family["significant"]]
    if n < 2:
        return "fewer than two paired seeds: no difference can be tested."
    if smallest > alpha:
        return (f"n = {n} cannot reach alpha = {alpha:g} with an exact test (its smallest "
                f"two-sided p is {smallest:.3g}), so no difference can be declared whatever its "
                "size.")
    if supported.empty:
        return "no pairwise difference is significant."
    return "significant: " + "; ".join(
        f"{r.better} over {r.second if r.better == r.first else r.first}"
        for r in supported.itertuples()) + "."
