"""The report: every table and figure of the studies, written from the results store.

`render(store, out_dir)` goes through the studies in registry order (`harness.studies.names`),
takes each one's `Section` (the one its registration names, `Study.section`: title,
introduction, ``build(store) -> list[Artifact]``), and writes::

    out_dir/tables/<name>.{csv,md,tex}     every Table
    out_dir/figures/<name>.{png,pdf,csv}   every Figure (the CSV: the numbers it draws)
    out_dir/index.md                       every artifact with its caption and provenance,
                                           and a statement for everything that is missing
    out_dir/provenance.json                per artifact: files (sha256), runs, commit, hardware,
                                           process settings
    out_dir/README.md                      a note that the folder is generated

The published LRA numbers (`harness.report.published`) form their own section, labelled as
published, after the section that declares it is followed by them (the accuracy section's,
`Section.followed_by_published`). A study that declares no section, a section that raises,
or one that returns nothing is stated in the index, never left out silently. When a section
raises (or cannot be imported) or a table or figure fails to write, the rest of the report is
still written and put in place, and then `ReportIncomplete` is raised: a partial report never
passes for a whole one.

The output is a pure function of the store and the code: no timestamps, fixed image metadata,
sorted JSON.

`render` only ever replaces or removes files it wrote itself. The marker file ``MARKER`` in
``out_dir`` is a manifest: the relative paths of every file the last render wrote. A manifest is
data a user can edit, so each entry is checked before anything is touched: it must name a file
of the report's layout (``_TOP_FILES``, ``tables/<name>.{csv,md,tex}``,
``figures/<name>.{png,pdf,csv}``), reached without a symbolic link, that is a regular file or
absent; any other entry is refused, naming it, and nothing is changed.

Everything that can refuse the folder is checked before the work (`check_destination`, which
the command line calls before any study runs): a dangling symbolic link on the way, a file
where the report puts a folder or a folder where it puts a file, a folder it cannot write, an
``out_dir`` on another filesystem than the folder beside it, the manifest. A new render is drawn
into a temporary folder beside ``out_dir``, named after its host and process so that another
render clears it only once its owner has ended (a render that fails or is killed there leaves
the previous report untouched). Then, holding a lock on the folder beside (renders into one
folder take turns), it reads the manifest again, renames its files into ``out_dir`` one by one
and removes the files of the old manifest that the new one lacks. Any other file in ``out_dir``
(a user's notes, a copy of a figure) is left as it is; a new file that would land on such a
file, or an ``out_dir`` that contains the results store, is refused before anything is touched.
The rename phase takes milliseconds; a render stopped inside it leaves a folder whose manifest
names the files of both reports, which the next render completes, and says how far it got
(`ReportPartlyReplaced`). A full disk while drawing stops the render at once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import socket
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from .. import studies
from ..errors import ReportError as ReportError  # re-exported: its old import place
from ..errors import ReportIncomplete
from ..store import Snapshot, Store
from . import origins, published, writers
from .artifacts import Artifact, Figure, Finding, Missing, Section, Table

__all__ = ["Artifact", "Figure", "Finding", "Missing", "ReportError", "ReportIncomplete",
           "ReportPartlyReplaced", "Section", "Table", "check_destination", "check_only", "render"]

log = logging.getLogger(__name__)

# Marks a folder as written by `render`, so that only such a folder is ever replaced.
MARKER = ".linrnn-bench-report"
PUBLISHED_KEY = "published"
# The files a render writes, relative to its folder (`_write`): the top-level ones, and per
# folder the suffixes of its files. A manifest entry outside this layout is not the report's.
_TOP_FILES = ("index.md", "provenance.json", "README.md")
_FOLDERS = {"tables": writers.TABLE_SUFFIXES, "figures": (*writers.FIGURE_SUFFIXES, ".csv")}
# A write failing with one of these fails every later write too: the render stops at once.
_DISK_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})
# Provenance fields that identify how a number was made (the run counts are not among them).
_CITED = ("presets", "seeds", "hardware", "commits", "versions", "settings", "python",
          "study_version")

README_TEXT = """\
# reports/

Everything in this folder except this note is generated by `make report` (or `linrnn-bench
report`, which renders from the results store alone) and is not kept in git. Do not edit it by
hand: the next render replaces every file it wrote (`.linrnn-bench-report` lists them) and keeps
any other file put here.

- `index.md`: every table and figure, with what it measures, how, and its provenance.
- `tables/`: each table as CSV (full precision), Markdown and LaTeX (booktabs).
- `figures/`: each figure as PNG and PDF.
- `provenance.json`: per table and figure, the commit, hardware, process settings, seeds, preset
  and the sha256 of its files, for citing.
"""


class ReportPartlyReplaced(Exception):
    """Moving a drawn report into its folder failed after some of its files were moved in.

    The folder's manifest names the files of both reports, so the next render completes it;
    the message says how far this one got and why it stopped.
    """

    def __init__(self, out_dir: Path, moved: int, total: int, removed: int, stale: int,
                 cause: OSError):
        where = f" ({cause.filename})" if cause.filename else ""
        super().__init__(
            f"the report in {out_dir} was partly replaced: {moved} of {total} new files were "
            f"moved in and {removed} of {stale} old ones removed when "
            f"{cause.strerror or cause}{where} stopped it; its {MARKER} names the files of "
            "both reports, so rerunning the command completes it."
        )
        self.cause = cause


@dataclasses.dataclass(frozen=True)
class _Section:
    """One section of the index: a study's (or the published numbers')."""

    key: str
    title: str
    intro: str
    artifacts: tuple[Artifact, ...]
    provenance: dict[str, Any] | None  # None: not from the store (published numbers)
    problem: str | None = None  # why the section could not be produced at all
    broken: bool = False  # the problem is a fault (it raised), not a section not yet written
    followed_by_published: bool = False  # `Section.followed_by_published`


def render(store: Store | str | os.PathLike[str], out_dir: str | os.PathLike[str], *,
           workers: int = 1, only: Sequence[str] = ()) -> list[Path]:
    """Write the whole report for ``store`` into ``out_dir``, replacing the previous report.

    Arguments:
        store: a `Store` or the path of its file.
        out_dir: the report folder (``reports``). If it exists it must be a folder this function
            wrote before (it holds the marker file, whose manifest says which files may be
            replaced; any other file there is kept), be empty, or hold only the
            generated-folder note ``README.md`` of a fresh clone. It must not contain the store.
        workers: processes drawing the figures (1: this process); the bytes are the same.
        only: names of tables or figures to write alone (their files only, byte-identical to
            the whole report's; the index and provenance.json are left as they are); empty for
            the whole report.

    Returns:
        The paths of the files written, sorted, under ``out_dir``.

    Raises:
        ReportIncomplete: after the report is in place, when a section raised or a table or
            figure failed to write (each is stated in the index).
        ReportError: ``out_dir`` cannot take the report; nothing was written.
        ReportPartlyReplaced: moving the drawn report in failed half-way (it says how far).
        OSError: drawing failed (a full disk) or moving in failed before any file was moved;
            the previous report is unchanged.
    """
    import matplotlib

    # Headless and the same on every machine: the sections draw on the Agg canvas.
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    store = Snapshot(store if isinstance(store, Store) else Store(store))
    out_dir = Path(out_dir)
    _check_outside(store.path, out_dir)
    _check_folder(out_dir, whole=not only)
    real = out_dir.resolve()  # drawn beside the folder itself, where --out is a link to it
    try:
        real.parent.mkdir(parents=True, exist_ok=True)
        _remove_leftovers(real)
        tmp = Path(tempfile.mkdtemp(prefix=_temporary_prefix(real, os.getpid()), suffix=".tmp",
                                    dir=real.parent))
        try:
            sections, files, failures = _render_into(store, tmp, workers, only)
            _commit(tmp, out_dir, files, keep=bool(only))
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    finally:
        # Figures of a section that failed half-way were never written; release them too.
        plt.close("all")
    written = sorted(out_dir / f for f in files)
    if not only:  # a section that raised matters to the whole report, not to one artifact
        failures.update({s.key: s.problem for s in sections if s.broken and s.problem})
    if failures:
        raise ReportIncomplete(written, failures)
    return written


def _render_into(store: Store, tmp: Path, workers: int, only: Sequence[str]
                 ) -> tuple[list[_Section], list[str], dict[str, str]]:
    """Draw the report (or the ``only`` artifacts) into the fresh folder ``tmp``, beside the
    report folder it will replace. Returns the sections, the files written (relative to
    ``tmp``) and, per artifact that failed to write, why (as `_write`)."""
    tmp.chmod(0o755)
    # The marker goes in first, so that a render killed half-way leaves a folder the
    # next render recognises as its own and removes.
    _write_manifest(tmp, [])
    (tmp / "tables").mkdir()
    (tmp / "figures").mkdir()
    with writers.FigureWriters(workers) as drawing:
        # Each section's figures are sent to the writers as soon as it is built, so
        # that they are drawn while the next sections are computed.
        figures: dict[str, Callable[[], list[Path]]] = {}

        def send(section: _Section) -> None:
            for artifact in section.artifacts:
                if isinstance(artifact, Figure) and (not only or artifact.name in only):
                    figures[artifact.name] = drawing.submit(artifact, tmp / "figures")

        # A grid that reads the store (the stability study's) is built from this one.
        with origins.reading(store):
            sections = _sections(store, send)
            if only:
                _check_only(sections, only)
            files, failures = _write(store, sections, tmp, figures, only)
    return sections, files, failures


# ---------------------------------------------------------------------------------------------
# Collecting the sections


def _sections(store: Store, send: Callable[[_Section], None] = lambda section: None
              ) -> list[_Section]:
    """Every section in the index's order, each passed to ``send`` once it is built."""
    out: list[_Section] = []
    seen: dict[str, str] = {}
    origins.register_outside_models(store)  # a user's layers, known to every section

    def add(section: _Section) -> None:
        section = _dedupe(section, seen)
        send(section)
        out.append(section)

    for name in studies.names():
        section = _study_section(store, name)
        add(section)
        if section.followed_by_published and not any(s.key == PUBLISHED_KEY for s in out):
            add(_published_section())
    if not any(s.key == PUBLISHED_KEY for s in out):
        add(_published_section())
    return out


def _published_section() -> _Section:
    return _Section(
        key=PUBLISHED_KEY,
        title=published.TITLE,
        intro=published.INTRO,
        artifacts=tuple(published.section()),
        provenance=None,
    )


def _study_section(store: Store, name: str) -> _Section:
    """Study ``name``'s section, its `Section` found through its registration
    (`Study.section`); a section that cannot be found or built is stated, with why."""
    title = name.capitalize()
    try:
        summary = origins.summarise(store, name)
    except Exception as e:  # a study whose grid cannot be built still gets its section
        log.exception("provenance of study %r", name)
        summary = {"study": name, "error": f"{type(e).__name__}: {e}"}
    try:
        study = studies.get(name)
        section = study.report_section()
    except Exception as e:  # one study that cannot be imported must not cost the report
        log.exception("the report section of study %r", name)
        problem = f"its report section could not be imported ({type(e).__name__}: {e})."
        return _Section(name, title, "", (), summary, problem, broken=True)
    if section is None:
        problem = "its registration declares no report section (`Study.section`) yet."
        return _Section(name, title, "", (), summary, problem)
    if not isinstance(section, Section) or section.study != name:
        problem = (f"its report section `{study.section}` is not a `Section({name!r}, title, "
                   "intro, build)`.")
        return _Section(name, title, "", (), summary, problem, broken=True)
    title, intro, then = section.title, section.intro, section.followed_by_published
    try:
        artifacts = tuple(section.build(store))
    except Exception as e:  # one broken section must not cost the rest of the report
        log.exception("report section %s", study.section)
        problem = f"its section raised {type(e).__name__}: {e}"
        return _Section(name, title, intro, (), summary, problem, broken=True,
                        followed_by_published=then)
    wrong = [type(a).__name__ for a in artifacts
             if not isinstance(a, (Table, Figure, Finding, Missing))]
    if wrong:
        problem = (f"its section returned objects that are not Table, Figure, Finding or "
                   f"Missing: {wrong}.")
        return _Section(name, title, intro, (), summary, problem, broken=True,
                        followed_by_published=then)
    if not artifacts:
        artifacts = (
            Missing(f"{name}_all", title,
                    "the section produced no table or figure from this store."),
        )
    return _Section(name, title, intro, artifacts + _skipped_models(name), summary,
                    followed_by_published=then)


def _skipped_models(name: str) -> tuple[Missing, ...]:
    """A `Missing` per registered model that study ``name`` leaves out, with the reason its
    `Study.skip_reason` gives (a capability the model's registration lacks)."""
    from linrnn_bench import models

    try:
        study = studies.get(name)
        infos = models.infos()
    except Exception as e:  # the section stands; only this statement is lost
        log.warning("models skipped by %r cannot be listed (%s: %s)", name, type(e).__name__, e)
        return ()
    out = []
    for info in infos:
        reason = study.skip_reason(info)
        if reason:
            out.append(Missing(f"{name}_skips_{_writers_safe(info.name).lower()}",
                               f"{info.label} is not in this study", f"{reason}."))
    return tuple(out)


def _writers_safe(name: str) -> str:
    """``name`` as a file-stem fragment (letters, digits and underscores)."""
    return re.sub(r"[^0-9A-Za-z_]", "_", name)


def _dedupe(section: _Section, seen: dict[str, str]) -> _Section:
    """``section`` with each artifact whose name is invalid, or was used by an earlier section
    (``seen``: name -> section key, updated here), replaced by a `Missing` saying so."""
    artifacts: list[Artifact] = []
    for a in section.artifacts:
        try:
            writers.check_name(a.name)
        except ValueError as e:
            log.error("%s", e)
            name = f"{section.key}_invalid_{len(artifacts)}"
            artifacts.append(Missing(name, a.title, str(e)))
            continue
        if a.name in seen:
            reason = f"its name {a.name!r} is already used by section {seen[a.name]!r}."
            log.error("artifact %s of section %s: %s", a.name, section.key, reason)
            artifacts.append(Missing(f"{a.name}_duplicate", a.title, reason))
        else:
            seen[a.name] = section.key
            artifacts.append(a)
    return dataclasses.replace(section, artifacts=tuple(artifacts))


# ---------------------------------------------------------------------------------------------
# Writing


def _check_only(sections: Sequence[_Section], only: Sequence[str]) -> None:
    names = sorted(a.name for s in sections for a in s.artifacts if isinstance(a, (Table, Figure)))
    unknown = [n for n in only if n not in names]
    if unknown:
        raise ReportError(
            f"No table or figure named {', '.join(map(repr, unknown))} in this store's report; "
            f"accepted: {', '.join(names)}."
        )


def _write(store: Store, sections: Sequence[_Section], root: Path,
           figures: Mapping[str, Callable[[], list[Path]]], only: Sequence[str] = ()
           ) -> tuple[list[str], dict[str, str]]:
    """Write every table, the index, provenance.json and the README under ``root``, and
    record every figure (``figures``: name -> a call that waits for its written paths); with
    ``only``, those artifacts' files alone. Returns the files written (relative to ``root``)
    and, per artifact that failed to write, why."""
    written: dict[str, list[str]] = {}  # artifact name -> relative paths
    failures: dict[str, str] = {}
    records: dict[str, dict[str, Any]] = {}
    for section in sections:
        for artifact in section.artifacts:
            if only and artifact.name not in only:
                continue
            records[artifact.name] = _write_artifact(store, section, artifact, root, figures,
                                                     written, failures)
    if only:
        failed = [name for name in only if name in failures]
        if failed:
            raise ReportError("; ".join(f"{name}: {failures[name]}" for name in failed))
        return (sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()),
                failures)
    (root / "index.md").write_text(
        _index(store, sections, written, failures), encoding="utf-8", newline="\n"
    )
    (root / "provenance.json").write_text(
        json.dumps({"artifacts": records}, indent=2, sort_keys=True, ensure_ascii=False) + "\n",
        encoding="utf-8",
        newline="\n",
    )
    (root / "README.md").write_text(README_TEXT, encoding="utf-8", newline="\n")
    files = [p.relative_to(root) for p in root.rglob("*") if p.is_file()]
    return sorted(f.as_posix() for f in files), failures


def _write_artifact(store: Store, section: _Section, artifact: Artifact, root: Path,
                    figures: Mapping[str, Callable[[], list[Path]]],
                    written: dict[str, list[str]], failures: dict[str, str]) -> dict[str, Any]:
    """Write ``artifact``'s files (a table here; a figure by waiting for its writer) and return
    its provenance.json record.

    A `Missing` or a `Finding` has no files: its record carries its reason or its lines. A
    table or figure that fails to write is recorded with the reason, in ``failures`` too, and
    any file of it already written is removed (a half-written artifact is not kept); one
    written adds its relative paths to ``written``.
    """
    record: dict[str, Any] = {
        "section": section.key,
        "kind": type(artifact).__name__.lower(),
        "title": artifact.title,
    }
    if isinstance(artifact, Missing):
        record["reason"] = artifact.reason
        return record
    if isinstance(artifact, Finding):
        record["lines"] = list(artifact.lines)
        record["provenance"] = _artifact_provenance(store, section, artifact)
        return record
    try:
        if isinstance(artifact, Table):
            paths = writers.write_table(artifact, root / "tables")
        else:
            paths = figures[artifact.name]()
    except Exception as e:  # stated in the index as not produced
        if isinstance(e, OSError) and e.errno in _DISK_FULL:
            raise  # no later file fits either: the render stops, with one line, not one each
        log.exception("writing %s", artifact.name)
        failures[artifact.name] = f"writing it failed: {type(e).__name__}: {e}"
        for stale in root.glob(f"*/{artifact.name}.*"):
            stale.unlink()
        record["reason"] = failures[artifact.name]
        return record
    rel = [p.relative_to(root).as_posix() for p in paths]
    written[artifact.name] = rel
    record["caption"] = artifact.caption
    record["files"] = {r: _sha256(root / r) for r in rel}
    record["provenance"] = _artifact_provenance(store, section, artifact)
    if section.provenance is not None:
        record["run_ids"] = _run_hashes(store, section.key, artifact.runs)
    return record


def _artifact_provenance(
    store: Store, section: _Section, artifact: Table | Figure | Finding
) -> Any:
    if section.provenance is None:
        return {"published": True,
                "source": "the papers named in the table (harness/report/published.py)"}
    if artifact.runs:
        return origins.summarise(store, section.key, artifact.runs)
    return section.provenance


def _run_hashes(store: Store, study: str, run_ids: Sequence[str]) -> dict[str, str]:
    """``{run id: configuration hash}`` of the runs behind an artifact: ``run_ids`` when it
    names them, else every finished run of its study."""
    runs = store.runs(study)
    if runs.empty:
        return {}
    if run_ids:
        runs = runs[runs["run_id"].isin(set(run_ids))]
    else:
        runs = runs[runs["status"].isin(("done", "diverged"))]
    return dict(sorted(zip(runs["run_id"].astype(str), runs["config_hash"].astype(str))))


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ---------------------------------------------------------------------------------------------
# The report folder


def check_destination(store_path: str | os.PathLike[str], out_dir: str | os.PathLike[str], *,
                      only: Sequence[str] = ()) -> None:
    """Raise `ReportError` unless a report of the store at ``store_path`` (with ``only``: those
    artifacts alone) may be written into ``out_dir``: the checks `render` makes first, which the
    command line makes before any study runs."""
    _check_outside(Path(store_path), Path(out_dir))
    _check_folder(Path(out_dir), whole=not only)


def check_only(names: Sequence[str]) -> None:
    """Raise `ReportError` unless each of ``names`` can be a table or figure of the report: a
    valid file stem that begins with its section's key and ``_``, as every artifact's name does.

    Which names a report holds depends on the runs in the store (a task's figures appear with
    its runs), so ``report --run`` checks this before its studies run, and `render` checks the
    exact names once the sections are built.
    """
    keys = [*studies.names(), PUBLISHED_KEY]
    for name in names:
        try:
            writers.check_name(name)
        except ValueError as e:
            raise ReportError(str(e)) from None
        if not any(name.startswith(f"{key}_") for key in keys):
            raise ReportError(
                f"No table or figure named {name!r} in the report: each name begins with its "
                f"section's, one of {', '.join(f'{k}_' for k in keys)} (e.g. accuracy_test; "
                "a rendered report's index.md lists them all)."
            )


def _check_outside(store_path: Path, out_dir: Path) -> None:
    """Refuse an ``out_dir`` that is the results store's folder or holds it at any depth."""
    out = out_dir.resolve()
    store = store_path.resolve()
    if store == out or out in store.parents:
        raise ReportError(
            f"Refusing to write the report into {out_dir}: it contains the results store "
            f"{store_path}. Pass an --out folder outside the store's folder (e.g. "
            f"{store.parent.parent / 'reports'} when the store is in {store.parent})."
        )


def _check_folder(out_dir: Path, *, whole: bool) -> None:
    """Refuse an ``out_dir`` the report cannot be moved into (`ReportError`, nothing touched):
    a dangling symbolic link on its path; one that is not a folder, cannot be written or lies
    on another filesystem than the folder beside it (where the report is drawn, then renamed
    in); a manifest naming what the render did not write; something other than a folder where
    the report keeps ``tables/`` and ``figures/``; with ``whole``, a top-level file in the way."""
    _check_links(out_dir)
    real = out_dir.resolve()
    owned = _owned_files(out_dir)  # refuses a file in place of the folder, and a bad manifest
    beside = real.parent
    while not beside.exists():
        beside = beside.parent
    if not os.access(beside, os.W_OK | os.X_OK):
        raise ReportError(
            f"Refusing to write into {out_dir}: {beside} is not writable, and the report is "
            f"drawn there, beside {real}, before it is moved in. Pass another --out."
        )
    if not real.exists():
        return
    device = _filesystem(real.parent)
    _check_writable(out_dir, real, device)
    for folder in _FOLDERS:
        _check_target(out_dir, f"{folder}/", owned, device)
    for name in _TOP_FILES if whole else ():
        _check_target(out_dir, name, owned, device)


def _check_links(out_dir: Path) -> None:
    """Refuse ``out_dir`` if it, or a folder above it, is a symbolic link to nothing (the render
    would find out only when it makes the folder, after drawing everything)."""
    path = Path(os.path.abspath(out_dir))
    for step in (path, *path.parents):
        if step.is_symlink() and not step.exists():
            raise ReportError(
                f"--out {out_dir}: {step} is a symbolic link to {os.readlink(step)}, which does "
                "not exist. Make that folder, remove the link, or pass another --out."
            )
        if step.exists():
            return


def _check_writable(out_dir: Path, folder: Path, device: int) -> None:
    """Refuse a ``folder`` of the report that cannot be written, or that is on another
    filesystem than ``device`` (the folder the report is drawn in: a rename crosses none)."""
    if _filesystem(folder) != device:
        raise ReportError(
            f"Refusing to write into {out_dir}: {folder} is on another filesystem than the "
            "folder beside it, where the report is drawn before it is renamed into place (a "
            "rename stays within one filesystem). Pass a folder inside it, e.g. "
            f"--out {out_dir / 'reports'}."
        )
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ReportError(
            f"Refusing to write into {out_dir}: {folder} is not writable. Make it writable or "
            "pass another --out."
        )


def _filesystem(path: Path) -> int:
    """The device of the filesystem holding ``path``."""
    return os.stat(path).st_dev


def _check_target(out_dir: Path, relative: str, owned: set[str], device: int) -> None:
    """Refuse a path the report writes (``relative``; ending in ``/``: a folder) that a render
    cannot put in place: reached through a symbolic link, a file or folder of the wrong kind
    in the way, or a file an earlier render did not write (``owned``: what it did)."""
    path = out_dir
    parts = Path(relative).parts
    for i, part in enumerate(parts):
        path = path / part
        folder = i < len(parts) - 1 or relative.endswith("/")
        if path.is_symlink():
            raise ReportError(
                f"Refusing to write into {out_dir}: {path} is a symbolic link, which the "
                "report never writes through or replaces. Move it aside or pass another --out."
            )
        if not os.path.lexists(path):
            return
        if folder and not path.is_dir():
            raise ReportError(
                f"Refusing to write into {out_dir}: {path} is a file, where the report keeps "
                f"its folder {part}/. Move it aside or pass another --out."
            )
        if folder:
            _check_writable(out_dir, path, device)
    if relative.endswith("/"):
        return
    if not path.is_file():
        raise ReportError(
            f"Refusing to write into {out_dir}: {path} is not a regular file, and the report "
            f"writes its file {relative} there. Move it aside or pass another --out."
        )
    if relative not in owned:
        raise ReportError(
            f"Refusing to write into {out_dir}: the report would replace {relative}, which an "
            "earlier render did not write. Move that file aside or pass another --out."
        )


def _write_manifest(folder: Path, files: Sequence[str]) -> None:
    """Write the marker: which files under ``folder`` the render wrote (sorted, relative)."""
    manifest = {"written_by": "harness.report.render", "files": sorted(set(files))}
    _write_atomically(folder / MARKER,
                      (json.dumps(manifest, indent=1) + "\n").encode("utf-8"))


def _write_atomically(path: Path, data: bytes) -> None:
    """Put ``data`` at ``path`` whole or not at all (a failed write leaves no partial file)."""
    tmp = path.with_name(f"{path.name}.tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _read_manifest(out_dir: Path) -> set[str] | None:
    """The files an earlier render wrote into ``out_dir``, as its marker says (unchecked: see
    `_owned_files`); None when it holds no marker."""
    marker = out_dir / MARKER
    if not marker.is_file():
        return None
    try:
        manifest = json.loads(marker.read_text(encoding="utf-8"))
        files = manifest["files"]
        if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
            raise TypeError
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        # A marker of a render before manifests existed: its files are those its provenance
        # lists, plus the three it always writes.
        return _legacy_owned(out_dir)
    return set(files) - {MARKER}


def _legacy_owned(out_dir: Path) -> set[str]:
    owned = set(_TOP_FILES)
    try:
        records = json.loads((out_dir / "provenance.json").read_text(encoding="utf-8"))
        for record in records.get("artifacts", {}).values():
            owned.update(record.get("files", {}))
    except (OSError, ValueError, AttributeError):
        pass
    return owned


def _in_layout(relative: str) -> bool:
    """Whether ``relative`` is a path the report writes (`_TOP_FILES`, `_FOLDERS`)."""
    if relative in _TOP_FILES:
        return True
    folder, _, name = relative.partition("/")
    stem, suffix = os.path.splitext(name)
    try:
        writers.check_name(stem)
    except ValueError:
        return False
    return suffix in _FOLDERS.get(folder, ())


def _entry_problem(out_dir: Path, relative: str) -> str | None:
    """Why the manifest entry ``relative`` cannot name a file the render wrote; None if it can.

    A manifest is data (a user can edit it, a link can be put in the folder): an entry counts
    only if it is in the report's layout and, where it exists, a regular file inside
    ``out_dir`` reached without a symbolic link.
    """
    path, parts = out_dir, Path(relative).parts
    for part in () if Path(relative).is_absolute() or ".." in parts else parts:
        path = path / part
        if path.is_symlink():
            return f"which is (or is reached through) the symbolic link {path}"
    if not _in_layout(relative):
        return ("which is not a file the report writes (tables/NAME.csv|md|tex, "
                f"figures/NAME.png|pdf|csv, {', '.join(_TOP_FILES)})")
    if not os.path.lexists(path):
        return None  # gone already: nothing to remove
    if not path.is_file():
        return "which is not a regular file"
    if out_dir.resolve() not in path.resolve().parents:
        return f"which resolves to {path.resolve()}, outside the folder"
    return None


def _owned_files(out_dir: Path) -> set[str]:
    """The files of ``out_dir`` that a new render may replace or remove (raises if the folder
    cannot take a report, or if its manifest names a file a render did not write)."""
    if not out_dir.exists():
        return set()
    if not out_dir.is_dir():
        raise ReportError(f"{out_dir} exists and is not a folder; pass another --out.")
    owned = _read_manifest(out_dir)
    if owned is not None:
        problems = {f: _entry_problem(out_dir, f) for f in sorted(owned)}
        bad = [f"{f}, {why}" for f, why in problems.items() if why]
        if bad:
            raise ReportError(
                f"Refusing to write into {out_dir}: its manifest {MARKER} names {bad[0]}"
                f"{f' (and {len(bad) - 1} more)' if len(bad) > 1 else ''}; the report removes "
                "or replaces only the files it wrote, and nothing was changed. Remove that "
                f"entry from {out_dir / MARKER} or pass another --out."
            )
        return owned
    # A subfolder with a marker of its own is another report (the shipped reference,
    # reports/cpu-full): never the render's to replace, and not in its way.
    contents = {p.name for p in out_dir.iterdir()
                if not (p.is_dir() and not p.is_symlink() and (p / MARKER).is_file())}
    # A fresh clone's reports/ holds only the tracked note, which the render writes again.
    note = out_dir / "README.md"
    if contents == {"README.md"} and note.is_file() and note.read_text("utf-8") == README_TEXT:
        return {"README.md"}
    if not contents:
        return set()
    raise ReportError(
        f"Refusing to write into {out_dir}: it holds files the report did not write "
        f"({', '.join(sorted(contents)[:5])}{', ...' if len(contents) > 5 else ''}) and no "
        f"{MARKER} marker. Pass an empty or new folder with --out."
    )


def _commit(tmp: Path, out_dir: Path, files: Sequence[str], *, keep: bool = False) -> None:
    """Move the render in ``tmp`` into ``out_dir``: its files replace the old report's, the old
    report's files it lacks are removed (kept with ``keep``: a render of some artifacts only),
    and nothing else in ``out_dir`` is touched.

    Renders beside one another take turns here (`_locked`), and each checks the folder again
    as it is now: a render that finished since this one began wrote its manifest.
    """
    new = {f for f in files if f != MARKER}
    with _locked(tmp.parent):
        owned = _owned_files(out_dir)
        device = _filesystem(tmp.parent)
        if out_dir.exists():
            _check_writable(out_dir, out_dir.resolve(), device)
        for relative in sorted(new):
            _check_target(out_dir, relative, owned, device)
        out_dir.mkdir(exist_ok=True)
        _move_in(tmp, out_dir, owned, new, keep=keep)
    shutil.rmtree(tmp, ignore_errors=True)  # empty folders by now


def _move_in(tmp: Path, out_dir: Path, owned: set[str], new: set[str], *, keep: bool) -> None:
    """Rename the ``new`` files from ``tmp`` into ``out_dir`` and remove the ``owned`` ones the
    new report lacks (none with ``keep``). Failing before the first file is renamed or removed
    leaves the folder as it was (its manifest too) and re-raises; failing after raises
    `ReportPartlyReplaced`."""
    marker = out_dir / MARKER
    previous = marker.read_bytes() if marker.is_file() else None
    stale = [] if keep else sorted(owned - new)
    moved = removed = 0
    # Until the old files are gone, the manifest names both reports' files, so a render stopped
    # in this phase leaves a folder whose every generated file the next render may replace.
    _write_manifest(out_dir, sorted(owned | new))
    try:
        for relative in sorted(new):
            target = out_dir / relative
            target.parent.mkdir(exist_ok=True)
            os.replace(tmp / relative, target)
            moved += 1
        for relative in stale:
            (out_dir / relative).unlink(missing_ok=True)
            removed += 1
            _remove_empty_parents((out_dir / relative).parent, out_dir)
        _write_manifest(out_dir, sorted(new | owned if keep else new))
    except OSError as e:
        if moved or removed:
            raise ReportPartlyReplaced(out_dir, moved, len(new), removed, len(stale), e) from e
        with contextlib.suppress(OSError):  # else the wider manifest stays: it does no harm
            if previous is None:
                marker.unlink()
            else:
                _write_atomically(marker, previous)
        raise


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``folder`` (the one the report is drawn in, beside its
    destination): renders moving into it take turns. The lock ends with the process, however
    it ends. A filesystem that cannot lock a folder (NFS) leaves renders there unserialised."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _remove_empty_parents(folder: Path, out_dir: Path) -> None:
    """Remove ``folder`` and its parents up to (not including) ``out_dir`` while empty."""
    while folder != out_dir and out_dir in folder.parents:
        try:
            folder.rmdir()
        except OSError:  # not empty (or already gone): a user's file keeps it
            return
        folder = folder.parent


def _temporary_prefix(out_dir: Path, pid: int) -> str:
    """The start of the name of the temporary folder process ``pid`` of this host draws the
    report of ``out_dir`` in (`tempfile.mkdtemp` adds a random part without dots)."""
    host = re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname()) or "host"
    return f".{out_dir.name}.{host}.{pid}."


def _remove_leftovers(out_dir: Path) -> None:
    """Remove the temporary folders of renders into ``out_dir`` that were killed (they hold the
    marker): those of this host whose process has ended, and those of earlier versions, whose
    names carry no owner. A live render's folder, or another host's, is never touched."""
    for suffix in (".tmp", ".old"):
        for leftover in out_dir.parent.glob(f".{out_dir.name}.*{suffix}"):
            owner = leftover.name[len(out_dir.name) + 2:-len(suffix)].split(".")
            if len(owner) == 3 and owner[1].isdigit():
                pid = int(owner[1])
                if not leftover.name.startswith(_temporary_prefix(out_dir, pid)) or _alive(pid):
                    continue
            elif len(owner) != 1:  # another folder's (``.<out_dir>.v2...``): not ours to judge
                continue
            if leftover.is_dir() and not leftover.is_symlink() and (leftover / MARKER).exists():
                shutil.rmtree(leftover, ignore_errors=True)


def _alive(pid: int) -> bool:
    """Whether a process ``pid`` exists on this host (another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# ---------------------------------------------------------------------------------------------
# The index page


def _slug(title: str) -> str:
    """The anchor a code host (GitHub, GitLab) gives a Markdown heading."""
    text = re.sub(r"[^\w\- ]", "", title.strip().lower())
    return text.replace(" ", "-")


def _index(
    store: Store,
    sections: Sequence[_Section],
    written: dict[str, list[str]],
    failures: dict[str, str],
) -> str:
    lines = [
        "# linrnn-bench report",
        "",
        "Every table and figure below was computed from the results store by `linrnn-bench "
        "report` (`make report` runs the studies first, reusing finished runs). The page is a "
        "pure function of the store and the code: rendering the same store twice gives the "
        "same files. Our numbers are means ± standard error over seeds, with the number of "
        "seeds stated; each section names the preset (scale), seeds, hardware, commit and "
        "library versions of its runs. The section titled *published* holds numbers from the "
        "papers, not ours; they are never mixed into our tables. `provenance.json` records, "
        "per table and figure, its files' sha256 and the runs' provenance, for citing.",
        "",
        "## Contents",
        "",
    ]
    for section in sections:
        lines.append(f"- [{section.title}](#{_slug(section.title)}): {_census(section, written)}")
    findings = [(s, a) for s in sections if not s.problem for a in s.artifacts
                if isinstance(a, Finding) and a.lines]
    design = [(s, f) for s, f in findings if f.design]
    findings = [(s, f) for s, f in findings if not f.design]
    if design:
        lines += ["", "## What this report can decide", ""]
        lines += [f"- [{section.title}](#{_slug(finding.title)}): {line}"
                  for section, finding in design for line in finding.lines]
    if findings:
        lines += ["", "## Findings", "",
                  "What the statistics of each section support, computed from the data (each "
                  "sentence links to its section):", ""]
        for section, finding in findings:
            lines += [f"- [{section.title}](#{_slug(finding.title)}): {line}"
                      for line in finding.lines]
    missing = _missing_list(sections, failures)
    if missing:
        lines += ["", "## Not produced", "",
                  "These tables and figures could not be made from this store:", ""]
        lines += [f"- {item}" for item in missing]
    for section in sections:
        lines += ["", f"## {section.title}", ""]
        if section.intro:
            lines += [section.intro, ""]
        if section.provenance is not None:
            lines += [_provenance_text(section.provenance), ""]
        if section.problem:
            lines += [f"> **Missing.** This section is not in the report: {section.problem}", ""]
            continue
        for artifact in section.artifacts:
            lines += _artifact_lines(store, section, artifact, written, failures)
    return "\n".join(lines).rstrip("\n") + "\n"


def _census(section: _Section, written: dict[str, list[str]]) -> str:
    if section.problem:
        return "not produced"
    tables = sum(1 for a in section.artifacts if isinstance(a, Table) and a.name in written)
    figures = sum(1 for a in section.artifacts if isinstance(a, Figure) and a.name in written)
    missing = sum(1 for a in section.artifacts
                  if isinstance(a, Missing) or (isinstance(a, (Table, Figure))
                                                and a.name not in written))
    parts = [
        f"{tables} table{'s' if tables != 1 else ''}",
        f"{figures} figure{'s' if figures != 1 else ''}",
    ]
    if missing:
        parts.append(f"{missing} not produced")
    return ", ".join(parts)


def _missing_list(sections: Sequence[_Section], failures: dict[str, str]) -> list[str]:
    items = []
    for section in sections:
        if section.problem:
            items.append(f"**{section.title}** (whole section): {section.problem}")
            continue
        for a in section.artifacts:
            if isinstance(a, Missing):
                items.append(f"**{section.title}: {a.title}** (`{a.name}`): {a.reason}")
            elif a.name in failures:
                items.append(f"**{section.title}: {a.title}** (`{a.name}`): {failures[a.name]}")
    return items


def _provenance_text(summary: dict[str, Any]) -> str:
    if "error" in summary:
        return f"**Provenance.** Could not be summarised: {summary['error']}"
    return origins.describe(summary)


def _artifact_lines(
    store: Store,
    section: _Section,
    artifact: Artifact,
    written: dict[str, list[str]],
    failures: dict[str, str],
) -> list[str]:
    if isinstance(artifact, Finding):
        if not artifact.lines:
            return []
        return [f"### {artifact.title}", "", *[f"- {line}" for line in artifact.lines], ""]
    if isinstance(artifact, Missing) or artifact.name in failures:
        reason = artifact.reason if isinstance(artifact, Missing) else failures[artifact.name]
        return [f"### {artifact.title}", "", f"> **Missing** (`{artifact.name}`): {reason}", ""]
    files = written[artifact.name]
    kind = "Table" if isinstance(artifact, Table) else "Figure"
    out = [f"### {artifact.title}", ""]
    if isinstance(artifact, Figure):
        png = next(f for f in files if f.endswith(".png"))
        out += [f"![{artifact.title}]({png})", ""]
    out += [f"*{kind} `{artifact.name}`.* {artifact.caption}", ""]
    if artifact.runs and section.provenance is not None and "error" not in section.provenance:
        own = origins.summarise(store, section.key, artifact.runs)
        # Said again only where this artifact's runs differ from the section's in something a
        # reader would cite (a subset of seeds, one commit of two); the counts alone do not.
        if any(own.get(k) != section.provenance.get(k) for k in _CITED):
            out += [origins.describe(own), ""]
    if isinstance(artifact, Table):
        out += [writers.table_markdown(artifact).rstrip("\n"), ""]
    links = ", ".join(f"[{Path(f).suffix[1:].upper()}]({f})" for f in files)
    out += [f"Files: {links}.", ""]
    return out
