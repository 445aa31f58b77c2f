"""The accuracy section's tables: each cell's mean over seeds, what is informative, the
comparisons within and across tasks, the detail of every cell, and the published numbers.

Every table has a row or column for the task's trivial baseline. How numbers are shown
(`harness.report.writers.FORMATS`): accuracy and its differences in percent (points) to one
decimal, MSE in scientific notation with three significant digits (its values span decades),
p-values as papers print them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

import numpy as np
import pandas as pd

from .... import stats as inference
from ....report import published
from ....report.artifacts import Artifact, Missing, Table
from ._data import TITLES, Labels
from ._statistics import Z_INFORMATIVE, friedman_text, pairs_text

PERCENT_DIGITS = 1
MSE_FORMAT = "sci"
P_FORMAT = "p"
BASELINE_ROW = "Trivial baseline"


def _by_row(index: pd.Index, columns: Sequence[str], regression: Sequence[bool],
            otherwise: int | str = PERCENT_DIGITS) -> pd.DataFrame:
    """Per-cell formats of ``columns``: MSE's for a regression row, ``otherwise`` else."""
    formats = [MSE_FORMAT if r else otherwise for r in regression]
    return pd.DataFrame({c: formats for c in columns}, index=index, dtype=object)


def _n_text(n: pd.DataFrame, short: bool = False) -> str:
    """The seeds per cell of a results table, and what a dash means where a cell has none
    (``short``: in a few words, for the LaTeX caption)."""
    low, high = int(np.nanmin(n.to_numpy())), int(np.nanmax(n.to_numpy()))
    text = (
        f"n = {low} seed{'s' if low != 1 else ''} per cell" if low == high
        else f"n = {low} to {high} seeds per cell"
    )
    if low == 0:
        text += ("; –: no finished run" if short else
                 "; – marks a cell without a finished run, whose diverged, failed or not yet "
                 "made runs are counted in the detail table")
    return text


# What every table's LaTeX caption says of a spread (the writer shows none below n = 3).
_SPREAD = "mean ± s.e. over seeds (± where n ≥ 3)"


def _preset(scale: str) -> str:
    """The preset's name from `scale_text`'s sentence, as a caption's last words ("Preset
    cpu."), or nothing where the sentence names none."""
    match = re.search(r"Preset (\S+?)[;( ]", scale)
    return f"Preset {match[1]}." if match else ""


def results_table(name: str, cells: pd.DataFrame, baselines: dict[str, float], labels: Labels,
                  what: str, run_ids: tuple[str, ...]) -> Table:
    """Test accuracy per (series, task) at one configuration (``accuracy_test`` or
    ``accuracy_tuned``), mean ± se, with the trivial baseline as the last row."""
    order = Labels.order(cells)
    tasks = sorted(cells["task"].unique())
    keyed = cells.set_index(["model", "depth", "task"])

    def grid(column: str) -> pd.DataFrame:
        values = [[keyed[column].get((m, d, t), math.nan) for t in tasks] for m, d in order]
        return pd.DataFrame(values, index=pd.Index([labels(m, d) for m, d in order],
                                                    name="Model"),
                            columns=[labels.task(t) for t in tasks])

    mean, se, n = grid("test"), grid("test_se"), grid("n")
    n_text = _n_text(n)
    short = (f"Mean ± standard error over seeds ({_n_text(n, short=True)}; ± only where "
             f"n ≥ 3); best per task in bold. {BASELINE_ROW}: the training split's majority "
             f"class. {_preset(what)}")
    if any(t in baselines for t in tasks):
        mean.loc[BASELINE_ROW] = [baselines.get(t, math.nan) for t in tasks]
        se.loc[BASELINE_ROW] = math.nan
        n.loc[BASELINE_ROW] = math.nan
    return Table(
        name=name,
        title=TITLES[name],
        caption=(
            f"Test accuracy (%) at the best validation step, mean ± standard error over seeds "
            f"({n_text}; no ± where n < 3), for {what} Best mean per task in bold. "
            f"'{BASELINE_ROW}': always the training split's most frequent class, scored on "
            "test (computed from the data)."
        ),
        frame=mean,
        stderr=se,
        best={c: "max" for c in mean.columns},
        digits=1,
        runs=run_ids,
        short_caption=short,
        n=n,
    )


def regression_table(recipe: pd.DataFrame, tuned: pd.DataFrame, baselines: dict[str, float],
                     labels: Labels, scale: str, run_ids: tuple[str, ...]) -> Table:
    """Test MSE of the regression tasks, at both configurations side by side."""
    recipe, tuned = recipe[recipe["regression"]], tuned[tuned["regression"]]
    order = Labels.order(recipe, tuned)
    tasks = sorted(set(recipe["task"]) | set(tuned["task"]))
    columns, ses, counts, base = {}, {}, {}, []
    for task in tasks:
        for what, cells in (("one recipe", recipe), ("tuned", tuned)):
            keyed = cells.set_index(["model", "depth", "task"])
            column = f"{labels.task(task)}, {what}"
            columns[column] = [keyed["loss"].get((m, d, task), math.nan) for m, d in order]
            ses[column] = [keyed["loss_se"].get((m, d, task), math.nan) for m, d in order]
            counts[column] = [keyed["n"].get((m, d, task), math.nan) for m, d in order]
            base.append(baselines.get(task, math.nan))
    index = pd.Index([labels(m, d) for m, d in order], name="Model")
    frame = pd.DataFrame(columns, index=index)
    se = pd.DataFrame(ses, index=index)
    n = pd.DataFrame(counts, index=index, dtype=float)
    frame.loc[BASELINE_ROW] = base
    se.loc[BASELINE_ROW] = math.nan
    n.loc[BASELINE_ROW] = math.nan
    return Table(
        name="accuracy_regression",
        title=TITLES["accuracy_regression"],
        caption=(
            "Test mean squared error at the best validation step (selected on validation loss), "
            "mean ± standard error over seeds (no ± where n < 3), at the one shared recipe and "
            f"with tuned learning rates; lower is better, best in bold. '{BASELINE_ROW}': the training split's "
            f"mean as the prediction, scored on test. {scale}"
        ),
        frame=frame,
        stderr=se,
        best={c: "min" for c in frame.columns},
        digits=MSE_FORMAT,
        runs=run_ids,
        short_caption=(
            f"Test MSE at the step selected on validation loss, {_SPREAD}; lower is better, "
            f"best in bold. {BASELINE_ROW}: the training split's mean. {_preset(scale)}"),
        n=n,
    )


def informative_table(informative: pd.DataFrame, labels: Labels, scale: str,
                      run_ids: tuple[str, ...]) -> Table:
    """`harness.studies.accuracy.report._statistics.informative` as a table."""
    informative = informative.assign(task=[labels.task(t) for t in informative["task"]])
    frame = informative.set_index("task").drop(
        columns=[c for c in informative.columns if c.endswith((": se", ": n"))])
    se = pd.DataFrame(index=frame.index, columns=frame.columns, dtype=float)
    n = pd.DataFrame(index=frame.index, dtype=float)
    for what in ("one recipe", "tuned"):
        se[f"{what}: mean"] = informative.set_index("task")[f"{what}: se"]
        n[f"{what}: mean"] = informative.set_index("task")[f"{what}: n"].astype(float)
    frame.index.name = "Task"
    n.index = frame.index
    return Table(
        name="accuracy_informative",
        title=TITLES["accuracy_informative"],
        caption=(
            "Per task: its trivial baseline (majority class of the training split, or its mean "
            "for regression, scored on test), and for each configuration the model with the "
            "best mean test metric, that mean ± its standard error over seeds (no ± where "
            "n < 3), and its margin "
            "over the baseline in standard errors ((mean - baseline) / se; sign flipped for "
            f"MSE). A task is informative when some model beats the baseline by more than "
            f"{Z_INFORMATIVE:g} standard errors; on a task that is not, the ranking of the "
            f"models is noise. {scale}"
        ),
        frame=frame,
        stderr=se,
        digits={c: 1 for c in frame.columns if frame[c].dtype.kind == "f"},
        cell_formats=_by_row(frame.index, ["baseline", "one recipe: mean", "tuned: mean"],
                             frame["metric"].str.startswith("test MSE").tolist()),
        runs=run_ids,
        short_caption=(
            f"Per configuration, the best model's test metric, {_SPREAD}, and its margin over "
            f"the trivial baseline in standard errors; a task is informative when some margin "
            f"exceeds {Z_INFORMATIVE:g}. {_preset(scale)}"),
        n=n,
    )


_DIFFERENCES = ["difference", "95% CI low", "95% CI high", "MDD", "MDD (Holm)", "MDD (paired t, Holm)"]


def significance_table(significance: pd.DataFrame, labels: Labels, tuning: str, scale: str,
                       run_ids: tuple[str, ...], name: str = "accuracy_significance",
                       arm: str = "") -> Artifact:
    """`harness.studies.accuracy.report._statistics.significance` as a table, one row per pair
    (``name``; ``arm`` a sentence opening the caption that says which runs it compares)."""
    if significance.empty:
        return Missing(name, TITLES[name], "no task has two models with finished runs.")
    frame = pd.DataFrame({
        "Task": [labels.task(t) for t in significance["task"]],
        "Pair": significance["first"] + " − " + significance["second"],
        "paired seeds": significance["n"].astype("Int64"),
        "difference": significance["diff"],
        "95% CI low": significance["low"],
        "95% CI high": significance["high"],
        "d_z": significance["effect"],
        "test": significance["test"],
        "p": significance["p"],
        "p (Holm)": significance["p_holm"],
        "significant": np.where(significance["significant"], "yes", "no"),
        "favours": significance["better"],
        "MDD": significance["mdd"],
        "MDD (Holm)": significance["mdd_family"],
        "MDD (paired t, Holm)": significance["mdd_t_family"],
    }).set_index(["Task", "Pair"])
    return Table(
        name=name,
        title=TITLES[name],
        caption=arm + _significance_caption(significance, tuning, scale),
        frame=frame,
        digits={**{c: PERCENT_DIGITS for c in _DIFFERENCES}, "d_z": 2, "p": P_FORMAT,
                "p (Holm)": P_FORMAT},
        cell_formats=_by_row(frame.index, _DIFFERENCES,
                             [bool(r) for r in significance["regression"]]),
        runs=run_ids,
        short_caption=(
            ("At a common parameter budget. " if arm else "")
            + "Model pairs at tuned learning rates, paired by seed: mean difference (first − "
            "second; accuracy points, or MSE), 95% t interval where n ≥ 3, effect size d_z, "
            "p of the named test, Holm-adjusted per task, minimum detectable difference (80% "
            f"power). {_preset(scale)}"),
        n="paired seeds",
        intervals=("95% CI low", "95% CI high"),
    )


def _significance_caption(significance: pd.DataFrame, tuning: str, scale: str) -> str:
    smallest = ", ".join(f"n = {n}: {inference.smallest_sign_flip_p(n):.3g}"
                         for n in sorted({int(n) for n in significance["n"] if n >= 2}
                                         ) if n <= inference.EXACT_MAX_N)
    return (
        "For each task, every pair of models at their tuned learning rates, paired by seed: "
        "the mean of the per-seed differences in test metric (first − second; accuracy in "
        "percentage points, or MSE), its 95% paired t interval (not shown where n < 3), the "
        "effect size d_z (mean "
        "difference over the standard deviation of the differences), and the two-sided "
        "p-value of the test named: the exact sign-flip test over all 2^n flips of the n "
        f"paired seeds up to n = {inference.EXACT_MAX_N}, the paired t-test above. Its "
        "smallest possible p is 2/2^n"
        + (f" ({smallest})" if smallest else "")
        + ", so with 5 seeds or fewer no pair can reach 5%. 'p (Holm)' is adjusted by "
        "Holm's step-down method over the task's pairs (one family per task, family-wise "
        "error 5%); 'significant' means p (Holm) <= 0.05, and 'favours' names the better "
        "model of a significant pair. MDD: the minimum detectable difference, the true "
        "difference the test detects with 80% power at 5% (in the metric's units, from the "
        "standard deviation of this pair's differences, assuming they are normal); 'inf' "
        "where the exact test cannot reach 5% at this n. 'MDD (Holm)' is at 5% / m for the "
        "task's m pairs, where Holm rejects a pair whatever the others do; 'MDD (paired "
        "t, Holm)' is what a paired t-test at 5% / m could detect. A 'no' is absence of evidence, "
        f"not evidence of equality, when the difference is below the MDD. {tuning} {scale}"
    )


def ranks_table(ranks: dict, scale: str, run_ids: tuple[str, ...]) -> Table:
    """Each series' rank per task and its average rank (``ranks`` from
    `harness.studies.accuracy.report._statistics.ranks`, with at least two tasks)."""
    table: pd.DataFrame = ranks["ranks"]  # type: ignore[assignment]
    frame = table.T.copy()
    frame.index.name = "Model"
    frame["average rank"] = table.mean(axis=0)
    caption = (
        "Rank of each model's mean test metric on each task (1 = best; ties share the mean "
        "rank), at the tuned learning rates, and the average rank over tasks (lower is "
        f"better, best in bold). {friedman_text(ranks)} {pairs_text(ranks)} {scale}"
    )
    short = ("Rank of each model's mean test metric per task at tuned learning rates (1 = "
             "best; ties share the mean rank) and its average over tasks (lower is better, best "
             f"in bold); the tests across tasks are in the report's text. {_preset(scale)}")
    return Table(name="accuracy_ranks", title=TITLES["accuracy_ranks"], caption=caption,
                 frame=frame, best={"average rank": "min"}, digits=2, runs=run_ids,
                 short_caption=short)


def _detail_rows(cells: pd.DataFrame, what: str, labels: Labels
                 ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The detail table's rows of one configuration, and their standard errors."""
    frame = pd.DataFrame({
        "Task": [labels.task(t) for t in cells["task"]],
        "Model": [labels(m, d) for m, d in zip(cells["model"], cells["depth"])],
        "configuration": what,
        "lr": cells["lr"],
        "recurrent lr": cells["rlr"],
        "test acc. (%)": cells["test"],
        "best val. acc. (%)": cells["val"],
        "test loss": cells["loss"],
        "n seeds": cells["n"].astype("Int64"),
        "diverged": cells["diverged"].astype("Int64"),
        "failed": cells["failed"].astype("Int64"),
        "not run": cells["not_run"].astype("Int64"),
        "parameters": cells["params"].round().astype("Int64"),
        "steps": cells["steps"].round().astype("Int64"),
        "training time (s)": cells["wall_s"],
    })
    se = pd.DataFrame({
        "test acc. (%)": cells["test_se"].to_numpy(),
        "best val. acc. (%)": cells["val_se"].to_numpy(),
        "test loss": cells["loss_se"].to_numpy(),
    })
    return frame, se


_DETAIL_CAPTION = (
    "Per (task, model) and configuration (the one shared recipe, and the learning rates "
    "tuned on validation): its learning rates, test accuracy at the selected step, the "
    "best validation accuracy (%) and the test loss at the selected step "
    "(cross-entropy, or mean squared error for regression tasks, which are selected on "
    "validation loss), each the mean ± standard error over the n finished seeds (no ± "
    "where n < 3); runs "
    "that diverged or failed, and runs of the preset's grid not made yet, are counted, "
    "not averaged; parameters of the whole network (encoder, blocks, head), training "
    "steps and training time per run (s: the training loop with its validation passes, "
    "on the hardware named in the provenance; a run that shared the cores with others, "
    "as `make report` runs two at once, took longer than it would alone: the provenance "
    f"records concurrent_runs), each the mean over seeds. '{BASELINE_ROW}': the "
    "training split's majority class (test accuracy and cross-entropy of its class "
    "frequencies) or its mean (MSE), scored on test. "
)


def detail_table(recipe: pd.DataFrame, tuned: pd.DataFrame, baselines: dict[str, float],
                 labels: Labels, scale: str, run_ids: tuple[str, ...]) -> Table:
    """Every cell at both configurations: rates, metrics, run counts, parameters and cost;
    grouped by task, with the task's trivial baseline."""
    rows = [_detail_rows(cells, what, labels)
            for what, cells in (("one recipe", recipe), ("tuned", tuned))]
    tasks = sorted(set(recipe["task"]) | set(tuned["task"]))
    regression = set(recipe.loc[recipe["regression"], "task"])
    regression_labels = {labels.task(t) for t in regression}
    rows.append((
        pd.DataFrame({
            "Task": [labels.task(t) for t in tasks], "Model": BASELINE_ROW,
            "configuration": "from the data",
            "test acc. (%)": [math.nan if t in regression else baselines.get(t, math.nan)
                              for t in tasks],
            "test loss": [baselines.get(t, math.nan) if t in regression else math.nan
                          for t in tasks],
        }),
        pd.DataFrame(index=range(len(tasks)), columns=rows[0][1].columns, dtype=float),
    ))
    frame = pd.concat([f for f, _ in rows], ignore_index=True)
    se = pd.concat([s for _, s in rows], ignore_index=True)
    frame = frame.set_index(["Task", "Model", "configuration"])
    se.index = frame.index
    order = frame.index.to_frame(index=False).reset_index().sort_values(
        ["Task", "index"], kind="stable")["index"].to_numpy()
    frame, se = frame.iloc[order], se.iloc[order]
    return Table(
        name="accuracy_detail",
        title=TITLES["accuracy_detail"],
        caption=_DETAIL_CAPTION + scale,
        short_caption=(
            "Per task, model and configuration (shared recipe, or rates tuned on validation): "
            "learning rates, test and best validation accuracy, test loss (cross-entropy; MSE "
            f"for regression), {_SPREAD}; run counts; parameters, steps, training time. "
            f"{_preset(scale)}"),
        n="n seeds",
        frame=frame,
        stderr=se,
        digits={c: (3 if c == "test loss" else "setting" if "lr" in c else 1)
                for c in frame.columns},
        cell_formats=_by_row(frame.index, ["test loss"],
                             [t in regression_labels
                              for t in frame.index.get_level_values("Task")], otherwise=3),
        runs=run_ids,
    )


def versus_published(cells: pd.DataFrame, baselines: dict[str, float], labels: Labels,
                     scale: str, run_ids: tuple[str, ...]) -> Artifact:
    """Our accuracy beside the published LRA number, for our tasks that are LRA tasks."""
    name = "accuracy_vs_published"
    lra = {t: published.LRA_TASK_OF[t] for t in cells["task"].unique()
           if t in published.LRA_TASK_OF}
    if not lra:
        return Missing(
            name,
            TITLES[name],
            f"none of the tasks run ({labels.tasks_text(sorted(cells['task'].unique()))}) is an "
            "LRA task, so no published number applies; the published LRA table is in its own "
            "section.",
        )
    paper = published.accuracy_frame()
    row_of = {ours: pub for pub, ours in published.OUR_MODEL_OF.items()}
    records, errors = [], []
    for task, lra_task in sorted(lra.items()):
        of_task = cells[cells["task"] == task]
        for model, depth in Labels.order(of_task):
            mine = of_task[(of_task["model"] == model) & (of_task["depth"] == depth)]
            pub_row = row_of.get(model)
            records.append({
                "Task (ours)": labels.task(task),
                "Model": labels(model, depth),
                "ours, test acc. (%)": float(mine["test"].iloc[0]),
                "n seeds": int(mine["n"].iloc[0]),
                "LRA task": lra_task,
                "PUBLISHED (%)": paper.at[pub_row, lra_task] if pub_row else "not published",
                "published as": pub_row or "",
            })
            errors.append(float(mine["test_se"].iloc[0]))
        records.append({"Task (ours)": labels.task(task), "Model": BASELINE_ROW,
                        "ours, test acc. (%)": baselines.get(task, math.nan), "n seeds": None,
                        "LRA task": lra_task, "PUBLISHED (%)": "", "published as": ""})
        errors.append(math.nan)
    frame = pd.DataFrame.from_records(records).set_index(["Task (ours)", "Model"])
    frame["n seeds"] = frame["n seeds"].astype("Int64")
    se = pd.DataFrame({"ours, test acc. (%)": errors}, index=frame.index)
    return Table(
        name=name,
        title=TITLES[name],
        caption=(
            "Our test accuracy at the tuned learning rates (mean ± standard error over seeds; "
            "no ± where n < 3) "
            "beside the PUBLISHED full-scale LRA accuracy of the same layer (sources in the "
            "published section; not measured by us). Ours were "
            f"run at a much smaller scale: {scale} Our generated tasks (ListOps, Pathfinder, "
            "Path-X) follow the LRA generators' rules at the sizes their task preset sets; they "
            "are not the LRA release. Our S4D is set beside S4D-Lin, the published variant of "
            "its default initialisation. The published column is for orientation, not a "
            f"like-for-like comparison. '{BASELINE_ROW}': our task's majority class."
        ),
        frame=frame,
        stderr=se,
        digits=1,
        runs=run_ids,
        short_caption=(
            f"Our test accuracy at tuned learning rates, {_SPREAD}, beside the PUBLISHED "
            "full-scale LRA accuracy of the same layer (not ours). Our runs are far smaller, "
            f"on generated tasks: for orientation only. {_preset(scale)}"),
        n="n seeds",
    )


_MATCHED_CAPTION = (
    "Every model sized to one parameter budget per task (the smallest of the models' "
    "recurrent layers at equal width, unless the study names another): the width and so the "
    "rest of the network kept, the state size changed until one recurrent layer holds the "
    "budget's trained parameters within ±5 % (complex entries count two; options that follow "
    "the state size, such as RotRNN's heads, follow it); a model already within the budget "
    "keeps its configuration and its equal-width runs. Test metric at each arm's learning "
    "rates tuned on validation: accuracy (%) or, on a regression task, mean squared error; "
    "mean ± standard error over the n finished seeds (no ± where n < 3), the equal-width "
    "result beside it. "
)


def matched_table(matched: pd.DataFrame, sizes: pd.DataFrame, width: pd.DataFrame,
                  labels: Labels, scale: str, run_ids: tuple[str, ...]) -> Table:
    """Per (task, model) of the parameter-matched runs: the state size and layer parameters
    each was sized to, its tuned test metric, and the same at equal width beside it.

    Arguments:
        matched, width: `summarise` lines of the tuned configuration of each arm.
        sizes: per (task, model, depth): ``d_state``, ``layer_params`` and ``budget`` of the
            matched runs.
    """
    keyed_width = width.set_index(["task", "model", "depth"])
    keyed_sizes = sizes.set_index(["task", "model", "depth"])
    records, errors, counts = [], [], []
    for line in matched.itertuples(index=False):
        key = (line.task, line.model, line.depth)
        size = keyed_sizes.loc[key] if key in keyed_sizes.index else None
        other = keyed_width.loc[key] if key in keyed_width.index else None
        regression = bool(line.regression)
        column, se_column = ("loss", "loss_se") if regression else ("test", "test_se")
        records.append({
            "Task": labels.task(line.task), "Model": labels(line.model, line.depth),
            "layer parameters (budget)": (
                f"{int(size['layer_params'])} ({int(size['budget'])})" if size is not None
                else "–"),
            "state size": int(size["d_state"]) if size is not None else math.nan,
            "test metric, matched": getattr(line, column),
            "test metric, equal width": other[column] if other is not None else math.nan,
            "n seeds": int(line.n),
        })
        errors.append({"test metric, matched": getattr(line, se_column),
                       "test metric, equal width": (other[se_column] if other is not None
                                                    else math.nan)})
        counts.append({"test metric, matched": float(line.n),
                       "test metric, equal width": (float(other["n"]) if other is not None
                                                    else math.nan)})
    frame = pd.DataFrame.from_records(records).set_index(["Task", "Model"])
    se = pd.DataFrame.from_records(errors, index=frame.index)
    se["layer parameters (budget)"] = math.nan
    se["state size"] = math.nan
    se["n seeds"] = math.nan
    se = se[frame.columns]
    regression_labels = {labels.task(t) for t in matched.loc[matched["regression"], "task"]}
    metric_columns = ["test metric, matched", "test metric, equal width"]
    return Table(
        name="accuracy_matched",
        title=TITLES["accuracy_matched"],
        caption=_MATCHED_CAPTION + scale,
        short_caption=(
            "Each model sized to one parameter budget per task (state size changed until one "
            "recurrent layer holds it within ±5 %), beside its equal-width result: test "
            f"accuracy (%), or MSE on regression tasks, at tuned learning rates; {_SPREAD}. "
            f"{_preset(scale)}"),
        n=pd.DataFrame.from_records(counts, index=frame.index),
        frame=frame,
        stderr=se,
        digits={"state size": 0, "n seeds": 0, **{c: PERCENT_DIGITS for c in metric_columns}},
        cell_formats=_by_row(frame.index, metric_columns,
                             [t in regression_labels
                              for t in frame.index.get_level_values("Task")]),
        runs=run_ids,
    )
