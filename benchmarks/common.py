"""What the asv benchmarks and the pytest-benchmark suite share: shapes, programs, references.

Every registered layer is benchmarked at B = 8, H = 128, float32, L in {1024, 4096}, forward
and forward+backward (the VJP with a fixed random cotangent dy: gradients w.r.t. the
parameters and the input), with the
state size of the layer benchmark (issue 2): P = 128 for the LRU (complex states), N = 128 for
RotRNN (real state dimensions, 64 complex states), P = 128 for S5 (64 conjugate-symmetric states
stored) and N = 64 per channel for S4D (32 stored per channel, 4096 in all): each
registration's `models.BenchmarkInfo`. Every other option is the registry's default. Importing
this module fails if a registered model has no benchmark shape, so a new layer cannot go
unbenchmarked.

The in-run baseline is written the way the public reference implementations are (the minimal
LRU, the official S5, the RotRNN authors' code, the Annotated S4), from the layer's own
`discrete_system()`, and checked against the layer's output:

- MIMO layers (RotRNN, LRU, S5): lambda broadcast over time, the input projection B u_t
  computed for every step outside the scan (vmapped over time), a `jax.lax.associative_scan`
  over (lambda, B u) pairs with the usual combine (a_j a_i, a_j b_i + b_j) over all states at
  once (the RotRNN authors vmap it per head; the registry's RotRNN has one head), then the
  readout Re(C x_t) vmapped over time;
- banks (S4D): the Annotated S4's convolution mode, a Vandermonde kernel per channel and an
  FFT convolution, both vmapped over channels.

Inputs are made lazily from a fixed local seed and cached per process.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

from linrnn_bench import models

BATCH = 8
D_MODEL = 128
LENGTHS: tuple[int, ...] = (1024, 4096)
SCAN_LENGTH = 16384
MODES: tuple[str, ...] = ("forward", "forward_backward")
SEED = 0


# The layer benchmarks' shape of every model, from its registration (`models.BenchmarkInfo`):
# its d_state, the structure of its in-run reference and the public code's measured times.
BENCHMARKS: dict[str, models.BenchmarkInfo] = {
    m.name: m.benchmark for m in models.infos() if m.benchmark is not None
}
# Each layer should be at least this many times faster than its public reference.
TARGET_SPEEDUP = 5.0

MODELS: tuple[str, ...] = tuple(models.names())
_unbenchmarked = sorted(set(MODELS) - set(BENCHMARKS))
if _unbenchmarked:
    raise ImportError(
        f"Registered model(s) {_unbenchmarked} have no benchmark shape: pass "
        "benchmark=models.BenchmarkInfo(d_state, structure, note, ...) to their models.register "
        "line before benchmarking."
    )


def enable_compilation_cache() -> None:
    """The project's persistent XLA cache (`harness.runner.enable_compilation_cache`), shared by
    asv's benchmark processes (one process per benchmark), which would otherwise compile the
    same programs again. `Program.compile_s` is measured with the cache off
    (`harness.measure.timing.compile_timed`), so compile times stay compile times.
    """
    from linrnn_bench.harness.runner import enable_compilation_cache as enable

    enable()


def disable_compilation_cache() -> None:
    import jax

    jax.config.update("jax_enable_compilation_cache", False)


# The MIMO layers, which also run the memory-lean "chunked" algorithm (models._engine).
CHUNKED_MODELS: tuple[str, ...] = tuple(m for m in MODELS if BENCHMARKS[m].structure == "scan")


@functools.cache
def layer(model: str, algorithm: str = "auto") -> Any:
    """The registered layer at its benchmark shape, parameters from a fixed seed."""
    import jax.random as jr

    shape = BENCHMARKS[model]
    return models.build(model, d_model=D_MODEL, d_state=shape.d_state, key=jr.PRNGKey(SEED),
                        algorithm=algorithm)


@functools.cache
def inputs(length: int) -> tuple[Any, Any]:
    """``(u, dy)``: input and output cotangent, (B, L, H) float32 standard normal."""
    import jax.numpy as jnp
    import jax.random as jr

    k_u, k_dy = jr.split(jr.PRNGKey(SEED + 1))
    shape = (BATCH, length, D_MODEL)
    return jr.normal(k_u, shape, jnp.float32), jr.normal(k_dy, shape, jnp.float32)


@dataclasses.dataclass
class Program:
    """A compiled computation and its arguments: ``call()`` runs it once."""

    compiled: Any
    args: tuple
    lower_s: float
    compile_s: float

    def call(self) -> Any:
        return self.compiled(*self.args)

    def run(self) -> Any:
        """One call, waited for: the body of every timed benchmark."""
        import jax

        return jax.block_until_ready(self.call())


def _check_mode(mode: str) -> None:
    if mode not in MODES:
        raise NotImplementedError(f"mode={mode!r} is not benchmarked; accepted: {list(MODES)}.")


def _compile(function: Callable, *args: Any) -> Program:
    from linrnn_bench.harness.measure import timing

    compiled, lower_s, compile_s = timing.compile_timed(function, *args)
    return Program(compiled, args, lower_s, compile_s)


def layer_program(model: str, length: int, mode: str, algorithm: str = "auto") -> Program:
    """The layer's batched forward, or forward+backward, compiled for (B, L, H): the studies'
    program (`harness.programs.layer_program`) on the inputs of `inputs` (the same key)."""
    import jax.random as jr

    from linrnn_bench.harness import programs

    _check_mode(mode)
    function, args, _, _ = programs.layer_program(
        layer(model, algorithm), mode=mode, batch=BATCH, seq_len=length, d_model=D_MODEL,
        key=jr.PRNGKey(SEED + 1),
    )
    return _compile(function, *args)


# --------------------------------------------------------------------------------------------
# The in-run baseline, in the public references' style


def _combine(q_i, q_j):
    # The associative operator of the public references: (a_i, b_i) then (a_j, b_j).
    a_i, b_i = q_i
    a_j, b_j = q_j
    return a_j * a_i, a_j * b_i + b_j


def reference_scan_forward(system: Any, u: Any) -> Any:
    """One sequence through a MIMO system, written as the public references write it."""
    import jax
    import jax.numpy as jnp

    L = u.shape[0]
    lam, B, C = system.lam.reshape(-1), system.B, system.C
    # As the references: lambda broadcast over time, B u_t for every step before the scan.
    lambda_elements = jnp.repeat(lam[None, :], L, axis=0)
    bu_elements = jax.vmap(lambda u_t: B @ u_t.astype(B.dtype))(u)

    def scan(lams, bus):
        return jax.lax.associative_scan(_combine, (lams, bus))[1]

    xs = scan(lambda_elements, bu_elements)
    ys = jax.vmap(lambda x: (C @ x).real)(xs)
    if system.C_reverse is not None:
        xr = jax.lax.associative_scan(_combine, (lambda_elements, bu_elements), reverse=True)[1]
        ys = ys + jax.vmap(lambda x: (system.C_reverse @ x).real)(xr)
    return system.output_scale * ys + system.D[None, :] * u


def reference_convolution_forward(system: Any, u: Any) -> Any:
    """One sequence through a bank of SISO systems, as the Annotated S4's convolution mode."""
    import jax
    import jax.numpy as jnp

    L = u.shape[0]

    def kernel(lam, b, c):
        # Vandermonde: K_l = out(sum_n c_n b_n lam_n^l).
        vandermonde = jnp.exp(jnp.log(lam)[:, None] * jnp.arange(L)[None, :])
        return system.output_scale * ((c * b) @ vandermonde).real

    def causal_convolution(u_h, k_h):
        ud = jnp.fft.rfft(jnp.pad(u_h, (0, L)))
        kd = jnp.fft.rfft(jnp.pad(k_h, (0, L)))
        return jnp.fft.irfft(ud * kd)[:L]

    K = jax.vmap(kernel)(system.lam, system.B, system.C)  # (H, L)
    y = jax.vmap(causal_convolution)(u.T, K).T
    if system.C_reverse is not None:
        Kr = jax.vmap(kernel)(system.lam, system.B, system.C_reverse)
        y = y + jax.vmap(causal_convolution)(u[::-1].T, Kr).T[::-1]
    return y + system.D[None, :] * u


def reference_forward(model: str) -> Callable:
    """The reference forward for ``model``: ``f(system, u)`` on one sequence."""
    style = BENCHMARKS[model].structure
    if style == "scan":
        return reference_scan_forward
    elif style == "convolution":
        return reference_convolution_forward
    else:
        raise ValueError(f"Unknown reference style {style!r}; accepted: scan, convolution.")


def reference_program(model: str, length: int, mode: str) -> Program:
    """The reference's batched forward, or its VJP w.r.t. the system and the input.

    The system (lambda, B, C, D) is computed from the layer's parameters once, outside; the
    references take their discretised arrays the same way inside their scan.
    """
    import jax

    _check_mode(mode)
    system = layer(model).discrete_system()
    one = reference_forward(model)
    u, dy = inputs(length)

    def forward(s, u):
        return jax.vmap(lambda x: one(s, x))(u)

    if mode == "forward":
        return _compile(forward, system, u)

    def forward_backward(s, u, dy):
        return jax.vjp(forward, s, u)[1](dy)

    return _compile(forward_backward, system, u, dy)


def reference_error(model: str, length: int) -> float:
    """Largest |layer(u) - reference(u)| relative to max |layer(u)|, on the benchmark input."""
    import jax.numpy as jnp

    ours = layer_program(model, length, "forward").run()
    theirs = reference_program(model, length, "forward").run()
    return float(jnp.max(jnp.abs(ours - theirs)) / jnp.max(jnp.abs(ours)))


# --------------------------------------------------------------------------------------------
# Derived measurements (shared by asv's track_ benchmarks and the pytest suite)


def median_seconds(program: Program, *, repeats: int = 5) -> float:
    from linrnn_bench.harness.measure import timing

    return timing.time_calls(program.call, warmup=1, repeats=repeats).median_s


def _alternate(first: Program, second: Program, repeats: int) -> tuple[Any, Any]:
    """The `harness.measure.timing.Timing` of each program, their calls alternating (so that
    machine load falls on both alike), after one untimed call each."""
    from linrnn_bench.harness.measure import timing

    first.run(), second.run()
    first_s, second_s = [], []
    for _ in range(repeats):
        first_s.extend(timing.time_calls(first.call, warmup=0, repeats=1).times_s)
        second_s.extend(timing.time_calls(second.call, warmup=0, repeats=1).times_s)
    return timing.Timing(tuple(first_s)), timing.Timing(tuple(second_s))


def speedup_over_reference(model: str, length: int, mode: str, *, repeats: int = 5) -> dict:
    """Median times of the reference and the layer, timed alternately in this process."""
    layer_t, reference_t = _alternate(
        layer_program(model, length, mode), reference_program(model, length, mode), repeats
    )
    published = BENCHMARKS[model].published_ms(length)
    published_s = None if published is None else published[MODES.index(mode)] / 1e3
    return {
        "layer_median_s": layer_t.median_s,
        "reference_median_s": reference_t.median_s,
        "speedup_over_reference": reference_t.median_s / layer_t.median_s,
        "published_reference_s": published_s,
        "speedup_over_published": None if published_s is None else published_s / layer_t.median_s,
        "target_speedup": TARGET_SPEEDUP,
    }


def speedup_over_algorithm(
    model: str, length: int, mode: str, baseline: str, *, repeats: int = 25
) -> dict:
    """The layer's default (``"auto"``) against the same layer with ``algorithm=baseline``,
    timed alternately in this process: how a change of default was measured (e.g. ``"fused"``
    against the unfused ``"native"``)."""
    layer_t, baseline_t = _alternate(
        layer_program(model, length, mode), layer_program(model, length, mode, baseline), repeats
    )
    return {
        "algorithm": layer(model).resolved_algorithm(),
        "baseline": baseline,
        "layer_median_s": layer_t.median_s,
        "baseline_median_s": baseline_t.median_s,
        "speedup_over_baseline": baseline_t.median_s / layer_t.median_s,
    }


def _against_roofline(
    program: Program, model: str, length: int, mode: str, repeats: int
) -> tuple[float, Any, Any]:
    """The program's median time, with the layer's analytic counts and the peaks measured in
    this process just before and after the timing (the better of the two)."""
    import equinox as eqx

    from linrnn_bench.harness.measure import roofline
    from linrnn_bench.models.network import count_parameters

    median, peaks = roofline.peaks_around(lambda: median_seconds(program, repeats=repeats))
    the_layer = layer(model)
    shape = roofline.SystemShape.of(eqx.filter_eval_shape(the_layer.discrete_system))
    counts = roofline.layer_counts(
        shape, length=length, batch=BATCH, mode=mode, params=count_parameters(the_layer)
    )
    return median, counts, peaks


def roofline_fraction(model: str, length: int, mode: str, *, repeats: int = 5) -> dict:
    """The layer's median time against its roofline bound, peaks measured in this process."""
    from linrnn_bench.harness.measure import roofline

    program = layer_program(model, length, mode)
    median, counts, peaks = _against_roofline(program, model, length, mode, repeats)
    return roofline.roofline_columns(counts, peaks, median)


def speedup_ceiling(model: str, length: int, mode: str, *, repeats: int = 5) -> dict:
    """The in-run ratio that an implementation running at the layer's roofline would reach.

    ``speedup_at_roofline`` is the in-run reference's median time over the layer's roofline
    bound (`roofline_fraction`'s: the same analytic FLOPs and bytes, peaks measured in this
    process around the reference's timing). The in-run ratio is at most that times the layer's
    roofline fraction, so ``required_roofline_fraction`` (`TARGET_SPEEDUP` over it) is the
    fraction of the roofline that the in-run target needs; above 1 the target cannot be met with
    the layer's FLOPs on this machine.
    """
    from linrnn_bench.harness.measure import roofline

    program = reference_program(model, length, mode)
    reference_s, counts, peaks = _against_roofline(program, model, length, mode, repeats)
    bound_s = roofline.bound(counts, peaks).seconds
    at_roofline = reference_s / bound_s
    return {
        "reference_median_s": reference_s,
        "bound_s": bound_s,
        "speedup_at_roofline": at_roofline,
        "required_roofline_fraction": TARGET_SPEEDUP / at_roofline,
    }


class InPlaceProgram(Program):
    """A program whose second argument is donated: each call feeds its output back as that
    argument, so that every call runs in place on one buffer (no fresh allocation)."""

    def call(self) -> Any:
        out = self.compiled(*self.args)
        self.args = (self.args[0], out)
        return out


SCAN_VARIANTS: tuple[str, ...] = ("engine", "in_place")


def scan_program(length: int = SCAN_LENGTH, variant: str = "engine") -> tuple[Program, int]:
    """The scan alone over (B, L, P) planar float32 inputs, P = 128 complex states, and P.

    ``"engine"``: the recurrence ``"auto"`` picks on this backend (`environment` records
    which), as the layers run it: a fresh output per call (written with streaming stores, as
    it exceeds the cache; with glibc's default settings a fresh 128 MiB buffer pays a page
    fault per page, which the Makefile's ``GLIBC_TUNABLES`` avoid; docs/performance.md).
    ``"in_place"`` (CPU, native kernel only): the native kernel overwriting a donated buffer,
    each output fed back as the next input: the recurrence streaming over one buffer.
    |lambda| = 0.5 keeps the fed-back values bounded (at most doubling per call).
    """
    import jax
    import jax.numpy as jnp
    import jax.random as jr

    from linrnn_bench.models import _engine, _native
    from linrnn_bench.models._scan import planar_scan

    if variant not in SCAN_VARIANTS:
        raise ValueError(f"Unknown scan variant {variant!r}; accepted: {list(SCAN_VARIANTS)}.")
    states = 128
    k_b, k_lam = jr.split(jr.PRNGKey(SEED + 2))
    b = jr.normal(k_b, (BATCH, length, 2, states))
    angle = jr.uniform(k_lam, (states,), maxval=6.28)
    lam = (0.5 * jnp.cos(angle), 0.5 * jnp.sin(angle))
    if variant == "engine":
        algorithm = _engine._recurrence_for(None)

        def scan(lam, b):
            return jax.vmap(lambda x: planar_scan(*lam, x, algorithm=algorithm))(b)

        return _compile(scan, lam, b), states

    def scan_in_place(lam, b):
        return jax.vmap(lambda x: _native.planar_scan(*lam, x, reverse=False, in_place=True))(b)

    from linrnn_bench.harness.measure import timing

    compiled, lower_s, compile_s = timing.compile_timed(
        scan_in_place, lam, b, donate_argnums=(1,)
    )
    return InPlaceProgram(compiled, (lam, jnp.array(b)), lower_s, compile_s), states


def scan_bandwidth_fraction(
    length: int = SCAN_LENGTH, *, repeats: int = 5, variant: str = "engine"
) -> dict:
    """The scan alone: its memory-bound roofline (b read, h written) against its median time."""
    from linrnn_bench.harness.measure import roofline

    program, states = scan_program(length, variant)
    median, peaks = roofline.peaks_around(lambda: median_seconds(program, repeats=repeats))
    counts = roofline.scan_counts(states, length=length, batch=BATCH)
    return {**roofline.roofline_columns(counts, peaks, median), "scan_variant": variant}


def working_memory(
    model: str, length: int, mode: str = "forward_backward", algorithm: str = "auto"
) -> dict:
    """Compiled memory of the layer's program; temporaries against one (B, L, P) state sequence.

    The target: forward+backward keeps at most one activation beyond its inputs and outputs,
    i.e. ``temp_over_state <= 1``.
    """
    import equinox as eqx

    from linrnn_bench.harness.measure.memory import compiled_memory
    from linrnn_bench.harness.programs import COMPLEX_BYTES

    program = layer_program(model, length, mode, algorithm)
    memory = compiled_memory(program.compiled)
    system = eqx.filter_eval_shape(layer(model).discrete_system)
    states = 1
    for n in system.lam.shape:
        states *= int(n)
    state_bytes = BATCH * length * states * COMPLEX_BYTES
    activation_bytes = BATCH * length * D_MODEL * 4
    return {
        **memory,
        "state_activation_bytes": state_bytes,
        "temp_over_state": memory["temp_bytes"] / state_bytes,
        "temp_over_activation": memory["temp_bytes"] / activation_bytes,
    }


def activation_memory(model: str, algorithm: str = "auto") -> dict:
    """The part of forward+backward's temporaries that grows with L, in state sequences.

    ``temp_bytes = constant + slope L`` fitted (the memory study's `fit_linear`) through the
    compiled programs at `LENGTHS`. An activation is what grows with the sequence, so
    ``activations_over_state`` (the slope over one (B, L, P) state sequence's bytes per step)
    counts the activations a training step keeps (target: at most one), and
    ``constant_temp_bytes`` is what does not grow with L: the per-sequence parameter cotangents
    that `jax.vmap` makes before summing them (B x 4PH numbers), a parametrisation's
    intermediates (RotRNN's matrix exponential) and the like.
    """
    from linrnn_bench.harness.measure.memory import fit_linear

    points = [working_memory(model, n, algorithm=algorithm) for n in LENGTHS]
    fit = fit_linear([float(n) for n in LENGTHS], [float(p["temp_bytes"]) for p in points])
    state_bytes_per_step = points[0]["state_activation_bytes"] / LENGTHS[0]
    return {
        "activations_over_state": fit.slope / state_bytes_per_step,
        "constant_temp_bytes": fit.intercept,
        "lengths": tuple(LENGTHS),
    }


def environment(model: str | None = None) -> dict:
    """Allocator, XLA flags, backend and device of this process (recorded with every result),
    and the engine algorithm the layer runs (``models.resolve_algorithm``)."""
    from linrnn_bench.harness.measure import roofline

    out = roofline.environment_columns()
    if model is not None:
        out["algorithm"] = layer(model).resolved_algorithm()
    return out
