"""The throughput study's scope ``"step"``: what a training run waits for.

For each (model, task) of the accuracy study at the throughput config's ``step_preset`` (its
first seed, its recipe's learning rates), one run times the network's training step at that
study's shapes, on the run's own batches (cut to their length bucket), in parts timed
alternately (`TrainingStep`: the layers, the optimiser, the rest of the step, the host, an
evaluation pass), with the compile time and its estimated share of a run, throughput in real
(unpadded) tokens, and the roofline fraction of the whole step (`step_counts`). The step timed
is `harness.train.Stepper`, the step `harness.train.train` runs.

The rest of the study (its config, grid, presets, the layer and network scopes, the columns
all scopes share) is `harness.studies.throughput`, which imports this module.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

from ...measure import roofline, timing
from ...programs import choices, measured_models
from .._schema import Column


def check_step_selection(step_preset: str, step_tasks: tuple[str, ...]) -> None:
    """``step_preset`` is a preset of the accuracy study and ``step_tasks`` (``()``: all) are
    among its tasks; else a `ValueError` listing the accepted values."""
    from .. import accuracy

    presets = tuple(accuracy.STUDY.presets)
    if step_preset not in presets:
        raise ValueError(
            f"throughput.step_preset={step_preset!r} is not accepted; accepted "
            f"values (the accuracy study's presets): {list(presets)}."
        )
    known = accuracy.STUDY.presets[step_preset].tasks
    choices("throughput.step_tasks", step_tasks or known, known)


@dataclasses.dataclass(frozen=True)
class StepRun:
    """One network training step at the shapes of one accuracy-study run (its identity).

    ``task_options``, ``network`` and ``train`` are those of the accuracy study's run of
    (``model``, ``task``) at ``study_preset`` (its first seed), so the step timed is the step
    that study trains with.
    """

    scope: Literal["step"]
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


def step_runs(config: Any) -> list[StepRun]:
    """The accuracy study's runs at ``config.step_preset`` (``config`` a
    `harness.studies.throughput.ThroughputConfig`), one per (model, task), first seed."""
    from .. import accuracy

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

        from ... import train as training

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

    from ... import train as training

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

    from linrnn_bench.models.network import count_parameters

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
    return roofline.Counts(
        flops=flops, bytes=bytes_,
        source="analytic, whole step (harness.studies.throughput.step.step_counts)")


def measure_step(spec: StepRun) -> dict[str, Any]:
    import equinox as eqx
    import jax

    from linrnn_bench import tasks
    from linrnn_bench.models.network import count_parameters

    task = tasks.build(spec.task, **dict(spec.task_options))
    clock = timing.Stopwatch()
    step = training_step(spec.network, task, spec.train, seed=spec.seed)
    with timing.no_compilation_cache():  # compiles, not loads from the disk cache
        jax.block_until_ready(step.call("step"))
        first_s = clock.lap()
        step.call("evaluation")
        first_eval_s = clock.lap()
    parts, peaks = roofline.peaks_around(
        lambda: step.time_parts(warmup=spec.warmup, repeats=spec.repeats),
        matmul_size=spec.peak_matmul_size, stream_mib=spec.peak_stream_mib,
        repeats=spec.peak_repeats)
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


def step_rows(spec: StepRun) -> list[dict[str, Any]]:
    """The run's one row: the step's shapes, its times by part, tokens per second (real,
    unpadded: what a run learns from) and the whole step's roofline columns."""
    measured = measure_step(spec)
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


# The columns of a step's row beyond those every scope's row has
# (`harness.studies.throughput.COLUMNS`), in its row's order.
STEP_COLUMNS: dict[str, Column] = {
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
}
