"""Run a study's grid: skip what the store already holds, record every run whatever happens.

Each run of a grid is independent. A run is executed, then recorded in one transaction with its
status (done, diverged, failed) and provenance; a finished run is never recomputed unless
``fresh``. ``diverged`` is a result: the loss or state went non-finite during training. A run
non-finite at step 1 (before any update) is recorded as ``failed``, with a configuration error:
its configuration cannot train, and failed runs are retried. The executor decides where runs
execute (here, in-process, or on Ray); the store is written by this process alone, as results
come back.
"""

from __future__ import annotations

import dataclasses
import gc
import os
import sys
import traceback
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from linrnn_bench import paths

from . import config as _config
from .measure.timing import Stopwatch
from .provenance import now, provenance, thread_counts
from .store import Store
from .errors import Diverged
from .studies import Group, Study


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What executing one run produced, ready to record."""

    run_id: str
    status: str
    rows: list[dict[str, Any]]
    error: str | None
    started_at: str
    finished_at: str
    seconds: float
    provenance: dict[str, Any]


def execute(study: Study, spec: Any) -> Outcome:
    """Execute one run of ``study``; never raises for a failing or diverging run."""
    started, clock = now(), Stopwatch()
    try:
        result: list[dict[str, Any]] | Exception = study.run(spec)
    except KeyboardInterrupt:
        raise
    except Exception as e:  # a failed run is a row with its error; the grid goes on
        result = e
    return _outcome(study, spec, result, started, clock.elapsed(),
                    {**provenance(), "seed_group": 1})


def execute_group(study: Study, specs: tuple[Any, ...] | list[Any]) -> list[Outcome]:
    """Execute a seed group (`Study.run_group`): one outcome per run, as `execute` would give
    it, each run's provenance saying it was trained in a group of k (``seed_group``) and its
    ``seconds`` the group's divided by k. Never raises for failing or diverging runs."""
    started, clock = now(), Stopwatch()
    assert study.run_group is not None
    try:
        results: list[Any] = list(study.run_group(list(specs)))
        if len(results) != len(specs):
            raise RuntimeError(f"run_group gave {len(results)} results for {len(specs)} runs")
    except KeyboardInterrupt:
        raise
    except Exception as e:  # the whole group failed: every run is recorded as failed
        results = [e] * len(specs)
    seconds = clock.elapsed() / len(specs)
    where = {**provenance(), "seed_group": len(specs)}
    return [_outcome(study, spec, result, started, seconds, where)
            for spec, result in zip(specs, results)]


def execute_unit(study: Study, unit: Any) -> list[Outcome]:
    """Execute a unit of work (`Study.units`): a `harness.studies.Group` or one spec; then let
    go of the process's compiled programs if they near its limit of memory maps
    (`release_compiled_programs`)."""
    outcomes = execute_group(study, unit.specs) if isinstance(unit, Group) else [
        execute(study, unit)]
    release_compiled_programs()
    return outcomes


# Past this share of the process's limit of memory maps, its compiled programs are let go.
MAP_SHARE = 0.5


def release_compiled_programs(share: float = MAP_SHARE) -> bool:
    """Drop JAX's compiled programs (`jax.clear_caches`) when the process's memory maps exceed
    ``share`` of the kernel's limit (``vm.max_map_count``); True if it did.

    Each compiled CPU program keeps about 20 maps, so a process that compiles a few thousand
    (a worker serving a whole cpu-full report) reaches Linux's default limit of 65530, and LLVM
    then aborts it ("Unable to allocate section memory"). A program needed again is compiled
    again, or read from the compilation cache on disk (`enable_compilation_cache`). Nothing
    happens where ``/proc`` does not say (not Linux) or JAX is not loaded."""
    if "jax" not in sys.modules:
        return False
    try:
        limit = int(Path("/proc/sys/vm/max_map_count").read_text())
        with open("/proc/self/maps", "rb") as maps:
            used = sum(1 for _ in maps)
    except (OSError, ValueError):
        return False
    if used <= share * limit:
        return False
    import jax  # loaded already (checked above)

    jax.clear_caches()
    gc.collect()
    return True


def _outcome(study: Study, spec: Any, result: list[dict[str, Any]] | Exception, started: str,
             seconds: float, where: dict[str, Any]) -> Outcome:
    error: str | None = None
    if isinstance(result, Diverged):
        e = result
        if e.step is not None and e.step <= 1:
            # Non-finite before any update took effect: the initial parameters (or the data)
            # cannot train, which says nothing about training. A failed run, not a result:
            # it is retried next time, and never reported as a divergence.
            rows, status = [], "failed"
            error = (f"ConfigError: {e}, before any update: the configuration gives a "
                     "non-finite loss or gradient at initialisation; this is not a divergence "
                     "in training. Check the layer's options and the task's inputs.")
        else:
            rows, status, error = e.rows, "diverged", str(e)
    elif isinstance(result, Exception):
        rows, status = [], "failed"
        trace = "".join(traceback.format_exception(result, limit=8))
        error = f"{type(result).__name__}: {result}\n{trace}"
    else:
        rows, status = result, "done"
    return Outcome(
        run_id=study.run_id(spec),
        status=status,
        rows=rows,
        error=error,
        started_at=started,
        finished_at=now(),
        seconds=seconds,
        provenance=where,
    )


# An executor maps (study, units) to an iterator of outcomes, in any order: a unit is a spec or
# a `harness.studies.Group` of specs (`Study.units`), and each spec gives one outcome.
Executor = Callable[[Study, list[Any]], Iterator[Outcome]]


def local_executor(study: Study, units: list[Any]) -> Iterator[Outcome]:
    for unit in units:
        yield from execute_unit(study, unit)


@dataclasses.dataclass(frozen=True)
class Summary:
    study: str
    total: int
    skipped: int
    counts: dict[str, int]
    seconds: float


def check_seeds(specs: Iterable[Any]) -> None:
    """Raise `ConfigError` before anything runs if a spec's ``seed`` is out of the accepted
    range (`harness.config.check_seed`): found after the run, it could not be recorded."""
    for spec in specs:
        seed = getattr(spec, "seed", None)
        if seed is not None:
            _config.check_seed(seed, "seed")


def pending(study: Study, specs: Iterable[Any], store: Store, *, fresh: bool) -> list[Any]:
    """The specs whose run is not yet recorded as done (all of them if ``fresh``)."""
    recorded = store.recorded(study.name)
    out = []
    for spec in specs:
        status = recorded.get(study.run_id(spec))
        if fresh or status is None or status == "failed":
            # Failed runs are retried (the failure may have been the machine's); done and
            # diverged ones are results.
            out.append(spec)
    return out


def run_study(
    study: Study,
    config: Any,
    *,
    store: Store,
    fresh: bool = False,
    executor: Executor = local_executor,
    progress: bool = True,
) -> Summary:
    """Run every pending run of ``study`` at ``config`` (bound to ``store``, `Study.bind`) and
    record each as it completes.

    A grid that reads the store (`Study.from_store`) is built again once its pending runs are
    recorded, and the runs it has gained are run in turn (the accuracy study's grid grows where
    a cell's selected learning rates lie at its end), until it gains none; each run is tried
    once per call."""
    clock = Stopwatch()
    counts: dict[str, int] = {}
    tried: set[str] = set()
    first_total = first_todo = None
    while True:
        # A grid that reads the store (`Study.from_store`) reads the one its runs go to.
        specs = study.grid(study.bind(config, store))
        check_seeds(specs)
        todo = [s for s in pending(study, specs, store, fresh=fresh and not tried)
                if study.run_id(s) not in tried]
        if first_total is None:
            first_total, first_todo = len(specs), len(todo)
        if not todo:
            break
        tried.update(study.run_id(s) for s in todo)
        executor = _run_pending(study, config, todo, store, executor, counts, progress)
        if study.from_store is None:
            break
    done_before = first_total - first_todo
    return Summary(study.name, len(specs), done_before, counts, clock.elapsed())


def _run_pending(study: Study, config: Any, todo: list[Any], store: Store, executor: Executor,
                 counts: dict[str, int], progress: bool) -> Executor:
    """Run ``todo`` on ``executor`` and record each outcome as it completes (adding to
    ``counts``); returns the executor the runs used."""
    if study.exclusive and executor is not local_executor and todo:
        print(f"note: {study.name} measures the machine, so its runs run one at a time in this "
              "process, not on the executor asked for.")
        executor = local_executor
    # Where the runs ran, in each run's provenance: a run that shared the cores took longer.
    where = getattr(executor, "provenance", {"executor": "local", "concurrent_runs": 1})
    bar = progress_bar(len(todo), f"{study.name}", enabled=progress)
    before = _recorded_threads(store, study, todo)
    made: set[int] = set()
    try:
        units = study.units(config, todo)
        for outcome, spec in _with_specs(executor(study, units), study, todo):
            store.record(
                run_id=outcome.run_id,
                study=study.name,
                status=outcome.status,  # type: ignore[arg-type]
                config=_config.to_dict(spec),
                config_hash=_config.config_hash(spec),
                seed=getattr(spec, "seed", None),
                provenance={**outcome.provenance, **where,
                            "seconds": round(outcome.seconds, 3),
                            "study_version": study.version},
                rows=outcome.rows,
                error=outcome.error,
                started_at=outcome.started_at,
                finished_at=outcome.finished_at,
            )
            counts[outcome.status] = counts.get(outcome.status, 0) + 1
            if isinstance(outcome.provenance.get("xla_cpu_threads"), int):
                made.add(outcome.provenance["xla_cpu_threads"])
            bar.update(1)
            if outcome.status != "done":
                bar.write(f"[{study.name}] run {outcome.run_id} {outcome.status}: "
                          f"{(outcome.error or '').splitlines()[0] if outcome.error else ''}")
    finally:
        bar.close()
    _note_other_threads(study.name, before, made)
    return executor


def _recorded_threads(store: Store, study: Study, todo: list[Any]) -> list[int]:
    """The XLA CPU thread counts of ``study``'s recorded runs that ``todo`` does not make
    again (`harness.provenance.thread_counts`)."""
    runs = store.runs(study.name)
    if runs.empty:
        return []
    again = {study.run_id(spec) for spec in todo}
    return thread_counts(runs[~runs["run_id"].isin(again)])


def _note_other_threads(study_name: str, before: list[int], made: set[int]) -> None:
    """Say so when runs were just made at an XLA CPU thread count that none of the study's
    recorded runs had (on one machine: the local executor's runs beside the processes
    executor's, whose workers have their share of the cores): the store then holds runs whose
    numbers differ from the others' at float round-off, which the person resuming a grid can
    still avoid (docs/presets.md, "Where a grid's runs execute")."""
    new = sorted(made - set(before))
    if not before or not new:
        return
    match = f"; PJRT_NPROC={before[0]} runs new ones at theirs" if len(before) == 1 else ""
    print(f"note: the store's {study_name} runs were made at an XLA CPU thread count of "
          f"{_listed(before)}, these at {_listed(new)}, which changes their numbers at float "
          f"round-off{match} (docs/presets.md).")


def _listed(counts: list[int]) -> str:
    """``[1, 2, 4]`` as ``"1, 2 and 4"``."""
    words = [str(c) for c in counts]
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


def _with_specs(outcomes: Iterable[Outcome], study: Study, specs: list[Any]):
    by_id = {study.run_id(s): s for s in specs}
    for outcome in outcomes:
        yield outcome, by_id[outcome.run_id]


JAX_CACHE_ENV = "LINRNN_JAX_CACHE"


def enable_compilation_cache() -> str | None:
    """Keep compiled XLA programs on disk (``$LINRNN_JAX_CACHE``, default ``.cache/jax``).

    Compiling dominates short CPU runs; a rerun, a resumed grid or a Ray worker then loads
    the programs instead. Every program is kept, however quickly it compiled: building a layer
    runs dozens of eager operations, each its own small program, which every new worker
    process would compile again (JAX keeps only those that took over a second by default). An empty ``LINRNN_JAX_CACHE`` switches this off. Returns the directory used, or
    None.
    """
    cache = os.environ.get(JAX_CACHE_ENV, str(paths.cache_dir("jax")))
    if not cache:
        return None
    import jax  # here: a process with the cache switched off need not load JAX for it

    jax.config.update("jax_compilation_cache_dir", cache)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    return cache


def progress_bar(total: int, desc: str, *, enabled: bool = True):
    """A tqdm bar, quiet when not ``enabled``, in CI (``CI=true``) and off a terminal."""

    from tqdm import tqdm

    quiet = not enabled or os.environ.get("CI") == "true" or not sys.stderr.isatty()
    return tqdm(total=total, desc=desc, disable=quiet, leave=False)
