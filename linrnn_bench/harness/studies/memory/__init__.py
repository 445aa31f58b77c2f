"""Memory: what each layer needs per token, from XLA's memory analysis, and how it grows with L.

For one (model, size, batch, mode) a run compiles the layer's computation (the same programs as
the throughput study: ``"forward"``, ``"forward_backward"``, ``"train"``) at every sequence
length L of the config and records XLA's compiled memory analysis
(`harness.measure.memory.compiled_memory`):

    argument_bytes   the inputs (parameters, optimiser state, u, target)
    output_bytes     the outputs
    temp_bytes       the temporaries of the buffer assignment (every intermediate XLA keeps,
                     loop bodies included)
    alias_bytes      outputs that reuse a donated input's buffer
    total_bytes      argument + output + temp - alias: the compiled working set

XLA's CPU backend fills these fields from the executable's buffer assignment, so the numbers are
the schedule XLA chose, including what its default concurrency-optimised scheduler keeps alive
to run independent operations at once. ``XLA_FLAGS`` is recorded with every row; to measure the
memory-minimising sequential schedule instead, run with
``XLA_FLAGS=--xla_cpu_enable_concurrency_optimized_scheduler=false`` (process-wide: it must be set
before JAX starts, so with ``isolate="process"`` it is passed to each probe process by
``xla_flags``). On an accelerator each length is also *run* once in a fresh process, whose
device reports its peak bytes (``device_peak_bytes``; there is no way to reset a device's peak
within a process, hence one process per configuration). A process probe on the CPU records the
process's resident-memory high-water mark instead (``process_peak_bytes``, reset through
``/proc/self/clear_refs`` before the call), a lower bound on what the program touched, as a check
that the analysis is complete.

After the lengths, one ``kind="fit"`` row: total_bytes = a + b L by least squares, with
bytes per token b / B, the coefficient of determination, the largest relative residual, the
log-log slope of total_bytes - a between the shortest and longest L (1 for linear growth), the
spread of the increments between consecutive lengths relative to b (0 for a line; it grows when
the increments rise, as for L log L), whether growth is linear (spread and |slope - 1| both
within ``linear_tolerance``), whether it is superlinear (the increments rise by more than the
tolerance; sublinear growth at short L, a fixed cost amortised, is not linear but harmless), and
the largest L whose working set fits ``budget_bytes``: floor((budget - a) / b).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Literal

from linrnn_bench.validation import positive_int

from ...measure import memory as measure_memory
from ...measure import processes, roofline
from ...measure.memory import fit_linear
from ...programs import (
    COMPLEX_BYTES,
    DEFAULT_MATCHED_PARAMS,
    SIZES,
    Size,
    choices,
    layer_program,
    measured_models,
    paper_size,
    resolved_algorithm,
    resolved_d_state,
    state_count,
    without_paper_size,
)
from .._schema import ENVIRONMENT, PROGRAM, Column, Schema, merged
from .._study import Study, read_presets

Isolate = Literal["auto", "process", "none"]
ISOLATES: tuple[str, ...] = ("auto", "process", "none")


@dataclasses.dataclass(frozen=True)
class MemoryConfig:
    """The memory study's configuration.

    Attributes:
        models: registry names or import paths; ``()``: every registered model with a paper
            size.
        sizes: ``"paper"`` and/or ``"matched"`` (as the throughput study).
        modes: ``"forward"``, ``"forward_backward"`` and/or ``"train"``.
        seq_lens: the lengths L measured and fitted (at least two).
        batches: batch sizes B.
        matched_params: the parameter count of the ``"matched"`` size.
        budget_bytes: the memory budget whose largest fitting L is reported.
        linear_tolerance: the relative tolerance of the linear-growth check.
        isolate: ``"none"`` compiles in this process (no peak); ``"process"`` compiles and runs
            each length in a fresh process (device or process peak); ``"auto"`` is
            ``"process"`` on an accelerator and ``"none"`` on the CPU.
        xla_flags: ``XLA_FLAGS`` for the probe processes (``"process"`` only; recorded).
        seed: parameters' and inputs' seed.
    """

    models: tuple[str, ...] = ()
    sizes: tuple[Size, ...] = ("paper", "matched")
    modes: tuple[roofline.Mode, ...] = ("forward", "train")
    seq_lens: tuple[int, ...] = (1024, 4096, 16384, 65536)
    batches: tuple[int, ...] = (1, 8)
    matched_params: int = DEFAULT_MATCHED_PARAMS
    budget_bytes: int = 16 * 2**30
    linear_tolerance: float = 0.05
    isolate: Isolate = "auto"
    xla_flags: str = ""
    seed: int = 0

    def __post_init__(self):
        measured_models("memory.models", self.models)
        choices("memory.sizes", self.sizes, SIZES)
        choices("memory.modes", self.modes, roofline.MODES)
        if len(set(self.seq_lens)) < 2:
            raise ValueError(
                "memory.seq_lens needs at least two distinct lengths to fit, got "
                f"{self.seq_lens!r}."
            )
        for v in (*self.seq_lens, *self.batches):
            positive_int("memory.seq_lens/batches entry", v)
        if not self.batches:
            raise ValueError("memory.batches must not be empty.")
        positive_int("memory.matched_params", self.matched_params)
        positive_int("memory.budget_bytes", self.budget_bytes)
        if not (isinstance(self.linear_tolerance, (int, float)) and 0 < self.linear_tolerance < 1):
            raise ValueError(
                f"memory.linear_tolerance must lie in (0, 1), got {self.linear_tolerance!r}."
            )
        choices("memory.isolate", (self.isolate,), ISOLATES)
        if self.xla_flags and self.isolate == "none":
            raise ValueError(
                "memory.xla_flags needs isolate='process' (or 'auto' on an accelerator): XLA "
                "reads its flags once, when the process starts."
            )


@dataclasses.dataclass(frozen=True)
class MemoryRun:
    """One (model, size, batch, mode), measured at every length of ``seq_lens``."""

    model: str
    size: Size
    d_model: int
    d_state: int | None
    options: tuple[tuple[str, Any], ...]
    matched_params: int | None
    mode: roofline.Mode
    batch: int
    seq_lens: tuple[int, ...]
    budget_bytes: int
    linear_tolerance: float
    isolate: Isolate
    xla_flags: str
    seed: int


def grid(config: MemoryConfig) -> list[MemoryRun]:
    runs = []
    for model in measured_models("memory.models", config.models):
        paper = paper_size(model)
        for size in config.sizes:
            for mode in config.modes:
                for batch in config.batches:
                    runs.append(MemoryRun(
                        model=model,
                        size=size,
                        d_model=paper.d_model,
                        d_state=paper.d_state if size == "paper" else None,
                        options=paper.options,
                        matched_params=config.matched_params if size == "matched" else None,
                        mode=mode,
                        batch=batch,
                        seq_lens=tuple(sorted(set(config.seq_lens))),
                        budget_bytes=config.budget_bytes,
                        linear_tolerance=config.linear_tolerance,
                        isolate=config.isolate,
                        xla_flags=config.xla_flags,
                        seed=config.seed,
                    ))
    return runs


# --------------------------------------------------------------------------------------------
# One length


@dataclasses.dataclass(frozen=True)
class Probe:
    """One compiled configuration: what a probe (in this process or a fresh one) measures."""

    model: str
    d_model: int
    d_state: int
    options: tuple[tuple[str, Any], ...]
    mode: roofline.Mode
    seq_len: int
    batch: int
    execute: bool
    seed: int


def probe(p: Probe) -> dict[str, Any]:
    """Compile ``p``'s program and read its memory analysis; if ``p.execute``, run it once and
    read the device's peak bytes (accelerators) or the process's resident high-water mark."""
    import jax
    import jax.random as jr

    from linrnn_bench import models

    key = jr.PRNGKey(p.seed)
    layer = models.build(
        p.model, d_model=p.d_model, d_state=p.d_state, key=jr.fold_in(key, 0), **dict(p.options)
    )
    function, args, donate, make_call = layer_program(
        layer, mode=p.mode, batch=p.batch, seq_len=p.seq_len, d_model=p.d_model,
        key=jr.fold_in(key, 1), abstract=not p.execute,
    )
    compiled = jax.jit(function, donate_argnums=donate).lower(*args).compile()
    row: dict[str, Any] = {
        "algorithm": resolved_algorithm(layer),
        "states": state_count(p.model, layer, p.d_model),
        **measure_memory.compiled_memory(compiled),
        "device_peak_bytes": None,
        "process_peak_bytes": None,
    }
    if p.execute:
        row.update(measure_memory.peak_of_one_call(make_call(compiled)))
    return row


def probe_fields(fields: dict[str, Any]) -> dict[str, Any]:
    """`probe` of a `Probe` given as its JSON fields (a fresh process's entry)."""
    return probe(Probe(**{**fields, "options": tuple(tuple(pair) for pair in fields["options"])}))


def probe_in_process(p: Probe, *, xla_flags: str = "", timeout_s: float = 1800.0) -> dict[str, Any]:
    """`probe` in a fresh Python process (its own device peak, its own ``XLA_FLAGS``)."""
    return processes.call_in_fresh_process(
        f"{__name__}:probe_fields", dataclasses.asdict(p),
        env={"XLA_FLAGS": xla_flags} if xla_flags else None, timeout_s=timeout_s,
        what=f"the memory probe {p}",
    )


# --------------------------------------------------------------------------------------------
# A run


def _isolated(isolate: str) -> bool:
    if isolate == "auto":
        import jax

        return jax.default_backend() != "cpu"
    return isolate == "process"


def run(spec: MemoryRun) -> list[dict[str, Any]]:
    """One row per length (``kind="point"``), then the linear fit (``kind="fit"``)."""
    d_state = resolved_d_state(spec)
    isolated = _isolated(spec.isolate)
    base = {
        "model": spec.model, "size": spec.size, "mode": spec.mode, "batch": spec.batch,
        "d_model": spec.d_model, "d_state": d_state, "dtype": "float32",
        "isolated": isolated,
    }
    environment = roofline.environment_columns()
    if isolated and spec.xla_flags:
        environment["xla_flags"] = spec.xla_flags
    rows = []
    for L in spec.seq_lens:
        p = Probe(spec.model, spec.d_model, d_state, spec.options, spec.mode, L, spec.batch,
                  execute=isolated, seed=spec.seed)
        measured = probe_in_process(p, xla_flags=spec.xla_flags) if isolated else probe(p)
        # A layer registered with neither a discrete system nor hidden states has no state size.
        states = measured["states"]
        state_bytes = None if states is None else spec.batch * L * states * COMPLEX_BYTES
        rows.append({
            "kind": "point", **base, "seq_len": L, **measured,
            "tokens": spec.batch * L,
            "total_bytes_per_token": measured["total_bytes"] / (spec.batch * L),
            "state_activation_bytes": state_bytes,
            "temp_over_state": (
                None if state_bytes is None else measured["temp_bytes"] / state_bytes
            ),
            **environment,
        })
    rows.append(_fit_row(spec, base, rows, environment))
    return rows


def _fit_row(spec: MemoryRun, base: dict, points: list[dict], environment: dict) -> dict[str, Any]:
    lengths = [float(r["seq_len"]) for r in points]
    total = fit_linear(lengths, [float(r["total_bytes"]) for r in points])
    temp = fit_linear(lengths, [float(r["temp_bytes"]) for r in points])
    slope = total.slope
    fits = spec.budget_bytes - total.intercept
    largest = math.floor(fits / slope) if slope > 0 and fits > 0 else 0
    return {
        "kind": "fit", **base,
        "algorithm": points[-1]["algorithm"],
        "states": points[-1]["states"],
        "seq_len_min": min(spec.seq_lens),
        "seq_len_max": max(spec.seq_lens),
        "points": len(points),
        "bytes_per_step": slope,
        "bytes_per_token": slope / spec.batch,
        "intercept_bytes": total.intercept,
        "r2": total.r2,
        "max_rel_residual": total.max_rel_residual,
        "loglog_slope": total.loglog_slope,
        "increment_spread": total.increment_spread,
        "increment_growth": total.increment_growth,
        "linear": total.linear(spec.linear_tolerance),
        "superlinear": total.superlinear(spec.linear_tolerance),
        "linear_tolerance": spec.linear_tolerance,
        "temp_bytes_per_token": temp.slope / spec.batch,
        "temp_intercept_bytes": temp.intercept,
        # What the temporaries grow by per step over one step's (B, P) complex64 states: 1 for
        # a layer's forward+backward that saves its states and nothing else; a training step
        # adds its loss's (B, H) buffers per step (each H / (2P) in these units).
        "temp_slope_over_state": (
            None if points[-1]["states"] is None
            else temp.slope / (spec.batch * points[-1]["states"] * COMPLEX_BYTES)
        ),
        "budget_bytes": spec.budget_bytes,
        "largest_seq_len_in_budget": largest,
        **environment,
    }


# The rows a run writes (module docstring): one per length, then the fit over the lengths.
_BASE = ("model", "size", "mode", "batch", "d_model", "d_state", "dtype", "isolated")
COLUMNS = Schema(
    columns=merged(PROGRAM, {
        "kind": Column(str, "the row kind: 'point' (one length) or 'fit' (over the lengths)"),
        "size": Column(str, "'paper' or 'matched' (`harness.programs`)"),
        "isolated": Column(bool, "each length compiled and run in a fresh process"),
        "argument_bytes": Column(int, "XLA's memory analysis: the inputs (parameters, "
                                      "optimiser state, u, target)"),
        "output_bytes": Column(int, "the outputs"),
        "temp_bytes": Column(int, "the temporaries of the buffer assignment"),
        "alias_bytes": Column(int, "outputs reusing a donated input's buffer"),
        "generated_code_bytes": Column(int, "the generated code"),
        "total_bytes": Column(int, "argument + output + temp - alias: the compiled working set"),
        "device_peak_bytes": Column(int, "the device's peak bytes in one run (isolated, on an "
                                         "accelerator); else None", nullable=True),
        "process_peak_bytes": Column(int, "the process's resident high-water mark over one run "
                                          "(isolated, on the CPU); else None", nullable=True),
        "tokens": Column(int, "B L"),
        "total_bytes_per_token": Column(float, "total_bytes / (B L)"),
        "state_activation_bytes": Column(int, "B L P complex64 states, bytes; None without P",
                                         nullable=True),
        "temp_over_state": Column(float, "temp_bytes / state_activation_bytes; None without P",
                                  nullable=True),
        "seq_len_min": Column(int, "the shortest L fitted"),
        "seq_len_max": Column(int, "the longest L fitted"),
        "points": Column(int, "lengths fitted"),
        "bytes_per_step": Column(float, "b of total_bytes = a + b L (least squares)"),
        "bytes_per_token": Column(float, "b / B"),
        "intercept_bytes": Column(float, "a, the fixed cost"),
        "r2": Column(float, "the fit's coefficient of determination"),
        "max_rel_residual": Column(float, "the largest relative residual of the fit"),
        "loglog_slope": Column(float, "the log-log slope of total_bytes - a between the "
                                      "shortest and longest L (1: linear)"),
        "increment_spread": Column(float, "spread of the increments between consecutive "
                                          "lengths, relative to b (0: a line)"),
        "increment_growth": Column(float, "how much the increments rise with L, relative to b"),
        "linear": Column(bool, "spread and |loglog_slope - 1| both within linear_tolerance"),
        "superlinear": Column(bool, "the increments rise by more than linear_tolerance"),
        "linear_tolerance": Column(float, "the tolerance of linear and superlinear"),
        "temp_bytes_per_token": Column(float, "the slope of temp_bytes per token"),
        "temp_intercept_bytes": Column(float, "the intercept of temp_bytes"),
        "temp_slope_over_state": Column(float, "the temporaries' slope per step over one "
                                               "step's (B, P) complex64 states; None without P",
                                        nullable=True),
        "budget_bytes": Column(int, "the memory budget of largest_seq_len_in_budget"),
        "largest_seq_len_in_budget": Column(int, "floor((budget - a) / b): the longest L whose "
                                                 "working set fits"),
    }, ENVIRONMENT),
    kinds={
        "point": ("kind", *_BASE, "seq_len", "algorithm", "states", "argument_bytes",
                  "output_bytes", "temp_bytes", "alias_bytes", "generated_code_bytes",
                  "total_bytes", "device_peak_bytes", "process_peak_bytes", "tokens",
                  "total_bytes_per_token", "state_activation_bytes", "temp_over_state",
                  *ENVIRONMENT),
        "fit": ("kind", *_BASE, "algorithm", "states", "seq_len_min", "seq_len_max", "points",
                "bytes_per_step", "bytes_per_token", "intercept_bytes", "r2",
                "max_rel_residual", "loglog_slope", "increment_spread", "increment_growth",
                "linear", "superlinear", "linear_tolerance", "temp_bytes_per_token",
                "temp_intercept_bytes", "temp_slope_over_state", "budget_bytes",
                "largest_seq_len_in_budget", *ENVIRONMENT),
    },
)

PRESETS = read_presets(__name__, MemoryConfig)

STUDY = Study(
    name="memory",
    description="Compiled memory per layer, L, batch and mode; bytes/token and linear growth",
    presets=PRESETS,
    grid=grid,
    run=run,
    planner=f"{__name__}.plan:plan",
    section=f"{__name__}.report:SECTION",
    skip_reason=without_paper_size,
)

