"""Report section of the memory study: compiled bytes per token and linear growth in L."""

from __future__ import annotations

import pandas as pd

from ...store import Store
from .. import memory as study
from ...report import style
from ...report.style import MODE_LABELS
from ...report.artifacts import (Artifact, Figure, Missing, Section, Table, all_missing,
                                 drawn_data, no_runs, run_ids)
from ...report.origins import largest_preset
from ...report.programs import keyed_table, mode_size_axes

# The study's row columns (`harness.studies.memory.COLUMNS`): ``C.total_bytes``.
C = study.COLUMNS.names

TITLE = "Memory"

INTRO = (
    "The memory each layer's compiled program needs, from XLA's memory analysis of the "
    "executable (arguments, outputs, temporaries and aliased outputs: the buffer assignment, "
    "loop bodies included), for inference (forward) and a training step, per sequence length L "
    "and batch B. The working set (arguments + outputs + temporaries - aliases) is fitted by "
    "least squares as a + b L: b / B is the bytes per token, and floor((budget - a) / b) the "
    "longest sequence that fits a memory budget. Growth is called linear when the increments "
    "between consecutive lengths agree within the stated tolerance of the fitted slope and the "
    "log-log slope of the working set above its intercept is within it of 1; superlinear when "
    "the increments rise by more than the tolerance. On an accelerator every configuration also "
    "runs once in a fresh process, whose device reports its peak bytes. XLA's CPU scheduler by "
    "default keeps independent operations alive together (the concurrency-optimised "
    "scheduler); the numbers are for the schedule XLA chose, with the XLA_FLAGS recorded per "
    "row."
)

_TITLES = {
    "memory_working_set": "Compiled working set against sequence length",
    "memory_fit": "Bytes per token and linear growth",
    "memory_points": "Every compiled memory measurement",
}


def section(store: Store) -> list[Artifact]:
    frame, preset = largest_preset(store.read("memory"), "memory")
    if frame.empty:
        return all_missing(_TITLES, no_runs("memory"))
    points = frame[frame[C.kind] == "point"]
    fits = frame[frame[C.kind] == "fit"]
    return [_figure(points, preset), _fit_table(fits, preset), _points_table(points, preset)]


# Two series closer than this (relative) at every length are drawn as coinciding: set apart by a
# few points on the page, and named in the caption.
_COINCIDE = 0.05


def _figure(points: pd.DataFrame, preset: str | None) -> Figure:
    """The working set and the temporaries against L per model, one panel per size (rows) and
    mode (columns), at the largest batch; the models set side by side on the page so that
    coinciding lines stay visible, and named in the caption where they coincide."""
    fig, cells = mode_size_axes(points)
    batch = int(points[C.batch].max())
    data: list[pd.DataFrame] = []
    coinciding: list[str] = []
    for ax, mode, size in cells:
        rows = points[(points[C.size] == size) & (points[C.mode] == mode)
                      & (points[C.batch] == batch)]
        drawn = _panel(ax, rows, mode, size, batch)
        data += drawn
        coinciding += [f"{what} of {', '.join(group)} ({MODE_LABELS[mode]}, {size} size)"
                       for what, group in _coinciding(drawn)]
    from matplotlib.lines import Line2D

    entries = style.legend_entries(fig)
    grey = style.REFERENCE_COLOUR
    entries["working set"] = Line2D([], [], color=grey, linestyle="-", marker="o")
    entries["temporaries"] = Line2D([], [], color=grey, linestyle=":", marker="o",
                                    markerfacecolor="white", markersize=3.0)
    style.figure_legend(fig, entries)
    return Figure(
        name="memory_working_set",
        title=_TITLES["memory_working_set"],
        caption=(
            f"XLA's compiled memory of each layer against L at batch {batch}, preset {preset}: "
            "solid with filled markers, the working set (arguments + outputs + temporaries - "
            "aliases); dotted with open markers, the temporaries alone. Each point is one "
            "compilation's memory analysis (deterministic: n = 1, no interval). Both axes "
            "logarithmic: linear growth is a slope of one. Each model's marks are set a few "
            "points to the side of the length they are at (in the model order of the legend), "
            "so that coinciding lines stay visible"
            + (f"; coinciding (within {_COINCIDE:.0%} at every L): "
               + "; ".join(coinciding) if coinciding else "")
            + "."
        ),
        figure=fig,
        runs=run_ids(points),
        data=drawn_data(data),
    )


def _panel(ax, rows: pd.DataFrame, mode: str, size: str, batch: int) -> list[pd.DataFrame]:
    """One panel (one mode and size): per model its working set (solid, filled markers) and
    temporaries (dotted, open markers), dodged by its place among the models. Returns the
    plotted numbers, one frame per model."""
    data: list[pd.DataFrame] = []
    models = style.order_models(rows[C.model].unique())
    for k, model in enumerate(models):
        r = rows[rows[C.model] == model].sort_values(C.seq_len)
        drawn = pd.DataFrame({
            "mode": MODE_LABELS[mode], "size": size, "model": style.model_label(model),
            "batch": batch, "seq_len": r[C.seq_len].to_numpy(),
            "working_set_MiB": (r[C.total_bytes] / 2**20).to_numpy(),
            "temporaries_MiB": (r[C.temp_bytes] / 2**20).to_numpy()})
        data.append(drawn)
        colour, marker = style.model_colour(model), style.model_marker(model)
        lines = ax.plot(drawn["seq_len"], drawn["working_set_MiB"], color=colour,
                        marker=marker, label=style.model_label(model))
        lines += ax.plot(drawn["seq_len"], drawn["temporaries_MiB"], color=colour,
                         linestyle=":", marker=marker, markersize=3.0,
                         markerfacecolor="white")
        style.dodge(lines, 2.5 * (k - (len(models) - 1) / 2))
    style.length_axes(ax, f"{MODE_LABELS[mode]}, {size} size", "compiled memory (MiB)")
    return data


def _coinciding(drawn: list[pd.DataFrame]) -> list[tuple[str, list[str]]]:
    """The groups of models (two or more) whose working sets, or temporaries, agree within
    `_COINCIDE` at every length of a panel: ``(what, models)``."""
    import numpy as np

    out = []
    for column, what in (("working_set_MiB", "the working sets"),
                         ("temporaries_MiB", "the temporaries")):
        left = list(drawn)
        while left:
            first = left.pop(0)
            group = [first] + [d for d in left if len(d) == len(first) and np.allclose(
                d[column].to_numpy(float), first[column].to_numpy(float), rtol=_COINCIDE,
                atol=0.0)]
            left = [d for d in left if not any(d is g for g in group)]
            if len(group) > 1:
                out.append((what, [str(d["model"].iloc[0]) for d in group]))
    return out


def _fit_table(fits: pd.DataFrame, preset: str | None) -> Artifact:
    name = "memory_fit"
    if fits.empty:
        return Missing(name, _TITLES[name], f"no fit rows at preset {preset}")
    columns = {
        C.algorithm: "algorithm",
        C.d_state: "state size",
        C.bytes_per_token: "bytes/token",
        C.temp_bytes_per_token: "temp bytes/token",
        C.temp_slope_over_state: "temp slope / states",
        C.intercept_bytes: "intercept bytes",
        C.loglog_slope: "log-log slope",
        C.increment_spread: "increment spread",
        C.max_rel_residual: "max rel. residual",
        C.linear: "linear",
        C.superlinear: "superlinear",
        C.largest_seq_len_in_budget: "largest L in budget",
    }
    table = keyed_table(fits, {C.model: "model", C.size: "size", C.mode: "mode", C.batch: "B"},
                        columns)
    budget = sorted(set(fits[C.budget_bytes]))
    tolerance = sorted(set(fits[C.linear_tolerance]))
    lengths = f"{int(fits[C.seq_len_min].min())} to {int(fits[C.seq_len_max].max())}"
    return Table(
        name=name,
        title=_TITLES[name],
        caption=(
            f"Least-squares fit of the compiled working set as a + b L over L = {lengths}, "
            f"preset {preset}: bytes per token b / B (and the temporaries' alone, also over one "
            f"step's (B, P) complex64 states: how many state sequences' worth the program keeps; "
            f"1 for a layer that saves its states and nothing else), the intercept "
            f"a, the log-log slope of the working set above a (1 = linear), the spread of the "
            f"increments between consecutive lengths over b (0 = linear), the largest relative "
            f"residual, whether growth is linear within {tolerance}, and the largest "
            f"L whose working set fits a budget of "
            f"{', '.join(f'{b / 2**30:g} GiB' for b in budget)}."
        ),
        frame=table,
        digits={c: _FIT_FORMATS.get(c, 3) for c in table.columns},
        runs=run_ids(fits),
        short_caption=(
            f"Fit of the working set as a + b L (L = {lengths}): bytes per token b / B (also "
            "of the temporaries), intercept a, log-log slope (1: linear), increment spread and "
            "largest residual (0: linear), largest L within "
            f"{', '.join(f'{b / 2**30:g} GiB' for b in budget)}. "
            f"Preset {preset}."),
    )


# Bytes whole (the intercept spans decades: scientific), the log-log slope by its distance to 1.
_FIT_FORMATS: dict[str, int | str] = {
    "state size": 0, "bytes/token": 0, "temp bytes/token": 0, "intercept bytes": "g",
    "log-log slope": "near_one", "largest L in budget": 0,
}


def _points_table(points: pd.DataFrame, preset: str | None) -> Table:
    columns = {
        C.argument_bytes: "arguments",
        C.output_bytes: "outputs",
        C.temp_bytes: "temporaries",
        C.alias_bytes: "aliased",
        C.total_bytes: "working set",
        C.temp_over_state: "temp / states",
        C.device_peak_bytes: "device peak",
        C.process_peak_bytes: "process peak",
    }
    # Lengths and batches are whole numbers (stored as floats beside missing values).
    points = points.assign(**{k: pd.to_numeric(points[k]).astype("Int64")
                              for k in (C.batch, C.seq_len)})
    table = keyed_table(points, {C.model: "model", C.size: "size", C.mode: "mode",
                                 C.batch: "B", C.seq_len: "L"}, columns)
    return Table(
        name="memory_points",
        title=_TITLES["memory_points"],
        caption=(
            f"XLA's compiled memory analysis in bytes per configuration, preset {preset}. "
            "'temp / states' is the temporaries over the bytes of one (B, L, P) complex64 state "
            "sequence; 'device peak' is the accelerator's peak bytes in a fresh process and "
            "'process peak' a CPU process's resident high-water-mark increase over one call "
            "(empty where not measured)."
        ),
        frame=table,
        # Bytes whole; the ratio spans decades (scientific when it does).
        digits={c: ("g" if c == "temp / states" else 0) for c in table.columns},
        runs=run_ids(points),
        short_caption=(
            "XLA's compiled memory analysis in bytes per configuration (B: batch, L: length); "
            "'temp / states': the temporaries over one (B, L, P) complex64 state sequence; "
            f"device and process peaks where measured. Preset {preset}."),
    )


SECTION = Section("memory", TITLE, INTRO, section)
