"""The automated part of the figure review (docs/figures.md): what a reviewer who has never seen
the code would reject, read from a figure's drawn artists.

`problems(figure)` returns one sentence per defect: the layout's (`_layout.problems`: texts that
overlap each other, a legend or text over data, text outside the canvas or under 7 pt) and

- **code names**: a title, label, legend entry, annotation or tick label that writes a symbol as
  code (``lambda``, ``xi``, ``gamma``, ``||h||``, ``d_z``, ``E|h|^2``, any ``snake_case``
  identifier) where a paper writes mathtext ($\\lambda$, $\\xi$, $\\|h\\|$, $d_z$);
  text between ``$`` signs is mathtext and is not read;
- **ticks beyond the data**: a labelled tick farther outside the range of what its axis draws
  (over every panel sharing the axis) than `BEYOND_SPAN` of that range: an axis set by hand
  (0-100 %), or stretched to a reference line far from the data, rather than by the data.
  Zero on a linear axis is a quantity's natural origin and may be labelled;
- **ticks without data**: on an x axis whose points sit on a few positions (at most
  `GRID_MAX` distinct values, one at least drawn by series of two colours, and no more of
  them than labelled ticks: evaluation steps, sequence lengths, learning rates, head counts,
  on a linear or a logarithmic axis alike), a labelled tick where no point is (120 among
  evaluations at 100/200/300; 2048 among lengths 1024/4096). Points denser than the ticks
  sample a continuous axis (time steps t), whose round-number ticks are right. The x axis is
  the design variable's in every figure of the report; a y axis holds measured values, which
  may coincide by chance (accuracies in steps of 1/81);
- **mixed tick formats**: one axis labelling some ticks in scientific notation (``5e+06``,
  ``10^6``) and others as plain numbers (``500000``);
- **an outlier setting a shared scale**: among three or more panels on one y range (shared by
  matplotlib, or set equal), one panel whose data stretch that range to more than twice what
  the others need (`style.outlier_panels`).

What cannot be read from artists (the caption's n and interval, greyscale legibility, the
choice of scale) is the written part of the review, in docs/figures.md.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable

import matplotlib.colors as mcolors
import numpy as np
from matplotlib.collections import PathCollection
from matplotlib.figure import Figure as MplFigure
from matplotlib.patches import Rectangle

from . import _layout, style

# A labelled tick may lie this share of its axis' data range beyond the data (autoscaling's
# margins are 5 % a side; a tick a little past the last point is normal).
BEYOND_SPAN = 0.15
# A reference line (a baseline) farther from the data than this many times their range is no
# reason for an axis to reach it: the axis is the data's, the line's value goes in words.
REFERENCE_SPANS = 3.0
# An x axis whose points take at most this many distinct positions (one drawn by two series at
# least, and no more positions than labelled ticks) is a grid of design values: its labelled
# ticks must sit on them.
GRID_MAX = 10
# How close (a share of the axis' view, in its scale) a tick must be to a point to be at it.
_AT_POINT = 0.01

# Code that a paper writes as mathematics, and how: (pattern, what it reads as, mathtext).
CODE_NAMES: tuple[tuple[str, str, str], ...] = (
    (r"\blambda\b", "lambda", r"$\lambda$"),
    (r"\bxi\b", "xi", r"$\xi$"),
    (r"\bgamma\b", "gamma", r"$\gamma$"),
    (r"\|\|", "||", r"$\|h\|$"),
    (r"\b[A-Za-z][A-Za-z0-9]*_[A-Za-z0-9_]+\b", "a snake_case identifier", r"$d_z$, $h_t$"),
    (r"\^", "^", r"$x^2$"),
    (r"\bsqrt\b", "sqrt", r"$\sqrt{t}$"),
)
_MATH = re.compile(r"(?<!\\)\$.*?(?<!\\)\$")
_SCIENTIFIC = re.compile(r"\d[eE][+-]?\d|10\^|\\times|\^\{")


def problems(figure: MplFigure) -> list[str]:
    """Every defect of ``figure`` that the checks above find (empty when it passes)."""
    found = list(_layout.problems(figure))
    found += code_names(figure)
    for ax in _data_axes(figure):
        for which in ("x", "y"):
            found += ticks_beyond_data(ax, which)
            found += ticks_without_data(ax, which)
            found += mixed_tick_formats(ax, which)
    found += outliers_on_shared_axes(figure)
    return found


# --------------------------------------------------------------------------------------------
# Words


def code_names(figure: MplFigure) -> list[str]:
    """Each text of ``figure`` that writes a symbol as code, with the mathtext a paper uses."""
    found = []
    for label, text in _layout._texts(figure):
        words = _MATH.sub("", text.get_text())
        for pattern, what, math_form in CODE_NAMES:
            if re.search(pattern, words):
                found.append(f"{label} writes {what} as code (a paper writes {math_form})")
    return found


# --------------------------------------------------------------------------------------------
# Ticks


def ticks_beyond_data(ax, which: str) -> list[str]:
    """The labelled ticks of ``ax``'s ``which`` axis farther outside its data than
    `BEYOND_SPAN` of the data's range (in the axis' scale: decades on a log axis)."""
    low, high = _data_range(_siblings(ax, which), which)
    if not (math.isfinite(low) and math.isfinite(high)) or high <= low:
        return []
    span = high - low
    log = _is_log(ax, which)
    found = []
    for value, text in _labelled_ticks(ax, which):
        if not log and value == 0:
            continue  # the origin of a quantity drawn from zero
        at = _scaled(ax, which, [value])[0]
        if at < low - BEYOND_SPAN * span or at > high + BEYOND_SPAN * span:
            found.append(f"the {which} tick {text!r} of {_layout._axes_name(ax)} lies beyond "
                         "the data drawn on that axis (set the limits from the data)")
    return found


def ticks_without_data(ax, which: str = "x") -> list[str]:
    """The labelled ticks of ``ax``'s x axis (the design variable's, in every figure of the
    report) where no point is, when its points sit on a grid of design values (see the
    module's docstring); nothing for a y axis, whose values are measured, not designed."""
    if which != "x":
        return []
    positions = _grid(_siblings(ax, which), which)
    ticks = _labelled_ticks(ax, which)
    if positions is None or len(positions) > len(ticks):
        return []  # points denser than the ticks: a sampled continuous axis (time steps)
    view = _scaled(ax, which, sorted(_view(ax, which)))
    tolerance = _AT_POINT * abs(view[1] - view[0])
    grid = _scaled(ax, which, positions)
    found = []
    for value, text in ticks:
        at = _scaled(ax, which, [value])[0]
        if not np.any(np.abs(grid - at) <= tolerance):
            found.append(f"the {which} tick {text!r} of {_layout._axes_name(ax)} is where no "
                         f"point is (the points are at {_numbers(positions)})")
    return found


def mixed_tick_formats(ax, which: str) -> list[str]:
    """One sentence when ``ax``'s ``which`` axis labels ticks both in scientific notation and
    as plain numbers."""
    texts = [text for _, text in _labelled_ticks(ax, which)]
    scientific = [t for t in texts if _SCIENTIFIC.search(t)]
    plain = [t for t in texts if not _SCIENTIFIC.search(t) and re.search(r"\d", t)]
    if scientific and plain:
        return [f"the {which} ticks of {_layout._axes_name(ax)} mix formats: "
                f"{scientific[0]!r} beside {plain[0]!r}"]
    return []


def _labelled_ticks(ax, which: str) -> list[tuple[float, str]]:
    """``(position, text)`` of every tick of the axis that shows a label within the view."""
    axis = ax.xaxis if which == "x" else ax.yaxis
    out = []
    for tick in axis.get_major_ticks() + axis.get_minor_ticks():
        text = tick.label1.get_text().strip()
        if (text and tick.get_visible() and tick.label1.get_visible()
                and _layout._tick_in_view(ax, axis, tick)):
            out.append((float(tick.get_loc()), text))
    return out


def _numbers(values: Iterable[float]) -> str:
    return ", ".join(f"{v:g}" for v in values)


# --------------------------------------------------------------------------------------------
# Data drawn on an axis


def _data_axes(figure: MplFigure) -> list:
    """The visible axes of ``figure`` that draw data on axes (not a diagram drawn without)."""
    return [ax for ax in figure.axes if ax.get_visible() and ax.axison]


def _siblings(ax, which: str) -> list:
    """``ax`` and the visible axes it shares its ``which`` axis with: by matplotlib's sharing,
    or set to the same limits and scale by hand (`style.share_y`)."""
    group = ax.get_shared_x_axes() if which == "x" else ax.get_shared_y_axes()
    shared = [a for a in group.get_siblings(ax) if a.get_visible()]
    same = [a for a in _data_axes(ax.figure) if a not in shared
            and _view(a, which) == _view(ax, which)
            and (a.get_xscale() if which == "x" else a.get_yscale())
            == (ax.get_xscale() if which == "x" else ax.get_yscale())]
    return shared + same


def _is_log(ax, which: str) -> bool:
    return (ax.get_xscale() if which == "x" else ax.get_yscale()) == "log"


def _view(ax, which: str) -> tuple[float, float]:
    return ax.get_xlim() if which == "x" else ax.get_ylim()


def _scaled(ax, which: str, values) -> np.ndarray:
    """``values`` in the axis' scale (log10 of them on a log axis), where distances read."""
    axis = ax.xaxis if which == "x" else ax.yaxis
    values = np.asarray(values, dtype=float)
    if _is_log(ax, which):  # not drawn on a log axis (matplotlib would clip it to 1e-1000)
        values = np.where(values > 0, values, np.nan)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.asarray(axis.get_transform().transform(values), dtype=float)


def in_data(transform, ax) -> bool:
    """Whether ``transform`` places its points in ``ax``'s data coordinates, possibly moved
    by a fixed offset after (a dodge, `style.dodge`): data coordinates, read as drawn."""
    while transform is not None:
        if transform == ax.transData:
            return True
        transform = getattr(transform, "_a", None)  # the first of a composite's two steps
    return False


def _points(ax, which: str) -> list[tuple[str, np.ndarray]]:
    """Per series drawn on ``ax`` (a line, a scatter), its colour and its points' ``which``
    coordinates: the positions a tick can be at. Reference lines across the axes are not
    points."""
    column = 0 if which == "x" else 1
    out = []
    for line in ax.lines:
        if line.get_visible() and in_data(line.get_transform(), ax):
            xy = np.asarray(line.get_xydata(), dtype=float)
            if len(xy):
                out.append((mcolors.to_hex(line.get_color()), xy[:, column]))
    for collection in ax.collections:
        if isinstance(collection, PathCollection) and collection.get_visible():
            offsets = np.asarray(collection.get_offsets(), dtype=float)
            colours = collection.get_facecolor()
            if offsets.ndim == 2 and len(offsets):
                colour = mcolors.to_hex(colours[0]) if len(colours) else "none"
                out.append((colour, offsets[:, column]))
    return [(c, p[np.isfinite(p)]) for c, p in out]


def _extent(ax, which: str) -> list[np.ndarray]:
    """Every value drawn on ``ax`` along the axis: its points and the ends of its bands,
    whiskers and bars (reference lines apart: `_references`)."""
    column = 0 if which == "x" else 1
    values = [p for _, p in _points(ax, which)]
    for collection in ax.collections:
        if (collection.get_visible() and not isinstance(collection, PathCollection)
                and in_data(collection.get_transform(), ax)):
            values += [np.asarray(path.vertices, dtype=float)[:, column]
                       for path in collection.get_paths() if len(path.vertices)]
    for patch in ax.patches:
        if isinstance(patch, Rectangle) and patch.get_visible() and in_data(
                patch.get_data_transform(), ax):
            x0, y0 = patch.get_xy()
            ends = ((x0, x0 + patch.get_width()) if which == "x"
                    else (y0, y0 + patch.get_height()))
            values.append(np.asarray(ends, dtype=float))
    return values


def _references(ax, which: str) -> list[float]:
    """The levels of the reference lines and spans across ``ax`` (``axhline``, ``axhspan`` for
    y), in data coordinates along the axis."""
    column = 0 if which == "x" else 1
    across = ax.get_yaxis_transform() if which == "y" else ax.get_xaxis_transform()
    levels: list[float] = []
    for line in ax.lines:
        if line.get_visible() and line.get_transform() == across:
            levels += np.asarray(line.get_xydata(), dtype=float)[:, column].tolist()
    for patch in ax.patches:
        if patch.get_visible() and isinstance(patch, Rectangle) and (
                patch.get_data_transform() == across):
            start = patch.get_xy()[column]
            levels += [start, start + (patch.get_width() if which == "x"
                                       else patch.get_height())]
    return levels


def _data_range(axes: list, which: str) -> tuple[float, float]:
    """The smallest and largest value drawn along the axis over ``axes``, in its scale (NaN
    when nothing is drawn). A reference line counts where it lies within `REFERENCE_SPANS`
    ranges of the data (as `accuracy.figures._zoom` draws a baseline); one farther away is
    no reason for the axis to reach it."""
    scaled = [_scaled(ax, which, v) for ax in axes for v in _extent(ax, which) if len(v)]
    scaled = [s[np.isfinite(s)] for s in scaled]
    scaled = np.concatenate(scaled) if scaled else np.array([])
    if not scaled.size:
        return math.nan, math.nan
    low, high = float(scaled.min()), float(scaled.max())
    span = high - low
    for ax in axes:
        for level in _scaled(ax, which, _references(ax, which)):
            if math.isfinite(level) and (low - REFERENCE_SPANS * span <= level
                                         <= high + REFERENCE_SPANS * span):
                low, high = min(low, level), max(high, level)
    return low, high


def _grid(axes: list, which: str) -> list[float] | None:
    """The distinct positions of the points along the axis over ``axes`` when they form a grid
    of design values (2 to `GRID_MAX` of them, one at least drawn by series of two colours:
    several series on the same values); None when the axis is continuous."""
    series = [(c, np.round(p, 9)) for ax in axes for c, p in _points(ax, which) if p.size]
    if not series:
        return None
    distinct = np.unique(np.concatenate([p for _, p in series]))
    if not 2 <= distinct.size <= GRID_MAX:
        return None
    colours_at = [{c for c, p in series if np.any(p == v)} for v in distinct]
    if not any(len(colours) > 1 for colours in colours_at):
        return None  # each position one series' own (a model's parameter count)
    return distinct.tolist()


# --------------------------------------------------------------------------------------------
# Shared scales


def outliers_on_shared_axes(figure: MplFigure) -> list[str]:
    """Per group of three or more panels on one y range, the panels that alone stretch it
    (`style.outlier_panels` on each panel's drawn range)."""
    found = []
    for group in _y_groups(figure):
        ranges = {i: _data_range([ax], "y") for i, ax in enumerate(group)}
        ranges = {i: r for i, r in ranges.items() if all(map(math.isfinite, r))}
        for i in style.outlier_panels(ranges):
            others = [r for j, r in ranges.items() if j != i]
            need = max(h for _, h in others) - min(lo for lo, _ in others)
            total = max(h for _, h in ranges.values()) - min(lo for lo, _ in ranges.values())
            found.append(f"the panel {_layout._axes_name(group[i])} sets the y axis it shares "
                         f"with {len(group) - 1} others: it spans {total:.3g}"
                         f"{' decades' if _is_log(group[i], 'y') else ''} where they need "
                         f"{need:.3g} (give it its own scale, or clip it and mark its value)")
    return found


def _y_groups(figure: MplFigure) -> list[list]:
    """Groups of three or more data axes on one y range: shared by matplotlib, or with equal
    limits and scale (panels set to one range by hand)."""
    axes = _data_axes(figure)
    groups: list[list] = []
    seen: set[int] = set()
    for ax in axes:
        if id(ax) in seen:
            continue
        group = [a for a in axes if a is ax or a in _siblings(ax, "y")]
        seen.update(id(a) for a in group)
        if len(group) >= 3:
            groups.append(group)
    return groups

