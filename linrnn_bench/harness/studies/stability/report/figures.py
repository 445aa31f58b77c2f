"""The stability section's figures: the norm through training (relative to initialisation, and
the long probe's stationary norm), the eigenvalue moduli, the norm by layer and depth, and the
norm over time; one panel per layer variant on one shared y-axis, so that the variants compare
at a glance (`style.panels`, full-width whatever the number of panels)."""

from __future__ import annotations

import math

import matplotlib.colors as mcolors
import matplotlib.pyplot as plt
from matplotlib.ticker import MaxNLocator
import numpy as np
import pandas as pd

from .... import stats as inference
from ....report import style
from ....report.artifacts import Artifact, Figure, Missing, drawn_data, run_ids
from ._data import C, _deepest_trained, _label, _trained, _variant_order, relative_norms
from ._statistics import _interval_rows


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
            open_marker = mcolors.same_color(handle.get_markerfacecolor(), "white")
            entries[label] = Line2D([], [], color=grey, linestyle=handle.get_linestyle(),
                                    linewidth=handle.get_linewidth(), marker=handle.get_marker(),
                                    markersize=handle.get_markersize(),
                                    markerfacecolor="white" if open_marker else grey)
    style.figure_legend(fig, entries)


def _shade(colour: str, k: int, depth: int) -> tuple[float, float, float]:
    """``colour`` lightened towards white for shallow layers: layer ``depth`` is the full colour."""
    weight = 0.35 + 0.65 * (k / depth if depth > 1 else 1.0)
    rgb = np.array(mcolors.to_rgb(colour))
    return tuple(weight * rgb + (1.0 - weight) * np.ones(3))


def _band(ax, x, curve: pd.DataFrame, colour, **line) -> None:
    """``curve``'s centre as a line (``line``: its style and label) over its 95 % interval as a
    band of the same colour; no band where the interval is undefined (n = 1)."""
    ax.fill_between(np.asarray(x, dtype=float), curve["ci95_low"].to_numpy(dtype=float),
                    curve["ci95_high"].to_numpy(dtype=float), color=colour, alpha=0.22,
                    linewidth=0)
    ax.plot(np.asarray(x, dtype=float), curve["centre"].to_numpy(dtype=float), color=colour,
            **line)


def _title(variant: str) -> str:
    """A variant's panel title as a paper writes it ("RotRNN, $\\xi$ off"); its CSV rows keep
    the label's words."""
    return style.math_text(_label(variant))


def _words(variant: str) -> str:
    """A variant's label in a caption, its symbols as letters ("RotRNN, ξ off")."""
    return style.math_text(_label(variant), unicode=True)


def _one_scale(axes, variants: list[str]) -> list[str]:
    """One y range for the variants' panels (drawn unshared, on log axes), except a panel that
    alone would stretch it to more than twice what the others need (`style.outlier_panels`: an
    unstable layer whose norm runs away would flatten every other panel). That panel keeps a
    scale of its own and says so in its title; returns those variants (for the caption)."""
    panels = list(axes.flat[:len(variants)])
    ranges = {ax: (math.log10(max(ax.dataLim.y0, 1e-300)), math.log10(max(ax.dataLim.y1,
                                                                            1e-300)))
              for ax in panels}
    own = style.outlier_panels(ranges)
    style.share_y(panels, own=own)
    for ax in panels:
        style.plain_log_ticks(ax)
    for ax in own:
        ax.set_title(f"{ax.get_title()} (own scale)")
    return [v for ax, v in zip(panels, variants) if ax in own]


def _own_scale_text(own: list[str]) -> str:
    """The caption's sentence on the panels drawn on a scale of their own (`_one_scale`)."""
    if not own:
        return ""
    names = ", ".join(_words(v) for v in own)
    return (f" {names}: drawn on a y scale of {'its' if len(own) == 1 else 'their'} own "
            "(marked in the title), since its range would stretch the shared axis to more than "
            "twice what the other panels need and flatten them.")


def _figure_data(frames: list[pd.DataFrame]) -> pd.DataFrame | None:
    """A figure's data (`drawn_data`) without interval columns that no point has (every
    n = 1): an interval not drawn is not a column of NaN."""
    data = drawn_data(frames)
    if data is None:
        return None
    empty = [c for c in data.columns if "ci95_" in c and data[c].isna().all()]
    return data.drop(columns=empty)


def _interval_text(counts, what: str = "the geometric mean over seeds") -> str:
    """The caption's words for a figure's centres and bands over seeds."""
    return (f"the line is {what}, the band its 95 % t interval over "
            f"{style.n_seeds_text(counts)} per point (the t interval of the mean of the "
            f"seeds' log values, exponentiated; none at n = 1)")


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
    ax.set_title(_title(variant))
    ax.set_yscale("log")
    style.plain_log_ticks(ax)
    style.ticks_at(ax, rows[C.step].unique(), "x", most=5)  # at evaluation steps
    ax.set_xlabel("training step")
    return data


def _training_figure(trained: pd.DataFrame, task: str, preset: str | None, depth: int,
                     deepest: bool) -> Artifact:
    style.apply_style()
    trained = relative_norms(trained[trained["cfg.network.depth"] == depth])
    variants = _variant_order(trained["cfg.variant"].unique())
    fig, axes = style.panels(len(variants), 1.8, width="full")
    data: list[pd.DataFrame] = []
    for ax, variant in zip(axes.flat, variants):
        rows = trained[trained["cfg.variant"] == variant]
        data += _layer_panel(ax, rows, variant, depth, "relative", "relative_norm",
                             reference=1.0)
    own = _one_scale(axes, variants)
    for row in axes:
        row[0].set_ylabel(r"$\|h\|$ / $\|h\|$ at initialisation")
    counts = [n for frame in data for n in frame["n"]]
    _grey_legend(fig)
    return Figure(
        name=f"stability_training_{task}" if deepest else f"stability_training_{task}_depth{depth}",
        title=f"Hidden-state norm through training, relative to initialisation ({style.task_label(task)}, "
              f"depth {depth})",
        caption=(
            f"Mean over the probe batch and time of the state norm ‖h_t‖ of each layer of a "
            f"{depth}-block network trained on {style.task_label(task)} (preset {preset}), at every evaluation "
            f"step, divided by the same layer's value at initialisation (1 = no drift; dotted). "
            f"Per layer, {_interval_text(counts)}; the faint lines are the seeds one by one; "
            f"darker shades are deeper layers. One panel "
            f"per layer variant, all on one log-scale y-axis, so the variants' drifts compare "
            f"directly.{_own_scale_text(own)} The absolute norms are in the stationary figures "
            f"and the summary table."
        ),
        figure=fig,
        runs=run_ids(trained),
        data=_figure_data(data),
    )


# The eigenvalue figure's three statistics: its column, line style and legend words.
_EIGEN_STATISTICS = (("lam_max", "-", r"max $|\lambda|$"), ("lam_median", "--", "median"),
                     ("lam_min", ":", "min"))


# The statistics in a caption's words.
_EIGEN_WORDS = {"lam_max": "max |λ|", "lam_median": "median", "lam_min": "min"}


def _without_eigenvalues(trained: pd.DataFrame, variants: list[str]) -> list[str]:
    """The variants with no measured eigenvalue modulus: a layer without a discrete system has
    no eigenvalue columns, so it is named in the caption rather than drawn as an empty panel."""
    return [v for v in variants if C.lam_max not in trained.columns or not pd.to_numeric(
        trained.loc[trained["cfg.variant"] == v, C.lam_max], errors="coerce").notna().any()]


def _eigen_curves(trained: pd.DataFrame,
                  variants: list[str]) -> dict[tuple[str, str], pd.DataFrame]:
    """Per variant and statistic, the curve through training: per seed, over the network's
    layers, the modulus closest to 1, the median and the farthest; then their mean over seeds
    with its 95 % t interval, per step (columns mean, low, high, n; the step is the index)."""
    curves: dict[tuple[str, str], pd.DataFrame] = {}
    for variant in variants:
        rows = trained[trained["cfg.variant"] == variant]
        per_seed = rows.groupby(["seed", C.step]).agg(
            lam_max=(C.lam_max, "max"), lam_median=(C.lam_median, "median"),
            lam_min=(C.lam_min, "min"),
        )
        for column, _, _ in _EIGEN_STATISTICS:
            values = pd.to_numeric(per_seed[column], errors="coerce")
            curves[variant, column] = pd.DataFrame.from_dict(
                {step: inference.mean_interval(group)
                 for step, group in values.groupby(level=C.step)},
                orient="index", columns=["mean", "low", "high", "n"]).sort_index()
    return curves


def _eigen_floor(curves: dict[tuple[str, str], pd.DataFrame]) -> float | None:
    """The bottom of the 1 - |lambda| log axis: half the smallest positive distance drawn.

    An interval reaching |lambda| = 1 has no lower end on a log axis; its band runs to this
    floor. ``None`` when no distance is positive.
    """
    positive = np.concatenate([1.0 - c[["mean", "low", "high"]].to_numpy(dtype=float).ravel()
                               for c in curves.values()])
    positive = positive[np.isfinite(positive) & (positive > 0)]
    return 0.5 * positive.min() if positive.size else None


def _eigen_panel(ax, rows: pd.DataFrame, variant: str,
                 curves: dict[tuple[str, str], pd.DataFrame],
                 floor: float | None) -> tuple[list[pd.DataFrame], list[str]]:
    """One variant's panel: 1 - |lambda| of each statistic as a line over its band (the band
    clipped at ``floor``, the line stopping where the mean modulus reaches 1). Returns the
    plotted numbers and, for the caption, the statistics that reach the unit circle and from
    which step."""
    colour = style.model_colour(rows["cfg.network.layer"].iloc[0])
    data: list[pd.DataFrame] = []
    unit_circle: list[str] = []
    for column, linestyle, what in _EIGEN_STATISTICS:
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
            unit_circle.append(f"{_words(variant)}'s {_EIGEN_WORDS[column]} from step "
                               f"{int(beyond.min())}")
        lower = (1.0 - curve["high"]).to_numpy(dtype=float)
        if floor is not None:
            lower = np.where(lower > 0, lower, floor)
        ax.fill_between(line["step"].to_numpy(dtype=float), lower,
                        (1.0 - curve["low"]).to_numpy(dtype=float), color=colour,
                        alpha=0.18, linewidth=0)
        ax.plot(line["step"], line["one_minus_modulus"].where(line["one_minus_modulus"] > 0),
                color=colour, linestyle=linestyle, label=what)
    ax.set_title(_title(variant))
    ax.set_yscale("log")
    style.ticks_at(ax, line["step"].unique(), "x", most=5)  # at evaluation steps
    ax.set_xlabel("training step")
    return data, unit_circle


def _eigen_caption(task: str, preset: str | None, depth: int, counts: list,
                   unit_circle: list[str], blank: list[str]) -> str:
    """The eigenvalue figure's caption: what is drawn, the statistics over seeds, where a mean
    modulus reaches 1 (``unit_circle``) and which variants are not drawn (``blank``)."""
    return (
        f"Distance of the eigenvalue moduli from the unit circle, 1 - |λ|, over all "
        f"{depth} layers of the trained networks on {style.task_label(task)} (preset "
        f"{preset}): per seed the largest modulus over layers (solid), the median of the "
        f"layers' medians (dashed) and the smallest (dotted); the line is their mean over "
        f"seeds, the band its 95 % t interval over {style.n_seeds_text(counts)} per point "
        f"(the t interval of the mean modulus, mapped through 1 - |λ|; a band that "
        f"reaches the axis' bottom is an interval reaching |λ| = 1, none is drawn "
        f"where it lies wholly beyond 1). A solid line "
        f"falling towards zero is drift towards instability. Log scale."
        + (f" Where the mean modulus reaches 1 ({'; '.join(unit_circle)}), 1 - |λ| "
           "has no logarithm and the line stops; the CSV keeps those points."
           if unit_circle else "")
        + "".join(f" {_words(v)}: not drawn, its registration declares no discrete system "
                  "(no fixed eigenvalues)." for v in blank)
    )


def _eigen_figure(trained: pd.DataFrame, task: str, preset: str | None) -> Artifact:
    """Per variant, the eigenvalue moduli's distance from the unit circle through training in
    the deepest trained networks (`_eigen_panel`), one shared log y axis."""
    style.apply_style()
    trained, depth = _deepest_trained(trained)
    variants = _variant_order(trained["cfg.variant"].unique())
    blank = _without_eigenvalues(trained, variants)
    variants = [v for v in variants if v not in blank]
    name = f"stability_eigenvalues_{task}"
    title = f"Eigenvalue moduli through training ({style.task_label(task)})"
    if not variants:
        return Missing(name, title, "no measured layer declares a discrete system")
    fig, axes = style.panels(len(variants), 1.8, sharey=True, width="full")
    curves = _eigen_curves(trained, variants)
    floor = _eigen_floor(curves)
    data: list[pd.DataFrame] = []
    unit_circle: list[str] = []
    for ax, variant in zip(axes.flat, variants):
        drawn, reached = _eigen_panel(ax, trained[trained["cfg.variant"] == variant], variant,
                                      curves, floor)
        data += drawn
        unit_circle += reached
    # After every panel is drawn: a limit set earlier would stop the shared axis autoscaling.
    if floor is not None:
        axes.flat[0].set_ylim(bottom=floor)
    for ax in axes.flat[:len(variants)]:
        style.plain_log_ticks(ax)
    for row in axes:
        row[0].set_ylabel(r"$1 - |\lambda|$")
    _grey_legend(fig)
    counts = [n for frame in data for n in frame["n"]]
    return Figure(
        name=name,
        title=title,
        caption=_eigen_caption(task, preset, depth, counts, unit_circle, blank),
        figure=fig,
        runs=run_ids(trained),
        data=_figure_data(data),
    )


def _depth_colours(n: int) -> list[tuple[float, float, float]]:
    """``n`` colours of a sequential palette (viridis, dark to light without its faint yellow
    end): its lightness rises monotonically, so the depths stay in order in a grey-scale print
    too; each depth also has a marker of its own."""
    cmap = plt.get_cmap("viridis")
    return [tuple(cmap(x)[:3]) for x in np.linspace(0.0, 0.78, max(n, 1))][:n]


# Points between two series' marks about one layer index (`_depth_offsets`).
_DEPTH_GAP_PT = 3.5


def _depth_offsets(depths: list[int], trained_depths: list[int]
                   ) -> dict[tuple[int, str], float]:
    """How far (in points, on the page) each depth's series sits from its layer index, at
    initialisation and trained: every series its own place, side by side in the legend's
    order, so that none hides another while the data keep the layer index (`style.dodge`)."""
    slots = [(d, when) for d in depths for when in ("initialisation", "trained")
             if when == "initialisation" or d in trained_depths]
    return {slot: _DEPTH_GAP_PT * (i - (len(slots) - 1) / 2) for i, slot in enumerate(slots)}


def _depth_series(at_depth: pd.DataFrame,
                  trained_mask: pd.Series) -> tuple[tuple[str, pd.DataFrame], ...]:
    """A depth's two series of rows: at initialisation (step 0) and, for its trained runs, at
    each run's last evaluation."""
    done = at_depth[trained_mask.loc[at_depth.index]]
    last = done[done[C.step] == done.groupby("run_id")[C.step].transform("max")]
    return (("initialisation", at_depth[at_depth[C.step] == 0]), ("trained", last))


def _depth_panel(ax, rows: pd.DataFrame, variant: str, depths: list[int],
                 trained_mask: pd.Series, colours: dict, markers: dict,
                 offsets: dict[tuple[int, str], float]) -> list[pd.DataFrame]:
    """One variant's panel: per depth and series (`_depth_series`), the geometric mean norm
    over seeds of each layer with its 95 % interval as whiskers (solid and filled at
    initialisation, dashed and open trained). Returns the plotted numbers."""
    data: list[pd.DataFrame] = []
    for depth in depths:
        at_depth = rows[rows["cfg.network.depth"] == depth]
        if at_depth.empty:
            continue
        for when, source in _depth_series(at_depth, trained_mask):
            if source.empty:
                continue
            # One value per seed and layer (runs of one seed averaged), for the interval over
            # seeds.
            values = source.groupby(["seed", C.layer], as_index=False)[C.norm_mean].mean()
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
            bars = ax.errorbar(curve.index.to_numpy(dtype=float), centre, yerr=whiskers,
                               color=colours[depth], marker=markers[depth], markersize=2.6,
                               markerfacecolor="white" if trained_series else colours[depth],
                               linestyle="--" if trained_series else "-", linewidth=0.9,
                               elinewidth=0.7, capsize=1.2)
            style.dodge([bars], offsets[(depth, when)])
    ax.set_title(_title(variant))
    ax.set_yscale("log")
    style.plain_log_ticks(ax)
    ax.set_xlabel("layer index")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    # Half a layer either side: room for the series set apart about the first and last index.
    ax.set_xlim(0.5, max(depths) + 0.5)
    return data


def _depth_legend(fig, depths: list[int], colours: dict, markers: dict,
                  trained_depths: list[int]) -> None:
    """The depth figure's legend: each depth's colour and marker, then the two series' styles
    in grey (the trained one only where some depth was trained)."""
    from matplotlib.lines import Line2D

    entries = {f"depth {d}": Line2D([], [], color=colours[d], marker=markers[d], markersize=3.0)
               for d in depths}
    grey = style.REFERENCE_COLOUR
    entries["initialisation"] = Line2D([], [], color=grey, marker="o", markersize=3.0)
    if trained_depths:
        entries["trained"] = Line2D([], [], color=grey, marker="o", markersize=3.0,
                                    markerfacecolor="white", linestyle="--")
    style.figure_legend(fig, entries)


def _depth_caption(task: str, preset: str | None, depths: list[int],
                   trained_depths: list[int], counts: list) -> str:
    """The depth figure's caption: the depths, the two series, the statistics over seeds."""
    trained_text = (
        f" and after training (dashed, open markers; trained depth"
        f"{'s' if len(trained_depths) != 1 else ''} {', '.join(map(str, trained_depths))} "
        f"only)" if trained_depths else "")
    return (
        f"Mean state norm of each layer (x: its index in the network) for networks of depth "
        f"{', '.join(map(str, depths))} on {style.task_label(task)} (preset {preset}), each "
        f"depth its own colour and marker, at initialisation (solid, filled markers)"
        f"{trained_text}. The marker is the geometric mean over seeds, the whiskers its "
        f"95 % t interval over {style.n_seeds_text(counts)} per point (the t interval of "
        f"the mean of the seeds' log norms, exponentiated; none at n = 1); the series are "
        f"set a few points apart about each layer index, in the legend's order. Log scale."
    )


def _depth_figure(layer: pd.DataFrame, task: str, preset: str | None) -> Artifact:
    """Per variant, the mean norm of each layer against its index, one series per network depth
    (its own colour and marker) at initialisation (solid, filled) and, for trained depths, at
    the last evaluation (dashed, open): the geometric mean over seeds with its 95 % interval as
    whiskers, the series set side by side about each layer index so that none hides another."""
    style.apply_style()
    variants = _variant_order(layer["cfg.variant"].unique())
    # Three panels a row: room for the depths side by side at each layer index.
    fig, axes = style.panels(len(variants), 1.7, ncols=3, width="full")
    depths = sorted(int(d) for d in layer["cfg.network.depth"].unique())
    colours = dict(zip(depths, _depth_colours(len(depths))))
    markers = {d: style.MARKERS[i % len(style.MARKERS)] for i, d in enumerate(depths)}
    trained_mask = _trained(layer)
    trained_depths = sorted(int(d) for d in layer.loc[trained_mask, "cfg.network.depth"].unique())
    offsets = _depth_offsets(depths, trained_depths)
    data: list[pd.DataFrame] = []
    for ax, variant in zip(axes.flat, variants):
        data += _depth_panel(ax, layer[layer["cfg.variant"] == variant], variant, depths,
                             trained_mask, colours, markers, offsets)
    own = _one_scale(axes, variants)
    for row in axes:
        row[0].set_ylabel(r"mean $\|h_t\|$")
    _depth_legend(fig, depths, colours, markers, trained_depths)
    counts = [n for frame in data for n in frame["n"]]
    return Figure(
        name=f"stability_depth_{task}",
        title=f"Hidden-state norm by layer index and network depth ({style.task_label(task)})",
        caption=_depth_caption(task, preset, depths, trained_depths, counts)
        + _own_scale_text(own),
        figure=fig,
        runs=run_ids(layer),
        data=_figure_data(data),
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


def _profile_source(profile: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, int]:
    """The rows a profile figure draws: the trained rows (empty when none), the deepest trained
    network's rows (else the deepest measured network's), and that depth."""
    trained = profile[_trained(profile)]
    source = trained if not trained.empty else profile
    depth = int(source["cfg.network.depth"].max())
    return trained, source[source["cfg.network.depth"] == depth], depth


def _probe_examples(source: pd.DataFrame) -> tuple[pd.Series, int, int]:
    """The probe examples still running at each t (the fewest over ``source``'s rows; empty
    where the runs did not store it), the probe batch (the most at any t; 0 when unknown), and
    the fewest a drawn point may rest on (`PROFILE_MIN_SHARE` of the batch)."""
    examples = (pd.to_numeric(source[C.examples], errors="coerce").groupby(source[C.t]).min()
                if C.examples in source.columns else pd.Series(dtype=float))
    batch = int(examples.max()) if examples.notna().any() else 0
    return examples, batch, math.ceil(PROFILE_MIN_SHARE * batch)


def _profile_panel(ax, rows: pd.DataFrame, variant: str, depth: int, examples: pd.Series,
                   minimum: int) -> list[pd.DataFrame]:
    """One variant's panel, on log-log axes: per layer (a marker of its own, deeper darker), the
    mean norm against t at initialisation (grey, dashed, open markers) and at the last
    evaluation (the model's colour, solid, filled), the geometric mean over seeds over its
    95 % interval as a band, drawn only where at least ``minimum`` probe examples are running.
    Returns the numbers, every t (drawn or not) with its count."""
    colour = style.model_colour(rows["cfg.network.layer"].iloc[0])
    final_step = int(rows[C.step].max())
    data: list[pd.DataFrame] = []
    for k in range(1, depth + 1):
        at_k = rows[rows[C.layer] == k]
        for step in dict.fromkeys((0, final_step)):
            # Before training grey and dashed, trained in colour and solid: apart in hue,
            # line and marker fill, so in a grey print too.
            trained = step != 0
            shade = _shade(colour if trained else style.REFERENCE_COLOUR, k, depth)
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
            _band(ax, curve.index[drawn], curve[drawn], shade,
                  linestyle="-" if trained else "--",
                  marker=style.MARKERS[(k - 1) % len(style.MARKERS)], markersize=2.5,
                  markerfacecolor=shade if trained else "white", markeredgewidth=0.6,
                  label=f"layer {k}, step {step}")
    ax.set_title(_title(variant))
    ax.set_xscale("log")
    ax.set_yscale("log")
    style.plain_log_ticks(ax)
    style.ticks_at(ax, style.drawn_positions(ax, "x"), "x", most=5)
    ax.set_xlabel(r"time step $t$")
    return data


def _examples_caption(examples: pd.Series, batch: int, minimum: int) -> str:
    """The caption's sentences on the probe examples behind each t and the points left out
    (resting on fewer than ``minimum`` of the ``batch``), or that the runs did not store them."""
    if not examples.notna().any():
        return " The runs did not store how many examples each point rests on."
    left_out = examples[examples < minimum]
    return (
        f" The probe batch's examples still running at each t: "
        f"{_examples_text(examples.dropna())}. Points resting on fewer than "
        f"{minimum} of the {batch} examples (half the batch) describe its few longest "
        f"examples rather than the batch and are not drawn"
        + (f" (t = {', '.join(f'{t:g}' for t in left_out.index)})" if len(left_out)
           else " (none here)")
        + "; the CSV keeps every point with its count.")


def _profile_figure(profile: pd.DataFrame, task: str, preset: str | None) -> Artifact:
    """The mean norm against t for the deepest trained network (else the deepest measured), per
    layer at initialisation and at the last evaluation: the geometric mean over seeds with its
    95 % interval, drawn only at the t where at least `PROFILE_MIN_SHARE` of the probe batch is
    still running; the caption gives the examples behind every t."""
    if profile.empty:
        return Missing(f"stability_profile_{task}", f"Norm over time ({style.task_label(task)})",
                       f"no profile rows on {style.task_label(task)} at preset {preset}")
    style.apply_style()
    trained, source, depth = _profile_source(profile)
    examples, batch, minimum = _probe_examples(source)
    variants = _variant_order(source["cfg.variant"].unique())
    fig, axes = style.panels(len(variants), 1.8, width="full")
    data: list[pd.DataFrame] = []
    for ax, variant in zip(axes.flat, variants):
        data += _profile_panel(ax, source[source["cfg.variant"] == variant], variant, depth,
                               examples, minimum)
    own = _one_scale(axes, variants)
    for row in axes:
        row[0].set_ylabel(r"mean $\|h_t\|$ at step $t$")
    what = ("initialisation (grey, dashed, open markers) and the last evaluation (the "
            "model's colour, solid, filled markers)" if not trained.empty else "initialisation")
    counts = [n for frame in data for n in frame["n"]]
    examples_text = _examples_caption(examples, batch, minimum)
    _grey_legend(fig)
    return Figure(
        name=f"stability_profile_{task}",
        title=f"Hidden-state norm over time ({style.task_label(task)})",
        caption=(
            f"Mean over the probe examples still running at step t of the state norm ‖h_t‖, "
            f"per layer of the {depth}-block networks on {style.task_label(task)} (preset "
            f"{preset}), at {what}: {_interval_text(counts)}; each layer has its own marker, "
            f"darker shades are deeper layers.{examples_text} Log-log scale; the ticks are at "
            f"probe steps.{_own_scale_text(own)}"
        ),
        figure=fig,
        runs=run_ids(source),
        data=_figure_data(data),
    )


def _probe_source(rows: pd.DataFrame) -> str:
    """Where the long probe's sequences came from, as the rows record it (rows stored before
    the column: the task's generator, the only source then)."""
    sources = set(rows[C.source].dropna()) if C.source in rows.columns else set()
    if sources == {"stream"}:
        return "the training split's examples laid back to back"
    return "drawn by the task's generator at longer lengths than trained on"


def _stationary_figure(stationary: pd.DataFrame, task: str, preset: str | None,
                       depth: int) -> Figure:
    """Per-layer absolute stationary norms through training, one panel per variant, one shared
    log y axis: the geometric mean over seeds with its 95 % interval (`_layer_panel`)."""
    style.apply_style()
    rows = stationary[stationary["cfg.network.depth"] == depth]
    names = _variant_order(rows["cfg.variant"].unique())
    fig, axes = style.panels(len(names), 1.8, width="full")
    data = []
    for ax, variant in zip(axes.flat, names):
        at = rows[rows["cfg.variant"] == variant]
        data += _layer_panel(ax, at, variant, depth, C.norm_stationary, "norm_stationary")
    own = _one_scale(axes, names)
    for row in axes:
        row[0].set_ylabel(r"stationary $\|h_t\|$")
    counts = [n for frame in data for n in frame["n"]]
    _grey_legend(fig)
    return Figure(
        name=f"stability_stationary_{task}_depth{depth}",
        title=f"Stationary hidden-state norm per layer through training ({style.task_label(task)}, depth {depth})",
        caption=(
            f"The absolute state norm ‖h_t‖ of each layer of the {depth}-block networks "
            f"trained on {style.task_label(task)} (preset {preset}), averaged over the last steps of long probe "
            f"sequences ({int(rows[C.t_to].min())}-{int(rows[C.t_to].max())} steps, "
            f"{_probe_source(rows)}), at every evaluation step. Per layer, "
            f"{_interval_text(counts)}; the faint lines are the seeds one by one; darker "
            f"shades are deeper layers. One panel per layer variant, on one log-scale y "
            f"axis.{_own_scale_text(own)}"),
        figure=fig, runs=run_ids(rows), data=_figure_data(data),
    )
