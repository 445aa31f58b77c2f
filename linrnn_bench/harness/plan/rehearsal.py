"""The rehearsal: every distinct program of a preset compiled and run for a few calls on this
machine (the batch halved until it fits its memory), every task generated, failures collected."""

from __future__ import annotations

import dataclasses
import traceback
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..errors import ConfigError
from ..measure import timing
from ..measure.memory import compiled_memory
from .builders import Program, one_line
from .facts import is_loader, preset_tasks, reduced_options, task_facts
from .catalogue import StudyPlan, catalogue
from .pricing import _jax_compiled, compile_abstract
from .targets import LOCAL_MEMORY_FRACTION, accelerator_path, available_memory
from .text import _gib, _table

@dataclasses.dataclass
class Rehearsed:
    """One program (or task) rehearsed."""

    what: str
    ok: bool
    batch: int | None = None
    planned_batch: int | None = None
    algorithm: str | None = None
    compile_s: float | None = None
    step_s: float | None = None
    memory_bytes: int | None = None
    error: str | None = None
    detail: str | None = None

    @property
    def reduced(self) -> bool:
        return self.batch is not None and self.batch != self.planned_batch


def rehearse_program(program: Program, *, budget: float, steps: int = 2,
                     backend: str | None = "gpu") -> Rehearsed:
    """Compile ``program`` at its shapes, halving the batch until its working set fits
    ``budget`` bytes, then run it ``steps`` times on random data; the last call is timed."""
    out = Rehearsed(program.label, False, planned_batch=program.batch)
    try:
        with accelerator_path(backend):
            batch = program.batch
            clock = timing.Stopwatch()
            while True:
                compiled, built, _ = compile_abstract(program, batch)
                memory = compiled_memory(_jax_compiled(compiled))["total_bytes"]
                if memory <= budget or batch == 1:
                    break
                batch = max(1, batch // 2)
            out.compile_s = clock.elapsed()
            out.batch, out.memory_bytes, out.algorithm = batch, memory, built.algorithm
            if memory > budget:
                raise MemoryError(f"{memory / 2**30:.1f} GiB at batch 1 exceeds this "
                                  f"machine's {budget / 2**30:.1f} GiB")
            call = program.build(batch, False).make_call(compiled)
            if steps:  # the last call timed, the others warm it up
                out.step_s = timing.time_calls(call, warmup=steps - 1, repeats=1).min_s
        out.ok = True
    except Exception as e:  # noqa: BLE001 - collected; the rehearsal goes on
        out.error = one_line(e)
        out.detail = traceback.format_exc()
    return out


def rehearse_task(task: str, options: tuple, *, examples: int | None = None) -> Rehearsed:
    """Generate ``task`` with ``options`` (example counts capped at ``examples``), timed,
    without the cache; a loader task is not generated (it reads a release from disk)."""
    from linrnn_bench import tasks

    given = dict(options)
    what = f"task {task} " + " ".join(f"{k}={v}" for k, v in sorted(given.items()))
    if is_loader(task):
        return Rehearsed(what, True, error="loader: reads a release from disk; not generated "
                                           "(tests/test_tasks_loaders.py checks it on small "
                                           "files in the release's format)")
    out = Rehearsed(what, False)
    try:
        small = reduced_options(task, given, examples)
        clock = timing.Stopwatch()
        built = tasks.build(task, use_cache=False, **small)
        for split in tasks.SPLITS:
            built.split(split)  # decoded and checked against the array conventions
        seconds = clock.elapsed()
        made = sum(len(built.split(s)) for s in tasks.SPLITS)
        full = sum(task_facts(task, options).sizes.values())
        out.ok, out.compile_s = True, seconds
        out.batch, out.planned_batch = made, full
        if made < full:
            out.step_s = seconds * full / made
            out.detail = (f"{made} of {full} examples generated in {seconds:.1f} s; all "
                          f"{full}: about {seconds * full / made:.0f} s (extrapolated, linear)")
    except Exception as e:  # noqa: BLE001 - collected; the rehearsal goes on
        out.error = one_line(e)
        out.detail = traceback.format_exc()
    return out


def rehearse(preset: str, *, configs: Mapping[str, Any] | None = None,
             names: Sequence[str] | None = None, match: str | None = None,
             limit: int | None = None, task_examples: int | None = None,
             budget: float | None = None, steps: int = 2, backend: str | None = "gpu",
             programs: list[Program] | None = None, with_tasks: bool = True,
             progress: Callable[[str], None] | None = None
             ) -> tuple[list[Rehearsed], list[Rehearsed], list[StudyPlan]]:
    """``(programs, tasks, plans)`` rehearsed: every distinct program of every study at the
    preset (those whose label contains ``match``; the first ``limit``) and every task. A
    ``match`` that no program's label contains is a `ConfigError` (`_selected`)."""
    plans = catalogue(preset, configs=configs, names=names, backend=backend)
    if programs is None:
        programs = _selected(plans, preset, match)
        programs = programs[:limit] if limit is not None else programs
    budget = budget if budget is not None else available_memory() * LOCAL_MEMORY_FRACTION
    results = []
    for plan in plans:
        if plan.error:
            results.append(Rehearsed(f"study {plan.name}", False, error=plan.error))
    for i, program in enumerate(programs):
        if progress:
            progress(f"[{i + 1}/{len(programs)}] {program.label} B={program.batch}")
        results.append(rehearse_program(program, budget=budget, steps=steps, backend=backend))
    task_results = []
    for task, options in preset_tasks(preset, configs, names) if with_tasks else ():
        if progress:
            progress(f"task {task}")
        task_results.append(rehearse_task(task, options, examples=task_examples))
    return results, task_results, plans


def _selected(plans: list[StudyPlan], preset: str, match: str | None) -> list[Program]:
    """The distinct programs of ``plans`` whose label contains ``match`` (all: None). A
    ``match`` that no label contains is a `ConfigError` naming it and what it could match: a
    rehearsal of nothing would say that everything is ok."""
    seen: dict[tuple, Program] = {}
    for plan in plans:
        for program in plan.programs():
            seen.setdefault(program.key, program)
    every = list(seen.values())
    chosen = [p for p in every if match is None or match in p.label]
    if match is not None and not chosen:
        examples = ", ".join(repr(p.label) for p in every[:3])
        raise ConfigError(
            f"--match {match!r} matches none of the {len(every)} programs of preset {preset!r} "
            f"(studies: {', '.join(plan.name for plan in plans)}); a program is rehearsed when "
            f"its label contains it{f', e.g. {examples}' if examples else ''} (linrnn-bench "
            f"plan --preset {preset} lists them all).")
    return chosen


def rehearsal_text(programs: list[Rehearsed], tasks_: list[Rehearsed], *, preset: str,
                   seconds: float, backend: str | None = "gpu") -> str:
    """The rehearsal's tables and its failures, as text."""
    lines = [f"Rehearsal of preset {preset!r}: programs traced as on "
             f"{backend or 'this backend'} and run here; {seconds:.0f} s in all.", ""]
    rows = []
    for r in programs:
        batch = "-" if r.batch is None else (
            f"{r.batch} (reduced from {r.planned_batch})" if r.reduced else str(r.batch))
        rows.append((r.what, "ok" if r.ok else "FAILED", batch, r.algorithm or "-",
                     "-" if r.compile_s is None else f"{r.compile_s:.2f}",
                     "-" if r.step_s is None else f"{r.step_s:.3f}", _gib(r.memory_bytes)))
    lines += _table(("program", "status", "batch", "algorithm", "compile s", "step s",
                     "memory GiB"), rows)
    reduced = sum(r.reduced for r in programs)
    if reduced:
        lines.append(f"  {reduced} program(s) ran at a reduced batch: this machine's memory "
                     "cannot hold the preset's batch (the plan gives its memory).")
    lines.append("")
    rows = [(r.what, "ok" if r.ok and not r.error else "not generated" if r.ok else "FAILED",
             "-" if r.batch is None else r.batch,
             "-" if r.compile_s is None else f"{r.compile_s:.1f}",
             "-" if r.step_s is None else f"~{r.step_s:.0f} (extrapolated)")
            for r in tasks_]
    lines += _table(("task", "status", "examples", "generation s", "all examples s"), rows)
    notes = [r for r in tasks_ if r.ok and r.error]
    for r in notes:
        lines.append(f"  {r.what}: {r.error}")
    failed = [r for r in (*programs, *tasks_) if not r.ok]
    lines.append("")
    if failed:
        lines.append(f"{len(failed)} failure(s):")
        for r in failed:
            lines.append(f"  {r.what}: {r.error}")
    else:
        lines.append(f"every program ({len(programs)}) and task ({len(tasks_)}) ok.")
    return "\n".join(lines)
