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
Q / peak bytes/s) from our analytic count (`harness.measure.roofline.layer_counts`: model FLOPs of the
recurrence form, minimum bytes). XLA's own cost analysis is recorded beside it (``xla_flops``,
``xla_bytes``); the network's rows carry the layers' count only (``count_source`` says so), so
their fraction is an upper bound on how close the whole network runs to its roofline.

Scope ``"step"`` times what a training run waits for: the network's training step of each
(model, task) of the accuracy study at ``step_preset``, at that study's shapes, on the run's
own batches (cut to their length bucket), in parts timed alternately (`TrainingStep`: the
layers, the optimiser, the rest of the step, the host, an evaluation pass), with the compile
time and its estimated share of a run, throughput in real (unpadded) tokens, and the roofline
fraction of the whole step (`step_counts`).

Sizes: ``"paper"`` is each layer at the width and state size of one published configuration
(its registration's `models.PaperSize`; ours are the LRA ListOps rows, all at H = 128);
``"matched"`` keeps the paper's options and picks the ``d_state`` whose parameter count is
closest to ``matched_params`` (`harness.programs`).

A layer registered without a discrete system (a time-varying layer) is timed like any other;
its roofline columns are empty (``count_source`` says why), as the counts need the system.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

import models
from models._validate import non_negative_int, positive_int

from ..measure import roofline, timing
from ..measure.memory import compiled_memory
from ..programs import (
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
from ._schema import ENVIRONMENT, PROGRAM, Column, Schema, merged
from ._study import Study

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
            from . import accuracy

            presets = tuple(accuracy.STUDY.presets)
            if self.step_preset not in presets:
                raise ValueError(
                    f"throughput.step_preset={self.step_preset!r} is not accepted; accepted "
                    f"values (the accuracy study's presets): {list(presets)}."
                )
            known = accuracy.STUDY.presets[self.step_preset].tasks
            choices("throughput.step_tasks", self.step_tasks or known, known)
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


def _peaks(spec: ThroughputRun) -> roofline.Peaks:
    return roofline.measure_peaks(
        matmul_size=spec.peak_matmul_size, stream_mib=spec.peak_stream_mib,
        repeats=spec.peak_repeats,
    )


def _measure_layer(spec: ThroughputRun, d_state: int) -> dict[str, Any]:
    import jax.random as jr

    from models.network import count_parameters

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
    before = _peaks(spec)
    times = timing.time_calls(make_call(compiled), warmup=spec.warmup, repeats=spec.repeats)
    peaks = roofline.Peaks.best(before, _peaks(spec))
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


def _measure_network(spec: ThroughputRun, d_state: int) -> dict[str, Any]:
    import equinox as eqx
    import jax
    import jax.numpy as jnp
    import jax.random as jr

    from models.network import NetworkConfig, count_parameters
    from tasks._base import TaskInfo

    from .. import train

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
    layer = network.blocks[0].layer
    shape = roofline.SystemShape.of(eqx.filter_eval_shape(layer.discrete_system))
    layer_params = count_parameters(layer)

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

    first_s = timing.time_first_call(call)  # a real compile, not a load from the disk cache
    before = _peaks(spec)
    times = timing.time_calls(call, warmup=spec.warmup, repeats=spec.repeats)
    peaks = roofline.Peaks.best(before, _peaks(spec))
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


# --------------------------------------------------------------------------------------------
# The network's training step at the shapes a study trains at (scope "step")


@dataclasses.dataclass(frozen=True)
class StepRun:
    """One network training step at the shapes of one accuracy-study run (its identity).

    ``task_options``, ``network`` and ``train`` are those of the accuracy study's run of
    (``model``, ``task``) at ``study_preset`` (its first seed), so the step timed is the step
    that study trains with.
    """

    scope: Scope
    model: str
    task: str
    study_preset: str
    task_options: tuple[tuple[str, Any], ...]
    network: Any  # models.network.NetworkConfig
    train: Any  # harness.train.TrainConfig
    warmup: int
    repeats: int
    peak_matmul_size: int
    peak_stream_mib: int
    peak_repeats: int
    seed: int


def step_runs(config: ThroughputConfig) -> list[StepRun]:
    """The accuracy study's runs at ``config.step_preset``, one per (model, task), first seed."""
    from . import accuracy

    study = accuracy.STUDY.presets[config.step_preset]
    models_ = measured_models("throughput.models", config.models)
    seed = study.seeds[0]
    runs = []
    for spec in accuracy.grid(study):
        if spec.seed != seed or spec.network.layer not in models_:
            continue
        if (spec.train.lr, spec.train.recurrent_lr) != (spec.recipe_lr,
                                                        spec.recipe_recurrent_lr):
            continue  # a tuning-grid run: the same program as the recipe's, timed once
        if config.step_tasks and spec.task not in config.step_tasks:
            continue
        runs.append(StepRun(
            scope="step", model=spec.network.layer, task=spec.task,
            study_preset=config.step_preset, task_options=spec.task_options,
            network=spec.network, train=spec.train, warmup=config.warmup,
            repeats=config.repeats, peak_matmul_size=config.peak_matmul_size,
            peak_stream_mib=config.peak_stream_mib, peak_repeats=config.peak_repeats,
            seed=seed,
        ))
    return runs


# The parts of a training run that `TrainingStep` times, in the order of its row's columns.
STEP_PARTS: tuple[str, ...] = ("step", "layers", "optimiser", "host", "evaluation")


class TrainingStep:
    """A network's training step as `harness.train.train` runs it, ready to time in parts.

    ``call("step")`` is one jitted training step on the next of a few batches drawn by the
    run's own sampler beforehand (the same examples, cut to their bucket); the other parts are
    what a run spends around it or inside it:

    - ``"layers"``: forward and backward (VJP with a random cotangent) of every block's layer
      alone, at the cut batch's shape: the part of the step the engine computes;
    - ``"optimiser"``: the optimiser update alone (the step's last part);
    - ``"host"``: drawing the next batch (numpy indexing, the cut, the transfer);
    - ``"evaluation"``: one validation pass (`harness.train.evaluate`), made
      ``train.steps / train.eval_every`` times per run, plus one test pass.

    The rest of the step (encoder, norms, GLU, residuals, pooling, head, loss, and the
    backward of these) is the step minus the layers and the optimiser.
    """

    def __init__(self, network: Any, state: Any, task: Any, train_config: Any, *, d_model: int,
                 seed: int, batches: int = 4):
        import equinox as eqx
        import jax
        import jax.numpy as jnp
        import jax.random as jr
        import numpy as np

        from .. import train as training

        self.task, self.config = task, train_config
        self.optimiser = training.make_optimiser(network)
        params = eqx.filter(network, eqx.is_inexact_array)
        opt_state = training.init_optimiser(self.optimiser, params, train_config)
        # The accuracy study's step (`harness.train.Stepper`) on host batches, as `train` runs it.
        self.stepper = training.Stepper(self.optimiser, network, state, opt_state)
        self.sampler = training.BatchSampler(task.split("train"), train_config.batch_size, seed,
                                             device=False)
        self.batches = [self.sampler(i) for i in range(batches)]
        self.key = jr.PRNGKey(seed)
        self.val = task.split("val")
        self.real_tokens = float(np.mean([np.sum(np.asarray(b.lengths)) for b in self.batches]))
        self.padded_tokens = float(np.mean([np.prod(b.inputs.shape[:1 + task.info.pair])
                                            * b.inputs.shape[1 + task.info.pair]
                                            for b in self.batches]))
        self._i = 0

        layers = [block.layer for block in network.blocks]
        cut = max(b.inputs.shape[1 + task.info.pair] for b in self.batches)
        towers = 2 if task.info.pair else 1
        u = jr.normal(jr.PRNGKey(seed + 1),
                      (towers * train_config.batch_size, cut, d_model))

        @eqx.filter_jit
        def layers_fb(layers, u):
            out = []
            for layer in layers:
                y, vjp = jax.vjp(lambda l, u: jax.vmap(l)(u), layer, u)
                out.append(vjp(y))
            return out

        @eqx.filter_jit
        def update(grads, opt_state, params):
            updates, opt_state = training.optimiser_update(self.optimiser, grads, opt_state,
                                                           params)
            return eqx.apply_updates(params, updates), opt_state

        grads = jax.tree.map(jnp.ones_like, params)
        self._calls = {
            "step": self._step,
            "layers": lambda: layers_fb(layers, u),
            "optimiser": lambda: update(grads, opt_state, params),
            "host": lambda: self.sampler(len(self.batches) + self._next()),
            "evaluation": lambda: training.evaluate(
                *self.stepper.carry()[:2], self.val, batch_size=train_config.eval_batch_size),
        }

    def _next(self) -> int:
        self._i += 1
        return self._i

    def _step(self) -> Any:
        batch = self.batches[self._next() % len(self.batches)]
        return self.stepper(batch, self.key)

    def call(self, part: str) -> Any:
        """One call of ``part`` (one of `STEP_PARTS`), its outputs for `jax.block_until_ready`."""
        if part not in self._calls:
            raise ValueError(f"Unknown part {part!r}; accepted: {list(STEP_PARTS)}.")
        return self._calls[part]()

    def compiled_step(self) -> Any:
        """The training step's compiled executable (for XLA's cost analysis)."""
        return self.stepper.compiled(self.batches[0], self.key)

    def time_parts(self, *, warmup: int, repeats: int) -> dict[str, Any]:
        """`harness.measure.timing.Timing` of each part, calls alternating between the parts
        so that the machine's load falls on all alike."""
        times: dict[str, list[float]] = {part: [] for part in STEP_PARTS}
        for part in STEP_PARTS:
            timing.time_calls(lambda: self.call(part), warmup=warmup, repeats=1)
        for _ in range(repeats):
            for part in STEP_PARTS:
                times[part].extend(
                    timing.time_calls(lambda: self.call(part), warmup=0, repeats=1).times_s)
        return {part: timing.Timing(tuple(t)) for part, t in times.items()}


def training_step(network_config: Any, task: Any, train_config: Any, *, seed: int
                  ) -> TrainingStep:
    """`TrainingStep` of the network ``harness.train.train`` builds for this run."""
    import jax.random as jr

    from .. import train as training

    network, state = training.build_network(
        network_config, task.info, key=jr.fold_in(jr.PRNGKey(seed), 0))
    return TrainingStep(network, state, task, train_config, d_model=network_config.d_model,
                        seed=seed)


def step_counts(step: TrainingStep, network_config: Any) -> roofline.Counts:
    """Model FLOPs and minimum bytes of one whole training step, analytic (stated here).

    - every layer: `roofline.layer_counts` in mode ``"train"`` at the cut batch's shape (its
      Adam update included);
    - the rest of each block, per step of each sequence, forward: BatchNorm (5 H), GELU (8 H),
      the GLU's H x H matmul and gate (2 H^2 + 6 H), the residual (H); and the other
      parameters' AdamW update (`roofline.ADAM_FLOPS_PER_PARAM` + 2 per parameter);
    - the encoder (a gather, or a d x H matmul for real inputs), pooling and the head
      (2 H C per sequence, per step for per-step targets);
    - backward counted as twice the forward. Bytes: the batch read once, every parameter and
      its two Adam moments read and written once, the layers' minimum bytes.
    """
    import equinox as eqx

    from models.network import count_parameters

    info = step.task.info
    batch = step.batches[0]
    towers = 2 if info.pair else 1
    B = batch.inputs.shape[0] * towers
    L = batch.inputs.shape[1 + info.pair]
    H = network_config.d_model
    network = step.stepper.carry()[0]
    layer_flops = layer_bytes = 0.0
    layer_params = 0
    for block in network.blocks:
        shape = roofline.SystemShape.of(eqx.filter_eval_shape(block.layer.discrete_system))
        params = count_parameters(block.layer)
        layer_params += params
        c = roofline.layer_counts(shape, length=L, batch=B, mode="train", params=params)
        layer_flops += c.flops
        layer_bytes += c.bytes
    per_token = network_config.depth * (2 * H * H + 20 * H)
    if info.input_kind == "real":
        per_token += 2 * info.input_dim * H
    head = 2 * H * info.num_classes * (L if info.target == "per_step" else 1) * B
    other_params = count_parameters(network) - layer_params
    flops = (layer_flops + 3 * (per_token * B * L + head)
             + (roofline.ADAM_FLOPS_PER_PARAM + 2) * other_params)
    bytes_ = (layer_bytes + batch.inputs.size * batch.inputs.dtype.itemsize
              + 2 * roofline.ADAM_ARRAYS * 4 * other_params)
    return roofline.Counts(flops=flops, bytes=bytes_,
                           source="analytic, whole step (harness.studies.throughput.step_counts)")


def _measure_step(spec: StepRun) -> dict[str, Any]:
    import equinox as eqx
    import jax

    import tasks
    from models.network import count_parameters

    task = tasks.build(spec.task, **dict(spec.task_options))
    clock = timing.Stopwatch()
    step = training_step(spec.network, task, spec.train, seed=spec.seed)
    with timing.no_compilation_cache():  # compiles, not loads from the disk cache
        jax.block_until_ready(step.call("step"))
        first_s = clock.lap()
        step.call("evaluation")
        first_eval_s = clock.lap()
    before = _peaks(spec)
    parts = step.time_parts(warmup=spec.warmup, repeats=spec.repeats)
    peaks = roofline.Peaks.best(before, _peaks(spec))
    median = {part: t.median_s for part, t in parts.items()}
    counts = step_counts(step, spec.network)
    layer = step.stepper.carry()[0].blocks[0].layer
    shape = roofline.SystemShape.of(eqx.filter_eval_shape(layer.discrete_system))
    evaluations = -(-spec.train.steps // spec.train.eval_every) + 1  # validation passes, test
    run_s = spec.train.steps * (median["step"] + median["host"]) + evaluations * (
        median["evaluation"])
    compile_s = max(first_s - median["step"], 0.0) + max(first_eval_s - median["evaluation"],
                                                         0.0)
    return {
        "task": spec.task,
        "study_preset": spec.study_preset,
        "depth": spec.network.depth,
        "d_model": spec.network.d_model,
        "d_state": spec.network.d_state,
        "seq_len": int(step.batches[0].inputs.shape[1 + task.info.pair]),
        "batch": spec.train.batch_size,
        "real_tokens_per_step": step.real_tokens,
        "padded_tokens_per_step": step.padded_tokens,
        "algorithm": layer.resolved_algorithm(),
        "states": shape.states,
        "structure": shape.structure,
        "params": count_parameters(step.stepper.carry()[0]),
        "lower_s": None,
        "compile_s": compile_s,
        "compile_method": "first_call",
        **parts["step"].summary(),
        **{f"{part}_median_s": median[part] for part in STEP_PARTS if part != "step"},
        "rest_median_s": max(median["step"] - median["layers"] - median["optimiser"], 0.0),
        "run_estimate_s": run_s + compile_s,
        "compile_share": compile_s / (run_s + compile_s),
        **roofline.roofline_columns(counts, peaks, median["step"]),
        **roofline.xla_costs(step.compiled_step()),
        "real_tokens_per_s": step.real_tokens / median["step"],
    }


def run(spec: ThroughputRun | StepRun) -> list[dict[str, Any]]:
    """One row: the configuration, the times, tokens per second and the roofline columns."""
    if isinstance(spec, StepRun):
        measured = _measure_step(spec)
        return [{
            "scope": "step",
            "model": spec.model,
            "size": "study",
            "mode": "train",
            "dtype": "float32",
            **measured,
            # Real (unpadded) tokens: what a run learns from.
            "tokens_per_s": measured["real_tokens_per_step"] / measured["time_median_s"],
            "tokens_per_s_best": measured["real_tokens_per_step"] / measured["time_min_s"],
            **roofline.environment_columns(),
        }]
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
        "task": Column(str, "the accuracy study's task whose step is timed"),
        "study_preset": Column(str, "the accuracy study's preset whose shapes are timed"),
        "depth": Column(int, "blocks of the network"),
        "real_tokens_per_step": Column(float, "unpadded tokens of a training batch (mean over "
                                              "the batches timed)"),
        "padded_tokens_per_step": Column(float, "tokens of a batch as computed, cut to its "
                                                "length bucket (mean over the batches timed)"),
        **{f"{part}_median_s": Column(float, f"median time of the step's part '{part}', s "
                                             "(`TrainingStep`; a timing)")
           for part in STEP_PARTS if part != "step"},
        "rest_median_s": Column(float, "the step's median minus its layers and optimiser, s"),
        "run_estimate_s": Column(float, "the run's estimated wall time: steps x (step + host) "
                                        "+ evaluations + compile, s"),
        "compile_share": Column(float, "the compile time's share of run_estimate_s"),
        "real_tokens_per_s": Column(float, "real_tokens_per_step / time_median_s"),
    }, ENVIRONMENT),
    kinds={
        "layer": _LAYER_KIND,
        "network": tuple(c for c in _LAYER_KIND if not c.startswith("compiled_")),
        "step": _STEP_KIND,
    },
    by="scope",
)

PRESETS = {
    # Seconds: every model at its paper size, one short sequence, forward and training step.
    "smoke": ThroughputConfig(
        sizes=("paper",), scopes=("layer",), modes=("forward", "train"), seq_lens=(64,),
        batches=(2,), warmup=1, repeats=2, peak_matmul_size=256, peak_stream_mib=16,
        peak_repeats=2,
    ),
    # Most of its time is XLA compiling one program per row: each layer alone, both sizes,
    # L = 1024, 4096, 16384 at B = 1 and L = 1024 at B = 16 (the batch pairs are capped at 16384
    # tokens per call); 64 rows. The network (scopes=(network,)) and L = 256 are overrides
    # here: each adds a third to a half of the time. Its time in a report: docs/performance.md.
    "cpu": ThroughputConfig(
        sizes=("paper", "matched"), scopes=("layer",), modes=("forward", "train"),
        seq_lens=(1024, 4096, 16384), batches=(1, 16), max_tokens=16384, repeats=3,
        peak_matmul_size=1024, peak_stream_mib=64, peak_repeats=3,
    ),
    # An accelerator: L up to 65536, batches to 32; larger peak measurements.
    "gpu": ThroughputConfig(
        sizes=("paper", "matched"), scopes=("layer", "network"), modes=("forward", "train"),
        seq_lens=(1024, 4096, 16384, 65536), batches=(1, 8, 32), max_tokens=2**21, repeats=10,
        warmup=3, peak_matmul_size=8192, peak_stream_mib=2048, peak_repeats=10,
    ),
}

STUDY = Study(
    name="throughput",
    description="Tokens/s of each layer and network (forward, training step) vs the roofline",
    presets=PRESETS,
    grid=grid,
    run=run,
    skip_reason=without_paper_size,
    exclusive=True,  # it times the machine: one run at a time
    # 2: the network's BatchNorm over valid steps and its training step with hyperparameters
    # as data (`harness.train`): network-scope times of version 1 measure other code.
    # 3: the step scope's batches of a task under 128 tokens are no longer cut to buckets.
    # 4: the network scope times `harness.train.Stepper` (the step `train` runs: flat arrays,
    # one jit call) instead of a filter_jit step on modules; the optimiser is optax's.
    version=4,
)
