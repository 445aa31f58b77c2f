"""The report folder: nothing lost through it, every refusal before the work, no partial write.

A manifest (``.linrnn-bench-report``) is data a user can edit: it never makes the render delete
or replace a file it did not write. A folder that cannot take the report, and an ``--only`` name
no report has, are refused before any study runs. A render that fails leaves the previous
report as it was, or says exactly what it replaced; renders into one folder at once each leave
a whole report; a full disk is one line. The store is the small one of `helpers.small_store`
(its report is the published tables and the index, drawn in a second or two).
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
from pathlib import Path

import pytest

from linrnn_bench.harness import report
from linrnn_bench.harness.cli import main
from linrnn_bench.harness.report import MARKER, ReportError, writers, render
from linrnn_bench.harness.store import Store
from helpers import small_store


def _tree(root: Path) -> dict[str, str]:
    """Every entry under ``root`` without following a link: a file's bytes, a link's target
    (the store's files aside: SQLite makes and removes its own)."""
    out = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + [f for f in files if ".sqlite" not in f]:
            path = Path(folder) / name
            key = path.relative_to(root).as_posix()
            if path.is_symlink():
                out[key] = f"-> {os.readlink(path)}"
            elif path.is_file():
                out[key] = path.read_bytes().decode("latin-1")
            else:
                out[key] = "folder"
    return out


def _earlier_report(root: Path, entries: list[str]) -> Path:
    """A folder holding an earlier report whose manifest also names ``entries``."""
    out = root / "rep"
    render(small_store(root), out)
    manifest = json.loads((out / MARKER).read_text())
    manifest["files"] += entries
    (out / MARKER).write_text(json.dumps(manifest))
    return out


def _one_error_line(capsys) -> str:
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), captured.err
    assert "Traceback" not in captured.err + captured.out
    return lines[0]


# --------------------------------------------------------------------------------------------
# The manifest names only what the render wrote.


def _users_notes(out: Path) -> str:
    (out / "notes.txt").write_text("the user's notes")
    return "notes.txt"


def _through_a_link(out: Path) -> str:
    outside = out.parent / "outside"
    outside.mkdir()
    (outside / "data.txt").write_text("outside --out")
    (out / "link").symlink_to(outside, target_is_directory=True)
    return "link/data.txt"


def _tables_link(out: Path) -> str:
    outside = out.parent / "outside"
    (out / "tables").rename(outside)
    (out / "tables").symlink_to(outside, target_is_directory=True)
    return "tables/published_lra_accuracy.csv"


def _file_link(out: Path) -> str:
    (out.parent / "mine.png").write_bytes(b"the user's figure")
    (out / "figures").mkdir()
    (out / "figures" / "mine.png").symlink_to(out.parent / "mine.png")
    return "figures/mine.png"


def _parent(out: Path) -> str:
    (out.parent / "outside.txt").write_text("outside --out")
    return "../outside.txt"


def _absolute(out: Path) -> str:
    (out.parent / "outside.txt").write_text("outside --out")
    return str(out.parent / "outside.txt")


def _other_folder(out: Path) -> str:
    (out / "retired").mkdir()
    (out / "retired" / "table.csv").write_text("a user's table")
    return "retired/table.csv"


def _wrong_suffix(out: Path) -> str:
    (out / "tables" / "scan.png").write_bytes(b"a user's scan")
    return "tables/scan.png"


def _a_folder(out: Path) -> str:
    (out / "figures").mkdir()
    (out / "figures" / "drafts.png").mkdir()
    (out / "figures" / "drafts.png" / "v1.png").write_bytes(b"a user's draft")
    return "figures/drafts.png"


MANIFEST_CASES = {
    "users-file": (_users_notes, "not a file the report writes"),
    "through-a-symlink": (_through_a_link, "symbolic link"),
    "folder-is-a-symlink": (_tables_link, "symbolic link"),
    "file-is-a-symlink": (_file_link, "symbolic link"),
    "parent": (_parent, "not a file the report writes"),
    "absolute": (_absolute, "not a file the report writes"),
    "other-folder": (_other_folder, "not a file the report writes"),
    "wrong-suffix": (_wrong_suffix, "not a file the report writes"),
    "a-folder": (_a_folder, "not a regular file"),
}


@pytest.mark.parametrize("make, words", MANIFEST_CASES.values(), ids=MANIFEST_CASES.keys())
def test_a_manifest_never_deletes_what_the_render_did_not_write(make, words, tmp_path):
    out = _earlier_report(tmp_path, [])
    entry = make(out)
    manifest = json.loads((out / MARKER).read_text())
    (out / MARKER).write_text(json.dumps({**manifest, "files": manifest["files"] + [entry]}))
    before = _tree(tmp_path)
    with pytest.raises(ReportError) as raised:
        render(tmp_path / "good.sqlite", out)
    message = str(raised.value)
    assert entry in message and words in message and MARKER in message, message
    assert _tree(tmp_path) == before


@pytest.mark.parametrize("make", [_users_notes, _through_a_link], ids=["notes", "link"])
def test_the_command_line_refuses_such_a_manifest_and_keeps_the_files(make, tmp_path, capsys):
    out = _earlier_report(tmp_path, [])
    entry = make(out)
    manifest = json.loads((out / MARKER).read_text())
    (out / MARKER).write_text(json.dumps({**manifest, "files": manifest["files"] + [entry]}))
    before = _tree(tmp_path)
    assert main(["report", "--store", str(tmp_path / "good.sqlite"), "--out", str(out)]) == 2
    assert entry in _one_error_line(capsys)
    assert _tree(tmp_path) == before


# --------------------------------------------------------------------------------------------
# Every refusal before the work.


def _dangling_out(tmp: Path) -> Path:
    (tmp / "gone").symlink_to(tmp / "nowhere", target_is_directory=True)
    return tmp / "gone"


def _tables_file_out(tmp: Path) -> Path:
    out = _earlier_report(tmp, [])
    for path in (out / "tables").iterdir():
        path.unlink()
    (out / "tables").rmdir()
    (out / "tables").write_text("a file in the way")
    return out


EARLY_CASES = {
    "only-unknown": (lambda tmp: tmp / "new", ["--only", "nosuch"], "'nosuch'"),
    "out-dangling": (_dangling_out, [], "does not exist"),
    "tables-is-a-file": (_tables_file_out, [], "tables is a file"),
}


@pytest.mark.parametrize("out, extra, words", EARLY_CASES.values(), ids=EARLY_CASES.keys())
def test_report_run_refuses_before_any_study_runs(out, extra, words, tmp_path, capsys,
                                                  monkeypatch):
    monkeypatch.setenv("LINRNN_CHECKPOINTS", str(tmp_path / "checkpoints"))
    store = small_store(tmp_path)
    out = out(tmp_path)
    before = _tree(tmp_path)
    argv = ["report", "--run", "--preset", "smoke", "--store", str(store), "--out", str(out)]
    assert main([*argv, *extra]) == 2
    assert words in _one_error_line(capsys)
    assert Store(store).recorded() == {"r0": "done"}  # no study ran
    assert _tree(tmp_path) == before


def test_an_out_on_another_filesystem_is_refused_first(tmp_path, monkeypatch, capsys):
    # --out a mount point: the render is drawn beside it and renamed in, which one filesystem
    # allows; found before the work, not by the rename after it.
    out = _earlier_report(tmp_path, [])
    real = report._filesystem
    monkeypatch.setattr(report, "_filesystem",
                        lambda path: real(path) + (1 if Path(path) == out.resolve() else 0))
    before = _tree(tmp_path)
    with pytest.raises(ReportError, match="another filesystem"):
        render(tmp_path / "good.sqlite", out)
    argv = ["report", "--run", "--preset", "smoke", "--store", str(tmp_path / "good.sqlite")]
    assert main([*argv, "--out", str(out)]) == 2
    assert "another filesystem" in _one_error_line(capsys)
    assert _tree(tmp_path) == before


@pytest.mark.parametrize("denied, words", [
    ("rep/tables", "tables is not writable"),
    ("rep", "rep is not writable"),
    ("", "is not writable, and the report is drawn there"),  # the folder beside --out
], ids=["tables", "out", "beside"])
def test_an_out_that_cannot_be_written_is_refused_first(denied, words, tmp_path, monkeypatch):
    # Through a link to the folder: the folder beside its target is where the report is drawn.
    out = _earlier_report(tmp_path, [])
    (tmp_path / "link").symlink_to(out, target_is_directory=True)
    access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode: access(path, mode)
                        and Path(path).resolve() != (tmp_path / denied).resolve())
    before = _tree(tmp_path)
    with pytest.raises(ReportError, match=words):
        render(tmp_path / "good.sqlite", tmp_path / "link")
    assert _tree(tmp_path) == before


# --------------------------------------------------------------------------------------------
# No partial write; renders at once; a full disk.


def _fail_at(out: Path, n: int):
    """``os.replace`` failing at the ``n``-th file it moves into ``out`` (the marker aside)."""
    replace, moved = os.replace, []

    def failing(src, dst):
        if Path(dst).is_relative_to(out) and not Path(dst).name.startswith(MARKER):
            moved.append(dst)
            if len(moved) == n:
                raise OSError(errno.EIO, "Input/output error", str(dst))
        return replace(src, dst)

    return failing


def test_a_render_stopped_while_moving_in_says_what_it_replaced(tmp_path, monkeypatch, capsys):
    store = small_store(tmp_path)
    render(store, tmp_path / "clean")
    files = len([f for f in _tree(tmp_path / "clean") if "." in f and f != MARKER])
    out = _earlier_report(tmp_path, ["tables/retired.csv"])
    (out / "tables" / "retired.csv").write_text("an artifact the code no longer makes")
    (out / "index.md").write_text("the earlier index")
    argv = ["report", "--store", str(store), "--out", str(out)]
    monkeypatch.setattr(os, "replace", _fail_at(out, 3))
    assert main(argv) == 1
    line = _one_error_line(capsys)
    assert "partly replaced" in line and f"2 of {files}" in line and "rerun" in line, line
    monkeypatch.undo()
    # The manifest names both reports' files, so the rerun completes the report.
    assert main(argv) == 0
    assert _tree(out) == _tree(tmp_path / "clean")


def test_a_render_failing_before_it_moves_in_leaves_the_folder_as_it_was(tmp_path, monkeypatch,
                                                                         capsys):
    out = _earlier_report(tmp_path, [])
    (out / "index.md").write_text("the earlier index")
    before = _tree(tmp_path)
    monkeypatch.setattr(os, "replace", _fail_at(out, 1))
    assert main(["report", "--store", str(tmp_path / "good.sqlite"), "--out", str(out)]) == 1
    assert "is unchanged" in _one_error_line(capsys)
    assert _tree(tmp_path) == before


def test_a_second_render_keeps_the_first_ones_temporary_folder(tmp_path, monkeypatch):
    # Render B runs whole while render A's temporary folder is live (between A's drawing and
    # its moving in): B leaves A's folder alone, and A then moves in over B's report.
    store = small_store(tmp_path)
    render(store, tmp_path / "clean")
    out = tmp_path / "rep"
    draw, seen = report._render_into, []

    def draw_then_render_again(store_, tmp, *args):
        drawn = draw(store_, tmp, *args)
        if not seen:
            seen.append(tmp)
            render(store, out)
            assert tmp.is_dir() and (tmp / MARKER).exists()
        return drawn

    monkeypatch.setattr(report, "_render_into", draw_then_render_again)
    render(store, out)
    assert seen and not seen[0].exists()
    assert _tree(out) == _tree(tmp_path / "clean")
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_only_the_temporary_folders_of_ended_renders_are_cleared(tmp_path):
    store = small_store(tmp_path)
    out = tmp_path / "rep"
    ended = subprocess.Popen(["true"])
    ended.wait()  # its pid now names no process
    names = {
        "alive": report._temporary_prefix(out, os.getpid()) + "abcd1234.tmp",
        "ended": report._temporary_prefix(out, ended.pid) + "abcd1234.tmp",
        "elsewhere": f".rep.another-host.{ended.pid}.abcd1234.tmp",
        "older": ".rep.killed.tmp",  # an earlier version's name, which carries no owner
    }
    for name in names.values():
        (tmp_path / name).mkdir()
        (tmp_path / name / MARKER).write_text("")
    render(store, out)
    left = {key for key, name in names.items() if (tmp_path / name).exists()}
    assert left == {"alive", "elsewhere"}


def test_a_full_disk_while_drawing_is_one_line_and_changes_nothing(tmp_path, monkeypatch,
                                                                     capsys, caplog):
    out = _earlier_report(tmp_path, [])
    before = _tree(tmp_path)

    def full(table, directory):
        raise OSError(errno.ENOSPC, "No space left on device", str(directory / table.name))

    monkeypatch.setattr(writers, "write_table", full)
    assert main(["report", "--store", str(tmp_path / "good.sqlite"), "--out", str(out)]) == 1
    line = _one_error_line(capsys)
    assert "disk is full" in line and "unchanged" in line, line
    assert not [r for r in caplog.records if r.exc_info], [r.getMessage() for r in caplog.records]
    assert _tree(tmp_path) == before
