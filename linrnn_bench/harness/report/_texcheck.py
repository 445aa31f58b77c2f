"""`make tex-check`: every table and figure of a report folder in one two-column LaTeX paper,
compiled with pdflatex, failing on a LaTeX error and on a box or float that does not fit.

A table's ``.tex`` is what a paper ``\\input``s and a figure's PDF what it includes, so the
check is such a paper: ``article``, two columns of `style.COLUMN_WIDTH_IN` on a page of
`style.FULL_WIDTH_IN` (the widths the figures are drawn at), with the packages a table needs
(booktabs, graphicx, tabularx) and amsmath. Each figure goes in a one-column float when it is
no wider than the column, else in a page-wide one. pdflatex's log then says what does not fit:
an overfull box wider (or taller) than `TOLERANCE_PT`, a float taller than the page.

    python -m linrnn_bench.harness.report._texcheck reports/

Exit status 0 when everything fits, 1 when something does not (each problem one line, naming
its file), 2 when the folder holds no report or pdflatex is missing.
"""

from __future__ import annotations

import re
import shutil
import sys
import tempfile
from pathlib import Path

from ..measure.tools import run_tool
from . import style

# Points a box may stick out (a rounding of pdflatex's own, or a rule's thickness): more is a
# table or figure wider than its column or page.
TOLERANCE_PT = 1.0
_MARK = "linrnn-tex-check:"  # printed to the log before each file, to name its problems
_FIT = "linrnn-tex-fit:"  # printed with a fitted table's natural width and its float's
# A table shrunk below this to fit has text under 7 pt in a 10 pt paper: it should be split.
MIN_SCALE = 0.7

_PREAMBLE = r"""\documentclass[10pt,twocolumn]{{article}}
\usepackage[letterpaper,textwidth={full}in,columnsep={sep}in,textheight=9in]{{geometry}}
\usepackage{{amsmath}}
\usepackage{{booktabs}}
\usepackage{{graphicx}}
\usepackage{{tabularx}}
\newsavebox{{\figurebox}}
% Each table's shrink-to-fit box also says its natural width and the width it is fitted to.
\newsavebox{{\fitmeasure}}
\let\fitbox\resizebox
\renewcommand{{\resizebox}}[3]{{\sbox{{\fitmeasure}}{{#3}}%
  \typeout{{{fit} \the\wd\fitmeasure\space\the\linewidth}}%
  \fitbox{{#1}}{{#2}}{{#3}}}}
\begin{{document}}
"""

# One figure: measured in a box, set in a column float or, when wider, a page-wide one.
_FIGURE = r"""\sbox{{\figurebox}}{{\includegraphics{{{path}}}}}
\ifdim\wd\figurebox>\columnwidth
\begin{{figure*}}[tbp]\centering\usebox{{\figurebox}}\caption{{\texttt{{{label}}}}}\end{{figure*}}
\else
\begin{{figure}}[tbp]\centering\usebox{{\figurebox}}\caption{{\texttt{{{label}}}}}\end{{figure}}
\fi
"""


def document(report: Path) -> str:
    """The paper: every ``tables/*.tex`` of ``report`` input, then every figure of
    ``figures/`` (its PDF, or its PNG where it has no PDF) included, each on its own page
    (``\\clearpage``: LaTeX holds at most 18 floats waiting), paths relative to ``report``."""
    sep = style.FULL_WIDTH_IN - 2 * style.COLUMN_WIDTH_IN
    parts = [_PREAMBLE.format(full=style.FULL_WIDTH_IN, sep=f"{sep:.4g}", fit=_FIT)]
    for table in sorted((report / "tables").glob("*.tex")):
        path = table.relative_to(report).as_posix()
        parts.append(f"\\typeout{{{_MARK} {path}}}\n\\input{{{path}}}\n\\clearpage\n")
    figures = sorted((report / "figures").glob("*.pdf"))
    figures += [p for p in sorted((report / "figures").glob("*.png"))
                if not p.with_suffix(".pdf").exists()]
    for figure in sorted(figures):
        path = figure.relative_to(report).as_posix()
        parts.append(f"\\typeout{{{_MARK} {path}}}\n"
                     + _FIGURE.format(path=path, label=figure.name.replace("_", r"\_"))
                     + "\\clearpage\n")
    parts.append("\\end{document}\n")
    return "".join(parts)


_OVERFULL = re.compile(r"Overfull \\([hv])box \(([\d.]+)pt too (wide|high)\)")
_FLOAT = re.compile(r"Float too large for page by ([\d.]+)pt")


def problems(log: str, tolerance: float = TOLERANCE_PT) -> list[str]:
    """What pdflatex's ``log`` says does not fit, one line each, named by the file whose
    marker came last: an error (a line starting "! "), an overfull box beyond ``tolerance``
    points, a float taller than the page, a table shrunk below `MIN_SCALE` to fit."""
    found, where = [], "the document"
    for line in log.splitlines():
        if line.startswith(_MARK):
            where = line[len(_MARK):].strip()
        elif line.startswith(_FIT):
            natural, width = (float(w.removesuffix("pt")) for w in line[len(_FIT):].split())
            if width < MIN_SCALE * natural:
                found.append(f"{where}: a tabular shrunk to {width / natural:.0%} of its width "
                             f"to fit (below {MIN_SCALE:.0%}, its text is too small to read)")
        elif line.startswith("! "):
            found.append(f"{where}: LaTeX error: {line[2:].strip()}")
        elif (match := _OVERFULL.search(line)) and float(match[2]) > tolerance:
            found.append(f"{where}: {float(match[2]):.1f} pt too {match[3]} (overfull "
                         f"\\{match[1]}box)")
        elif match := _FLOAT.search(line):
            found.append(f"{where}: float taller than the page by {float(match[1]):.1f} pt")
    return found


def check(report: Path, work: Path) -> tuple[list[str], int]:
    """Compile `document` of ``report`` in ``work``; its problems (`problems`) and the number
    of tables and figures it holds."""
    source = document(report)
    (work / "paper.tex").write_text(source, encoding="utf-8")
    run = run_tool(["pdflatex", "-interaction=nonstopmode", "-halt-on-error",
                    f"-output-directory={work}", str(work / "paper.tex")], cwd=report)
    log_path = work / "paper.log"
    log = log_path.read_text(errors="replace") if log_path.exists() else run.stdout
    found = problems(_unwrapped(log))
    if run.returncode != 0 and not found:
        found = [f"pdflatex failed (status {run.returncode}); its log: {log_path}"]
    return found, source.count(_MARK)


def _unwrapped(log: str) -> str:
    """pdflatex wraps its log at 79 characters; a marker line is rejoined with its rest."""
    return re.sub(r"^(" + re.escape(_MARK) + r".{60,})\n(?!" + re.escape(_MARK) + ")",
                  r"\1", log, flags=re.M)


def main(argv: list[str]) -> int:
    """``_texcheck REPORT``: check the report folder REPORT (see the module's docstring)."""
    if len(argv) != 1 or not (Path(argv[0]) / "tables").is_dir():
        print(f"usage: python -m linrnn_bench.harness.report._texcheck REPORT, where REPORT is "
              f"a report folder (holding tables/); got {argv}", file=sys.stderr)
        return 2
    if shutil.which("pdflatex") is None:
        print("pdflatex is not installed: on Debian, apt-get install texlive-latex-base "
              "texlive-latex-recommended texlive-latex-extra", file=sys.stderr)
        return 2
    report = Path(argv[0]).resolve()
    with tempfile.TemporaryDirectory(prefix="tex-check-") as work:
        found, count = check(report, Path(work))
        kept = None
        if found:  # the document and its log outlive the check, to be read
            kept = Path(tempfile.mkdtemp(prefix="tex-check-failed-"))
            for name in ("paper.tex", "paper.log"):
                if (Path(work) / name).exists():
                    shutil.copy(Path(work) / name, kept / name)
    for line in found:
        print(line)
    print(f"{count} tables and figures of {report} in one two-column paper: "
          f"{len(found)} problem(s)" + (f"; the document and its log: {kept}" if kept else ""))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
