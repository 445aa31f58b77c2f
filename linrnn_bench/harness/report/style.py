"""One look for every figure of the report: colours, markers, sizes and matplotlib settings.

Every figure calls `apply_style()` before drawing and colours a model with `model_colour(name)`
(or a whole seaborn ``palette=model_palette(names)``), so a model has one colour throughout the
report. The colours are the Okabe–Ito palette (Okabe & Ito, 2008, "Color Universal Design"),
chosen to stay distinguishable under the common forms of colour blindness; each model also has
its own marker so that a grey-scale print still tells them apart. Colours, markers, labels and
the order of models all come from the model registry (`models.infos()`): the n-th registered
model gets the n-th colour and marker, so a model registered from outside gets the next ones.

Typical use in a section module::

    from linrnn_bench.harness.report import style

    style.apply_style()
    fig, ax = plt.subplots(figsize=style.figsize())
    for name in style.order_models(frame["cfg.model"].unique()):
        ax.plot(x, y, label=style.model_label(name), color=style.model_colour(name),
                marker=style.model_marker(name))
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import matplotlib as mpl

# How a measured program is named in titles and tables (throughput and memory studies).
MODE_LABELS: dict[str, str] = {
    "forward": "forward", "forward_backward": "fwd+bwd", "train": "train step"
}

# Okabe–Ito colours, given to models in registration order. Blue, vermillion, bluish green and
# reddish purple are the four most distinct from each other for deuteranopes, protanopes and
# tritanopes alike, so the first four models get them; the rest go, in this order, to models
# registered later (yellow last: it is faint on white).
PALETTE: tuple[str, ...] = (
    "#0072B2",  # blue
    "#D55E00",  # vermillion
    "#009E73",  # bluish green
    "#CC79A7",  # reddish purple
    "#E69F00",  # orange
    "#56B4E9",  # sky blue
    "#000000",  # black
    "#F0E442",  # yellow
)
MARKERS: tuple[str, ...] = ("o", "s", "^", "D", "v", "P", "X", "*")

# Neutral colour for things that are not a model (published values, reference lines).
REFERENCE_COLOUR = "#555555"

# Figure geometry: a single column of a two-column paper is about 3.3 in wide, a full width
# about 6.8 in. A fixed DPI makes the PNG bytes a function of the figure alone.
COLUMN_WIDTH_IN = 3.3
FULL_WIDTH_IN = 6.8
DPI = 200

_RC: dict[str, object] = {
    "figure.dpi": DPI,
    "savefig.dpi": DPI,
    "savefig.bbox": "tight",
    "savefig.pad_inches": 0.02,
    "figure.constrained_layout.use": True,
    "font.family": "DejaVu Sans",  # ships with matplotlib: the same glyphs everywhere
    "font.size": 8.0,
    "axes.titlesize": 9.0,
    "axes.labelsize": 8.0,
    "legend.fontsize": 7.0,
    "xtick.labelsize": 7.0,
    "ytick.labelsize": 7.0,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "grid.linewidth": 0.5,
    "lines.linewidth": 1.2,
    "lines.markersize": 4.0,
    "legend.frameon": False,
    # Text stays text in PDFs (TrueType, type 42), so a journal's checker accepts the fonts.
    "pdf.fonttype": 42,
    "ps.fonttype": 42,
    # Fixed salt: SVG ids (and anything else matplotlib hashes) do not change between runs.
    "svg.hashsalt": "linrnn-bench",
    # A section's figures stay open until the report writes them (the cpu-full report draws
    # more than matplotlib's warning threshold of 20); each is closed once written.
    "figure.max_open_warning": 0,
    "path.simplify": True,
    "axes.prop_cycle": mpl.cycler(color=list(PALETTE)),
}


def apply_style() -> None:
    """Set the report's matplotlib style (idempotent; call before drawing each figure).

    Seaborn's ``ticks`` look with the report's sizes; the colour cycle is the model palette, so
    even a figure that forgets `model_colour` draws in the same colours.
    """
    import seaborn as sns

    sns.set_theme(context="paper", style="ticks", rc=_RC)
    mpl.rcParams.update(_RC)


def model_order() -> tuple[str, ...]:
    """Registered model names in the order every table and legend lists them."""
    from linrnn_bench import models

    return tuple(m.name for m in models.infos())


def _place(name: str) -> int:
    # A model's place in the registry (a model registered from outside comes after ours). A
    # name given by import path registers its layer on first sight (`models.resolve`), so the
    # order is read again after resolving it. A name no registry knows (an import path that no
    # longer resolves) takes the place after every registered one: such names share a colour.
    order = model_order()
    if name in order:
        return order.index(name)
    resolved = _resolved(name)
    order = model_order()
    if resolved is not None and resolved in order:
        return order.index(resolved)
    return len(order)


def _resolved(name: str) -> str | None:
    from linrnn_bench import models

    try:
        return models.resolve(name)
    except (ValueError, TypeError):
        return None


def model_colour(name: str) -> str:
    """The model's colour as a hex string, the same in every figure of the report."""
    return PALETTE[_place(name) % len(PALETTE)]


def model_marker(name: str) -> str:
    """The model's matplotlib marker, the same in every figure of the report."""
    return MARKERS[_place(name) % len(MARKERS)]


def model_labels(names) -> dict[str, str]:
    """``{name: label}`` for the model names of a table (`model_label`); names that would share
    a label (one layer stored by its import path and by its registered name) get the name
    beside it, so that no two rows read the same."""
    names = list(dict.fromkeys(names))
    labels = {n: model_label(n) for n in names}
    shared = {lab for lab in labels.values() if list(labels.values()).count(lab) > 1}
    return {n: f"{lab} ({n})" if lab in shared else lab for n, lab in labels.items()}


def model_label(name: str) -> str:
    """The model's name as the papers write it (its registration's label, e.g. ``RotRNN``)."""
    resolved = _resolved(name)
    if resolved is None:
        return name
    from linrnn_bench import models

    return models.info(resolved).label


def task_label(key: str, options: Mapping[str, Any] | None = None) -> str:
    """The task's name as papers write it ("ListOps", "JapaneseVowels"): its registration's
    label (`tasks.label`), given the run's task ``options`` where the name depends on them; a
    key no registration knows is written as words ("my_task" -> "My task")."""
    from linrnn_bench import tasks

    return tasks.label(str(key), options)


def task_labels(frame, task: str = "cfg.task", options: str = "cfg.task_options"
                ) -> dict[str, str]:
    """``{task key: label}`` for every task of ``frame`` (rows of the store), each label from
    the ``options`` column of its runs (the ``cfg.task_options`` pairs a run records) where
    there is one. A key whose runs name different labels gets them joined with " / "; two keys
    that would share a label get their key beside it, so that no two columns read the same."""
    out: dict[str, str] = {}
    if task not in getattr(frame, "columns", ()):
        return out
    for key in dict.fromkeys(frame[task].dropna()):
        rows = frame[frame[task] == key]
        given = ([v for v in rows[options] if isinstance(v, (list, tuple, Mapping))]
                 if options in rows.columns else [])
        found = [task_label(key, _options(v)) for v in given] or [task_label(key)]
        out[str(key)] = " / ".join(dict.fromkeys(found))
    shared = [k for k, v in out.items() if list(out.values()).count(v) > 1]
    for key in shared:
        out[key] = f"{out[key]} ({key})"
    return out


def _options(value) -> dict[str, Any]:
    # A run's task options as the store returns them: pairs (JSON lists) or a mapping.
    if isinstance(value, Mapping):
        return dict(value)
    return {str(pair[0]): pair[1] for pair in value if len(pair) == 2}


def order_models(names: Iterable[str]) -> list[str]:
    """``names`` without repeats: registered models first in registry order, then outside
    layers in the order they were registered (an import path seen here for the first time
    registers now, in the order of ``names``), then names no registry knows, sorted."""
    unique = list(dict.fromkeys(names))
    places = {n: _place(n) for n in unique}  # in order: first sight registers first
    return sorted(unique, key=lambda n: (places[n], n))


def model_palette(names: Iterable[str]) -> dict[str, str]:
    """``{name: colour}`` for seaborn's ``palette=`` (use with ``hue_order=order_models(...)``)."""
    return {n: model_colour(n) for n in order_models(names)}


def figsize(width: str = "column", aspect: float = 0.75) -> tuple[float, float]:
    """Figure size in inches: ``width`` is ``"column"`` (3.3 in) or ``"full"`` (6.8 in)."""
    if width == "column":
        w = COLUMN_WIDTH_IN
    elif width == "full":
        w = FULL_WIDTH_IN
    else:
        raise ValueError(f"width must be 'column' or 'full', got {width!r}.")
    if not aspect > 0:
        raise ValueError(f"aspect must be a positive height/width ratio, got {aspect!r}.")
    return (w, w * aspect)


def panels(n: int, height: float, *, ncols: int = 4, sharey: bool = False,
           width: str | None = None):
    """A grid of ``n`` panels, ``ncols`` to a row (fewer when ``n`` is smaller), ``height``
    inches per row; the unused panels of the last row hidden. ``width`` is ``"column"`` or
    ``"full"`` (`figsize`); by default a single column of panels is column-wide, several are
    full-width. ``sharey``: one y-axis for every panel, so they compare at a glance.

    Returns:
        ``(fig, axes)``, ``axes`` a 2-D array (rows, columns) whatever ``n``.
    """
    import matplotlib.pyplot as plt

    ncols = max(1, min(ncols, n))
    nrows = math.ceil(n / ncols)
    figure_width = figsize(width or ("full" if ncols > 1 else "column"))[0]
    fig, axes = plt.subplots(nrows, ncols, squeeze=False, sharey=sharey,
                             figsize=(figure_width, height * nrows))
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return fig, axes


def figure_legend(fig, entries=None, ncol: int | None = None) -> None:
    """One legend for the whole figure, above its panels (outside every axes, so it covers no
    data): ``entries`` ``{label: handle}``, by default every labelled artist of every axes,
    each label once. Three columns on a column-wide figure, six on a full-width one, unless
    ``ncol`` says how many (for long labels); fewer where the labels are too long for the
    figure's width, so that the legend never widens the page it is printed on."""
    if entries is None:
        entries = legend_entries(fig)
    if not entries:
        return
    narrow = fig.get_figwidth() < FULL_WIDTH_IN - 0.1
    columns = min(len(entries), ncol or (3 if narrow else 6))
    renderer = fig.canvas.get_renderer()
    while True:
        legend = fig.legend(list(entries.values()), list(entries), loc="outside upper center",
                            ncol=columns)
        # A margin for the layout's padding around the legend, which the page's width holds too.
        if columns == 1 or legend.get_window_extent(renderer).width <= 0.95 * fig.bbox.width:
            return
        legend.remove()
        columns -= 1


def n_seeds_text(counts: Iterable[int]) -> str:
    """"n = 5 seeds" or "n = 3 to 5 seeds" for the seed counts behind a figure's drawn points
    (a caption's words for the n of its intervals); "no finished seed" when there are none."""
    found = sorted({int(n) for n in counts if n > 0})
    if not found:
        return "no finished seed"
    if found[0] == found[-1]:
        return f"n = {found[0]} seed{'s' if found[0] != 1 else ''}"
    return f"n = {found[0]} to {found[-1]} seeds"


def outlier_panels(ranges, factor: float = 2.0) -> list:
    """The keys of ``ranges`` (``{panel: (low, high)}``, in the axis' scale: log10 of the values
    on a log axis) whose panel alone stretches a range shared by three or more panels to more
    than ``factor`` times what the others need: a diverged or unstable series that would
    flatten every other panel. It is drawn on a scale of its own (`share_y`), and the caption
    says so."""
    if len(ranges) < 3:
        return []
    out = []
    for key in ranges:
        others = [r for k, r in ranges.items() if k != key]
        need = max(h for _, h in others) - min(lo for lo, _ in others)
        total = max(h for _, h in ranges.values()) - min(lo for lo, _ in ranges.values())
        if need > 0 and total > factor * need:
            out.append(key)
    return out


def share_y(axes, own=()) -> None:
    """One y range for the panels ``axes`` (drawn without matplotlib's sharing) except those in
    ``own``, which keep a scale of their own: the shared range is the union of the others'
    data with autoscaling's margins, and only the first panel of a row among them keeps its
    tick labels (as `panels(sharey=True)` does)."""
    shared = [ax for ax in axes if ax not in own]
    if not shared:
        return
    low = min(ax.dataLim.y0 for ax in shared)
    high = max(ax.dataLim.y1 for ax in shared)
    log = shared[0].get_yscale() == "log"
    scaled = [math.log10(low), math.log10(high)] if log else [low, high]
    pad = 0.05 * (scaled[1] - scaled[0] or 1.0)
    limits = [scaled[0] - pad, scaled[1] + pad]
    limits = [10.0 ** v for v in limits] if log else limits
    rows: dict[int, int] = {}
    for ax in shared:
        ax.set_ylim(*limits)
        row = ax.get_subplotspec().rowspan.start if ax.get_subplotspec() else 0
        if row in rows:
            ax.tick_params(axis="y", which="both", labelleft=False)
        rows.setdefault(row, 1)


def dodge(artists, points: float, axis: str = "x") -> None:
    """Move ``artists`` (lines, collections, an errorbar's container) ``points`` typographic
    points along ``axis`` as drawn, their data unchanged: marks that share a position (a layer
    index, a head count, a learning rate) set side by side without moving them off it in the
    data (a tick still reads their position, the CSV their value)."""
    from matplotlib.collections import PathCollection
    from matplotlib.container import Container
    from matplotlib.transforms import ScaledTranslation

    flat = []
    for artist in artists:
        if isinstance(artist, Container):
            flat += [a for a in artist.get_children() if a is not None]
        else:
            flat.append(artist)
    for artist in flat:
        fig = artist.figure
        dx, dy = (points / 72.0, 0.0) if axis == "x" else (0.0, points / 72.0)
        offset = ScaledTranslation(dx, dy, fig.dpi_scale_trans)
        if isinstance(artist, PathCollection):  # a scatter: its markers sit at its offsets
            artist.set_offset_transform(artist.get_offset_transform() + offset)
        else:
            artist.set_transform(artist.get_transform() + offset)


# Code words of the variants' and quantities' names, in the mathtext a paper writes.
_MATH_WORDS = {"lambda": (r"$\lambda$", "λ"), "xi": (r"$\xi$", "ξ"),
               "gamma": (r"$\gamma$", "γ")}


def math_text(text: str, *, unicode: bool = False) -> str:
    """``text`` with the symbols written as words (a variant's label: "RotRNN, xi off",
    "LRU, gamma off") as a paper writes them: mathtext ("RotRNN, $\\xi$ off") for a figure's
    labels, or with ``unicode`` the letter itself ("RotRNN, ξ off") for a caption (which the
    LaTeX writer spells as math). The store and the CSVs keep the words."""
    import re

    return re.sub(r"\b(" + "|".join(_MATH_WORDS) + r")\b",
                  lambda m: _MATH_WORDS[m.group(1)][1 if unicode else 0], text)


def legend_entries(fig) -> dict:
    """``{label: handle}`` of every labelled artist of ``fig``'s axes, each label once."""
    entries: dict = {}
    for ax in fig.axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            entries.setdefault(label, handle)
    return entries


def length_axes(ax: Any, title: str, ylabel: str) -> None:
    """A panel of a quantity against sequence length: both axes log-scale (L in powers of two,
    labelled at the lengths drawn) with plain tick labels, ``title`` and ``ylabel``."""
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ticks_at(ax, drawn_positions(ax, "x"), "x")
    plain_log_ticks(ax, "y")
    ax.set_title(title)
    ax.set_xlabel("sequence length L (steps)")
    ax.set_ylabel(ylabel)


def drawn_positions(ax: Any, which: str = "x") -> list[float]:
    """The distinct ``which`` coordinates of the points of ``ax``'s lines (its design values:
    lengths, steps, head counts)."""
    import numpy as np

    values = [np.asarray(line.get_xdata() if which == "x" else line.get_ydata(), dtype=float)
              for line in ax.get_lines()]
    values = np.concatenate(values) if values else np.array([])
    return sorted(set(values[np.isfinite(values)].tolist()))


def plain_number(value: float) -> str:
    """A tick's number in the one format of the report's axes: as written (0.5, 2, 300, 0.001)
    below ten thousand; above, a round number with a k, M or G suffix (20k, 1M, 2.5M) and any
    other integer in full (16384, a design value); below 0.0001 as a decimal too (0.00001);
    never "1e+06" beside "500000"."""
    size = abs(value)
    if size >= 1e12:  # beyond the suffixes: a power of ten as a paper writes it
        exponent = math.floor(math.log10(size))
        mantissa = float(f"{value / 10.0**exponent:.2g}")
        if abs(mantissa) == 1:
            return f"{'-' if value < 0 else ''}$10^{{{exponent}}}$"
        return f"${mantissa:g}\\times10^{{{exponent}}}$"
    if size >= 1e4:
        for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
            if size >= scale and float(f"{value / scale:.3g}") == value / scale:
                return f"{value / scale:g}{suffix}"
        if float(value).is_integer():
            return str(int(value))
        return f"{value:.3g}"
    if 0 < size < 1e-4:
        digits = 2 - math.floor(math.log10(size))  # three significant digits at most
        return f"{value:.{digits}f}".rstrip("0").rstrip(".")
    return f"{value:g}"


def ticks_at(ax: Any, values: Iterable[float], which: str = "x", most: int = 6) -> None:
    """Labelled ticks at design values only (the evaluation steps, lengths or head counts
    drawn): all of ``values`` when there are at most ``most``, else every k-th of them counted
    back from the last (the final evaluation, the longest length), the fewest k that leaves at
    most ``most``; plain numbers (`plain_number`), no minor ticks. A reader then sees where
    the points are, not round numbers between them."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    axis = ax.xaxis if which == "x" else ax.yaxis
    values = sorted({float(v) for v in values})
    stride = math.ceil(len(values) / most) if values else 1
    values = values[::-1][::stride][::-1]
    axis.set_major_locator(FixedLocator(values))
    axis.set_major_formatter(FuncFormatter(lambda value, _: plain_number(value)))
    axis.set_minor_locator(NullLocator())


def plain_log_ticks(ax, which: str = "y") -> None:
    """Tick labels of a logarithmic axis written as plain numbers (0.5, 2, 300, 20k; not 2x10^0
    nor 1e+06 beside 500000: `plain_number`), with 2 and 5 between the powers of ten labelled
    too when the axis spans under two decades (call after plotting: it reads the axis'
    limits). Above that only the powers are labelled, so that no two labels collide, and only
    they are ticked: a comb of minor ticks over many decades is noise."""
    from matplotlib.ticker import (FuncFormatter, LogLocator, MaxNLocator, NullFormatter,
                                   NullLocator)

    axis = ax.yaxis if which == "y" else ax.xaxis
    low, high = sorted(ax.get_ylim() if which == "y" else ax.get_xlim())
    plain = FuncFormatter(lambda value, _: plain_number(value))
    axis.set_major_formatter(plain)
    decades = math.log10(high / low) if low > 0 else math.inf
    if getattr(axis.get_transform(), "base", 10) != 10:
        # A base-2 axis (sequence lengths): its powers are the labels; a minor 2 x or 5 x a
        # power of ten (500 beside 512) would collide with them.
        axis.set_minor_formatter(NullFormatter())
    elif decades < 0.5:  # within a factor of about 3: a few evenly spaced ticks
        axis.set_major_locator(MaxNLocator(nbins=3, steps=[1, 2, 5, 10]))
        axis.set_minor_formatter(NullFormatter())
    elif decades < 2:
        # Only 2 and 5 times a power of ten: LogLocator falls back to linear ticks where too
        # few of them are in view, and those must stay unlabelled. (The powers are the major
        # ticks again: a call for narrower limits before may have set others.)
        axis.set_major_locator(LogLocator())
        def two_or_five(value: float, _) -> str:
            mantissa = value / 10.0 ** math.floor(math.log10(value)) if value > 0 else 0.0
            return (plain_number(value) if min(abs(mantissa - 2), abs(mantissa - 5)) < 1e-6
                    else "")

        axis.set_minor_locator(LogLocator(subs=(2.0, 5.0)))
        axis.set_minor_formatter(FuncFormatter(two_or_five))
    else:
        axis.set_major_locator(LogLocator())
        axis.set_minor_locator(NullLocator())
        if decades > 6:  # so many powers that plain numbers would mix 0.0001, 1M and 10^16
            from matplotlib.ticker import LogFormatterMathtext

            axis.set_major_formatter(LogFormatterMathtext())
        axis.set_minor_formatter(NullFormatter())
