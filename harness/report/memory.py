"""Report section of the memory study: compiled bytes per token and linear growth in L."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd

from ..store import Store
from . import style
from .style import MODE_LABELS
from ._artifacts import Artifact, Figure, Missing, Table
from ._provenance import largest_preset

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
_MODES = tuple(MODE_LABELS)


def _selected(store: Store) -> tuple[pd.DataFrame, str | None]:
    return largest_preset(store.read("memory"), "memory")


def section(store: Store) -> list[Artifact]:
    frame, preset = _selected(store)
    if frame.empty:
        reason = (
            "no finished runs of the memory study in the store (python -m harness study memory)"
        )
        return [Missing(n, t, reason) for n, t in _TITLES.items()]
    points = frame[frame["kind"] == "point"]
    fits = frame[frame["kind"] == "fit"]
    return [_figure(points, preset), _fit_table(fits, preset), _points_table(points, preset)]


def _figure(points: pd.DataFrame, preset: str | None) -> Figure:
    style.apply_style()
    modes = [m for m in _MODES if m in set(points["mode"])]
    sizes = [s for s in ("paper", "matched") if s in set(points["size"])]
    fig, axes = plt.subplots(
        len(sizes), len(modes), figsize=(style.FULL_WIDTH_IN, 2.2 * len(sizes)), squeeze=False,
        sharex=True,
    )
    batch = int(points["batch"].max())
    for i, size in enumerate(sizes):
        for j, mode in enumerate(modes):
            ax = axes[i][j]
            rows = points[(points["size"] == size) & (points["mode"] == mode)
                          & (points["batch"] == batch)]
            for model in style.order_models(rows["model"].unique()):
                r = rows[rows["model"] == model].sort_values("seq_len")
                colour = style.model_colour(model)
                ax.plot(r["seq_len"], r["total_bytes"] / 2**20, color=colour,
                        marker=style.model_marker(model), label=style.model_label(model))
                ax.plot(r["seq_len"], r["temp_bytes"] / 2**20, color=colour, linestyle=":")
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_title(f"{MODE_LABELS[mode]}, {size} size")
            ax.set_xlabel("sequence length L (steps)")
            ax.set_ylabel("compiled memory (MiB)")
    axes[0][0].legend()
    return Figure(
        name="memory_working_set",
        title=_TITLES["memory_working_set"],
        caption=(
            f"XLA's compiled memory of each layer against L at batch {batch}, preset {preset}: "
            "solid, the working set (arguments + outputs + temporaries - aliases); dotted, the "
            "temporaries alone. Both axes logarithmic: linear growth is a slope of one."
        ),
        figure=fig,
        runs=tuple(sorted(points["run_id"].unique())),
    )


def _fit_table(fits: pd.DataFrame, preset: str | None) -> Artifact:
    name = "memory_fit"
    if fits.empty:
        return Missing(name, _TITLES[name], f"no fit rows at preset {preset}")
    keys = ["model", "size", "mode", "batch"]
    columns = {
        "algorithm": "algorithm",
        "d_state": "d_state",
        "bytes_per_token": "bytes/token",
        "temp_bytes_per_token": "temp bytes/token",
        "temp_slope_over_state": "temp slope / states",
        "intercept_bytes": "intercept bytes",
        "loglog_slope": "log-log slope",
        "increment_spread": "increment spread",
        "max_rel_residual": "max rel. residual",
        "linear": "linear",
        "superlinear": "superlinear",
        "largest_seq_len_in_budget": "largest L in budget",
    }
    table = fits.sort_values(keys).set_index(keys)[list(columns)].rename(columns=columns)
    budget = sorted(set(fits["budget_bytes"]))
    tolerance = sorted(set(fits["linear_tolerance"]))
    lengths = f"{int(fits['seq_len_min'].min())} to {int(fits['seq_len_max'].max())}"
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
        digits=3,
        runs=tuple(sorted(fits["run_id"].unique())),
    )


def _points_table(points: pd.DataFrame, preset: str | None) -> Table:
    keys = ["model", "size", "mode", "batch", "seq_len"]
    columns = {
        "argument_bytes": "arguments",
        "output_bytes": "outputs",
        "temp_bytes": "temporaries",
        "alias_bytes": "aliased",
        "total_bytes": "working set",
        "temp_over_state": "temp / states",
        "device_peak_bytes": "device peak",
        "process_peak_bytes": "process peak",
    }
    table = points.sort_values(keys).set_index(keys)[list(columns)].rename(columns=columns)
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
        digits=0,
        runs=tuple(sorted(points["run_id"].unique())),
    )
