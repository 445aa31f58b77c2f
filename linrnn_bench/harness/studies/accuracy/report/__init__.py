"""Report section of the accuracy study: what each layer scores, against what, and how surely.

Selection follows the usual protocol: each run keeps the parameters of its best validation
step, and its test metric there is its result (select on validation, report on test). A task's
metric is test accuracy (%) for classification and test mean squared error for regression. A
(model, task) cell is the mean over the runs' seeds with its standard error

    mean = (1/n) sum_i a_i,    se = s / sqrt(n),    s^2 = (1/(n-1)) sum_i (a_i - mean)^2,

and n is stated beside it; with one seed there is no standard error. Diverged runs are not
averaged in; they are counted in the detail table. When the grid sweeps depth, each depth is
its own series.

Two configurations per cell: the **one recipe** (the preset's shared learning rates, the same
for every model) and the **tuned** one (on the tasks the preset tunes, the learning-rate pair
whose mean validation metric over seeds is best, `harness.studies.accuracy.select`: validation
only, then its test metric once per seed). Every table and figure shows the task's **trivial
baseline** (the training split's majority class, or its mean for regression, scored on test;
computed by the study from the data). The comparisons use `harness.stats` (on scipy.stats):
within a task, per-seed differences with their paired t interval, d_z, the exact sign-flip
p-value (paired t above ten seeds), Holm's correction over the task's pairs and the minimum
detectable difference; across tasks, the Friedman test with its tie correction and pairwise
Wilcoxon signed-rank tests with Holm, each claim checked under every way of breaking exact ties.

The section is a package by role: `_data` (which runs, from `harness.report.selection`; their
metric, baseline and labels), `_statistics` (each cell's mean; the comparisons, all from
`harness.stats`), `tables`, `figures` and `curves`, and `findings`; this module puts them in the
report's order.

Rows read from the store: the study's, as it declares them (`harness.studies.accuracy.COLUMNS`),
the ``kind="eval"`` rows (a learning-curve point) and the ``kind="final"`` rows (the result at
the selected step, the cost, the trivial baseline); and the run's config: ``cfg.network.layer``
(the model), ``cfg.network.depth``, ``cfg.task``, ``cfg.train.lr``, ``cfg.train.recurrent_lr``.
"""

from __future__ import annotations

import pandas as pd

from ....store import Store
from .... import stats as inference
from ....report.artifacts import Artifact, Finding, Missing, Section, all_missing
from ....report.selection import BUDGET, bracketing
from . import curves, figures, findings, tables
from ._data import (STATE, STUDY, TITLES, Labels, Selection, baselines, bracketing_text,
                    layer_parameters, left_out, load, matched_tasks, scale_text, tuning_text)
from ._statistics import (apart, design_lines, friedman_text, informative, pairs_text,
                          peaked_last, ranks, significance, summarise)

__all__ = ["INTRO", "SECTION", "STUDY", "TITLE", "build", "summarise"]

TITLE = "Accuracy"
INTRO = (
    "Each model is trained on each task, once per seed, with the same architecture, steps, "
    "batch size and schedule (only what a model's paper prescribes differs). Every few steps "
    "it is evaluated on the validation split; the parameters at the best validation metric "
    "are evaluated once on the test split, and that is the run's result. Two configurations "
    "are shown: the *one recipe*, the preset's shared learning rates for every model, and the "
    "*tuned* one: on the tasks the preset tunes, every model gets the same learning-rate grid "
    "(the shared and the recurrent rate, log-spaced), and the pair with the best mean "
    "validation metric over seeds is selected, on validation only. Seeds are paired: a seed "
    "fixes the data order for every model, so models are compared seed by seed. Every table "
    "and figure shows the task's trivial baseline (majority class or training mean), computed "
    "from the data, and a task counts as informative when some model beats it by more than "
    "three standard errors. Differences between models are stated with their size: the mean "
    "per-seed difference with its 95% interval, the effect size d_z, the p-value of an exact "
    "sign-flip test over the seeds (Holm's correction per task) and the smallest difference "
    "the design could detect; across tasks, the Friedman test and pairwise Wilcoxon "
    "signed-rank tests with Holm's correction. The findings state only what those tests "
    "support, and how large an effect could have been seen. These are small-scale runs on the "
    "project's machines unless the preset says otherwise; the papers' full-scale LRA numbers "
    "are in the next section, labelled as published."
)


# Not stated missing when the store holds no accuracy run: the findings, and the
# parameter-matched tables (which only a preset that sizes a task to a budget makes).
_NOT_LISTED_WHEN_EMPTY = ("accuracy_findings", "accuracy_design", "accuracy_matched",
                          "accuracy_matched_significance")


def build(store: Store) -> list[Artifact]:
    """The accuracy tables and figures for the largest-scale preset in the store, in the
    report's order (a table or figure that cannot be made is a `Missing` saying why)."""
    selection = load(store)
    if isinstance(selection, str):
        return all_missing({n: t for n, t in TITLES.items() if n not in _NOT_LISTED_WHEN_EMPTY},
                           selection)
    final, labels = selection.final, Labels(selection.runs)
    recipe_cells = summarise(selection.recipe_final, selection.runs_at("recipe"))
    base = baselines(final)
    scale = scale_text(final, selection.preset)
    tuned_tasks = selection.tuned_tasks
    bracketed = bracketing(store)
    tuning = tuning_text(tuned_tasks, sorted(final["task"].unique()), labels, bracketed)
    if selection.tuned_final.empty:
        return _without_held_out(selection, recipe_cells, base, labels, scale)
    tuned_cells = summarise(selection.tuned_final, selection.runs_at("tuned"))
    run_ids, tuned_ids = selection.run_ids(), selection.run_ids("tuned")
    out = _results(selection, recipe_cells, tuned_cells, base, labels, scale, tuning)
    is_informative = informative(recipe_cells, tuned_cells, base, labels)
    out.append(tables.informative_table(is_informative, labels, scale, run_ids))
    differences = significance(selection.tuned_final, labels)
    out.append(tables.significance_table(differences, labels, tuning, scale, tuned_ids))
    across = ranks(tuned_cells, labels)
    design = design_lines(differences, across, labels)
    if design:
        out.insert(0, Finding(name="accuracy_design", title=TITLES["accuracy_design"],
                              lines=tuple(design), runs=tuned_ids, design=True))
    out += _rank_artifacts(across, scale, tuned_ids)
    out.append(tables.detail_table(recipe_cells, tuned_cells, base, labels,
                                   scale + selection.note, run_ids))
    out += _matched_artifacts(store, selection.preset, tuned_cells, labels, tuning, scale)
    out.append(figures.by_task_figure(selection.tuned_final, tuned_cells, recipe_cells, base,
                                      labels, tuning + " " + scale, tuned_ids))
    out.append(curves.curves_figure(selection.evals, final, base, labels, scale))
    out.append(curves.sensitivity_figure(final, base, labels, tuned_tasks, scale, run_ids))
    out.append(figures.cost_figure(selection.tuned_final, base, labels, scale, tuned_ids))
    if recipe_cells[~recipe_cells["regression"]].empty:
        out.append(Missing("accuracy_vs_published", TITLES["accuracy_vs_published"],
                           "no classification task was run."))
    else:
        out.append(tables.versus_published(tuned_cells[~tuned_cells["regression"]], base,
                                           labels, scale, tuned_ids))
    out.append(findings.findings(is_informative, differences, across, tuned_tasks,
                                 left_out(selection.preset), labels, run_ids,
                                 bracketing_text(bracketed, labels),
                                 peaked_last(selection.tuned_final, selection.evals)))
    return out


# Why a store whose tuning used every seed has no tuned configuration to show.
NO_HELD_OUT = ("every seed of the tuned cells was trained at every learning-rate pair and took "
               "part in choosing it, so no seed is held out: a tuned mean or test would be "
               "over the very runs the selection favoured (set tuning_seeds below the number "
               "of seeds).")


def _without_held_out(selection: Selection, recipe_cells: pd.DataFrame,
                      base: dict[str, float], labels: Labels, scale: str) -> list[Artifact]:
    """The section of a store without held-out seeds: the one-recipe table, and every table
    and figure of the tuned configuration stated missing with `NO_HELD_OUT`."""
    classified = recipe_cells[~recipe_cells["regression"].astype(bool)]
    out: list[Artifact] = []
    if not classified.empty:
        out.append(tables.results_table(
            "accuracy_test", classified, base, labels,
            "the one shared recipe. " + scale + selection.note, selection.run_ids("recipe")))
    shown = {a.name for a in out}
    return out + [Missing(name, title, NO_HELD_OUT) for name, title in TITLES.items()
                  if name not in shown and name not in _NOT_LISTED_WHEN_EMPTY]


def _results(selection: Selection, recipe_cells: pd.DataFrame, tuned_cells: pd.DataFrame,
             base: dict[str, float], labels: Labels, scale: str, tuning: str) -> list[Artifact]:
    """The results tables: test accuracy at the one recipe and tuned, and the regression
    tasks' test MSE (each a `Missing` where no task of its kind was run)."""
    out: list[Artifact] = []
    classified = recipe_cells[~recipe_cells["regression"]]
    regression = sorted(recipe_cells.loc[recipe_cells["regression"], "task"].unique())
    aside = (
        f" Regression tasks ({labels.tasks_text(regression)}) have no accuracy; their test MSE "
        "is in the regression table." if regression else ""
    )
    no_class = "every task run is a regression task (no accuracy); see the regression table."
    if classified.empty:
        out.append(Missing("accuracy_test", TITLES["accuracy_test"], no_class))
        out.append(Missing("accuracy_tuned", TITLES["accuracy_tuned"], no_class))
    else:
        out.append(tables.results_table(
            "accuracy_test", classified, base, labels,
            "the one shared recipe. " + scale + aside + selection.note,
            selection.run_ids("recipe")))
        out.append(tables.results_table(
            "accuracy_tuned", tuned_cells[~tuned_cells["regression"]], base, labels,
            "each model's tuned learning rates. " + tuning + " " + scale + aside,
            selection.run_ids("tuned")))
    if regression:
        out.append(tables.regression_table(recipe_cells, tuned_cells, base, labels, scale,
                                           selection.run_ids()))
    else:
        out.append(Missing("accuracy_regression", TITLES["accuracy_regression"],
                           "no regression task was run."))
    return out


def _matched_artifacts(store: Store, preset: str | None, width: pd.DataFrame, labels: Labels,
                       tuning: str, scale: str) -> list[Artifact]:
    """The parameter-matched table and its pairwise comparisons; nothing for a preset that
    sizes no task to a budget and whose store holds no such run (the cpu preset: its report
    is about equal width), or why they are missing where the preset asks for them."""
    selection = load(store, "matched")
    if isinstance(selection, str):
        if not matched_tasks(preset):
            return []
        reason = (f"preset {preset} sizes {labels.tasks_text(matched_tasks(preset))} to a "
                  "common parameter budget, and the store holds none of those runs yet.")
        return [Missing(n, TITLES[n], reason)
                for n in ("accuracy_matched", "accuracy_matched_significance")]
    tuned = selection.tuned_final
    if tuned.empty:
        return [Missing(n, TITLES[n], NO_HELD_OUT)
                for n in ("accuracy_matched", "accuracy_matched_significance")]
    cells = summarise(tuned, selection.runs_at("tuned"))
    sizes = (tuned.assign(layer_params=layer_parameters(tuned), d_state=tuned[STATE],
                          budget=tuned[BUDGET])
             .groupby(["task", "model", "depth"], as_index=False)
             [["d_state", "layer_params", "budget"]].first())
    ids = selection.run_ids("tuned")
    arm = ("At a common parameter budget (the runs of the table accuracy_matched, each model "
           "at its own tuned learning rates in that arm). ")
    return [tables.matched_table(cells, sizes, width, labels, scale, ids),
            tables.significance_table(significance(tuned, labels), labels, tuning, scale, ids,
                                      name="accuracy_matched_significance", arm=arm)]


def _rank_artifacts(across: dict, scale: str, run_ids: tuple[str, ...]) -> list[Artifact]:
    """The table of ranks across tasks and its critical-difference diagram."""
    table = across["ranks"]
    if table.empty or table.shape[0] < 2:
        reason = ("fewer than two tasks with every model finished: ranks across tasks need at "
                  "least two.")
        return [Missing("accuracy_ranks", TITLES["accuracy_ranks"], reason),
                Missing("accuracy_cd", TITLES["accuracy_cd"], reason)]
    rank_table = tables.ranks_table(across, scale, run_ids)
    k = table.shape[1]
    if across["smallest_p"] > inference.ALPHA / max(k * (k - 1) // 2, 1):
        # A diagram that could never separate two models would only look like a result.
        return [rank_table, Missing(
            "accuracy_cd", TITLES["accuracy_cd"],
            f"with {table.shape[0]} tasks the exact Wilcoxon test's smallest p "
            f"({across['smallest_p']:.3g}) cannot reach the Holm level over the {k} models' "
            "pairs, so the diagram could separate none; the average ranks are in "
            "accuracy_ranks.")]
    stats_text = f"{friedman_text(across)} {pairs_text(across)}"
    return [rank_table, figures.cd_figure(rank_table.frame["average rank"], apart(across),
                                          table.shape[0], stats_text, run_ids)]


# The published LRA accuracies follow ours, beside the table they are read against.
SECTION = Section(STUDY, TITLE, INTRO, build, followed_by_published=True)
