"""The accuracy section's numbers: each cell's mean over seeds, and the comparisons.

A (model, task) cell is the mean over the runs' seeds with its standard error
(`harness.report.summaries.mean_se`); a task is informative when its best model beats the trivial
baseline by more than `Z_INFORMATIVE` standard errors (a screening margin, not a test). The
tests are `harness.stats`, on scipy.stats and calibrated by tests/test_calibration.py: within a
task the paired comparisons of every pair (`harness.stats.pairwise`, one Holm family per task),
across tasks the Friedman and Wilcoxon-Holm tests (`harness.stats.across_tasks`). This module
arranges their inputs and states their results in words; it computes no test itself.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from .... import stats as inference
from ....report import summaries
from ._data import (BEST_STEP, BEST_VAL, NOT_RUN, PARAMS, SELECTION, STEP, STEPS, TEST,
                    TEST_LOSS, WALL, Labels, is_regression, metric)

Z_INFORMATIVE = 3.0  # a task is informative when a model beats its baseline by this many s.e.

CELL_COLUMNS = ["task", "model", "depth", "test", "test_se", "val", "val_se", "loss", "loss_se",
                "regression", "n", "diverged", "failed", "not_run", "params", "steps", "wall_s",
                "lr", "rlr"]


def summarise(final: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """One line per (task, model, depth): mean and se of test and best-val accuracy (%), test loss.

    ``n`` is the number of finished runs (seeds) in the cell; ``diverged``, ``failed`` and
    ``not_run`` (status `NOT_RUN`: in the grid, not yet in the store) count its other runs;
    ``regression`` marks a task selected on loss (no accuracy); ``lr``/``rlr`` are the cell's
    learning rates when they are one pair.

    Arguments:
        final: the ``"final"`` rows of finished runs (one per run), with ``model``, ``task``
            and ``depth`` columns (see `harness.report.selection.with_keys`).
        runs: every run of the same configuration (any status), with the same key columns.
    """
    records = []
    # Cells come from every run, so a cell whose runs all diverged or failed still has a line
    # (n = 0, its runs counted) instead of silently vanishing from the tables.
    for task in sorted(set(final["task"]) | set(runs["task"])):
        of_task = final[final["task"] == task]
        for model, depth in Labels.order(of_task, runs[runs["task"] == task]):
            cell = of_task[(of_task["model"] == model) & (of_task["depth"] == depth)]
            of_cell = runs[(runs["model"] == model) & (runs["task"] == task)
                           & (runs["depth"] == depth)]
            records.append({"task": task, "model": model, "depth": depth,
                            **_cell(cell, of_cell, of_task)})
    return pd.DataFrame.from_records(records, columns=CELL_COLUMNS)


def _cell(cell: pd.DataFrame, of_cell: pd.DataFrame, of_task: pd.DataFrame) -> dict:
    """One cell's line of `summarise`: ``cell`` its finished runs' final rows, ``of_cell`` its
    runs of any status, ``of_task`` the final rows of its task."""
    test, test_se, _ = summaries.mean_se(100.0 * pd.to_numeric(cell[TEST], errors="coerce"))
    val, val_se, _ = summaries.mean_se(100.0 * pd.to_numeric(cell[BEST_VAL], errors="coerce"))
    loss, loss_se, _ = (
        summaries.mean_se(cell[TEST_LOSS]) if TEST_LOSS in cell.columns else (math.nan,) * 3
    )
    regression = is_regression(of_task) or (
        SELECTION not in of_task.columns and not cell.empty and math.isnan(test)
    )
    pairs = (cell[["lr", "rlr"]].drop_duplicates() if "lr" in cell.columns
             else pd.DataFrame())
    return {
        "test": test,
        "test_se": test_se,
        "val": val,
        "val_se": val_se,
        "loss": loss,
        "loss_se": loss_se,
        "regression": regression,
        "n": len(cell),
        "diverged": int((of_cell["status"] == "diverged").sum()),
        "failed": int((of_cell["status"] == "failed").sum()),
        "not_run": int((of_cell["status"] == NOT_RUN).sum()),
        "params": _seed_mean(cell, PARAMS),
        "steps": _seed_mean(cell, STEPS),
        "wall_s": _seed_mean(cell, WALL),
        "lr": float(pairs.iloc[0, 0]) if len(pairs) == 1 else math.nan,
        "rlr": float(pairs.iloc[0, 1]) if len(pairs) == 1 else math.nan,
    }


def _seed_mean(cell: pd.DataFrame, column: str) -> float:
    """The mean over a cell's seeds of a column (parameter count, steps, time); NaN if absent."""
    if column not in cell.columns:
        return math.nan
    return float(pd.to_numeric(cell[column], errors="coerce").mean())


def score(cells: pd.DataFrame) -> pd.Series:
    """The cell's metric in its table's units: accuracy (%), or test MSE for regression."""
    return cells["loss"].where(cells["regression"], cells["test"])


def score_se(cells: pd.DataFrame) -> pd.Series:
    """The standard error of `score`."""
    return cells["loss_se"].where(cells["regression"], cells["test_se"])


# --------------------------------------------------------------------------------------------
# Is a task informative: its best model against its trivial baseline


def informative(recipe: pd.DataFrame, tuned: pd.DataFrame, baselines: dict[str, float],
                labels: Labels) -> pd.DataFrame:
    """Per task: the baseline and, per configuration, the best model and its margin over the
    baseline in standard errors; ``informative`` when some model's margin exceeds
    `Z_INFORMATIVE` in either configuration."""
    records = []
    for task in sorted(set(recipe["task"]) | set(tuned["task"])):
        regression = bool(recipe.loc[recipe["task"] == task, "regression"].any())
        baseline = baselines.get(task, math.nan)
        record: dict[str, object] = {
            "task": task,
            "metric": "test MSE (lower is better)" if regression else "test accuracy (%)",
            "baseline": baseline,
        }
        verdict = False
        for what, cells in (("one recipe", recipe), ("tuned", tuned)):
            best = _best_over_baseline(cells[cells["task"] == task], baseline, regression,
                                       labels)
            verdict |= bool(best[3] > Z_INFORMATIVE)
            for key, value in zip(("best, {}", "{}: mean", "{}: se", "{}: margin (s.e.)",
                                   "{}: n"), best):
                record[key.format(what)] = value
        record["informative"] = ("yes" if verdict else "no") if math.isfinite(baseline) \
            else "unknown"
        records.append(record)
    return pd.DataFrame.from_records(records)


def _best_over_baseline(of_task: pd.DataFrame, baseline: float, regression: bool,
                        labels: Labels) -> tuple[str, float, float, float, float]:
    """``(label, mean, se, margin, n)`` of the task's best series, its margin over
    ``baseline`` in standard errors and its seeds (``("", nan, nan, nan, nan)`` without a
    finished run)."""
    of_task = of_task.assign(score=score, score_se=score_se)
    of_task = of_task[of_task["n"] > 0]
    if of_task.empty:
        return "", math.nan, math.nan, math.nan, math.nan
    i = of_task["score"].idxmin() if regression else of_task["score"].idxmax()
    top = of_task.loc[i]
    best, best_se = float(top["score"]), float(top["score_se"])
    gain = (baseline - best) if regression else (best - baseline)
    margin = gain / best_se if best_se > 0 else (math.inf if gain > 0 else math.nan)
    return labels(top["model"], top["depth"]), best, best_se, margin, float(top["n"])


# --------------------------------------------------------------------------------------------
# Within a task: every pair of models, paired by seed


SIGNIFICANCE_COLUMNS = ["task", "first", "second", *inference.Comparison.__dataclass_fields__,
                        "m", "p_holm", "significant", "better", "mdd_family", "mdd_t_family",
                        "regression"]


def _seed_scores(final: pd.DataFrame, task: str, labels: Labels) -> pd.DataFrame:
    """One column per series (model, depth), one row per seed: the test metric of the task."""
    of_task = final[final["task"] == task]
    frame = of_task.assign(value=metric(of_task, is_regression(of_task)),
                           series=[labels(m, d) for m, d in zip(of_task["model"],
                                                                of_task["depth"])])
    table = frame.pivot_table(index="seed", columns="series", values="value", aggfunc="mean")
    order = [labels(m, d) for m, d in Labels.order(of_task)]
    return table.reindex(columns=[c for c in order if c in table.columns])


def significance(final: pd.DataFrame, labels: Labels) -> pd.DataFrame:
    """Every task's pairwise paired comparisons (`harness.stats.pairwise`), one family per
    task."""
    frames = []
    for task in sorted(final["task"].unique()):
        scores = _seed_scores(final, task, labels)
        if scores.shape[1] < 2:
            continue
        regression = is_regression(final[final["task"] == task])
        pairs = inference.pairwise(scores, higher_is_better=not regression)
        frames.append(pairs.assign(task=task, regression=regression))
    if not frames:
        return pd.DataFrame(columns=SIGNIFICANCE_COLUMNS)
    return pd.concat(frames, ignore_index=True)[SIGNIFICANCE_COLUMNS]


# --------------------------------------------------------------------------------------------
# Across tasks: ranks, Friedman, Wilcoxon-Holm


def ranks(cells: pd.DataFrame, labels: Labels) -> dict[str, object]:
    """Per-task ranks of the series' mean test metric and the tests across tasks
    (`harness.stats.across_tasks`)."""
    cells = cells[cells["n"] > 0]
    if cells.empty:
        return {"ranks": pd.DataFrame()}
    scores = cells.assign(score=score, series=[labels(m, d) for m, d in
                                               zip(cells["model"], cells["depth"])])
    table = scores.pivot_table(index="task", columns="series", values="score", aggfunc="mean")
    order = [labels(m, d) for m, d in Labels.order(cells)]
    table = table.reindex(columns=[c for c in order if c in table.columns]).dropna(axis=0)
    if table.empty or table.shape[1] < 2:
        return {"ranks": pd.DataFrame()}
    higher = {labels.task(t): not bool(cells.loc[cells["task"] == t, "regression"].any())
              for t in table.index}
    table.index = [labels.task(t) for t in table.index]
    out = inference.across_tasks(table, higher)
    out["ranks"] = summaries.average_ranks(table, higher)
    return out


def friedman_text(ranks: dict) -> str:
    """The Friedman test in one sentence, with whether tie-breaks change it."""
    n_tasks, k = ranks["ranks"].shape
    if not math.isfinite(ranks.get("p", math.nan)):
        return (f"With {k} models over {n_tasks} tasks the Friedman test is not computed (it "
                "needs at least three models).")
    text = (f"Friedman test over {n_tasks} tasks and {k} models (tie-corrected): "
            f"chi² = {ranks['chi2']:.2f}, p = {ranks['p']:.3g}")
    if ranks["tie_breaks"] > 1 and math.isfinite(ranks["p_worst"]):
        text += (f"; over the {ranks['tie_breaks']} ways of breaking exact ties p ranges "
                 f"{ranks['p_best']:.3g} to {ranks['p_worst']:.3g}")
    elif ranks["tie_breaks"] > 1:
        text += f"; the {ranks['tie_breaks']} ways of breaking exact ties are too many to check"
    return text + "."


def pairs_text(ranks: dict) -> str:
    """What the Wilcoxon-Holm pairs across tasks support, and why a claim is weak."""
    n_tasks = ranks["ranks"].shape[0]
    smallest = ranks["smallest_p"]
    text = ("Pairwise across tasks: Wilcoxon signed-rank tests on the per-task differences "
            "of mean test metric, Holm-adjusted over the pairs, each p the largest over every "
            "way of breaking exact ties.")
    if smallest > inference.ALPHA:
        text += (f" With {n_tasks} tasks the exact test's smallest p is {smallest:.3g}, above "
                 "5%, so no pair can differ significantly across tasks.")
    if ranks["weak"]:
        text += (f" Fewer than five tasks ({n_tasks}): a rank claim across them is weak, as "
                 "each task is one observation of the ordering.")
    return text


def apart(ranks: dict) -> set[frozenset]:
    """The pairs of series the Wilcoxon-Holm tests across tasks separate."""
    pairs = ranks.get("pairs")
    if isinstance(pairs, pd.DataFrame) and not pairs.empty:
        return {frozenset((r.first, r.second)) for r in pairs.itertuples() if r.significant}
    return set()


# --------------------------------------------------------------------------------------------
# What the design can decide, said once (the index states it before any finding)


def seeds_needed(m: int, alpha: float = inference.ALPHA) -> int:
    """The fewest paired seeds at which the exact sign-flip test's smallest two-sided p,
    2 / 2^n, reaches Holm's first-step level alpha / m."""
    return math.ceil(math.log2(2 * max(m, 1) / alpha))


def tasks_needed(m: int, alpha: float = inference.ALPHA) -> int:
    """The fewest tasks at which the exact Wilcoxon test's smallest p reaches alpha / m."""
    n = 1
    while inference.smallest_wilcoxon_p(n) > alpha / max(m, 1):
        n += 1
    return n


def design_lines(differences: pd.DataFrame, across: dict, labels: Labels) -> list[str]:
    """What the tuned comparisons of this store can decide: per task the held-out paired
    seeds n, the pairs m, whether the exact test's smallest p reaches the Holm level alpha / m,
    and the differences detectable there with 80 % power (from each pair's observed spread);
    then what the ranks across tasks can decide. True whichever way the data fall."""
    if differences.empty:
        return []
    alpha = inference.ALPHA
    lines, parts = [], []
    for (n, m), group in differences.groupby(["n", "m"], sort=True):
        n, m = int(n), int(m)
        smallest = inference.smallest_sign_flip_p(n) if n <= inference.EXACT_MAX_N else 0.0
        level = alpha / max(m, 1)
        tasks = sorted(group["task"].unique())
        head = (f"on {labels.tasks_text(tasks)}, n = {n} held-out paired seeds per cell and "
                f"{m} model pair{'s' if m != 1 else ''} (Holm level {alpha:g}/{m} = "
                f"{level:.2g})")
        if n < 2:
            parts.append(head + "; no comparison can be tested")
            continue
        if smallest > level:
            head += (f"; the exact test's smallest p, {smallest:.3g}, cannot reach it (that "
                     f"needs n ≥ {seeds_needed(m)}), so no pairwise difference can be declared;"
                     " a paired t-test there would detect with 80% power:")
            column = "mdd_t_family"
        else:
            head += "; detectable with 80% power:"
            column = "mdd_family"
        ranges = []
        for task in tasks:
            of_task = group[group["task"] == task]
            values = of_task[column].to_numpy(dtype=float)
            values = values[np.isfinite(values)]
            if values.size:
                unit = " MSE" if bool(of_task["regression"].iloc[0]) else " pp"
                spec = ".2g" if unit == " MSE" else ".1f"
                ranges.append(f"{labels.task(task)} {values.min():{spec}}–"
                              f"{values.max():{spec}}{unit}")
        parts.append(head + " " + (", ".join(ranges) or "no difference (no spread)"))
    lines.append("Tuned comparisons " + "; ".join(parts) + ".")
    table = across.get("ranks")
    if isinstance(table, pd.DataFrame) and table.shape[0] >= 2 and "smallest_p" in across:
        k = table.shape[1]
        m = k * (k - 1) // 2
        if across["smallest_p"] > alpha / max(m, 1):
            lines.append(
                f"Across {table.shape[0]} tasks the exact Wilcoxon test's smallest p, "
                f"{across['smallest_p']:.3g}, cannot reach the Holm level {alpha:g}/{m} (that "
                f"needs ≥ {tasks_needed(m)} tasks): average ranks are shown, no pair is "
                "separated, and the critical-difference diagram is left out.")
    return lines


# --------------------------------------------------------------------------------------------
# Did the runs finish: how many peaked at their last evaluation


def peaked_last(final: pd.DataFrame, evals: pd.DataFrame) -> pd.DataFrame:
    """Per (task, model, depth): ``runs`` (finished runs in ``final``) and ``at_last``, how many
    of them selected their last evaluation (``best_step`` at the largest step evaluated): a run
    still improving when its budget ended. Empty when the rows record no best step."""
    columns = ["task", "model", "depth", "runs", "at_last"]
    if final.empty or BEST_STEP not in final.columns or evals.empty or STEP not in evals.columns:
        return pd.DataFrame(columns=columns)
    last = pd.to_numeric(evals[STEP], errors="coerce").groupby(evals["run_id"]).max()
    best = pd.to_numeric(final[BEST_STEP], errors="coerce")
    at_last = (best.to_numpy() >= final["run_id"].map(last).to_numpy(dtype=float))
    frame = final.assign(at_last=at_last)
    out = frame.groupby(["task", "model", "depth"], as_index=False).agg(
        runs=("run_id", "size"), at_last=("at_last", "sum"))
    return out[columns]
