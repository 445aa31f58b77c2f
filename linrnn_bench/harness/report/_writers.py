"""Artifacts to files: tables as CSV, Markdown and LaTeX; figures as PNG and PDF.

Every writer is deterministic: the same artifact gives the same bytes on every call (no
timestamps or library versions in the files' metadata, fixed DPI), so a report rendered twice
from the same store is byte-identical and a diff of ``reports/`` shows only what changed in the
results.
"""

from __future__ import annotations

import math
import os
import re
import unicodedata
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from linrnn_bench.models import _validate

from ..measure import processes
from . import style
from ._artifacts import Figure, Table

# A file stem that is safe on every file system and in a Markdown link.
_STEM = re.compile(r"^[a-z0-9][a-z0-9_\-]*$")

TABLE_SUFFIXES: tuple[str, ...] = (".csv", ".md", ".tex")
FIGURE_SUFFIXES: tuple[str, ...] = (".png", ".pdf")

# Metadata that would change between runs or library versions, switched off. PNG: matplotlib
# writes "Software: matplotlib version ..." by default. PDF: the creation and modification
# dates, and the producer and creator strings (which carry library versions).
_PNG_METADATA: dict[str, None] = {"Software": None}
_PDF_METADATA: dict[str, None] = {
    "CreationDate": None, "ModDate": None, "Producer": None, "Creator": None,
}

_PM = " ± "  # between a mean and its standard error
_MISSING_CELL = "–"  # an en dash: no value


def check_name(name: str) -> str:
    """``name`` if it is a valid artifact file stem, else a `ValueError` saying what is."""
    if not isinstance(name, str) or not _STEM.match(name):
        raise ValueError(
            f"Artifact name {name!r} is not a valid file stem; use lower-case letters, digits, "
            "'_' and '-', starting with a letter or digit (e.g. 'accuracy_by_task')."
        )
    return name


def check_out_dir(out_dir: str | os.PathLike[str]) -> Path:
    """``out_dir`` as a `Path` if a report can be written there, else a `ValueError` saying why.

    Checked before anything runs (``report --run`` would otherwise run every study first): the
    path must not be a file, none of its parents may be a file, and the nearest folder that
    exists must be writable (the report is written beside ``out_dir`` and swapped into place).
    Whether an existing folder may be replaced (empty, or a previous report) is the renderer's
    check, `harness.report.render`.
    """
    path = Path(out_dir)
    if path.exists() and not path.is_dir():
        raise ValueError(
            f"--out {path} is a file; pass a folder for the report (new, empty, or a previous "
            "report), e.g. --out reports."
        )
    # The folder that will hold the report's temporary copy: out_dir's nearest existing parent.
    parent = path.absolute().parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise ValueError(
            f"--out {path}: {parent} is a file, so no folder can be made under it; pass a "
            "folder path whose parents are folders."
        )
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(
            f"--out {path}: the folder {parent} is not writable, and the report is written "
            "beside its destination. Pass a folder you can write with --out."
        )
    return path


# ---------------------------------------------------------------------------------------------
# Tables


def best_mask(frame: pd.DataFrame, best: Mapping[str, str]) -> pd.DataFrame:
    """Boolean frame: True where a cell holds its column's best value (all ties are best).

    Only numeric cells compete; NaN and text (``"unknown"``) never win. A column whose numeric
    cells are all equal has no best (bold everywhere would say nothing). ``best`` maps a column
    to ``"max"`` or ``"min"``; columns not named are all False.
    """
    mask = pd.DataFrame(False, index=frame.index, columns=frame.columns)
    for column, how in best.items():
        if column not in frame.columns:
            raise ValueError(
                f"best names column {column!r}, which the table lacks; columns: "
                f"{[str(c) for c in frame.columns]}."
            )
        if how not in ("max", "min"):
            raise ValueError(f"best[{column!r}] must be 'max' or 'min', got {how!r}.")
        values = pd.to_numeric(frame[column], errors="coerce").astype(float)
        if values.dropna().nunique() > 1:
            target = values.max() if how == "max" else values.min()
            mask[column] = (values == target).to_numpy()
    return mask


def _is_numeric_column(series: pd.Series) -> bool:
    """Whether a column holds numbers (right-aligned) rather than text (left-aligned)."""
    if pd.api.types.is_numeric_dtype(series.dtype):
        return True
    return bool(pd.to_numeric(series, errors="coerce").notna().any())


def _is_integer_column(series: pd.Series) -> bool:
    return pd.api.types.is_integer_dtype(series.dtype) and not pd.api.types.is_bool_dtype(
        series.dtype
    )


def format_number(
    value: object, digits: int, *, integer: bool = False, scientific: bool = True
) -> str:
    """One number as shown in Markdown and LaTeX: fixed ``digits`` decimals.

    Integers (``integer=True``) are shown whole; an exact zero (or a magnitude below 1e-12, the
    round-off of a zero such as a difference of equal means) is "0", and a value that rounds to
    zero never shows a minus sign. With ``scientific``, a non-zero magnitude too small for
    ``digits`` decimals is shown in scientific notation rather than as a misleading 0.00
    (standard errors are not: "± 0.0" says the spread is below the precision shown). NaN and
    None are a dash; text is returned unchanged.
    """
    x = _number(value)
    if not isinstance(x, float):
        return x
    if integer and x == int(x):
        return f"{int(x)}"
    if abs(x) < _ZERO:
        return "0"
    if scientific and abs(x) < 0.5 * 10.0 ** (-digits):
        return f"{x:.{max(digits - 1, 1)}e}"
    return _unsigned_zero(f"{x:.{digits}f}")


# Below this magnitude a value is the floating-point round-off of a zero (a difference of two
# equal means computed in different orders is ~1e-15), shown as 0 by the fixed formats.
_ZERO = 1e-12


def _number(value: object) -> float | str:
    """``value`` as a float, or the text to show instead (a dash for a missing value, text
    unchanged, True/False, inf)."""
    if value is None or value is pd.NA:
        return _MISSING_CELL
    if isinstance(value, str):
        return value
    if isinstance(value, (bool, np.bool_)):
        return str(bool(value))
    x = float(value)  # type: ignore[arg-type]
    if math.isnan(x):
        return _MISSING_CELL
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x


def _unsigned_zero(text: str) -> str:
    # "-0.0" (a small negative rounded to zero) reads as a signed result: drop the sign.
    return text[1:] if text.startswith("-") and not text.strip("-0.") else text


def format_scientific(value: object, significant: int = 3) -> str:
    """Scientific notation with ``significant`` digits ("1.23e-03"), an exact zero as "0"
    (for MSE, whose values span decades)."""
    x = _number(value)
    if not isinstance(x, float):
        return x
    return "0" if x == 0 else f"{x:.{significant - 1}e}"


def format_significant(value: object, significant: int = 3) -> str:
    """``significant`` digits, positional between 1e-3 and 1e6 ("0.00312", "2.1", "123000"),
    scientific outside ("1.2e-05"); an exact zero as "0" (learning rates, times, rates)."""
    x = _number(value)
    if not isinstance(x, float):
        return x
    if x == 0:
        return "0"
    if 1e-3 <= abs(x) < 1e6:
        return np.format_float_positional(x, precision=significant, unique=False,
                                          fractional=False, trim="-")
    return f"{x:.{significant - 2}e}" if significant > 1 else f"{x:.0e}"


def format_p(value: object) -> str:
    """A p-value as papers print it: two significant digits ("0.031", "0.25", "1"), and
    "< 0.001" below a thousandth (its exact size there says nothing more)."""
    x = _number(value)
    if not isinstance(x, float):
        return x
    if x < 0.001:
        return "< 0.001"
    return np.format_float_positional(x, precision=2, unique=False, fractional=False, trim="-")


def format_near_one(value: object) -> str:
    """A value near 1 (an eigenvalue modulus) with enough decimals to show its distance to 1,
    two significant digits of that distance and at least three decimals: 0.99993 ->
    "0.999930", 0.95 -> "0.950", exactly 1 -> "1"."""
    x = _number(value)
    if not isinstance(x, float):
        return x
    if x == 1.0:
        return "1"
    gap = abs(1.0 - x)
    decimals = max(3, math.ceil(-math.log10(gap)) + 1) if gap < 1 else 3
    return f"{x:.{min(decimals, 15)}f}"


# The named formats a table's ``digits`` may give (an int is a number of decimals).
FORMATS = {"sci": format_scientific, "g": format_significant, "p": format_p,
           "near_one": format_near_one}


def format_value(value: object, fmt: int | str, *, integer: bool = False,
                 error: bool = False) -> str:
    """``value`` in format ``fmt``: a number of decimals (`format_number`) or a name of
    `FORMATS`. ``error``: the value is a standard error beside a mean (fixed decimals without
    the scientific fallback; a named format as for the mean, a p format as 3 significant)."""
    if isinstance(fmt, str):
        if fmt not in FORMATS:
            raise ValueError(f"Unknown number format {fmt!r}; accepted: a number of decimals "
                             f"or one of {sorted(FORMATS)}.")
        if integer and isinstance(value, (int, np.integer)) and fmt != "p":
            return f"{int(value)}"
        return (format_significant if error and fmt in ("p", "near_one") else FORMATS[fmt])(value)
    return format_number(value, int(fmt), integer=integer, scientific=not error)


def _cells(table: Table) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The table's data cells as text (``mean ± se`` in each column's format), and the mask of
    the cells to set in bold (`best_mask`); Markdown and LaTeX each mark bold their own way."""
    frame, se = table.frame, table.stderr
    out = pd.DataFrame(index=frame.index, columns=frame.columns, dtype=object)
    for column in frame.columns:
        integer = _is_integer_column(frame[column])
        for row in frame.index:
            fmt = cell_format(table, row, column)
            text = format_value(frame.at[row, column], fmt, integer=integer)
            if se is not None and column in se.columns:
                err = se.at[row, column]
                if not _isnull(err) and text != _MISSING_CELL:
                    text += _PM + format_value(err, fmt, error=True)
            out.at[row, column] = text
    return out, best_mask(frame, table.best)


def column_digits(table: Table, column: object) -> int | str:
    """The format of ``column`` (``table.digits``, or its entry in a per-column map): a
    number of decimals or a name of `FORMATS`."""
    if isinstance(table.digits, Mapping):
        return table.digits.get(column, 2)  # type: ignore[return-value]
    return table.digits


def cell_format(table: Table, row: object, column: object) -> int | str:
    """The format of one cell: ``table.cell_formats``'s entry where it gives one, else the
    column's (`column_digits`)."""
    cells = table.cell_formats
    if cells is not None and column in cells.columns:
        fmt = cells.at[row, column]
        if isinstance(fmt, str) or (_validate.is_integer(fmt) and not isinstance(fmt, bool)):
            return fmt
    return column_digits(table, column)


def _isnull(value: object) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))


def _check_table(table: Table) -> None:
    check_name(table.name)
    frame = table.frame
    if not isinstance(frame, pd.DataFrame):
        raise TypeError(f"Table {table.name!r}: frame must be a pandas DataFrame.")
    if not frame.columns.is_unique:
        raise ValueError(f"Table {table.name!r} has repeated column names.")
    if table.stderr is not None:
        if not isinstance(table.stderr, pd.DataFrame):
            raise TypeError(f"Table {table.name!r}: stderr must be a DataFrame or None.")
        extra = [c for c in table.stderr.columns if c not in frame.columns]
        if extra or not table.stderr.index.equals(frame.index):
            raise ValueError(
                f"Table {table.name!r}: stderr must have the frame's index and a subset of its "
                f"columns; unknown columns {extra}, index equal: "
                f"{table.stderr.index.equals(frame.index)}."
            )
    digits = list(table.digits.values()) if isinstance(table.digits, Mapping) else [table.digits]
    if table.cell_formats is not None:
        cells = table.cell_formats
        if not isinstance(cells, pd.DataFrame) or not cells.index.equals(frame.index) or any(
                c not in frame.columns for c in cells.columns):
            raise ValueError(
                f"Table {table.name!r}: cell_formats must be a DataFrame with the frame's index "
                "and a subset of its columns."
            )
        digits += [f for f in cells.to_numpy().ravel() if not _isnull(f)]
    if not all(_is_format(d) for d in digits):
        raise ValueError(
            f"Table {table.name!r}: digits must be an integer >= 0 or one of "
            f"{sorted(FORMATS)}, or a mapping of columns to such formats, got "
            f"{table.digits!r}."
        )
    if isinstance(table.digits, Mapping):
        unknown = [c for c in table.digits if c not in frame.columns]
        if unknown:
            raise ValueError(f"Table {table.name!r}: digits names unknown columns {unknown}.")


def _is_format(fmt: object) -> bool:
    if isinstance(fmt, str):
        return fmt in FORMATS
    return _validate.is_integer(fmt) and not isinstance(fmt, bool) and fmt >= 0


def _index_columns(frame: pd.DataFrame) -> pd.DataFrame:
    """The index levels as leading columns (an unnamed single index is dropped if a RangeIndex)."""
    if isinstance(frame.index, pd.RangeIndex) and frame.index.name is None:
        return frame.reset_index(drop=True)
    names = [n if n is not None else "" for n in frame.index.names]
    flat = frame.copy()
    flat.index = flat.index.set_names(names)
    return flat.reset_index()


def table_csv(table: Table) -> str:
    """CSV at full precision; each standard-error column ``c_se`` follows its column ``c``."""
    _check_table(table)
    frame = table.frame
    parts: list[pd.Series] = []
    for column in frame.columns:
        parts.append(frame[column])
        if table.stderr is not None and column in table.stderr.columns:
            parts.append(table.stderr[column].rename(f"{column}_se"))
    wide = pd.concat(parts, axis=1) if parts else frame.copy()
    return _index_columns(wide).to_csv(index=False, lineterminator="\n")


def table_markdown(table: Table) -> str:
    """A GitHub-flavoured Markdown table: ``mean ± se``, the best per column in bold."""
    _check_table(table)
    cells, bold = _cells(table)
    cells = _index_columns(cells.where(~bold.to_numpy(), ("**" + cells + "**").to_numpy()))
    n_index = cells.shape[1] - table.frame.shape[1]
    cells = cells.map(lambda v: str(v).replace("|", r"\|"))
    cells.columns = [str(c).replace("|", r"\|") for c in cells.columns]
    align = ["left"] * n_index + [
        "right" if _is_numeric_column(table.frame[c]) else "left" for c in table.frame.columns
    ]
    return cells.to_markdown(index=False, colalign=align, disable_numparse=True) + "\n"


# What Styler's LaTeX escaping (`Styler.format(escape="latex")`, the ten characters special to
# LaTeX) leaves as it is but pdflatex cannot print as written: every non-ASCII character the
# report writes (the .tex files are ASCII, so pdflatex takes them without inputenc or fontenc
# options), and "<", ">" and "|", which the default OT1 font encoding prints as other glyphs.
# Applied after Styler's escaping, so the macros here are not escaped again.
_LATEX_SPELLING = {
    "<": r"\textless{}", ">": r"\textgreater{}", "|": r"\textbar{}",
    "–": "--", "—": "---", "−": "-", "‐": "-", "…": r"\ldots{}", "’": "'", "‘": "`",
    "“": "``", "”": "''", "\u00a0": "~", "°": r"\textdegree{}", "·": r"$\cdot$",
    "±": r"$\pm$", "×": r"$\times$", "≤": r"$\leq$", "≥": r"$\geq$", "≈": r"$\approx$",
    "≠": r"$\neq$", "→": r"$\to$", "←": r"$\leftarrow$", "⇔": r"$\Leftrightarrow$",
    "⟺": r"$\Leftrightarrow$", "∞": r"$\infty$", "√": r"$\surd$", "∈": r"$\in$",
    "‖": r"$\|$", "²": r"$^2$", "³": r"$^3$", "⁰": r"$^0$", "¹": r"$^1$", "⁻": r"$^-$",
    "α": r"$\alpha$", "β": r"$\beta$", "γ": r"$\gamma$", "δ": r"$\delta$", "Δ": r"$\Delta$",
    "ε": r"$\varepsilon$", "η": r"$\eta$", "θ": r"$\theta$", "λ": r"$\lambda$", "Λ": r"$\Lambda$",
    "μ": r"$\mu$", "ξ": r"$\xi$", "π": r"$\pi$", "ρ": r"$\rho$", "σ": r"$\sigma$",
    "τ": r"$\tau$", "φ": r"$\phi$", "χ": r"$\chi$", "ω": r"$\omega$",
}


def latex_spelling(text: object) -> str:
    """``text``, escaped by Styler already, with every character of `_LATEX_SPELLING` spelt as
    its macro and an accented letter without its accent: ASCII that pdflatex prints as meant.

    Raises `ValueError` for a character with no spelling, so that a new symbol is named here
    instead of reaching a ``.tex`` file that pdflatex rejects.
    """
    out = []
    for ch in str(text):
        if ch in _LATEX_SPELLING:
            out.append(_LATEX_SPELLING[ch])
        elif ch.isascii():
            out.append(ch)
        else:
            plain = "".join(c for c in unicodedata.normalize("NFKD", ch)
                            if not unicodedata.combining(c))
            if not plain.isascii() or not plain:
                raise ValueError(
                    f"No LaTeX spelling for {ch!r} (U+{ord(ch):04X}, "
                    f"{unicodedata.name(ch, 'unnamed')}); add one to _writers._LATEX_SPELLING."
                )
            out.append(plain)
    return "".join(out)


def _latex_text(text: str) -> str:
    """Running text (a caption, a comment) escaped as a table's cells are: Styler writes a
    caption as given, so the text goes through a one-cell Styler's formatting instead."""
    one = pd.DataFrame([[text]]).style.format(latex_spelling, escape="latex")
    return one.hide(axis="index").hide(axis="columns").to_string(delimiter="").rstrip("\n")


def table_latex(table: Table) -> str:
    """A ``table`` float holding a booktabs ``tabular`` (``\\usepackage{booktabs}``), with the
    table's title and caption as its caption and ``tab:<name>`` as its label, best per column in
    bold; ASCII only. In a paper: ``\\input{reports/tables/<name>.tex}``.

    Written by `pandas.io.formats.style.Styler.to_latex`, from the cells' texts (`_cells`, as
    in Markdown): Styler escapes them, `latex_spelling` spells what it leaves, and bold is its
    ``textbf`` style. The index levels are the leading, left-aligned columns.
    """
    _check_table(table)
    cells, bold = _cells(table)
    index_frame = _index_columns(pd.DataFrame(index=table.frame.index))
    index_frame.index = cells.index
    body = pd.concat([index_frame, cells], axis=1).reset_index(drop=True)
    # Styler's own bold (``\textbf{...}``), on the data cells only.
    styles = np.hstack([np.full(index_frame.shape, ""),
                        np.where(bold.to_numpy(), "textbf: --rwrap;", "")])
    spec = "l" * index_frame.shape[1] + "".join(
        "r" if _is_numeric_column(table.frame[c]) else "l" for c in table.frame.columns
    )
    title = table.title.rstrip(".")
    styler = (body.style.hide(axis="index")
              .format(latex_spelling, escape="latex")
              .format_index(latex_spelling, escape="latex", axis="columns")
              .apply(lambda _: styles, axis=None))
    tex = styler.to_latex(
        hrules=True, column_format=spec, environment="table", position="tbp",
        position_float="centering", label=f"tab:{table.name}",
        caption=_latex_text(f"{title}. {table.caption}" if table.caption else title),
    )
    return f"% {_latex_text(table.title)} (linrnn-bench table {table.name})\n{tex}"


def write_table(table: Table, directory: Path) -> list[Path]:
    """Write ``<name>.csv``, ``.md`` and ``.tex`` into ``directory``; the paths written."""
    texts = {
        ".csv": table_csv(table),
        ".md": table_markdown(table),
        ".tex": table_latex(table),
    }
    paths = []
    for suffix, text in texts.items():
        path = directory / f"{table.name}{suffix}"
        path.write_text(text, encoding="utf-8", newline="\n")
        paths.append(path)
    return paths


# ---------------------------------------------------------------------------------------------
# Figures


def write_figure(figure: Figure, directory: Path) -> list[Path]:
    """Write ``<name>.png`` and ``.pdf`` with deterministic bytes (and ``<name>.csv``, the
    numbers drawn, when the figure has them), then close the figure."""
    import matplotlib.pyplot as plt
    from matplotlib.figure import Figure as MplFigure

    check_name(figure.name)
    if not isinstance(figure.figure, MplFigure):
        raise TypeError(
            f"Figure {figure.name!r}: figure must be a matplotlib Figure, got "
            f"{type(figure.figure).__name__}."
        )
    paths = []
    if figure.data is not None:
        if not isinstance(figure.data, pd.DataFrame):
            raise TypeError(f"Figure {figure.name!r}: data must be a pandas DataFrame or None.")
        path = directory / f"{figure.name}.csv"
        path.write_text(_index_columns(figure.data).to_csv(index=False, lineterminator="\n"),
                        encoding="utf-8", newline="\n")
        paths.append(path)
    try:
        for suffix, metadata in ((".png", _PNG_METADATA), (".pdf", _PDF_METADATA)):
            path = directory / f"{figure.name}{suffix}"
            figure.figure.savefig(path, format=suffix[1:], dpi=style.DPI, metadata=metadata)
            paths.append(path)
            # The constrained layout, solved while the PNG was drawn, is kept for the PDF: the
            # solver measures every label of every axis, half of a figure's drawing time.
            figure.figure.set_layout_engine("none")
    finally:
        plt.close(figure.figure)
    return paths


def _figure_worker_init() -> None:
    # A worker draws exactly as the rendering process does: the Agg canvas, the report's style.
    import matplotlib

    matplotlib.use("Agg")
    style.apply_style()


class FigureWriters:
    """Writes figures in ``workers`` processes (spawned, so never a copy of a process running
    JAX's threads, and ended with this one however it ends:
    `harness.measure.processes.worker_pool`), or in this process when ``workers`` is 1.

    Drawing a figure into PNG and PDF is most of a report's rendering, and each figure is
    independent: `submit` sends one away at once and returns a function that waits for its
    paths (re-raising what writing raised), so the caller records results in its own order. A
    figure drawn from its pickle is byte-identical to one drawn in place (tested). A figure
    that does not pickle is written here.
    """

    @staticmethod
    def check_workers(workers: object) -> None:
        """Raise ValueError unless ``workers`` is a positive integer."""
        _validate.positive_int("--workers", workers)

    def __init__(self, workers: int = 1):
        self.check_workers(workers)
        self._pool = None
        if workers > 1:
            # Workers that end with this process, even when it is killed outright.
            self._pool = processes.worker_pool(workers, _figure_worker_init)

    def submit(self, figure: Figure, directory: Path):
        """Start writing ``figure``; returns a call that waits for its paths."""
        import pickle

        if self._pool is not None:
            try:
                payload = pickle.dumps(figure)
            except Exception:  # noqa: BLE001 - any unpicklable artist: write it here
                payload = None
            if payload is not None:
                import matplotlib.pyplot as plt

                plt.close(figure.figure)  # the worker's copy is the one drawn
                future = self._pool.submit(_write_pickled, payload, directory)
                return future.result
        return lambda: write_figure(figure, directory)

    def close(self) -> None:
        """Wait for the figures sent away, then end the workers."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def __enter__(self) -> FigureWriters:
        return self

    def __exit__(self, kind: object, *exc: object) -> None:
        if kind is None or self._pool is None:
            self.close()
        else:  # interrupted or failed: the figures in flight are not wanted, end them now
            pool, self._pool = self._pool, None
            processes.end_pool(pool)


def _write_pickled(payload: bytes, directory: Path) -> list[Path]:
    import pickle

    return write_figure(pickle.loads(payload), directory)
