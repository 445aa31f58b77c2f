"""The accuracy section's figures of how the results came about: the validation metric during
training, and against the learning rate (the tuning grid)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.ticker import NullFormatter

from .... import stats as inference
from ... import accuracy as accuracy_study
from ....report import style
from ....report.artifacts import Artifact, Figure, Missing, drawn_data, run_ids
from ....report.selection import with_keys
from ._data import STEP, TITLES, VAL, VAL_LOSS, Labels, is_regression, metric
from .figures import _zoom, baseline_line

_LINESTYLES = ("-", "--", ":", "-.")


# --------------------------------------------------------------------------------------------
# Validation metric during training


def curves_figure(evals: pd.DataFrame, final: pd.DataFrame, baselines: dict[str, float],
                  labels: Labels, scale: str) -> Artifact:
    """Per task a panel: each series' validation metric at every evaluation step, at the tuned
    rates, the mean over seeds with its 95 % band."""
    name = "accuracy_curves"
    if evals.empty:
        return Missing(name, TITLES[name], "the runs recorded no validation metric.")
    regression_tasks = {t for t, f in final.groupby("task") if is_regression(f)}
    evals = _validation(evals, final, regression_tasks)
    if evals.empty:
        return Missing(name, TITLES[name], "the runs recorded no validation metric.")
    style.apply_style()
    tasks = sorted(evals["task"].unique())
    # Every panel filled: four tasks (the cpu preset's) two by two, else up to three a row.
    fig, axes = style.panels(len(tasks), 2.1, ncols=2 if len(tasks) == 4 else 3)
    counts: list[int] = []
    data: list[pd.DataFrame] = []
    for ax, task in zip(axes.flat, tasks):
        frames = _curves_panel(ax, evals[evals["task"] == task], task in regression_tasks,
                               baselines.get(task), labels)
        counts += [n for frame in frames for n in frame["n"]]
        data += frames
    style.figure_legend(fig)
    return Figure(
        name=name,
        title=TITLES[name],
        caption=(
            "Validation metric (accuracy %, or MSE for regression) at each evaluation step "
            "(the ticks) at the tuned learning rates: the mean over seeds (line) and its 95 % "
            "confidence interval (band: Student's t with n - 1 degrees of freedom, "
            f"{style.n_seeds_text(counts)} per point; drawn within the metric's range, the CSV "
            "keeps it whole). Each panel's axis is zoomed to its data: dashed, the task's "
            "trivial baseline (scored on test) where it is near the data, else its value and "
            "side in the panel's title. " + scale
        ),
        figure=fig,
        runs=run_ids(evals),
        data=drawn_data(data),
    )


def _curves_panel(ax, of_task: pd.DataFrame, regression: bool, baseline: float | None,
                  labels: Labels) -> list[pd.DataFrame]:
    """One task's panel: each series' curve (`_curve`), ticks at the evaluation steps, the
    axis zoomed to the drawn lines and bands (`figures._zoom`, which draws the baseline where
    it is near them). Returns the plotted numbers, one frame per series."""
    task = of_task["task"].iloc[0]
    metric_name = "Validation MSE" if regression else "Val. accuracy (%)"
    depths = sorted(of_task["depth"].unique())
    data: list[pd.DataFrame] = []
    drawn: list[float] = []
    top = np.inf if regression else 100.0
    for model, depth in Labels.order(of_task):
        mine = of_task[(of_task["model"] == model) & (of_task["depth"] == depth)]
        curve = _curve(ax, mine, _LINESTYLES[depths.index(depth) % len(_LINESTYLES)],
                       labels(model, depth), regression)
        drawn += curve["mean"].tolist()
        drawn += curve[["low", "high"]].clip(0.0, top).to_numpy().ravel().tolist()
        data.append(pd.DataFrame({
            "task": labels.task(task), "model": labels(model, depth), "metric": metric_name,
            "step": curve.index, "mean": curve["mean"].to_numpy(),
            "ci95_low": curve["low"].to_numpy(), "ci95_high": curve["high"].to_numpy(),
            "n": curve["n"].to_numpy()}))
    _zoom(ax, drawn, baseline, regression, labels.task(task))
    style.ticks_at(ax, of_task[STEP].unique(), "x", most=5)
    ax.set_xlabel("Training step")
    ax.set_ylabel(metric_name)
    return data


def _validation(evals: pd.DataFrame, final: pd.DataFrame, regression_tasks: set[str]
                ) -> pd.DataFrame:
    """The evaluation rows of the tuned runs, keyed, with their metric as ``value`` (the
    validation MSE of a regression task, else the accuracy in percent); rows without one
    dropped."""
    tuned_ids = set(final.loc[final["tuned"], "run_id"])
    evals = with_keys(evals[evals["run_id"].isin(tuned_ids)])
    value = np.where(evals["task"].isin(regression_tasks),
                     pd.to_numeric(evals.get(VAL_LOSS, np.nan), errors="coerce"),
                     100.0 * pd.to_numeric(evals.get(VAL, np.nan), errors="coerce"))
    evals = evals.assign(value=value)
    return evals[np.isfinite(evals["value"])]


def _curve(ax, mine: pd.DataFrame, linestyle: str, label: str, regression: bool
           ) -> pd.DataFrame:
    """One series' curve on ``ax``: per evaluation step the mean over seeds and its 95 % t
    interval (`harness.stats.mean_interval`), as a line and a band. Returns them (columns
    ``mean``, ``low``, ``high``, ``n``, indexed by step)."""
    model = mine["model"].iloc[0]
    curve = pd.DataFrame.from_records(
        [inference.mean_interval(group["value"].to_numpy()) for _, group in mine.groupby(STEP)],
        index=sorted(mine[STEP].unique()), columns=["mean", "low", "high", "n"])
    colour = style.model_colour(model)
    ax.plot(curve.index, curve["mean"], color=colour, label=label, linestyle=linestyle,
            marker=style.model_marker(model), markersize=2.0)
    # Drawn within the metric's range (MSE >= 0, accuracy in [0, 100]); the data keep the t
    # interval as computed.
    top = np.inf if regression else 100.0
    ax.fill_between(curve.index, curve["low"].fillna(curve["mean"]).clip(0.0, top),
                    curve["high"].fillna(curve["mean"]).clip(0.0, top), color=colour,
                    alpha=0.2, linewidth=0)
    return curve


# --------------------------------------------------------------------------------------------
# Validation metric against learning rate


def sensitivity_figure(final: pd.DataFrame, baselines: dict[str, float], labels: Labels,
                       tuned_tasks: list[str], scale: str, run_ids: tuple[str, ...]
                       ) -> Artifact:
    """Per tuned task a panel: each series' best validation metric (mean over its tuning seeds,
    `harness.studies.accuracy.selecting`) against the learning rates, its selected pair
    starred."""
    name = "accuracy_sensitivity"
    if not tuned_tasks:
        return Missing(name, TITLES[name],
                       "no task of this preset is tuned (the cpu and cpu-full presets tune "
                       "every task).")
    style.apply_style()
    # Four tasks (the cpu preset's) as a 2 x 2 grid, not a row of three and one below.
    fig, axes = style.panels(len(tuned_tasks), 2.2, ncols=2 if len(tuned_tasks) == 4 else 3)
    data: list[dict] = []
    notes: dict[str, None] = {}
    for ax, task in zip(axes.flat, tuned_tasks):
        points, note = _sensitivity_panel(ax, task, final[final["task"] == task], baselines,
                                          labels)
        data += points
        notes[note] = None
    style.figure_legend(fig)
    counts = [p["n"] for p in data if p["mark"] == "line"]
    return Figure(
        name=name,
        title=TITLES[name],
        caption=(
            "Best validation metric of each model against the learning rates: each point the "
            "mean over the tuning seeds (those trained at every pair, which select it; "
            f"{style.n_seeds_text(counts)} per point, too few for an interval, none drawn); "
            f"{'; '.join(notes)}. A star in the model's colour marks its selected pair; the "
            "stars are set a few points apart, in the legend's order, so that equal ones do "
            "not cover each other. Each accuracy axis is zoomed to the data; dashed, the "
            "trivial baseline where it is near them, else its value and side in the panel's "
            "title; a regression task's MSE on a log axis. A flat line means the ranking "
            "hardly depends on tuning; a steep one, that a shared recipe can favour one "
            "model. " + scale
        ),
        figure=fig,
        runs=run_ids,
        data=(pd.DataFrame.from_records(data).astype({"line": "Int64", "n": "Int64"})
              if data else None),
    )


def _sensitivity_panel(ax, task: str, of_task: pd.DataFrame, baselines: dict[str, float],
                       labels: Labels) -> tuple[list[dict], str]:
    """One task's panel of the sensitivity figure. Returns the points drawn and how its lines
    are told apart, in words (for the caption)."""
    regression = is_regression(of_task)
    of_task = of_task.assign(value=metric(of_task, regression, "val"))
    metric_name = "Best val. MSE" if regression else "Best val. accuracy (%)"
    rlrs = sorted(of_task["rlr"].dropna().unique())
    # A paired grid moves both rates together (one shared rate per recurrent rate): its
    # points are one line per model, not one point per recurrent rate.
    paired = bool(of_task.groupby("rlr")["lr"].nunique().max() <= 1)
    data: list[dict] = []
    series = Labels.order(of_task)
    for k, (model, depth) in enumerate(series):
        mine = of_task[(of_task["model"] == model) & (of_task["depth"] == depth)]
        point = {"task": labels.task(task), "model": labels(model, depth),
                 "metric": metric_name}
        data += _sensitivity_series(ax, mine, point, paired, rlrs,
                                    3.5 * (k - (len(series) - 1) / 2))
    ax.set_xscale("log")
    if regression:  # an MSE spans decades between a good rate and a diverging one
        ax.set_yscale("log")
        baseline_line(ax, baselines.get(task))
        ax.set_title(labels.task(task))
        style.plain_log_ticks(ax, "y")
    else:
        _zoom(ax, [p["mean"] for p in data], baselines.get(task), False, labels.task(task))
    _rate_ticks(ax, of_task, paired)
    ax.set_ylabel(metric_name)
    if paired:
        return data, ("one line per model through the paired rates (tick labels: the shared "
                      "rate above the recurrent one)")
    return data, "one line per recurrent learning rate (line styles: " + ", ".join(
        f"{_LINESTYLES[i % len(_LINESTYLES)]} recurrent lr {r:g}"
        for i, r in enumerate(rlrs)) + ")"


def _rate_ticks(ax, of_task: pd.DataFrame, paired: bool) -> None:
    """Ticks at the shared rates tried; on a paired grid each labelled with its recurrent rate
    below it, so that the axis shows both rates of every point."""
    lrs = sorted(of_task["lr"].dropna().unique())
    if paired:
        pairs = of_task.groupby("lr")["rlr"].first()
        ax.set_xticks(lrs, [f"{style.plain_number(v)}\n{style.plain_number(pairs[v])}"
                            for v in lrs])
        ax.set_xlabel("shared / recurrent rate")  # short: three panels share a row
    else:
        ax.set_xticks(lrs, [style.plain_number(v) for v in lrs])
        ax.set_xlabel("shared learning rate")
    ax.xaxis.set_minor_formatter(NullFormatter())


def _sensitivity_series(ax, mine: pd.DataFrame, point: dict, paired: bool, rlrs: list[float],
                        nudge: float) -> list[dict]:
    """One series of a sensitivity panel: a line through its paired rates, or one line per
    recurrent rate, and a star at its selected pair, set ``nudge`` points to the side (equal
    stars of several models side by side). ``point`` names its panel and series in the data.
    Returns the points drawn, each line point with its number of seeds ``n``."""
    model = mine["model"].iloc[0]
    # Every point over the same seeds: those trained at more than one pair (the tuning seeds),
    # as the selection reads them; a seed trained at the selected pair alone is left out.
    mine = accuracy_study.selecting(
        mine.assign(**{accuracy_study.LR: mine["lr"], accuracy_study.RECURRENT_LR: mine["rlr"]}))
    data: list[dict] = []
    curves = ([mine] if paired else [mine[mine["rlr"] == rlr] for rlr in rlrs])
    for i, rows in enumerate(curves):
        curve = rows.groupby("lr")["value"].agg(["mean", "count"]).sort_index()
        if curve.empty:
            continue
        # The recurrent rate of each point: the one of its line, or its pair's.
        rlr = (rows.groupby("lr")["rlr"].first().reindex(curve.index).to_numpy()
               if paired else np.full(len(curve), rlrs[i]))
        data += [{**point, "mark": "line", "line": i + 1, "lr": lr, "recurrent_lr": r,
                  "mean": v, "n": int(n)}
                 for lr, r, v, n in zip(curve.index, rlr, curve["mean"], curve["count"])]
        ax.plot(curve.index, curve["mean"], color=style.model_colour(model),
                linestyle=_LINESTYLES[i % len(_LINESTYLES)], marker=style.model_marker(model),
                markersize=2.5, linewidth=0.9, label=point["model"] if i == 0 else None)
    chosen = mine[mine["selected"]]
    if not chosen.empty:  # the selected rate, in the model's colour
        star = (chosen["lr"].iloc[0], chosen["value"].mean())
        data.append({**point, "mark": "selected", "line": None, "lr": star[0],
                     "recurrent_lr": chosen["rlr"].iloc[0], "mean": star[1],
                     "n": len(chosen)})
        style.dodge(ax.plot(star[0], star[1], marker="*", color=style.model_colour(model),
                            markeredgecolor="black", markeredgewidth=0.5, markersize=7,
                            linestyle="none"), nudge)
    return data
