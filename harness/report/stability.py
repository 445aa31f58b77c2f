"""Report section of the stability study: hidden-state norms through training, depth and seeds."""

from __future__ import annotations

import math

import matplotlib.colors as mcolors
import matplotlib.pyplot as plt
from matplotlib.ticker import MaxNLocator
import numpy as np
import pandas as pd

from .. import state_norm
from ..store import Store
from ..studies import stability as study
from .. import stats as inference
from ..variants import variant as variant_of
from ..variants import variants
from . import _stats, style
from ._artifacts import Artifact, Figure, Finding, Missing, Section, Table, all_missing, no_runs
from ._provenance import in_preset, pick_preset, with_presets

# The study's row columns (`harness.studies.stability.COLUMNS`): ``C.norm_mean``.
C = study.COLUMNS.names

TITLE = "Stability of the hidden-state norm"

INTRO = (
    "The RotRNN paper's central claim is that its rotation and normaliser xi keep the norm of "
    "the hidden state near constant through training, across depth and seeds, while the LRU's "
    "learned normaliser lets it drift. This study measures the same quantity for every layer: "
    "the Euclidean norm ||h_t|| of the layer's forward state vector at each step t (for RotRNN "
    "the norm of its real state, since the change of basis P is orthogonal), taken from the "
    "layer's own `hidden_states` on the input the layer sees inside the network in a training "
    "step (pre-norm BatchNorm with the probe batch's statistics, no dropout, padding excluded; "
    "inference-mode running statistics are (0, 1) at initialisation, which would leave deeper "
    "layers' inputs unnormalised, so they are not used by default). It is averaged over a fixed "
    "probe batch (the first validation examples, the same for every model and seed) and over "
    "time, and kept as a profile over t. Networks of several depths are measured at "
    "initialisation; some depths are also trained with the shared recipe (AdamW, warm-up and "
    "cosine decay, a separate learning rate for the recurrent parameters) and measured at every "
    "evaluation, together "
    "with the gradient norm of each layer's parameters and the eigenvalue moduli |lambda| of "
    "each layer. Ablations: RotRNN with xi off and with ring-initialised gamma, the LRU with its "
    "gamma normaliser off. The spread is summarised by the coefficient of variation (standard "
    "deviation over mean) of the per-step mean norm across layers, seeds and evaluation steps. "
    "That probe is as long as the task's sequences, which at the cpu sizes are far shorter than "
    "the layers' memory: its norms are the transient build-up (which grows like sqrt(t) "
    "whatever the normalisation), not the stationary level the normalisers fix. The claim is "
    "therefore measured on a long probe: sequences drawn by the task's own generator at several "
    "times the layers' memory (ListOps by LRA's rules), whose norm is averaged over each "
    "sequence's last steps, checked against the closed form for the regime, and split into four "
    "components (across layers, across seeds, through training, and the settle step), each "
    "compared seed by seed with calibrated tests. The coefficient of variation is kept as the "
    "transient-regime measure."
)

_STATUSES = ("done", "diverged")


def _label(variant: str) -> str:
    known = variants()
    if variant in known:
        return known[variant].label
    try:  # a user's layer by import path: its registration's label
        return variant_of(variant).label
    except ValueError:
        return variant


def _variant_order(names) -> list[str]:
    present = set(names)
    known = variants()
    return [v for v in known if v in present] + sorted(present - set(known))


def _grey_legend(fig) -> None:
    """One legend above the panels (outside every axes, so it covers no data): each label once,
    its line in the grey of its shade's lightness, since the panels' colours are the models'
    and a shade means the same in each (lighter: shallower layer or depth)."""
    from matplotlib.lines import Line2D

    entries: dict[str, Line2D] = {}
    for label, handle in style.legend_entries(fig).items():
        if isinstance(handle, Line2D):
            r, g, b = mcolors.to_rgb(handle.get_color())
            grey = (0.299 * r + 0.587 * g + 0.114 * b,) * 3
            entries[label] = Line2D([], [], color=grey, linestyle=handle.get_linestyle(),
                                    linewidth=handle.get_linewidth(), marker=handle.get_marker(),
                                    markersize=handle.get_markersize())
    style.figure_legend(fig, entries)


def _shade(colour: str, k: int, depth: int) -> tuple[float, float, float]:
    """``colour`` lightened towards white for shallow layers: layer ``depth`` is the full colour."""
    weight = 0.35 + 0.65 * (k / depth if depth > 1 else 1.0)
    rgb = np.array(mcolors.to_rgb(colour))
    return tuple(weight * rgb + (1.0 - weight) * np.ones(3))


def _selected(store: Store) -> tuple[pd.DataFrame, pd.DataFrame, str | None]:
    """Rows and runs of the largest-scale preset present (presets never mix in one figure)."""
    rows = store.read("stability", statuses=_STATUSES)
    runs = store.runs("stability")
    if rows.empty:
        return rows, runs, None
    rows = with_presets(rows, "stability")
    preset = pick_preset(rows["preset"].unique(), "stability", rows["run_id"].unique())
    rows = rows[in_preset(rows["preset"], preset)]
    runs = with_presets(runs, "stability")
    runs = runs[in_preset(runs["preset"], preset)]
    return rows, runs, preset


def _trained(frame: pd.DataFrame) -> pd.Series:
    if "cfg.train.steps" not in frame.columns:
        return pd.Series(False, index=frame.index)
    return frame["cfg.train.steps"].notna()


def _panels(n: int, height: float = 1.8, columns: int = 4):
    """Panels sharing one y-axis, so that the variants compare at a glance."""
    ncols = min(columns, n)
    nrows = math.ceil(n / ncols)
    fig, axes = plt.subplots(
        nrows, ncols, figsize=(style.FULL_WIDTH_IN, height * nrows), squeeze=False,
        sharey=True,
    )
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return fig, axes


def _run_ids(frame: pd.DataFrame) -> tuple[str, ...]:
    return tuple(sorted(frame["run_id"].unique()))


def _interval_rows(values: pd.Series, by: pd.Series) -> pd.DataFrame:
    """Per value of ``by`` (index, sorted): the geometric mean of ``values`` over seeds and its
    95 % t interval (`_stats.geometric_interval`: the t interval of the log values,
    exponentiated), as columns ``centre``, ``ci95_low``, ``ci95_high``, ``n``."""
    records = {key: _stats.geometric_interval(group) for key, group in values.groupby(by)}
    return pd.DataFrame.from_dict(records, orient="index",
                                  columns=["centre", "ci95_low", "ci95_high", "n"]).sort_index()


def _band(ax, x, curve: pd.DataFrame, colour, **line) -> None:
    """``curve``'s centre as a line (``line``: its style and label) over its 95 % interval as a
    band of the same colour; no band where the interval is undefined (n = 1)."""
    ax.fill_between(np.asarray(x, dtype=float), curve["ci95_low"].to_numpy(dtype=float),
                    curve["ci95_high"].to_numpy(dtype=float), color=colour, alpha=0.22,
                    linewidth=0)
    ax.plot(np.asarray(x, dtype=float), curve["centre"].to_numpy(dtype=float), color=colour,
            **line)


def _no_empty_bounds(data: pd.DataFrame | None) -> pd.DataFrame | None:
    """A figure's data without interval columns that no point has (every n = 1): an interval
    not drawn is not a column of NaN."""
    if data is None:
        return None
    empty = [c for c in data.columns if "ci95_" in c and data[c].isna().all()]
    return data.drop(columns=empty)


def _interval_text(counts, what: str = "the geometric mean over seeds") -> str:
    """The caption's words for a figure's centres and bands over seeds."""
    return (f"the line is {what}, the band its 95 % t interval over "
            f"{style.n_seeds_text(counts)} per point (the t interval of the mean of the "
            f"seeds' log values, exponentiated; none at n = 1)")


def _concat(frames: list[pd.DataFrame]) -> pd.DataFrame | None:
    """A figure's data: its drawn lines' rows, one frame (None when nothing was drawn)."""
    return pd.concat(frames, ignore_index=True) if frames else None


# What the section makes with no run at all, by name (each task adds its own figures).
_NO_RUNS_TITLES = {
    "stability_training": "Hidden-state norm through training",
    "stability_depth": "Hidden-state norm by layer and depth",
    "stability_summary": "Spread of the hidden-state norm",
}


def section(store: Store) -> list[Artifact]:
    rows, runs, preset = _selected(store)
    if rows.empty:
        return all_missing(_NO_RUNS_TITLES, no_runs("stability"))
    out: list[Artifact] = []
    for task in sorted(rows["cfg.task"].unique()):
        frame = rows[rows["cfg.task"] == task]
        layer = frame[frame[C.kind] == "layer"]
        trained = layer[_trained(layer)]
        if trained.empty and not _trained_by_design(preset, task):
            pass  # the preset measures this task at initialisation only (said in the summary)
        elif trained.empty:
            reason = f"no trained runs on {style.task_label(task)} at preset {preset}"
            out += [
                Missing(f"stability_training_{task}", f"Norm through training ({style.task_label(task)})", reason),
                Missing(f"stability_eigenvalues_{task}", f"|lambda| through training ({style.task_label(task)})",
                        reason),
            ]
        else:
            depths = sorted(int(d) for d in trained["cfg.network.depth"].unique())
            out += _stationary_artifacts(frame, trained, task, preset, depths)
            for depth in reversed(depths):
                out.append(_training_figure(trained, task, preset, depth,
                                            deepest=depth == depths[-1]))
            out.append(_eigen_figure(trained, task, preset))
        out.append(_init_table(frame, task, preset))
        out.append(_depth_figure(layer, task, preset))
        out.append(_profile_figure(frame[frame[C.kind] == "profile"], task, preset))
        task_runs = runs[runs["cfg.task"] == task] if "cfg.task" in runs.columns else runs
        out.append(_summary_table(frame, task_runs, task, preset))
        if not trained.empty:
            spread = spread_by_run(trained)
            out.append(_spread_table(spread, task, preset, _run_ids(trained)))
            out.append(_finding(spread, task, preset, _run_ids(trained)))
    return out


def _stationary_artifacts(frame: pd.DataFrame, trained: pd.DataFrame, task: str,
                          preset: str | None, depths: list[int]) -> list[Artifact]:
    """The headline: the long probe's stationary norms (figure per trained depth), their four
    components, their levels, and the verdicts."""
    stationary = _stationary(frame)
    if stationary.empty:
        return [Missing(f"stability_components_{task}",
                        f"Components of the stationary state norm ({style.task_label(task)})",
                        "no long-probe rows in the trained runs (stored before study version "
                        "4; rerun the stability study)")]
    arrays = stationary_arrays(stationary)
    run_ids = sorted({r for a in arrays.values() for r in a["run_ids"]})
    out: list[Artifact] = [_stationary_figure(stationary, task, preset, d)
                           for d in reversed(depths)
                           if (stationary["cfg.network.depth"] == d).any()]
    out += [_components_table(arrays, task, preset, run_ids),
            _levels_table(trained, stationary, task, preset),
            _stationary_finding(arrays, stationary, task, preset, run_ids)]
    return out


def _trained_by_design(preset: str | None, task: str) -> bool:
    """Whether ``preset``'s grid trains networks on ``task`` (True when it cannot be told)."""
    from .. import studies

    try:
        config = studies.get("stability").config(preset)
    except Exception:
        return True
    return task in (config.train_tasks or config.tasks) and bool(config.train_depths)


# --------------------------------------------------------------------------------------------
# Figures


def _deepest_trained(trained: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    depth = int(trained["cfg.network.depth"].max())
    return trained[trained["cfg.network.depth"] == depth], depth


def relative_norms(trained: pd.DataFrame) -> pd.DataFrame:
    """``trained``'s layer rows with ``relative``: each layer's mean norm over its value at
    step 0 of the same run (1 at initialisation; the drift through training, free of the
    variants' different scales)."""
    start = (trained[trained[C.step] == 0].set_index(["run_id", C.layer])[C.norm_mean]
             .rename("initial"))
    joined = trained.join(start, on=["run_id", C.layer])
    return joined.assign(relative=joined[C.norm_mean] / joined["initial"])


def _layer_panel(ax, rows: pd.DataFrame, variant: str, depth: int, column: str, name: str, *,
                 reference: float | None = None) -> list[pd.DataFrame]:
    """One variant's panel through training, on a log axis: per layer (darker and a marker of
    its own per layer, deeper darker), the geometric mean over seeds of ``column`` with its 95 %
    interval as a band (`_interval_rows`) over a faint line per seed, a dotted line at
    ``reference``; the plotted numbers, the centre named ``name``, a ``seed_<s>`` column per
    seed."""
    colour = style.model_colour(rows["cfg.network.layer"].iloc[0])
    data = []
    for k in range(1, depth + 1):
        shade = _shade(colour, k, depth)
        at_k = rows[rows[C.layer] == k]
        if at_k.empty:
            continue
        curve = _interval_rows(at_k[column], at_k[C.step])
        # Every seed stays visible: a faint line each, under the band (and a column each).
        seeds = (at_k.assign(value=pd.to_numeric(at_k[column], errors="coerce"))
                 .pivot_table(index=C.step, columns="seed", values="value", aggfunc="mean")
                 .reindex(curve.index))
        for seed in seeds.columns:
            ax.plot(seeds.index.to_numpy(dtype=float), seeds[seed].to_numpy(dtype=float),
                    color=shade, linewidth=0.4, alpha=0.45, zorder=1)
        data.append(pd.DataFrame({
            "variant": _label(variant), "layer": int(k), "step": curve.index.to_numpy(),
            name: curve["centre"].to_numpy(), "ci95_low": curve["ci95_low"].to_numpy(),
            "ci95_high": curve["ci95_high"].to_numpy(), "n": curve["n"].to_numpy(),
            **{f"seed_{int(seed)}": seeds[seed].to_numpy() for seed in seeds.columns}}))
        _band(ax, curve.index, curve, shade, marker=style.MARKERS[(k - 1) % len(style.MARKERS)],
              markersize=2.5, label=f"layer {k}")
    if reference is not None:
        ax.axhline(reference, color="black", linewidth=0.5, linestyle=":")
    ax.set_title(_label(variant))
    ax.set_yscale("log")
    style.plain_log_ticks(ax)
    ax.set_xlabel("training step")
    return data


def _training_figure(trained: pd.DataFrame, task: str, preset: str | None, depth: int,
                     deepest: bool) -> Artifact:
    style.apply_style()
    trained = relative_norms(trained[trained["cfg.network.depth"] == depth])
    variants = _variant_order(trained["cfg.variant"].unique())
    fig, axes = _panels(len(variants))
    data: list[pd.DataFrame] = []
    for ax, variant in zip(axes.flat, variants):
        rows = trained[trained["cfg.variant"] == variant]
        data += _layer_panel(ax, rows, variant, depth, "relative", "relative_norm",
                             reference=1.0)
    for row in axes:
        row[0].set_ylabel("||h|| / ||h|| at init")
    counts = [n for frame in data for n in frame["n"]]
    _grey_legend(fig)
    return Figure(
        name=f"stability_training_{task}" if deepest else f"stability_training_{task}_depth{depth}",
        title=f"Hidden-state norm through training, relative to initialisation ({style.task_label(task)}, "
              f"depth {depth})",
        caption=(
            f"Mean over the probe batch and time of the state norm ||h_t|| of each layer of a "
            f"{depth}-block network trained on {style.task_label(task)} (preset {preset}), at every evaluation "
            f"step, divided by the same layer's value at initialisation (1 = no drift; dotted). "
            f"Per layer, {_interval_text(counts)}; the faint lines are the seeds one by one; "
            f"darker shades are deeper layers. One panel "
            f"per layer variant, all on one log-scale y-axis, so the variants' drifts compare "
            f"directly. The absolute norms are in the stationary figures and the summary table."
        ),
        figure=fig,
        runs=_run_ids(trained),
        data=_no_empty_bounds(_concat(data)),
    )


def _eigen_figure(trained: pd.DataFrame, task: str, preset: str | None) -> Artifact:
    style.apply_style()
    trained, depth = _deepest_trained(trained)
    variants = _variant_order(trained["cfg.variant"].unique())
    # A layer without a discrete system has no eigenvalue columns: named, not drawn empty.
    blank = [v for v in variants if C.lam_max not in trained.columns or not pd.to_numeric(
        trained.loc[trained["cfg.variant"] == v, C.lam_max], errors="coerce").notna().any()]
    variants = [v for v in variants if v not in blank]
    name = f"stability_eigenvalues_{task}"
    title = f"Eigenvalue moduli through training ({style.task_label(task)})"
    if not variants:
        return Missing(name, title, "no measured layer declares a discrete system")
    fig, axes = _panels(len(variants))
    statistics = (("lam_max", "-", "max |lambda|"), ("lam_median", "--", "median"),
                  ("lam_min", ":", "min"))
    curves: dict[tuple[str, str], pd.DataFrame] = {}
    for variant in variants:
        rows = trained[trained["cfg.variant"] == variant]
        # Per seed, over the network's layers: the modulus closest to 1, the median, the
        # farthest; then their mean over seeds with its 95 % t interval, per step.
        per_seed = rows.groupby(["seed", C.step]).agg(
            lam_max=(C.lam_max, "max"), lam_median=(C.lam_median, "median"),
            lam_min=(C.lam_min, "min"),
        )
        for column, _, _ in statistics:
            values = pd.to_numeric(per_seed[column], errors="coerce")
            curves[variant, column] = pd.DataFrame.from_dict(
                {step: inference.mean_interval(group)
                 for step, group in values.groupby(level=C.step)},
                orient="index", columns=["mean", "low", "high", "n"]).sort_index()
    # 1 - |lambda| on a log axis: an interval reaching |lambda| = 1 has no lower end there; its
    # band runs to the axis' bottom, half the smallest positive distance drawn.
    positive = np.concatenate([1.0 - c[["mean", "low", "high"]].to_numpy(dtype=float).ravel()
                               for c in curves.values()])
    positive = positive[np.isfinite(positive) & (positive > 0)]
    floor = 0.5 * positive.min() if positive.size else None
    data: list[pd.DataFrame] = []
    unit_circle: list[str] = []
    for ax, variant in zip(axes.flat, variants):
        rows = trained[trained["cfg.variant"] == variant]
        colour = style.model_colour(rows["cfg.network.layer"].iloc[0])
        for column, linestyle, what in statistics:
            curve = curves[variant, column]
            line = pd.DataFrame({
                "variant": _label(variant), "statistic": column.replace("lam_", ""),
                "step": curve.index.to_numpy(), "modulus": curve["mean"].to_numpy(),
                "modulus_ci95_low": curve["low"].to_numpy(),
                "modulus_ci95_high": curve["high"].to_numpy(),
                "one_minus_modulus": (1.0 - curve["mean"]).to_numpy(),
                "n": curve["n"].to_numpy()})
            data.append(line)
            beyond = line.loc[line["one_minus_modulus"] <= 0, "step"]
            if len(beyond):
                unit_circle.append(f"{_label(variant)}'s {what} from step {int(beyond.min())}")
            lower = (1.0 - curve["high"]).to_numpy(dtype=float)
            if floor is not None:
                lower = np.where(lower > 0, lower, floor)
            ax.fill_between(line["step"].to_numpy(dtype=float), lower,
                            (1.0 - curve["low"]).to_numpy(dtype=float), color=colour,
                            alpha=0.18, linewidth=0)
            ax.plot(line["step"], line["one_minus_modulus"].where(line["one_minus_modulus"] > 0),
                    color=colour, linestyle=linestyle, label=what)
        ax.set_title(_label(variant))
        ax.set_yscale("log")
        ax.set_xlabel("training step")
    # After every panel is drawn: a limit set earlier would stop the shared axis autoscaling.
    if floor is not None:
        axes.flat[0].set_ylim(bottom=floor)
    for ax in axes.flat[:len(variants)]:
        style.plain_log_ticks(ax)
    for row in axes:
        row[0].set_ylabel("1 - |lambda|")
    _grey_legend(fig)
    counts = [n for frame in data for n in frame["n"]]
    return Figure(
        name=name,
        title=title,
        caption=(
            f"Distance of the eigenvalue moduli from the unit circle, 1 - |lambda|, over all "
            f"{depth} layers of the trained networks on {style.task_label(task)} (preset "
            f"{preset}): per seed the largest modulus over layers (solid), the median of the "
            f"layers' medians (dashed) and the smallest (dotted); the line is their mean over "
            f"seeds, the band its 95 % t interval over {style.n_seeds_text(counts)} per point "
            f"(the t interval of the mean modulus, mapped through 1 - |lambda|; a band that "
            f"reaches the axis' bottom is an interval reaching |lambda| = 1, none is drawn "
            f"where it lies wholly beyond 1). A solid line "
            f"falling towards zero is drift towards instability. Log scale."
            + (f" Where the mean modulus reaches 1 ({'; '.join(unit_circle)}), 1 - |lambda| "
               "has no logarithm and the line stops; the CSV keeps those points."
               if unit_circle else "")
            + "".join(f" {_label(v)}: not drawn, its registration declares no discrete system "
                      "(no fixed eigenvalues)." for v in blank)
        ),
        figure=fig,
        runs=_run_ids(trained),
        data=_no_empty_bounds(_concat(data)),
    )


def _depth_colours(n: int) -> list[tuple[float, float, float]]:
    """``n`` colours of a sequential palette (viridis, dark to light without its faint yellow
    end): its lightness rises monotonically, so the depths stay in order in a grey-scale print
    too; each depth also has a marker of its own."""
    cmap = plt.get_cmap("viridis")
    return [tuple(cmap(x)[:3]) for x in np.linspace(0.0, 0.78, max(n, 1))][:n]


def _depth_figure(layer: pd.DataFrame, task: str, preset: str | None) -> Artifact:
    """Per variant, the mean norm of each layer against its index, one series per network depth
    (its own colour and marker) at initialisation (solid, filled) and, for trained depths, at
    the last evaluation (dashed, open): the geometric mean over seeds with its 95 % interval as
    whiskers, the series set side by side about each layer index so that none hides another."""
    from matplotlib.lines import Line2D

    style.apply_style()
    variants = _variant_order(layer["cfg.variant"].unique())
    # Three panels a row: room for the depths side by side at each layer index.
    fig, axes = _panels(len(variants), height=1.7, columns=3)
    depths = sorted(int(d) for d in layer["cfg.network.depth"].unique())
    colours = dict(zip(depths, _depth_colours(len(depths))))
    markers = {d: style.MARKERS[i % len(style.MARKERS)] for i, d in enumerate(depths)}
    trained_mask = _trained(layer)
    trained_depths = sorted(int(d) for d in layer.loc[trained_mask, "cfg.network.depth"].unique())
    # The depths side by side about each layer index (0.75 of a layer between the outermost),
    # a trained series a little right of its depth's initialisation (they differ in y).
    gap = 0.75 / max(len(depths) - 1, 1)
    offsets = {(d, when): (i - (len(depths) - 1) / 2) * gap + (0.4 * gap if when == "trained"
                                                                else 0.0)
               for i, d in enumerate(depths) for when in ("initialisation", "trained")}
    data: list[pd.DataFrame] = []

    def seed_values(rows: pd.DataFrame) -> pd.DataFrame:
        # One value per seed and layer (runs of one seed averaged), for the interval over seeds.
        return rows.groupby(["seed", C.layer], as_index=False)[C.norm_mean].mean()

    for ax, variant in zip(axes.flat, variants):
        rows = layer[layer["cfg.variant"] == variant]
        for depth in depths:
            at_depth = rows[rows["cfg.network.depth"] == depth]
            if at_depth.empty:
                continue
            done = at_depth[trained_mask.loc[at_depth.index]]
            last = done[done[C.step] == done.groupby("run_id")[C.step].transform("max")]
            for when, source in (("initialisation", at_depth[at_depth[C.step] == 0]),
                                 ("trained", last)):
                if source.empty:
                    continue
                values = seed_values(source)
                curve = _interval_rows(values[C.norm_mean], values[C.layer])
                data.append(pd.DataFrame({
                    "variant": _label(variant), "network_depth": depth, "when": when,
                    "layer": curve.index.to_numpy().astype(int),
                    "mean_norm": curve["centre"].to_numpy(),
                    "ci95_low": curve["ci95_low"].to_numpy(),
                    "ci95_high": curve["ci95_high"].to_numpy(), "n": curve["n"].to_numpy()}))
                centre = curve["centre"].to_numpy(dtype=float)
                whiskers = np.nan_to_num(np.vstack([
                    centre - curve["ci95_low"].to_numpy(dtype=float),
                    curve["ci95_high"].to_numpy(dtype=float) - centre]))
                trained_series = when == "trained"
                ax.errorbar(curve.index.to_numpy(dtype=float) + offsets[(depth, when)], centre,
                            yerr=whiskers, color=colours[depth], marker=markers[depth],
                            markersize=2.6, markerfacecolor="white" if trained_series
                            else colours[depth], linestyle="--" if trained_series else "-",
                            linewidth=0.9, elinewidth=0.7, capsize=1.2)
        ax.set_title(_label(variant))
        ax.set_yscale("log")
        style.plain_log_ticks(ax)
        ax.set_xlabel("layer index")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    for row in axes:
        row[0].set_ylabel("mean ||h_t||")
    entries = {f"depth {d}": Line2D([], [], color=colours[d], marker=markers[d], markersize=3.0)
               for d in depths}
    grey = style.REFERENCE_COLOUR
    entries["initialisation"] = Line2D([], [], color=grey, marker="o", markersize=3.0)
    if trained_depths:
        entries["trained"] = Line2D([], [], color=grey, marker="o", markersize=3.0,
                                    markerfacecolor="white", linestyle="--")
    style.figure_legend(fig, entries)
    counts = [n for frame in data for n in frame["n"]]
    trained_text = (
        f" and after training (dashed, open markers; trained depth"
        f"{'s' if len(trained_depths) != 1 else ''} {', '.join(map(str, trained_depths))} "
        f"only)" if trained_depths else "")
    return Figure(
        name=f"stability_depth_{task}",
        title=f"Hidden-state norm by layer index and network depth ({style.task_label(task)})",
        caption=(
            f"Mean state norm of each layer (x: its index in the network) for networks of depth "
            f"{', '.join(map(str, depths))} on {style.task_label(task)} (preset {preset}), each "
            f"depth its own colour and marker, at initialisation (solid, filled markers)"
            f"{trained_text}. The marker is the geometric mean over seeds, the whiskers its "
            f"95 % t interval over {style.n_seeds_text(counts)} per point (the t interval of "
            f"the mean of the seeds' log norms, exponentiated; none at n = 1); the depths are "
            f"set side by side about each layer index. Log scale."
        ),
        figure=fig,
        runs=_run_ids(layer),
        data=_no_empty_bounds(_concat(data)),
    )


# A profile's point at step t averages the probe examples still running at t; where fewer than
# this share of the probe batch is left, the mean describes the few longest examples rather than
# the batch, and the point is not drawn (its CSV row stays, with its count).
PROFILE_MIN_SHARE = 0.5


def _examples_text(examples: pd.Series) -> str:
    """"32 examples at t = 1-12, 18 at t = 15, ...": the probe examples behind each point of a
    profile (``examples``: the count per t), runs of equal counts joined."""
    groups: list[tuple[int, list[float]]] = []
    for t, count in examples.sort_index().items():
        if groups and groups[-1][0] == int(count):
            groups[-1][1].append(float(t))
        else:
            groups.append((int(count), [float(t)]))
    parts = []
    for i, (count, ts) in enumerate(groups):
        at = f"{ts[0]:g}" if len(ts) == 1 else f"{ts[0]:g}-{ts[-1]:g}"
        parts.append(f"{count}{' examples' if i == 0 else ''} at t = {at}")
    return ", ".join(parts)


def _profile_figure(profile: pd.DataFrame, task: str, preset: str | None) -> Artifact:
    """The mean norm against t for the deepest trained network (else the deepest measured), per
    layer at initialisation and at the last evaluation: the geometric mean over seeds with its
    95 % interval, drawn only at the t where at least `PROFILE_MIN_SHARE` of the probe batch is
    still running; the caption gives the examples behind every t."""
    if profile.empty:
        return Missing(f"stability_profile_{task}", f"Norm over time ({style.task_label(task)})",
                       f"no profile rows on {style.task_label(task)} at preset {preset}")
    style.apply_style()
    trained = profile[_trained(profile)]
    source = trained if not trained.empty else profile
    depth = int(source["cfg.network.depth"].max())
    source = source[source["cfg.network.depth"] == depth]
    examples = (pd.to_numeric(source[C.examples], errors="coerce").groupby(source[C.t]).min()
                if C.examples in source.columns else pd.Series(dtype=float))
    batch = int(examples.max()) if examples.notna().any() else 0
    minimum = math.ceil(PROFILE_MIN_SHARE * batch)
    variants = _variant_order(source["cfg.variant"].unique())
    fig, axes = _panels(len(variants))
    data: list[pd.DataFrame] = []
    for ax, variant in zip(axes.flat, variants):
        rows = source[source["cfg.variant"] == variant]
        colour = style.model_colour(rows["cfg.network.layer"].iloc[0])
        final_step = int(rows[C.step].max())
        for k in range(1, depth + 1):
            shade = _shade(colour, k, depth)
            at_k = rows[rows[C.layer] == k]
            for step, linestyle in ((0, "-"), (final_step, "--")):
                if step == 0 and final_step == 0 and linestyle == "--":
                    continue
                at_step = at_k[at_k[C.step] == step]
                if at_step.empty:
                    continue
                per_seed = at_step.groupby(["seed", C.t], as_index=False)[C.norm].mean()
                curve = _interval_rows(per_seed[C.norm], per_seed[C.t])
                count = examples.reindex(curve.index)
                drawn = ~(count < minimum).to_numpy()  # unknown counts are drawn
                data.append(pd.DataFrame({
                    "variant": _label(variant), "layer": k, "training_step": step,
                    "t": curve.index.to_numpy(dtype=float),
                    "examples": pd.array(count.to_numpy(), dtype="Int64"), "drawn": drawn,
                    "mean_norm": curve["centre"].to_numpy(),
                    "ci95_low": curve["ci95_low"].to_numpy(),
                    "ci95_high": curve["ci95_high"].to_numpy(), "n": curve["n"].to_numpy()}))
                _band(ax, curve.index[drawn], curve[drawn], shade, linestyle=linestyle,
                      marker=style.MARKERS[(k - 1) % len(style.MARKERS)], markersize=2.0,
                      label=f"layer {k}, step {step}")
        ax.set_title(_label(variant))
        ax.set_xscale("log")
        ax.set_yscale("log")
        style.plain_log_ticks(ax)
        style.plain_log_ticks(ax, "x")
        ax.set_xlabel("time step t")
    for row in axes:
        row[0].set_ylabel("mean ||h_t|| at step t")
    what = "initialisation (solid) and the last evaluation (dashed)" if not trained.empty else (
        "initialisation"
    )
    counts = [n for frame in data for n in frame["n"]]
    if examples.notna().any():
        left_out = examples[examples < minimum]
        examples_text = (
            f" The probe batch's examples still running at each t: "
            f"{_examples_text(examples.dropna())}. Points resting on fewer than "
            f"{minimum} of the {batch} examples (half the batch) describe its few longest "
            f"examples rather than the batch and are not drawn"
            + (f" (t = {', '.join(f'{t:g}' for t in left_out.index)})" if len(left_out)
               else " (none here)")
            + "; the CSV keeps every point with its count.")
    else:
        examples_text = " The runs did not store how many examples each point rests on."
    _grey_legend(fig)
    return Figure(
        name=f"stability_profile_{task}",
        title=f"Hidden-state norm over time ({style.task_label(task)})",
        caption=(
            f"Mean over the probe examples still running at step t of the state norm ||h_t||, "
            f"per layer of the {depth}-block networks on {style.task_label(task)} (preset "
            f"{preset}), at {what}: {_interval_text(counts)}; darker shades are deeper layers."
            f"{examples_text} Log-log scale."
        ),
        figure=fig,
        runs=_run_ids(source),
        data=_no_empty_bounds(_concat(data)),
    )


# --------------------------------------------------------------------------------------------
# The summary table


def _cv(values: pd.Series) -> float:
    values = values.dropna()
    if len(values) < 2 or values.mean() == 0:
        return float("nan")
    return float(values.std(ddof=0) / values.mean())


def _summary_table(frame: pd.DataFrame, runs: pd.DataFrame, task: str,
                   preset: str | None) -> Table:
    layer = frame[frame[C.kind] == "layer"]
    trained_mask = _trained(layer)
    trained = layer[trained_mask]
    finals = frame[frame[C.kind] == "final"]
    records: dict[str, dict[str, float]] = {}
    for variant in _variant_order(layer["cfg.variant"].unique()):
        record: dict[str, float] = {}
        t_rows = trained[trained["cfg.variant"] == variant]
        if not t_rows.empty:
            t_rows, depth = _deepest_trained(t_rows)
            first = t_rows[t_rows[C.step] == 0]
            last = t_rows[t_rows[C.step] == t_rows.groupby("run_id")[C.step].transform("max")]
            paired = first.set_index(["run_id", C.layer])[C.norm_mean].to_frame("init").join(
                last.set_index(["run_id", C.layer])[C.norm_mean].rename("final"), how="inner"
            )
            record["trained depth"] = depth
            record["norm, init"] = first[C.norm_mean].mean()
            record["norm, trained"] = last[C.norm_mean].mean()
            record["trained / init (geo. mean)"] = float(
                np.exp(np.mean(np.log(paired["final"] / paired["init"])))
            )
            record["CV (layers, seeds, steps)"] = _cv(t_rows[C.norm_mean])
            record["CV over training (mean)"] = float(
                t_rows.groupby(["run_id", C.layer])[C.norm_mean].agg(_cv).mean()
            )
            record["grad norm, trained (median)"] = last[C.grad_norm].median()
            record["max |lambda|, trained"] = last[C.lam_max].max()
            v_final = finals[finals["cfg.variant"] == variant]
            v_final = v_final[v_final["cfg.network.depth"] == depth]
            if not v_final.empty and v_final[C.val_accuracy].notna().any():
                record["val. accuracy"] = v_final[C.val_accuracy].mean()
        i_rows = layer[(layer["cfg.variant"] == variant) & (layer[C.step] == 0)]
        deepest = int(i_rows["cfg.network.depth"].max())
        per_layer = i_rows[i_rows["cfg.network.depth"] == deepest].groupby(C.layer)[C.norm_mean]
        record[f"CV over layers at init (depth {deepest})"] = _cv(per_layer.mean())
        v_runs = runs[runs["cfg.variant"] == variant] if "cfg.variant" in runs.columns else runs
        record["runs diverged"] = int((v_runs["status"] == "diverged").sum())
        record["runs"] = len(v_runs)
        records[_label(variant)] = record
    table = pd.DataFrame.from_dict(records, orient="index")
    return Table(
        name=f"stability_summary_{task}",
        title=f"Spread of the hidden-state norm ({style.task_label(task)})",
        caption=_summary_caption(table, task, preset),
        frame=table,
        best={c: "min" for c in ("CV (layers, seeds, steps)", "CV over training (mean)")
              if c in table.columns},
        digits=3,
        runs=_run_ids(frame),
    )


def _summary_caption(table: pd.DataFrame, task: str, preset: str | None) -> str:
    text = (
        f"Hidden-state norm on {style.task_label(task)} (preset {preset}). Norms are the mean of ||h_t|| over the "
        f"probe batch and time, per layer; 'init' and 'trained' average them over the layers "
        f"and seeds of the deepest trained network at step 0 and at its last evaluation. "
        f"'CV (layers, seeds, steps)' is the coefficient of variation of these per-layer means "
        f"over every layer, seed and evaluation step: the one-number spread of the claim. "
        f"'CV over training' is the same within one layer of one run, averaged. "
        f"'CV over layers at init' is across the layers of the deepest network measured at "
        f"initialisation, averaged over seeds first."
    )
    if "trained depth" not in table.columns:
        text += (f" At this preset the networks on {style.task_label(task)} are measured at initialisation only "
                 "(the trained columns are absent).")
    else:
        text += (" Which differences between the layers the seeds support is in the spread "
                 "table and the findings.")
    return text


# --------------------------------------------------------------------------------------------
# The spread per run, and the verdict on it


def spread_by_run(trained: pd.DataFrame) -> pd.DataFrame:
    """One line per trained run: variant, model, depth, seed, its spread ``cv`` (coefficient of
    variation of the per-layer mean norm over every layer and evaluation step of the run:
    through training and across depth) and ``drift`` (geometric mean over layers of the last
    evaluation's norm over the initial one)."""
    rel = relative_norms(trained)
    records = []
    for run_id, run in rel.groupby("run_id"):
        last = run[run[C.step] == run[C.step].max()]
        records.append({
            "run_id": run_id,
            "variant": run["cfg.variant"].iloc[0],
            "model": run["cfg.network.layer"].iloc[0],
            "depth": int(run["cfg.network.depth"].iloc[0]),
            "seed": int(run["seed"].iloc[0]),
            "cv": _stats.coefficient_of_variation(run[C.norm_mean]),
            "drift": float(np.exp(np.mean(np.log(last["relative"])))),
        })
    return pd.DataFrame.from_records(
        records, columns=["run_id", "variant", "model", "depth", "seed", "cv", "drift"])


def _spread_summary(spread: pd.DataFrame) -> pd.DataFrame:
    """Per (depth, variant): seeds, the mean spread with its t interval, the drift."""
    records = []
    for (depth, variant), runs in spread.groupby(["depth", "variant"]):
        _, low, high, _ = inference.mean_interval(runs["cv"])
        records.append({
            "depth": int(depth), "variant": variant, "model": runs["model"].iloc[0],
            "seeds": len(runs), "cv": float(runs["cv"].mean()), "cv_low": low, "cv_high": high,
            "drift": float(np.exp(np.mean(np.log(runs["drift"])))),
        })
    return pd.DataFrame.from_records(records)


def _spread_table(spread: pd.DataFrame, task: str, preset: str | None,
                  run_ids: tuple[str, ...]) -> Artifact:
    summary = _spread_summary(spread)
    order = {v: i for i, v in enumerate(_variant_order(summary["variant"]))}
    summary = summary.assign(o=summary["variant"].map(order)).sort_values(["depth", "o"])
    frame = pd.DataFrame({
        "Depth": summary["depth"],
        "Variant": [_label(v) for v in summary["variant"]],
        "seeds": summary["seeds"].astype("Int64"),
        "CV (layers, steps), mean": summary["cv"],
        "95% CI low": summary["cv_low"],
        "95% CI high": summary["cv_high"],
        "trained / init (geo. mean)": summary["drift"],
    }).set_index(["Depth", "Variant"])
    return Table(
        name=f"stability_spread_{task}",
        title=f"Spread of the hidden-state norm per run, with 95% intervals ({style.task_label(task)})",
        caption=(
            f"For every trained network on {style.task_label(task)} (preset {preset}): the coefficient of "
            "variation (standard deviation over mean) of the per-layer mean state norm over "
            "all its layers and evaluation steps, i.e. how much the norm moves through training "
            "and across depth in one run; its mean over seeds with a 95% t interval over seeds "
            "(a percentile bootstrap under-covers at so few seeds), and "
            "the geometric mean over layers and seeds of the last evaluation's norm over the "
            "initial one (1 = no drift)."
        ),
        frame=frame,
        digits=3,
        runs=run_ids,
    )


def _finding(spread: pd.DataFrame, task: str, preset: str | None,
             run_ids: tuple[str, ...]) -> Finding:
    """Per trained depth: the layers ranked by spread, and every pair of layers (each model's
    own variant, not the ablations) compared seed by seed (`harness.stats.pairwise`: the exact
    sign-flip test, Holm over the depth's pairs), with its size, interval and MDD."""
    lines = []
    summary = _spread_summary(spread)
    base = set(variants_of_models(summary["variant"]))
    for depth, at_depth in summary.groupby("depth"):
        models_here = at_depth[at_depth["variant"].isin(base)].sort_values("cv")
        if models_here.empty:
            continue
        n = int(at_depth["seeds"].min())
        ranked = ", ".join(f"{_label(r.variant)} {r.cv:.3g} [{r.cv_low:.3g}, {r.cv_high:.3g}]"
                           for r in models_here.itertuples())
        runs = spread[spread["depth"] == depth]
        text = (f"On {style.task_label(task)} at depth {depth} ({n} seed{'s' if n != 1 else ''}, preset "
                f"{preset}), the spread of the state norm through training and across layers "
                f"(CV; mean and 95% t interval over seeds), from lowest: {ranked}.")
        ordered = list(models_here["variant"])
        if len(ordered) >= 2:
            by_seed = runs[runs["variant"].isin(ordered)].pivot_table(
                index="seed", columns="variant", values="cv", aggfunc="mean")
            by_seed = by_seed.reindex(columns=ordered).rename(columns=_label)
            family = inference.pairwise(by_seed, higher_is_better=False)
            if int(family["n"].max()) < 2:
                text += (" With fewer than two seeds run by both layers of a pair, no "
                         "difference between layers can be tested.")
            else:
                m = int(family["m"].iloc[0])
                text += (f" Compared seed by seed ({family['test'].iloc[0]} test, Holm over the "
                         f"{m} pair{'s' if m != 1 else ''} at this depth, 5%; a lower CV is "
                         f"steadier): {_stats.family_verdict(family)}")
                text += (" Per pair (first − second, 95% CI, d_z, Holm p, the difference "
                         "detectable with 80% power at 5% assuming normal differences): "
                         + "; ".join(_stats.comparison_text(r, spec=".3g")
                                     for r in family.itertuples()) + ".")
        lines.append(text)
        ablations = at_depth[~at_depth["variant"].isin(base)]
        if not ablations.empty:
            lines.append(f"Ablations on {style.task_label(task)} at depth {depth}: " + ", ".join(
                f"{_label(r.variant)} {r.cv:.3g} [{r.cv_low:.3g}, {r.cv_high:.3g}]"
                for r in ablations.sort_values("cv").itertuples()) + ".")
    return Finding(name=f"stability_findings_{task}",
                   title=f"The transient-regime spread: the probe batch at the task's own "
                         f"lengths ({style.task_label(task)})",
                   lines=tuple(lines), runs=run_ids)


def variants_of_models(names) -> list[str]:
    """The variants that are a model's own configuration (no ablation): keyed by the model."""
    known = variants()
    return [v for v in names if v in known and known[v].model == v]


# --------------------------------------------------------------------------------------------
# The stationary regime: the long probe's norms, their four components, and the verdicts

BAND = 0.1  # settle: within a factor 1 +- BAND of the final norm (`state_norm.settle_step`)

# (key, column label, what it is, in words)
COMPONENTS = (
    ("depth", "depth", "the s.d. of log stationary norm across layers, averaged over "
                       "evaluation steps"),
    ("seed", "seed", "the RMS over steps and layers of a seed's log stationary norm minus the "
                     "mean over seeds"),
    ("drift", "drift", "the s.d. of log stationary norm over training steps within one layer, "
                       "averaged over layers"),
    ("settle", "settle step", f"the first evaluation step after which every layer's stationary "
                              f"norm stays within {BAND:.0%} of its final value"),
)


def stationary_arrays(stationary: pd.DataFrame) -> dict[tuple[int, str], dict]:
    """Per (depth, variant) of trained runs' ``kind="stationary"`` rows: ``norms`` ``(seeds,
    steps, layers)`` of the stationary norm, ``seeds``, ``steps``, ``run_ids``, and
    ``dropped``: runs without every evaluation step (diverged), left out of the components."""
    out = {}
    for (depth, variant), rows in stationary.groupby(["cfg.network.depth", "cfg.variant"]):
        steps = np.sort(rows[C.step].unique()).astype(int)
        depth = int(depth)
        arrays, seeds, run_ids, dropped = [], [], [], 0
        for run_id, run in rows.groupby("run_id"):
            table = run.pivot_table(index=C.step, columns=C.layer, values=C.norm_stationary)
            table = table.reindex(index=steps, columns=range(1, depth + 1))
            if table.isna().any().any() or not np.all(table.to_numpy() > 0):
                dropped += 1
                continue
            arrays.append(table.to_numpy(dtype=float))
            seeds.append(int(run["seed"].iloc[0]))
            run_ids.append(run_id)
        order = np.argsort(seeds)
        out[(depth, variant)] = dict(
            norms=np.stack(arrays)[order] if arrays else np.zeros((0, len(steps), depth)),
            seeds=[seeds[i] for i in order], steps=steps, run_ids=tuple(run_ids),
            dropped=dropped)
    return out


def components_by_seed(norms: np.ndarray, steps: np.ndarray) -> pd.DataFrame:
    """One row per seed (in ``norms``' order), one column per component (`COMPONENTS`); NaN
    where a component is not defined (seed: one seed; drift: one step)."""
    n = norms.shape[0]
    nan = np.full(n, np.nan)
    return pd.DataFrame({
        "depth": state_norm.depth_component(norms),
        "seed": state_norm.seed_component(norms) if n >= 2 else nan,
        "drift": state_norm.drift_component(norms) if norms.shape[1] >= 2 else nan,
        "settle": state_norm.settle_step(norms, steps, BAND).astype(float),
    })


def comparison_pairs(names) -> list[tuple[str, str]]:
    """The pairs a verdict compares: every two models' own variants (in the registry's order),
    then each model's own variant against each of its ablations (normalised against not)."""
    known = variants()
    bases = [v for v in _variant_order(names) if v in known and known[v].model == v]
    pairs = [(a, b) for i, a in enumerate(bases) for b in bases[i + 1:]]
    for base in bases:
        pairs += [(base, v) for v in _variant_order(names)
                  if v != base and v in known and known[v].model == base]
    return pairs


def _stationary(frame: pd.DataFrame) -> pd.DataFrame:
    """The trained runs' long-probe rows."""
    return frame[(frame[C.kind] == "stationary") & _trained(frame)]


def regime_text(stationary: pd.DataFrame, fraction: float = state_norm.STATIONARY_FRACTION
                ) -> str:
    """Whether the long probe's window is in the stationary regime, in one sentence true
    whichever way it comes out: the smallest white-noise energy reached at the window's first
    step over every layer, seed and step, per variant with a discrete system; and whether the
    task could draw longer sequences at all."""
    if stationary.empty:
        return "No long-probe rows: the stationary regime was not measured."
    t_from, t_to = int(stationary[C.t_from].min()), int(stationary[C.t_to].max())
    text = ""
    if not stationary[C.lengthened].astype(bool).all():
        text += ("The task cannot draw longer sequences, so the long probe is the probe batch "
                 "at the task's own lengths. ")
    reached = (pd.to_numeric(stationary.get(C.energy_reached), errors="coerce")
               if C.energy_reached in stationary.columns else pd.Series(dtype=float))
    ratio = (pd.to_numeric(stationary.get(C.norm_ratio), errors="coerce")
             if C.norm_ratio in stationary.columns else pd.Series(math.nan, stationary.index))
    # A layer with a system but no energy fraction has an eigenvalue outside the unit disc:
    # no stationary level, so its window is never stationary.
    outside = ratio.notna() & reached.reindex(stationary.index).isna()
    by_variant = reached.groupby(stationary["cfg.variant"]).min().dropna()
    for v in set(stationary.loc[outside, "cfg.variant"]):
        by_variant[v] = -math.inf
    without = sorted(set(stationary["cfg.variant"]) - set(by_variant.index))
    short = by_variant[by_variant < fraction]
    text += (f"Regime check (probe steps {t_from}-{t_to}, window the last {_window(stationary)}): ")
    if by_variant.empty:
        text += "no measured layer declares a discrete system, so it cannot be checked."
    elif short.empty:
        text += (f"met: every layer's white-noise energy at step {t_from} is at least "
                 f"{fraction:.0%} of its stationary level (smallest "
                 f"{by_variant.min():.3f}, {_label(by_variant.idxmin())}).")
    else:
        transient = {v: r for v, r in short.items() if np.isfinite(r)}
        unstable = [v for v, r in short.items() if not np.isfinite(r)]
        parts = []
        if transient:
            parts.append("NOT met for " + ", ".join(f"{_label(v)} (smallest {r:.3f})"
                                                    for v, r in transient.items())
                         + f": their windows are still transient (energy below {fraction:.0%}"
                         " of the stationary level)")
        if unstable:
            parts.append("no stationary level for " + ", ".join(_label(v) for v in unstable)
                         + " (an eigenvalue left the unit disc in training: the norm grows "
                         "with the probe's length)")
        met = by_variant[by_variant >= fraction]
        text += ("; ".join(parts) + ", so their components do not measure the stationary claim"
                 + (f"; met for the others (smallest {met.min():.3f}, {_label(met.idxmin())})."
                    if not met.empty else "."))
    if without:
        text += (" Not checkable (no discrete system): "
                 + ", ".join(_label(v) for v in without) + ".")
    return text


def _window(stationary: pd.DataFrame) -> str:
    """The window as the runs' config states it (a fraction of each sequence)."""
    widths = (stationary["cfg.window"].dropna().unique() if "cfg.window" in stationary.columns
              else [])
    return f"{float(widths[0]):.0%} of each sequence" if len(widths) == 1 else "steps"


def _components_summary(arrays: dict) -> pd.DataFrame:
    """Per (depth, variant): seeds, and each component's mean over seeds with its 95 % t
    interval (`harness.stats.mean_interval`)."""
    records = []
    for (depth, variant), a in arrays.items():
        if not a["seeds"]:
            continue
        by_seed = components_by_seed(a["norms"], a["steps"])
        record = {"network_depth": depth, "variant": variant, "seeds": len(a["seeds"])}
        for key, _, _ in COMPONENTS:
            mean, low, high, _ = inference.mean_interval(by_seed[key])
            record.update({key: mean, f"{key}_low": low, f"{key}_high": high})
        records.append(record)
    return pd.DataFrame.from_records(records)


def _components_table(arrays: dict, task: str, preset: str | None, run_ids) -> Table:
    summary = _components_summary(arrays)
    order = {v: i for i, v in enumerate(_variant_order(summary["variant"]))}
    summary = summary.assign(o=summary["variant"].map(order)).sort_values(
        ["network_depth", "o"])
    columns = {"seeds": summary["seeds"].astype("Int64")}
    for key, label, _ in COMPONENTS:
        columns[label] = summary[key]
        columns[f"{label} low"] = summary[f"{key}_low"]
        columns[f"{label} high"] = summary[f"{key}_high"]
    frame = pd.DataFrame(columns)
    frame.index = pd.MultiIndex.from_arrays(
        [summary["network_depth"], [_label(v) for v in summary["variant"]]],
        names=["Depth", "Variant"])
    digits = {c: (0 if c.startswith("settle") else 3) for c in frame.columns}
    return Table(
        name=f"stability_components_{task}",
        title=f"Components of the stationary state norm's variation ({style.task_label(task)})",
        caption=(
            f"The stationary state norm (mean ||h_t|| over the last steps of long probe "
            f"sequences, per layer) of every trained network on {style.task_label(task)} (preset {preset}), "
            f"split into four components, each computed per seed and given as its mean over "
            f"seeds with a 95% t interval (low, high; n = seeds): "
            + "; ".join(f"{label}: {what}" for _, label, what in COMPONENTS)
            + ". The first three are in natural-log units (0.1 is about 10%); a network of one "
              "layer has no depth component (0). Lower is steadier."),
        frame=frame, digits=digits, runs=tuple(run_ids),
        best={label: "min" for _, label, _ in COMPONENTS if label in frame.columns},
    )


def _levels_table(trained: pd.DataFrame, stationary: pd.DataFrame, task: str,
                  preset: str | None) -> Table:
    """Per (depth, variant): the stationary norm's level at initialisation and at the end, its
    ratio to the closed form, the regime, the memory, and how far the decays moved."""
    records = []
    for (depth, variant), rows in stationary.groupby(["cfg.network.depth", "cfg.variant"]):
        last_step = rows.groupby("run_id")[C.step].transform("max")
        first, last = rows[rows[C.step] == 0], rows[rows[C.step] == last_step]
        record = {"depth": int(depth), "variant": variant, "seeds": rows["seed"].nunique(),
                  "norm, init": _geo(first[C.norm_stationary]),
                  "norm, trained": _geo(last[C.norm_stationary])}
        # (column, label, the rows it is taken over, how): absent for a layer without a system.
        for column, label, source, how in (
                (C.norm_ratio, "/ closed form, trained", last, "median"),
                (C.energy_reached, "energy reached (min)", rows, "min"),
                (C.memory, "memory, trained (max)", last, "max")):
            values = (pd.to_numeric(source[column], errors="coerce")
                      if column in source.columns else pd.Series(dtype=float))
            record[label] = getattr(values, how)() if values.notna().any() else math.nan
        lam = trained[(trained["cfg.network.depth"] == depth)
                      & (trained["cfg.variant"] == variant)]
        record.update(_lambda_shift(lam))
        records.append(record)
    summary = pd.DataFrame.from_records(records)
    order = {v: i for i, v in enumerate(_variant_order(summary["variant"]))}
    summary = summary.assign(o=summary["variant"].map(order)).sort_values(["depth", "o"])
    frame = summary.drop(columns=["depth", "variant", "o"])
    frame.index = pd.MultiIndex.from_arrays(
        [summary["depth"], [_label(v) for v in summary["variant"]]], names=["Depth", "Variant"])
    frame["seeds"] = frame["seeds"].astype("Int64")
    digits = {c: 3 for c in frame.columns}
    digits.update({"memory, trained (max)": 0, "seeds": 0, "delta median |lambda|": 4,
                   "largest |delta max |lambda||": 4})
    return Table(
        name=f"stability_stationary_{task}",
        title=f"The stationary state norm and the decays ({style.task_label(task)})",
        caption=(
            f"Trained networks on {style.task_label(task)} (preset {preset}). 'norm': the stationary norm (mean "
            f"||h_t|| over the long probe's last steps), geometric mean over layers and seeds, "
            f"at step 0 and at the last evaluation. '/ closed form': the window's RMS norm over "
            f"the closed form's sqrt(E||h_t||^2) for the layer's current system fed a "
            f"temporally white input that puts the same energy per state per step as the "
            f"layer's actual input (median over layers and seeds; 1 = the input's correlation "
            f"over time does not move the norm; it is not a test of the normaliser, whose "
            f"effect is in the absolute norm). 'energy reached': the unit white-noise energy at "
            f"the window's first step over its stationary level (>= 0.9: stationary), smallest "
            f"over layers, seeds and steps. 'memory': steps to 90% of the stationary energy, "
            f"largest over layers at the end. 'delta': the last evaluation's eigenvalue moduli "
            f"minus step 0's, per layer (median |lambda|: mean over layers and seeds; max "
            f"|lambda|: the largest change). Empty cells: the layer declares no discrete "
            f"system."),
        frame=frame, digits=digits, runs=_run_ids(stationary),
    )


def _geo(values: pd.Series) -> float:
    x = pd.to_numeric(values, errors="coerce").dropna()
    x = x[x > 0]
    return float(np.exp(np.mean(np.log(x)))) if len(x) else math.nan


def _lambda_shift(layer: pd.DataFrame) -> dict[str, float]:
    """How far the decays moved in training, from the layer rows' moduli (step 0 to the last)."""
    out = {"delta median |lambda|": math.nan, "largest |delta max |lambda||": math.nan}
    if layer.empty or C.lam_median not in layer.columns:
        return out
    last = layer[layer[C.step] == layer.groupby("run_id")[C.step].transform("max")]
    start = layer[layer[C.step] == 0].set_index(["run_id", C.layer])[[C.lam_median, C.lam_max]]
    joined = last.set_index(["run_id", C.layer])[[C.lam_median, C.lam_max]].join(
        start.add_suffix("_0"), how="inner")
    joined = joined.apply(pd.to_numeric, errors="coerce").dropna()
    if joined.empty:
        return out
    out["delta median |lambda|"] = float(
        (joined[C.lam_median] - joined[f"{C.lam_median}_0"]).mean())
    out["largest |delta max |lambda||"] = float(
        (joined[C.lam_max] - joined[f"{C.lam_max}_0"]).abs().max())
    return out


def _stationary_finding(arrays: dict, stationary: pd.DataFrame, task: str,
                        preset: str | None, run_ids) -> Finding:
    """Per trained depth and component: the variants' means with intervals, then every pair of
    `comparison_pairs` compared seed by seed (`harness.stats.pairwise` on each pair alone,
    Holm over the depth's pairs of that component), with the scale measured and the paper's."""
    lines = [regime_text(stationary)]
    steps_trained = int(pd.to_numeric(stationary["cfg.train.steps"]).max())
    for depth in sorted({d for d, _ in arrays}):
        here = {v: a for (d, v), a in arrays.items() if d == depth and a["seeds"]}
        if not here:
            continue
        per_seed = {v: components_by_seed(a["norms"], a["steps"]).set_index(
            pd.Index(a["seeds"], name="seed")) for v, a in here.items()}
        n = min(len(a["seeds"]) for a in here.values())
        dropped = sum(a["dropped"] for a in here.values())
        at = stationary[stationary["cfg.network.depth"] == depth]
        scale = (f"Measured on {style.task_label(task)} at depth {depth}, {n} seed{'s' if n != 1 else ''}, "
                 f"{steps_trained} training steps (evaluations "
                 f"{', '.join(str(s) for s in next(iter(here.values()))['steps'])}), long-probe "
                 f"sequences of {int(at[C.t_from].min())}-{int(at[C.t_to].max())} steps, preset "
                 f"{preset}" + (f"; {dropped} run(s) without every evaluation (diverged) left "
                                "out" if dropped else "")
                 + ". The RotRNN paper's claim is about ListOps, through training, across the "
                   "depth of its networks and across seeds.")
        lines.append(scale)
        pairs = [(a, b) for a, b in comparison_pairs(here) if a in here and b in here]
        for key, label, what in COMPONENTS:
            if key == "depth" and depth == 1:
                lines.append("Depth component at depth 1: not defined (one layer).")
                continue
            values = {v: per_seed[v][key] for v in here}
            means_by = {v: float(values[v].mean()) for v in here}  # NaN when undefined
            ranked = sorted(here, key=lambda v: (math.isnan(means_by[v]), means_by[v]))
            means = []
            for v in ranked:
                mean, low, high, _ = inference.mean_interval(values[v])
                means.append(f"{_label(v)} {mean:.3g} [{low:.3g}, {high:.3g}]")
            text = (f"{label.capitalize()} component ({what}) at depth {depth}, mean and 95% "
                    f"t interval over seeds, from lowest: {', '.join(means)}.")
            family = _pair_family(values, pairs)
            if family is None or int(family["n"].max()) < 2:
                text += " Fewer than two seeds in common: no pair can be tested."
            else:
                m = int(family["m"].iloc[0])
                text += (f" Paired by seed ({family['test'].iloc[0]} test, Holm over the {m} "
                         f"pair{'s' if m != 1 else ''} of this component at this depth, 5%; "
                         f"lower is steadier): {_stats.family_verdict(family)}"
                         " Per pair (first − second, 95% CI, d_z, Holm p, the difference "
                         "detectable with 80% power at 5%): "
                         + "; ".join(_stats.comparison_text(r, spec=".3g")
                                     for r in family.itertuples()) + ".")
            lines.append(text)
    return Finding(name=f"stability_stationary_findings_{task}",
                   title=f"The stationary-regime verdict ({style.task_label(task)})",
                   lines=tuple(lines), runs=tuple(run_ids))


def _pair_family(values: dict[str, pd.Series], pairs: list[tuple[str, str]]
                 ) -> pd.DataFrame | None:
    """`harness.stats.pairwise` restricted to ``pairs`` (one family, Holm over them): each pair
    compared on its common seeds."""
    frames = []
    for a, b in pairs:
        scores = pd.concat([values[a].rename(_label(a)), values[b].rename(_label(b))], axis=1)
        frames.append(inference.pairwise(scores, higher_is_better=False))
    if not frames:
        return None
    family = pd.concat(frames, ignore_index=True)
    m = int(np.isfinite(family["p"].to_numpy(dtype=float)).sum())
    family["m"] = m
    family["p_holm"] = inference.holm(family["p"].to_numpy(dtype=float))
    family["significant"] = family["p_holm"] <= inference.ALPHA
    favours = np.where(-family["diff"] > 0, family["first"], family["second"])
    family["better"] = np.where(family["significant"], favours, "")
    family_alpha = inference.ALPHA / max(m, 1)
    family["mdd_family"] = [
        math.nan if r.n < 2 else (
            (inference.sign_flip_mdd(r.n, family_alpha) if r.test == "exact sign-flip"
             else inference.paired_t_mdd(r.n, family_alpha)) * r.sd)
        for r in family.itertuples()]
    return family


def _init_table(frame: pd.DataFrame, task: str, preset: str | None) -> Artifact:
    """The initialisation sweep: at every measured depth, the stationary norm's spread across
    layers and across seeds before any training (step 0 of every run, trained or not)."""
    rows = frame[(frame[C.kind] == "stationary") & (frame[C.step] == 0)]
    name, title = (f"stability_init_{task}",
                   f"The stationary state norm at initialisation, by depth ({style.task_label(task)})")
    if rows.empty:
        return Missing(name, title, "no long-probe rows (stored before study version 4)")
    records = []
    for (depth, variant), at in rows.groupby(["cfg.network.depth", "cfg.variant"]):
        table = at.pivot_table(index="seed", columns=C.layer, values=C.norm_stationary).dropna()
        norms = table.to_numpy(dtype=float)[:, None, :]  # (seeds, 1 step, layers)
        record = {"network_depth": int(depth), "variant": variant, "seeds": len(table),
                  "norm": _geo(at[C.norm_stationary])}
        for key, component in (("depth", state_norm.depth_component),
                               ("seed", state_norm.seed_component)):
            per_seed = (component(norms) if len(table) >= (2 if key == "seed" else 1)
                        else np.array([]))
            mean, low, high, _ = inference.mean_interval(per_seed)
            record.update({key: mean, f"{key} low": low, f"{key} high": high})
        reached = (pd.to_numeric(at[C.energy_reached], errors="coerce")
                   if C.energy_reached in at.columns else pd.Series(dtype=float))
        record["energy reached (min)"] = reached.min() if reached.notna().any() else math.nan
        records.append(record)
    summary = pd.DataFrame.from_records(records)
    order = {v: i for i, v in enumerate(_variant_order(summary["variant"]))}
    summary = summary.assign(o=summary["variant"].map(order)).sort_values(
        ["network_depth", "o"])
    frame_out = summary.drop(columns=["network_depth", "variant", "o"])
    frame_out.index = pd.MultiIndex.from_arrays(
        [summary["network_depth"], [_label(v) for v in summary["variant"]]],
        names=["Depth", "Variant"])
    frame_out["seeds"] = frame_out["seeds"].astype("Int64")
    return Table(
        name=name, title=title,
        caption=(
            f"Before training, on {style.task_label(task)} (preset {preset}): the stationary norm (mean ||h_t|| "
            f"over the long probe's last steps; geometric mean over layers and seeds), its "
            f"depth component (s.d. of log norm across the layers of one network) and seed "
            f"component (RMS deviation of a seed's log norms from the mean over seeds), each "
            f"with its mean and 95% t interval over seeds, and the smallest white-noise energy "
            f"reached at the window's start (>= 0.9: stationary). Every variant's "
            f"registration options (heads as registered); the probe length and the heads are "
            f"not swept here."),
        frame=frame_out, digits={c: 3 for c in frame_out.columns}, runs=_run_ids(rows),
    )


def _stationary_figure(stationary: pd.DataFrame, task: str, preset: str | None,
                       depth: int) -> Figure:
    """Per-layer absolute stationary norms through training, one panel per variant, one shared
    log y axis: the geometric mean over seeds with its 95 % interval (`_layer_panel`)."""
    style.apply_style()
    rows = stationary[stationary["cfg.network.depth"] == depth]
    names = _variant_order(rows["cfg.variant"].unique())
    fig, axes = _panels(len(names))
    data = []
    for ax, variant in zip(axes.flat, names):
        at = rows[rows["cfg.variant"] == variant]
        data += _layer_panel(ax, at, variant, depth, C.norm_stationary, "norm_stationary")
    for row in axes:
        row[0].set_ylabel("stationary ||h_t||")
    counts = [n for frame in data for n in frame["n"]]
    _grey_legend(fig)
    return Figure(
        name=f"stability_stationary_{task}_depth{depth}",
        title=f"Stationary hidden-state norm per layer through training ({style.task_label(task)}, depth {depth})",
        caption=(
            f"The absolute state norm ||h_t|| of each layer of the {depth}-block networks "
            f"trained on {style.task_label(task)} (preset {preset}), averaged over the last steps of long probe "
            f"sequences ({int(rows[C.t_from].min())}-{int(rows[C.t_to].max())} steps, drawn by "
            f"the task's generator), at every evaluation step. Per layer, "
            f"{_interval_text(counts)}; the faint lines are the seeds one by one; darker "
            f"shades are deeper layers. One panel per layer variant, all on one log-scale y "
            f"axis."),
        figure=fig, runs=_run_ids(rows), data=_no_empty_bounds(_concat(data)),
    )


SECTION = Section("stability", TITLE, INTRO, section)
