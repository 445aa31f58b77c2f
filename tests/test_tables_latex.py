"""The tables' rules for a paper, each with a deliberate violation: a short LaTeX caption, one
format per column, no spread below n = 3, escaping and math mode, width and height control; and,
where pdflatex is installed, a wide table compiled in the two-column paper of `make tex-check`.

The tables are made by hand (no store), so these tests check the writer alone.
"""

from __future__ import annotations

import dataclasses
import re
import shutil

import pandas as pd
import pytest

from linrnn_bench.harness.report import _texcheck, writers
from linrnn_bench.harness.report.artifacts import Table


def _md_rows(markdown: str) -> list[list[str]]:
    lines = [ln for ln in markdown.strip().splitlines() if not set(ln) <= set("|:- ")]
    return [[c.strip() for c in re.split(r"(?<!\\)\|", ln.strip())[1:-1]] for ln in lines]


def _column(table: Table, name: str) -> list[str]:
    """The Markdown cells of column ``name``."""
    rows = _md_rows(writers.table_markdown(table))
    return [row[rows[0].index(name)] for row in rows[1:]]


def _wide(columns: int, rows: int = 3, header: str = "a long column header") -> Table:
    frame = pd.DataFrame({f"{header} {i}": [0.123 * (r + 1) + i for r in range(rows)]
                          for i in range(columns)},
                         index=pd.Index([f"model {r}" for r in range(rows)], name="Model"))
    return Table("wide", "Wide", "Many columns.", frame, digits=3)


# --------------------------------------------------------------------------------------------
# Captions


def test_a_long_caption_needs_a_short_one_for_latex():
    frame = pd.DataFrame({"a": [1.0]}, index=pd.Index(["x"], name="Model"))
    long = " ".join(["word"] * 70)
    with pytest.raises(ValueError, match="has 71 words, more than 60; give the table a "
                                         "short_caption"):
        writers.table_latex(Table("t", "Title", long, frame))
    # With one, LaTeX prints the short caption after the title, and the long one nowhere (the
    # report's text states it whole).
    tex = writers.table_latex(Table("t", "Title", long, frame, short_caption="Short, in %."))
    assert r"\caption{Title. Short, in \%.}" in tex and "word word" not in tex
    with pytest.raises(ValueError, match="short_caption\\) has 62 words"):
        writers.table_latex(Table("t", "Title", "c", frame, short_caption=long[:305]))


# --------------------------------------------------------------------------------------------
# One format per column


def test_a_column_has_one_format_whatever_its_values():
    frame = pd.DataFrame({
        "change": [4.734e-05, 0.0001, 0.026],  # 5e-5 at 2 decimals (+2 at most): scientific
        "diff": [0.5, 0.03, -1.25],  # one value needs 2 decimals: the column gets 2
        "tok/s": [859000.0, 1.3e6, 500000.0],  # reaches 1e6: scientific
        "time": [0.00119, 0.0125, 0.013],  # 3 significant digits of the smallest
        "lr": [0.003, 0.1, 0.03],  # values as set
        "modulus": [0.99993, 0.999, 1.005],  # the distance to 1 of the closest
    }, index=pd.Index(["a", "b", "c"], name="Model"))
    table = Table("formats", "Formats", "c", frame,
                  digits={"change": 2, "diff": 1, "tok/s": "g", "time": "g", "lr": "setting",
                          "modulus": "near_one"})
    assert _column(table, "change") == ["4.73e-05", "1.00e-04", "2.60e-02"]
    assert _column(table, "diff") == ["0.50", "0.03", "-1.25"]
    assert _column(table, "tok/s") == ["8.59e+05", "1.30e+06", "5.00e+05"]
    assert _column(table, "time") == ["0.00119", "0.01250", "0.01300"]
    assert _column(table, "lr") == ["0.003", "0.1", "0.03"]
    assert _column(table, "modulus") == ["0.999930", "0.999000", "1.005000"]
    # Each measured column in one notation with one number of decimals (settings are shown
    # as set: 0.003 and 0.1 are exact).
    for name in frame.columns.drop("lr"):
        cells = _column(table, name)
        shapes = {("e" in c, len(c.split("e")[0].split(".")[-1]) if "." in c else 0)
                  for c in cells}
        assert len(shapes) == 1, (name, cells)
    # LaTeX sets scientific notation as math and a minus sign as one.
    tex = writers.table_latex(table)
    assert r"$4.73\times10^{-5}$" in tex and "$-$1.25" in tex


def test_a_standard_error_shares_its_mean_format():
    frame = pd.DataFrame({"acc (%)": [96.4, 32.0]}, index=pd.Index(["a", "b"], name="Model"))
    se = pd.DataFrame({"acc (%)": [0.0, 1.04]}, index=frame.index)
    table = Table("se", "SE", "c", frame, stderr=se, n=3, digits=1)
    assert _column(table, "acc (%)") == ["96.4 ± 0.0", "32.0 ± 1.0"]


# --------------------------------------------------------------------------------------------
# No spread below n = 3


def test_no_spread_where_n_is_below_three():
    frame = pd.DataFrame({"acc (%)": [32.0, 33.1, 30.1], "low": [30.0, 31.0, 29.0],
                          "seeds": [2, 3, 5]},
                         index=pd.Index(["RotRNN", "LRU", "S4D"], name="Model"))
    se = pd.DataFrame({"acc (%)": [0.0, 0.3, 0.4]}, index=frame.index)
    # n per row as a column of the table: a mean alone where n = 2 (the column says n).
    table = Table("n", "N", "c", frame, stderr=se, digits=1, n="seeds", intervals=("low",))
    assert _column(table, "acc (%)") == ["32.0", "33.1 ± 0.3", "30.1 ± 0.4"]
    assert _column(table, "low") == ["–", "31.0", "29.0"]
    assert "32.0 $\\pm$" not in writers.table_latex(table)
    # n per cell, not a column, and not the same everywhere: the mean alone says its n.
    counts = pd.DataFrame({"acc (%)": [2, 3, 3]}, index=frame.index)
    table = Table("n", "N", "c", frame[["acc (%)"]], stderr=se, digits=1, n=counts)
    assert _column(table, "acc (%)") == ["32.0 (n = 2)", "33.1 ± 0.3", "30.1 ± 0.4"]
    # n = 2 everywhere: no ± at all, and an interval column with nothing to show is left out
    # of Markdown and LaTeX (the CSV keeps every value).
    table = Table("n", "N", "c", frame, stderr=se, digits=1, n=2, intervals=("low",))
    rows = _md_rows(writers.table_markdown(table))
    assert rows[0] == ["Model", "acc (%)", "seeds"] and "±" not in str(rows)
    assert "low" not in writers.table_latex(table)
    assert "low" in writers.table_csv(table) and "acc (%)_se" in writers.table_csv(table)


# --------------------------------------------------------------------------------------------
# Escaping and math mode


def test_latex_escapes_specials_and_sets_math_in_math_mode():
    frame = pd.DataFrame({"max |λ|": [0.9999], "‖h_t‖ / init": [1.2], "d_z": [0.4],
                          "E‖h_∞‖²": [8.0], "50% & #1_a": [1.0]},
                         index=pd.Index(["RotRNN, xi off", "LRU, gamma off"][:1], name="Variant"))
    tex = writers.table_latex(Table("math", "Math", "|λ| ≤ 1 for ‖h‖; 5 % of $x", frame,
                                     digits={"max |λ|": "near_one"}))
    assert tex.isascii()
    for spelt in (r"$|{\lambda}|$", r"$\lVert h_t\rVert$", "$d_z$", r"$\lVert h_{\infty}\rVert^2$",
                  r"50\% \& \#1\_a", r"RotRNN, $\xi$ off", r"\caption{Math. $|{\lambda}|$ $\leq$ "
                  r"1 for $\lVert h\rVert$; 5 \% of \$x}"):
        assert spelt in tex, spelt
    # A bare bar is a bar, not an absolute value.
    assert writers.latex_spelling("x|y") == r"x\textbar{}y"


# --------------------------------------------------------------------------------------------
# Width and height


def test_width_is_controlled_by_the_number_of_columns():
    narrow = writers.table_latex(_wide(4))  # 5 columns with the index: one column wide
    assert r"\begin{table}[tbp]" in narrow and "table*" not in narrow
    page = writers.table_latex(_wide(7))  # 8: page wide, one tabular
    assert r"\begin{table*}" in page and page.count(r"\begin{tabular}{") == 1
    split = writers.table_latex(_wide(15))  # 16: page wide, split, the index repeated
    tabulars = re.findall(r"\\begin\{tabular\}\{([lrX]+)\}", split)
    assert len(tabulars) == 3 and all(len(spec) <= writers.PAGE_TABLE_COLUMNS
                                      for spec in tabulars)
    assert split.count("Model &") == 3 and split.count(r"\caption{") == 1
    # Every tabular shrinks to its float's width if wider; headers wrap on two lines.
    assert split.count(r"\resizebox{\ifdim\width>\linewidth") == 3
    assert r"\begin{tabular}[b]{@{}r@{}}a long column\\ header 0\end{tabular}" in split
    # A long text column wraps in a tabularx of the float's width instead.
    text = Table("text", "Text", "c", pd.DataFrame({"source": ["a source " * 6], "x": [1.0]}))
    tex = writers.table_latex(text)
    assert r"\begin{tabularx}{\linewidth}{>{\raggedright\arraybackslash}Xr}" in tex
    assert "resizebox" not in tex


def test_a_long_table_continues_in_further_floats():
    tex = writers.table_latex(_wide(2, rows=90))
    assert tex.count(r"\begin{table}") == 3 and tex.count(r"\label{tab:wide}") == 1
    assert tex.count(r"\addtocounter{table}{-1}") == 2 and tex.count("(continued)") == 2
    assert max(len(re.findall(r"\\\\\n", part)) for part in tex.split(r"\end{table}")) <= (
        writers.FLOAT_ROWS + 1)


# --------------------------------------------------------------------------------------------
# The two-column paper of `make tex-check`


def test_the_log_reader_names_what_does_not_fit():
    log = "\n".join([
        f"{_texcheck._MARK} tables/a.tex",
        r"Overfull \hbox (0.5pt too wide) in alignment at lines 9--20",  # within tolerance
        f"{_texcheck._FIT} 300.0pt 240.0pt",  # shrunk to 80 %: readable
        f"{_texcheck._MARK} tables/b.tex",
        r"Overfull \hbox (12.25pt too wide) in alignment at lines 9--20",
        f"{_texcheck._FIT} 600.0pt 240.0pt",  # shrunk to 40 %
        "LaTeX Warning: Float too large for page by 44.9pt on input line 30.",
        f"{_texcheck._MARK} figures/c.pdf",
        "! Undefined control sequence.",
    ])
    assert _texcheck.problems(log) == [
        r"tables/b.tex: 12.2 pt too wide (overfull \hbox)",
        "tables/b.tex: a tabular shrunk to 40% of its width to fit (below 70%, its text is too "
        "small to read)",
        "tables/b.tex: float taller than the page by 44.9 pt",
        "figures/c.pdf: LaTeX error: Undefined control sequence.",
    ]


@pytest.mark.skipif(shutil.which("pdflatex") is None,
                    reason="pdflatex is not installed (make tex-check installs Debian's texlive)")
def test_a_wide_table_fits_the_two_column_paper(tmp_path, monkeypatch):
    report = tmp_path / "report"
    (report / "tables").mkdir(parents=True)
    for columns, rows in ((15, 50), (3, 3)):
        table = dataclasses.replace(_wide(columns, rows), name=f"wide{columns}")
        writers.write_table(table, report / "tables")
    work = tmp_path / "work"
    work.mkdir()
    found, count = _texcheck.check(report, work)
    assert (found, count) == ([], 2)
    # The same table without the writer's width control (one tabular, not fitted) is caught.
    monkeypatch.setattr(writers, "PAGE_TABLE_COLUMNS", 100)
    monkeypatch.setattr(writers, "_FIT", "{%\n")
    writers.write_table(dataclasses.replace(_wide(15, 50), name="wide15"), report / "tables")
    found, _ = _texcheck.check(report, work)
    assert found and all(p.startswith("tables/wide15.tex: ") and "too wide" in p for p in found)
