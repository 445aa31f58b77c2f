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

Rows read from the store: the study's, as it declares them (`harness.studies.accuracy.COLUMNS`),
the ``kind="eval"`` rows (a learning-curve point) and the ``kind="final"`` rows (the result at
the selected step, the cost, the trivial baseline); and the run's config: ``cfg.network.layer``
(the model), ``cfg.network.depth``, ``cfg.task``, ``cfg.train.lr``, ``cfg.train.recurrent_lr``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Sequence

import matplotlib.pyplot as plt
from matplotlib import collections as mpl_collections
from matplotlib.ticker import MaxNLocator, NullFormatter
import numpy as np
import pandas as pd

from ..store import Store
from ..studies import PRESET_NAMES
from ..studies import accuracy as study
from .. import stats as inference
from . import _published, _stats, style
from ._artifacts import Artifact, Figure, Finding, Missing, Section, Table, all_missing
from ._selection import DEPTH, MODEL, TASK, _keys, _same, _selected, configurations

log = logging.getLogger(__name__)

STUDY = "accuracy"
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

# Column names of the accuracy study's config (dotted, as the store writes a run's config; the
# study owns the lr columns; the model's, depth's and task's are `_selection`'s) and of its
# rows (the study's schema, `study.COLUMNS`).
WIDTH = "cfg.network.d_model"
STATE = "cfg.network.d_state"
BATCH = "cfg.train.batch_size"
LR = study.LR
RECURRENT_LR = study.RECURRENT_LR
C = study.COLUMNS.names
KIND = C.kind
STEP = C.step
VAL = C.val_accuracy
VAL_LOSS = C.val_loss
BEST_VAL = C.val_accuracy  # on the final row: at the selected (best) step
TEST = C.test_accuracy
TEST_LOSS = C.test_loss
SELECTION = C.selection
PARAMS = C.params
STEPS = C.steps
WALL = C.train_seconds
COMPILE = C.compile_seconds
BASE_ACC = C.baseline_test_accuracy
BASE_LOSS = C.baseline_test_loss

NOT_RUN = "not run"  # status of a grid run the store does not hold yet
# How the tables show numbers (`harness.report._writers.FORMATS`): accuracy and its
# differences in percent (points) to one decimal, MSE in scientific notation with three
# significant digits (its values span decades), p-values as papers print them.
PERCENT_DIGITS = 1
MSE_FORMAT = "sci"
P_FORMAT = "p"


def _by_row(index: pd.Index, columns: Sequence[str], regression: Sequence[bool],
            otherwise: int | str = PERCENT_DIGITS) -> pd.DataFrame:
    """Per-cell formats of ``columns``: MSE's for a regression row, ``otherwise`` else."""
    formats = [MSE_FORMAT if r else otherwise for r in regression]
    return pd.DataFrame({c: formats for c in columns}, index=index, dtype=object)
Z_INFORMATIVE = 3.0  # a task is informative when a model beats its baseline by this many s.e.

_TITLES = {
    "accuracy_test": "Test accuracy (%) by task, one shared recipe",
    "accuracy_tuned": "Test accuracy (%) by task, learning rates tuned per model",
    "accuracy_regression": "Test mean squared error on regression tasks",
    "accuracy_informative": "Is each task informative? The best model against the trivial baseline",
    "accuracy_significance": "Pairwise differences between models, per task",
    "accuracy_ranks": "Average rank across tasks",
    "accuracy_cd": "Critical-difference diagram of the average ranks (Wilcoxon-Holm)",
    "accuracy_detail": "Accuracy, parameters and cost per model and task",
    "accuracy_by_task": "Test metric by task",
    "accuracy_curves": "Validation metric during training",
    "accuracy_sensitivity": "Validation metric against learning rate",
    "accuracy_cost": "Test metric against training time and parameter count",
    "accuracy_vs_published": "Our accuracy beside the published LRA numbers",
    "accuracy_findings": "What the accuracy statistics support",
}


def mean_se(values: pd.Series) -> tuple[float, float, int]:
    """``(mean, standard error, n)`` of the finite values; se is NaN when n < 2."""
    return _stats.mean_se(values)


# --------------------------------------------------------------------------------------------
# The section


def section(store: Store) -> list[Artifact]:
    """The accuracy tables and figures for the largest-scale preset in the store."""
    rows, runs, preset, note = _selected(store)
    if runs.empty:
        return _all_missing("no runs of the accuracy study in the store "
                            "(make report, or python -m harness report --run).")
    final = rows[rows[KIND] == "final"] if KIND in rows.columns else rows.iloc[0:0]
    if final.empty:
        counts = runs["status"].value_counts().to_dict()
        return _all_missing(
            f"no finished accuracy run at preset {preset} (runs by status: "
            f"{', '.join(f'{k} {v}' for k, v in sorted(counts.items()))})."
        )
    lacking = [c for c in (MODEL, TASK, TEST, BEST_VAL) if c not in final.columns]
    if lacking:
        return _all_missing(
            f"the accuracy study's rows lack the columns {lacking} that this section reads "
            "(the study and harness/report/accuracy.py disagree on the row format)."
        )
    final = configurations(_keys(final).reset_index(drop=True))
    runs = _keys(runs)
    pending = _pending(preset, set(store.recorded(STUDY)))
    if not pending.empty:
        runs = pd.concat([runs, pending], ignore_index=True)
    labels = _Labels(runs)
    recipe_final, tuned_final = final[final["recipe"]], final[final["tuned"]]
    recipe_cells = summarise(recipe_final, _runs_at(runs, final, "recipe"))
    tuned_cells = summarise(tuned_final, _runs_at(runs, final, "tuned"))
    baselines = _baselines(final)
    scale = _scale_text(final, preset)
    tuned_tasks = sorted(t for t, of_task in final.groupby("task")
                         if of_task[["lr", "rlr"]].drop_duplicates().shape[0] > 1)
    tuning = _tuning_text(tuned_tasks, sorted(final["task"].unique()), labels)
    classified = recipe_cells[~recipe_cells["regression"]]
    regression = sorted(recipe_cells.loc[recipe_cells["regression"], "task"].unique())
    aside = (
        f" Regression tasks ({labels.tasks_text(regression)}) have no accuracy; their test MSE "
        "is in the regression table." if regression else ""
    )
    run_ids = tuple(sorted(final["run_id"].unique()))
    recipe_ids = tuple(sorted(recipe_final["run_id"].unique()))
    tuned_ids = tuple(sorted(tuned_final["run_id"].unique()))
    out: list[Artifact] = []
    no_class = "every task run is a regression task (no accuracy); see the regression table."
    if classified.empty:
        out.append(Missing("accuracy_test", _TITLES["accuracy_test"], no_class))
        out.append(Missing("accuracy_tuned", _TITLES["accuracy_tuned"], no_class))
    else:
        out.append(_test_table("accuracy_test", classified, baselines, labels,
                               "the one shared recipe. " + scale + aside + note, recipe_ids))
        out.append(_test_table("accuracy_tuned", tuned_cells[~tuned_cells["regression"]],
                               baselines, labels,
                               "each model's tuned learning rates. " + tuning + " " + scale
                               + aside, tuned_ids))
    if regression:
        out.append(_regression_table(recipe_cells, tuned_cells, baselines, labels, scale,
                                     run_ids))
    else:
        out.append(Missing("accuracy_regression", _TITLES["accuracy_regression"],
                           "no regression task was run."))
    informative = _informative(recipe_cells, tuned_cells, baselines, labels)
    out.append(_informative_table(informative, labels, scale, run_ids))
    significance = _significance(tuned_final, labels)
    out.append(_significance_table(significance, labels, tuning, scale, tuned_ids))
    ranks = _ranks(tuned_cells, labels)
    out += _rank_artifacts(ranks, scale, tuned_ids)
    out.append(_detail_table(recipe_cells, tuned_cells, baselines, labels, scale + note,
                                run_ids))
    out.append(_by_task_figure(tuned_final, tuned_cells, recipe_cells, baselines, labels,
                               tuning + " " + scale, tuned_ids))
    evals = rows[rows[KIND] == "eval"] if KIND in rows.columns else rows.iloc[0:0]
    out.append(_curves_figure(evals, final, baselines, labels, scale))
    out.append(_sensitivity_figure(final, baselines, labels, tuned_tasks, scale, run_ids))
    out.append(_cost_figure(tuned_final, baselines, labels, scale, tuned_ids))
    if classified.empty:
        out.append(Missing("accuracy_vs_published", _TITLES["accuracy_vs_published"],
                           "no classification task was run."))
    else:
        out.append(_versus_published(tuned_cells[~tuned_cells["regression"]], baselines,
                                     labels, scale, tuned_ids))
    out.append(_findings(informative, significance, ranks, tuned_tasks, _left_out(preset),
                         labels, run_ids))
    return out


def _left_out(preset: str | None) -> list[tuple[str, str]]:
    """The (task, reason) pairs the preset's grid leaves out, as the preset states them."""
    if preset not in PRESET_NAMES:
        return []
    from .. import studies

    try:
        return list(studies.get(STUDY).config(preset).left_out)
    except Exception as e:
        log.warning("the accuracy preset %r cannot be built (%s: %s)", preset, type(e).__name__,
                    e)
        return []


def _runs_at(runs: pd.DataFrame, final: pd.DataFrame, configuration: str) -> pd.DataFrame:
    """The runs of ``runs`` (any status) at a cell's ``configuration`` rates.

    A finished run is kept when `configurations` marked it; an unfinished one (diverged,
    failed, not run) when its rates are those of a finished run so marked in its cell, so that
    its cell counts it; in a cell with no finished run, every unfinished run is kept.
    """
    marked = set(final.loc[final[configuration], "run_id"])
    pairs = {(t, m, d, a, b) for t, m, d, a, b in
             final.loc[final[configuration], ["task", "model", "depth", "lr", "rlr"]]
             .itertuples(index=False)}
    finished_cells = set(zip(final["task"], final["model"], final["depth"]))
    keep = []
    for run_id, status, task, model, depth, a, b in runs[
            ["run_id", "status", "task", "model", "depth", "lr", "rlr"]].itertuples(index=False):
        if status == "done":
            keep.append(run_id in marked)
        elif (task, model, depth) not in finished_cells:
            keep.append(True)
        else:
            keep.append(any(_same(a, pa) and _same(b, pb) for t, m, d, pa, pb in pairs
                            if (t, m, d) == (task, model, depth)))
    return runs[np.asarray(keep, dtype=bool)] if len(runs) else runs


def _pending(preset: str | None, recorded: set[str]) -> pd.DataFrame:
    """The runs of ``preset``'s grid that the store does not hold yet, with status "not run".

    They keep their cells in the tables (counted, shown as a dash), so a model whose runs have
    not been made is visibly absent rather than silently left out.
    """
    columns = ["run_id", "status", "model", "task", "depth", "lr", "rlr", "cfg.task_options"]
    if preset not in PRESET_NAMES:
        return pd.DataFrame(columns=columns)
    from .. import studies

    try:
        grid_study = studies.get(STUDY)
        specs = grid_study.grid(grid_study.config(preset))
        records = [
            (grid_study.run_id(s), NOT_RUN, s.network.layer, s.task, int(s.network.depth),
             float(s.train.lr), float(s.train.recurrent_lr), [list(o) for o in s.task_options])
            for s in specs
        ]
    except Exception as e:  # the tables still render; only the "not run" counts are lost
        log.warning("the accuracy grid at preset %r cannot be built (%s: %s); runs not yet "
                    "made are not counted", preset, type(e).__name__, e)
        return pd.DataFrame(columns=columns)
    return pd.DataFrame([r for r in records if r[0] not in recorded], columns=columns)


def _all_missing(reason: str) -> list[Missing]:
    return all_missing({n: t for n, t in _TITLES.items() if n != "accuracy_findings"}, reason)


def _tuning_text(tuned: list[str], every: list[str], labels: _Labels) -> str:
    if not tuned:
        return ("No task of this preset is tuned: every model runs at the one recipe, so the "
                "tuned configuration is the one recipe.")
    rest = [t for t in every if t not in tuned]
    text = (f"Learning rates tuned per model on {labels.tasks_text(tuned)} (the same grid for "
            "every model, selected on the mean validation metric over seeds)")
    return text + (f"; {labels.tasks_text(rest)} at the one recipe (not tuned at this preset)."
                   if rest else ".")


class _Labels:
    """Names and order of the series (a model, or a model at one depth when depth is swept)."""

    def __init__(self, final: pd.DataFrame):
        self.multi_depth = final["depth"].nunique() > 1
        # Tasks as papers write them, from the runs' task options ("ucr" -> its data set).
        self.tasks = style.task_labels(final, task="task")

    def __call__(self, model: str, depth: int) -> str:
        name = style.model_label(model)
        return f"{name} (depth {depth})" if self.multi_depth else name

    def task(self, key: str) -> str:
        """Task ``key`` as papers write it (`harness.report.style.task_labels`)."""
        return self.tasks.get(key) or style.task_label(key)

    def tasks_text(self, keys: Iterable[str]) -> str:
        """``keys`` as their labels, comma-separated."""
        return ", ".join(self.task(k) for k in keys)

    @staticmethod
    def order(*frames: pd.DataFrame) -> list[tuple[str, int]]:
        """The (model, depth) pairs of ``frames``: models in report order, then by depth."""
        pairs = {p for frame in frames for p in zip(frame["model"], frame["depth"])}
        rank = {m: i for i, m in enumerate(style.order_models(m for m, _ in pairs))}
        return sorted(pairs, key=lambda p: (rank[p[0]], p[1]))


def _is_regression(of_task: pd.DataFrame) -> bool:
    return (SELECTION in of_task.columns and not of_task.empty
            and bool((of_task[SELECTION] == "loss").all()))


def summarise(final: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """One line per (task, model, depth): mean and se of test and best-val accuracy (%), test loss.

    ``n`` is the number of finished runs (seeds) in the cell; ``diverged``, ``failed`` and
    ``not_run`` (status `NOT_RUN`: in the grid, not yet in the store) count its other runs;
    ``regression`` marks a task selected on loss (no accuracy); ``lr``/``rlr`` are the cell's
    learning rates when they are one pair.

    Arguments:
        final: the ``"final"`` rows of finished runs (one per run), with ``model``, ``task``
            and ``depth`` columns (see `_keys`).
        runs: every run of the same configuration (any status), with the same key columns.
    """
    records = []
    # Cells come from every run, so a cell whose runs all diverged or failed still has a line
    # (n = 0, its runs counted) instead of silently vanishing from the tables.
    for task in sorted(set(final["task"]) | set(runs["task"])):
        of_task = final[final["task"] == task]
        task_regression = _is_regression(of_task)
        for model, depth in _Labels.order(of_task, runs[runs["task"] == task]):
            cell = of_task[(of_task["model"] == model) & (of_task["depth"] == depth)]
            test, test_se, _ = mean_se(100.0 * pd.to_numeric(cell[TEST], errors="coerce"))
            val, val_se, _ = mean_se(100.0 * pd.to_numeric(cell[BEST_VAL], errors="coerce"))
            loss, loss_se, _ = (
                mean_se(cell[TEST_LOSS]) if TEST_LOSS in cell.columns else (math.nan,) * 3
            )
            regression = task_regression or (
                SELECTION not in of_task.columns and not cell.empty and math.isnan(test)
            )
            of_cell = runs[(runs["model"] == model) & (runs["task"] == task)
                           & (runs["depth"] == depth)]
            pairs = (cell[["lr", "rlr"]].drop_duplicates() if "lr" in cell.columns
                     else pd.DataFrame())
            records.append({
                "task": task,
                "model": model,
                "depth": depth,
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
            })
    return pd.DataFrame.from_records(records, columns=_CELL_COLUMNS)


_CELL_COLUMNS = ["task", "model", "depth", "test", "test_se", "val", "val_se", "loss", "loss_se",
                 "regression", "n", "diverged", "failed", "not_run", "params", "steps", "wall_s",
                 "lr", "rlr"]


def _score(cells: pd.DataFrame) -> pd.Series:
    """The cell's metric in its table's units: accuracy (%), or test MSE for regression."""
    return cells["loss"].where(cells["regression"], cells["test"])


def _score_se(cells: pd.DataFrame) -> pd.Series:
    return cells["loss_se"].where(cells["regression"], cells["test_se"])


def _baselines(final: pd.DataFrame) -> dict[str, float]:
    """``{task: trivial baseline}`` in the task's units (accuracy % or MSE), from the runs'
    final rows (every run of a task computes the same number from the same data)."""
    out = {}
    for task, of_task in final.groupby("task"):
        column, scale = (BASE_LOSS, 1.0) if _is_regression(of_task) else (BASE_ACC, 100.0)
        if column in of_task.columns:
            values = pd.to_numeric(of_task[column], errors="coerce").dropna()
            if not values.empty:
                out[task] = float(values.median()) * scale
    return out


def _seed_mean(cell: pd.DataFrame, column: str) -> float:
    """The mean over a cell's seeds of a column (parameter count, steps, time); NaN if absent."""
    if column not in cell.columns:
        return math.nan
    return float(pd.to_numeric(cell[column], errors="coerce").mean())


def _distinct_ints(frame: pd.DataFrame, column: str) -> list[int]:
    if column not in frame.columns:
        return []
    return sorted({int(v) for v in pd.to_numeric(frame[column], errors="coerce").dropna()})


def _scale_text(final: pd.DataFrame, preset: str | None) -> str:
    """One sentence: the preset and the sizes that make it small or large."""
    parts = []
    for column, what in ((DEPTH, "depth"), (WIDTH, "width H"), (STATE, "state size"),
                         (STEPS, "training steps"), (BATCH, "batch size")):
        values = _distinct_ints(final, column)
        if values:
            parts.append(f"{what} {'/'.join(map(str, values))}")
    seeds = _distinct_ints(final, "seed")
    sizes = f" ({', '.join(parts)})" if parts else ""
    return (
        f"Preset {preset}{sizes}; seeds {', '.join(map(str, seeds)) or 'none recorded'} "
        "(n per cell in the detail table)."
    )


# --------------------------------------------------------------------------------------------
# Tables

_BASELINE_ROW = "Trivial baseline"


def _test_table(
    name: str, cells: pd.DataFrame, baselines: dict[str, float], labels: _Labels,
    what: str, run_ids: tuple[str, ...],
) -> Table:
    order = _Labels.order(cells)
    tasks = sorted(cells["task"].unique())
    keyed = cells.set_index(["model", "depth", "task"])

    def grid(column: str) -> pd.DataFrame:
        values = [[keyed[column].get((m, d, t), math.nan) for t in tasks] for m, d in order]
        return pd.DataFrame(values, index=pd.Index([labels(m, d) for m, d in order],
                                                    name="Model"),
                            columns=[labels.task(t) for t in tasks])

    mean, se, n = grid("test"), grid("test_se"), grid("n")
    low, high = int(np.nanmin(n.to_numpy())), int(np.nanmax(n.to_numpy()))
    n_text = (
        f"n = {low} seed{'s' if low != 1 else ''} per cell" if low == high
        else f"n = {low} to {high} seeds per cell"
    )
    if low == 0:
        n_text += ("; – marks a cell without a finished run, whose diverged, failed or not yet "
                   "made runs are counted in the detail table")
    if any(t in baselines for t in tasks):
        mean.loc[_BASELINE_ROW] = [baselines.get(t, math.nan) for t in tasks]
        se.loc[_BASELINE_ROW] = math.nan
    return Table(
        name=name,
        title=_TITLES[name],
        caption=(
            f"Test accuracy (%) at the best validation step, mean ± standard error over seeds "
            f"({n_text}; no ± where n = 1), for {what} Best mean per task in bold. "
            f"'{_BASELINE_ROW}': always the training split's most frequent class, scored on "
            "test (computed from the data)."
        ),
        frame=mean,
        stderr=se,
        best={c: "max" for c in mean.columns},
        digits=1,
        runs=run_ids,
    )


def _regression_table(
    recipe: pd.DataFrame, tuned: pd.DataFrame, baselines: dict[str, float], labels: _Labels,
    scale: str, run_ids: tuple[str, ...],
) -> Table:
    recipe, tuned = recipe[recipe["regression"]], tuned[tuned["regression"]]
    order = _Labels.order(recipe, tuned)
    tasks = sorted(set(recipe["task"]) | set(tuned["task"]))
    columns, ses, base = {}, {}, []
    for task in tasks:
        for what, cells in (("one recipe", recipe), ("tuned", tuned)):
            keyed = cells.set_index(["model", "depth", "task"])
            column = f"{labels.task(task)}, {what}"
            columns[column] = [keyed["loss"].get((m, d, task), math.nan) for m, d in order]
            ses[column] = [keyed["loss_se"].get((m, d, task), math.nan) for m, d in order]
            base.append(baselines.get(task, math.nan))
    index = pd.Index([labels(m, d) for m, d in order], name="Model")
    frame = pd.DataFrame(columns, index=index)
    se = pd.DataFrame(ses, index=index)
    frame.loc[_BASELINE_ROW] = base
    se.loc[_BASELINE_ROW] = math.nan
    return Table(
        name="accuracy_regression",
        title=_TITLES["accuracy_regression"],
        caption=(
            "Test mean squared error at the best validation step (selected on validation loss), "
            "mean ± standard error over seeds, at the one shared recipe and with tuned learning "
            f"rates; lower is better, best in bold. '{_BASELINE_ROW}': the training split's "
            f"mean as the prediction, scored on test. {scale}"
        ),
        frame=frame,
        stderr=se,
        best={c: "min" for c in frame.columns},
        digits=MSE_FORMAT,
        runs=run_ids,
    )


def _informative(recipe: pd.DataFrame, tuned: pd.DataFrame, baselines: dict[str, float],
                 labels: _Labels) -> pd.DataFrame:
    """Per task: the baseline and, per configuration, the best model and its margin over the
    baseline in standard errors; ``informative`` when some model's margin exceeds
    `Z_INFORMATIVE` in either configuration."""
    records = []
    for task in sorted(set(recipe["task"]) | set(tuned["task"])):
        record: dict[str, object] = {"task": task}
        regression = bool(recipe.loc[recipe["task"] == task, "regression"].any())
        record["metric"] = "test MSE (lower is better)" if regression else "test accuracy (%)"
        baseline = baselines.get(task, math.nan)
        record["baseline"] = baseline
        informative = False
        for what, cells in (("one recipe", recipe), ("tuned", tuned)):
            of_task = cells[cells["task"] == task].assign(score=_score, score_se=_score_se)
            of_task = of_task[of_task["n"] > 0]
            best_label, best, best_se, margin = "", math.nan, math.nan, math.nan
            if not of_task.empty:
                i = of_task["score"].idxmin() if regression else of_task["score"].idxmax()
                top = of_task.loc[i]
                best_label = labels(top["model"], top["depth"])
                best, best_se = float(top["score"]), float(top["score_se"])
                gain = (baseline - best) if regression else (best - baseline)
                margin = gain / best_se if best_se > 0 else (
                    math.inf if gain > 0 else math.nan)
                informative |= bool(margin > Z_INFORMATIVE)
            record[f"best, {what}"] = best_label
            record[f"{what}: mean"] = best
            record[f"{what}: se"] = best_se
            record[f"{what}: margin (s.e.)"] = margin
        record["informative"] = ("yes" if informative else "no") if math.isfinite(baseline) \
            else "unknown"
        records.append(record)
    return pd.DataFrame.from_records(records)


def _informative_table(informative: pd.DataFrame, labels: _Labels, scale: str,
                       run_ids: tuple[str, ...]) -> Table:
    informative = informative.assign(task=[labels.task(t) for t in informative["task"]])
    frame = informative.set_index("task").drop(
        columns=[c for c in informative.columns if c.endswith(": se")])
    se = pd.DataFrame(index=frame.index, columns=frame.columns, dtype=float)
    for what in ("one recipe", "tuned"):
        se[f"{what}: mean"] = informative.set_index("task")[f"{what}: se"]
    frame.index.name = "Task"
    return Table(
        name="accuracy_informative",
        title=_TITLES["accuracy_informative"],
        caption=(
            "Per task: its trivial baseline (majority class of the training split, or its mean "
            "for regression, scored on test), and for each configuration the model with the "
            "best mean test metric, that mean ± its standard error over seeds, and its margin "
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
    )


def _metric(rows: pd.DataFrame, regression: bool, split: str = "test") -> np.ndarray:
    """Each run's metric on ``split`` (``"test"``, or ``"val"`` at the selected step) in its
    table's units: the loss (MSE) for a regression task, else the accuracy in percent."""
    accuracy, loss = (TEST, TEST_LOSS) if split == "test" else (BEST_VAL, VAL_LOSS)
    if regression:
        return pd.to_numeric(rows[loss], errors="coerce").to_numpy(dtype=float)
    return 100.0 * pd.to_numeric(rows[accuracy], errors="coerce").to_numpy(dtype=float)


def _seed_scores(final: pd.DataFrame, task: str, labels: _Labels) -> pd.DataFrame:
    """One column per series (model, depth), one row per seed: the test metric of the task."""
    of_task = final[final["task"] == task]
    frame = of_task.assign(value=_metric(of_task, _is_regression(of_task)),
                           series=[labels(m, d) for m, d in zip(of_task["model"],
                                                                of_task["depth"])])
    table = frame.pivot_table(index="seed", columns="series", values="value", aggfunc="mean")
    order = [labels(m, d) for m, d in _Labels.order(of_task)]
    return table.reindex(columns=[c for c in order if c in table.columns])


_SIGNIFICANCE_COLUMNS = ["task", "first", "second", *inference.Comparison.__dataclass_fields__,
                         "m", "p_holm", "significant", "better", "mdd_family", "regression"]


def _significance(final: pd.DataFrame, labels: _Labels) -> pd.DataFrame:
    """Every task's pairwise paired comparisons (`harness.stats.pairwise`), one family per
    task."""
    frames = []
    for task in sorted(final["task"].unique()):
        scores = _seed_scores(final, task, labels)
        if scores.shape[1] < 2:
            continue
        pairs = inference.pairwise(scores, higher_is_better=not _is_regression(
            final[final["task"] == task]))
        frames.append(pairs.assign(task=task, regression=_is_regression(
            final[final["task"] == task])))
    if not frames:
        return pd.DataFrame(columns=_SIGNIFICANCE_COLUMNS)
    return pd.concat(frames, ignore_index=True)[_SIGNIFICANCE_COLUMNS]


def _significance_table(significance: pd.DataFrame, labels: _Labels, tuning: str, scale: str,
                        run_ids: tuple[str, ...]) -> Artifact:
    name = "accuracy_significance"
    if significance.empty:
        return Missing(name, _TITLES[name], "no task has two models with finished runs.")
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
        "MDD (paired t)": significance["mdd_t"],
    }).set_index(["Task", "Pair"])
    smallest = ", ".join(f"n = {n}: {inference.smallest_sign_flip_p(n):.3g}"
                         for n in sorted({int(n) for n in significance["n"] if n >= 2}
                                         ) if n <= inference.EXACT_MAX_N)
    return Table(
        name=name,
        title=_TITLES[name],
        caption=(
            "For each task, every pair of models at their tuned learning rates, paired by seed: "
            "the mean of the per-seed differences in test metric (first − second; accuracy in "
            "percentage points, or MSE), its 95% paired t interval, the effect size d_z (mean "
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
            "t)' is what a paired t-test at 5% could detect. A 'no' is absence of evidence, "
            f"not evidence of equality, when the difference is below the MDD. {tuning} {scale}"
        ),
        frame=frame,
        digits={"difference": PERCENT_DIGITS, "95% CI low": PERCENT_DIGITS,
                "95% CI high": PERCENT_DIGITS, "d_z": 2, "p": P_FORMAT, "p (Holm)": P_FORMAT,
                "MDD": PERCENT_DIGITS, "MDD (Holm)": PERCENT_DIGITS,
                "MDD (paired t)": PERCENT_DIGITS},
        cell_formats=_by_row(frame.index, ["difference", "95% CI low", "95% CI high", "MDD",
                                           "MDD (Holm)", "MDD (paired t)"],
                             [bool(r) for r in significance["regression"]]),
        runs=run_ids,
    )


def _ranks(cells: pd.DataFrame, labels: _Labels) -> dict[str, object]:
    """Per-task ranks of the series' mean test metric and the tests across tasks
    (`harness.stats.across_tasks`)."""
    cells = cells[cells["n"] > 0]
    if cells.empty:
        return {"ranks": pd.DataFrame()}
    scores = cells.assign(score=_score, series=[labels(m, d) for m, d in
                                                zip(cells["model"], cells["depth"])])
    table = scores.pivot_table(index="task", columns="series", values="score", aggfunc="mean")
    order = [labels(m, d) for m, d in _Labels.order(cells)]
    table = table.reindex(columns=[c for c in order if c in table.columns]).dropna(axis=0)
    if table.empty or table.shape[1] < 2:
        return {"ranks": pd.DataFrame()}
    higher = {labels.task(t): not bool(cells.loc[cells["task"] == t, "regression"].any())
              for t in table.index}
    table.index = [labels.task(t) for t in table.index]
    out = inference.across_tasks(table, higher)
    out["ranks"] = _stats.average_ranks(table, higher)
    return out


def _friedman_text(ranks: dict) -> str:
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


def _pairs_text(ranks: dict) -> str:
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


def _rank_artifacts(ranks: dict, scale: str, run_ids: tuple[str, ...]) -> list[Artifact]:
    table: pd.DataFrame = ranks["ranks"]  # type: ignore[assignment]
    if table.empty or table.shape[0] < 2:
        reason = ("fewer than two tasks with every model finished: ranks across tasks need at "
                  "least two.")
        return [Missing("accuracy_ranks", _TITLES["accuracy_ranks"], reason),
                Missing("accuracy_cd", _TITLES["accuracy_cd"], reason)]
    frame = table.T.copy()
    frame.index.name = "Model"
    frame["average rank"] = table.mean(axis=0)
    n_tasks = table.shape[0]
    stats_text = f"{_friedman_text(ranks)} {_pairs_text(ranks)}"
    caption = (
        "Rank of each model's mean test metric on each task (1 = best; ties share the mean "
        "rank), at the tuned learning rates, and the average rank over tasks (lower is "
        f"better, best in bold). {stats_text} {scale}"
    )
    rank_table = Table(name="accuracy_ranks", title=_TITLES["accuracy_ranks"], caption=caption,
                       frame=frame, best={"average rank": "min"}, digits=2, runs=run_ids)
    pairs = ranks.get("pairs")
    apart = set()
    if isinstance(pairs, pd.DataFrame) and not pairs.empty:
        apart = {frozenset((r.first, r.second)) for r in pairs.itertuples() if r.significant}
    return [rank_table, _cd_figure(frame["average rank"], apart, n_tasks, stats_text,
                                   run_ids)]


def _cd_figure(average: pd.Series, apart: set[frozenset], n_tasks: int, stats_text: str,
               run_ids: tuple[str, ...]) -> Figure:
    """Demšar's diagram: models on a rank axis, bars joining groups not significantly apart
    (as aeon draws it: a group is a run of consecutive models no two of which the
    Wilcoxon-Holm tests in ``apart`` separate)."""
    style.apply_style()
    k = len(average)
    order = average.sort_values()
    # Cliques: maximal runs of consecutive models no two of which are significantly apart.
    cliques, names = [], list(order.index)
    for i in range(k):
        j = i
        while j + 1 < k and not any(frozenset((names[m], names[j + 1])) in apart
                                    for m in range(i, j + 1)):
            j += 1
        if j > i and not any(a <= i and j <= b for a, b in cliques):
            cliques.append((i, j))
    # What is drawn: each model at its average rank, and the bars (numbered from the rank
    # axis down) it lies under.
    data = pd.DataFrame({
        "model": names,
        "average_rank": order.to_numpy(),
        "tasks": n_tasks,
        "bars": [" ".join(str(c + 1) for c, (i, j) in enumerate(cliques) if i <= m <= j)
                 for m in range(k)],
    })
    half = (k + 1) // 2
    fig, ax = plt.subplots(figsize=(style.COLUMN_WIDTH_IN, 0.9 + 0.22 * half))
    low, high = 1, max(k, 2)
    ax.set_xlim(low - 1.2, high + 1.2)
    top = 1.0
    ax.set_ylim(top - 0.25 * half - 0.15, top + 0.45)
    ax.axis("off")
    axis_y = top
    ax.plot([low, high], [axis_y, axis_y], color="black", linewidth=0.8)
    for r in range(low, high + 1):
        ax.plot([r, r], [axis_y, axis_y + 0.06], color="black", linewidth=0.8)
        ax.text(r, axis_y + 0.09, str(r), ha="center", va="bottom", fontsize=7)
    ranks_sorted = data["average_rank"].to_numpy()
    for i, (label, rank) in enumerate(zip(data["model"], ranks_sorted)):
        left = i < half
        y = axis_y - 0.25 * ((i if left else k - 1 - i) + 1)
        x_text = low - 0.15 if left else high + 0.15
        ax.plot([rank, rank, x_text], [axis_y, y, y], color="0.3", linewidth=0.7)
        ax.text(x_text - 0.05 if left else x_text + 0.05, y, f"{label} ({rank:.2f})",
                ha="right" if left else "left", va="center", fontsize=7)
    for c, (i, j) in enumerate(cliques):
        y = axis_y - 0.08 - 0.06 * c
        ax.plot([ranks_sorted[i] - 0.03, ranks_sorted[j] + 0.03], [y, y], color="black",
                linewidth=2.0)
    return Figure(
        name="accuracy_cd",
        title=_TITLES["accuracy_cd"],
        caption=(
            f"Average rank of each model over {n_tasks} tasks (tuned learning rates; 1 = best). "
            "A thick bar joins models no two of which the pairwise Wilcoxon signed-rank tests "
            "(Holm-adjusted, 5%, under every tie-break) separate: those are not significantly "
            f"apart. {stats_text}"
        ),
        figure=fig,
        runs=run_ids,
        data=data,
    )


def _detail_table(
    recipe: pd.DataFrame, tuned: pd.DataFrame, baselines: dict[str, float], labels: _Labels,
    scale: str, run_ids: tuple[str, ...],
) -> Table:
    frames, ses = [], []
    for what, cells in (("one recipe", recipe), ("tuned", tuned)):
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
        frames.append(frame)
        ses.append(pd.DataFrame({
            "test acc. (%)": cells["test_se"].to_numpy(),
            "best val. acc. (%)": cells["val_se"].to_numpy(),
            "test loss": cells["loss_se"].to_numpy(),
        }))
    tasks = sorted(set(recipe["task"]) | set(tuned["task"]))
    regression = set(recipe.loc[recipe["regression"], "task"])
    regression_labels = {labels.task(t) for t in regression}
    frames.append(pd.DataFrame({
        "Task": [labels.task(t) for t in tasks], "Model": _BASELINE_ROW,
        "configuration": "from the data",
        "test acc. (%)": [math.nan if t in regression else baselines.get(t, math.nan)
                          for t in tasks],
        "test loss": [baselines.get(t, math.nan) if t in regression else math.nan
                      for t in tasks],
    }))
    ses.append(pd.DataFrame(index=range(len(tasks)), columns=ses[0].columns, dtype=float))
    frame = pd.concat(frames, ignore_index=True)
    se = pd.concat(ses, ignore_index=True)
    frame = frame.set_index(["Task", "Model", "configuration"])
    se.index = frame.index
    order = frame.index.to_frame(index=False).reset_index().sort_values(
        ["Task", "index"], kind="stable")["index"].to_numpy()
    frame, se = frame.iloc[order], se.iloc[order]
    return Table(
        name="accuracy_detail",
        title=_TITLES["accuracy_detail"],
        caption=(
            "Per (task, model) and configuration (the one shared recipe, and the learning rates "
            "tuned on validation): its learning rates, test accuracy at the selected step, the "
            "best validation accuracy (%) and the test loss at the selected step "
            "(cross-entropy, or mean squared error for regression tasks, which are selected on "
            "validation loss), each the mean ± standard error over the n finished seeds; runs "
            "that diverged or failed, and runs of the preset's grid not made yet, are counted, "
            "not averaged; parameters of the whole network (encoder, blocks, head), training "
            "steps and training time per run (s: the training loop with its validation passes, "
            "on the hardware named in the provenance; a run that shared the cores with others, "
            "as `make report` runs two at once, took longer than it would alone: the provenance "
            f"records concurrent_runs), each the mean over seeds. '{_BASELINE_ROW}': the "
            "training split's majority class (test accuracy and cross-entropy of its class "
            f"frequencies) or its mean (MSE), scored on test. {scale}"
        ),
        frame=frame,
        stderr=se,
        digits={c: (3 if c == "test loss" else "g" if "lr" in c else 1) for c in frame.columns},
        cell_formats=_by_row(frame.index, ["test loss"],
                             [t in regression_labels
                              for t in frame.index.get_level_values("Task")], otherwise=3),
        runs=run_ids,
    )


# --------------------------------------------------------------------------------------------
# Figures


def _panels(n: int, height: float = 2.0, ncols: int = 4):
    ncols = max(1, min(ncols, n))
    nrows = math.ceil(n / ncols)
    fig, axes = plt.subplots(nrows, ncols, squeeze=False,
                             figsize=(style.FULL_WIDTH_IN if ncols > 1 else style.COLUMN_WIDTH_IN,
                                      height * nrows))
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return fig, axes


def _metric_label(regression: bool) -> str:
    return "Test MSE" if regression else "Test accuracy (%)"


def _baseline_line(ax, baseline: float | None, label: bool = True) -> None:
    if baseline is not None and math.isfinite(baseline):
        ax.axhline(baseline, color="black", linestyle="--", linewidth=0.8,
                   label="trivial baseline" if label else None)


def _interval(values: np.ndarray) -> tuple[float, float, float, int]:
    """``(mean, low, high, n)``: the 95 % t interval of the mean over seeds
    (`harness.stats.mean_interval`, t with n - 1 degrees of freedom); NaN bounds below 2."""
    return inference.mean_interval(values)


def _n_seeds_text(counts: Iterable[int]) -> str:
    """"n = 5 seeds" or "n = 3 to 5 seeds" for the seed counts of the drawn means."""
    found = sorted({int(n) for n in counts if n > 0})
    if not found:
        return "no finished seed"
    if found[0] == found[-1]:
        return f"n = {found[0]} seed{'s' if found[0] != 1 else ''}"
    return f"n = {found[0]} to {found[-1]} seeds"


def _zoom(ax, values: Sequence[float], baseline: float | None, regression: bool,
          title: str) -> bool:
    """Y limits around the drawn ``values`` (means, interval ends, seeds) rather than the full
    0-100 %, so that differences between models show; the trivial baseline is a dashed line when
    it lies within three spans of the data, else the panel's title names it as off scale (with
    the side it is on). Accuracy stays within [0, 100], MSE at or above 0. Returns whether
    the baseline is drawn."""
    v = np.asarray([x for x in values if x is not None and math.isfinite(x)], dtype=float)
    if v.size == 0:
        ax.set_title(title)
        return False
    low, high = float(v.min()), float(v.max())
    has_base = baseline is not None and math.isfinite(baseline)
    span = high - low
    inside = has_base and (max(high, baseline) - min(low, baseline)) <= 3.0 * max(span, 1e-12)
    if inside:
        low, high = min(low, baseline), max(high, baseline)
        span = high - low
    pad = 0.1 * span if span > 0 else (0.05 * abs(high) if high else 1.0)
    floor, ceiling = (0.0, math.inf) if regression else (0.0, 100.0)
    ax.set_ylim(max(floor, low - pad), min(ceiling, high + pad))
    if inside:
        _baseline_line(ax, baseline)
        ax.set_title(title)
    elif has_base:
        arrow = "\u2193" if baseline < low else "\u2191"  # the side the baseline lies on
        value = f"{baseline:.3g}" if regression else f"{baseline:.1f} %"
        ax.set_title(f"{title}\n{arrow} baseline {value}")
    else:
        ax.set_title(title)
    return bool(inside)


def _by_task_legend(fig) -> dict:
    """The by-task figure's legend, in grey (each model's colour is named on the x axis)."""
    from matplotlib.container import ErrorbarContainer
    from matplotlib.lines import Line2D

    grey = style.REFERENCE_COLOUR
    entries = {
        "mean, 95 % CI": ErrorbarContainer(
            (Line2D([], [], color=grey, marker="o", linestyle="none"), (),
             (mpl_collections.LineCollection([], color=grey),)), has_yerr=True),
        "seeds": Line2D([], [], color=grey, marker="o", markerfacecolor="white",
                        markersize=2.5, linestyle="none"),
    }
    if any(line.get_marker() == "_" for ax in fig.axes for line in ax.get_lines()):
        entries["one-recipe mean"] = Line2D([], [], color="black", marker="_", markersize=7,
                                            markeredgewidth=1.2, linestyle="none")
    entries.update(style.legend_entries(fig))  # the trivial baseline, where drawn
    return entries


def _by_task_figure(
    final: pd.DataFrame, cells: pd.DataFrame, recipe: pd.DataFrame,
    baselines: dict[str, float], labels: _Labels, scale: str, run_ids: tuple[str, ...],
) -> Artifact:
    name = "accuracy_by_task"
    cells = cells.assign(score=_score, score_se=_score_se)
    empty = cells[cells["score"].isna()]
    cells = cells[cells["score"].notna()]
    if cells.empty:
        return Missing(name, _TITLES[name], "no cell has a finished run.")
    style.apply_style()
    tasks = sorted(cells["task"].unique())
    fig, axes = _panels(len(tasks), 2.3)
    recipe = recipe.assign(score=_score)
    records, counts = [], []
    for ax, task in zip(axes.flat, tasks):
        of_task = cells[cells["task"] == task]
        regression = bool(of_task["regression"].any())
        series = _Labels.order(of_task)
        drawn: list[float] = []
        for j, (model, depth) in enumerate(series):
            chosen = ((final["model"] == model) & (final["depth"] == depth)
                      & (final["task"] == task))
            seeds = _metric(final.loc[chosen], regression)
            seed_runs = final.loc[chosen, "run_id"].to_numpy()[np.isfinite(seeds)]
            seeds = seeds[np.isfinite(seeds)]
            mean, low, high, n = _interval(seeds)
            counts.append(n)
            colour = style.model_colour(model)
            # The mean and its 95 % interval; the seeds to its right, the one-recipe mean to
            # its left: a zoomed axis has no zero for bars to stand on, so no bars.
            whisker = ([[mean - low], [high - mean]] if math.isfinite(low) else None)
            ax.errorbar(j, mean, yerr=whisker, fmt=style.model_marker(model), color=colour,
                        markersize=4.5, capsize=2.5, elinewidth=1.0, markeredgewidth=0.5,
                        markeredgecolor="black")
            spread = np.linspace(0.18, 0.34, seeds.size) if seeds.size > 1 else [0.26]
            ax.plot(j + np.asarray(spread)[:seeds.size], seeds, linestyle="none",
                    marker=style.model_marker(model), markersize=2.5, markerfacecolor="white",
                    markeredgecolor=colour, markeredgewidth=0.6)
            at_recipe = recipe[(recipe["model"] == model) & (recipe["depth"] == depth)
                               & (recipe["task"] == task)]
            one_recipe = (float(at_recipe["score"].iloc[0]) if not at_recipe.empty
                          else math.nan)
            if math.isfinite(one_recipe) and not math.isclose(one_recipe, mean):
                ax.plot(j - 0.26, one_recipe, marker="_", color="black", markersize=7,
                        markeredgewidth=1.2, linestyle="none")
            drawn += [mean, low, high, one_recipe, *seeds.tolist()]
            point = {"task": labels.task(task), "model": labels(model, depth),
                     "metric": _metric_label(regression)}
            records.append({**point, "mark": "mean", "run_id": "", "value": mean,
                            "ci95_low": low, "ci95_high": high, "n": n,
                            "one_recipe_mean": one_recipe})
            records += [{**point, "mark": "seed", "run_id": run, "value": v,
                         "ci95_low": math.nan, "ci95_high": math.nan, "n": 1,
                         "one_recipe_mean": math.nan}
                        for run, v in zip(seed_runs, seeds.tolist())]
        ax.set_xticks(range(len(series)), [labels(m, d) for m, d in series], rotation=30,
                      ha="right")
        ax.set_xlim(-0.6, len(series) - 0.4)
        ax.set_ylabel(_metric_label(regression))
        _zoom(ax, drawn, baselines.get(task), regression, labels.task(task))
    entries = _by_task_legend(fig)
    narrow = len(tasks) == 1 and len(entries) > 3  # a column-wide figure: two by two
    style.figure_legend(fig, entries, ncol=2 if narrow else None)
    return Figure(
        name=name,
        title=_TITLES[name],
        caption=(
            "Test metric per task at the tuned learning rates: the mean over seeds (filled "
            "marker) with its 95 % confidence interval (whiskers: Student's t with n - 1 "
            f"degrees of freedom, {_n_seeds_text(counts)} per model; none where n = 1), the "
            "individual seeds (open markers, right) and, where it differs, the mean at the one "
            "shared recipe (black dash, left). Each panel's axis is zoomed to its data: the "
            "trivial baseline (majority class, or the training mean for MSE) is the dashed line "
            "where it is near the data, else the panel's title gives its value and side. "
            + _no_bar_text(empty, labels) + scale
        ),
        figure=fig,
        runs=run_ids,
        data=pd.DataFrame.from_records(records),
    )


def _no_bar_text(empty: pd.DataFrame, labels: _Labels) -> str:
    if empty.empty:
        return ""
    missing = ", ".join(f"{labels(m, d)} on {labels.task(t)}"
                        for t, m, d in zip(empty["task"], empty["model"], empty["depth"]))
    return f"Nothing drawn for {missing}: no finished run (see the detail table). "


def _curves_figure(evals: pd.DataFrame, final: pd.DataFrame, baselines: dict[str, float],
                   labels: _Labels, scale: str) -> Artifact:
    name = "accuracy_curves"
    if evals.empty:
        return Missing(name, _TITLES[name], "the runs recorded no validation metric.")
    tuned_ids = set(final.loc[final["tuned"], "run_id"])
    evals = _keys(evals[evals["run_id"].isin(tuned_ids)])
    regression_tasks = {t for t, f in final.groupby("task") if _is_regression(f)}
    value = np.where(evals["task"].isin(regression_tasks),
                     pd.to_numeric(evals.get(VAL_LOSS, np.nan), errors="coerce"),
                     100.0 * pd.to_numeric(evals.get(VAL, np.nan), errors="coerce"))
    evals = evals.assign(value=value)
    evals = evals[np.isfinite(evals["value"])]
    if evals.empty:
        return Missing(name, _TITLES[name], "the runs recorded no validation metric.")
    style.apply_style()
    tasks = sorted(evals["task"].unique())
    fig, axes = _panels(len(tasks), 2.1, ncols=3)
    linestyles = ("-", "--", ":", "-.")
    depths = sorted(evals["depth"].unique())
    counts: list[int] = []
    data: list[pd.DataFrame] = []
    for ax, task in zip(axes.flat, tasks):
        of_task = evals[evals["task"] == task]
        metric = "Validation MSE" if task in regression_tasks else "Val. accuracy (%)"
        for model, depth in _Labels.order(of_task):
            mine = of_task[(of_task["model"] == model) & (of_task["depth"] == depth)]
            curve = pd.DataFrame.from_records(
                [_interval(group["value"].to_numpy()) for _, group in mine.groupby(STEP)],
                index=sorted(mine[STEP].unique()), columns=["mean", "low", "high", "n"])
            counts += curve["n"].tolist()
            data.append(pd.DataFrame({
                "task": labels.task(task), "model": labels(model, depth), "metric": metric,
                "step": curve.index, "mean": curve["mean"].to_numpy(),
                "ci95_low": curve["low"].to_numpy(), "ci95_high": curve["high"].to_numpy(),
                "n": curve["n"].to_numpy()}))
            colour = style.model_colour(model)
            ax.plot(curve.index, curve["mean"], color=colour, label=labels(model, depth),
                    linestyle=linestyles[depths.index(depth) % len(linestyles)],
                    marker=style.model_marker(model), markersize=2.0)
            # Drawn within the metric's range (MSE >= 0, accuracy in [0, 100]); the data keep
            # the t interval as computed.
            top = np.inf if task in regression_tasks else 100.0
            ax.fill_between(curve.index, curve["low"].fillna(curve["mean"]).clip(0.0, top),
                            curve["high"].fillna(curve["mean"]).clip(0.0, top), color=colour,
                            alpha=0.2, linewidth=0)
        _baseline_line(ax, baselines.get(task))
        ax.set_title(labels.task(task))
        ax.xaxis.set_major_locator(MaxNLocator(nbins=4, integer=True))
        ax.set_xlabel("Training step")
        ax.set_ylabel(metric)
    style.figure_legend(fig)
    return Figure(
        name=name,
        title=_TITLES[name],
        caption=(
            "Validation metric (accuracy %, or MSE for regression) at each evaluation step at "
            "the tuned learning rates: the mean over seeds (line) and its 95 % confidence "
            "interval (band: Student's t with n - 1 degrees of freedom, "
            f"{_n_seeds_text(counts)} per point; drawn within the metric's range, the CSV "
            "keeps it whole); dashed: the task's trivial baseline (scored "
            "on test). " + scale
        ),
        figure=fig,
        runs=tuple(sorted(evals["run_id"].unique())),
        data=pd.concat(data, ignore_index=True) if data else None,
    )


def _sensitivity_figure(final: pd.DataFrame, baselines: dict[str, float], labels: _Labels,
                        tuned_tasks: list[str], scale: str, run_ids: tuple[str, ...]
                        ) -> Artifact:
    name = "accuracy_sensitivity"
    if not tuned_tasks:
        return Missing(name, _TITLES[name],
                       "no task of this preset is tuned (the cpu-full preset tunes every task).")
    style.apply_style()
    fig, axes = _panels(len(tuned_tasks), 2.2, ncols=3)
    dashes = ("-", "--", ":", "-.")
    data = []
    for ax, task in zip(axes.flat, tuned_tasks):
        of_task = final[final["task"] == task]
        regression = _is_regression(of_task)
        of_task = of_task.assign(value=_metric(of_task, regression, "val"))
        metric = "Best val. MSE" if regression else "Best val. accuracy (%)"
        rlrs = sorted(of_task["rlr"].dropna().unique())
        # A paired grid moves both rates together (one shared rate per recurrent rate): its
        # points are one line per model, not one point per recurrent rate.
        paired = bool(of_task.groupby("rlr")["lr"].nunique().max() <= 1)
        for model, depth in _Labels.order(of_task):
            mine = of_task[(of_task["model"] == model) & (of_task["depth"] == depth)]
            curves = ([mine] if paired else [mine[mine["rlr"] == rlr] for rlr in rlrs])
            for i, rows in enumerate(curves):
                curve = rows.groupby("lr")["value"].mean().sort_index()
                if curve.empty:
                    continue
                # The recurrent rate of each point: the one of its line, or its pair's.
                rlr = (rows.groupby("lr")["rlr"].first().reindex(curve.index).to_numpy()
                       if paired else np.full(len(curve), rlrs[i]))
                data += [{"task": labels.task(task), "model": labels(model, depth),
                          "metric": metric, "mark": "line", "line": i + 1, "lr": lr,
                          "recurrent_lr": r, "mean": v}
                         for lr, r, v in zip(curve.index, rlr, curve.values)]
                ax.plot(curve.index, curve.values, color=style.model_colour(model),
                        linestyle=dashes[i % len(dashes)], marker=style.model_marker(model),
                        markersize=2.5, linewidth=0.9,
                        label=labels(model, depth) if i == 0 else None)
            chosen = mine[mine["tuned"]]
            if not chosen.empty:  # the selected rate, in the model's colour
                star = (chosen["lr"].iloc[0], chosen["value"].mean())
                data.append({"task": labels.task(task), "model": labels(model, depth),
                             "metric": metric, "mark": "selected", "line": None,
                             "lr": star[0], "recurrent_lr": chosen["rlr"].iloc[0],
                             "mean": star[1]})
                ax.plot(star[0], star[1], marker="*",
                        color=style.model_colour(model), markeredgecolor="black",
                        markeredgewidth=0.5, markersize=8, linestyle="none")
        _baseline_line(ax, baselines.get(task))
        ax.set_xscale("log")
        lrs = sorted(of_task["lr"].dropna().unique())
        ax.set_xticks(lrs, [f"{v:g}" for v in lrs])
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_title(labels.task(task))
        ax.set_xlabel("shared learning rate")
        ax.set_ylabel(metric)
        if paired:
            pairs = of_task.groupby("lr")["rlr"].first().sort_index()
            style_note = ("one line per model through the paired rates (shared / recurrent: "
                          + ", ".join(f"{a:g} / {b:g}" for a, b in pairs.items()) + ")")
        else:
            style_note = "one line per recurrent learning rate (line styles: " + ", ".join(
                f"{dashes[i % len(dashes)]} recurrent lr {r:g}" for i, r in enumerate(rlrs)) + ")"
    style.figure_legend(fig)
    return Figure(
        name=name,
        title=_TITLES[name],
        caption=(
            "Best validation metric of each model (mean over seeds) against the shared learning "
            f"rate, {style_note}; a star in the model's colour "
            "marks its selected pair; dashed: the trivial baseline. A flat line means the ranking hardly depends on tuning; a "
            "steep one, that a shared recipe can favour one model. " + scale
        ),
        figure=fig,
        runs=run_ids,
        data=(pd.DataFrame.from_records(data).astype({"line": "Int64"}) if data else None),
    )


def _cost_figure(final: pd.DataFrame, baselines: dict[str, float], labels: _Labels,
                 scale: str, run_ids: tuple[str, ...]) -> Artifact:
    name = "accuracy_cost"
    if final.empty or WALL not in final.columns:
        return Missing(name, _TITLES[name], "the runs recorded no training time.")
    style.apply_style()
    tasks = sorted(final["task"].unique())
    fig, axes = plt.subplots(2, len(tasks), squeeze=False, sharey="col",
                             figsize=(style.FULL_WIDTH_IN, 4.2))
    counts: list[int] = []
    data: list[dict] = []
    for column, task in enumerate(tasks):
        of_task = final[final["task"] == task]
        regression = _is_regression(of_task)
        of_task = of_task.assign(value=_metric(of_task, regression))
        wall = pd.to_numeric(of_task[WALL], errors="coerce")
        if COMPILE in of_task.columns:
            wall = wall - pd.to_numeric(of_task[COMPILE], errors="coerce").fillna(0.0)
        of_task = of_task.assign(_wall=wall.to_numpy())
        drawn: list[float] = []
        for row, (x_column, x_label) in enumerate((("_wall", "training time (s)"),
                                                    (PARAMS, "parameters (count)"))):
            ax = axes[row, column]
            for model, depth in _Labels.order(of_task):
                mine = of_task[(of_task["model"] == model) & (of_task["depth"] == depth)]
                x = pd.to_numeric(mine[x_column], errors="coerce")
                colour, marker = style.model_colour(model), style.model_marker(model)
                ax.plot(x, mine["value"], linestyle="none", marker=marker, color=colour,
                        markersize=2.5, alpha=0.45)
                mean, low, high, n = _interval(mine["value"].to_numpy())
                if row == 0:
                    counts.append(n)
                    drawn += [mean, low, high, *mine["value"].tolist()]
                x_mean = float(x.mean())
                point = {"task": labels.task(task), "model": labels(model, depth),
                         "x_axis": x_label, "metric": _metric_label(regression)}
                data += [{**point, "mark": "run", "run_id": run, "x": xv, "value": v,
                          "ci95_low": math.nan, "ci95_high": math.nan, "n": 1}
                         for run, xv, v in zip(mine["run_id"], x, mine["value"])]
                data.append({**point, "mark": "mean", "run_id": "", "x": x_mean,
                             "value": mean, "ci95_low": low, "ci95_high": high, "n": n})
                whisker = [[mean - low], [high - mean]] if math.isfinite(low) else None
                ax.errorbar(x_mean, mean, yerr=whisker, fmt=marker, color=colour,
                            markersize=4.5, capsize=2.5, elinewidth=1.0, markeredgewidth=0.5,
                            markeredgecolor="black", label=labels(model, depth))
            ax.set_xlabel(x_label)
            ax.set_ylabel(_metric_label(regression))
        if _zoom(axes[0, column], drawn, baselines.get(task), regression, labels.task(task)):
            _baseline_line(axes[1, column], baselines.get(task), label=False)
        axes[1, column].xaxis.set_major_locator(MaxNLocator(nbins=3))
    style.figure_legend(fig)
    return Figure(
        name=name,
        title=_TITLES[name],
        caption=(
            "Test metric at each model's tuned learning rates against its training time (top; "
            "the training loop with its validation passes, without the time XLA spent "
            "compiling where the run recorded it, on the hardware of the provenance; `make "
            "report` runs two at once, so they shared the cores) and against the network's "
            "parameter count (bottom): each seed's run (faint markers) and the mean over seeds "
            "with its 95 % confidence interval (bold marker and whiskers, at the mean time: "
            f"Student's t with n - 1 degrees of freedom, {_n_seeds_text(counts)} per model). "
            "Dashed: the trivial baseline, or its value and side in the title where it is far "
            "from the data (the axes are zoomed to the data). Up and to the left is better per "
            "second or per parameter (down for MSE). " + scale
        ),
        figure=fig,
        runs=run_ids,
        data=pd.DataFrame.from_records(data),
    )


def _versus_published(
    cells: pd.DataFrame, baselines: dict[str, float], labels: _Labels, scale: str,
    run_ids: tuple[str, ...],
) -> Artifact:
    """Our accuracy beside the published LRA number, for our tasks that are LRA tasks."""
    name = "accuracy_vs_published"
    lra = {t: _published.LRA_TASK_OF[t] for t in cells["task"].unique()
           if t in _published.LRA_TASK_OF}
    if not lra:
        return Missing(
            name,
            _TITLES[name],
            f"none of the tasks run ({labels.tasks_text(sorted(cells['task'].unique()))}) is an "
            "LRA task, so no published number applies; the published LRA table is in its own "
            "section.",
        )
    published = _published.accuracy_frame()
    row_of = {ours: pub for pub, ours in _published.OUR_MODEL_OF.items()}
    records, errors = [], []
    for task, lra_task in sorted(lra.items()):
        of_task = cells[cells["task"] == task]
        for model, depth in _Labels.order(of_task):
            mine = of_task[(of_task["model"] == model) & (of_task["depth"] == depth)]
            pub_row = row_of.get(model)
            records.append({
                "Task (ours)": labels.task(task),
                "Model": labels(model, depth),
                "ours, test acc. (%)": float(mine["test"].iloc[0]),
                "n seeds": int(mine["n"].iloc[0]),
                "LRA task": lra_task,
                "PUBLISHED (%)": published.at[pub_row, lra_task] if pub_row else "not published",
                "published as": pub_row or "",
            })
            errors.append(float(mine["test_se"].iloc[0]))
        records.append({"Task (ours)": labels.task(task), "Model": _BASELINE_ROW,
                        "ours, test acc. (%)": baselines.get(task, math.nan), "n seeds": None,
                        "LRA task": lra_task, "PUBLISHED (%)": "", "published as": ""})
        errors.append(math.nan)
    frame = pd.DataFrame.from_records(records).set_index(["Task (ours)", "Model"])
    frame["n seeds"] = frame["n seeds"].astype("Int64")
    se = pd.DataFrame({"ours, test acc. (%)": errors}, index=frame.index)
    return Table(
        name=name,
        title=_TITLES[name],
        caption=(
            "Our test accuracy at the tuned learning rates (mean ± standard error over seeds) "
            "beside the PUBLISHED full-scale LRA accuracy of the same layer (sources in the "
            "published section; not measured by us). Ours were "
            f"run at a much smaller scale: {scale} Our generated tasks (ListOps, Pathfinder, "
            "Path-X) follow the LRA generators' rules at the sizes their task preset sets; they "
            "are not the LRA release. Our S4D is set beside S4D-Lin, the published variant of "
            "its default initialisation. The published column is for orientation, not a "
            f"like-for-like comparison. '{_BASELINE_ROW}': our task's majority class."
        ),
        frame=frame,
        stderr=se,
        digits=1,
        runs=run_ids,
    )


# --------------------------------------------------------------------------------------------
# Findings: sentences computed from the statistics above, true whichever way the data fall


def _findings(informative: pd.DataFrame, significance: pd.DataFrame, ranks: dict,
              tuned_tasks: list[str], left_out: list[tuple[str, str]], labels: _Labels,
              run_ids: tuple[str, ...]) -> Finding:
    lines = []
    regression_tasks = set(informative.loc[informative["metric"].str.startswith("test MSE"),
                                           "task"])
    verdicts = dict(zip(informative["task"], informative["informative"]))
    good = [t for t, v in verdicts.items() if v == "yes"]
    flat = [t for t, v in verdicts.items() if v == "no"]
    unknown = [t for t, v in verdicts.items() if v == "unknown"]
    if good:
        lines.append(f"Informative tasks (some model beats the trivial baseline by more than "
                     f"{Z_INFORMATIVE:g} standard errors): {labels.tasks_text(good)}.")
    if flat:
        lines.append(f"Not informative (no model beats the trivial baseline by more than "
                     f"{Z_INFORMATIVE:g} standard errors, so their rankings are noise): "
                     f"{labels.tasks_text(flat)}.")
    if unknown:
        lines.append(f"No trivial baseline is recorded for {labels.tasks_text(unknown)} (runs made "
                     "before the study recorded it), so whether they are informative is not "
                     "stated.")
    for task, of_task in (significance.groupby("task") if not significance.empty else []):
        if task in flat:
            continue
        lines.append(_task_finding(labels.task(task), of_task,
                                   regression=task in regression_tasks))
    lines += _rank_findings(ranks)
    if not tuned_tasks:
        lines.append("No task was tuned at this preset, so these comparisons use one shared "
                     "recipe, which may favour one model's preferred learning rate.")
    if left_out:
        lines.append("Left out of this preset: " + "; ".join(f"{labels.task(task)} ({reason})"
                                                              for task, reason in left_out)
                     + ".")
    return Finding(name="accuracy_findings", title=_TITLES["accuracy_findings"],
                   lines=tuple(lines), runs=run_ids)


def _task_finding(task: str, of_task: pd.DataFrame, regression: bool) -> str:
    """One task's pairwise comparisons in a sentence: what is significant, and every pair's
    size, interval, d_z, Holm p and detectable difference, true whichever way they come out."""
    unit = "" if regression else " pp"
    n = int(of_task["n"].max()) if len(of_task) else 0
    if n < 2:
        return (f"On {task}, {n} paired seed{'s' if n != 1 else ''}: no difference between "
                "models can be tested (a comparison needs at least two seeds).")
    test = of_task["test"].iloc[0]
    m = int(of_task["m"].iloc[0])
    head = (f"On {task} ({n} paired seeds; {test} test, Holm over the task's {m} "
            f"pair{'s' if m != 1 else ''}, 5%): ")
    spec = ".3g" if regression else ".2f"
    pairs = "; ".join(_stats.comparison_text(r, unit, spec) for r in of_task.itertuples())
    return (head + _stats.family_verdict(of_task) + " Per pair (first − second, 95% CI, d_z, "
            "Holm p, the difference detectable with 80% power at 5% assuming normal "
            f"differences): {pairs}.")


def _rank_findings(ranks: dict) -> list[str]:
    """The ranking across tasks, and only the pairwise claims that hold under every tie-break."""
    table = ranks.get("ranks")
    if not isinstance(table, pd.DataFrame) or table.shape[0] < 2:
        return []
    average = table.mean(axis=0).sort_values()
    best = ", ".join(f"{m} {r:.2f}" for m, r in average.items())
    pairs = ranks.get("pairs")
    apart = (pairs[pairs["significant"]] if isinstance(pairs, pd.DataFrame) and not pairs.empty
             else pd.DataFrame())
    if apart.empty:
        verdict = ("no two models differ significantly across tasks (Wilcoxon signed-rank, "
                   "Holm, 5%, under every tie-break), so no overall ordering is supported.")
    else:
        verdict = "; ".join(
            f"{r.better} ranks better than {r.second if r.better == r.first else r.first} "
            f"(Wilcoxon-Holm p = {r.p_holm:.2g})" for r in apart.itertuples()) + (
            " (Wilcoxon signed-rank, Holm, 5%, under every tie-break).")
    text = (f"Across {table.shape[0]} tasks, average ranks (lower is better): {best}. "
            f"{_friedman_text(ranks)} Pairwise: {verdict}")
    if ranks["smallest_p"] > inference.ALPHA:
        text += (f" With {table.shape[0]} tasks the exact Wilcoxon test's smallest p is "
                 f"{ranks['smallest_p']:.3g}, so no pair could have reached 5%.")
    if ranks["weak"]:
        text += (f" A rank claim over fewer than five tasks is weak: each task is one "
                 "observation of the ordering.")
    return [text]


SECTION = Section(STUDY, TITLE, INTRO, section)
