"""Fault injection: a killed or terminated driver, a full or read-only store.

What must hold whatever happens: nothing is lost (a rerun gives the rows of an uninterrupted
grid, bit for bit), nothing is half-written (SQLite's integrity check passes, and no run is
recorded without its rows), and nothing is left behind (no process of a killed grid is alive a
few seconds later, and no worker writes a file once its driver is gone).

The grid is the toy study of `tests/_fault_study.py` (four runs of half a second), run by a
driver process with the processes executor, two workers. Two processes writing one store at
once are tested in `tests/test_store.py`.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pandas as pd
import pytest

from harness.errors import StoreError
from harness.runner import run_study
from harness.store import Store

TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS))
import _fault_study  # noqa: E402  (after the path: spawned workers import it by this name)

RUNS = _fault_study.RUNS


def _rows(store: Store) -> pd.DataFrame:
    """The grid's rows without what legitimately differs between executions (times,
    provenance)."""
    frame = store.read(_fault_study.STUDY.name)
    keep = [c for c in frame.columns if not c.startswith("prov.") and not c.endswith("_at")]
    return frame[keep].sort_values(["run_id", "j"]).reset_index(drop=True)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> pd.DataFrame:
    store = Store(tmp_path_factory.mktemp("baseline") / "store.sqlite")
    os.environ["LINRNN_FAULT_SLEEP"] = "0"
    try:
        summary = run_study(_fault_study.STUDY, None, store=store, progress=False)
    finally:
        del os.environ["LINRNN_FAULT_SLEEP"]
    assert summary.counts == {"done": RUNS}
    return _rows(store)


def _grid_processes(token: str) -> list[int]:
    """Live processes whose environment carries ``token``: the driver, its workers and
    multiprocessing's resource tracker all inherit it."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:  # ended while we looked
            continue
        if token.encode() in environ and state != "Z":
            found.append(int(entry.name))
    return found


def _start_driver(tmp: Path, token: str) -> tuple[subprocess.Popen, Path, Path]:
    store_path, files = tmp / "store.sqlite", tmp / "files"
    files.mkdir()
    Store(store_path)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(TESTS.parent), str(TESTS)]),
        "LINRNN_FAULT_TOKEN": token,
        "LINRNN_FAULT_FILES": str(files),
        "LINRNN_JAX_CACHE": "",
    }
    with open(tmp / "driver.log", "wb") as log:  # the child keeps its own copy of the file
        driver = subprocess.Popen(
            [sys.executable, "-c",
             f"import sys, _fault_study; sys.exit(_fault_study.main({str(store_path)!r}, 2))"],
            env=env, stdout=log, stderr=subprocess.STDOUT,
        )
    return driver, store_path, files


def _wait_until(condition, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for the grid")
        time.sleep(0.05)


def _assert_nothing_left(token: str, files: Path, stopped_at: float) -> None:
    deadline = time.monotonic() + 5.0
    while _grid_processes(token) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _grid_processes(token) == [], "a process of the grid outlived its driver"
    # No worker wrote a file after its driver was gone (a little slack for the clock).
    late = [f.name for f in files.iterdir() if f.stat().st_mtime > stopped_at + 0.05]
    assert late == [], f"written after the driver died: {late}"


def _assert_whole_and_resumable(store_path: Path, uninterrupted: pd.DataFrame) -> None:
    db = sqlite3.connect(store_path)
    assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    # Every recorded run has all its rows: nothing half-written.
    counts = db.execute("SELECT r.run_id, COUNT(w.idx) FROM runs r LEFT JOIN rows w "
                        "ON w.run_id = r.run_id GROUP BY r.run_id").fetchall()
    db.close()
    assert all(n == 3 for _, n in counts), counts
    store = Store(store_path)
    os.environ["LINRNN_FAULT_SLEEP"] = "0"
    try:
        again = run_study(_fault_study.STUDY, None, store=store, progress=False)
    finally:
        del os.environ["LINRNN_FAULT_SLEEP"]
    assert again.skipped == len(counts) and again.counts.get("done", 0) == RUNS - len(counts)
    pd.testing.assert_frame_equal(_rows(store), uninterrupted)


# Where the driver is killed: before any run is recorded (workers starting or running), after
# the first run is recorded, and when all but the last are.
KILL_POINTS = {"starting": 0, "first-recorded": 1, "nearly-done": RUNS - 1}


@pytest.mark.slow
@pytest.mark.parametrize("point", list(KILL_POINTS))
def test_kill_9_of_the_driver_loses_nothing_and_leaves_nothing(point, tmp_path, uninterrupted):
    token = uuid.uuid4().hex
    driver, store_path, files = _start_driver(tmp_path, token)
    recorded = KILL_POINTS[point]
    try:
        if recorded == 0:
            # Both workers started (driver, two workers and the resource tracker).
            _wait_until(lambda: len(_grid_processes(token)) >= 4)
        else:
            _wait_until(lambda: len(Store(store_path).recorded()) >= recorded)
        assert driver.poll() is None, (tmp_path / "driver.log").read_text()
        driver.send_signal(signal.SIGKILL)
        stopped_at = time.time()
        driver.wait(timeout=10)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    _assert_nothing_left(token, files, stopped_at)
    _assert_whole_and_resumable(store_path, uninterrupted)


@pytest.mark.slow
def test_sigterm_stops_the_grid_cleanly_and_keeps_finished_runs(tmp_path, uninterrupted):
    token = uuid.uuid4().hex
    driver, store_path, files = _start_driver(tmp_path, token)
    try:
        _wait_until(lambda: len(Store(store_path).recorded()) >= 1)
        driver.send_signal(signal.SIGTERM)
        assert driver.wait(timeout=30) == 130
        stopped_at = time.time()
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    _assert_nothing_left(token, files, stopped_at)
    _assert_whole_and_resumable(store_path, uninterrupted)


class _FullDisk:
    """Makes the store's file unable to grow past its current size, as a full disk does
    (SQLite's ``max_page_count`` fails a write with SQLITE_FULL, "database or disk is full")."""

    def __init__(self, store: Store):
        self.connect = store._connect
        db = self.connect()
        self.pages = db.execute("PRAGMA page_count").fetchone()[0]
        db.close()

    def __call__(self) -> sqlite3.Connection:
        db = self.connect()
        db.execute(f"PRAGMA max_page_count = {self.pages}")
        return db


def test_a_full_disk_stops_the_grid_with_a_clear_error_and_half_writes_nothing(
    tmp_path, uninterrupted, monkeypatch
):
    monkeypatch.setenv("LINRNN_FAULT_SLEEP", "0")
    path = tmp_path / "store.sqlite"
    store = Store(path)
    store.record(run_id="filler", study="other", status="done", config={}, config_hash="h",
                 seed=None, provenance={}, rows=[])
    monkeypatch.setattr(store, "_connect", _FullDisk(store))
    with pytest.raises(StoreError, match=r"store\.sqlite.*full.*Free space and rerun"):
        run_study(_fault_study.STUDY, None, store=store, progress=False)
    monkeypatch.undo()
    monkeypatch.setenv("LINRNN_FAULT_SLEEP", "0")
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    db.close()
    # Space freed: the rerun resumes and ends with the uninterrupted grid's rows.
    store = Store(path)
    run_study(_fault_study.STUDY, None, store=store, progress=False)
    pd.testing.assert_frame_equal(_rows(store), uninterrupted)


def test_a_read_only_store_is_read_but_not_written(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("LINRNN_FAULT_SLEEP", "0")
    path = tmp_path / "store.sqlite"
    writable = Store(path)
    writable.record(run_id="r", study="faults", status="done", config={}, config_hash="h",
                    seed=0, provenance={}, rows=[{"x": 1.0}])
    readonly = Store(path, create=False, readonly=True)
    assert list(readonly.read("faults")["x"]) == [1.0]
    readonly.check()
    with pytest.raises(StoreError, match="read-only.*--store"):
        run_study(_fault_study.STUDY, None, store=readonly, progress=False)
    assert writable.recorded() == {"r": "done"}
