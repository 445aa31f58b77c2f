"""The accuracy section's figures of results: the test metric per task, against the parameter
count, and the critical-difference diagram of the ranks (the figures over training and learning
rate are in `harness.studies.accuracy.report.curves`).

Each draws the means over seeds with their 95 % t intervals (`harness.stats.mean_interval`)
and the task's trivial baseline, and returns the numbers it draws as the figure's data.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib import collections as mpl_collections
from matplotlib.ticker import MaxNLocator

from .... import stats as inference
from ....report import style
from ....report.artifacts import Artifact, Figure, Missing
from ._data import PARAMS, TITLES, Labels, is_regression, metric
from ._statistics import score, score_se


def metric_label(regression: bool) -> str:
    return "Test MSE" if regression else "Test accuracy (%)"


def baseline_line(ax, baseline: float | None, label: bool = True) -> None:
    """The trivial baseline as a dashed line across ``ax`` (nothing when it is unknown)."""
    if baseline is not None and math.isfinite(baseline):
        ax.axhline(baseline, color="black", linestyle="--", linewidth=0.8,
                   label="trivial baseline" if label else None)


def _zoom(ax, values: Sequence[float], baseline: float | None, regression: bool,
          title: str) -> bool:
    """Y limits around the drawn ``values`` (means, interval ends, seeds) rather than the full
    0-100 %, so that differences between models show; the trivial baseline is a dashed line when
    it lies within three spans of the data, else the panel's title names it as off scale (with
    the side it is on). The axis stops at 0 below (accuracy and MSE); above 100 % it leaves
    room for a mark at 100 but no tick. Returns whether the baseline is drawn."""
    floor, ceiling = (0.0, math.inf) if regression else (0.0, 100.0)
    v = np.asarray([x for x in values if x is not None and math.isfinite(x)], dtype=float)
    v = np.clip(v, floor, ceiling)  # an interval past the metric's range runs off the axis
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
    ax.set_ylim(max(floor, low - pad), high + pad)
    if high + pad > ceiling:  # room for a mark at 100 %, but no tick above it
        ticks = [t for t in ax.get_yticks() if t <= ceiling + 1e-9]
        ax.set_yticks(ticks)
        ax.set_ylim(max(floor, low - pad), high + pad)
    if inside:
        baseline_line(ax, baseline)
        ax.set_title(title)
    elif has_base:
        arrow = "\u2193" if baseline < low else "\u2191"  # the side the baseline lies on
        value = f"{baseline:.3g}" if regression else f"{baseline:.1f} %"
        ax.set_title(f"{title}\n{arrow} baseline {value}")
    else:
        ax.set_title(title)
    return bool(inside)


def _mean_with_interval(ax, x: float, mean: float, low: float, high: float, model: str,
                        nudge: float = 0.0, **kwargs) -> None:
    """A series' mean over seeds as its marker, with its 95 % interval as whiskers (none where
    the interval is undefined, at n = 1), set ``nudge`` points to the side (`style.dodge`).
    A whisker past the metric's range (below 0, above 100 %) runs off the zoomed axis
    (`_zoom`)."""
    whisker = [[mean - low], [high - mean]] if math.isfinite(low) else None
    bar = ax.errorbar(x, mean, yerr=whisker, fmt=style.model_marker(model),
                      color=style.model_colour(model), markersize=4.5, capsize=2.5,
                      elinewidth=1.0, markeredgewidth=0.5, markeredgecolor="black", **kwargs)
    if nudge:
        style.dodge([bar], nudge)


# --------------------------------------------------------------------------------------------
# The test metric by task


def by_task_figure(final: pd.DataFrame, cells: pd.DataFrame, recipe: pd.DataFrame,
                   baselines: dict[str, float], labels: Labels, scale: str,
                   run_ids: tuple[str, ...]) -> Artifact:
    """Per task a panel: each series' mean with its interval and seeds at the tuned rates, and
    its one-recipe mean where that differs."""
    name = "accuracy_by_task"
    cells = cells.assign(score=score, score_se=score_se)
    empty = cells[cells["score"].isna()]
    cells = cells[cells["score"].notna()]
    if cells.empty:
        return Missing(name, TITLES[name], "no cell has a finished run.")
    style.apply_style()
    tasks = sorted(cells["task"].unique())
    fig, axes = style.panels(len(tasks), 2.3)
    recipe = recipe.assign(score=score)
    records, counts = [], []
    for ax, task in zip(axes.flat, tasks):
        regression = bool(cells.loc[cells["task"] == task, "regression"].any())
        series = Labels.order(cells[cells["task"] == task])
        drawn: list[float] = []
        for j, (model, depth) in enumerate(series):
            key = {"model": model, "depth": depth, "task": task}
            points, values = _by_task_series(ax, j, key, _rows_of(final, key),
                                              _rows_of(recipe, key), regression, labels)
            counts.append(points[0]["n"])
            drawn += values
            records += points
        ax.set_xticks(range(len(series)), [labels(m, d) for m, d in series], rotation=30,
                      ha="right")
        ax.set_xlim(-0.6, len(series) - 0.4)
        ax.set_ylabel(metric_label(regression))
        _zoom(ax, drawn, baselines.get(task), regression, labels.task(task))
    entries = _by_task_legend(fig)
    narrow = len(tasks) == 1 and len(entries) > 3  # a column-wide figure: two by two
    style.figure_legend(fig, entries, ncol=2 if narrow else None)
    return Figure(
        name=name,
        title=TITLES[name],
        caption=(
            "Test metric per task at the tuned learning rates: the mean over seeds (filled "
            "marker) with its 95 % confidence interval (whiskers: Student's t with n - 1 "
            f"degrees of freedom, {style.n_seeds_text(counts)} per model; none where n = 1; "
            "cut where they run past 0 or 100 %, the CSV keeps them whole), the "
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


def _rows_of(frame: pd.DataFrame, key: dict[str, object]) -> pd.DataFrame:
    """The rows of ``frame`` whose columns equal ``key``'s values."""
    chosen = np.ones(len(frame), dtype=bool)
    for column, value in key.items():
        chosen &= (frame[column] == value).to_numpy()
    return frame[chosen]


def _by_task_series(ax, j: int, key: dict, rows: pd.DataFrame, at_recipe: pd.DataFrame,
                    regression: bool, labels: Labels) -> tuple[list[dict], list[float]]:
    """One series (``key``: its model, depth and task) at position ``j`` of a by-task panel:
    ``rows`` its tuned runs' final rows, ``at_recipe`` its one-recipe cell. Returns the points
    drawn (the mean, then each seed) and every value drawn (for the panel's y limits)."""
    model, depth, task = key["model"], key["depth"], key["task"]
    seeds = metric(rows, regression)
    seed_runs = rows["run_id"].to_numpy()[np.isfinite(seeds)]
    seeds = seeds[np.isfinite(seeds)]
    mean, low, high, n = inference.mean_interval(seeds)
    # The mean and its 95 % interval; the seeds to its right, the one-recipe mean to its left:
    # a zoomed axis has no zero for bars to stand on, so no bars.
    _mean_with_interval(ax, j, mean, low, high, model)
    spread = np.linspace(0.18, 0.34, seeds.size) if seeds.size > 1 else [0.26]
    ax.plot(j + np.asarray(spread)[:seeds.size], seeds, linestyle="none",
            marker=style.model_marker(model), markersize=2.5, markerfacecolor="white",
            markeredgecolor=style.model_colour(model), markeredgewidth=0.6)
    one_recipe = float(at_recipe["score"].iloc[0]) if not at_recipe.empty else math.nan
    if math.isfinite(one_recipe) and not math.isclose(one_recipe, mean):
        ax.plot(j - 0.26, one_recipe, marker="_", color="black", markersize=7,
                markeredgewidth=1.2, linestyle="none")
    point = {"task": labels.task(task), "model": labels(model, depth),
             "metric": metric_label(regression)}
    points = [{**point, "mark": "mean", "run_id": "", "value": mean, "ci95_low": low,
               "ci95_high": high, "n": n, "one_recipe_mean": one_recipe}] + [
        {**point, "mark": "seed", "run_id": run, "value": v, "ci95_low": math.nan,
         "ci95_high": math.nan, "n": 1, "one_recipe_mean": math.nan}
        for run, v in zip(seed_runs, seeds.tolist())]
    return points, [mean, low, high, one_recipe, *seeds.tolist()]


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


def _no_bar_text(empty: pd.DataFrame, labels: Labels) -> str:
    if empty.empty:
        return ""
    missing = ", ".join(f"{labels(m, d)} on {labels.task(t)}"
                        for t, m, d in zip(empty["task"], empty["model"], empty["depth"]))
    return f"Nothing drawn for {missing}: no finished run (see the detail table). "


# --------------------------------------------------------------------------------------------
# The test metric against parameter count

_PARAMETERS = "parameters (count)"


def cost_figure(final: pd.DataFrame, baselines: dict[str, float], labels: Labels, scale: str,
                run_ids: tuple[str, ...]) -> Artifact:
    """Per task a panel: the test metric against the network's parameter count, each run and
    each series' mean with its interval.

    No panel against training time: the runs' wall-clock times were measured while other
    runs shared the machine's cores (`make report` trains two at once), so they measure the
    load as much as the model; the throughput study times each layer alone.
    """
    name = "accuracy_cost"
    if final.empty or PARAMS not in final.columns:
        return Missing(name, TITLES[name], "the runs recorded no parameter count.")
    style.apply_style()
    tasks = sorted(final["task"].unique())
    fig, axes = style.panels(len(tasks), 2.3)
    counts: list[int] = []
    data: list[dict] = []
    for ax, task in zip(axes.flat, tasks):
        of_task = final[final["task"] == task]
        regression = is_regression(of_task)
        of_task = of_task.assign(value=metric(of_task, regression))
        points, values = _cost_panel(ax, task, of_task, regression, labels)
        data += points
        counts += [p["n"] for p in points if p["mark"] == "mean"]
        ax.margins(x=0.2)  # room for the marks set to the side of the first and last counts
        ax.set_xlabel(_PARAMETERS)
        ax.set_ylabel(metric_label(regression))
        _zoom(ax, values, baselines.get(task), regression, labels.task(task))
        ax.xaxis.set_major_locator(MaxNLocator(nbins=3))
    style.figure_legend(fig)
    return Figure(
        name=name,
        title=TITLES[name],
        caption=(
            "Test metric at each model's tuned learning rates against the network's parameter "
            "count: each seed's run (open markers, set a few points right of its model's "
            "count) and the mean over seeds with its 95 % confidence interval (filled marker "
            "and whiskers: Student's t with n - 1 degrees of freedom, "
            f"{style.n_seeds_text(counts)} per model; cut where they run past 0 or 100 %, the "
            "CSV keeps them whole); models with nearly equal counts are set "
            "a few points apart in the legend's order. Dashed: the trivial baseline, or its "
            "value and side in the title where it is far from the data (the axes are zoomed "
            "to the data). Up and to the left is better per parameter (down for MSE). "
            "Training time is not drawn: the runs' wall-clock times were measured while other "
            "runs shared the machine's cores, so they measure its load as much as the model "
            "(the throughput section times each layer alone). " + scale
        ),
        figure=fig,
        runs=run_ids,
        data=pd.DataFrame.from_records(data),
    )


def _cost_panel(ax, task: str, of_task: pd.DataFrame, regression: bool, labels: Labels
                ) -> tuple[list[dict], list[float]]:
    """One panel of the cost figure: every series' runs (open markers, beside it) and its
    mean with its interval at its parameter count, the series set apart by a few points.
    Returns the points drawn (per series its runs, then its mean) and every value drawn (for
    the panel's y limits)."""
    data, drawn = [], []
    series = Labels.order(of_task)
    for k, (model, depth) in enumerate(series):
        mine = of_task[(of_task["model"] == model) & (of_task["depth"] == depth)]
        x = pd.to_numeric(mine[PARAMS], errors="coerce")
        nudge = 4.0 * (k - (len(series) - 1) / 2)
        style.dodge(ax.plot(x, mine["value"], linestyle="none", marker=style.model_marker(model),
                            markersize=2.5, markerfacecolor="white",
                            markeredgecolor=style.model_colour(model), markeredgewidth=0.6),
                    nudge + 3.0)
        mean, low, high, n = inference.mean_interval(mine["value"].to_numpy())
        drawn += [mean, low, high, *mine["value"].tolist()]
        x_mean = float(x.mean())
        point = {"task": labels.task(task), "model": labels(model, depth),
                 "x_axis": _PARAMETERS, "metric": metric_label(regression)}
        data += [{**point, "mark": "run", "run_id": run, "x": xv, "value": v,
                  "ci95_low": math.nan, "ci95_high": math.nan, "n": 1}
                 for run, xv, v in zip(mine["run_id"], x, mine["value"])]
        data.append({**point, "mark": "mean", "run_id": "", "x": x_mean,
                     "value": mean, "ci95_low": low, "ci95_high": high, "n": n})
        _mean_with_interval(ax, x_mean, mean, low, high, model, label=labels(model, depth),
                            nudge=nudge)
    return data, drawn


# --------------------------------------------------------------------------------------------
# Critical-difference diagram


def _cliques(names: list[str], apart: set[frozenset]) -> list[tuple[int, int]]:
    """Maximal runs ``(i, j)`` of consecutive ``names`` (sorted by average rank) no two of
    which the tests in ``apart`` separate, as aeon draws a diagram's bars."""
    k = len(names)
    cliques: list[tuple[int, int]] = []
    for i in range(k):
        j = i
        while j + 1 < k and not any(frozenset((names[m], names[j + 1])) in apart
                                    for m in range(i, j + 1)):
            j += 1
        if j > i and not any(a <= i and j <= b for a, b in cliques):
            cliques.append((i, j))
    return cliques


def cd_figure(average: pd.Series, apart: set[frozenset], n_tasks: int, stats_text: str,
              run_ids: tuple[str, ...]) -> Figure:
    """Demšar's diagram: models on a rank axis, bars joining groups not significantly apart
    (a group is a run of consecutive models no two of which the Wilcoxon-Holm tests in
    ``apart`` separate)."""
    style.apply_style()
    k = len(average)
    order = average.sort_values()
    names = list(order.index)
    cliques = _cliques(names, apart)
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
    _draw_cd(ax, data, cliques)
    return Figure(
        name="accuracy_cd",
        title=TITLES["accuracy_cd"],
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


def _draw_cd(ax, data: pd.DataFrame, cliques: list[tuple[int, int]]) -> None:
    """The diagram on ``ax``: the rank axis at the top, the better half of the models named
    on the left and the rest on the right, each joined to its rank, and the bars below."""
    k = len(data)
    half = (k + 1) // 2
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
