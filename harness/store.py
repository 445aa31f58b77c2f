"""The results store: one SQLite file (WAL) holding every run and its metric rows.

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

import json
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import pandas as pd

from .errors import StoreError as StoreError  # re-exported: its old import place

Status = Literal["done", "diverged", "failed"]
STATUSES: tuple[str, ...] = ("done", "diverged", "failed")
DEFAULT_PATH = Path("results") / "store.sqlite"

_SCHEMA = """
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
"""


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
    """The SQLite results store at ``path`` (created on first use)."""

    def __init__(self, path: str | Path = DEFAULT_PATH):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            with self._connect() as db:
                db.executescript(_SCHEMA)
        except sqlite3.DatabaseError as e:
            raise StoreError(
                f"{self.path} is not a usable results store ({e}). Move it aside or pass "
                "another path with --store."
            ) from None

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=60.0, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA foreign_keys=ON")
        db.execute("PRAGMA busy_timeout=60000")
        return db

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
        db = self._connect()
        try:
            db.execute("BEGIN IMMEDIATE")
            db.execute("DELETE FROM rows WHERE run_id = ?", (run_id,))
            db.execute("DELETE FROM runs WHERE run_id = ?", (run_id,))
            db.execute(
                "INSERT INTO runs VALUES (?,?,?,?,?,?,?,?,?,?)",
                (
                    run_id,
                    study,
                    status,
                    seed,
                    config_hash,
                    _dumps(config),
                    _dumps(provenance),
                    error,
                    started_at,
                    finished_at,
                ),
            )
            db.executemany(
                "INSERT INTO rows VALUES (?,?,?)",
                [(run_id, i, _dumps(dict(r))) for i, r in enumerate(rows)],
            )
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        finally:
            db.close()

    def delete(self, run_ids: Iterable[str]) -> None:
        db = self._connect()
        try:
            db.execute("BEGIN IMMEDIATE")
            db.executemany("DELETE FROM runs WHERE run_id = ?", [(r,) for r in run_ids])
            db.execute("COMMIT")
        finally:
            db.close()

    # ---------------------------------------------------------------------------------------
    # Reading

    def status(self, run_id: str) -> str | None:
        """The recorded status of ``run_id``, or None if it was never recorded."""
        db = self._connect()
        try:
            row = db.execute("SELECT status FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        finally:
            db.close()
        return None if row is None else row[0]

    def recorded(self, study: str | None = None) -> dict[str, str]:
        """``{run_id: status}`` of every recorded run (of ``study`` if given)."""
        db = self._connect()
        try:
            if study is None:
                rows = db.execute("SELECT run_id, status FROM runs").fetchall()
            else:
                rows = db.execute(
                    "SELECT run_id, status FROM runs WHERE study = ?", (study,)
                ).fetchall()
        finally:
            db.close()
        return dict(rows)

    def runs(self, study: str | None = None) -> pd.DataFrame:
        """One line per run: id, study, status, seed, error, times, ``cfg.*`` and ``prov.*``."""
        db = self._connect()
        try:
            query = "SELECT * FROM runs" + (" WHERE study = ?" if study else "") + " ORDER BY run_id"
            frame = pd.read_sql_query(query, db, params=(study,) if study else ())
        finally:
            db.close()
        return _expand(frame)

    def read(self, study: str, *, statuses: Sequence[str] = ("done",)) -> pd.DataFrame:
        """One line per metric row of ``study``'s runs with the given statuses.

        Columns: the row's own keys, then ``run_id``, ``status``, ``seed``, ``cfg.<dotted>``
        and ``prov.<dotted>``. Ordered by run id and row index, so the same store always gives
        the same frame.
        """
        marks = ",".join("?" * len(statuses))
        db = self._connect()
        try:
            frame = pd.read_sql_query(
                f"SELECT r.*, w.idx AS row_idx, w.data AS row_data FROM runs r "
                f"JOIN rows w ON w.run_id = r.run_id "
                f"WHERE r.study = ? AND r.status IN ({marks}) ORDER BY r.run_id, w.idx",
                db,
                params=(study, *statuses),
            )
        finally:
            db.close()
        if frame.empty:
            return pd.DataFrame()
        data = pd.DataFrame([json.loads(d) for d in frame.pop("row_data")], index=frame.index)
        return pd.concat([data, _expand(frame)], axis=1)


def _expand(frame: pd.DataFrame) -> pd.DataFrame:
    """Replace the JSON ``config``/``provenance`` columns by flat ``cfg.*``/``prov.*`` columns."""
    if frame.empty:
        return frame
    cfg = pd.json_normalize([json.loads(c) for c in frame.pop("config")]).add_prefix("cfg.")
    prov = pd.json_normalize([json.loads(p) for p in frame.pop("provenance")]).add_prefix("prov.")
    cfg.index = prov.index = frame.index
    return pd.concat([frame, cfg, prov], axis=1)
