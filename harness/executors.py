"""Where a grid's runs execute: in this process (the default) or as Ray tasks.

An executor maps ``(study, specs)`` to an iterator of `harness.runner.Outcome`, in any order
(see `harness.runner.Executor`). Whatever the executor, only the driver (`run_study`) writes the
store, one run at a time as outcomes come back, so workers never touch the SQLite file.

Ray is optional (``pip install 'linrnn-bench[ray]'``, pinned to ray 2.60.0); it is imported
only when the Ray executor is asked for.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from typing import Any

from .runner import Executor, Outcome, enable_compilation_cache, execute, local_executor
from .studies import Study

EXECUTORS: tuple[str, ...] = ("local", "ray")
# Environment variables a worker needs to behave like the driver (checkpoint and cache places).
_FORWARDED_ENV: tuple[str, ...] = (
    "LINRNN_CHECKPOINTS", "LINRNN_CACHE", "LINRNN_JAX_CACHE", "JAX_PLATFORMS", "CI",
)


class ExecutorError(RuntimeError):
    """An executor that cannot start (unknown name, Ray missing or unreachable)."""


def make_executor(
    name: str, *, address: str | None = None, cpus_per_run: float = 1.0
) -> Executor:
    """The executor called ``name`` (``"local"`` or ``"ray"``).

    Arguments:
        name: ``"local"`` runs in this process, one run after another; ``"ray"`` runs every
            pending run as a Ray task.
        address: the Ray cluster to connect to (``"auto"``, ``"ray://host:10001"``, ...);
            None starts a local Ray instance on this machine.
        cpus_per_run: CPUs Ray reserves for one run (so at most cpus / cpus_per_run run at once).
    """
    if name == "local":
        if address is not None:
            raise ExecutorError("--ray-address needs --executor ray.")
        return local_executor
    elif name == "ray":
        return RayExecutor(address=address, cpus_per_run=cpus_per_run)
    else:
        raise ExecutorError(f"Unknown executor {name!r}; accepted: {', '.join(EXECUTORS)}.")


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ExecutorError(
            "The Ray executor needs ray, which is not installed. Install the optional extra: "
            "pip install 'linrnn-bench[ray]' (or ray==2.60.0)."
        ) from None
    return ray


def _execute_remote(study: Study, spec: Any) -> Outcome:
    # Runs in a Ray worker: the same `execute` as the local executor, so a failing or diverging
    # run comes back as an Outcome, never as a Ray task error.
    enable_compilation_cache()
    return execute(study, spec)


class RayExecutor:
    """Runs each pending run as a Ray task and yields outcomes as they finish."""

    def __init__(self, *, address: str | None = None, cpus_per_run: float = 1.0):
        if not cpus_per_run > 0:
            raise ExecutorError(f"cpus_per_run must be positive, got {cpus_per_run!r}.")
        self.address = address
        self.cpus_per_run = cpus_per_run
        self.ray = _import_ray()

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
                yield self.ray.get(done[0])
        finally:
            # An interrupted driver records nothing more; unfinished runs are rerun next time.
            for ref in pending:
                self.ray.cancel(ref, force=True)
