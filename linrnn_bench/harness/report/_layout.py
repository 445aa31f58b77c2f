"""A figure's layout checked from its drawn artists: what a reader would see as broken.

`problems(figure)` draws the figure on the Agg canvas at its own size and returns one sentence
per defect, computed from the artists' window extents (display pixels):

- a legend or an annotation that covers plotted data (a line passing under it, a marker, an
  error bar, a bar or a filled band inside its box);
- two texts that overlap (tick labels of one axis, titles, axis labels, legends, annotations);
- a text that reaches outside the canvas;
- a text smaller than ``min_points`` at the figure's size.

It is what `tests/test_figure_layout.py` runs over every figure the report draws. Grid lines,
spines and reference lines spanning a whole axis (``axhline``/``axvline``, e.g. a baseline) are
not data: a legend may sit on them.
"""

from __future__ import annotations

import itertools

import numpy as np
from matplotlib.collections import Collection, LineCollection, PolyCollection
from matplotlib.figure import Figure as MplFigure
from matplotlib.legend import Legend
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle
from matplotlib.path import Path as MplPath
from matplotlib.text import Annotation, Text
from matplotlib.transforms import BlendedGenericTransform, Bbox

# Texts may touch: overlaps smaller than this many pixels (at the figure's dpi) are not defects.
_SLACK_PX = 1.0


def problems(figure: MplFigure, *, min_points: float = 7.0) -> list[str]:
    """Every layout defect of ``figure`` (empty when it can be printed as drawn)."""
    figure.canvas.draw()
    renderer = figure.canvas.get_renderer()
    found: list[str] = []
    canvas = figure.bbox
    texts = _texts(figure)
    for label, text in texts:
        box = text.get_window_extent(renderer)
        if not _within(box, canvas):
            found.append(f"{label} reaches outside the canvas")
        if text.get_fontsize() < min_points - 1e-9:
            found.append(f"{label} is {text.get_fontsize():g} pt, below {min_points:g} pt")
    boxes = [(label, text.get_window_extent(renderer)) for label, text in texts]
    for (a, box_a), (b, box_b) in itertools.combinations(boxes, 2):
        if _overlap(box_a, box_b):
            found.append(f"{a} overlaps {b}")
    for label, box in _covering(figure, renderer):
        for ax in figure.axes:
            for what, covered in _data_under(ax, box):
                if covered:
                    found.append(f"{label} covers {what} of the axes {_axes_name(ax)}")
                    break
    return found


def _axes_name(ax) -> str:
    title = ax.get_title()
    return repr(title) if title else f"#{ax.figure.axes.index(ax) + 1}"


def _texts(figure: MplFigure) -> list[tuple[str, Text]]:
    """Every visible, non-empty text with a label saying which it is."""
    out: list[tuple[str, Text]] = []

    def add(label: str, text: Text | None) -> None:
        if text is not None and text.get_visible() and text.get_text().strip():
            out.append((f"{label} {text.get_text()!r}", text))

    if figure._suptitle is not None:
        add("the figure title", figure._suptitle)
    for ax in figure.axes:
        if not ax.get_visible():
            continue
        name = _axes_name(ax)
        for title in (ax.title, ax._left_title, ax._right_title):
            add(f"the title of {name}", title)
        add(f"the x label of {name}", ax.xaxis.label)
        add(f"the y label of {name}", ax.yaxis.label)
        for axis, which in ((ax.xaxis, "x"), (ax.yaxis, "y")):
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                if tick.get_visible() and tick.label1.get_visible() and _tick_in_view(ax, axis,
                                                                                      tick):
                    add(f"the {which} tick label of {name}", tick.label1)
            add(f"the {which} offset text of {name}", axis.get_offset_text())
        for text in ax.texts:
            add(f"the annotation of {name}", text)
    for legend in _legends(figure):
        for text in legend.get_texts():
            add("the legend entry", text)
        add("the legend title", legend.get_title())
    for text in figure.texts:
        add("the figure text", text)
    return out


def _tick_in_view(ax, axis, tick) -> bool:
    low, high = sorted(axis.get_view_interval())
    value = tick.get_loc()
    span = high - low
    return low - 1e-9 * span <= value <= high + 1e-9 * span


def _legends(figure: MplFigure) -> list[Legend]:
    legends = [ax.get_legend() for ax in figure.axes if ax.get_legend() is not None]
    return [lg for lg in legends + list(figure.legends) if lg.get_visible()]


def _covering(figure: MplFigure, renderer) -> list[tuple[str, Bbox]]:
    """The boxes that must not cover data: legends and annotations."""
    out = []
    for legend in _legends(figure):
        out.append(("a legend", legend.get_window_extent(renderer)))
    for ax in figure.axes:
        for text in ax.texts:
            if text.get_visible() and text.get_text().strip():
                kind = "an annotation" if isinstance(text, Annotation) else "a text"
                out.append((f"{kind} {text.get_text()!r}", text.get_window_extent(renderer)))
    return out


def _within(box: Bbox, canvas: Bbox) -> bool:
    return (box.x0 >= canvas.x0 - _SLACK_PX and box.y0 >= canvas.y0 - _SLACK_PX
            and box.x1 <= canvas.x1 + _SLACK_PX and box.y1 <= canvas.y1 + _SLACK_PX)


def _overlap(a: Bbox, b: Bbox) -> bool:
    return (min(a.x1, b.x1) - max(a.x0, b.x0) > _SLACK_PX
            and min(a.y1, b.y1) - max(a.y0, b.y0) > _SLACK_PX)


def _spans_axis(line: Line2D) -> bool:
    """A reference line drawn across the whole axes: axhline/axvline blend axes coordinates
    along the line with data coordinates across it."""
    return isinstance(line.get_transform(), BlendedGenericTransform)


def _data_under(ax, box: Bbox):
    """``(what, covered)`` for each data artist of ``ax``: whether it shows inside ``box``."""
    clip = ax.bbox
    area = Bbox.intersection(box, clip)
    if area is None or area.width <= 0 or area.height <= 0:
        return
    for line in ax.lines:
        if not line.get_visible() or _spans_axis(line):
            continue
        xy = np.asarray(line.get_xydata(), dtype=float)
        xy = xy[np.all(np.isfinite(xy), axis=1)]
        if not len(xy):
            continue
        points = line.get_transform().transform(xy)
        if line.get_marker() not in (None, "None", "", " ") and _any_inside(points, area):
            yield f"the markers of {line.get_label()!r}", True
            return
        if line.get_linestyle() not in ("None", "", " ") and len(points) > 1:
            if MplPath(points).intersects_bbox(area, filled=False) or _any_inside(points, area):
                yield f"the line {line.get_label()!r}", True
                return
    for collection in ax.collections:
        if not collection.get_visible():
            continue
        if _collection_under(collection, area):
            label = collection.get_label()
            yield f"the {type(collection).__name__} {label!r}", True
            return
    for patch in ax.patches:
        if patch.get_visible() and isinstance(patch, Rectangle) and patch.get_height():
            if _overlap(patch.get_window_extent(), area):
                yield f"the bar {patch.get_label()!r}", True
                return


def _any_inside(points: np.ndarray, area: Bbox) -> bool:
    return bool(np.any((points[:, 0] >= area.x0) & (points[:, 0] <= area.x1)
                       & (points[:, 1] >= area.y0) & (points[:, 1] <= area.y1)))


def _collection_under(collection: Collection, area: Bbox) -> bool:
    transform = collection.get_transform()
    if isinstance(collection, (PolyCollection, LineCollection)):
        for path in collection.get_paths():
            vertices = transform.transform(path.vertices)
            if not len(vertices):
                continue
            shape = MplPath(vertices, path.codes)
            filled = isinstance(collection, PolyCollection)
            if shape.intersects_bbox(area, filled=filled) or _any_inside(vertices, area):
                return True
        return False
    offsets = collection.get_offsets()
    if len(offsets):  # scatter markers: their centres
        centres = collection.get_offset_transform().transform(np.asarray(offsets, dtype=float))
        return _any_inside(centres[np.all(np.isfinite(centres), axis=1)], area)
    return False
