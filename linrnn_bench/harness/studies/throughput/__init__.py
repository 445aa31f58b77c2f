"""Throughput: tokens per second of each layer and of the full network, against the roofline.

For every (scope, model, size, mode, L, batch) one run measures, in this order and one process:

1. the machine's peaks (`harness.measure.roofline.measure_peaks`: matmul FLOP/s, memory bytes/s);
2. the computation, compiled ahead of time so that compile time is reported apart: layer scope
   uses ``jax.jit(...).lower(...).compile()`` (``lower_s``, ``compile_s``); network scope uses
   the project's training step (`harness.train.Stepper`, the step `harness.train.train` runs),
   whose compile time is the first call's time minus the median of the timed calls
   (``compile_method``). The persistent compilation cache is off for these compiles, so they
   are never disk loads;
3. ``warmup`` untimed calls, then ``repeats`` timed ones (median, quartiles, min and max);
4. the peaks again; the better of the two measurements is the run's peak.

Modes: ``"forward"`` (inference, y = layer(u) batched), ``"forward_backward"`` (the VJP with a
fixed random cotangent dy: gradients w.r.t. parameters and input) and ``"train"`` (one
optimiser step: forward, backward, Adam update; for the layer, mean squared error to a fixed
random target; for the network, the project's training step on a synthetic token task).
Tokens per second are B L / median time.

The roofline fraction of a row is t_bound / t_median with t_bound = max(F / peak FLOP/s,
Q / peak bytes/s) from our analytic count (`harness.measure.roofline.layer_counts`: model FLOPs
of the recurrence form, minimum bytes). XLA's own cost analysis is recorded beside it (``xla_flops``,
``xla_bytes``); the network's rows carry the layers' count only (``count_source`` says so), so
their fraction is an upper bound on how close the whole network runs to its roofline.

Scope ``"step"`` times what a training run waits for: the network's training step of each
(model, task) of the accuracy study at ``step_preset``, in parts. It is its own module,
`harness.studies.throughput.step` (its runs, its measuring, its row's columns); this one holds
the study's config, grid and presets, the layer and network scopes, and the columns all share.

Sizes: ``"paper"`` is each layer at the width and state size of one published configuration
(its registration's `models.PaperSize`; ours are the LRA ListOps rows, all at H = 128);
``"matched"`` keeps the paper's options and picks the ``d_state`` whose parameter count is
closest to ``matched_params`` (`harness.programs`).

A layer registered without a discrete system (a time-varying layer) is timed like any other;
its roofline columns are empty (``count_source`` says why), as the counts need the system.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Literal

from linrnn_bench import models
from linrnn_bench.validation import non_negative_int, positive_int

from ...measure import roofline, timing
from ...measure.memory import compiled_memory
from ...programs import (
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
    system_shape,
    without_paper_size,
)
from .._schema import ENVIRONMENT, PROGRAM, Column, Schema, merged
from .._study import Study, read_presets
from .step import (
    STEP_COLUMNS,
    STEP_PARTS,
    StepRun,
    check_step_selection,
    step_rows,
    step_runs,
)

Scope = Literal["layer", "network", "step"]
SCOPES: tuple[str, ...] = ("layer", "network", "step")

# The synthetic task of the network scope: ListOps' shape (20 tokens, 10 classes; the LRA paper).
NETWORK_VOCAB = 20
NETWORK_CLASSES = 10


@dataclasses.dataclass(frozen=True)
class ThroughputConfig:
    """The throughput study's configuration.

    Attributes:
        models: registry names or import paths; ``()``: every registered model with a paper
            size.
        sizes: ``"paper"`` and/or ``"matched"`` (module docstring).
        scopes: ``"layer"`` (the layer alone), ``"network"`` (the full network on synthetic
            tokens at ``seq_lens`` x ``batches``) and/or ``"step"`` (the training step of each
            (model, task) of the accuracy study at ``step_preset``, at that study's shapes,
            timed in parts: `TrainingStep`).
        modes: ``"forward"``, ``"forward_backward"`` (layer scope only) and/or ``"train"``.
        seq_lens: sequence lengths L.
        batches: batch sizes B.
        max_tokens: (L, B) pairs with B L above this are left out of the grid (0: none).
        matched_params: the parameter count the ``"matched"`` size aims at.
        depth: residual blocks of the network scope.
        warmup: untimed calls before timing.
        repeats: timed calls.
        peak_matmul_size: n of the n x n matmul that measures the FLOP/s peak.
        peak_stream_mib: MiB streamed to measure the bandwidth peak.
        peak_repeats: timed repetitions of each peak measurement.
        seed: the parameters' and inputs' seed.
        step_preset: the accuracy study's preset whose runs the ``"step"`` scope times.
        step_tasks: the tasks of that preset to time; ``()`` for all of them.
    """

    models: tuple[str, ...] = ()
    sizes: tuple[Size, ...] = ("paper", "matched")
    scopes: tuple[Scope, ...] = ("layer", "network")
    modes: tuple[roofline.Mode, ...] = ("forward", "train")
    seq_lens: tuple[int, ...] = (256, 1024, 4096, 16384)
    batches: tuple[int, ...] = (1, 8)
    max_tokens: int = 0
    matched_params: int = DEFAULT_MATCHED_PARAMS
    depth: int = 2
    warmup: int = 1
    repeats: int = 5
    peak_matmul_size: int = 1024
    peak_stream_mib: int = 128
    peak_repeats: int = 3
    seed: int = 0
    step_preset: str = "cpu"
    step_tasks: tuple[str, ...] = ()

    def __post_init__(self):
        measured_models("throughput.models", self.models)
        choices("throughput.sizes", self.sizes, SIZES)
        choices("throughput.scopes", self.scopes, SCOPES)
        choices("throughput.modes", self.modes, roofline.MODES)
        if "network" in self.scopes and "forward_backward" in self.modes:
            raise ValueError(
                "throughput: mode 'forward_backward' is measured for the layer scope only (the "
                "network's step is 'train'); drop it from modes or use scopes=('layer',)."
            )
        for name in ("seq_lens", "batches"):
            values = getattr(self, name)
            if not values:
                raise ValueError(f"throughput.{name} must not be empty.")
            for v in values:
                positive_int(f"throughput.{name} entry", v)
        non_negative_int("throughput.max_tokens", self.max_tokens)
        for name in ("matched_params", "depth", "repeats", "peak_matmul_size", "peak_stream_mib",
                     "peak_repeats"):
            positive_int(f"throughput.{name}", getattr(self, name))
        non_negative_int("throughput.warmup", self.warmup)
        if "step" in self.scopes:
            check_step_selection(self.step_preset, self.step_tasks)
        if not self.pairs():
            raise ValueError(
                f"throughput: every (seq_len, batch) exceeds max_tokens={self.max_tokens}; "
                "raise max_tokens or shorten seq_lens."
            )

    def pairs(self) -> list[tuple[int, int]]:
        """The (L, B) pairs measured: every combination with B L <= max_tokens."""
        return [
            (L, B) for L in self.seq_lens for B in self.batches
            if not self.max_tokens or L * B <= self.max_tokens
        ]


@dataclasses.dataclass(frozen=True)
class ThroughputRun:
    """One measured configuration (its identity in the store).

    ``d_state`` is None for the ``"matched"`` size: it is resolved in the run from
    ``matched_params`` and recorded in the row.
    """

    scope: Scope
    model: str
    size: Size
    d_model: int
    d_state: int | None
    options: tuple[tuple[str, Any], ...]
    matched_params: int | None
    mode: roofline.Mode
    seq_len: int
    batch: int
    depth: int
    warmup: int
    repeats: int
    peak_matmul_size: int
    peak_stream_mib: int
    peak_repeats: int
    seed: int


def grid(config: ThroughputConfig) -> list[Any]:
    """Every (scope, model, size, mode, L, B) of the config; for the ``"step"`` scope, every
    (model, task) of the accuracy study at ``step_preset`` (`StepRun`)."""
    runs: list[Any] = []
    for scope in config.scopes:
        if scope == "step":
            runs.extend(step_runs(config))
            continue
        for model in measured_models("throughput.models", config.models):
            paper = paper_size(model)
            for size in config.sizes:
                for mode in config.modes:
                    for L, B in config.pairs():
                        runs.append(ThroughputRun(
                            scope=scope,
                            model=model,
                            size=size,
                            d_model=paper.d_model,
                            d_state=paper.d_state if size == "paper" else None,
                            options=paper.options,
                            matched_params=config.matched_params if size == "matched" else None,
                            mode=mode,
                            seq_len=L,
                            batch=B,
                            depth=config.depth if scope == "network" else 0,
                            warmup=config.warmup,
                            repeats=config.repeats,
                            peak_matmul_size=config.peak_matmul_size,
                            peak_stream_mib=config.peak_stream_mib,
                            peak_repeats=config.peak_repeats,
                            seed=config.seed,
                        ))
    return runs


# --------------------------------------------------------------------------------------------
# Measuring


def _measure_layer(spec: ThroughputRun, d_state: int) -> dict[str, Any]:
    import jax.random as jr

    from linrnn_bench.models.network import count_parameters

    key = jr.PRNGKey(spec.seed)
    layer = models.build(
        spec.model, d_model=spec.d_model, d_state=d_state, key=jr.fold_in(key, 0),
        **dict(spec.options),
    )
    shape = system_shape(spec.model, layer)
    params = count_parameters(layer)
    function, args, donate, make_call = layer_program(
        layer, mode=spec.mode, batch=spec.batch, seq_len=spec.seq_len, d_model=spec.d_model,
        key=jr.fold_in(key, 1),
    )
    compiled, lower_s, compile_s = timing.compile_timed(function, *args, donate_argnums=donate)
    times, peaks = roofline.peaks_around(
        lambda: timing.time_calls(make_call(compiled), warmup=spec.warmup, repeats=spec.repeats),
        matmul_size=spec.peak_matmul_size, stream_mib=spec.peak_stream_mib,
        repeats=spec.peak_repeats)
    if shape is not None:
        counts = roofline.layer_counts(
            shape, length=spec.seq_len, batch=spec.batch, mode=spec.mode, params=params
        )
        bound = roofline.roofline_columns(counts, peaks, times.median_s)
    else:
        bound = _no_roofline(peaks)
    return {
        "algorithm": resolved_algorithm(layer),
        "states": state_count(spec.model, layer, spec.d_model),
        "structure": None if shape is None else shape.structure,
        "params": params,
        "lower_s": lower_s,
        "compile_s": compile_s,
        "compile_method": "aot",
        **times.summary(),
        **bound,
        **roofline.xla_costs(compiled),
        **{f"compiled_{k}": v for k, v in compiled_memory(compiled).items()},
    }


def _no_roofline(peaks: roofline.Peaks) -> dict[str, Any]:
    """`roofline.roofline_columns` for a layer without a discrete system: the peaks measured,
    no count and so no bound."""
    return {
        "flops": None, "bytes": None, "count_source": "none: the layer has no discrete system",
        "arithmetic_intensity": None, "peak_flops_per_s": peaks.flops_per_s,
        "peak_bytes_per_s": peaks.bytes_per_s, "peak_matmul_size": peaks.matmul_size,
        "peak_stream_bytes": peaks.stream_bytes, "bound_s": None, "bound_limiter": None,
        "roofline_fraction": None, "achieved_flops_per_s": None, "achieved_bytes_per_s": None,
    }


def _synthetic_network(spec: ThroughputRun, d_state: int):
    """The network ``spec`` times, built from its seed, with one batch of synthetic tokens of
    ListOps' shape (every sequence full length) and the key of a training step's dropout.

    Returns ``(network, state, batch, dropout key)``.
    """
    import jax.numpy as jnp
    import jax.random as jr

    from linrnn_bench.models.network import NetworkConfig
    from linrnn_bench.tasks import TaskInfo

    from ... import train

    info = TaskInfo(
        name="throughput", description="synthetic tokens of ListOps' shape", seq_len=spec.seq_len,
        variable_length=False, input_kind="tokens", num_classes=NETWORK_CLASSES,
        vocab_size=NETWORK_VOCAB,
    )
    config = NetworkConfig(
        layer=spec.model, layer_options=spec.options, depth=spec.depth, d_model=spec.d_model,
        d_state=d_state,
    )
    key = jr.PRNGKey(spec.seed)
    network, state = train.build_network(config, info, key=jr.fold_in(key, 0))
    k_x, k_y, k_drop = jr.split(jr.fold_in(key, 1), 3)
    batch = train.Batch(
        inputs=jr.randint(k_x, (spec.batch, spec.seq_len), 1, NETWORK_VOCAB, jnp.int32),
        labels=jr.randint(k_y, (spec.batch,), 0, NETWORK_CLASSES, jnp.int32),
        lengths=jnp.full((spec.batch,), spec.seq_len, jnp.int32),
    )
    return network, state, batch, k_drop


def _network_call(spec: ThroughputRun, network, state, batch, k_drop) -> Callable[[], Any]:
    """The call timed in ``spec.mode``: ``forward``, the compiled batched forward pass in
    inference mode; ``train``, one training step (`train.Stepper`, what training runs).
    Another mode is a `ValueError` listing the accepted ones."""
    import equinox as eqx
    import jax

    from ... import train

    if spec.mode == "forward":
        inference = eqx.nn.inference_mode(network)

        @eqx.filter_jit
        def forward(net, st, x, n):
            return jax.vmap(lambda x, n: net(x, n, st)[0], axis_name="batch")(x, n)

        def call():
            return forward(inference, state, batch.inputs, batch.lengths)
    elif spec.mode == "train":
        recipe = train.TrainConfig(steps=1000, batch_size=spec.batch)
        optimiser = train.make_optimiser(network)
        stepper = train.Stepper(optimiser, network, state, train.init_optimiser(
            optimiser, eqx.filter(network, eqx.is_inexact_array), recipe))

        def call():
            return stepper(batch, k_drop)
    else:
        raise ValueError(
            f"mode={spec.mode!r} is not measured for the network; accepted: forward, train."
        )
    return call


def _measure_network(spec: ThroughputRun, d_state: int) -> dict[str, Any]:
    """The network scope's row: the first call's and the steady calls' times of a whole
    network (`_network_call`), with the roofline of its layers' share of the work."""
    import equinox as eqx

    from linrnn_bench.models.network import count_parameters

    network, state, batch, k_drop = _synthetic_network(spec, d_state)
    layer = network.blocks[0].layer
    shape = roofline.SystemShape.of(eqx.filter_eval_shape(layer.discrete_system))
    layer_params = count_parameters(layer)
    call = _network_call(spec, network, state, batch, k_drop)
    first_s = timing.time_first_call(call)  # a real compile, not a load from the disk cache
    times, peaks = roofline.peaks_around(
        lambda: timing.time_calls(call, warmup=spec.warmup, repeats=spec.repeats),
        matmul_size=spec.peak_matmul_size, stream_mib=spec.peak_stream_mib,
        repeats=spec.peak_repeats)
    # The layers' share of the work: depth times one layer (encoder, norms, GLU and head are
    # not counted, so the fraction is an upper bound).
    one = roofline.layer_counts(
        shape, length=spec.seq_len, batch=spec.batch, mode=spec.mode, params=layer_params
    )
    counts = roofline.Counts(
        flops=spec.depth * one.flops, bytes=spec.depth * one.bytes, source="analytic, layers only"
    )
    return {
        "algorithm": layer.resolved_algorithm(),
        "states": shape.states,
        "structure": shape.structure,
        "params": count_parameters(network),
        "lower_s": None,
        "compile_s": max(first_s - times.median_s, 0.0),
        "compile_method": "first_call",
        **times.summary(),
        **roofline.roofline_columns(counts, peaks, times.median_s),
        "xla_flops": None,
        "xla_bytes": None,
        "xla_transcendentals": None,
    }


def run(spec: ThroughputRun | StepRun) -> list[dict[str, Any]]:
    """One row: the configuration, the times, tokens per second and the roofline columns."""
    if isinstance(spec, StepRun):
        return step_rows(spec)
    d_state = resolved_d_state(spec)
    if spec.scope == "layer":
        measured = _measure_layer(spec, d_state)
    elif spec.scope == "network":
        measured = _measure_network(spec, d_state)
    else:
        raise ValueError(f"scope={spec.scope!r}; accepted values: {list(SCOPES)}.")
    tokens = spec.batch * spec.seq_len
    return [{
        "scope": spec.scope,
        "model": spec.model,
        "size": spec.size,
        "mode": spec.mode,
        "seq_len": spec.seq_len,
        "batch": spec.batch,
        "d_model": spec.d_model,
        "d_state": d_state,
        "dtype": "float32",
        **measured,
        "tokens_per_s": tokens / measured["time_median_s"],
        "tokens_per_s_best": tokens / measured["time_min_s"],
        **roofline.environment_columns(),
    }]


# The row a run writes, by scope: a layer's or the network's timing (the layer's also with
# XLA's memory analysis of its program), or a study's training step timed in parts.
_TIME = "of the timed calls, s (a timing)"
_ROOFLINE: dict[str, Column] = {
    "flops": Column(float, "our analytic count of the model FLOPs of one call "
                           "(`harness.measure.roofline`); None without a discrete system", nullable=True),
    "bytes": Column(float, "our analytic count of its minimum memory traffic, bytes; None "
                           "without a discrete system", nullable=True),
    "count_source": Column(str, "what the count covers, or why there is none"),
    "arithmetic_intensity": Column(float, "flops / bytes", nullable=True),
    "peak_flops_per_s": Column(float, "the measured matmul peak, FLOP/s (the better of before "
                                      "and after the timing)"),
    "peak_bytes_per_s": Column(float, "the measured streaming peak, bytes/s"),
    "peak_matmul_size": Column(int, "the side of the peak's square float32 matmul"),
    "peak_stream_bytes": Column(int, "the size of the peak's streamed buffer, bytes"),
    "bound_s": Column(float, "the roofline bound max(flops / peak FLOP/s, bytes / peak bytes/s)"
                             ", s", nullable=True),
    "bound_limiter": Column(str, "which peak sets the bound: 'compute' or 'memory'",
                            nullable=True),
    "roofline_fraction": Column(float, "bound_s / time_median_s (1: at the machine's limit)",
                                nullable=True),
    "achieved_flops_per_s": Column(float, "flops / time_median_s", nullable=True),
    "achieved_bytes_per_s": Column(float, "bytes / time_median_s", nullable=True),
}
_TIMES = ("time_median_s", "time_min_s", "time_q25_s", "time_q75_s", "time_max_s",
          "time_repeats")
_COSTS = (*_ROOFLINE, "xla_flops", "xla_bytes", "xla_transcendentals")
_LAYER_KIND = (
    "scope", "model", "size", "mode", "seq_len", "batch", "d_model", "d_state", "dtype",
    "algorithm", "states", "structure", "params", "lower_s", "compile_s", "compile_method",
    *_TIMES, *_COSTS, "compiled_argument_bytes", "compiled_output_bytes", "compiled_temp_bytes",
    "compiled_alias_bytes", "compiled_generated_code_bytes", "compiled_total_bytes",
    "tokens_per_s", "tokens_per_s_best", *ENVIRONMENT,
)
_STEP_KIND = (
    "scope", "model", "size", "mode", "dtype", "task", "study_preset", "depth", "d_model",
    "d_state", "seq_len", "batch", "real_tokens_per_step", "padded_tokens_per_step",
    "algorithm", "states", "structure", "params", "lower_s", "compile_s", "compile_method",
    *_TIMES, *(f"{part}_median_s" for part in STEP_PARTS if part != "step"), "rest_median_s",
    "run_estimate_s", "compile_share", *_COSTS, "real_tokens_per_s", "tokens_per_s",
    "tokens_per_s_best", *ENVIRONMENT,
)
COLUMNS = Schema(
    columns=merged(PROGRAM, {
        "scope": Column(str, "what is timed: 'layer', 'network' or 'step'"),
        "size": Column(str, "'paper' or 'matched' (`harness.programs`), 'study' for a step"),
        "structure": Column(str, "the discrete system's structure; None without one",
                            nullable=True),
        "params": Column(int, "trained real numbers of what is timed"),
        "lower_s": Column(float, "time to lower the program, s (a timing; None when compiled "
                                 "by its first call)", nullable=True),
        "compile_s": Column(float, "time to compile, s (a timing)"),
        "compile_method": Column(str, "'aot' (lowered and compiled ahead of time) or "
                                      "'first_call' (first call minus the median call)"),
        "time_median_s": Column(float, f"median {_TIME}"),
        "time_min_s": Column(float, f"fastest {_TIME}"),
        "time_q25_s": Column(float, f"first quartile {_TIME}"),
        "time_q75_s": Column(float, f"third quartile {_TIME}"),
        "time_max_s": Column(float, f"slowest {_TIME}"),
        "time_repeats": Column(int, "timed calls"),
        **_ROOFLINE,
        "xla_flops": Column(float, "XLA's cost analysis: FLOPs (a while loop's body counted "
                                   "once); None where XLA gives none", nullable=True),
        "xla_bytes": Column(float, "XLA's cost analysis: bytes accessed", nullable=True),
        "xla_transcendentals": Column(float, "XLA's cost analysis: transcendentals",
                                      nullable=True),
        "compiled_argument_bytes": Column(int, "XLA's memory analysis of the program: inputs"),
        "compiled_output_bytes": Column(int, "its outputs"),
        "compiled_temp_bytes": Column(int, "its temporaries"),
        "compiled_alias_bytes": Column(int, "its outputs reusing a donated input's buffer"),
        "compiled_generated_code_bytes": Column(int, "its generated code"),
        "compiled_total_bytes": Column(int, "argument + output + temp - alias"),
        "tokens_per_s": Column(float, "B L / time_median_s (a step: real tokens)"),
        "tokens_per_s_best": Column(float, "B L / time_min_s (a step: real tokens)"),
        **STEP_COLUMNS,
    }, ENVIRONMENT),
    kinds={
        "layer": _LAYER_KIND,
        "network": tuple(c for c in _LAYER_KIND if not c.startswith("compiled_")),
        "step": _STEP_KIND,
    },
    by="scope",
)

PRESETS = read_presets(__name__, ThroughputConfig)

STUDY = Study(
    name="throughput",
    description="Tokens/s of each layer and network (forward, training step) vs the roofline",
    presets=PRESETS,
    grid=grid,
    run=run,
    planner=f"{__name__}.plan:plan",
    section=f"{__name__}.report:SECTION",
    skip_reason=without_paper_size,
    exclusive=True,  # it times the machine: one run at a time
    # 2: the network's BatchNorm over valid steps and its training step with hyperparameters
    # as data (`harness.train`): network-scope times of version 1 measure other code.
    # 3: the step scope's batches of a task under 128 tokens are no longer cut to buckets.
    # 4: the network scope times `harness.train.Stepper` (the step `train` runs: flat arrays,
    # one jit call) instead of a filter_jit step on modules; the optimiser is optax's.
    version=4,
)
