"""Where a grid's runs execute: in this process (the default), in worker processes on this
machine, or as Ray tasks.

An executor maps ``(study, specs)`` to an iterator of `harness.runner.Outcome`, in any order
(see `harness.runner.Executor`). Whatever the executor, only the driver (`run_study`) writes the
store, one run at a time as outcomes come back, so workers never touch the SQLite file.

Why worker processes on a CPU: a short run does not keep the cores busy (much of it is XLA
compilation), so two workers finish a cold grid sooner than one process (measured in
docs/performance.md, "Where a grid's runs execute"); grids that are almost all compilation
(memory, theory) gain little, two compiles at once sharing the machine. A study marked
``exclusive`` (throughput: it times the machine) always runs one run at a time in the driver,
and says so; the memory study on a CPU compiles
without executing, so its numbers do not depend on what else runs. Each run's provenance records
the executor and how many runs shared the machine (``concurrent_runs``), because a run's own
wall time (e.g. the accuracy study's training seconds) is longer when it shared the cores, and
XLA's CPU thread count (``xla_cpu_threads``): a worker pinned to its share of the cores has
fewer threads than a local run, which changes a wide network's numbers at float round-off
(docs/presets.md, "Where a grid's runs execute"; ``PJRT_NPROC`` sets the count).

Ray is optional (``pip install 'linrnn-bench[ray]'``, pinned to ray 2.60.0); it is imported
only when the Ray executor is asked for. Worker processes, and the processes of a Ray started
here, end with the driver however it ends (`harness.measure.lifetime`).
"""

from __future__ import annotations

import importlib.util
import os
import re
import socket
import threading
from collections.abc import Iterator, Mapping
from concurrent.futures import as_completed
from typing import Any

from . import process_settings
from .errors import ExecutorError as ExecutorError  # re-exported: its old import place
from .measure import lifetime, processes
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
        address: the Ray cluster to connect to: ``"auto"``, ``"HOST:PORT"`` (its head node)
            or ``"ray://HOST[:PORT]"`` (Ray Client); checked at once (`ray_endpoint`). None
            starts a local Ray instance on this machine.
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


def _worker_init() -> None:
    """Runs once in each worker process, before its first run (after
    `harness.measure.lifetime.tie_to_driver`, which ends the worker with its driver, and after
    it took its share of the cores, `harness.measure.lifetime.core_shares`): the driver's
    compiled programs on disk serve the worker too. The process settings first, before JAX
    starts its threads (`harness.process_settings`)."""
    process_settings.apply()
    enable_compilation_cache()


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
    (`harness.measure.lifetime.tie_to_driver`). Either way no worker outlives the grid.
    """

    def __init__(self, workers: int):
        # Imported here: `models` loads JAX, which the command line needs only to compute.
        from linrnn_bench import validation

        if not validation.is_integer(workers) or workers < 1:
            raise ExecutorError(f"workers must be a positive integer, got {workers!r}.")
        self.workers = workers
        self._kept: processes.WorkerPool | None = None  # the pool of a ``with`` block
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
                processes.end_pool(pool)

    def _pool(self, runs: int) -> processes.WorkerPool:
        if self._kept is not None:
            return self._kept
        # Each worker on its own share of the cores (`lifetime.core_shares`).
        pool = processes.worker_pool(
            self.workers if self._keep else min(self.workers, runs), _worker_init, pin=True)
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
                except processes.BrokenWorkerPool:
                    raise ExecutorError(
                        f"A worker process of the {study.name} grid died (killed or out of "
                        "memory); the finished runs are recorded, rerun the command to resume."
                    ) from None
            finished = True
        finally:
            if not finished:
                self._kept = None
                processes.end_pool(pool)
            elif pool is not self._kept:
                pool.shutdown(wait=True)


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
    process_settings.apply()
    enable_compilation_cache()
    return execute_unit(study, unit)


# How long connecting to a Ray cluster (``--ray-address``) may take before the executor gives
# up with an error: an address where nothing answers (no such host, nothing listening, packets
# dropped) fails within it. A port that answers but is not a Ray cluster's fails after Ray's
# own waits for one attempt (`_RAY_ATTEMPTS`).
RAY_CONNECT_TIMEOUT_S = 30.0
RAY_CLIENT_PORT = 10001  # Ray Client's port when a ray:// address names none
_RAY_ADDRESSES = (
    "'auto' (the cluster this machine belongs to), HOST:PORT (a cluster's head node, e.g. "
    "10.0.0.5:6379) or ray://HOST[:PORT] (Ray Client, e.g. ray://10.0.0.5:10001)"
)
_HOST = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_]([A-Za-z0-9_.\-]*[A-Za-z0-9_])?)$")
# Ray's own retries of a connection (read when ray.init connects): one attempt, so that a port
# that accepts connections but is not a Ray cluster's fails after Ray's own waits for one
# attempt (about 40 s at ray 2.60's defaults) rather than after twenty.
_RAY_ATTEMPTS = {"RAY_gcs_server_port_wait_time_s": "1"}


def ray_endpoint(address: str) -> tuple[str, int] | None:
    """The ``(host, port)`` a ``--ray-address`` names (None for ``"auto"``), checked without
    touching Ray; an `ExecutorError` naming the accepted forms if ``address`` is malformed."""
    def malformed(why: str) -> ExecutorError:
        return ExecutorError(
            f"--ray-address {address!r} is not a Ray address ({why}); accepted: "
            f"{_RAY_ADDRESSES}. Omit --ray-address to start Ray on this machine."
        )

    if not isinstance(address, str) or not address.strip():
        raise malformed("it is empty")
    if address == "auto":
        return None
    rest, client = address, address.startswith("ray://")
    if client:
        rest = address[len("ray://"):]
    elif "://" in address:
        raise malformed(f"the scheme {address.split('://')[0] + '://'!r} is not Ray's")
    host, colon, port = rest.rpartition(":")
    if not colon or rest.startswith("[") and rest.endswith("]"):  # no port
        if not client:
            raise malformed("it names no port")
        host, port = rest, str(RAY_CLIENT_PORT)
    if not _HOST.match(host):
        raise malformed(f"{host!r} is not a host name or IP address")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise malformed(f"the port {port!r} is not a number from 1 to 65535")
    return host.strip("[]"), int(port)


def _first_line(error: BaseException) -> str:
    """The first line of ``error``'s message, without its final full stop (or its type's name
    if it has none): Ray's messages run to many lines."""
    lines = str(error).strip().splitlines()
    return (lines[0] if lines else type(error).__name__).rstrip(".")


def _probe(host: str, port: int, timeout: float) -> str | None:
    """None if a TCP connection to ``host:port`` opens within ``timeout`` seconds, else why not
    (name resolution included: it runs in a thread, so a resolver that hangs is bounded too)."""
    why: list[str] = []

    def attempt() -> None:
        try:
            socket.create_connection((host, port), timeout=timeout).close()
        except socket.gaierror:
            why.append(f"the host name {host!r} does not resolve")
        except ConnectionRefusedError:
            why.append(f"nothing listens on port {port} there (connection refused)")
        except TimeoutError:
            why.append(f"no answer within {timeout:g} s")
        except OSError as e:
            why.append(e.strerror or str(e))
        else:
            why.append("")

    thread = threading.Thread(target=attempt, name="probe-ray", daemon=True)
    thread.start()
    thread.join(timeout)
    if not why:
        return f"no answer within {timeout:g} s"
    return why[0] or None


class RayExecutor:
    """Runs each pending run as a Ray task and yields outcomes as they finish.

    Without an address it starts Ray on this machine (no dashboard), tied to the driver's life:
    every process that Ray starts is killed when the driver dies, however it dies
    (`harness.measure.lifetime.marked`, `harness.measure.lifetime.reap_holders`). With an
    address it connects to that cluster, checked first: a malformed address is an `ExecutorError` at once, before Ray is imported; one that does
    not answer within ``connect_timeout`` seconds (`RAY_CONNECT_TIMEOUT_S`) is one when the
    first grid starts.
    """

    def __init__(self, *, address: str | None = None, cpus_per_run: float = 1.0,
                 connect_timeout: float = RAY_CONNECT_TIMEOUT_S):
        if not cpus_per_run > 0:
            raise ExecutorError(f"cpus_per_run must be positive, got {cpus_per_run!r}.")
        if not connect_timeout > 0:
            raise ExecutorError(f"connect_timeout must be positive, got {connect_timeout!r}.")
        self.endpoint = ray_endpoint(address) if address is not None else None
        if address is not None and address.startswith("ray://") and (
                importlib.util.find_spec("grpc") is None):
            raise ExecutorError(
                f"--ray-address {address!r} connects through Ray Client, which needs the "
                "grpcio package: pip install 'ray[client]==2.60.0'; or give the head node's "
                "HOST:PORT (e.g. 10.0.0.5:6379) from a machine in the cluster."
            )
        self.address = address
        self.cpus_per_run = cpus_per_run
        self.connect_timeout = connect_timeout
        self.ray = _import_ray()

    @property
    def provenance(self) -> dict[str, Any]:
        return {"executor": "ray", "concurrent_runs": None}  # the cluster decides

    def _connect(self) -> None:
        if self.ray.is_initialized():
            return
        env: Mapping[str, str] = {k: os.environ[k] for k in _FORWARDED_ENV if k in os.environ}
        options = dict(include_dashboard=False, logging_level="warning", log_to_driver=False,
                       runtime_env={"env_vars": dict(env)})
        if self.address is None:
            try:
                # Every process Ray starts ends with this one: its servers by Ray's own
                # parent-death signal, the rest (agents, workers) by the reaper, which finds
                # them by the mark or by their log files, open in Ray's session folder.
                with lifetime.marked():  # "local": a new instance, never a `ray start` one
                    context = self.ray.init(address="local", **options)
                lifetime.reap_holders(context.address_info["session_dir"])
            except Exception as e:  # noqa: BLE001 - Ray's start-up errors vary by version
                raise ExecutorError(
                    f"Ray could not start on this machine: {_first_line(e)}. Run `ray stop` "
                    "if an earlier Ray is left over, or use --executor processes."
                ) from e
            return
        if self.endpoint is not None:
            why = _probe(*self.endpoint, self.connect_timeout)
            if why is not None:
                raise ExecutorError(self._unreachable(why))
        # The address answers: bound Ray's own retries too, for a port that is not Ray's.
        unset = {k: v for k, v in _RAY_ATTEMPTS.items() if k not in os.environ}  # user's win
        os.environ.update(unset)
        try:
            self.ray.init(address=self.address, **options)
        except Exception as e:  # noqa: BLE001 - Ray's errors vary by address kind and version
            why = _first_line(e)
            if (self.endpoint is None and isinstance(e, ConnectionError)  # "auto"
                    and not os.environ.get("RAY_ADDRESS")):
                why = ("no running Ray cluster was found for this machine (RAY_ADDRESS is "
                       "unset and none was started here with `ray start --head`)")
            raise ExecutorError(self._unreachable(why)) from e
        finally:
            for k in unset:
                os.environ.pop(k, None)

    def _unreachable(self, why: str) -> str:
        return (
            f"Cannot reach the Ray cluster at --ray-address {self.address!r}: {why}. Check "
            "that the cluster is up and that this is its head node's address (`ray status` "
            "on the head prints it), or omit --ray-address to start Ray on this machine."
        )

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
