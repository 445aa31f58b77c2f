"""What a report section returns: tables, figures, and statements of what could not be made.

A section is a `Section`: a study's title, an introduction (what the study measures and how)
and ``build(store) -> list[Artifact]``, a pure function of the store. Each study's section is the
``SECTION`` of the module `harness.report.<study>`; the writer (`harness.report.render`) turns
its artifacts into files and the index page.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Literal, Union

import pandas as pd
from matplotlib.figure import Figure as MplFigure

if TYPE_CHECKING:
    from ..store import Store


@dataclasses.dataclass(frozen=True)
class Table:
    """A table written as CSV, Markdown and LaTeX (booktabs).

    Attributes:
        name: file stem (``accuracy_by_task``), unique in the report.
        title: a short heading.
        caption: one paragraph: what the numbers are, how they were computed (preset, seeds,
            hardware and commit come from the store and are part of the caption text); the
            report's text (``index.md``) states it whole.
        frame: the values; its index labels the rows.
        stderr: same shape as ``frame`` or None; shown as ``mean ± se`` in Markdown/LaTeX
            where ``n`` >= 3, and as separate ``<col>_se`` columns in CSV.
        best: per column, which value is best (``"max"``/``"min"``) to set in bold; columns not
            named get no bold.
        digits: how numbers are shown in Markdown/LaTeX (CSV keeps full precision): a number
            of decimals, or a named format of `harness.report.writers.FORMATS` (``"sci"``:
            scientific with 3 significant digits, for MSE; ``"p"``: p-values; ``"g"``: 3
            significant digits; ``"near_one"``: enough decimals to show the distance to 1;
            ``"setting"``: a value as set, such as a learning rate); one for every column, or
            ``{column: format}`` (columns not named get 2). Every cell of a column is shown
            in the one format the column's values call for (`writers.column_format`).
        cell_formats: per-cell formats overriding ``digits`` (``frame``'s index, a subset of its
            columns; None where the column's format applies), for a column whose rows hold
            different quantities (accuracy in one row, MSE in another).
        runs: the run ids the values come from (optional); when given, the table's provenance
            (commit, hardware, seeds, preset) is taken from these runs alone, else from every
            finished run of the section's study.
        short_caption: the caption printed with the LaTeX table after its title, at most
            `harness.report.writers.CAPTION_WORDS` words with the title: units, n, what a ±
            or an interval is, the preset. Empty: ``caption`` itself, which must then be that
            short.
        n: how many independent values (seeds) each spread rests on: one number for the
            table, the name of a column of ``frame`` holding it per row, a Series per row or
            a DataFrame per cell (``frame``'s index, a subset of its columns). Required with
            ``stderr`` or ``intervals``: a spread of fewer than 3 values is not shown.
        intervals: columns of ``frame`` that are an interval's bounds or a spread (``95% CI
            low``), shown in Markdown and LaTeX only where ``n`` >= 3, as ``stderr``.
    """

    name: str
    title: str
    caption: str
    frame: pd.DataFrame
    stderr: pd.DataFrame | None = None
    best: Mapping[str, Literal["max", "min"]] = dataclasses.field(default_factory=dict)
    digits: int | str | Mapping[str, int | str] = 2
    runs: tuple[str, ...] = ()
    cell_formats: pd.DataFrame | None = None
    short_caption: str = ""
    n: int | str | pd.Series | pd.DataFrame | None = None
    intervals: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Figure:
    """A matplotlib figure written as PNG and PDF with deterministic bytes.

    ``runs`` (optional) are the run ids drawn, as for `Table`. ``data`` holds the numbers
    drawn, written beside the figure as ``<name>.csv`` so a reader can redraw or cite them: a
    tidy frame, one row per plotted point (or per point of a line), with columns naming its
    panel and series (as the figure labels them), its x and y and the interval or band drawn
    with it; where one figure draws several kinds of mark, a ``mark`` or ``line`` column says
    which. NaN is a value not drawn (an interval at n = 1). Every section's figures give it
    (tests/helpers.assert_figure_data checks that each line drawn is in it); it is optional
    for a figure made outside the report's sections.
    """

    name: str
    title: str
    caption: str
    figure: MplFigure
    runs: tuple[str, ...] = ()
    data: pd.DataFrame | None = None


@dataclasses.dataclass(frozen=True)
class Finding:
    """Sentences a section computed from its statistics, stated in the index (no files).

    Each line must be true whichever way the data came out: it is built from the numbers it
    states, never written for one outcome. ``runs`` as for `Table`. ``design``: the lines say
    what the preset's design can decide (its n, the smallest p its tests can reach after
    correction, the differences it could detect), which the index states once, at its top,
    before any finding.
    """

    name: str
    title: str
    lines: tuple[str, ...]
    runs: tuple[str, ...] = ()
    design: bool = False


@dataclasses.dataclass(frozen=True)
class Missing:
    """A table or figure the store cannot support yet, stated in the index (never silent)."""

    name: str
    title: str
    reason: str


Artifact = Union[Table, Figure, Finding, Missing]


def no_runs(study: str) -> str:
    """Why a section has nothing to show: the store holds no finished run of ``study``."""
    return f"no finished runs of the {study} study in the store (linrnn-bench study {study})"


def run_ids(frame: pd.DataFrame) -> tuple[str, ...]:
    """The run ids of ``frame``'s rows, each once, sorted: an artifact's ``runs``."""
    return tuple(sorted(frame["run_id"].unique()))


def drawn_data(frames: Sequence[pd.DataFrame]) -> pd.DataFrame | None:
    """A `Figure`'s ``data``: the frames of its drawn lines as one (None when none was drawn)."""
    return pd.concat(frames, ignore_index=True) if frames else None


def all_missing(titles: Mapping[str, str], reason: str) -> list[Missing]:
    """Every artifact of ``titles`` (name -> title, a section's list of what it makes) as
    missing for one ``reason``."""
    return [Missing(name, title, reason) for name, title in titles.items()]


@dataclasses.dataclass(frozen=True)
class Section:
    """One study's part of the report.

    Attributes:
        study: the study's registry key (`harness.studies.names`), whose runs it reads.
        title: the section's heading.
        intro: one paragraph: what the study measures and how.
        build: ``build(store) -> list[Artifact]``, a pure function of the store; a table or
            figure it cannot make is a `Missing` saying why, never left out silently.
        followed_by_published: the published numbers' section (`harness.report.published`)
            comes right after this one, beside the results they are compared with; without
            such a section they come after every study's.
    """

    study: str
    title: str
    intro: str
    build: Callable[[Store], Sequence[Artifact]]
    followed_by_published: bool = False

    def __post_init__(self):
        if not callable(self.build):
            raise TypeError(f"Section {self.study!r}: build must be callable, got {self.build!r}.")
