"""Fault injection: a killed or terminated driver, a full or read-only store.

What must hold whatever happens: nothing is lost (a rerun gives the rows of an uninterrupted
grid, bit for bit), nothing is half-written (SQLite's integrity check passes, and no run is
recorded without its rows), and nothing is left behind (no process of a killed grid is alive a
few seconds later, and no worker writes a file once its driver is gone).

The grid is the toy study of `tests/_fault_study.py` (four runs of half a second), run by a
driver process with the processes executor, two workers; a killed ``report --workers 2`` and a
killed study on a local Ray must leave no process behind either, and a Ray address that cannot
be used fails with one line. Two processes writing one store at once are tested in
`tests/test_store.py`.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pandas as pd
import pytest

from linrnn_bench.harness.errors import StoreError
from linrnn_bench.harness.runner import run_study
from linrnn_bench.harness.store import Store
from helpers import record_synthetic_accuracy

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


def _grid_processes(token: str, session: int | None = None) -> list[int]:
    """Live processes whose environment carries ``token`` (the driver, its workers and
    multiprocessing's resource tracker all inherit it), or that belong to the driver's session
    ``session``: a process that retitles itself may overwrite its environment (Ray's do)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # ended while we looked
            continue
        ours = token.encode() in environ or session is not None and int(stat[3]) == session
        if ours and stat[0] != "Z":
            found.append(int(entry.name))
    return found


def _start_driver(
    tmp: Path, token: str, workers: int | str = 2, call: str = "main({store!r}, {workers!r})",
    **env_extra: str,
) -> tuple[subprocess.Popen, Path, Path]:
    """Start ``_fault_study.<call>`` in a driver process whose environment carries ``token``;
    ``call`` is formatted with ``store`` (a new store's path) and ``workers``."""
    store_path, files = tmp / "store.sqlite", tmp / "files"
    files.mkdir()
    Store(store_path)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(TESTS.parent), str(TESTS)]),
        "LINRNN_FAULT_TOKEN": token,
        "LINRNN_FAULT_FILES": str(files),
        "LINRNN_JAX_CACHE": "",
        **env_extra,
    }
    code = call.format(store=str(store_path), workers=workers, tmp=str(tmp))
    with open(tmp / "driver.log", "wb") as log:  # the child keeps its own copy of the file
        driver = subprocess.Popen(  # its own session: everything it starts is found by it
            [sys.executable, "-c", f"import sys, _fault_study; sys.exit(_fault_study.{code})"],
            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
    return driver, store_path, files


def _command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:120]
    except OSError:
        return "?"


def _kill_9(driver: subprocess.Popen, log: Path) -> float:
    """SIGKILL the (still running) driver; the time it was killed."""
    assert driver.poll() is None, log.read_text()
    driver.send_signal(signal.SIGKILL)
    stopped_at = time.time()
    driver.wait(timeout=10)
    return stopped_at


def _wait_until(condition, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for the grid")
        time.sleep(0.05)


def _assert_nothing_left(token: str, files: Path, stopped_at: float, within: float = 5.0,
                         session: int | None = None) -> None:
    deadline = time.monotonic() + within
    while _grid_processes(token, session) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = {pid: _command(pid) for pid in _grid_processes(token, session)}
    for pid in left:  # a failing test leaves nothing running either
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    assert left == {}, f"processes outlived their driver: {left}"
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


# A `train` of many seeds through the real command line, stopped by a signal once its first run
# is recorded. The child is the console command, so the test sees the process's own end (its
# exit status, its last line); in ``deliver=gc`` the signal is raised inside a garbage
# collector callback, where JAX's ``_xla_gc_callback`` takes it when it comes at random and
# where Python can only print an exception raised and drop it; in ``deliver=import`` it is
# raised as the command line's module starts importing (numpy, pandas: the first half second
# of the command, where a kill sent at once lands), before any run.
_TRAIN = """
import gc, os, signal, sys
from linrnn_bench.__main__ import console
go, mode = sys.argv[1], sys.argv[2]
fired = []
def deliver_inside(phase, info):
    if mode == "gc" and not fired and os.path.exists(go):
        fired.append(phase)
        signal.raise_signal(signal.SIGTERM)  # its handler runs here, inside the callback
def deliver_importing(event, args):
    if (mode == "import" and not fired and event == "import"
            and args[0] == "linrnn_bench.harness.cli"):
        fired.append(event)
        signal.raise_signal(signal.SIGTERM)
gc.callbacks.append(deliver_inside)
sys.addaudithook(deliver_importing)
sys.argv = ["linrnn-bench", *sys.argv[3:]]
console()
"""
_TRAIN_SEEDS = 200


def _start_train(tmp: Path, deliver: str) -> tuple[subprocess.Popen, Path]:
    store_path = tmp / "store.sqlite"
    seeds = ",".join(str(s) for s in range(_TRAIN_SEEDS))
    argv = ["train", "model=lru", "task=digits", "--preset", "smoke", f"seeds={seeds}",
            "--store", str(store_path)]
    env = {**os.environ, "PYTHONPATH": str(TESTS.parent), "LINRNN_JAX_CACHE": ""}
    child = subprocess.Popen([sys.executable, "-c", _TRAIN, str(tmp / "go"), deliver, *argv],
                             env=env, cwd=tmp, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return child, store_path


def _recorded_runs(store_path: Path) -> int:
    if not store_path.exists():
        return 0
    db = sqlite3.connect(f"{store_path.as_uri()}?mode=ro", uri=True, timeout=30)
    try:
        return db.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
    except sqlite3.OperationalError:  # the tables are not made yet
        return 0
    finally:
        db.close()


@pytest.mark.slow
@pytest.mark.parametrize("deliver", ["sigterm", "sigint", "gc", "import"])
def test_a_signal_stops_train_with_130_and_keeps_the_finished_runs(deliver, tmp_path):
    child, store_path = _start_train(tmp_path, deliver)
    try:
        if deliver != "import":  # that one the child delivers itself, before any run
            _wait_until(lambda: _recorded_runs(store_path) >= 1 or child.poll() is not None)
            assert child.poll() is None, child.stderr.read().decode()
        if deliver == "gc":
            (tmp_path / "go").touch()  # the child raises SIGTERM in its next gc callback
        elif deliver != "import":
            child.send_signal(signal.SIGTERM if deliver == "sigterm" else signal.SIGINT)
        # Obeyed, not swallowed: ended with 130 before the 200 seeds are through.
        status = child.wait(timeout=60)
        err = child.stderr.read().decode()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        child.stderr.close()
    assert status == 130, err
    assert err.strip().splitlines()[-1].startswith("interrupted:"), err
    assert "Traceback" not in err and "Exception ignored" not in err, err
    if deliver == "import":  # stopped before the command line ran: nothing made, nothing lost
        assert _recorded_runs(store_path) == 0
        return
    db = sqlite3.connect(store_path)
    assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    # Every recorded run is done and has its rows (nothing half-written), and the runs that
    # finished before the signal are among them.
    counts = db.execute("SELECT r.status, COUNT(w.idx) FROM runs r LEFT JOIN rows w "
                        "ON w.run_id = r.run_id GROUP BY r.run_id").fetchall()
    db.close()
    assert 1 <= len(counts) < _TRAIN_SEEDS
    assert all(status == "done" and n > 0 for status, n in counts), counts



# A main thread inside a C call that retries on EINTR runs no signal handler until the call
# returns: here SQLite opening a named pipe, which waits for a writer for good.
_STUCK = """
import sqlite3, sys
from linrnn_bench.harness.measure import lifetime
with lifetime.stop_signals():
    sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True)
"""


def _waiting_in(pid: int) -> str | None:
    """The kernel function process ``pid`` sleeps in (``/proc/<pid>/wchan``)."""
    try:
        return Path(f"/proc/{pid}/wchan").read_text()
    except OSError:
        return None


def test_a_stop_ends_a_command_stuck_in_a_call_that_cannot_be_interrupted(tmp_path):
    if _waiting_in(os.getpid()) is None:
        pytest.skip("this kernel does not say where a process sleeps (/proc/<pid>/wchan)")
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    child = subprocess.Popen([sys.executable, "-c", _STUCK, str(fifo)], stderr=subprocess.PIPE,
                             env={**os.environ, "PYTHONPATH": str(TESTS.parent)})
    try:
        # Stuck in open(), waiting for the pipe's writer.
        _wait_until(lambda: _waiting_in(child.pid) == "wait_for_partner" or child.poll() is not None)
        child.send_signal(signal.SIGTERM)
        status = child.wait(timeout=60)
        err = child.stderr.read().decode()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        child.stderr.close()
    assert status == 130, err
    assert "did not stop within" in err and "rerun the command to resume" in err, err


# A stop that comes while a module is being imported (its top-level code raising the signal
# stands for one that arrives then): raised once the import is done, not inside it.
_IMPORTING = """
import sys, time
from linrnn_bench.harness.measure import lifetime
sys.path.insert(0, sys.argv[1])
try:
    with lifetime.stop_signals():
        import signalled_module
        print("imported", signalled_module.DONE, flush=True)
        time.sleep(60)
except KeyboardInterrupt:
    print("interrupted", "signalled_module" in sys.modules, flush=True)
"""


def test_a_stop_during_an_import_is_raised_once_the_import_is_done(tmp_path):
    (tmp_path / "signalled_module.py").write_text(
        "import signal\nsignal.raise_signal(signal.SIGTERM)\nDONE = True\n")
    done = subprocess.run([sys.executable, "-c", _IMPORTING, str(tmp_path)], timeout=60,
                          capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(TESTS.parent)})
    assert done.stdout.split() == ["imported", "True", "interrupted", "True"], done

def test_end_pool_ends_workers_busy_with_a_long_call():
    import multiprocessing
    import multiprocessing.connection

    from linrnn_bench.harness.measure import lifetime

    pool = lifetime.worker_pool(2)
    before = set(multiprocessing.active_children())
    futures = [pool.submit(time.sleep, 600) for _ in range(2)]
    _wait_until(lambda: all(f.running() for f in futures))
    workers = [p for p in multiprocessing.active_children() if p not in before]
    assert workers and all(p.is_alive() for p in workers)
    lifetime.end_pool(pool)
    # Ended, not left to sleep out their call: each one's sentinel (closed by its exit) is
    # ready at once. (`is_alive` may read a stale "alive" while the executor's thread reaps.)
    ended = multiprocessing.connection.wait([p.sentinel for p in workers], timeout=0)
    assert len(ended) == len(workers)


_MARKED_DRIVER = """
import subprocess, sys, time
from linrnn_bench.harness.measure import lifetime
with lifetime.marked():  # as a local Ray is started: its processes carry the mark
    subprocess.Popen(["sleep", "300"])  # no parent-death signal: orphaned if not reaped
subprocess.Popen(["sleep", "301"])  # started outside the block: not the reaper's to kill
# Holding a file under a folder given to the reaper, as Ray's processes hold their logs.
subprocess.Popen(["sleep", "302"], stdout=open(sys.argv[1] + "/log", "w"))
lifetime.reap_holders(sys.argv[1])
print("ready", flush=True)
time.sleep(300)
"""


def test_kill_9_of_a_driver_ends_the_processes_it_started_marked(tmp_path):
    # The mechanism that ends a local Ray's processes, without Ray: a process started inside
    # `lifetime.marked()`, or holding a file under a folder given to `lifetime.reap_holders`,
    # is killed by the reaper once its driver is killed outright; any other is left alone.
    token = uuid.uuid4().hex
    env = {**os.environ, "PYTHONPATH": str(TESTS.parent), "LINRNN_FAULT_TOKEN": token}
    driver = subprocess.Popen([sys.executable, "-c", _MARKED_DRIVER, str(tmp_path)], env=env,
                              stdout=subprocess.PIPE)
    try:
        assert driver.stdout.readline() == b"ready\n"
        started = {_command(pid) for pid in _grid_processes(token)}
        assert {"sleep 300 ", "sleep 301 ", "sleep 302 "} <= started, started
        driver.send_signal(signal.SIGKILL)
        driver.wait(timeout=10)
        _wait_until(lambda: {_command(p) for p in _grid_processes(token)} == {"sleep 301 "},
                    timeout=10.0)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
        driver.stdout.close()
        for pid in _grid_processes(token):  # the unmarked sleep, ended by hand
            os.kill(pid, signal.SIGKILL)


def test_a_driver_holding_a_reaped_folder_keeps_its_exit_status(tmp_path):
    # A local Ray's driver holds the session folder's log files open itself; at its normal exit
    # the reaper sweeps that folder and must not kill the driver (its status would be 137).
    script = (
        "import sys\n"
        "from linrnn_bench.harness.measure import lifetime\n"
        "held = open(sys.argv[1] + '/log.txt', 'w')\n"
        "lifetime.reap_holders(sys.argv[1])\n"
        "sys.exit(3)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(TESTS.parent)}
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path)], env=env, timeout=60)
    assert done.returncode == 3


@pytest.mark.slow
def test_kill_9_of_a_rendering_report_leaves_no_figure_worker(tmp_path):
    # `report --workers 2` with both figure workers alive (held in their initialiser, after
    # they are tied to the driver), killed outright: the workers and multiprocessing's
    # resource tracker end with it.
    token = uuid.uuid4().hex
    driver, store_path, files = _start_driver(
        tmp_path, token, call="report_main({store!r}, {tmp!r} + '/report')",
        LINRNN_FAULT_SLEEP="120")
    try:
        record_synthetic_accuracy(Store(store_path))  # before the driver reads it (it imports first)
        _wait_until(lambda: len(list(files.glob("worker-*"))) == 2)
        # The driver, two workers, the resource tracker.
        assert len(_grid_processes(token, driver.pid)) >= 4
        stopped_at = _kill_9(driver, tmp_path / "driver.log")
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    _assert_nothing_left(token, files, stopped_at, within=10.0, session=driver.pid)


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("ray") is None,
                    reason="ray is not installed (optional extra: pip install 'linrnn-bench[ray]')")
def test_kill_9_of_a_ray_driver_leaves_no_ray_process(tmp_path):
    # A study on a local Ray, killed while a run is in flight: Ray's servers, agents and
    # workers all end with the driver (Ray starts its agents from its raylet, out of reach of
    # a parent-death signal: the reaper of `harness.measure.lifetime` kills them).
    token = uuid.uuid4().hex
    driver, _, files = _start_driver(tmp_path, token, "ray", LINRNN_FAULT_SLEEP="120")
    try:
        _wait_until(lambda: any(files.glob("start-*")), timeout=240.0)
        started = [_command(pid) for pid in _grid_processes(token, driver.pid)]
        assert any("raylet" in c for c in started), started
        assert any("Agent" in c for c in started), started  # those that used to outlive it
        stopped_at = _kill_9(driver, tmp_path / "driver.log")
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    _assert_nothing_left(token, files, stopped_at, within=10.0, session=driver.pid)


# Addresses of a Ray cluster that cannot be used: one clear line, at once or within the
# connection timeout, before any run.
MALFORMED_RAY_ADDRESSES = {
    "no-port": ("notanaddress", "'notanaddress' is not a Ray address (it names no port)"),
    "other-scheme": ("http://10.0.0.5:8265", "the scheme 'http://' is not Ray's"),
    "bad-port": ("10.0.0.5:70000", "the port '70000' is not a number from 1 to 65535"),
    "bad-host": ("no host:6379", "'no host' is not a host name or IP address"),
    "empty": ("", "it is empty"),
}


@pytest.mark.parametrize("case", list(MALFORMED_RAY_ADDRESSES))
def test_a_malformed_ray_address_is_refused_before_ray_is_touched(case, monkeypatch, capsys):
    from linrnn_bench.harness import executors
    from linrnn_bench.harness.cli import main

    address, why = MALFORMED_RAY_ADDRESSES[case]
    monkeypatch.setattr(executors, "_import_ray", lambda: pytest.fail("Ray was imported"))
    code = main(["study", "accuracy", "--executor", "ray", "--ray-address", address])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert why in err and "accepted: 'auto'" in err and "ray://HOST[:PORT]" in err
    assert "Omit --ray-address" in err


def test_an_unreachable_ray_address_fails_with_one_line_before_any_run(tmp_path, capsys):
    from linrnn_bench.harness.cli import main

    with socket.socket() as s:  # a port nothing listens on: bound, then released
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    store = tmp_path / "store.sqlite"
    code = main(["study", "accuracy", "--preset", "smoke", "models=lru", "--executor", "ray",
                 "--ray-address", f"127.0.0.1:{port}", "--store", str(store)])
    err = capsys.readouterr().err
    assert code == 1 and err.count("\n") == 1, err
    assert f"Cannot reach the Ray cluster at --ray-address '127.0.0.1:{port}'" in err
    assert "connection refused" in err and "omit --ray-address" in err
    assert Store(store).recorded() == {}  # nothing ran


def test_a_silent_host_fails_within_the_connection_timeout(monkeypatch):
    # A connection that never opens (the probe's connect stands in for a host that drops
    # packets) is given up after the timeout, with one line naming it.
    from linrnn_bench.harness import executors

    def silent(address, timeout):
        time.sleep(timeout + 5.0)
        raise TimeoutError  # what the real call does; the probe stopped waiting long before

    monkeypatch.setattr(executors.socket, "create_connection", silent)
    # Had the probe waited for the connection, it would have returned None (it "opened").
    assert executors._probe("10.255.255.1", 6379, 0.5) == "no answer within 0.5 s"


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


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads Linux's /proc")
def test_a_process_near_its_memory_map_limit_lets_go_of_its_compiled_programs():
    """Each compiled CPU program holds memory maps; a worker that compiled a few thousand met
    the kernel's limit and LLVM aborted it (a cpu-full report, 2026-12-06). Past a share of the
    limit the runner lets JAX's compiled programs go, which returns their maps."""
    import jax
    import jax.numpy as jnp

    from linrnn_bench.harness.runner import release_compiled_programs

    def maps() -> int:
        with open("/proc/self/maps", "rb") as f:
            return sum(1 for _ in f)

    programs = 60
    for n in range(1, programs + 1):
        jax.jit(lambda x, n=n: jnp.cumsum(x) * n)(jnp.ones(n)).block_until_ready()
    assert not release_compiled_programs(share=1.0)  # far below the limit: kept
    before = maps()
    assert release_compiled_programs(share=0.0)
    assert maps() <= before - programs  # at least a map a program went with them
