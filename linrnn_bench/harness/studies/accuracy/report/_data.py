"""What the accuracy section reads from the store, and how it names what it shows.

`load` takes the runs that `harness.report.selection` picks (the preset the store holds most
completely; per cell, the one-recipe and the tuned learning rates, on validation only), adds
the runs of the preset's grid not made yet (status `NOT_RUN`, so a model whose runs are missing
is visibly absent), and returns them as a `Selection`, or the reason there is nothing to show.
`Labels` names and orders the series (a model, or a model at one depth when depth is swept) and
the tasks as papers write them.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd

from ....store import Store
from ... import PRESET_NAMES
from ... import _matched
from ... import accuracy as study
from ....report import artifacts, origins, style
from ....report.selection import (BUDGET, DEPTH, MODEL, TASK, with_keys, same_value, shown_runs,
                          configurations)

log = logging.getLogger(__name__)

STUDY = "accuracy"

# Column names of the accuracy study's config (dotted, as the store writes a run's config; the
# study owns the lr columns; the model's, depth's and task's are `selection`'s) and of its
# rows (the study's schema, `study.COLUMNS`).
WIDTH = "cfg.network.d_model"
STATE = "cfg.network.d_state"
LAYER = "cfg.network.layer"
OPTIONS = "cfg.network.layer_options"
TASK_COLUMN = "cfg.task"
DEPTH_COLUMN = "cfg.network.depth"
BATCH = "cfg.train.batch_size"
C = study.COLUMNS.names
KIND = C.kind
STEP = C.step
VAL = C.val_accuracy
VAL_LOSS = C.val_loss
BEST_VAL = C.val_accuracy  # on the final row: at the selected (best) step
BEST_STEP = C.best_step
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

TITLES = {
    "accuracy_test": "Test accuracy (%) by task, one shared recipe",
    "accuracy_tuned": "Test accuracy (%) by task, learning rates tuned per model",
    "accuracy_regression": "Test mean squared error on regression tasks",
    "accuracy_informative": "Is each task informative? The best model against the trivial baseline",
    "accuracy_significance": "Pairwise differences between models, per task",
    "accuracy_ranks": "Average rank across tasks",
    "accuracy_cd": "Critical-difference diagram of the average ranks (Wilcoxon-Holm)",
    "accuracy_detail": "Accuracy, parameters and cost per model and task",
    "accuracy_matched": "Test metric at a common parameter budget beside equal width",
    "accuracy_matched_significance": "Pairwise differences between models at a common "
                                     "parameter budget",
    "accuracy_by_task": "Test metric by task",
    "accuracy_curves": "Validation metric during training",
    "accuracy_sensitivity": "Validation metric against learning rate",
    "accuracy_cost": "Test metric against parameter count",
    "accuracy_vs_published": "Our accuracy beside the published LRA numbers",
    "accuracy_findings": "What the accuracy statistics support",
    "accuracy_design": "What the accuracy comparisons can decide at this preset",
}


class Labels:
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


@dataclasses.dataclass(frozen=True)
class Selection:
    """The runs the section shows, at one preset.

    Attributes:
        rows: every row of the shown runs (``kind`` ``"eval"`` and ``"final"``).
        final: the ``"final"`` rows of finished runs (one per run), keyed by
            `harness.report.selection.with_keys`, with the boolean columns ``recipe`` and
            ``tuned`` of `configurations`.
        runs: every run of the preset (any status, and `NOT_RUN` for the grid's runs the store
            lacks), keyed likewise.
        preset: the preset shown.
        note: a sentence on the store's runs outside that preset ("" when none).
    """

    rows: pd.DataFrame
    final: pd.DataFrame
    runs: pd.DataFrame
    preset: str | None
    note: str

    @property
    def recipe_final(self) -> pd.DataFrame:
        return self.final[self.final["recipe"]]

    @property
    def tuned_final(self) -> pd.DataFrame:
        return self.final[self.final["tuned"]]

    @property
    def evals(self) -> pd.DataFrame:
        """The learning-curve rows (``kind="eval"``)."""
        rows = self.rows
        return rows[rows[KIND] == "eval"] if KIND in rows.columns else rows.iloc[0:0]

    @property
    def tuned_tasks(self) -> list[str]:
        """The tasks trained at more than one learning-rate pair."""
        return sorted(t for t, of_task in self.final.groupby("task")
                      if of_task[["lr", "rlr"]].drop_duplicates().shape[0] > 1)

    def run_ids(self, configuration: str | None = None) -> tuple[str, ...]:
        """The finished runs shown, or those at ``configuration`` (``"recipe"``, ``"tuned"``)."""
        final = self.final if configuration is None else self.final[self.final[configuration]]
        return artifacts.run_ids(final)

    def runs_at(self, configuration: str) -> pd.DataFrame:
        """The runs (any status) at a cell's ``configuration`` rates.

        A finished run is kept when `configurations` marked it; an unfinished one (diverged,
        failed, not run) when its rates are those of a finished run so marked in its cell, so
        that its cell counts it; in a cell with no finished run, every unfinished run is kept.
        """
        final, runs = self.final, self.runs
        marked = set(final.loc[final[configuration], "run_id"])
        # A tuning seed's unfinished run is no more in the tuned configuration than its
        # finished ones are.
        tuning = ({(t, m, d, s) for t, m, d, s in final.loc[~final["held_out"], [
            "task", "model", "depth", "seed"]].itertuples(index=False)}
            if configuration == "tuned" and "seed" in runs.columns else set())
        pairs = {(t, m, d, a, b) for t, m, d, a, b in
                 final.loc[final[configuration], ["task", "model", "depth", "lr", "rlr"]]
                 .itertuples(index=False)}
        finished_cells = set(zip(final["task"], final["model"], final["depth"]))
        keep = []
        seeds = runs["seed"] if "seed" in runs.columns else pd.Series(np.nan, index=runs.index)
        for run_id, status, task, model, depth, a, b, seed in runs[
                ["run_id", "status", "task", "model", "depth", "lr", "rlr"]
        ].assign(seed=seeds).itertuples(index=False):
            if status == "done":
                keep.append(run_id in marked)
            elif (task, model, depth, seed) in tuning:
                keep.append(False)
            elif (task, model, depth) not in finished_cells:
                keep.append(True)
            else:
                keep.append(any(same_value(a, pa) and same_value(b, pb) for t, m, d, pa, pb in pairs
                                if (t, m, d) == (task, model, depth)))
        return runs[np.asarray(keep, dtype=bool)] if len(runs) else runs


def load(store: Store, arm: str = "width") -> Selection | str:
    """The shown runs of ``store``, or why the section has nothing to show.

    ``arm``: ``"width"``, the runs at equal width; ``"matched"``, the runs sized to a parameter
    budget (`harness.studies.accuracy.AccuracyConfig.match_parameters`) with, for a model
    already within the budget at equal width (whose matched runs are its equal-width ones),
    its equal-width runs.
    """
    rows, runs, preset, note = shown_runs(store, arm)
    if arm == "matched" and not runs.empty:
        rows, runs = _with_runs_within_budget(store, rows, runs)
    if runs.empty:
        return ("no runs of the accuracy study in the store "
                "(make report, or linrnn-bench report --run).")
    final = rows[rows[KIND] == "final"] if KIND in rows.columns else rows.iloc[0:0]
    if final.empty:
        counts = runs["status"].value_counts().to_dict()
        return (f"no finished accuracy run at preset {preset} (runs by status: "
                f"{', '.join(f'{k} {v}' for k, v in sorted(counts.items()))}).")
    lacking = [c for c in (MODEL, TASK, TEST, BEST_VAL) if c not in final.columns]
    if lacking:
        return (f"the accuracy study's rows lack the columns {lacking} that this section reads "
                "(the study and harness/studies/accuracy/report/ disagree on the row format).")
    final = configurations(with_keys(final).reset_index(drop=True))
    runs = with_keys(runs)
    pending = _pending(preset, set(store.recorded(STUDY)), arm)
    if not pending.empty:
        runs = pd.concat([runs, pending], ignore_index=True)
    return Selection(rows, final, runs, preset, note)


def layer_parameters(runs: pd.DataFrame) -> pd.Series:
    """One recurrent layer's trained parameters for each of ``runs`` (from its recorded layer,
    width, state size and options: `harness.studies._matched.layer_parameters`)."""
    def count(layer: str, d_model: int, d_state: int, options: Any) -> int:
        # The options as the store reads them back: a list of (name, value) pairs.
        pairs = tuple(tuple(p) for p in options) if isinstance(options, list) else ()
        return _matched.layer_parameters(layer, int(d_model), int(d_state), pairs)

    return pd.Series([count(*r) for r in runs[[LAYER, WIDTH, STATE, OPTIONS]].itertuples(
        index=False)], index=runs.index, dtype="Int64")


def _with_runs_within_budget(store: Store, rows: pd.DataFrame, runs: pd.DataFrame
                             ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``rows`` and ``runs`` of the matched arm, with the equal-width runs of every (model,
    task, depth) that has no matched run on a matched task and whose layer is within the
    task's budget (the grid trains no separate matched run for it)."""
    width_rows, width_runs, _, _ = shown_runs(store, "width")
    key = [TASK_COLUMN, DEPTH_COLUMN]
    budgets = runs.groupby(key)[BUDGET].first()
    matched_cells = set(zip(runs[LAYER], runs[TASK_COLUMN], runs[DEPTH_COLUMN]))
    candidates = width_runs[[(t, d) in budgets.index and (m, t, d) not in matched_cells
                             for m, t, d in zip(width_runs[LAYER], width_runs[TASK_COLUMN],
                                                width_runs[DEPTH_COLUMN])]]
    if candidates.empty:
        return rows, runs
    target = np.array([budgets[(t, d)] for t, d in zip(candidates[TASK_COLUMN],
                                                        candidates[DEPTH_COLUMN])], dtype=float)
    within = np.abs(layer_parameters(candidates).to_numpy(dtype=float) - target) <= (
        _matched.TOLERANCE * target)
    added = candidates[within].assign(**{BUDGET: target[within]})
    runs = pd.concat([runs, added], ignore_index=True)
    if not width_rows.empty:
        extra = width_rows[width_rows["run_id"].isin(set(added["run_id"]))]
        rows = pd.concat([rows, extra.assign(**{BUDGET: extra["run_id"].map(
            dict(zip(added["run_id"], added[BUDGET])))})], ignore_index=True)
    return rows, runs


def _pending(preset: str | None, recorded: set[str], arm: str = "width") -> pd.DataFrame:
    """The runs of ``preset``'s grid that the store does not hold yet, with status `NOT_RUN`.

    They keep their cells in the tables (counted, shown as a dash), so a model whose runs have
    not been made is visibly absent rather than silently left out.
    """
    columns = ["run_id", "status", "model", "task", "depth", "lr", "rlr", "cfg.task_options"]
    if preset not in PRESET_NAMES:
        return pd.DataFrame(columns=columns)
    from .... import studies

    try:
        grid_study = studies.get(STUDY)
        # The grid as its runs were made: grown where the store's selections asked for it.
        specs = grid_study.grid(origins._config_at(grid_study, preset))
        records = [
            (grid_study.run_id(s), NOT_RUN, s.network.layer, s.task, int(s.network.depth),
             float(s.train.lr), float(s.train.recurrent_lr), [list(o) for o in s.task_options])
            for s in specs if (s.parameter_budget is not None) == (arm == "matched")
        ]
    except Exception as e:  # the tables still render; only the "not run" counts are lost
        log.warning("the accuracy grid at preset %r cannot be built (%s: %s); runs not yet "
                    "made are not counted", preset, type(e).__name__, e)
        return pd.DataFrame(columns=columns)
    return pd.DataFrame([r for r in records if r[0] not in recorded], columns=columns)


def matched_tasks(preset: str | None) -> list[str]:
    """The tasks ``preset``'s grid also trains at a common parameter budget (none for a
    custom grid or one that cannot be built)."""
    if preset not in PRESET_NAMES:
        return []
    from .... import studies

    try:
        return list(studies.get(STUDY).config(preset).match_parameters)
    except Exception:  # the grid's own error is stated by the tables that need it
        return []


def left_out(preset: str | None) -> list[tuple[str, str]]:
    """The (task, reason) pairs the preset's grid leaves out, as the preset states them."""
    if preset not in PRESET_NAMES:
        return []
    from .... import studies

    try:
        return list(studies.get(STUDY).config(preset).left_out)
    except Exception as e:
        log.warning("the accuracy preset %r cannot be built (%s: %s)", preset, type(e).__name__,
                    e)
        return []


# --------------------------------------------------------------------------------------------
# A task's metric, its trivial baseline, and the sentences every caption shares


def is_regression(of_task: pd.DataFrame) -> bool:
    """Whether a task's runs were selected on loss (a regression task: no accuracy)."""
    return (SELECTION in of_task.columns and not of_task.empty
            and bool((of_task[SELECTION] == "loss").all()))


def metric(rows: pd.DataFrame, regression: bool, split: str = "test") -> np.ndarray:
    """Each run's metric on ``split`` (``"test"``, or ``"val"`` at the selected step) in its
    table's units: the loss (MSE) for a regression task, else the accuracy in percent."""
    accuracy, loss = (TEST, TEST_LOSS) if split == "test" else (BEST_VAL, VAL_LOSS)
    if regression:
        return pd.to_numeric(rows[loss], errors="coerce").to_numpy(dtype=float)
    return 100.0 * pd.to_numeric(rows[accuracy], errors="coerce").to_numpy(dtype=float)


def baselines(final: pd.DataFrame) -> dict[str, float]:
    """``{task: trivial baseline}`` in the task's units (accuracy % or MSE), from the runs'
    final rows (every run of a task computes the same number from the same data)."""
    out = {}
    for task, of_task in final.groupby("task"):
        column, scale = (BASE_LOSS, 1.0) if is_regression(of_task) else (BASE_ACC, 100.0)
        if column in of_task.columns:
            values = pd.to_numeric(of_task[column], errors="coerce").dropna()
            if not values.empty:
                out[task] = float(values.median()) * scale
    return out


def _distinct_ints(frame: pd.DataFrame, column: str) -> list[int]:
    if column not in frame.columns:
        return []
    return sorted({int(v) for v in pd.to_numeric(frame[column], errors="coerce").dropna()})


def scale_text(final: pd.DataFrame, preset: str | None) -> str:
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


def tuning_text(tuned: list[str], every: list[str], labels: Labels,
                bracketing: pd.DataFrame | None = None) -> str:
    """Which tasks were tuned, and whether each selected pair lies inside the rates tried
    (``bracketing``: `harness.report.selection.bracketing`), in sentences."""
    if not tuned:
        return ("No task of this preset is tuned: every model runs at the one recipe, so the "
                "tuned configuration is the one recipe.")
    rest = [t for t in every if t not in tuned]
    text = (f"Learning rates tuned per model on {labels.tasks_text(tuned)} (the same grid for "
            "every model, selected on the mean validation metric over "
            f"{_tuning_seeds(bracketing)})")
    text += (f"; {labels.tasks_text(rest)} at the one recipe (not tuned at this preset)."
             if rest else ".")
    return text + bracketing_text(bracketing, labels)


def _tuning_seeds(bracketing: pd.DataFrame | None) -> str:
    """Which seeds select a tuned cell's pair and which are compared, in words: the tuning
    seeds (those trained at every pair) choose it; the tuned configuration's test metrics are
    over the other seeds alone (`harness.report.selection.configurations`)."""
    if bracketing is None or bracketing.empty or "tuning_seeds" not in bracketing.columns:
        return "seeds"
    counts = " or ".join(str(n) for n in sorted({int(n) for n in bracketing["tuning_seeds"]}))
    totals = " or ".join(str(n) for n in sorted({int(n) for n in bracketing["seeds"]}))
    held = sorted({int(n) for n in bracketing["held_out"]})
    return (f"the tuning seeds ({counts} of the {totals} seeds at the selected pair, those "
            "trained at every pair; ties go to the smaller rates). A tuning seed is never in "
            "the tuned configuration: its test metrics and comparisons are over the held-out "
            f"seeds alone (n = {' or '.join(map(str, held))} per cell)")


def bracketing_text(bracketing: pd.DataFrame | None, labels: Labels) -> str:
    """Whether every tuned cell's selected pair lies inside the pairs it was trained at; the
    cells at an end named, with the end. Empty without tuned cells."""
    if bracketing is None or bracketing.empty:
        return ""
    ends = bracketing[~bracketing["bracketed"].astype(bool)]
    if ends.empty:
        return (" Every selected pair lies inside the rates its model was tried at (the "
                "optimum is bracketed; the grid grows at an end a model selects)."
                + _ties_text(bracketing, labels))
    named = "; ".join(
        f"{labels(r.model, r.depth)} on {labels.task(r.task)} at the {r.position} of "
        f"{r.pairs} pairs (shared rate {r.lr:g})" for r in ends.itertuples())
    return (f" Not bracketed, the optimum may lie beyond the rates tried: {named}."
            + _ties_text(bracketing, labels))


def _ties_text(bracketing: pd.DataFrame, labels: Labels) -> str:
    """The selections that the tie rule decided, named; empty when none was."""
    tied = bracketing[bracketing["tie"].astype(bool)] if "tie" in bracketing.columns else []
    if len(tied) == 0:
        return ""
    return (" Decided by the tie rule (equal mean validation metric; the smaller rates): "
            + "; ".join(f"{labels(r.model, r.depth)} on {labels.task(r.task)}"
                        for r in tied.itertuples()) + ".")
