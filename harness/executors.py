"""Where a grid's runs execute: in this process (the default), in worker processes on this
machine, or as Ray tasks.

An executor maps ``(study, specs)`` to an iterator of `harness.runner.Outcome`, in any order
(see `harness.runner.Executor`). Whatever the executor, only the driver (`run_study`) writes the
store, one run at a time as outcomes come back, so workers never touch the SQLite file.

Why worker processes on a CPU: a short run does not keep two cores busy (much of it is XLA
compilation), so two workers finish a cold grid sooner than one process. Measured on two idle
cores: the cpu accuracy grid 414 s -> 301 s; grids that are almost all compilation (memory,
theory) gain little, two compiles at once sharing the machine. A study marked ``exclusive`` (throughput: it times the machine)
always runs one run at a time in the driver, and says so; the memory study on a CPU compiles
without executing, so its numbers do not depend on what else runs. Each run's provenance records
the executor and how many runs shared the machine (``concurrent_runs``), because a run's own
wall time (e.g. the accuracy study's training seconds) is longer when it shared the cores.

Ray is optional (``pip install 'linrnn-bench[ray]'``, pinned to ray 2.60.0); it is imported
only when the Ray executor is asked for.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from .errors import ExecutorError as ExecutorError  # re-exported: its old import place
from .runner import Executor, Outcome, enable_compilation_cache, execute_unit, local_executor
from .studies import Study, lead

EXECUTORS: tuple[str, ...] = ("local", "processes", "ray")
# Environment variables a worker needs to behave like the driver (checkpoint and cache places).
_FORWARDED_ENV: tuple[str, ...] = (
    "LINRNN_CHECKPOINTS", "LINRNN_CACHE", "LINRNN_JAX_CACHE", "JAX_PLATFORMS", "CI",
)


def make_executor(
    name: str, *, address: str | None = None, cpus_per_run: float = 1.0, workers: int = 2
) -> Executor:
    """The executor called ``name`` (``"local"``, ``"processes"`` or ``"ray"``).

    Arguments:
        name: ``"local"`` runs in this process, one run after another; ``"processes"`` runs up
            to ``workers`` runs at once in fresh worker processes on this machine; ``"ray"``
            runs every pending run as a Ray task.
        address: the Ray cluster to connect to (``"auto"``, ``"ray://host:10001"``, ...);
            None starts a local Ray instance on this machine.
        cpus_per_run: CPUs Ray reserves for one run (so at most cpus / cpus_per_run run at once).
        workers: worker processes of the ``"processes"`` executor.
    """
    if address is not None and name != "ray":
        raise ExecutorError("--ray-address needs --executor ray.")
    if name == "local":
        return local_executor
    elif name == "processes":
        return ProcessExecutor(workers)
    elif name == "ray":
        return RayExecutor(address=address, cpus_per_run=cpus_per_run)
    else:
        raise ExecutorError(f"Unknown executor {name!r}; accepted: {', '.join(EXECUTORS)}.")


def _worker_init(driver: int) -> None:
    """Runs once in each worker process, before its first run.

    A worker lives only as long as its driver (process ``driver``): if the driver is killed
    (``kill -9``, out of memory), the worker must not go on training queued runs whose results
    nobody will record, writing checkpoints beside the store. On Linux the kernel kills the
    worker the moment the driver dies (``PR_SET_PDEATHSIG``); elsewhere, and as a second line,
    a thread checks every 0.2 s that the driver is still the worker's parent. Ctrl-C reaches
    every process of the terminal's group: workers ignore it and the driver, which catches it,
    ends them (`ProcessExecutor.__call__`).
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent()
    if os.getppid() != driver:  # the driver died before the line above took effect
        os._exit(1)
    threading.Thread(target=_watch_driver, args=(driver,), name="watch-driver",
                     daemon=True).start()
    # The driver's compiled programs on disk serve the worker too.
    enable_compilation_cache()


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
        time.sleep(0.2)
    os._exit(1)


def _seed_major(specs: list[Any]) -> list[Any]:
    """``specs`` with every run of the first seed first, then the next seed's, and so on (the
    grid's order within a seed). A seed group (`harness.studies.Group`) goes by its first run."""
    def seed(spec: Any) -> int:
        value = getattr(lead(spec), "seed", None)
        return value if isinstance(value, int) else 0

    return sorted(specs, key=seed)  # stable: the grid's order within a seed


def schedule(study: Study, specs: list[Any]) -> list[Any]:
    """The order in which workers take ``specs``: each program group compiled once, in parallel.

    Runs with the same `Study.programs` key compile the same programs (they differ only in
    data: the seed, the learning rates). Two workers that start two runs of one group at once
    both compile its programs, neither finding them in the persistent cache. So the first run
    of every group goes first, the workers compiling different programs side by side, and the
    other runs follow, seed-major, finding them compiled (`docs/performance.md` has the
    measurement). A study without ``programs`` is taken seed-major: runs that differ only in
    their seed are taken as one group. ``specs`` may hold seed groups (`Study.units`): one unit
    of work each, ordered by its first run.
    """
    ordered = _seed_major(specs)
    if study.programs is None:
        return ordered
    seen: set[Any] = set()
    first, rest = [], []
    for spec in ordered:
        key = study.programs(lead(spec))
        (rest if key in seen else first).append(spec)
        seen.add(key)
    return first + rest


class ProcessExecutor:
    """Runs up to ``workers`` pending runs at once, each in a worker process on this machine.

    Workers are started with ``spawn`` (JAX and ``fork`` do not mix) and live for the whole
    grid, so a worker compiles a program once and its later runs of the same shapes reuse it;
    inside ``with executor:`` they live until the block ends, serving every grid run in it
    (``report --run`` runs its studies so: no start-up per study, and programs compiled for
    one study, such as the training step the accuracy and stability studies share, stay in
    the workers' memory for the next). Runs are taken in `schedule`'s order and outcomes come
    back in the order runs finish. If a worker process dies (killed, out of memory), the runs
    finished so far are already recorded and the grid stops with an `ExecutorError`; rerunning
    resumes it. If the driver is interrupted (Ctrl-C, SIGTERM through `harness.cli`), it ends
    its workers before it exits; if it is killed outright, the workers end with it
    (`_worker_init`). Either way no worker outlives the grid.
    """

    def __init__(self, workers: int):
        # Imported here: `models` loads JAX, which the command line needs only to compute.
        from models import _validate

        if not _validate.is_integer(workers) or workers < 1:
            raise ExecutorError(f"workers must be a positive integer, got {workers!r}.")
        self.workers = workers
        self._kept: ProcessPoolExecutor | None = None  # the pool of a ``with`` block
        self._keep = False

    @property
    def provenance(self) -> dict[str, Any]:
        """What each run's provenance records about where it ran (`harness.runner.run_study`)."""
        return {"executor": "processes", "concurrent_runs": self.workers}

    def __enter__(self) -> ProcessExecutor:
        self._keep = True
        return self

    def __exit__(self, kind: Any, error: Any, trace: Any) -> None:
        self._keep = False
        pool, self._kept = self._kept, None
        if pool is not None:
            if kind is None:
                pool.shutdown(wait=True)
            else:
                _end(pool)

    def _pool(self, runs: int) -> ProcessPoolExecutor:
        if self._kept is not None:
            return self._kept
        pool = ProcessPoolExecutor(
            max_workers=self.workers if self._keep else min(self.workers, runs),
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_worker_init,
            initargs=(os.getpid(),),
        )
        if self._keep:
            self._kept = pool
        return pool

    def __call__(self, study: Study, specs: list[Any]) -> Iterator[Outcome]:
        if not specs:
            return
        pool = self._pool(len(specs))
        finished = False
        try:
            # A unit is one run or a seed group, which one worker trains as one program.
            futures = [pool.submit(execute_unit, study, unit) for unit in schedule(study, specs)]
            for future in as_completed(futures):
                try:
                    yield from future.result()
                except BrokenProcessPool:
                    raise ExecutorError(
                        f"A worker process of the {study.name} grid died (killed or out of "
                        "memory); the finished runs are recorded, rerun the command to resume."
                    ) from None
            finished = True
        finally:
            if not finished:
                self._kept = None
                _end(pool)
            elif pool is not self._kept:
                pool.shutdown(wait=True)


def _end(pool: ProcessPoolExecutor) -> None:
    """Stop ``pool``'s runs in flight now rather than let them finish unseen (Python 3.11's
    executor has no public way to end its workers), and wait until no worker is left."""
    workers = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for process in workers:
        process.terminate()
    # Wait for them, so that none outlives the driver's exit (a run in a C++ kernel finishes
    # its call before SIGTERM's default action can end it).
    for process in workers:
        process.join(timeout=5.0)
        if process.is_alive():
            process.kill()
            process.join(timeout=5.0)


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ExecutorError(
            "The Ray executor needs ray, which is not installed. Install the optional extra: "
            "pip install 'linrnn-bench[ray]' (or ray==2.60.0)."
        ) from None
    return ray


def _execute_remote(study: Study, unit: Any) -> list[Outcome]:
    # Runs in a Ray worker: the same `execute_unit` as the local executor, so a failing or
    # diverging run comes back as an Outcome, never as a Ray task error.
    enable_compilation_cache()
    return execute_unit(study, unit)


class RayExecutor:
    """Runs each pending run as a Ray task and yields outcomes as they finish."""

    def __init__(self, *, address: str | None = None, cpus_per_run: float = 1.0):
        if not cpus_per_run > 0:
            raise ExecutorError(f"cpus_per_run must be positive, got {cpus_per_run!r}.")
        self.address = address
        self.cpus_per_run = cpus_per_run
        self.ray = _import_ray()

    @property
    def provenance(self) -> dict[str, Any]:
        return {"executor": "ray", "concurrent_runs": None}  # the cluster decides

    def _connect(self) -> None:
        if self.ray.is_initialized():
            return
        env: Mapping[str, str] = {k: os.environ[k] for k in _FORWARDED_ENV if k in os.environ}
        try:
            self.ray.init(
                address=self.address,
                include_dashboard=False,
                logging_level="warning",
                log_to_driver=False,
                runtime_env={"env_vars": dict(env)},
            )
        except ConnectionError as e:
            raise ExecutorError(f"Cannot reach the Ray cluster at {self.address!r}: {e}") from None

    def __call__(self, study: Study, specs: list[Any]) -> Iterator[Outcome]:
        if not specs:
            return
        self._connect()
        remote = self.ray.remote(num_cpus=self.cpus_per_run, max_retries=0)(_execute_remote)
        study_ref = self.ray.put(study)
        pending = [remote.remote(study_ref, spec) for spec in specs]
        try:
            while pending:
                done, pending = self.ray.wait(pending, num_returns=1)
                yield from self.ray.get(done[0])
        finally:
            # An interrupted driver records nothing more; unfinished runs are rerun next time.
            for ref in pending:
                self.ray.cancel(ref, force=True)
