"""The report writer: every format written, byte-identical renders, Missing statements, mean ± se.

The store is synthetic (rows written with `Store.record`), so these tests need no training and
check the writer and the accuracy section against numbers computed by hand.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
from pathlib import Path

import pandas as pd
import pytest

from linrnn_bench.harness.report import MARKER, README_TEXT, ReportError, ReportIncomplete, Section, render
from linrnn_bench.harness.report import published, selection, writers, style
from linrnn_bench.harness.studies.accuracy import report as accuracy
from linrnn_bench.harness.report.artifacts import Figure, Table
from linrnn_bench.harness.store import Store
from helpers import (SYNTHETIC_ACCURACY, SYNTHETIC_PROVENANCE, assert_figure_data,
                     record_synthetic_accuracy)

ROOT = Path(__file__).resolve().parent.parent

@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store(tmp_path / "store.sqlite")
    record_synthetic_accuracy(s)
    return s


def _digests(folder: Path) -> dict[str, str]:
    return {
        p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def _check_latex(tex: str, name: str) -> None:
    """ASCII only, braces balanced (escaped ones aside), environments closed in order, and a
    caption and label in a table float, one column or page wide (`make tex-check` compiles
    them with pdflatex)."""
    assert tex.isascii(), (name, [c for c in tex if not c.isascii()])
    depth = 0
    for match in re.finditer(r"\\.|[{}]", tex):
        token = match.group()
        depth += {"{": 1, "}": -1}.get(token, 0)
        assert depth >= 0, name
    assert depth == 0, name
    stack = []
    for kind, env in re.findall(r"\\(begin|end)\{(\w+\*?)\}", tex):
        if kind == "begin":
            stack.append(env)
        else:
            assert stack and stack.pop() == env, name
    assert not stack, name
    assert tex.count(r"\label{tab:") == 1 and re.search(r"\\begin\{table\*?\}", tex)
    assert tex.count(r"\caption{") == tex.count(r"\begin{table")


def test_latex_is_ascii_whatever_the_text():
    frame = pd.DataFrame({"Δ (pp)": [-1.5, 0.0]}, index=pd.Index(["LRU − RotRNN", "λ ≤ 1"]))
    tex = writers.table_latex(Table("t", "Differences", "95 % interval, n = 5 ± s.e.", frame))
    _check_latex(tex, "t")
    assert r"LRU $-$ RotRNN" in tex and r"$\lambda$ $\leq$ 1" in tex and r"$\Delta$ (pp)" in tex
    assert r"\caption{Differences. 95 \% interval, n = 5 $\pm$ s.e.}" in tex
    # Styler's escaping covers LaTeX's special characters; the rest is spelt or refused.
    assert writers.latex_spelling("< 0.001 | p") == r"\textless{} 0.001 \textbar{} p"
    with pytest.raises(ValueError, match="No LaTeX spelling for '\u2603'"):
        writers.table_latex(Table("t", "Snow", "c", pd.DataFrame({"a": ["\u2603"]})))


def test_render_writes_every_format_and_is_byte_identical(store, tmp_path):
    out = tmp_path / "reports"
    written = render(store, out)
    files = {p.relative_to(out).as_posix() for p in written}
    for stem in ("accuracy_test", "accuracy_detail", "published_lra_accuracy"):
        assert {f"tables/{stem}{s}" for s in writers.TABLE_SUFFIXES} <= files
    for stem in ("accuracy_by_task", "accuracy_curves"):
        assert {f"figures/{stem}{s}" for s in writers.FIGURE_SUFFIXES} <= files
    assert {"index.md", "provenance.json", "README.md"} <= files
    assert (out / "figures/accuracy_by_task.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / "figures/accuracy_by_task.pdf").read_bytes()[:5] == b"%PDF-"
    assert r"\toprule" in (out / "tables/accuracy_test.tex").read_text()
    for tex in out.glob("tables/*.tex"):
        _check_latex(tex.read_text(encoding="utf-8"), tex.name)
    first = _digests(out)

    # A file an earlier render wrote (its manifest names it) and this one does not is gone
    # after the next render; a user's files in the folder are kept, and the report's bytes
    # repeat, with the figures drawn in worker processes from their pickles this time. (A
    # manifest naming anything else is refused: tests/test_report_folder.py.)
    manifest = json.loads((out / MARKER).read_text())
    assert set(manifest["files"]) == set(first) - {MARKER}
    (out / "figures" / "stale.png").write_bytes(b"old")
    manifest["files"] += ["figures/stale.png"]
    (out / MARKER).write_text(json.dumps(manifest))
    (out / "notes.txt").write_text("mine")
    (out / "figures" / "accuracy_by_task_annotated.png").write_bytes(b"mine too")
    # So is the temporary folder of a render that was killed half-way.
    leftover = tmp_path / ".reports.killed.tmp"
    leftover.mkdir()
    (leftover / MARKER).write_text("")
    render(store, out, workers=2)
    user_files = {"notes.txt", "figures/accuracy_by_task_annotated.png"}
    assert _digests(out) == first | {f: _digests(out)[f] for f in user_files}
    assert (out / "notes.txt").read_text() == "mine"
    assert not (out / "figures" / "stale.png").exists()
    assert not leftover.exists()
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".reports")]

    index = (out / "index.md").read_text()
    assert "![Test metric by task](figures/accuracy_by_task.png)" in index
    assert "preset `custom`" in index  # synthetic runs belong to no preset's grid
    assert "3 seeds (0, 1, 2)" in index and "`0123456789ab`" in index
    # The published numbers sit in their own section, after ours, and say they are published.
    assert index.index("## Accuracy") < index.index("## Published numbers (not ours)")
    assert "| S5 " in index and "PUBLISHED" in index
    provenance = json.loads((out / "provenance.json").read_text())
    # Each name begins with its section's key, which `report --run --only` checks before runs.
    assert all(name.startswith(f"{record['section']}_")
               for name, record in provenance["artifacts"].items())
    entry = provenance["artifacts"]["accuracy_test"]
    assert entry["files"]["tables/accuracy_test.csv"] == first["tables/accuracy_test.csv"]
    assert entry["provenance"]["commits"] == [{"commit": SYNTHETIC_PROVENANCE["git_commit"], "dirty": False}]
    # The process settings that change speed and memory are cited with the numbers.
    assert entry["provenance"]["settings"] == [SYNTHETIC_PROVENANCE["settings"]]
    cited = "GLIBC_TUNABLES=glibc.malloc.mmap_max=0, OPENBLAS_NUM_THREADS=1, XLA_FLAGS=(unset)"
    assert cited in index
    assert provenance["artifacts"]["published_lra_accuracy"]["provenance"]["published"] is True


def test_study_without_rows_is_stated_missing(tmp_path):
    out = tmp_path / "reports"
    out.mkdir()  # as in a fresh clone: only the tracked note
    (out / "README.md").write_text(README_TEXT)
    render(Store(tmp_path / "empty.sqlite"), out)
    index = (out / "index.md").read_text()
    assert "## Not produced" in index
    statement = "**Accuracy: Test accuracy (%) by task, one shared recipe** (`accuracy_test`): no runs of the accuracy"
    assert statement in index
    assert "> **Missing** (`accuracy_by_task`)" in index
    assert not (out / "figures" / "accuracy_by_task.png").exists()
    # Published numbers never depend on the store.
    assert (out / "tables" / "published_lra_accuracy.csv").exists()


def test_a_fresh_clones_reports_folder_with_the_shipped_reference_takes_the_report(tmp_path):
    # A fresh clone's reports/: the tracked note and the shipped reference (reports/cpu-full,
    # a report folder with its own marker). The render writes beside the reference and never
    # touches it.
    out = tmp_path / "reports"
    reference = out / "cpu-full"
    (reference / "tables").mkdir(parents=True)
    (out / "README.md").write_text(README_TEXT)
    (reference / MARKER).write_text(json.dumps({"files": ["tables/accuracy_test.csv"]}))
    (reference / "tables" / "accuracy_test.csv").write_text("the reference's")
    render(Store(tmp_path / "empty.sqlite"), out)
    assert (out / "index.md").exists()
    assert (reference / "tables" / "accuracy_test.csv").read_text() == "the reference's"
    # A subfolder without a marker of its own is still the user's: refused, nothing written.
    other = tmp_path / "other"
    (other / "mine").mkdir(parents=True)
    (other / "README.md").write_text(README_TEXT)
    with pytest.raises(ReportError, match="mine"):
        render(Store(tmp_path / "empty.sqlite"), other)
    assert sorted(p.name for p in other.iterdir()) == ["README.md", "mine"]


def _register_toy_studies(monkeypatch) -> None:
    """Register studies whose sections are missing or broken, each a module of its own."""
    import sys
    import types

    from linrnn_bench.harness import studies
    from linrnn_bench.harness.studies import PRESET_NAMES, Study

    def section(store):
        raise RuntimeError("boom")

    sections = {"nosuchstudy": None, "brokenstudy": "SECTION", "untypedstudy": "section"}
    for name, attribute in sections.items():
        module = types.ModuleType(f"_toy_{name}")
        module.SECTION = Section("brokenstudy", "Broken", "A section that raises.", section)
        module.section = lambda store: []  # not a `Section`
        module.STUDY = Study(name, "toy", dict.fromkeys(PRESET_NAMES), lambda c: [], lambda s: [],
                             section=attribute and f"_toy_{name}:{attribute}")
        monkeypatch.setitem(sys.modules, module.__name__, module)
        monkeypatch.setitem(studies._REGISTRY, name, module.__name__)
    monkeypatch.setitem(studies._REGISTRY, "gonestudy", "_toy_gonestudy_not_a_module")
    monkeypatch.setattr(studies, "names", lambda: ["accuracy", *sections, "gonestudy"])


def test_missing_or_broken_section_is_stated(tmp_path, monkeypatch):
    _register_toy_studies(monkeypatch)
    out = tmp_path / "reports"
    with pytest.raises(ReportIncomplete) as raised:
        render(Store(tmp_path / "s.sqlite"), out)
    # The report is in place; the exception names the broken sections, not the one merely
    # without a section.
    assert sorted(raised.value.failures) == ["brokenstudy", "gonestudy", "untypedstudy"]
    assert out / "index.md" in raised.value.written
    index = (out / "index.md").read_text()
    assert "its registration declares no report section (`Study.section`) yet" in index
    assert "- [Nosuchstudy](#nosuchstudy): not produced" in index
    assert "**Broken** (whole section): its section raised RuntimeError: boom" in index
    assert ("its report section `_toy_untypedstudy:section` is not a `Section('untypedstudy', "
            "title, intro, build)`" in index)
    assert ("**Gonestudy** (whole section): its report section could not be imported "
            "(ModuleNotFoundError: No module named '_toy_gonestudy_not_a_module')" in index)


def test_every_study_has_a_typed_section():
    from linrnn_bench.harness import studies

    for name in studies.names():
        section = studies.get(name).report_section()
        assert isinstance(section, Section) and section.study == name
        assert section.title and section.intro and callable(section.build)


def _markdown_rows(markdown: str) -> list[list[str]]:
    lines = [ln for ln in markdown.splitlines() if ln.startswith("|") and "---" not in ln]
    return [[c.strip() for c in ln.strip("|").split("|")] for ln in lines]


def test_mean_se_and_bold_best_by_hand(store):
    rows, runs = store.read("accuracy"), store.runs("accuracy")
    final = selection.with_keys(rows[rows["kind"] == "final"])
    cells = accuracy.summarise(final, selection.with_keys(runs)).set_index(["model", "task"])
    for (model, task), accs in SYNTHETIC_ACCURACY.items():
        assert cells.at[(model, task), "test"] == pytest.approx(100 * sum(accs) / 3)
        assert cells.at[(model, task), "n"] == 3
    assert cells.at[("lru", "listops"), "test_se"] == pytest.approx(10 / math.sqrt(3))
    assert cells.at[("rotrnn", "listops"), "test_se"] == pytest.approx(1.0)
    assert cells.at[("lru", "digits"), "test_se"] == pytest.approx(2 / math.sqrt(3))
    assert cells.at[("lru", "listops"), "diverged"] == 1
    assert cells.at[("rotrnn", "listops"), "diverged"] == 0
    assert cells.at[("lru", "adding"), "regression"]
    assert cells.at[("lru", "adding"), "loss"] == pytest.approx(0.30)
    assert cells.at[("lru", "adding"), "loss_se"] == pytest.approx(0.05)  # s = 0.0707, n = 2

    table = next(a for a in accuracy.build(store) if a.name == "accuracy_test")
    rows_md = _markdown_rows(writers.table_markdown(table))
    # Columns are tasks as papers name them (from the task registrations); the best mean per
    # task is bold, the other is not.
    assert rows_md[0] == ["Model", "Sequential digits", "ListOps"]
    assert rows_md[1] == ["RotRNN", "85.0 ± 2.9", "**46.0 ± 1.0**"]
    assert rows_md[2] == ["LRU", "**92.0 ± 1.2**", "40.0 ± 5.8"]
    latex = writers.table_latex(table)
    assert r"LRU & \textbf{92.0 $\pm$ 1.2} & 40.0 $\pm$ 5.8 \\" in latex
    csv = pd.read_csv(pd.io.common.StringIO(writers.table_csv(table)))
    assert list(csv.columns) == ["Model", "Sequential digits", "Sequential digits_se", "ListOps",
                                 "ListOps_se"]
    assert csv.loc[csv["Model"] == "LRU", "ListOps_se"].item() == pytest.approx(10 / math.sqrt(3))


def test_table_writer_edge_cases():
    frame = pd.DataFrame(
        {"a": [1.0, 1.0, float("nan")], "b": [3.0, 2.0, 1e-6], "c": [2.0, 2.0, 1.0],
         "text": ["x|y", "z", "w"]},
        index=pd.Index(["p_1", "q", "r"], name="row"),
    )
    table = Table("edge", "Edge & cases", "caption", frame,
                  best={"a": "max", "b": "min", "c": "max"})
    mask = writers.best_mask(frame, table.best)
    assert mask["a"].tolist() == [False, False, False]  # all equal: no best
    assert mask["b"].tolist() == [False, False, True]
    assert mask["c"].tolist() == [True, True, False]  # ties for best are both bold
    markdown = writers.table_markdown(table)
    # b's 1e-6 cannot show in 2 (+2) decimals: the whole column is scientific, one format.
    assert r"x\|y" in markdown and "**1.00e-06**" in markdown and "2.00e+00" in markdown
    assert "–" in markdown
    latex = writers.table_latex(table)
    assert r"p\_1" in latex and r"% Edge \& cases" in latex and r"x\textbar{}y" in latex
    with pytest.raises(ValueError, match="lacks"):
        writers.best_mask(frame, {"nope": "max"})
    with pytest.raises(ValueError, match="'max' or 'min'"):
        writers.best_mask(frame, {"a": "largest"})
    per_column = Table("edge", "t", "caption", frame[["a", "b"]], digits={"b": 7})
    assert "0.0000010" in writers.table_markdown(per_column)  # b: 7 decimals; a: the default 2
    assert "1.00" in writers.table_markdown(per_column)
    with pytest.raises(ValueError, match="unknown columns"):
        writers.table_csv(Table("edge", "t", "c", frame, digits={"nope": 1}))
    with pytest.raises(ValueError, match="not a valid file stem"):
        writers.check_name("Bad Name")


def test_number_formats_per_column_and_per_cell():
    f = writers.format_value
    # Fixed decimals: an exact zero, and the round-off of a zero, are 0; no signed zero.
    assert f(0.0, 1) == "0" and f(4.7e-15, 2) == "0" and f(-0.01, 1, error=True) == "0.0"
    assert f(-0.01, 1) == "-1.0e-02"  # a small non-zero is not shown as 0.0
    assert f(61.25, 1) == "61.2" and f(3, 1, integer=True) == "3"
    # MSE: scientific, three significant digits; p-values as papers print them.
    assert f(0.0012345, "sci") == "1.23e-03" and f(0.0, "sci") == "0"
    assert [f(p, "p") for p in (0.0312, 0.25, 1.0, 0.0004)] == ["0.031", "0.25", "1", "< 0.001"]
    assert f(0.003, "g") == "0.003" and f(123456.0, "g") == "123000" and f(2e-5, "g") == "2.0e-05"
    assert f(0.99993, "near_one") == "0.999930" and f(0.95, "near_one") == "0.950"
    assert f(1.0, "near_one") == "1" and f(float("nan"), "sci") == "–"
    with pytest.raises(ValueError, match="Unknown number format 'pct'"):
        f(1.0, "pct")
    # A column holding accuracy in one row and MSE in another: per-cell formats.
    frame = pd.DataFrame({"diff": [1.234, 0.00123]}, index=pd.Index(["acc", "mse"], name="t"))
    table = Table("cells", "Cells", "caption", frame, digits={"diff": 1},
                  cell_formats=pd.DataFrame({"diff": [None, "sci"]}, index=frame.index))
    assert _markdown_rows(writers.table_markdown(table))[1:] == [["acc", "1.2"],
                                                                  ["mse", "1.23e-03"]]
    with pytest.raises(ValueError, match="digits must be an integer >= 0 or one of"):
        writers.table_markdown(Table("bad", "Bad", "c", frame, digits="percent"))


def test_refuses_to_replace_a_folder_it_did_not_write(store, tmp_path):
    out = tmp_path / "precious"
    out.mkdir()
    (out / "thesis.tex").write_text("do not delete")
    with pytest.raises(ReportError, match="Refusing to write into"):
        render(store, out)
    assert (out / "thesis.tex").read_text() == "do not delete"
    (out / "thesis.tex").unlink()
    (out / "README.md").write_text("my own notes")  # a README that is not the generated note
    with pytest.raises(ReportError, match="Refusing to write into"):
        render(store, out)
    assert (out / "README.md").read_text() == "my own notes"
    assert not any(p.name.endswith(".tmp") for p in tmp_path.iterdir())


def test_never_writes_into_the_store_folder_or_over_a_users_file(store, tmp_path):
    # The store inside the report folder (or the folder being the store's): refused before
    # anything is written, the store intact.
    for out in (store.path.parent, tmp_path.parent):
        before = store.path.read_bytes()
        with pytest.raises(ReportError, match="contains the results store"):
            render(store, out)
        assert store.path.read_bytes() == before
    # An earlier report folder into which the user later moved the store.
    out = tmp_path / "rep"
    render(store, out)
    moved = out / "store.sqlite"
    moved.write_bytes(store.path.read_bytes())
    with pytest.raises(ReportError, match="contains the results store"):
        render(Store(moved), out)
    assert moved.read_bytes() == store.path.read_bytes()
    # A file the user put where the new report would write one: refused, the file and the
    # previous report unchanged.
    (out / "tables" / "accuracy_test.csv").unlink()
    manifest = json.loads((out / MARKER).read_text())
    manifest["files"].remove("tables/accuracy_test.csv")
    (out / MARKER).write_text(json.dumps(manifest))
    (out / "tables" / "accuracy_test.csv").write_text("my own table")
    before = _digests(out)
    with pytest.raises(ReportError, match="accuracy_test.csv, which an earlier render did not"):
        render(store, out)
    assert _digests(out) == before
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_the_command_line_refuses_an_out_holding_the_store_before_any_run(store, tmp_path,
                                                                        capsys):
    from linrnn_bench.harness.cli import main

    rep = tmp_path / "rep"
    render(store, rep)
    moved = rep / "store.sqlite"
    moved.write_bytes(store.path.read_bytes())
    for argv in (["report"], ["report", "--run", "--preset", "smoke"]):
        assert main([*argv, "--store", str(moved), "--out", str(rep)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "contains the results store" in err[0]
        assert moved.read_bytes() == store.path.read_bytes()


def test_one_artifact_regenerated_alone_is_byte_identical(store, tmp_path, capsys):
    from linrnn_bench.harness.cli import main

    full = tmp_path / "full"
    render(store, full)
    provenance = json.loads((full / "provenance.json").read_text())
    hashes = provenance["artifacts"]["accuracy_test"]["run_ids"]
    runs = store.runs("accuracy")
    runs = runs[runs["status"] == "done"]  # the table's runs: its diverged one has no test value
    assert hashes == dict(zip(runs["run_id"], runs["config_hash"]))
    # Alone into a new folder, and into the full report (which keeps its other files).
    alone = tmp_path / "alone"
    assert main(["figure", "accuracy_by_task", "accuracy_curves", "accuracy_test", "--store",
                 str(store.path), "--out", str(alone)]) == 0
    files = _digests(alone)
    assert {f for f in files if f != MARKER} == {
        f"{d}/{n}{s}" for d, n, suffixes in (
            ("figures", "accuracy_by_task", (*writers.FIGURE_SUFFIXES, ".csv")),
            ("figures", "accuracy_curves", (*writers.FIGURE_SUFFIXES, ".csv")),
            ("tables", "accuracy_test", writers.TABLE_SUFFIXES)) for s in suffixes}
    full_digests = _digests(full)
    assert all(files[f] == full_digests[f] for f in files if f != MARKER)
    for stale in ("accuracy_by_task.png", "accuracy_curves.csv"):
        (full / "figures" / stale).write_bytes(b"stale")
    render(store, full, only=("accuracy_by_task", "accuracy_curves"))
    assert _digests(full) == full_digests
    with pytest.raises(ReportError, match="No table or figure named 'nope'.*accepted: .*accuracy_test"):
        render(store, alone, only=("nope",))


def test_every_figure_carries_the_numbers_it_draws(store, tmp_path):
    """Each figure's plotted numbers are a CSV beside it, listed in the provenance with its
    images, and are the numbers drawn (`helpers.assert_figure_data`)."""
    artifacts = accuracy.build(store)
    assert_figure_data(artifacts)
    figures = {a.name: a for a in artifacts if isinstance(a, Figure)}
    assert {"accuracy_by_task", "accuracy_curves", "accuracy_cost"} <= set(figures)
    out = tmp_path / "reports"
    render(store, out)
    provenance = json.loads((out / "provenance.json").read_text())["artifacts"]
    drawn = sorted(p.stem for p in (out / "figures").glob("*.png"))
    assert drawn and drawn == sorted(p.stem for p in (out / "figures").glob("*.csv"))
    for name in drawn:
        assert f"figures/{name}.csv" in provenance[name]["files"], name
    # The CSV holds the frame at full precision: the curves' means, step by step, by hand.
    curves = pd.read_csv(out / "figures" / "accuracy_curves.csv")
    assert list(curves.columns) == ["task", "model", "metric", "step", "mean", "ci95_low",
                                    "ci95_high", "n"]
    at = curves.set_index(["task", "model", "step"])
    for (model, task), accs in SYNTHETIC_ACCURACY.items():
        label = style.task_label(task)
        for step, fraction in ((10, 0.5), (20, 0.9), (30, 1.0)):
            row = at.loc[(label, style.model_label(model), step)]
            assert row["mean"] == pytest.approx(100 * fraction * sum(accs) / len(accs))
            assert row["n"] == len(accs) and row["ci95_low"] < row["mean"] < row["ci95_high"]
    cost = figures["accuracy_cost"].data
    assert set(cost["mark"]) == {"run", "mean"}
    assert cost[cost["mark"] == "run"]["run_id"].str.startswith("acc-").all()


def test_a_report_folder_of_an_earlier_version_is_replaced_by_its_provenance(store, tmp_path):
    # Before manifests the marker was one line; the files it owns are those its provenance.json
    # lists, and a user's file there survives.
    out = tmp_path / "reports"
    first = render(store, out)
    (out / MARKER).write_text("written by harness.report.render\n")
    (out / "notes.txt").write_text("mine")
    assert sorted(render(store, out)) == sorted(first)
    assert (out / "notes.txt").read_text() == "mine"
    assert json.loads((out / MARKER).read_text())["files"]


def test_readme_note_matches_and_published_numbers_are_kept_apart():
    assert (ROOT / "reports" / "README.md").read_text() == README_TEXT
    assert MARKER.startswith(".")
    frame = published.accuracy_frame()
    assert frame.at["S5", "ListOps"] == "62.15" and frame.at["LRU", "ListOps"] == "60.2"
    assert frame.at["S4D-Lin", "Path-X"] == published.FAILS
    with pytest.raises(ValueError, match="neither a number"):
        published.PublishedRow("X", ("1",) * 5 + ("6o.2",), "nowhere")


def test_style_one_colour_per_model():
    colours = [style.model_colour(m) for m in style.model_order()]
    assert len(set(colours)) == len(colours)
    # Our four keep the colours and markers they had before the registry assigned them.
    assert [style.model_colour(m) for m in ("rotrnn", "lru", "s4d", "s5")] == [
        "#0072B2", "#D55E00", "#009E73", "#CC79A7"
    ]
    assert [style.model_marker(m) for m in ("rotrnn", "lru", "s4d", "s5")] == ["o", "s", "^", "D"]
    assert style.model_label("rotrnn") == "RotRNN" and style.model_label("zeta") == "zeta"
    ordered = style.order_models(["s5", "lru", "s5", "zeta", "rotrnn"])
    assert ordered == ["rotrnn", "lru", "s5", "zeta"]
    assert style.model_palette(["s4d"]) == {"s4d": style.model_colour("s4d")}
    with pytest.raises(ValueError, match="'column' or 'full'"):
        style.figsize("wide")


def test_depth_sweep_and_diverged_cells(tmp_path):
    store = Store(tmp_path / "s.sqlite")
    for depth, accs in ((1, (0.5, 0.7)), (4, (0.8, 0.9))):
        for seed, acc in enumerate(accs):
            store.record(
                run_id=f"d{depth}-{seed}", study="accuracy", status="done",
                config={"network": {"layer": "lru", "depth": depth}, "task": "digits",
                        "seed": seed},
                config_hash=f"d{depth}-{seed}", seed=seed, provenance=SYNTHETIC_PROVENANCE,
                rows=[{"kind": "final", "val_accuracy": acc, "test_accuracy": acc,
                       "selection": "accuracy", "params": 10 * depth, "steps": 5}],
            )
    store.record(  # a model whose only run diverged keeps its line, as a dash
        run_id="s5-div", study="accuracy", status="diverged",
        config={"network": {"layer": "s5", "depth": 1}, "task": "digits", "seed": 0},
        config_hash="s5-div", seed=0, provenance=SYNTHETIC_PROVENANCE, rows=[], error="nan",
    )
    artifacts = {a.name: a for a in accuracy.build(store)}
    table = artifacts["accuracy_test"]
    assert list(table.frame.index) == ["LRU (depth 1)", "LRU (depth 4)", "S5 (depth 1)"]
    assert math.isnan(table.frame.at["S5 (depth 1)", "Sequential digits"])
    assert "– marks a cell without a finished run" in table.caption
    assert ("Nothing drawn for S5 (depth 1) on Sequential digits"
            in artifacts["accuracy_by_task"].caption)
    detail = artifacts["accuracy_detail"].frame.xs("one recipe", level="configuration")
    assert detail.at[("Sequential digits", "S5 (depth 1)"), "diverged"] == 1
    assert detail.at[("Sequential digits", "S5 (depth 1)"), "n seeds"] == 0
    assert table.frame["Sequential digits"].tolist()[:2] == pytest.approx([60.0, 85.0])
    assert table.stderr["Sequential digits"].tolist()[:2] == pytest.approx([10.0, 5.0])


def test_grid_runs_not_yet_made_keep_their_cells(tmp_path):
    from linrnn_bench.harness import studies

    study = studies.get("accuracy")
    specs = study.grid(study.config("smoke"))
    done = specs[0]
    store = Store(tmp_path / "s.sqlite")
    store.record(
        run_id=study.run_id(done), study="accuracy", status="done",
        config=json.loads(json.dumps(dataclasses.asdict(done))), config_hash="x",
        seed=done.seed, provenance=SYNTHETIC_PROVENANCE,
        rows=[{"kind": "final", "val_accuracy": 0.5, "test_accuracy": 0.4,
               "selection": "accuracy", "params": 1, "steps": 1}],
    )
    artifacts = {a.name: a for a in accuracy.build(store)}
    detail = artifacts["accuracy_detail"].frame.xs("one recipe", level="configuration")
    assert detail["n seeds"].sum() == 1
    assert detail["not run"].sum() == len(specs) - 1  # every other run of the smoke grid
    assert "preset smoke" in artifacts["accuracy_test"].caption.lower()


@pytest.mark.parametrize("recorded, counts", [
    ({"xla_cpu_threads": (1, 2, 2)}, [1, 2]),  # local and processes runs on one machine
    ({"cpu_affinity": (1, 2, 1)}, [1, 2]),  # runs made before the count was recorded
    ({"xla_cpu_threads": (2, 2, 2), "cpu_affinity": (1, 1, 1)}, None),  # one count: as before
])
def test_the_provenance_says_when_runs_differ_in_their_thread_count(recorded, counts, tmp_path):
    # A run's numbers depend on the threads XLA's CPU backend divides its sums among
    # (docs/presets.md): a study whose runs were made at different counts is shown as mixed.
    from linrnn_bench.harness.report import origins

    store = Store(tmp_path / "store.sqlite")
    for seed in range(3):
        store.record(
            run_id=f"acc-lru-listops-{seed}", study="accuracy", status="done",
            config={"network": {"layer": "lru"}, "task": "listops", "seed": seed},
            config_hash=f"h-{seed}", seed=seed, rows=[{"kind": "final", "test_accuracy": 0.5}],
            provenance={**SYNTHETIC_PROVENANCE, **{k: v[seed] for k, v in recorded.items()}})
    summary = origins.summarise(store, "accuracy")
    text = origins.describe(summary)
    if counts is None:
        assert "xla_cpu_threads" not in summary and "thread" not in text
        return
    assert summary["xla_cpu_threads"] == counts
    assert ("The runs were made at XLA CPU thread counts of 1 and 2, which changes their "
            "numbers at float round-off.") in text
