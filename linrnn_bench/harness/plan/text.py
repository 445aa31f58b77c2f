"""The plan as text: per study, its runs and what the store holds, its distinct programs priced,
and the lower-bound totals."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from .builders import Program
from .catalogue import StudyPlan
from .pricing import Priced, price
from .targets import Target

def _si(value: float | None, unit: str = "") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.3g}{prefix}{unit}"
    return f"{value:.3g}{unit}"


def _gib(value: float | None) -> str:
    return "-" if value is None else f"{value / 2**30:.2f}"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds >= 3600:
        return f"{seconds / 3600:.2f} h"
    if seconds >= 60:
        return f"{seconds / 60:.1f} min"
    return f"{seconds:.3g} s"


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    cells = [list(map(str, header))] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]


def plan_text(plans: list[StudyPlan], target: Target, *, preset: str, compile: bool = True,
              backend: str | None = "gpu", progress: Callable[[str], None] | None = None
              ) -> str:
    """The plan of ``plans`` priced for ``target``, as text: a study's runs (`_runs_lines`), its
    programs priced (`_price_new`, each distinct program once across studies) and tabled
    (`_programs_lines`), its totals (`_totals`), then the report's totals."""
    lines = _preamble(target, preset=preset, backend=backend)
    priced: dict[tuple, Priced] = {}
    report_total = 0.0
    report_pending = 0.0
    compile_total = 0.0
    for plan in plans:
        lines.append(f"== {plan.name}")
        if plan.error:
            lines += [f"  not planned: {plan.error}", ""]
            continue
        runs_lines, to_run = _runs_lines(plan)
        lines += runs_lines
        programs = plan.programs()
        compile_total += _price_new(plan.name, programs, priced, target, compile=compile,
                                    backend=backend, progress=progress)
        lines += _programs_lines(plan, programs, priced)
        total, pending, line = _totals(plan, programs, priced, to_run)
        report_total += total
        report_pending += pending
        lines += [line, ""]
    lines.append(f"== report total (lower bound): {_duration(report_total)} for every run, "
                 f"{_duration(report_pending)} for the runs not yet in the store")
    if compile:
        lines.append(f"   compiling the {len(priced)} distinct programs took "
                     f"{_duration(compile_total)} here (CPU), not counted above")
    return "\n".join(lines)


def _preamble(target: Target, *, preset: str, backend: str | None) -> list[str]:
    """What is priced for what, and what the times and memory mean."""
    return [f"Plan of preset {preset!r} for {target.description}.",
            "Times are roofline LOWER BOUNDS on execution, max(FLOPs / peak FLOP/s, bytes / "
            "bandwidth) per call summed over calls: no compile, host work, process start or "
            "sequential dependency is in them, and real runs take longer, often many times "
            "longer. Memory is XLA's buffer assignment compiled here (CPU) from shapes, with "
            f"the engine's algorithm as on {backend or 'this backend'}; a GPU compile assigns "
            "buffers its own way.", ""]


def _runs_lines(plan: StudyPlan) -> tuple[list[str], int]:
    """``(lines, to_run)``: the study's runs, what the store holds of them, per group."""
    status = {"done": 0, "diverged": 0, "failed": 0}
    groups: dict[str, list[int]] = {}
    for run in plan.runs:
        s = plan.recorded.get(run.run_id)
        if s in status:
            status[s] += 1
        g = groups.setdefault(run.group, [0, 0])
        g[0] += 1
        g[1] += s in ("done", "diverged")
    to_run = len(plan.runs) - status["done"] - status["diverged"]
    lines = [f"  {len(plan.runs)} runs; the store holds {status['done']} done, "
             f"{status['diverged']} diverged, {status['failed']} failed; {to_run} to run"]
    lines += _table(("runs of", "runs", "recorded"), [(g, n, r) for g, (n, r) in groups.items()])
    return lines, to_run


def _price_new(name: str, programs: list[Program], priced: dict[tuple, Priced],
               target: Target, *, compile: bool, backend: str | None,
               progress: Callable[[str], None] | None) -> float:
    """Price into ``priced`` the programs not yet in it; the seconds their compiles took."""
    compile_s = 0.0
    for i, program in enumerate(programs):
        if program.key not in priced:
            if progress:
                progress(f"[{name} {i + 1}/{len(programs)}] {program.label} B={program.batch}")
            priced[program.key] = price(program, target, compile=compile, backend=backend)
            compile_s += priced[program.key].compile_s or 0.0
    return compile_s


def _programs_lines(plan: StudyPlan, programs: list[Program], priced: dict[tuple, Priced]
                    ) -> list[str]:
    """The table of the study's distinct programs: counts, costs, memory, fit and bounds."""
    calls: dict[tuple, int] = {}
    for run in plan.runs:
        for program, n in run.uses:
            calls[program.key] = calls.get(program.key, 0) + n
    rows = []
    for program in programs:
        p = priced[program.key]
        counts = p.counts
        fit = ("-" if p.fits is None else "yes" if p.fits
               else f"NO (B<={p.largest_batch})")
        total_s = None if p.bound_s is None else p.bound_s * calls[program.key]
        rows.append((program.label, program.batch, p.algorithm or "-", calls[program.key],
                     _si(counts and counts.flops), _si(p.xla.get("xla_flops")),
                     _si(counts and counts.bytes, "B"), _si(p.xla.get("xla_bytes"), "B"),
                     _gib(p.memory.get("total_bytes")), fit, _si(p.bound_s, "s"),
                     _duration(total_s), p.error or ""))
    lines = [f"  {len(programs)} distinct programs (FLOPs/bytes per call; ours = "
             "harness.measure.roofline's count, XLA = its cost analysis):"]
    return lines + _table(("program", "B", "algorithm", "calls", "FLOPs ours", "FLOPs XLA",
                           "bytes ours", "bytes XLA", "memory GiB", "fits", "bound/call",
                           "bound total", "error"), rows)


def _totals(plan: StudyPlan, programs: list[Program], priced: dict[tuple, Priced],
            to_run: int) -> tuple[float, float, str]:
    """``(total, pending, line)``: the lower bound of all the study's runs and of those the
    store does not hold, seconds, and the line that says them."""
    total = pending = 0.0
    unpriced = 0
    for run in plan.runs:
        seconds = 0.0
        for program, n in run.uses:
            bound = priced[program.key].bound_s
            if bound is None:
                unpriced += 1
                continue
            seconds += bound * n
        total += seconds
        if plan.recorded.get(run.run_id) not in ("done", "diverged"):
            pending += seconds
    too_big = sum(1 for p in programs if priced[p.key].fits is False)
    line = (f"  total (lower bound): {_duration(total)} for all runs, "
            f"{_duration(pending)} for the {to_run} to run"
            + (f"; {unpriced} program uses without a count are left out" if unpriced else "")
            + (f"; {too_big} program(s) do not fit the memory" if too_big else ""))
    return total, pending, line
