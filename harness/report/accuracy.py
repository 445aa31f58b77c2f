"""Report section of the accuracy study: test accuracy at the best validation step, per cell.

Selection follows the usual protocol: each run keeps the parameters of its best validation
step, and its test accuracy there is its result (select on validation, report on test). A
(model, task) cell is the mean over the runs' seeds with its standard error

    mean = (1/n) sum_i a_i,    se = s / sqrt(n),    s^2 = (1/(n-1)) sum_i (a_i - mean)^2,

and n is stated beside it; with one seed there is no standard error. Diverged runs are not
averaged in (their accuracy is undefined); they are counted in the detail table. When the grid
sweeps depth, each depth is its own cell (a model at depth 2 and at depth 6 are never averaged).

Rows read from the store (written by `harness.train.train` through `harness.studies.accuracy`),
by ``kind``:
    ``"eval"``: ``step``, ``val_accuracy`` (a learning-curve point);
    ``"final"``: ``val_accuracy`` (the best), ``test_accuracy`` (at the best validation step),
    ``test_loss``, ``selection``, ``best_step``, ``params``, ``steps``, ``train_seconds``;
and the run's config: ``cfg.network.layer`` (the model), ``cfg.network.depth``, ``cfg.task``.
Accuracies are fractions in [0, 1]; tables and figures show percent. Regression tasks (selected
on validation loss, accuracy None) appear in the detail table with their test loss.
"""

from __future__ import annotations

import logging
import math

import matplotlib.pyplot as plt
from matplotlib.ticker import MaxNLocator
import numpy as np
import pandas as pd

from ..store import Store
from . import _published, style
from ._artifacts import Artifact, Figure, Missing, Table
from ..studies import PRESET_NAMES
from ._provenance import CUSTOM, in_preset, pick_preset, with_presets

log = logging.getLogger(__name__)

STUDY = "accuracy"
TITLE = "Accuracy"
INTRO = (
    "Each model is trained on each task with the same recipe (the accuracy study's preset "
    "fixes depth, width, state size, optimiser, schedule, batch size and number of steps for "
    "all models alike; only what a model's paper prescribes differs), once per seed. Every few "
    "steps the model is evaluated on the validation split; the parameters at the best "
    "validation accuracy are evaluated once on the test split, and that test accuracy is the "
    "run's result. Tables give the mean over seeds ± its standard error (sample standard "
    "deviation / sqrt(n)) with n, the number of seeds, stated; the best mean per task is in "
    "bold. These are small-scale runs on the project's machines unless the preset says "
    "otherwise: they compare the layers under one recipe, they do not reproduce the papers' "
    "full-scale LRA numbers (shown, labelled as published, in the next section)."
)

# Column names of the accuracy study's config and rows (one place to change if they move).
MODEL = "cfg.network.layer"
DEPTH = "cfg.network.depth"
WIDTH = "cfg.network.d_model"
STATE = "cfg.network.d_state"
TASK = "cfg.task"
BATCH = "cfg.train.batch_size"
KIND = "kind"
STEP = "step"
VAL = "val_accuracy"
BEST_VAL = "val_accuracy"  # on the final row: at the selected (best) step
TEST = "test_accuracy"
TEST_LOSS = "test_loss"
SELECTION = "selection"
PARAMS = "params"
STEPS = "steps"
WALL = "train_seconds"

NOT_RUN = "not run"  # status of a grid run the store does not hold yet

_NAMES = ("accuracy_test", "accuracy_detail", "accuracy_by_task", "accuracy_curves",
          "accuracy_vs_published")
_TITLES = ("Test accuracy (%) by task", "Accuracy, parameters and cost per model and task",
           "Test accuracy by task", "Validation accuracy during training",
           "Our accuracy beside the published LRA numbers")


def mean_se(values: pd.Series) -> tuple[float, float, int]:
    """``(mean, standard error, n)`` of the finite values; se is NaN when n < 2."""
    x = pd.to_numeric(values, errors="coerce").astype(float)
    x = x[np.isfinite(x)]
    n = int(x.size)
    if n == 0:
        return math.nan, math.nan, 0
    mean = float(x.mean())
    se = float(x.std(ddof=1) / math.sqrt(n)) if n > 1 else math.nan
    return mean, se, n


def _keys(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with plain ``model``, ``task`` and ``depth`` columns (depth 0 if not recorded)."""
    depth = (pd.to_numeric(frame[DEPTH], errors="coerce").fillna(0).astype(int)
             if DEPTH in frame.columns else 0)
    return frame.assign(model=frame[MODEL], task=frame[TASK], depth=depth)


def _selected(store: Store) -> tuple[pd.DataFrame, pd.DataFrame, str | None, str]:
    """Rows and runs of the largest-scale preset in the store, and a note on what was left out."""
    rows = store.read(STUDY)
    runs = store.runs(STUDY)
    if runs.empty:
        return rows, runs, None, ""
    runs = with_presets(runs, STUDY)
    preset = pick_preset(runs.loc[runs["status"] == "done", "preset"].unique())
    if preset is None:
        preset = pick_preset(runs["preset"].unique())
    keep = in_preset(runs["preset"], preset)
    left_out = runs[~keep]
    note = ""
    if not left_out.empty:
        found = sorted(left_out["preset"].astype(str).unique())
        custom = (
            "; custom: made with key=value overrides or by an earlier version of the grid"
            if CUSTOM in found else ""
        )
        note = (
            f" The store also holds {len(left_out)} run(s) outside preset {preset} "
            f"({', '.join(found)}{custom}), not shown: numbers of different configurations are "
            "never averaged together."
        )
    runs = runs[keep]
    if not rows.empty:
        rows = rows[rows["run_id"].isin(set(runs["run_id"]))]
    return rows, runs, preset, note


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
    final, runs = _keys(final), _keys(runs)
    pending = _pending(preset, set(store.recorded(STUDY)))
    if not pending.empty:
        runs = pd.concat([runs, pending], ignore_index=True)
    labels = _Labels(runs)
    cells = summarise(final, runs)
    scale = _scale_text(final, preset)
    classified = cells[~cells["regression"]]
    regression = sorted(cells.loc[cells["regression"], "task"].unique())
    aside = (
        f" Regression tasks ({', '.join(regression)}) have no accuracy; their test loss is in "
        "the detail table." if regression else ""
    )
    run_ids = tuple(sorted(final["run_id"].unique()))
    class_runs = tuple(sorted(final.loc[final["task"].isin(set(classified["task"])), "run_id"]))
    out: list[Artifact] = []
    no_class = "every task run is a regression task (no accuracy); see the detail table."
    if classified.empty:
        out.append(Missing(_NAMES[0], _TITLES[0], no_class))
    else:
        out.append(_test_table(classified, labels, scale + aside + note, class_runs))
    out.append(_detail_table(cells, labels, scale + note, run_ids))
    if classified.empty:
        out.append(Missing(_NAMES[2], _TITLES[2], no_class))
    else:
        out.append(_by_task_figure(final, classified, labels, scale + aside, class_runs))
    evals = rows[rows[KIND] == "eval"] if KIND in rows.columns else rows.iloc[0:0]
    if not evals.empty and VAL in evals.columns:
        evals = _keys(evals[pd.to_numeric(evals[VAL], errors="coerce").notna()])
    if evals.empty or VAL not in evals.columns:
        out.append(Missing(_NAMES[3], _TITLES[3], "the runs recorded no validation accuracy."))
    else:
        out.append(_curves_figure(evals, labels, scale, tuple(sorted(evals["run_id"].unique()))))
    if classified.empty:
        out.append(Missing(_NAMES[4], _TITLES[4], "no classification task was run."))
    else:
        out.append(_versus_published(classified, labels, scale, class_runs))
    return out


def _pending(preset: str | None, recorded: set[str]) -> pd.DataFrame:
    """The runs of ``preset``'s grid that the store does not hold yet, with status "not run".

    They keep their cells in the tables (counted, shown as a dash), so a model whose runs have
    not been made is visibly absent rather than silently left out.
    """
    columns = ["run_id", "status", "model", "task", "depth"]
    if preset not in PRESET_NAMES:
        return pd.DataFrame(columns=columns)
    from .. import studies

    try:
        study = studies.get(STUDY)
        specs = study.grid(study.config(preset))
        records = [
            (study.run_id(s), NOT_RUN, s.network.layer, s.task, int(s.network.depth))
            for s in specs
        ]
    except Exception as e:  # the tables still render; only the "not run" counts are lost
        log.warning("the accuracy grid at preset %r cannot be built (%s: %s); runs not yet "
                    "made are not counted", preset, type(e).__name__, e)
        return pd.DataFrame(columns=columns)
    return pd.DataFrame([r for r in records if r[0] not in recorded], columns=columns)


def _all_missing(reason: str) -> list[Artifact]:
    return [Missing(n, t, reason) for n, t in zip(_NAMES, _TITLES)]


class _Labels:
    """Names and order of the series (a model, or a model at one depth when depth is swept)."""

    def __init__(self, final: pd.DataFrame):
        self.multi_depth = final["depth"].nunique() > 1

    def __call__(self, model: str, depth: int) -> str:
        name = style.model_label(model)
        return f"{name} (depth {depth})" if self.multi_depth else name

    @staticmethod
    def order(*frames: pd.DataFrame) -> list[tuple[str, int]]:
        """The (model, depth) pairs of ``frames``: models in report order, then by depth."""
        pairs = {p for frame in frames for p in zip(frame["model"], frame["depth"])}
        rank = {m: i for i, m in enumerate(style.order_models(m for m, _ in pairs))}
        return sorted(pairs, key=lambda p: (rank[p[0]], p[1]))


def summarise(final: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """One line per (task, model, depth): mean and se of test and best-val accuracy (%), test loss.

    ``n`` is the number of finished runs (seeds) in the cell; ``diverged``, ``failed`` and
    ``not_run`` (status `NOT_RUN`: in the grid, not yet in the store) count its other runs; ``regression`` marks a task selected on loss (no accuracy).

    Arguments:
        final: the ``"final"`` rows of finished runs (one per run), with ``model``, ``task``
            and ``depth`` columns (see `_keys`).
        runs: every run of the same preset (any status), with the same key columns.
    """
    records = []
    # Cells come from every run, so a cell whose runs all diverged or failed still has a line
    # (n = 0, its runs counted) instead of silently vanishing from the tables.
    for task in sorted(set(final["task"]) | set(runs["task"])):
        of_task = final[final["task"] == task]
        task_regression = (
            SELECTION in of_task.columns and not of_task.empty
            and bool((of_task[SELECTION] == "loss").all())
        )
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
            })
    return pd.DataFrame.from_records(records)


def _seed_mean(cell: pd.DataFrame, column: str) -> float:
    """The mean over a cell's seeds of a column (parameter count, steps, time); NaN if absent.

    Seeds of one cell share the architecture and the schedule, so parameters and steps are equal
    across them; were they not, the mean is shown, as the detail table's caption says.
    """
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


def _test_table(
    cells: pd.DataFrame, labels: _Labels, scale: str, run_ids: tuple[str, ...]
) -> Table:
    order = _Labels.order(cells)
    index = pd.Index([labels(m, d) for m, d in order], name="Model")
    tasks = sorted(cells["task"].unique())
    keyed = cells.set_index(["model", "depth", "task"])

    def grid(column: str) -> pd.DataFrame:
        values = [[keyed[column].get((m, d, t), math.nan) for t in tasks] for m, d in order]
        return pd.DataFrame(values, index=index, columns=tasks)

    mean, se, n = grid("test"), grid("test_se"), grid("n")
    low, high = int(np.nanmin(n.to_numpy())), int(np.nanmax(n.to_numpy()))
    n_text = (
        f"n = {low} seed{'s' if low != 1 else ''} per cell" if low == high
        else f"n = {low} to {high} seeds per cell"
    )
    if low == 0:
        n_text += ("; – marks a cell without a finished run, whose diverged, failed or not yet "
                   "made runs are counted in the detail table")
    return Table(
        name=_NAMES[0],
        title=_TITLES[0],
        caption=(
            f"Test accuracy (%) at the best validation step, mean ± standard error over seeds "
            f"({n_text}; no ± where n = 1). Best mean per task in bold. {scale}"
        ),
        frame=mean,
        stderr=se,
        best={c: "max" for c in mean.columns},
        digits=1,
        runs=run_ids,
    )


def _detail_table(
    cells: pd.DataFrame, labels: _Labels, scale: str, run_ids: tuple[str, ...]
) -> Table:
    frame = pd.DataFrame({
        "Task": cells["task"],
        "Model": [labels(m, d) for m, d in zip(cells["model"], cells["depth"])],
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
    }).set_index(["Task", "Model"])
    se = pd.DataFrame({
        "test acc. (%)": cells["test_se"].to_numpy(),
        "best val. acc. (%)": cells["val_se"].to_numpy(),
        "test loss": cells["loss_se"].to_numpy(),
    }, index=frame.index)
    return Table(
        name=_NAMES[1],
        title=_TITLES[1],
        caption=(
            "Per (task, model): test accuracy at the selected step, the best validation accuracy "
            "(%) and the test loss at the selected step (cross-entropy, or mean squared error "
            "for regression tasks, which are selected on validation loss), each the mean ± "
            "standard error over the n finished seeds; runs that diverged or failed, and runs of "
            "the preset's grid not made yet, are counted, not averaged; parameters of the whole network (encoder, blocks, head), training "
            "steps and training time per run (s: the training loop with its validation passes, "
            "on the hardware named in the provenance; a run that shared the cores with others, "
            "as `make report` runs two at once, took longer than it would alone: the provenance "
            f"records concurrent_runs), each the mean over seeds. {scale}"
        ),
        frame=frame,
        stderr=se,
        digits={c: 3 if c == "test loss" else 1 for c in frame.columns},
        runs=run_ids,
    )


_HATCHES = ("", "///", "...", "xxx", "\\\\\\")


def _by_task_figure(
    final: pd.DataFrame,
    cells: pd.DataFrame,
    labels: _Labels,
    scale: str,
    run_ids: tuple[str, ...],
) -> Figure:
    style.apply_style()
    empty = cells[cells["test"].isna()]
    cells = cells[cells["test"].notna()]
    tasks = sorted(cells["task"].unique())
    series = _Labels.order(cells)
    depths = sorted(cells["depth"].unique())
    width = 0.8 / len(series)
    fig, ax = plt.subplots(figsize=style.figsize("full" if len(tasks) > 3 else "column", 0.5))
    for j, (model, depth) in enumerate(series):
        offset = (j - (len(series) - 1) / 2) * width
        mine = cells[(cells["model"] == model) & (cells["depth"] == depth)].set_index("task")
        present = [t for t in tasks if t in mine.index]
        xs = [tasks.index(t) + offset for t in present]
        ax.bar(
            xs, mine.loc[present, "test"].to_numpy(), width=width * 0.9,
            color=style.model_colour(model), hatch=_HATCHES[depths.index(depth) % len(_HATCHES)],
            edgecolor="white", linewidth=0.0, label=labels(model, depth),
            yerr=mine.loc[present, "test_se"].fillna(0.0).to_numpy(), capsize=2,
            error_kw={"elinewidth": 0.8},
        )
        # Each seed's accuracy as a dot, spread evenly across the bar (no random jitter, so the
        # figure's bytes stay a function of the store).
        for x, task in zip(xs, present):
            chosen = (final["model"] == model) & (final["depth"] == depth) & (final["task"] == task)
            seeds = 100.0 * pd.to_numeric(final.loc[chosen, TEST], errors="coerce").dropna()
            spread = np.linspace(-0.25, 0.25, seeds.size) * width if seeds.size > 1 else [0.0]
            ax.plot(x + np.asarray(spread), seeds.to_numpy(), linestyle="none",
                    marker=style.model_marker(model), markersize=2.5, markerfacecolor="white",
                    markeredgecolor="black", markeredgewidth=0.5)
    ax.set_xticks(range(len(tasks)), tasks)
    ax.set_xlabel("Task")
    ax.set_ylabel("Test accuracy (%)")
    ax.set_ylim(0, 100)
    ax.legend(ncol=min(len(series), 4), loc="lower center", bbox_to_anchor=(0.5, 1.0))
    return Figure(
        name=_NAMES[2],
        title=_TITLES[2],
        caption=(
            "Test accuracy (%) at the best validation step per task (bars: mean over seeds; "
            "error bars: ± one standard error; dots: the individual seeds). "
            + _no_bar_text(empty, labels) + scale
        ),
        figure=fig,
        runs=run_ids,
    )


def _no_bar_text(empty: pd.DataFrame, labels: _Labels) -> str:
    if empty.empty:
        return ""
    missing = ", ".join(f"{labels(m, d)} on {t}"
                        for t, m, d in zip(empty["task"], empty["model"], empty["depth"]))
    return f"No bar for {missing}: no finished run (see the detail table). "


def _curves_figure(
    evals: pd.DataFrame, labels: _Labels, scale: str, run_ids: tuple[str, ...]
) -> Figure:
    style.apply_style()
    tasks = sorted(evals["task"].unique())
    ncols = min(3, len(tasks))
    nrows = math.ceil(len(tasks) / ncols)
    fig, axes = plt.subplots(nrows, ncols, squeeze=False,
                             figsize=(style.FULL_WIDTH_IN if ncols > 1 else style.COLUMN_WIDTH_IN,
                                      2.2 * nrows))
    for ax in axes.flat[len(tasks):]:
        ax.set_visible(False)
    linestyles = ("-", "--", ":", "-.")
    depths = sorted(evals["depth"].unique())
    for ax, task in zip(axes.flat, tasks):
        of_task = evals[evals["task"] == task]
        for model, depth in _Labels.order(of_task):
            curve = (
                of_task[(of_task["model"] == model) & (of_task["depth"] == depth)]
                .assign(acc=lambda f: 100.0 * pd.to_numeric(f[VAL], errors="coerce"))
                .groupby(STEP)["acc"]
                .agg(["mean", "std", "count"])
                .sort_index()
            )
            se = (curve["std"] / np.sqrt(curve["count"])).fillna(0.0)
            colour = style.model_colour(model)
            ax.plot(curve.index, curve["mean"], color=colour, label=labels(model, depth),
                    linestyle=linestyles[depths.index(depth) % len(linestyles)],
                    marker=style.model_marker(model), markersize=2.0)
            ax.fill_between(curve.index, curve["mean"] - se, curve["mean"] + se, color=colour,
                            alpha=0.2, linewidth=0)
        ax.set_title(task)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("Training step (optimiser updates)")
        ax.set_ylabel("Validation accuracy (%)")
    axes.flat[0].legend(loc="lower right")
    return Figure(
        name=_NAMES[3],
        title=_TITLES[3],
        caption=(
            "Validation accuracy (%) at each evaluation step, mean over seeds (line) ± one "
            "standard error (band). " + scale
        ),
        figure=fig,
        runs=run_ids,
    )


def _versus_published(
    cells: pd.DataFrame, labels: _Labels, scale: str, run_ids: tuple[str, ...]
) -> Artifact:
    """Our accuracy beside the published LRA number, for our tasks that are LRA tasks."""
    lra = {t: _published.LRA_TASK_OF[t] for t in cells["task"].unique()
           if t in _published.LRA_TASK_OF}
    if not lra:
        return Missing(
            _NAMES[4],
            _TITLES[4],
            f"none of the tasks run ({', '.join(sorted(cells['task'].unique()))}) is an LRA "
            "task, so no published number applies; the published LRA table is in its own "
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
                "Task (ours)": task,
                "Model": labels(model, depth),
                "ours, test acc. (%)": float(mine["test"].iloc[0]),
                "n seeds": int(mine["n"].iloc[0]),
                "LRA task": lra_task,
                "PUBLISHED (%)": published.at[pub_row, lra_task] if pub_row else "not published",
                "published as": pub_row or "",
            })
            errors.append(float(mine["test_se"].iloc[0]))
    frame = pd.DataFrame.from_records(records).set_index(["Task (ours)", "Model"])
    frame["n seeds"] = frame["n seeds"].astype("Int64")
    se = pd.DataFrame({"ours, test acc. (%)": errors}, index=frame.index)
    return Table(
        name=_NAMES[4],
        title=_TITLES[4],
        caption=(
            "Our test accuracy (mean ± standard error over seeds) beside the PUBLISHED full-scale "
            "LRA accuracy of the same layer (sources in the published section; not measured by "
            "us). Ours were "
            f"run at a much smaller scale: {scale} Our generated tasks (listops, pathfinder, "
            "pathx) follow the LRA generators' rules at the sizes their task preset sets; they "
            "are not the LRA release. Our S4D is set beside S4D-Lin, the published variant of "
            "its default initialisation. The published column is for orientation, not a "
            "like-for-like comparison."
        ),
        frame=frame,
        stderr=se,
        digits=1,
        runs=run_ids,
    )
