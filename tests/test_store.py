"""The results store: atomic runs, replacement, reading back, concurrent writers, resumption."""

from __future__ import annotations

import dataclasses
import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from linrnn_bench.harness.provenance import SETTINGS
from linrnn_bench.harness.runner import pending, run_study
from linrnn_bench.harness import store as store_module
from linrnn_bench.harness.store import APPLICATION_ID, Snapshot, Store, StoreError
from linrnn_bench.harness.studies import Diverged, Study


def record(store: Store, run_id: str, rows, status="done", study="s", seed=0):
    store.record(run_id=run_id, study=study, status=status, config={"a": {"b": seed}},
                 config_hash="h" + run_id, seed=seed, provenance={"backend": "cpu"}, rows=rows)


def test_rows_come_back_with_config_and_provenance_columns(tmp_path):
    store = Store(tmp_path / "store.sqlite")
    record(store, "r2", [{"x": 1.0, "kind": "eval"}, {"x": 2.0, "kind": "final"}], seed=2)
    record(store, "r1", [{"x": 3.0}], seed=1)
    record(store, "r3", [{"x": 9.0}], status="failed")
    frame = store.read("s")
    assert list(frame["run_id"]) == ["r1", "r2", "r2"]  # ordered by run, then row
    assert list(frame["x"]) == [3.0, 1.0, 2.0]
    assert list(frame["cfg.a.b"]) == [1, 2, 2] and set(frame["prov.backend"]) == {"cpu"}
    assert len(store.read("s", statuses=("done", "failed"))) == 4
    assert store.read("other").empty
    assert store.recorded("s") == {"r1": "done", "r2": "done", "r3": "failed"}
    pd.testing.assert_frame_equal(store.read("s"), Store(tmp_path / "store.sqlite").read("s"))


def test_a_snapshot_reads_each_study_once_and_records_nothing(tmp_path):
    store = Store(tmp_path / "store.sqlite")
    record(store, "r1", [{"x": 1.0}])
    snapshot = Snapshot(store)
    first = snapshot.runs("s")
    pd.testing.assert_frame_equal(first, store.runs("s"))
    first.loc[0, "status"] = "edited"  # a caller's frame is its own copy
    record(store, "r2", [{"x": 2.0}])  # recorded after the snapshot's read: not seen
    assert list(snapshot.runs("s")["status"]) == ["done"]
    assert len(store.runs("s")) == 2 and len(snapshot.read("s")) == 2  # rows read as they are
    with pytest.raises(StoreError, match="read-only"):
        record(snapshot, "r3", [{"x": 3.0}])
    assert store.recorded("s") == {"r1": "done", "r2": "done"}


def test_recording_again_replaces_the_run_whole(tmp_path):
    store = Store(tmp_path / "store.sqlite")
    record(store, "r", [{"x": 1.0}, {"x": 2.0}, {"x": 3.0}])
    record(store, "r", [{"x": 5.0}], status="diverged")
    assert store.status("r") == "diverged"
    assert list(store.read("s", statuses=("diverged",))["x"]) == [5.0]


def test_a_failing_write_leaves_nothing_behind(tmp_path):
    store = Store(tmp_path / "store.sqlite")
    with pytest.raises(TypeError, match="Cannot store a value of type object"):
        record(store, "r", [{"x": 1.0}, {"x": object()}])
    assert store.status("r") is None and store.read("s").empty
    with pytest.raises(ValueError, match="status must be one of"):
        record(store, "r", [], status="finished")


def test_a_file_that_is_not_a_store_is_a_clear_error(tmp_path):
    bad = tmp_path / "store.sqlite"
    bad.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError, match="is not a usable results store.*--store"):
        Store(bad)



# --------------------------------------------------------------------------------------------
# Schema versions: a store carries the version of its tables (``PRAGMA user_version``), and one
# of another version is refused, or migrated, when it is opened.

VERSION = store_module.SCHEMA_VERSION


def _sql(path: Path, *statements: str) -> Path:
    """Run ``statements`` on the SQLite file ``path``, left in rollback-journal mode (no WAL
    file beside it, so that its bytes are all of it)."""
    db = sqlite3.connect(path)
    for statement in statements:
        db.execute(statement)
    db.commit()
    db.execute("PRAGMA journal_mode=DELETE")
    db.close()
    return path


def _pragma(path: Path, name: str) -> int:
    db = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)
    try:
        return db.execute(f"PRAGMA {name}").fetchone()[0]
    finally:
        db.close()


def _columns(path: Path, table: str) -> list[str]:
    db = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)
    try:
        return [c[1] for c in db.execute(f"PRAGMA table_info({table})").fetchall()]
    finally:
        db.close()


def _versioned_store(path: Path) -> Path:
    """A store of this version holding run ``r`` (one row, x=1.0)."""
    record(Store(path), "r", [{"x": 1.0}])
    return _sql(path)


def test_a_new_store_carries_its_schema_version(tmp_path):
    path = tmp_path / "store.sqlite"
    Store(path)
    assert VERSION >= 1 and _pragma(path, "user_version") == VERSION
    assert _pragma(path, "application_id") == APPLICATION_ID


def test_a_store_from_before_versions_is_recognised_read_and_stamped(tmp_path):
    # As linrnn-bench made stores before versions: the tables and the mark, user_version 0.
    path = tmp_path / "old.sqlite"
    db = sqlite3.connect(path)
    db.executescript(store_module._SCHEMA)
    db.close()
    _sql(path, f"PRAGMA application_id = {APPLICATION_ID}",
         "INSERT INTO runs VALUES ('r0', 's', 'done', 0, 'h', '{\"a\": 1}', '{}', NULL, NULL, "
         "NULL)", "INSERT INTO rows VALUES ('r0', 0, '{\"x\": 1.0}')")
    assert _pragma(path, "user_version") == 0
    assert list(Store(path, readonly=True).read("s")["x"]) == [1.0]
    assert _pragma(path, "user_version") == 0  # reading stamps nothing
    store = Store(path)
    assert _pragma(path, "user_version") == VERSION
    assert list(store.read("s")["x"]) == [1.0] and list(store.runs("s")["cfg.a"]) == [1]
    record(store, "r1", [{"x": 2.0}])
    assert store.recorded("s") == {"r0": "done", "r1": "done"}


def test_a_store_of_a_newer_version_is_refused_naming_it(tmp_path):
    path = _sql(_versioned_store(tmp_path / "store.sqlite"), f"PRAGMA user_version = {VERSION + 1}")
    before = path.read_bytes()
    for readonly in (False, True):
        with pytest.raises(StoreError, match=rf"store version {VERSION + 1}.*newer linrnn-bench"
                                             rf".*reads version {VERSION}\b.*--store"):
            Store(path, readonly=readonly)
    assert path.read_bytes() == before and sorted(os.listdir(tmp_path)) == ["store.sqlite"]


@pytest.mark.parametrize("change, words", [
    ("ALTER TABLE runs ADD COLUMN priority INTEGER", "runs has the column(s) 'priority'"),
    ("ALTER TABLE runs DROP COLUMN error", "runs lacks the column(s) 'error'"),
    ("ALTER TABLE rows ADD COLUMN weight REAL", "rows has the column(s) 'weight'"),
    ("DROP TABLE rows", "the table 'rows' is missing"),
])
def test_a_store_whose_tables_differ_is_refused_naming_the_columns(tmp_path, change, words):
    path = _sql(_versioned_store(tmp_path / "store.sqlite"), change)
    before = path.read_bytes()
    for readonly in (False, True):
        with pytest.raises(StoreError) as info:
            Store(path, readonly=readonly)
        message = str(info.value)
        assert words in message and "store.sqlite" in message and "--store" in message, message
        assert len(message.splitlines()) == 1
    assert path.read_bytes() == before


@pytest.fixture
def version_after(monkeypatch):
    """A next store version, `VERSION` + 1, whose tables add the column ``runs.note``; with
    ``migrate`` its migration step from `VERSION` is known."""

    def make(migrate: bool) -> int:
        monkeypatch.setattr(store_module, "SCHEMA_VERSION", VERSION + 1)
        monkeypatch.setitem(store_module._COLUMNS, "runs",
                            (*store_module._COLUMNS["runs"], "note"))
        if migrate:
            monkeypatch.setitem(store_module._MIGRATIONS, VERSION,
                                ("ALTER TABLE runs ADD COLUMN note TEXT",))
        return VERSION + 1

    return make


def test_an_older_store_is_migrated_after_a_backup_copy(tmp_path, version_after):
    path = _versioned_store(tmp_path / "store.sqlite")
    new = version_after(migrate=True)
    with pytest.raises(StoreError, match=rf"store version {VERSION}\b.*read-only.*unchanged"):
        Store(path, readonly=True)  # migrating writes
    assert not list(tmp_path.glob("*.bak"))
    store = Store(path)
    assert _pragma(path, "user_version") == new and "note" in _columns(path, "runs")
    # The copy taken first is the store as it was, whole.
    backup = tmp_path / f"store.sqlite.v{VERSION}.bak"
    assert _pragma(backup, "user_version") == VERSION and "note" not in _columns(backup, "runs")
    assert _sql(backup, "SELECT 1") and sqlite3.connect(backup).execute(
        "SELECT run_id, status FROM runs").fetchall() == [("r", "done")]
    # Its runs still read, and new ones are recorded.
    assert list(store.read("s")["x"]) == [1.0]
    record(store, "r2", [{"x": 2.0}])
    assert store.recorded("s") == {"r": "done", "r2": "done"}


def test_an_older_store_that_cannot_be_migrated_is_refused_naming_its_version(
        tmp_path, version_after):
    path = _versioned_store(tmp_path / "store.sqlite")
    before = path.read_bytes()
    new = version_after(migrate=False)
    for readonly in (False, True):
        with pytest.raises(StoreError, match=rf"store version {VERSION}\b.*reads version {new}"
                                             r".*--store"):
            Store(path, readonly=readonly)
    assert path.read_bytes() == before and sorted(os.listdir(tmp_path)) == ["store.sqlite"]

WRITER = textwrap.dedent(
    """
    import sys
    from linrnn_bench.harness.store import Store
    store = Store(sys.argv[1])
    for i in range(40):
        rows = [{"writer": sys.argv[2], "i": i, "j": j} for j in range(25)]
        store.record(run_id=f"{sys.argv[2]}-{i}", study="s", status="done", config={},
                     config_hash="h", seed=i, provenance={}, rows=rows)
    """
)


def test_two_processes_writing_one_store_lose_nothing(tmp_path):
    path = tmp_path / "store.sqlite"
    Store(path)
    writers = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(path), name], cwd=Path.cwd())
        for name in ("a", "b")
    ]
    assert [w.wait(timeout=120) for w in writers] == [0, 0]
    frame = Store(path).read("s")
    assert len(Store(path).recorded("s")) == 80
    assert len(frame) == 80 * 25
    # Each run's rows landed whole and in order.
    for run_id, rows in frame.groupby("run_id"):
        assert list(rows["j"]) == list(range(25))
        assert rows["writer"].nunique() == 1


@dataclasses.dataclass(frozen=True)
class Spec:
    seed: int


def test_the_runner_skips_results_retries_failures_and_records_divergence(tmp_path):
    calls = []

    def run(spec):
        calls.append(spec.seed)
        if spec.seed == 2:
            raise RuntimeError("boom")
        if spec.seed == 3:
            raise Diverged("non-finite loss at step 7", [{"step": 5}])
        return [{"value": spec.seed * 10}]

    specs = [Spec(1), Spec(2), Spec(3)]
    study = Study(name="toy", description="toy", presets=dict.fromkeys(("smoke", "cpu", "gpu")),
                  grid=lambda config: specs, run=run)
    store = Store(tmp_path / "store.sqlite")
    summary = run_study(study, None, store=store, progress=False)
    assert summary.counts == {"done": 1, "failed": 1, "diverged": 1}
    runs = store.runs("toy").set_index("seed")
    assert runs.loc[3, "status"] == "diverged" and "step 7" in runs.loc[3, "error"]
    assert "RuntimeError: boom" in runs.loc[2, "error"]
    assert list(store.read("toy", statuses=("diverged",))["step"]) == [5]
    # Every run records the process settings that change speed and memory, as they were.
    for name in SETTINGS:
        assert set(runs[f"prov.settings.{name}"].fillna("")) == {os.environ.get(name, "")}
    # A rerun retries only the failed run; --fresh reruns everything.
    assert pending(study, specs, store, fresh=False) == [Spec(2)]
    calls.clear()
    again = run_study(study, None, store=store, progress=False)
    assert calls == [2] and again.skipped == 2
    calls.clear()
    run_study(study, None, store=store, fresh=True, progress=False)
    assert calls == [1, 2, 3]


def test_report_time_sums_what_the_store_recorded(tmp_path):
    from benchmarks.report_time import study_times

    store = Store(tmp_path / "store.sqlite")
    times = [("a1", "acc", "12:00:00", "12:00:10", 10.0, 4.0),
             ("a2", "acc", "12:00:00", "12:00:06", 6.0, 0.5),  # beside a1 on a second worker
             ("t1", "thr", "12:00:10", "12:00:13", 3.0, None)]
    for run_id, study, start, end, seconds, compiled in times:
        final = {"kind": "final"} if compiled is None else {"kind": "final",
                                                            "compile_seconds": compiled}
        store.record(run_id=run_id, study=study, status="done", config={}, config_hash=run_id,
                     seed=0, provenance={"seconds": seconds}, rows=[{"kind": "eval"}, final],
                     started_at=f"2026-12-02T{start}", finished_at=f"2026-12-02T{end}")
    store.record(run_id="f1", study="acc", status="failed", config={}, config_hash="f1", seed=0,
                 provenance={"seconds": 99.0}, started_at="2026-12-02T11:00:00",
                 finished_at="2026-12-02T13:00:00")
    rows = {r["study"]: r for r in study_times(tmp_path / "store.sqlite")}
    assert rows["acc"]["runs"] == 2 and rows["acc"]["wall_s"] == 10.0  # the failed run left out
    assert rows["acc"]["run_s"] == 16.0 and rows["acc"]["compile_s"] == 4.5
    assert rows["acc"]["compile_share"] == pytest.approx(4.5 / 16.0)
    assert rows["thr"]["compile_share"] is None and rows["thr"]["wall_s"] == 3.0
