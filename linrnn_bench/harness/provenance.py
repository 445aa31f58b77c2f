"""Where a number came from: commit, tree state, library versions, backend and hardware."""

from __future__ import annotations

import functools
import os
import platform
import re
from datetime import datetime, timezone
from importlib import metadata
from typing import Any

import pandas as pd

from linrnn_bench import paths

from . import process_settings
from .measure.processes import command_output

# The libraries whose versions a run records, this project's own first (an installed wheel has
# no commit to record); the report states them in the same order.
LIBRARIES = ("linrnn-bench", "jax", "jaxlib", "equinox", "flax", "optax", "numpy", "pandas")
# Process settings that change speed or memory (the Makefile sets the first two): recorded as
# set, "" where unset.
SETTINGS = ("GLIBC_TUNABLES", "OPENBLAS_NUM_THREADS", "XLA_FLAGS", "LD_PRELOAD")
# The variables XLA's CPU client reads, in this order, for the size of its thread pool; the
# first that holds an integer wins (xla/pjrt/cpu, ``DefaultThreadPoolSize``).
THREAD_VARIABLES = ("PJRT_NPROC", "NPROC")
_INTEGER = re.compile(r"\s*[+-]?\d+\s*")


def xla_cpu_threads() -> int:
    """The threads XLA's CPU backend divides a program's sums and matrix products among.

    Their number changes the order of the float additions, so a run's numbers depend on it
    (docs/presets.md, "Where a grid's runs execute"): ``$PJRT_NPROC`` or ``$NPROC`` where one
    holds an integer, else the cores this process may use (a worker of the processes executor
    has its share of them). 0 gives one thread's numbers, so at least 1. XLA reads them once,
    when the backend starts; `_static` starts it first.
    """
    for name in THREAD_VARIABLES:
        value = os.environ.get(name)
        if value is not None and _INTEGER.fullmatch(value):
            return max(1, int(value))
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def thread_counts(runs: pd.DataFrame) -> list[int]:
    """The distinct XLA CPU thread counts (`xla_cpu_threads`) of ``runs`` (`Store.runs`), in
    order: for a run recorded before the count was, the cores it could use, which set it then
    (``cpu_affinity``); a run that records neither counts for none."""
    def column(name: str) -> pd.Series:
        values = runs[name] if name in runs.columns else pd.Series(None, index=runs.index)
        return pd.to_numeric(values, errors="coerce")

    counts = column("prov.xla_cpu_threads").fillna(column("prov.cpu_affinity")).dropna()
    return sorted({int(c) for c in counts})


def _git(*args: str) -> str | None:
    """A git command in this project's checkout; None for an installed wheel (whose folder may
    sit inside another repository, whose commit says nothing about this code)."""
    root = paths.checkout()
    return None if root is None else command_output(["git", *args], cwd=root, timeout_s=10)


@functools.cache
def _static() -> dict[str, Any]:
    import jax

    devices = jax.devices()
    versions = {}
    for lib in LIBRARIES:
        try:
            versions[lib] = metadata.version(lib)
        except metadata.PackageNotFoundError:
            versions[lib] = None
    return {
        "git_commit": _git("rev-parse", "HEAD"),
        "git_dirty": bool(_git("status", "--porcelain", "--untracked-files=no")),
        "versions": versions,
        "python": platform.python_version(),
        "backend": jax.default_backend(),
        "device_kind": devices[0].device_kind if devices else None,
        "device_count": len(devices),
        "cpu_count": os.cpu_count(),
        # The cores this process may run on (a worker of the processes executor has its own
        # share of them, `harness.measure.lifetime.core_shares`); None where the OS cannot say.
        "cpu_affinity": (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                         else None),
        "xla_cpu_threads": xla_cpu_threads(),
        "machine": platform.machine(),
        "processor": platform.processor() or None,
        "settings": {name: os.environ.get(name, "") for name in SETTINGS},
        # set in this process by `process_settings.apply`, or ""
        "malloc": process_settings.applied,
    }


def provenance() -> dict[str, Any]:
    """A JSON-ready dict describing this process: commit, dirty tree, versions, device, and
    (only when there are any) the models registered from outside this package, each with its
    import path and the sha256 of its source file, as the commit says nothing about them."""
    out = dict(_static())
    outside = outside_models()
    if outside:
        out["outside_models"] = outside
    return out


def outside_models() -> dict[str, dict[str, Any]]:
    """``{name: {"origin": "module:Layer", "source_sha256": hex}}`` of every registered model
    that is not one of this package's."""
    from linrnn_bench import models

    return {
        m.name: {"origin": m.origin, "source_sha256": m.source_sha256}
        for m in models.infos() if m.origin != models.BUILTIN
    }


def now() -> str:
    """The current UTC time in ISO 8601, seconds precision."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
