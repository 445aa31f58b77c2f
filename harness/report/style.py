"""One look for every figure of the report: colours, markers, sizes and matplotlib settings.

Every figure calls `apply_style()` before drawing and colours a model with `model_colour(name)`
(or a whole seaborn ``palette=model_palette(names)``), so a model has one colour throughout the
report. The colours are the Okabe–Ito palette (Okabe & Ito, 2008, "Color Universal Design"),
chosen to stay distinguishable under the common forms of colour blindness; each model also has
its own marker so that a grey-scale print still tells them apart.

Typical use in a section module::

    from harness.report import style

    style.apply_style()
    fig, ax = plt.subplots(figsize=style.figsize())
    for name in style.order_models(frame["cfg.model"].unique()):
        ax.plot(x, y, label=style.model_label(name), color=style.model_colour(name),
                marker=style.model_marker(name))
"""

from __future__ import annotations

from collections.abc import Iterable

import matplotlib as mpl

# The four layers in the order every table and legend lists them.
# How a measured program is named in titles and tables (throughput and memory studies).
MODE_LABELS: dict[str, str] = {
    "forward": "forward", "forward_backward": "fwd+bwd", "train": "train step"
}
MODEL_ORDER: tuple[str, ...] = ("rotrnn", "lru", "s4d", "s5")

MODEL_LABELS: dict[str, str] = {"rotrnn": "RotRNN", "lru": "LRU", "s4d": "S4D", "s5": "S5"}

# Okabe–Ito colours. Blue, vermillion, bluish green and reddish purple are the four most
# distinct from each other for deuteranopes, protanopes and tritanopes alike, so the four
# layers get them; the rest go, in this order, to models registered later (yellow last: it is
# faint on white).
_KNOWN_COLOURS: dict[str, str] = {
    "rotrnn": "#0072B2",  # blue
    "lru": "#D55E00",  # vermillion
    "s4d": "#009E73",  # bluish green
    "s5": "#CC79A7",  # reddish purple
}
_EXTRA_COLOURS: tuple[str, ...] = ("#E69F00", "#56B4E9", "#000000", "#F0E442")
_KNOWN_MARKERS: dict[str, str] = {"rotrnn": "o", "lru": "s", "s4d": "^", "s5": "D"}
_EXTRA_MARKERS: tuple[str, ...] = ("v", "P", "X", "*")

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
    "path.simplify": True,
    "axes.prop_cycle": mpl.cycler(color=[*_KNOWN_COLOURS.values(), *_EXTRA_COLOURS]),
}


def apply_style() -> None:
    """Set the report's matplotlib style (idempotent; call before drawing each figure).

    Seaborn's ``ticks`` look with the report's sizes; the colour cycle is the model palette, so
    even a figure that forgets `model_colour` draws in the same colours.
    """
    import seaborn as sns

    sns.set_theme(context="paper", style="ticks", rc=_RC)
    mpl.rcParams.update(_RC)


def _extra_names(name: str) -> list[str]:
    # Models registered beyond the four get colours by their place in the sorted registry, so
    # the assignment is the same in every figure whichever models a figure happens to show.
    from models import names as registered

    return sorted({*registered(), name} - set(MODEL_ORDER))


def model_colour(name: str) -> str:
    """The model's colour as a hex string, the same in every figure of the report."""
    if name in _KNOWN_COLOURS:
        return _KNOWN_COLOURS[name]
    extras = _extra_names(name)
    return _EXTRA_COLOURS[extras.index(name) % len(_EXTRA_COLOURS)]


def model_marker(name: str) -> str:
    """The model's matplotlib marker, the same in every figure of the report."""
    if name in _KNOWN_MARKERS:
        return _KNOWN_MARKERS[name]
    extras = _extra_names(name)
    return _EXTRA_MARKERS[extras.index(name) % len(_EXTRA_MARKERS)]


def model_label(name: str) -> str:
    """The model's name as the papers write it (``rotrnn`` -> ``RotRNN``)."""
    return MODEL_LABELS.get(name, name)


def order_models(names: Iterable[str]) -> list[str]:
    """``names`` without repeats, the four layers first in `MODEL_ORDER`, others sorted after."""
    unique = set(names)
    known = [n for n in MODEL_ORDER if n in unique]
    return known + sorted(unique - set(MODEL_ORDER))


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
