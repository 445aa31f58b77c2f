"""Processes that end with their driver: what guarantees that no long-lived helper process of
the harness outlives it (`harness.measure.processes` starts every process; a command run to its
end, such as ``git``, needs no guarantee).

Whatever starts such processes for the harness (the ``processes`` executor's workers, the
report's figure writers, a fresh process's probe, a local Ray instance) ties them here, so that
none outlives the process that started it (the driver), even when the driver is killed outright
(``kill -9``, out of memory):

- `worker_pool`: a pool of spawned worker processes, each tied to the driver by `tie_to_driver`
  (on Linux the kernel kills a worker the moment the driver dies; elsewhere, and as a second
  line, a thread in the worker exits when it finds itself re-parented). multiprocessing's
  resource tracker, which the pool starts, exits by itself once the driver and the workers,
  the only holders of its pipe, are gone.
- `marked` and `reap_holders`: processes started inside ``with marked():`` (and everything
  they start in turn, as a local Ray's raylet starts its agents and workers) carry a mark in
  their environment, and processes may be named by a folder they hold files open in (a
  local Ray's session folder); a small reaper process, started once per driver, waits on a
  pipe that only the driver holds and, when the driver dies, kills every such process. This
  is for processes the harness does not start itself (Ray's), which a parent-death signal
  cannot reach: Ray's agents are started by its raylet, not by the driver, and outlive it
  (measured with ray 2.60: its dashboard and runtime-env agents were alive a minute later).
- `stop_signals` and `exit_interrupted`: the driver itself ends on Ctrl-C or SIGTERM within
  seconds, with status 130, whatever it was doing when the signal came (a stop is never
  dropped by a callback, and a call that cannot be interrupted is given a grace period), and
  its exit does not tear XLA's runtime down under threads still running.

Imports nothing of the harness (the reaper runs this file as a script, on the standard
library alone).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import multiprocessing
import multiprocessing.connection
import multiprocessing.context
import multiprocessing.process
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, NoReturn

# The environment variable that marks the processes started inside `marked` as the driver's.
MARK_ENV = "LINRNN_DRIVER_MARK"
# How often a worker's watching thread checks its parent (seconds).
_WATCH_INTERVAL_S = 0.2
# How long the reaper keeps killing marked processes after the driver died (a process being
# started at that moment appears a little later), in seconds.
_REAP_FOR_S = 5.0


# ---------------------------------------------------------------------------------------------
# Worker pools


def worker_pool(
    workers: int, initializer: Callable[..., None] | None = None, initargs: tuple[Any, ...] = (),
    *, pin: bool = False,
) -> ProcessPoolExecutor:
    """A pool of ``workers`` spawned processes that end when this process (the driver) ends.

    Spawned, never forked: a fork copies JAX's threads' state. Each worker first runs
    `tie_to_driver`, then (with ``pin``) takes its own share of the cores (`core_shares`), then
    runs ``initializer(*initargs)``. Create the pool and submit to it from the main thread:
    Linux's parent-death signal follows the thread that started a worker.
    """
    context = _RecordingSpawn()
    shares = core_shares(workers) if pin else None
    queued = None
    if shares is not None:
        queued = context.Queue()
        for share in shares:
            queued.put(share)
    pool = ProcessPoolExecutor(
        max_workers=workers,
        mp_context=context,
        initializer=_init_worker,
        initargs=(os.getpid(), initializer, initargs, queued),
    )
    _workers[pool] = context.processes
    return pool


class _RecordingSpawn(multiprocessing.context.SpawnContext):
    """The spawn context, remembering every process it makes: a pool's workers, which
    `end_pool` ends (Python 3.11's executor has no public way to end them, and keeps them in
    a private attribute)."""

    def __init__(self) -> None:
        super().__init__()
        self.processes: list[multiprocessing.process.BaseProcess] = []

    def Process(  # noqa: N802 (multiprocessing's name)
            self, *args: Any, **kwargs: Any) -> multiprocessing.process.BaseProcess:
        process = multiprocessing.get_context("spawn").Process(*args, **kwargs)
        self.processes.append(process)
        return process


# Each pool of `worker_pool`: the processes its context made.
_workers: weakref.WeakKeyDictionary[ProcessPoolExecutor, list[Any]] = (
    weakref.WeakKeyDictionary())


def core_shares(workers: int) -> list[tuple[int, ...]] | None:
    """Disjoint shares of this process's cores, one per worker, their sizes differing by one
    at most (two workers on two cores: one core each), or None where the cores are not shared
    out: one worker, more workers than cores, or an OS that does not say which cores a process
    may use.

    A worker pinned to its share runs its threads (XLA's pool) on those cores alone. Unpinned,
    each worker's threads spread over every core and contend with the other worker's: two
    workers training the accuracy study's cpu runs side by side stepped at 9.2-10.2 ms
    unpinned against 7.6 ms pinned (docs/performance.md, "Where a grid's runs execute"). The
    thread count changes a run's float round-off, as another machine's would; each run
    records it (``xla_cpu_threads`` in its provenance, `harness.provenance.xla_cpu_threads`)
    and the cores it could use (``cpu_affinity``).
    """
    if not hasattr(os, "sched_getaffinity"):
        return None
    cores = sorted(os.sched_getaffinity(0))
    if workers < 2 or workers > len(cores):
        return None
    size, extra = divmod(len(cores), workers)
    bounds = [i * size + min(i, extra) for i in range(workers + 1)]
    return [tuple(cores[a:b]) for a, b in zip(bounds, bounds[1:])]


def _init_worker(
    driver: int, initializer: Callable[..., None] | None, initargs: tuple[Any, ...],
    shares: Any = None,
) -> None:
    tie_to_driver(driver)
    if shares is not None:  # before the initializer, so before JAX starts its threads
        try:
            os.sched_setaffinity(0, shares.get(timeout=10))
        except (queue.Empty, OSError):  # no share left, or refused: the worker runs unpinned
            pass
    if initializer is not None:
        initializer(*initargs)


def tie_to_driver(driver: int) -> None:
    """Make this process (a worker started by process ``driver``) end when the driver ends.

    A worker must not go on with queued work whose results nobody will record, writing files
    beside the store. On Linux the kernel kills the worker the moment the driver dies
    (``PR_SET_PDEATHSIG``); elsewhere, and as a second line, a thread checks every 0.2 s that
    the driver is still the worker's parent. Ctrl-C reaches every process of the terminal's
    group: workers ignore it, and the driver, which catches it, ends them (`end_pool`).
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent()
    if os.getppid() != driver:  # the driver died before the line above took effect
        os._exit(1)
    threading.Thread(target=_watch_driver, args=(driver,), name="watch-driver",
                     daemon=True).start()


def _die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent dies; a no-op elsewhere."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:  # no C library to call: the watching thread is the only guard
        return
    pr_set_pdeathsig = 1  # from <sys/prctl.h>
    libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)


def _watch_driver(driver: int) -> None:
    # Re-parented (to init or a subreaper) means the driver is gone: exit at once, without
    # running cleanup that could write files.
    while os.getppid() == driver:
        time.sleep(_WATCH_INTERVAL_S)
    os._exit(1)


def end_pool(pool: ProcessPoolExecutor) -> None:
    """Stop ``pool``'s work in flight now rather than let it finish unseen, and wait until no
    worker is left. ``pool`` is one of `worker_pool`'s, which knows its workers."""
    workers = list(_workers.get(pool, ()))
    pool.shutdown(wait=False, cancel_futures=True)
    for process in workers:
        process.terminate()
    # Wait for them, so that none outlives the driver's exit (a run in a C++ kernel finishes
    # its call before SIGTERM's default action can end it). Each worker's sentinel, a pipe its
    # exit closes, says it has ended: `is_alive` cannot, as the executor's own thread reaps
    # the same processes, and a poll that loses that race reads "alive".
    left = _still_running(workers, timeout=5.0)
    for process in left:
        process.kill()
    _still_running(left, timeout=5.0)


def _still_running(
        processes: list[Any], timeout: float) -> list[Any]:
    """The processes among ``processes`` that have not ended within ``timeout`` seconds."""
    sentinels = {process.sentinel: process for process in processes
                 if process.pid is not None}  # started (a sentinel exists)
    deadline = time.monotonic() + timeout
    while sentinels:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        for ended in multiprocessing.connection.wait(list(sentinels), timeout=remaining):
            del sentinels[ended]
    return list(sentinels.values())


# ---------------------------------------------------------------------------------------------
# Processes started by others (Ray): a mark in their environment, folders they hold open, and
# a reaper


_reaper: subprocess.Popen | None = None  # this driver's reaper; its stdin is the pipe
_mark: str | None = None
_reaper_lock = threading.Lock()


@contextlib.contextmanager
def marked() -> Iterator[str]:
    """Mark every process started inside the block (and their descendants) as this driver's,
    to be killed when this process dies, however it dies; yields the mark.

    The mark is in the environment only inside the block, so a process started later (a
    user's, from a notebook) is left alone. A process may overwrite its environment's memory
    (Ray's retitle themselves so, and ``/proc`` then shows zeros): give the reaper a folder
    they hold open too (`reap_holders`).
    """
    mark = _start_reaper()
    previous = os.environ.get(MARK_ENV)
    os.environ[MARK_ENV] = mark
    try:
        yield mark
    finally:
        if previous is None:
            os.environ.pop(MARK_ENV, None)
        else:
            os.environ[MARK_ENV] = previous


def reap_holders(folder: str | os.PathLike[str]) -> None:
    """When this process dies, also kill every process holding a file open under ``folder``
    (a folder only this driver's helpers use, such as a local Ray's session folder, where
    each of its processes keeps its log files open)."""
    path = Path(folder).resolve()
    if not path.is_dir() or len(path.parts) < 3:  # never "/" or "/tmp": others' files
        raise ValueError(f"reap_holders needs a folder of this driver's own, got {folder!r}.")
    _start_reaper()
    assert _reaper is not None and _reaper.stdin is not None
    _reaper.stdin.write(os.fsencode(path) + b"\n")
    _reaper.stdin.flush()


def _start_reaper() -> str:
    global _reaper, _mark
    with _reaper_lock:
        if _reaper is None or _reaper.poll() is not None:
            _mark = f"{os.getpid()}-{uuid.uuid4().hex}"
            environ = {k: v for k, v in os.environ.items() if k != MARK_ENV}
            # Run as a script, isolated (``-I -S``: no site-packages, no script folder on the
            # path): the reaper imports only the standard library.
            _reaper = subprocess.Popen(
                [sys.executable, "-I", "-S", str(Path(__file__).resolve()), _mark],
                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, env=environ,
            )
        assert _mark is not None
        return _mark


def _end_reaper() -> None:
    """At a normal exit: close the pipe, so that the reaper makes its last sweep now, and
    collect it (no zombie, no "still running" warning). Registered when this module is first
    imported, before Ray is, so that Ray's own exit handler, which stops its processes
    gracefully, runs first (exit handlers run last-registered first)."""
    if _reaper is not None and _reaper.stdin is not None:
        with contextlib.suppress(OSError):
            _reaper.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            _reaper.wait(timeout=_REAP_FOR_S + 1.0)


atexit.register(_end_reaper)


def driver_processes(mark: str, folders: list[bytes], exclude: tuple[int, ...] = ()
                     ) -> list[int]:
    """Live processes (not zombies), this one and ``exclude`` excepted, whose environment carries
    ``MARK_ENV=mark`` or that hold a file open under one of ``folders``. Linux reads
    ``/proc``; elsewhere psutil, where installed (else none are found)."""
    needle = f"{MARK_ENV}={mark}".encode()
    prefixes = tuple(f.rstrip(b"/") + b"/" for f in folders)
    found = []
    if Path("/proc/self/environ").exists():
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) in (os.getpid(), *exclude):
                continue
            try:
                if (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                    continue
                if needle in (entry / "environ").read_bytes().split(b"\0") or prefixes and any(
                        os.readlink(os.fsencode(fd)).startswith(prefixes)
                        for fd in (entry / "fd").iterdir()):
                    found.append(int(entry.name))
            except (OSError, IndexError):  # ended while we looked, or not ours to read
                continue
        return found
    try:
        import psutil
    except ImportError:
        return found
    for process in psutil.process_iter():
        try:
            if (process.pid in (os.getpid(), *exclude)
                    or process.status() == psutil.STATUS_ZOMBIE):
                continue
            if process.environ().get(MARK_ENV) == mark or prefixes and any(
                    os.fsencode(f.path).startswith(prefixes) for f in process.open_files()):
                found.append(process.pid)
        except (psutil.Error, OSError):
            continue
    return found


def _reap(mark: str) -> None:
    """The reaper's body: collect the folders the driver sends, one a line, until its end of
    the pipe closes (it died, or exited); then kill every process that carries ``mark`` or
    holds a file under those folders, until none is left (or `_REAP_FOR_S` has passed)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the driver's to handle
    # The driver itself is never killed: at a normal exit it closes the pipe while it still
    # holds Ray's log files open, and its exit status is its own.
    driver = os.getppid()
    folders = [line.rstrip(b"\n") for line in sys.stdin.buffer]  # ends at EOF
    deadline = time.monotonic() + _REAP_FOR_S
    while time.monotonic() < deadline:
        left = driver_processes(mark, folders, exclude=(driver,))
        if not left:
            return
        for pid in left:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)


# ---------------------------------------------------------------------------------------------
# Stop signals: Ctrl-C and SIGTERM end the driver, whatever it is doing


# The signals that stop a command: Ctrl-C, and SIGTERM (kill, a scheduler's time limit).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
# The exit status of a command a stop signal ended.
INTERRUPTED = 130
# How long after a stop signal the command has to end by itself (unwinding through the
# runner's and the executors' cleanup, which ends worker pools within 5 s) before the watchdog
# of `stop_signals` ends the process, in seconds.
_STOP_GRACE_S = 10.0
# How soon a stop that Python dropped is delivered again, in seconds (`_unraisable`).
_REDELIVER_S = 0.05


class _Stopping:
    """What `stop_signals` holds while its block runs: the stop signal received, if any, and
    whether the block has ended (which dismisses the watchdog)."""

    def __init__(self, previous_hook: Callable[[Any], Any]) -> None:
        self.signum: int | None = None
        self.ended = threading.Event()
        self.previous_hook = previous_hook


_stopping: _Stopping | None = None


@contextlib.contextmanager
def stop_signals() -> Iterator[None]:
    """Within the block, SIGINT and SIGTERM raise ``KeyboardInterrupt`` in the main thread
    wherever it runs, and are never lost; the caller turns it into exit status 130.

    A handler that raises can land where Python only prints the exception and drops it
    ("Exception ignored in ..."): a garbage-collector callback (JAX's ``_xla_gc_callback``
    runs in every collection), a ``__del__``, a weakref callback. The command would then run
    on to its end. So a dropped ``KeyboardInterrupt`` is delivered again once that callback
    has returned (`_unraisable`); one that comes during an import is raised once the import
    is done (`_on_stop_signal`). And a main thread inside a C call that retries on EINTR
    (SQLite waiting on a locked store, XLA compiling) runs no Python handler until the call
    returns: a watchdog thread, woken by the signal itself (`signal.set_wakeup_fd`), ends the
    process with status 130 if the block has not ended `_STOP_GRACE_S` after it. That loses
    nothing finished: each run is committed to the store in one transaction, checkpoints are
    replaced whole, and workers end with their driver.

    Only the main thread can handle signals; elsewhere (and nested) the block runs unchanged.
    """
    global _stopping
    if threading.current_thread() is not threading.main_thread() or _stopping is not None:
        yield
        return
    stopping = _Stopping(sys.unraisablehook)
    previous = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
    reader, writer = os.pipe()
    os.set_blocking(writer, False)  # the C-level handler must never block on it
    previous_fd = signal.set_wakeup_fd(writer, warn_on_full_buffer=False)
    threading.Thread(target=_watch_for_stop, args=(stopping, reader), name="stop-watchdog",
                     daemon=True).start()
    _stopping, sys.unraisablehook = stopping, _unraisable
    try:
        for signum in STOP_SIGNALS:
            signal.signal(signum, _on_stop_signal)
        yield
    finally:
        stopping.ended.set()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        _stopping, sys.unraisablehook = None, stopping.previous_hook
        signal.set_wakeup_fd(previous_fd)
        os.close(writer)  # the watchdog reads the end of the pipe, and returns


def stop_requested() -> bool:
    """Whether a stop signal has come within the current `stop_signals` block: an exception
    raised since may be the stop's ``KeyboardInterrupt`` turned into another (Python makes
    one raised in a class's ``__set_name__`` a ``RuntimeError``)."""
    return _stopping is not None and _stopping.signum is not None


def _on_stop_signal(signum: int, frame: Any) -> None:
    """The handler of `STOP_SIGNALS`: record the first, and raise; or, inside an import,
    deliver the signal again a moment later, until the import is done: an exception raised in
    the middle of one can leave a C extension half-initialised (a crash on the way out) or
    come out as another exception."""
    stopping = _stopping
    if stopping is not None and stopping.signum is None:
        stopping.signum = signum
    if stopping is not None and _importing(frame):
        _redeliver(stopping)
        return
    raise KeyboardInterrupt


def _importing(frame: Any) -> bool:
    """Whether ``frame`` runs inside an import (below a frame of Python's import system)."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


def _redeliver(stopping: _Stopping) -> None:
    """Send the stop signal to the main thread again `_REDELIVER_S` from now, from another
    thread, unless the block of `stop_signals` has ended by then (the signal's handler would
    then be the one before: the default one, which would kill the process)."""
    main = threading.main_thread().ident

    def send() -> None:
        if not stopping.ended.is_set() and stopping.signum is not None:
            signal.pthread_kill(main, stopping.signum)

    timer = threading.Timer(_REDELIVER_S, send)
    timer.daemon = True
    timer.start()


def _unraisable(unraisable: Any) -> None:
    """``sys.unraisablehook`` within `stop_signals`: a stop's ``KeyboardInterrupt`` that Python
    dropped is delivered again a moment later, when the callback that dropped it has returned
    (delivered from here, it would be raised in this hook and dropped again). Anything else
    goes to the hook that was in place."""
    stopping = _stopping
    if stopping is None or stopping.signum is None or not isinstance(
            unraisable.exc_value, KeyboardInterrupt):
        (stopping.previous_hook if stopping else sys.__unraisablehook__)(unraisable)
        return
    _redeliver(stopping)


def _watch_for_stop(stopping: _Stopping, reader: int) -> None:
    """The watchdog of `stop_signals`: wait for a stop signal on ``reader`` (each signal
    caught writes its number there, even while the main thread is stuck in C), then end the
    process with status 130 unless the block ends within `_STOP_GRACE_S`. Returns when the
    block ends (the pipe's end). The pipe stays open until then: a signal written to a pipe
    nobody reads would be an error of its own."""
    with os.fdopen(reader, "rb", buffering=0) as wakeups:
        while (caught := wakeups.read(1)) and caught[0] not in STOP_SIGNALS:
            pass
        if not caught or stopping.ended.wait(_STOP_GRACE_S):
            return
        # os.write: the main thread may hold the lock of sys.stderr, stuck where it is.
        os.write(2, f"interrupted: the command did not stop within {_STOP_GRACE_S:.0f} s of "
                    "the signal (it was inside a call that cannot be interrupted), so it was "
                    "ended there. Finished runs are in the store; rerun the command to "
                    "resume.\n".encode())
        os._exit(INTERRUPTED)


def exit_interrupted() -> NoReturn:
    """End this process, which a stop signal interrupted, with status 130 now, without the
    interpreter's teardown.

    After a stop, XLA's threads may still be running a program the stop left unfinished, and
    tearing down the runtime under them (JAX's exit handlers clear its backends) can crash
    the process: status 139 after "interrupted" was seen. What must last is written by then:
    each run is committed in one transaction, checkpoints are replaced whole, worker pools
    are ended (and workers and the reaper's processes end with their driver in any case), so
    only the standard streams are flushed.
    """
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(INTERRUPTED)


if __name__ == "__main__":
    _reap(sys.argv[1])
