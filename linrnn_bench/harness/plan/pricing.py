"""A program priced for a target: our counts and XLA's costs, its compiled memory at the
preset's shapes, the roofline bound of one call, and whether it fits (else the largest batch
that would)."""

from __future__ import annotations

import dataclasses
from typing import Any

from ..measure import roofline, timing
from ..measure.memory import compiled_memory
from .builders import Built, Program, one_line
from .targets import Target, accelerator_path

@dataclasses.dataclass
class Priced:
    """One program compiled at shapes and priced for a target."""

    program: Program
    algorithm: str | None = None
    counts: roofline.Counts | None = None
    xla: dict[str, float | None] = dataclasses.field(default_factory=dict)
    memory: dict[str, int] = dataclasses.field(default_factory=dict)
    compile_s: float | None = None
    bound_s: float | None = None
    fits: bool | None = None
    largest_batch: int | None = None
    error: str | None = None


def compile_abstract(program: Program, batch: int | None = None) -> tuple[Any, Built, float]:
    """``(compiled, built, seconds)``: the program compiled from shapes at ``batch``."""
    built = program.build(program.batch if batch is None else batch, True)
    compiled, lower_s, compile_s = timing.compile_lowered(built.lower)
    return compiled, built, lower_s + compile_s


def _jax_compiled(compiled: Any) -> Any:
    return getattr(compiled, "compiled", compiled)  # equinox wraps jax's Compiled


def price(program: Program, target: Target, *, compile: bool = True,
          backend: str | None = "gpu") -> Priced:
    """Counts, XLA's costs and memory, the bound of one call and whether it fits."""
    out = Priced(program)
    try:
        out.counts = program.counts(program.batch)
        if compile:
            with accelerator_path(backend):
                compiled, built, out.compile_s = compile_abstract(program)
                out.algorithm = built.algorithm
                compiled = _jax_compiled(compiled)
                out.xla = roofline.xla_costs(compiled)
                out.memory = compiled_memory(compiled)
                total = out.memory["total_bytes"]
                out.fits = total <= target.memory_bytes
                if not out.fits:
                    out.largest_batch = _largest_batch(program, total, target.memory_bytes)
        counts = out.counts
        if counts is None and out.xla.get("xla_flops") is not None:
            counts = roofline.Counts(out.xla["xla_flops"], out.xla["xla_bytes"] or 0.0,
                                     "XLA's cost analysis")
            out.counts = counts
        if counts is not None:
            out.bound_s = roofline.bound(counts, target.peaks).seconds
    except Exception as e:  # noqa: BLE001 - priced as failed, the plan goes on
        out.error = one_line(e)
    return out


def _largest_batch(program: Program, total_at_batch: int, budget: float) -> int:
    """The largest batch whose working set fits ``budget``, on the line through the working
    sets at batch 1 and at the program's batch (0: not even one example fits)."""
    B = program.batch
    if B <= 1:
        return 0
    one = compiled_memory(_jax_compiled(compile_abstract(program, 1)[0]))["total_bytes"]
    per_example = (total_at_batch - one) / (B - 1)
    if per_example <= 0:
        return B if one <= budget else 0
    return max(0, min(B - 1, int((budget - (one - per_example)) // per_example)))
