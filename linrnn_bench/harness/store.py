"""The results store: one SQLite file (WAL) holding every run and its metric rows.

The file is marked as this project's (``PRAGMA application_id``, `APPLICATION_ID`) and stamped
with the version of its tables (``PRAGMA user_version``, `SCHEMA_VERSION`) when it is created,
and both are checked whenever it is opened, before anything is read, written or trained for it:

- another program's SQLite file is refused, and left unchanged;
- a store written by a newer linrnn-bench (a higher version) is refused, naming that version;
- an older one is migrated (`_MIGRATIONS`), after a backup copy beside it, or refused with the
  version it needs when no migration leads from it;
- a store whose tables lack columns or have others (changed by hand, or by a version that did
  not stamp it) is refused, naming the columns: its runs could be read wrongly or not recorded;
- a store made before the mark or the version (application id or user_version 0) is
  recognised by its exact tables, and marked and stamped when next opened for writing.

The store's path, and the files SQLite keeps beside it (``-wal``, ``-shm``, ``-journal``),
must be plain files: a named pipe or a device is refused before SQLite opens it (opening a
named pipe waits for a writer for good).

A run is written in one transaction when it ends (done, diverged or failed), so an interrupted
run leaves nothing half-written and is simply run again. Two processes may write the same file at
once: SQLite serialises the writers (WAL mode, a busy timeout) and each run's rows land whole.

Tables:

    runs(run_id, study, status, seed, config_hash, config, provenance, error,
         started_at, finished_at)
    rows(run_id, idx, data)             one JSON object of flat scalars per metric row

`Store.read(study)` returns the rows joined with their run's config (dotted columns ``cfg.*``)
and provenance (``prov.*``): pandas-ready, one line per metric row.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import sqlite3
import stat
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import pandas as pd

from .errors import StoreError as StoreError  # re-exported: its old import place

Status = Literal["done", "diverged", "failed"]
STATUSES: tuple[str, ...] = ("done", "diverged", "failed")
DEFAULT_PATH = Path("results") / "store.sqlite"

# "LRNB" in ASCII: what `PRAGMA application_id` holds in a store of this project.
APPLICATION_ID = 0x4C524E42
# The version of a store's tables, in its `PRAGMA user_version` (0: a store made before
# versions). Raise it with every change to `_SCHEMA` and `_COLUMNS`, and add the migration from
# the version before to `_MIGRATIONS`.
SCHEMA_VERSION = 1
# The statements that bring a store of version v to v + 1, by v; run in one transaction after a
# backup copy of the store. A version without its step here is refused, not guessed at.
_MIGRATIONS: dict[int, tuple[str, ...]] = {}
# The tables and columns of a store of `SCHEMA_VERSION`, checked whenever one is opened.
_COLUMNS: dict[str, tuple[str, ...]] = {
    "runs": ("run_id", "study", "status", "seed", "config_hash", "config", "provenance", "error",
             "started_at", "finished_at"),
    "rows": ("run_id", "idx", "data"),
}
# Free space below which an I/O error of SQLite is taken for a full disk (SQLite reports a
# failed write for want of space as SQLITE_FULL, but a failed fsync or shared-memory growth as
# a plain I/O error).
_NEARLY_FULL = 16 * 2**20

# SQLite's files beside a store: its write-ahead log and shared memory (WAL mode), and the
# rollback journal of a store in another journal mode.
_COMPANIONS = ("-wal", "-shm", "-journal")
# What a path that is not a plain file is, for the message that refuses it.
_KINDS = ((stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISDIR, "a folder"))
_SCHEMA = """
BEGIN;
CREATE TABLE IF NOT EXISTS runs (
    run_id      TEXT PRIMARY KEY,
    study       TEXT NOT NULL,
    status      TEXT NOT NULL,
    seed        INTEGER,
    config_hash TEXT NOT NULL,
    config      TEXT NOT NULL,
    provenance  TEXT NOT NULL,
    error       TEXT,
    started_at  TEXT,
    finished_at TEXT
);
CREATE TABLE IF NOT EXISTS rows (
    run_id TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
    idx    INTEGER NOT NULL,
    data   TEXT NOT NULL,
    PRIMARY KEY (run_id, idx)
);
CREATE INDEX IF NOT EXISTS runs_by_study ON runs(study, status);
COMMIT;
"""


# The columns named, so that a run is written the same into a store with columns added since.
_INSERT_RUN = (f"INSERT INTO runs ({', '.join(_COLUMNS['runs'])}) "
               f"VALUES ({', '.join('?' * len(_COLUMNS['runs']))})")


def _stamp() -> str:
    """The statements marking a store as this project's, of `SCHEMA_VERSION`."""
    return f"PRAGMA application_id = {APPLICATION_ID}; PRAGMA user_version = {SCHEMA_VERSION};"


def _columns(db: sqlite3.Connection) -> dict[str, tuple[str, ...]]:
    """The columns of each table of the database ``db``, in order."""
    tables = [row[0] for row in db.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name").fetchall()]
    return {t: tuple(c[1] for c in db.execute(
        "SELECT * FROM pragma_table_info(?)", (t,)).fetchall()) for t in tables}


def _check_version(path: Path, version: int, columns: dict[str, tuple[str, ...]]) -> None:
    """Raise `StoreError` unless the store at ``path``, of ``version`` and with tables
    ``columns``, can be used: a newer version or an older one no migration leads from is
    refused with its version, and a store of this version whose tables differ from `_COLUMNS`
    with the columns that differ."""
    if version > SCHEMA_VERSION:
        raise StoreError(
            f"The store {path} is of store version {version}, written by a newer "
            f"linrnn-bench; this one reads version {SCHEMA_VERSION}. It was left unchanged: use "
            "it with that newer linrnn-bench, or pass another path with --store."
        )
    if version < SCHEMA_VERSION:
        if any(step not in _MIGRATIONS for step in range(version, SCHEMA_VERSION)):
            raise StoreError(
                f"The store {path} is of store version {version}, older than this "
                f"linrnn-bench, which reads version {SCHEMA_VERSION} and has no migration from "
                f"it; it was left unchanged. Use it with a linrnn-bench that reads store version "
                f"{version}, or pass another path with --store."
            )
        return  # its tables are checked once migrated
    problems = _column_problems(columns)
    if problems:
        raise StoreError(
            f"The store {path} does not have the tables of store version {version}: "
            f"{'; '.join(problems)}. It was made or changed by another version of linrnn-bench "
            "or by hand, and was left unchanged (runs would be read wrongly, or not recorded). "
            "Use it with the version that made it, or pass another path with --store."
        )


def _column_problems(columns: dict[str, tuple[str, ...]]) -> list[str]:
    """How the tables ``columns`` differ from `_COLUMNS`, one phrase per difference."""
    problems = []
    for table, wanted in _COLUMNS.items():
        have = columns.get(table)
        if have is None:
            problems.append(f"the table {table!r} is missing")
            continue
        extra = [c for c in have if c not in wanted]
        missing = [c for c in wanted if c not in have]
        if extra:
            problems.append(f"{table} has the column(s) {', '.join(map(repr, extra))} that this "
                            "linrnn-bench does not know")
        if missing:
            problems.append(f"{table} lacks the column(s) {', '.join(map(repr, missing))}")
        if not extra and not missing and have != wanted:
            problems.append(f"{table} has its columns in another order")
    return problems


def _check_plain_files(path: Path) -> None:
    """Refuse ``path``, or a file SQLite keeps beside it (`_COMPANIONS`), that exists and is
    not a plain file (a named pipe, a device, a socket, a folder), before SQLite opens it:
    opening a named pipe waits for a writer for good, deaf to Ctrl-C and SIGTERM."""
    for candidate in (path, *(path.with_name(path.name + end) for end in _COMPANIONS)):
        try:
            mode = candidate.stat().st_mode
        except OSError:  # absent; or unreadable, which SQLite reports when it opens it
            continue
        if stat.S_ISREG(mode):
            continue
        kind = next((name for is_kind, name in _KINDS if is_kind(mode)), "not a plain file")
        if candidate == path:
            raise StoreError(
                f"The store {path} is {kind}, not a file: SQLite cannot keep a store in it. "
                "Pass the path of a store file with --store (e.g. results/store.sqlite)."
            )
        raise StoreError(
            f"The store {path} cannot be opened: {candidate}, where SQLite keeps its journal "
            f"beside the store, is {kind}, not a file. Move it aside and rerun, or pass another "
            "path with --store."
        )


def _json_default(value: Any) -> Any:
    # numpy / jax scalars and arrays reach the store as plain Python numbers and lists.
    if hasattr(value, "item") and getattr(value, "ndim", 1) == 0:
        return value.item()
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"Cannot store a value of type {type(value).__name__}: {value!r}")


def _dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=_json_default, allow_nan=True)


class Store:
    """The SQLite results store at ``path``.

    Arguments:
        path: the store's file.
        create: make the file (and its folder) if it does not exist, as the commands that run
            studies do. With False (what ``report`` uses) a missing file is a `StoreError`
            saying so: rendering never creates a store.
        readonly: open for reading only (``report`` does): the file must exist, nothing is
            created, WAL mode is not switched on, and recording is a `StoreError`.

    A store whose file this process cannot write (read-only file or folder) is opened read-only:
    reading works, writing is a `StoreError` naming the file. Every SQLite error on the way
    (a corrupt page, a full disk, a locked file past the timeout) becomes a `StoreError` that
    names the file and what to do; a failed write leaves nothing of its run behind.
    """

    def __init__(
        self, path: str | Path = DEFAULT_PATH, *, create: bool = True, readonly: bool = False
    ):
        self.path = Path(path)
        if self.path.is_dir():
            raise StoreError(
                f"The store {self.path} is a folder; pass the path of a file with --store "
                f"(e.g. {self.path / 'store.sqlite'})."
            )
        _check_plain_files(self.path)
        if not self.path.exists():
            if readonly or not create:
                raise StoreError(
                    f"The store {self.path} does not exist. Pass the path of an existing store "
                    "with --store (a report never creates one), or run a study first."
                )
            _make_parent(self.path)
            _make_file(self.path)
        version = self._recognise()
        self.readonly = readonly or not os.access(self.path, os.W_OK)
        if 0 < version < SCHEMA_VERSION:
            version = self._migrate(version)
        if self.readonly:
            return  # nothing to create, and no WAL mode to set, in a file we cannot write
        stamp = "" if version == SCHEMA_VERSION else _stamp()
        with self._connection("open") as db:
            # The tables and (once, in the same transaction) the mark and the version.
            db.executescript(_SCHEMA.replace("BEGIN;", "BEGIN;" + stamp))

    def _recognise(self) -> int:
        """The store's version: its ``user_version``, 0 for an empty database or a store made
        before versions (both stamped when next opened for writing).

        Raise `StoreError` unless the file is a store this linrnn-bench can use as it is or
        after a migration: another program's file (neither marked nor holding exactly a
        store's tables), a store of a newer version, an older one no migration leads from, or
        tables other than `_COLUMNS`. Read-only, so a refused file is left as it was.
        """
        with self._connection("open", self._connect_readonly) as db:
            marked = db.execute("PRAGMA application_id").fetchone()[0]
            version = db.execute("PRAGMA user_version").fetchone()[0]
            columns = _columns(db)
        if marked != APPLICATION_ID:
            if marked == 0 and version == 0 and columns in ({}, _COLUMNS):
                return 0  # an empty database, or a store made before the mark
            raise StoreError(
                f"{self.path} is not a linrnn-bench results store but another program's SQLite "
                f"file (application id {marked}; tables: {', '.join(sorted(columns)) or 'none'}); "
                "it was left unchanged. Pass the path of a results store, or of a new file, "
                "with --store."
            )
        # A marked store made before versions has the tables of version 1.
        _check_version(self.path, version or 1, columns)
        return version

    def _connect_readonly(self) -> sqlite3.Connection:
        # No WAL switch (it writes the header). In a folder we cannot write, SQLite cannot make
        # the WAL's shared-memory file either; `immutable` then reads the file as it is,
        # assuming nobody writes it meanwhile (a report read during another user's grid could
        # see a run written half-way: render again afterwards).
        folder_writable = os.access(self.path.parent, os.W_OK)
        mode = "mode=ro" if folder_writable else "immutable=1"
        uri = f"{self.path.resolve().as_uri()}?{mode}"
        return sqlite3.connect(uri, uri=True, timeout=60.0, isolation_level=None)

    def _migrate(self, version: int) -> int:
        """Bring the store from ``version`` to `SCHEMA_VERSION` by `_MIGRATIONS`, in one
        transaction, after copying it whole to ``<store>.v<version>.bak`` beside it; returns
        `SCHEMA_VERSION`. A store opened read-only is refused instead: migrating writes."""
        if self.readonly:
            raise StoreError(
                f"The store {self.path} is of store version {version}, older than this "
                f"linrnn-bench, which reads version {SCHEMA_VERSION}; opened read-only here, it "
                "was left unchanged. A command that records runs in it (train, study) migrates "
                "it, after a backup copy; or pass another path with --store."
            )
        backup = self.path.with_name(f"{self.path.name}.v{version}.bak")
        partial = backup.with_name(backup.name + ".partial")
        with self._connection("open") as db, contextlib.closing(sqlite3.connect(partial)) as copy:
            db.backup(copy)  # consistent even with another process writing the store
        os.replace(partial, backup)
        with self._connection("open") as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                if db.execute("PRAGMA user_version").fetchone()[0] == version:  # not yet done
                    for step in range(version, SCHEMA_VERSION):
                        for statement in _MIGRATIONS[step]:
                            db.execute(statement)
                    _check_version(self.path, SCHEMA_VERSION, _columns(db))
                    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
        return SCHEMA_VERSION

    def _connect(self) -> sqlite3.Connection:
        if self.readonly:
            return self._connect_readonly()
        # mode=rw: never create the file here (it exists since `__init__`); a store removed
        # meanwhile is then an error that says so, not a new empty store under its name.
        uri = f"{self.path.resolve().as_uri()}?mode=rw"
        db = sqlite3.connect(uri, uri=True, timeout=60.0, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA foreign_keys=ON")
        db.execute("PRAGMA busy_timeout=60000")
        return db

    @contextlib.contextmanager
    def _connection(
        self, action: str, connect: Callable[[], sqlite3.Connection] | None = None
    ) -> Iterator[sqlite3.Connection]:
        """A connection for ``action`` (``"open"``, ``"read"``, ``"write"``) whose SQLite
        errors become one `StoreError` naming the file and the likely cause."""
        db: sqlite3.Connection | None = None
        try:
            db = (connect or self._connect)()
            yield db
        except sqlite3.DatabaseError as e:
            raise StoreError(_explain(self.path, action, e)) from None
        finally:
            if db is not None:
                db.close()

    def check(self) -> None:
        """Raise `StoreError` unless every page and table of the store reads back whole.

        SQLite's ``quick_check`` reads every page; a store whose header is intact but whose
        tables are damaged passes opening and would fail only half-way through a report.
        """
        with self._connection("read") as db:
            problems = [row[0] for row in db.execute("PRAGMA quick_check").fetchall()]
            tables = {row[0] for row in db.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()}
        if problems != ["ok"]:
            raise StoreError(
                f"The store {self.path} is corrupt ({'; '.join(problems[:3])}). Nothing was "
                "written. Restore it from a copy, or start a new store with --store (the "
                "finished runs in the damaged one would have to be run again)."
            )
        missing = sorted({"runs", "rows"} - tables)
        if missing:
            raise StoreError(
                f"{self.path} is not a linrnn-bench results store: it lacks the table(s) "
                f"{missing}. Pass the path of a store with --store."
            )

    # ---------------------------------------------------------------------------------------
    # Writing

    def record(
        self,
        *,
        run_id: str,
        study: str,
        status: Status,
        config: Mapping[str, Any],
        config_hash: str,
        seed: int | None,
        provenance: Mapping[str, Any],
        rows: Sequence[Mapping[str, Any]] = (),
        error: str | None = None,
        started_at: str | None = None,
        finished_at: str | None = None,
    ) -> None:
        """Write one finished run and its rows atomically, replacing any earlier record."""
        if status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {status!r}.")
        payload = (run_id, study, status, seed, config_hash, _dumps(config), _dumps(provenance),
                   error, started_at, finished_at)
        rows_payload = [(run_id, i, _dumps(dict(r))) for i, r in enumerate(rows)]
        self._check_writable()
        with self._connection("write") as db:
            self._write(db, run_id, payload, rows_payload)

    def _write(self, db: sqlite3.Connection, run_id: str, payload: tuple[Any, ...],
               rows_payload: list[tuple[str, int, str]]) -> None:
        # One transaction: a failure anywhere (a full disk included) rolls the run back whole.
        try:
            db.execute("BEGIN IMMEDIATE")
            db.execute("DELETE FROM rows WHERE run_id = ?", (run_id,))
            db.execute("DELETE FROM runs WHERE run_id = ?", (run_id,))
            db.execute(_INSERT_RUN, payload)
            db.executemany("INSERT INTO rows VALUES (?,?,?)", rows_payload)
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise

    def delete(self, run_ids: Iterable[str]) -> None:
        self._check_writable()
        with self._connection("write") as db:
            db.execute("BEGIN IMMEDIATE")
            db.executemany("DELETE FROM runs WHERE run_id = ?", [(r,) for r in run_ids])
            db.execute("COMMIT")

    def _check_writable(self) -> None:
        if self.readonly:
            raise StoreError(
                f"The store {self.path} is read-only for this user; reading it works, recording "
                "runs does not. Make it writable (chmod u+w) or pass another path with --store."
            )

    # ---------------------------------------------------------------------------------------
    # Reading

    def status(self, run_id: str) -> str | None:
        """The recorded status of ``run_id``, or None if it was never recorded."""
        with self._connection("read") as db:
            row = db.execute("SELECT status FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        return None if row is None else row[0]

    def recorded(self, study: str | None = None) -> dict[str, str]:
        """``{run_id: status}`` of every recorded run (of ``study`` if given)."""
        with self._connection("read") as db:
            if study is None:
                rows = db.execute("SELECT run_id, status FROM runs").fetchall()
            else:
                rows = db.execute(
                    "SELECT run_id, status FROM runs WHERE study = ?", (study,)
                ).fetchall()
        return dict(rows)

    def configs(self, study: str) -> dict[str, dict[str, Any]]:
        """``{run_id: config}`` of ``study``'s recorded runs, each config as it was recorded
        (nested, not flattened into ``cfg.*`` columns): what the run's id was hashed from, so
        that a reader can tell which fields of a spec changed since (`harness.reference`)."""
        with self._connection("read") as db:
            rows = db.execute("SELECT run_id, config FROM runs WHERE study = ? ORDER BY run_id",
                              (study,)).fetchall()
        return {run_id: json.loads(config) for run_id, config in rows}

    def runs(self, study: str | None = None) -> pd.DataFrame:
        """One line per run: id, study, status, seed, error, times, ``cfg.*`` and ``prov.*``."""
        with self._connection("read") as db:
            where = " WHERE study = ?" if study else ""
            query = f"SELECT * FROM runs{where} ORDER BY run_id"
            frame = _read_sql(query, db, params=(study,) if study else ())
        return _expand(frame)

    def read(self, study: str, *, statuses: Sequence[str] = ("done",)) -> pd.DataFrame:
        """One line per metric row of ``study``'s runs with the given statuses.

        Columns: the row's own keys, then ``run_id``, ``status``, ``seed``, ``cfg.<dotted>``
        and ``prov.<dotted>``. Ordered by run id and row index, so the same store always gives
        the same frame.
        """
        marks = ",".join("?" * len(statuses))
        with self._connection("read") as db:
            frame = _read_sql(
                f"SELECT r.*, w.idx AS row_idx, w.data AS row_data FROM runs r "
                f"JOIN rows w ON w.run_id = r.run_id "
                f"WHERE r.study = ? AND r.status IN ({marks}) ORDER BY r.run_id, w.idx",
                db,
                params=(study, *statuses),
            )
        if frame.empty:
            return pd.DataFrame()
        data = pd.DataFrame([json.loads(d) for d in frame.pop("row_data")], index=frame.index)
        return pd.concat([data, _expand(frame)], axis=1)


class Snapshot(Store):
    """``store`` for a reader that asks for the same runs many times (the report does, once per
    table and figure): each study's `runs` frame is read once and then served from memory, so
    runs recorded meanwhile are not in it (`read` reads the file as `Store.read` does).
    Nothing is recorded through it."""

    def __init__(self, store: Store):
        self.__dict__.update(store.__dict__)
        self.readonly = True
        self._runs: dict[str | None, pd.DataFrame] = {}

    def runs(self, study: str | None = None) -> pd.DataFrame:
        if study not in self._runs:
            self._runs[study] = super().runs(study)
        return self._runs[study].copy()


def _read_sql(query: str, db: sqlite3.Connection, params: Sequence[Any]) -> pd.DataFrame:
    # pandas wraps a failing query in its own DatabaseError; the SQLite error is its cause.
    try:
        return pd.read_sql_query(query, db, params=params)
    except pd.errors.DatabaseError as e:
        cause = e.__cause__ if isinstance(e.__cause__, sqlite3.DatabaseError) else None
        raise cause or sqlite3.DatabaseError(str(e)) from None


def _make_parent(path: Path) -> None:
    """Create the store's folder, or say in one line why it cannot be."""
    for parent in [path.parent, *path.parent.parents]:
        if parent.exists() and not parent.is_dir():
            raise StoreError(
                f"Cannot create the store {path}: {parent} is a file, not a folder. Pass "
                "another path with --store."
            )
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise StoreError(
            f"Cannot create the folder of the store {path}: {e.strerror or e}. Pass a path in "
            "a folder you can write with --store."
        ) from None
    if not os.access(path.parent, os.W_OK):
        raise StoreError(
            f"Cannot create the store {path}: its folder {path.parent} is not writable. Pass "
            "a path in a folder you can write with --store."
        )


def _make_file(path: Path) -> None:
    """Create the store's (empty) file, or say in one line why it cannot be."""
    try:
        path.touch(exist_ok=True)
    except OSError as e:
        if e.errno == errno.ENOSPC:
            raise StoreError(
                f"Cannot create the store {path}: the disk is full. Free space and rerun, or "
                "pass a path on another disk with --store."
            ) from None
        raise StoreError(
            f"Cannot create the store {path}: {e.strerror or e}. Pass a path in a folder you "
            "can write with --store."
        ) from None


def _free_bytes(folder: Path) -> int | None:
    """Bytes free to this user on the disk holding ``folder``, or None if unknown."""
    try:
        return shutil.disk_usage(folder).free
    except OSError:
        return None


def _disk_full(path: Path, error: sqlite3.DatabaseError) -> str | None:
    """A phrase naming the full disk if ``error`` comes from one, else None."""
    code = getattr(error, "sqlite_errorcode", 0) & 0xFF  # the primary code of an extended one
    text = str(error).lower()
    if code == sqlite3.SQLITE_FULL or "full" in text:
        return "the disk holding it is full"
    if _io_error(error):
        free = _free_bytes(path.parent)
        if free is not None and free < _NEARLY_FULL:
            return f"the disk holding it is full, {free // 1024} KiB free"
    return None


def _io_error(error: sqlite3.DatabaseError) -> bool:
    """Whether SQLite failed to read, write, sync or create a file (SQLITE_IOERR with its
    extended codes, or SQLITE_CANTOPEN), as opposed to finding the file's content damaged."""
    code = getattr(error, "sqlite_errorcode", 0) & 0xFF
    text = str(error).lower()
    return (code in (sqlite3.SQLITE_IOERR, sqlite3.SQLITE_CANTOPEN) or "i/o error" in text
            or "unable to open" in text)


def _explain(path: Path, action: str, error: sqlite3.DatabaseError) -> str:
    """One line for a SQLite error on the store at ``path``: what happened and what to do."""
    text = str(error)
    lowered = text.lower()
    verb = {"open": "opened", "read": "read", "write": "written"}[action]
    if not path.exists():
        lost = "the run being recorded was not" if action == "write" else "nothing was"
        return (f"The store {path} could not be {verb}: the file was removed or moved while "
                f"this command ran ({lost} written to it). Put it back (or pass its new path "
                "with --store) and rerun the command to resume; with this path a rerun starts a "
                "new, empty store.")
    full = _disk_full(path, error)
    if full:
        # SQLite rolls an unfinished transaction back whole (from its journal on the next
        # open, if the process died), so a full disk leaves the store as it was.
        return (f"The store {path} could not be {verb}: {full} (SQLite: {text}). The store is "
                "intact (the unfinished write was rolled back; finished runs are kept). Free "
                "space and rerun the command: it resumes where it stopped.")
    if "readonly" in lowered or "read-only" in lowered or "permission" in lowered:
        hint = ("the file or its folder is not writable. Make it writable or pass another "
                "path with --store")
    elif "locked" in lowered or "busy" in lowered:
        hint = ("another process held it locked for over a minute. Rerun when it is done")
    elif "unable to open" in lowered:
        hint = "it cannot be opened. Check the path and its permissions"
    elif _io_error(error):
        # Not a full disk (`_disk_full` said so), and not damage SQLite found in the file.
        hint = ("the disk reported an error while SQLite used the file (an unfinished write "
                "is rolled back, so the store is not damaged by it). Check the disk, then "
                "rerun the command: it resumes where it stopped")
    elif action == "open":
        return (f"{path} is not a usable results store ({text}). Move it aside or pass "
                "another path with --store.")
    else:
        hint = ("it is corrupt. Restore it from a copy, or pass another path with --store "
                "(the finished runs in the damaged one would have to be run again)")
    return f"The store {path} could not be {verb} ({text}): {hint}."


def _expand(frame: pd.DataFrame) -> pd.DataFrame:
    """Replace the JSON ``config``/``provenance`` columns by flat ``cfg.*``/``prov.*`` columns."""
    if frame.empty:
        return frame
    cfg = pd.json_normalize([json.loads(c) for c in frame.pop("config")]).add_prefix("cfg.")
    prov = pd.json_normalize([json.loads(p) for p in frame.pop("provenance")]).add_prefix("prov.")
    cfg.index = prov.index = frame.index
    return pd.concat([frame, cfg, prov], axis=1)
