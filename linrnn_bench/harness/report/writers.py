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
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from linrnn_bench import validation

from ..measure import processes
from . import style
from .artifacts import Figure, Table

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


def format_setting(value: object) -> str:
    """A value as set rather than measured (a learning rate): the shortest decimal that reads
    back as it ("0.003", "0.1"), scientific below 1e-4 or from 1e6 on ("1e-05")."""
    x = _number(value)
    if not isinstance(x, float):
        return x
    if x == 0 or 1e-4 <= abs(x) < 1e6:
        return np.format_float_positional(x, trim="-")
    return np.format_float_scientific(x, trim="-", exp_digits=2)


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
           "near_one": format_near_one, "setting": format_setting}


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


# A fixed-decimal column shows a small non-zero value with up to this many more decimals (0.03
# in a 1-decimal column: the column at 2); a value that needs more makes the whole column
# scientific, so that no column holds "4.7e-05" beside "0.0001".
EXTRA_DECIMALS = 2
# A near-one column shows the distance to 1 of its closest value, but never with more decimals
# than this (float32 quantities carry about seven digits).
NEAR_ONE_DECIMALS = 6
# Spreads (± and interval bounds) of fewer values than this are not shown: the standard error
# of two values is half their difference, which a reader is better given as the mean and n.
MIN_N_FOR_SPREAD = 3


# A cell formatter: ``formatter(value, error=False)``, the text of a mean or its standard error.
CellFormat = Callable[..., str]


def column_format(values: Sequence[object], fmt: int | str, *,
                  integer: bool = False) -> CellFormat:
    """One formatter for every cell of a column of format ``fmt`` (the values it will show):
    ``formatter(value, error=False) -> str``, the same decimals or notation in each cell.

    - decimals ``d``: fixed ``d`` decimals; if a non-zero value would show as 0, the column gets
      the decimals that show it (at most `EXTRA_DECIMALS` more), else scientific as a whole.
    - ``"g"``: three significant digits of the column's smallest magnitude, in fixed notation
      when every non-zero magnitude lies in [1e-3, 1e6) within three decades of each other,
      else scientific (three significant digits) as a whole.
    - ``"near_one"``: decimals enough to show the distance to 1 of the column's closest value
      other than 1 (at least 3, at most `NEAR_ONE_DECIMALS`).
    - ``"setting"``: values as set (learning rates), as `format_setting`, scientific as a
      whole when one of them is.
    - ``"sci"``, ``"p"``: as `format_scientific` and `format_p`, whose cells agree already.

    An exact zero (or its round-off) is "0"; a standard error (``error=True``) of zero is
    shown with the column's decimals. Integers of an integer column are shown whole.
    """
    if isinstance(fmt, str) and fmt not in FORMATS:
        raise ValueError(f"Unknown number format {fmt!r}; accepted: a number of decimals "
                         f"or one of {sorted(FORMATS)}.")
    numbers = [_number(v) for v in values]
    sizes = [abs(x) for x in numbers if isinstance(x, float) and abs(x) >= _ZERO]
    if fmt == "p":
        return _with_integers(lambda x, error: (format_significant(x) if error
                                                else format_p(x)), integer)
    if fmt == "near_one":
        gaps = [abs(1.0 - x) for x in numbers if isinstance(x, float) and 0 < abs(1.0 - x) < 1]
        decimals = min(NEAR_ONE_DECIMALS,
                       max([3] + [math.ceil(-math.log10(g)) + 1 for g in gaps]))
        return _with_integers(lambda x, error: (format_significant(x) if error
                                                else f"{x:.{decimals}f}"), integer)
    if fmt == "setting":
        scientific = any(not 1e-4 <= x < 1e6 for x in sizes)
        return _with_integers(lambda x, error: (
            np.format_float_scientific(x, trim="-", exp_digits=2) if scientific and x != 0
            else format_setting(x)), integer)
    if fmt == "g" and sizes:
        low, high = min(sizes), max(sizes)
        if not (1e-3 <= low and high < 1e6 and high < 1e3 * low):
            fmt = "sci"
        else:
            quantum = math.floor(math.log10(low)) - 2  # three significant digits of `low`
            return _with_integers(lambda x, error: _fixed(round(x, -quantum), max(0, -quantum),
                                                          error), integer)
    if isinstance(fmt, int) and not isinstance(fmt, bool):
        need = max([fmt] + [math.ceil(math.log10(0.5 / x) - 1e-9) for x in sizes if x < 1])
        if need - fmt <= EXTRA_DECIMALS:
            return _with_integers(lambda x, error: _fixed(x, need, error), integer)
        fmt = "sci"
    return _with_integers(lambda x, error: format_scientific(x), integer)


def _fixed(x: float, decimals: int, error: bool) -> str:
    if abs(x) < _ZERO and not error:
        return "0"
    return _unsigned_zero(f"{x:.{decimals}f}")


def _with_integers(show: Callable[[float, bool], str], integer: bool) -> CellFormat:
    """``show(x: float, error: bool)`` as a cell formatter: a missing value or text as
    `_number` gives it, an integer of an integer column whole."""
    def formatter(value: object, error: bool = False) -> str:
        x = _number(value)
        if not isinstance(x, float):
            return x
        if integer and not error and x == int(x):
            return f"{int(x)}"
        return show(x, error)
    return formatter


def _n_frame(table: Table) -> pd.DataFrame | None:
    """``table.n`` as a float frame of ``table.frame``'s shape (NaN where not given), or None
    where the table gives no n."""
    frame, n = table.frame, table.n
    if n is None:
        return None
    out = pd.DataFrame(math.nan, index=frame.index, columns=frame.columns, dtype=float)
    if isinstance(n, pd.DataFrame):
        for column in n.columns:
            out[column] = pd.to_numeric(n[column], errors="coerce").astype(float).to_numpy()
        return out
    if isinstance(n, str):
        n = frame[n]
    per_row = (pd.to_numeric(n, errors="coerce").astype(float).to_numpy()
               if isinstance(n, pd.Series) else np.full(len(frame), float(n)))
    for column in frame.columns:
        out[column] = per_row
    return out


def _cells(table: Table) -> tuple[pd.DataFrame, pd.DataFrame, list[object]]:
    """The table's data cells as text (``mean ± se`` in each column's one format, `column_format`),
    the mask of the cells to set in bold (`best_mask`), and the interval columns with nothing
    left to show; Markdown and LaTeX each mark bold their own way.

    A spread (± or an interval column) rests on ``table.n`` values and is shown only where
    n >= `MIN_N_FOR_SPREAD`; where n differs between a table's cells and is not a column of
    its own, a mean shown without its spread says its n.
    """
    frame, se = table.frame, table.stderr
    counts = _n_frame(table)
    spread = [c for c in table.intervals] + (list(se.columns) if se is not None else [])
    shown_n = (counts[spread].stack().dropna() if counts is not None and spread
               else pd.Series(dtype=float))
    say_n = not isinstance(table.n, str) and shown_n.nunique() > 1
    out = pd.DataFrame(index=frame.index, columns=frame.columns, dtype=object)
    for column in frame.columns:
        integer = _is_integer_column(frame[column])
        formats = [cell_format(table, row, column) for row in frame.index]
        show = {fmt: column_format([frame[column].iloc[i] for i, f in enumerate(formats)
                                    if f == fmt], fmt, integer=integer)
                for fmt in dict.fromkeys(formats)}
        for i, row in enumerate(frame.index):
            n = counts.iloc[i][column] if counts is not None else math.nan
            few = not n >= MIN_N_FOR_SPREAD
            text = show[formats[i]](frame.at[row, column])
            if column in table.intervals and few:
                text = _MISSING_CELL
            elif se is not None and column in se.columns and text != _MISSING_CELL:
                err = se.at[row, column]
                if not _isnull(err) and not few:
                    text += _PM + show[formats[i]](err, error=True)
                elif not _isnull(err) and say_n and not math.isnan(n):
                    text += f" (n = {int(n)})"
            out.at[row, column] = text
    empty = [c for c in table.intervals if (out[c] == _MISSING_CELL).all()]
    return out, best_mask(frame, table.best), empty


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
        if isinstance(fmt, str) or (validation.is_integer(fmt) and not isinstance(fmt, bool)):
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
    _check_spreads(table)


def _check_spreads(table: Table) -> None:
    """A table with spreads says on how many values they rest (``n``), in a form it accepts."""
    frame, n = table.frame, table.n
    unknown = [c for c in table.intervals if c not in frame.columns]
    if unknown:
        raise ValueError(f"Table {table.name!r}: intervals names unknown columns {unknown}.")
    if n is None:
        if table.stderr is not None or table.intervals:
            raise ValueError(
                f"Table {table.name!r} has standard errors or intervals but no n: give n (a "
                "number, a column name, a Series per row or a DataFrame per cell), as a spread "
                f"is shown only where n >= {MIN_N_FOR_SPREAD}."
            )
        return
    if isinstance(n, str):
        ok = n in frame.columns
    elif isinstance(n, pd.DataFrame):
        ok = n.index.equals(frame.index) and all(c in frame.columns for c in n.columns)
    elif isinstance(n, pd.Series):
        ok = n.index.equals(frame.index)
    else:
        ok = validation.is_integer(n) and not isinstance(n, bool) and n >= 0
    if not ok:
        raise ValueError(
            f"Table {table.name!r}: n must be an integer >= 0, a column of the frame, a Series "
            "with the frame's index or a DataFrame with its index and a subset of its columns; "
            f"got {n!r:.80}."
        )


def _is_format(fmt: object) -> bool:
    if isinstance(fmt, str):
        return fmt in FORMATS
    return validation.is_integer(fmt) and not isinstance(fmt, bool) and fmt >= 0


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
    """A GitHub-flavoured Markdown table: ``mean ± se`` (where n >= 3), one format per column
    (`column_format`), the best per column in bold."""
    _check_table(table)
    cells, bold, empty = _cells(table)
    cells = cells.where(~bold.to_numpy(), ("**" + cells + "**").to_numpy()).drop(columns=empty)
    cells = _index_columns(cells)
    n_index = cells.shape[1] - (table.frame.shape[1] - len(empty))
    cells = cells.map(lambda v: str(v).replace("|", r"\|"))
    cells.columns = [str(c).replace("|", r"\|") for c in cells.columns]
    align = ["left"] * n_index + [
        "right" if _is_numeric_column(table.frame[c]) else "left"
        for c in table.frame.columns if c not in empty
    ]
    return cells.to_markdown(index=False, colalign=align, disable_numparse=True) + "\n"


# What Styler's LaTeX escaping (`Styler.format(escape="latex")`, the ten characters special to
# LaTeX) leaves as it is but pdflatex cannot print as written: every non-ASCII character the
# report writes (the .tex files are ASCII, so pdflatex takes them without inputenc or fontenc
# options), and "<", ">" and "|", which the default OT1 font encoding prints as other glyphs.
# Applied after Styler's escaping, so the macros here are not escaped again.
_LATEX_SPELLING = {
    "<": r"\textless{}", ">": r"\textgreater{}", "|": r"\textbar{}",
    "–": "--", "—": "---", "−": r"$-$", "‐": "-", "…": r"\ldots{}", "’": "'",
    "‘": "`",
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


# Symbols set in math mode wherever a table's text has them (matched after Styler's escaping,
# which writes "_" as "\_"): a norm ‖x‖ or ||x||, an absolute value |x| (a short span between
# two bars), a Greek letter's name as a word ("RotRNN, xi off": the registry's labels are
# ASCII), and the effect size d_z.
_GREEK_NAMES = ("alpha", "beta", "gamma", "lambda", "xi", "theta", "sigma")
_MATH_SPAN = re.compile(
    r"‖(?P<norm>[^‖]{1,30})‖(?P<norm_power>[²³]?)"
    r"|\|\|(?P<norm_ascii>[^|]{1,30})\|\|(?P<ascii_power>[²³]?)"
    r"|\|(?P<abs>[^|\s][^|]{0,30}?)\|(?P<abs_power>[²³]?)"
    r"|(?<![\\A-Za-z])(?P<greek>" + "|".join(_GREEK_NAMES) + r")(?![A-Za-z])"
    r"|(?<![\\A-Za-z])(?P<symbol>d)\\_(?P<index>z)(?![A-Za-z])"
)
_POWERS = {"": "", "²": "^2", "³": "^3"}


def latex_spelling(text: object) -> str:
    r"""``text``, escaped by Styler already, with math in math mode (`_MATH_SPAN`: $|\lambda|$,
    $\lVert h_t\rVert$, $\xi$, $d_z$), every character of `_LATEX_SPELLING` spelt as its macro
    and an accented letter without its accent: ASCII that pdflatex prints as meant.

    Raises `ValueError` for a character with no spelling, so that a new symbol is named here
    instead of reaching a ``.tex`` file that pdflatex rejects.
    """
    text, out, at = str(text), [], 0
    for match in _MATH_SPAN.finditer(text):
        out.append(_spell_plain(text[at:match.start()]))
        out.append(_math(match))
        at = match.end()
    out.append(_spell_plain(text[at:]))
    return "".join(out)


def _math(match: re.Match) -> str:
    """One `_MATH_SPAN` match as inline math."""
    parts = match.groupdict()
    if parts["greek"]:
        return f"$\\{parts['greek']}$"
    if parts["symbol"]:
        return f"${parts['symbol']}_{parts['index']}$"
    for body, power, left, right in (("norm", "norm_power", r"\lVert ", r"\rVert"),
                                     ("norm_ascii", "ascii_power", r"\lVert ", r"\rVert"),
                                     ("abs", "abs_power", "|", "|")):
        if parts[body] is not None:
            return f"${left}{_math_inner(parts[body])}{right}{_POWERS[parts[power]]}$"
    raise AssertionError(match)  # every alternative of _MATH_SPAN is handled above


def _math_inner(text: str) -> str:
    r"""Escaped text inside a norm or an absolute value as math: Greek letters (by name or
    character) as macros, ``\_`` as a subscript (a word as upright text: $y_\mathrm{rot}$),
    ``inf`` as $\infty$."""
    text = text.replace(r"\_", "_")
    text = re.sub(r"(?<![\\A-Za-z])(" + "|".join(_GREEK_NAMES) + r")(?![A-Za-z])", r"{\\\1}",
                  text)
    text = re.sub(r"(?<=_)inf(?![A-Za-z])", r"{\\infty}", text)
    text = re.sub(r"_([A-Za-z]{2,})", r"_\\mathrm{\1}", text)
    out = []
    for ch in text:
        spelt = _LATEX_SPELLING.get(ch, ch)
        out.append("{" + spelt.strip("$") + "}" if spelt.startswith("$") else spelt)
    return _spell_plain("".join(out))


def _spell_plain(text: str) -> str:
    """Text outside math: each character of `_LATEX_SPELLING` as its macro, an accented letter
    without its accent, a `ValueError` for a character with no spelling."""
    out = []
    for ch in text:
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
                    f"{unicodedata.name(ch, 'unnamed')}); add one to writers._LATEX_SPELLING."
                )
            out.append(plain)
    return "".join(out)


def _latex_text(text: str) -> str:
    """Running text (a caption, a comment) escaped as a table's cells are: Styler writes a
    caption as given, so the text goes through a one-cell Styler's formatting instead."""
    one = pd.DataFrame([[text]]).style.format(latex_spelling, escape="latex")
    return one.hide(axis="index").hide(axis="columns").to_string(delimiter="").rstrip("\n")


# A number in scientific notation as a cell shows it ("1.23e-03"), and as LaTeX sets it.
_SCIENTIFIC = re.compile(r"(?<![\w.])(-?\d(?:\.\d+)?)e([+-]\d+)(?![\w.])")


def _latex_cell(text: object) -> str:
    r"""A data cell (escaped by Styler) as LaTeX: `latex_spelling`, with a number in scientific
    notation as $1.23\times10^{-3}$, a minus sign as one, and a ``mean ± se`` of such numbers
    in one math span."""
    spelt = _SCIENTIFIC.sub(lambda m: f"${m[1]}\\times10^{{{int(m[2])}}}$", latex_spelling(text))
    # A minus sign, not a hyphen, before a number set as text.
    spelt = re.sub(r"(?<![\w.${])-(?=\d)", "$-$", spelt)
    return spelt.replace(r"$ $\pm$ $", r" \pm ").replace("$$", "")


# How a LaTeX table is laid out in a two-column paper, by its number of columns (index levels
# included); `table_latex` states the rule.
COLUMN_TABLE_COLUMNS = 5
PAGE_TABLE_COLUMNS = 8
LONG_TEXT = 30  # characters: a text column with a longer cell wraps (a tabularx X column)
HEADER_WRAP = 12  # characters: a longer header is set on two lines
CAPTION_WORDS = 60  # the most words of a LaTeX caption, its title included
# Rows of one float (a page or column is about 50 lines of text at 10 pt; the caption, the
# headers and the rules take the rest); a longer table continues in further floats.
FLOAT_ROWS = 40
_TABULAR_LINES = 4  # a tabular's header lines and rules, counted as rows

# Shrinks a tabular wider than the float to its width; never enlarges a narrower one
# (graphicx's \resizebox reads the box's natural width as \width).
_FIT = "\\resizebox{\\ifdim\\width>\\linewidth\\linewidth\\else\\width\\fi}{!}{%\n"


def latex_caption(table: Table) -> str:
    """The caption printed with the LaTeX table: its title and short caption (its caption when
    it has none), escaped; a `ValueError` when that is longer than `CAPTION_WORDS` words (the
    full description belongs in the report's text, which states ``caption`` whole)."""
    title = table.title.rstrip(".")
    text = table.short_caption or table.caption
    caption = f"{title}. {text}" if text else title
    words = len(caption.split())
    if words > CAPTION_WORDS:
        raise ValueError(
            f"Table {table.name!r}: its LaTeX caption (title and "
            f"{'short_caption' if table.short_caption else 'caption'}) has {words} words, more "
            f"than {CAPTION_WORDS}; give the table a short_caption (what the numbers are, their "
            "units, n and what a ± is) and leave the full description to its caption."
        )
    return _latex_text(caption)


def table_latex(table: Table) -> str:
    """A ``table`` float holding booktabs tabulars (``\\usepackage{booktabs}``, and
    ``graphicx`` and ``tabularx``), with the table's title and short caption as its caption
    (`latex_caption`) and ``tab:<name>`` as its label, best per column in bold; ASCII only.
    In a paper: ``\\input{reports/tables/<name>.tex}``.

    Laid out for a two-column paper by its number of columns c, index levels included:

    - c <= `COLUMN_TABLE_COLUMNS`: one column wide (``table``);
    - c <= `PAGE_TABLE_COLUMNS`: page wide (``table*``);
    - more: page wide, its data columns split into stacked tabulars of at most
      `PAGE_TABLE_COLUMNS` columns, each repeating the index columns.

    A tabular wider than its float is shrunk to the float's width (``\\resizebox``, never
    enlarged); one with a text column longer than `LONG_TEXT` characters is a ``tabularx`` of
    the float's width, that column wrapping instead. Headers longer than `HEADER_WRAP`
    characters are set on two lines. More than `FLOAT_ROWS` rows are split into tabulars of
    at most that many, and tabulars that would not fit one page continue in further floats
    of the same number, captioned "(continued)". `make tex-check` compiles every table so in
    a two-column paper and fails on one that does not fit.

    The cells are those of Markdown (`_cells`); Styler writes each tabular, escaping them,
    `latex_spelling` spells what it leaves (math in math mode), and bold is its ``textbf``
    style. The index levels are the leading, left-aligned columns.
    """
    _check_table(table)
    caption = latex_caption(table)
    cells, bold, empty = _cells(table)
    index_frame = _index_columns(pd.DataFrame(index=table.frame.index))
    index_frame.index = cells.index
    columns = [c for c in table.frame.columns if c not in empty]
    n_index = index_frame.shape[1]
    environment = "table" if n_index + len(columns) <= COLUMN_TABLE_COLUMNS else "table*"
    rows = _parts(list(range(len(cells))), 0, FLOAT_ROWS)
    tabulars = [(len(chunk), _tabular(table, cells.iloc[chunk], bold.iloc[chunk],
                                      index_frame.iloc[chunk], part))
                for chunk in rows for part in _parts(columns, n_index, PAGE_TABLE_COLUMNS)]
    floats, lines = [[]], 0
    for height, tex in tabulars:
        if floats[-1] and lines + height > FLOAT_ROWS:
            floats.append([])
            lines = 0
        floats[-1].append(tex)
        lines += height + _TABULAR_LINES
    out = [f"% {_latex_text(table.title)} (linrnn-bench table {table.name})\n"]
    for i, tex in enumerate(floats):
        # A float continuing the table keeps its number (the counter set back one).
        head = (f"\\caption{{{caption}}}\n\\label{{tab:{table.name}}}" if i == 0 else
                f"\\addtocounter{{table}}{{-1}}\n\\caption{{{_latex_text(table.title)} "
                "(continued)}")
        out.append(f"\\begin{{{environment}}}[tbp]\n\\centering\n{head}\n"
                   + "\\par\\medskip\n".join(tex) + f"\\end{{{environment}}}\n")
    return "".join(out)


def _parts(items: list, fixed: int, most: int) -> list[list]:
    """``items`` in consecutive parts of nearly equal size, each at most ``most`` with the
    ``fixed`` ones every part repeats (one part if all fit)."""
    room = max(1, most - fixed)
    count = max(1, math.ceil(len(items) / room))
    size, extra = divmod(len(items), count)
    parts, at = [], 0
    for i in range(count):
        step = size + (i < extra)
        parts.append(items[at:at + step])
        at += step
    return parts


def _tabular(table: Table, cells: pd.DataFrame, bold: pd.DataFrame, index_frame: pd.DataFrame,
             columns: list) -> str:
    """One tabular of the index columns and ``columns``, fitted to the float's width."""
    body = pd.concat([index_frame, cells[columns]], axis=1).reset_index(drop=True)
    # Styler's own bold (``\textbf{...}``), on the data cells only.
    styles = np.hstack([np.full(index_frame.shape, ""),
                        np.where(bold[columns].to_numpy(), "textbf: --rwrap;", "")])
    numeric = [False] * index_frame.shape[1] + [_is_numeric_column(table.frame[c])
                                                for c in columns]
    long = [not num and body[c].astype(str).str.len().max() > LONG_TEXT
            for c, num in zip(body.columns, numeric)]
    spec = "".join(r">{\raggedright\arraybackslash}X" if wrap else "r" if num else "l"
                   for num, wrap in zip(numeric, long))
    align = dict(zip(body.columns, numeric))
    styler = (body.style.hide(axis="index")
              .format(_latex_cell, escape="latex")
              .format_index(lambda c: _latex_header(c, align.get(c, False)), axis="columns")
              .apply(lambda _: styles, axis=None))
    tex = styler.to_latex(hrules=True, column_format=spec)
    if any(long):  # the outer tabular (the first begun, the last ended; headers nest one)
        head, tail = tex.rsplit("\\end{tabular}", 1)
        return (head.replace("\\begin{tabular}{", "\\begin{tabularx}{\\linewidth}{", 1)
                + "\\end{tabularx}" + tail)
    return _FIT + tex.rstrip("\n") + "}\n"


def _latex_header(name: object, numeric: bool) -> str:
    """A column header as LaTeX: on two lines, split at the space nearest its middle (outside
    math), when longer than `HEADER_WRAP` characters."""
    text = str(name)
    inside = [range(*m.span()) for m in _MATH_SPAN.finditer(text)]
    spaces = [i for i, ch in enumerate(text) if ch == " " and not any(i in r for r in inside)]
    if len(text) <= HEADER_WRAP or not spaces:
        return _latex_text(text)
    cut = min(spaces, key=lambda i: max(i, len(text) - i - 1))
    lines = (_latex_text(text[:cut]), _latex_text(text[cut + 1:]))
    side = "r" if numeric else "l"
    return f"\\begin{{tabular}}[b]{{@{{}}{side}@{{}}}}{lines[0]}\\\\ {lines[1]}\\end{{tabular}}"


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
        validation.positive_int("--workers", workers)

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
