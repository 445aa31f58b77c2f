"""asv benchmarks of the network's training step at the accuracy study's shapes.

The step is `harness.train`'s, on the batches a run draws (the same sampler, the same cut to
length buckets), at the accuracy study's ``cpu`` preset: 2 blocks, H = 32, d_state = 32, batch
32, BatchNorm, half-GLU (`harness.studies.throughput_step.TrainingStep`). The in-run baseline
network is the same network, parameters and step with each block's layer computed in the public
references' style (`benchmarks.common.reference_forward`: lambda broadcast over time, B u
before a `jax.lax.associative_scan`, or the Annotated S4's Vandermonde kernel and FFT
convolution), so the network-level ratio is measured side by side in one process, calls
alternating, as the layer ratio is.

``python -m benchmarks.bench_network --before REV`` measures one process's before/after ratios
against the training code (``harness/train.py``, ``models/network.py``) of git revision REV:
tokens per second of the step with its host work, and a short run of two learning rates.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

from . import common

# The accuracy study's preset and tasks whose training step is benchmarked (asv: ListOps, the
# task of the speed goal; digits, the shortest fixed-length one).
PRESET = "cpu"
TASKS: tuple[str, ...] = ("listops", "digits")
# The in-run network ratio this project aims at (issue 21).
TARGET_NETWORK_SPEEDUP = 5.0


@functools.cache
def run_spec(model: str, task: str, preset: str = PRESET) -> Any:
    """The accuracy study's run of (``model``, ``task``) at ``preset``, first seed."""
    from harness.studies import accuracy

    config = accuracy.STUDY.presets[preset]
    for spec in accuracy.grid(config):
        if spec.network.layer == model and spec.task == task and spec.seed == config.seeds[0]:
            return spec
    raise NotImplementedError(f"The accuracy study's {preset} preset has no run of "
                              f"({model}, {task}).")


@functools.cache
def built_task(task: str, options: tuple) -> Any:
    import tasks

    return tasks.build(task, **dict(options))


def reference_style(network: Any, model: str) -> Any:
    """``network`` with each block's layer computed in the public references' style."""
    import equinox as eqx

    cls = _reference_layer_class()
    layers = [cls(b.layer, common.BENCHMARKS[model].structure) for b in network.blocks]
    return eqx.tree_at(lambda n: [b.layer for b in n.blocks], network, layers)


@functools.cache
def _reference_layer_class() -> type:
    import equinox as eqx

    class ReferenceStyleLayer(eqx.Module):
        """A registered layer's parameters, its forward written as the public references
        write it (`benchmarks.common.reference_forward`) from its `discrete_system()`."""

        layer: Any
        style: str = eqx.field(static=True)

        def __call__(self, u):
            system = self.layer.discrete_system()
            if self.style == "scan":
                return common.reference_scan_forward(system, u)
            elif self.style == "convolution":
                return common.reference_convolution_forward(system, u)
            raise ValueError(f"Unknown reference style {self.style!r}; accepted: scan, "
                             "convolution.")

        def recurrent_mask(self):
            return ReferenceStyleLayer(self.layer.recurrent_mask(), self.style)

        def resolved_algorithm(self) -> str:
            return f"reference-{self.style}"

    return ReferenceStyleLayer


@functools.cache
def training_step(model: str, task: str, baseline: bool = False) -> Any:
    """`TrainingStep` of (``model``, ``task``) at `PRESET`; ``baseline``: the in-run baseline
    network (same parameters, reference-style layers). Compiled: one step already ran."""
    import jax
    import jax.random as jr

    from harness import train as training
    from harness.studies.throughput_step import TrainingStep

    spec = run_spec(model, task)
    the_task = built_task(spec.task, spec.task_options)
    network, state = training.build_network(spec.network, the_task.info,
                                            key=jr.fold_in(jr.PRNGKey(spec.seed), 0))
    if baseline:
        network = reference_style(network, model)
    step = TrainingStep(network, state, the_task, spec.train, d_model=spec.network.d_model,
                        seed=spec.seed)
    jax.block_until_ready(step.call("step"))
    return step


def step_speedup(model: str, task: str, *, repeats: int = 10) -> dict:
    """Median step times of the baseline network and ours, calls alternating in one process,
    and their ratio; the check that both compute the same loss."""
    import jax

    from harness.measure import timing

    ours, theirs = training_step(model, task), training_step(model, task, baseline=True)
    ours_s, theirs_s = [], []
    for _ in range(repeats):
        ours_s.extend(timing.time_calls(lambda: ours.call("step"), warmup=0,
                                        repeats=1).times_s)
        theirs_s.extend(timing.time_calls(lambda: theirs.call("step"), warmup=0,
                                          repeats=1).times_s)
    ours_t, theirs_t = timing.Timing(tuple(ours_s)), timing.Timing(tuple(theirs_s))
    jax.block_until_ready(ours.stepper.carry())
    return {
        "step_median_s": ours_t.median_s,
        "baseline_median_s": theirs_t.median_s,
        "speedup_over_baseline": theirs_t.median_s / ours_t.median_s,
        "real_tokens_per_s": ours.real_tokens / ours_t.median_s,
        "baseline_real_tokens_per_s": theirs.real_tokens / theirs_t.median_s,
        "target_speedup": TARGET_NETWORK_SPEEDUP,
    }


def baseline_loss_error(model: str, task: str) -> float:
    """|loss(ours) - loss(baseline)| / |loss(ours)| on one batch, same parameters: the baseline
    network must compute the same function for its time to mean anything."""
    import equinox as eqx
    import jax
    import jax.numpy as jnp
    import jax.random as jr

    from harness import train as training

    spec = run_spec(model, task)
    the_task = built_task(spec.task, spec.task_options)
    network, state = training.build_network(spec.network, the_task.info, key=jr.PRNGKey(0))
    batch = training.BatchSampler(the_task.split("train"), spec.train.batch_size, 0)(0)
    ones = jnp.ones(batch.inputs.shape[0])
    def clone(state):  # Equinox refuses a state object used twice
        return jax.tree.unflatten(*reversed(jax.tree.flatten(state)))

    ours = eqx.filter_jit(training.batch_sums)(network, clone(state), batch, ones)[0]
    theirs = eqx.filter_jit(training.batch_sums)(
        reference_style(network, model), clone(state), batch, ones)[0]
    return float(jnp.abs(ours - theirs) / jnp.abs(ours))


def _setup_cache() -> None:
    common.enable_compilation_cache()


class _StepCell:
    params = (list(common.MODELS), list(TASKS))
    param_names = ["model", "task"]
    version = 1
    timeout = 900.0

    def setup(self, model, task):
        _setup_cache()


class TimeNetworkStep(_StepCell):
    """Wall time of one training step (forward, backward, optimiser update) at the study's
    shapes, on a prepared batch."""

    number, repeat, rounds, warmup_time, min_run_count = 1, (5, 20, 30.0), 1, 0.0, 5

    def setup(self, model, task):
        super().setup(model, task)
        self.step = training_step(model, task)

    def time_network_step(self, model, task):
        import jax

        jax.block_until_ready(self.step.call("step"))


class TrackNetworkStep(_StepCell):
    """Real (unpadded) tokens per second of the training step, its in-run ratio over the
    baseline network (reference-style layers, calls alternating; target
    `TARGET_NETWORK_SPEEDUP`), and the roofline fraction of the whole step."""

    def track_real_tokens_per_s(self, model, task):
        return step_speedup(model, task)["real_tokens_per_s"]

    track_real_tokens_per_s.unit = "tokens/s"

    def track_speedup_over_baseline_network(self, model, task):
        return step_speedup(model, task)["speedup_over_baseline"]

    track_speedup_over_baseline_network.unit = "x"

    def track_step_roofline_fraction(self, model, task):
        return step_roofline(model, task)["roofline_fraction"]

    track_step_roofline_fraction.unit = "fraction"


class TrackNetworkCompile(_StepCell):
    """Seconds to compile the training step (persistent cache off): paid once per run shape
    and structure, whatever the seed and learning rate."""

    unit = "seconds"

    def track_step_compile_s(self, model, task):
        return step_compile_seconds(model, task)


def step_roofline(model: str, task: str, *, repeats: int = 5) -> dict:
    """The whole step's roofline columns (`harness.studies.throughput_step.step_counts`), peaks
    measured in this process around the timing."""
    from harness.measure import roofline, timing
    from harness.studies.throughput_step import step_counts

    step = training_step(model, task)
    median, peaks = roofline.peaks_around(
        lambda: timing.time_calls(lambda: step.call("step"), warmup=1, repeats=repeats).median_s)
    return roofline.roofline_columns(step_counts(step, run_spec(model, task).network), peaks,
                                     median)


def step_compile_seconds(model: str, task: str) -> float:
    """XLA compile seconds of the step (tracing and lowering excluded), caches off (the
    persistent one, and the process's: the step was compiled once already)."""
    import jax

    from harness.measure import timing

    step = training_step(model, task)
    lowered = step.stepper.lowered(step.batches[0], step.key)
    jax.clear_caches()
    return timing.compile_lowered(lambda: lowered)[2]


# --------------------------------------------------------------------------------------------
# Before and after: this checkout's training against the training code of a git revision


def _module_at(revision: str, path: str, name: str, replace: tuple[tuple[str, str], ...] = ()):
    """``path`` as it was at git ``revision``, imported as module ``name`` of its package
    (relative imports resolve to this checkout's modules)."""
    import sys
    import types

    from harness.measure import processes

    source = processes.command_output(["git", "show", f"{revision}:{path}"])
    if source is None:
        raise RuntimeError(f"git show {revision}:{path} failed: no such revision or path.")
    for old, new in replace:
        source = source.replace(old, new)
    module = types.ModuleType(name)
    module.__package__ = name.rpartition(".")[0]
    module.__file__ = f"{revision}:{path}"
    sys.modules[name] = module
    exec(compile(source, module.__file__, "exec"), module.__dict__)
    return module


def before_after(revision: str, models: tuple[str, ...], task: str, *, repeats: int,
                 run_steps: int) -> list[dict]:
    """Rows of before/after ratios, every pair of calls alternating in this process.

    - ``step``: one training step with its host work (drawing the batch, the dropout key) as
      each revision's ``train`` loop runs it, on the same examples (the same sampler order):
      real tokens per second after over before;
    - ``baseline``: the in-run baseline network (reference-style layers) against ours;
    - ``run``: a whole short run (``run_steps`` steps, two evaluations, compile included) at
      one learning rate and seed, then at another (a second grid point), first thing for each
      model, so that the first run compiles from cold in both (the persistent cache is off
      unless the environment switches it on).
    """
    import dataclasses

    import equinox as eqx
    import jax
    import jax.random as jr
    import numpy as np

    from harness import train as after
    from harness.measure import timing

    _module_at(revision, "models/network.py", "models._network_before")  # imported by the next
    before = _module_at(revision, "harness/train.py", "harness._train_before", replace=(
        ("from models.network import", "from models._network_before import"),))
    rows = []
    for model in models:
        spec = run_spec(model, task)
        the_task = built_task(spec.task, spec.task_options)
        split = the_task.split("train")
        key = jr.fold_in(jr.PRNGKey(spec.seed), 0)
        drop = jr.fold_in(jr.PRNGKey(spec.seed), 1)
        recipe = dataclasses.replace(spec.train, steps=run_steps, eval_every=run_steps // 2)
        for point, (lr, seed) in enumerate(((recipe.lr, spec.seed), (recipe.lr / 3, 1))):
            config = dataclasses.replace(recipe, lr=lr)
            seconds = {}
            for label, T in (("before", before), ("after", after)):
                clock = timing.Stopwatch()
                T.train(spec.network, the_task, config, seed=seed)
                seconds[label] = clock.elapsed()
            rows.append({"model": model, "what": f"run {point + 1} (lr {lr:g}, seed {seed}, "
                         f"{run_steps} steps, compile included)",
                         "before_s": seconds["before"], "after_s": seconds["after"],
                         "ratio": seconds["before"] / seconds["after"]})
        loops = {}
        for label, T in (("before", before), ("after", after)):
            network, state = T.build_network(spec.network, the_task.info, key=key)
            params = eqx.filter(network, eqx.is_inexact_array)
            if hasattr(T, "init_optimiser"):  # optax's optimiser, the recipe in its state
                optimiser = T.make_optimiser(network)
                opt_state = T.init_optimiser(optimiser, params, spec.train)
            else:  # a revision whose optimiser's init took the recipe, or did not
                optimiser = T.make_optimiser(network, spec.train)
                takes_recipe = len(inspect.signature(optimiser.init).parameters) == 2
                opt_state = (optimiser.init(params, spec.train) if takes_recipe
                             else optimiser.init(params))
            if hasattr(T, "Stepper"):  # the training loop's step since it was added
                stepper = T.Stepper(optimiser, network, state, opt_state)
                sampler = T.BatchSampler(split, spec.train.batch_size, spec.seed, device=False)

                def call(stepper=stepper, sampler=sampler, counter=[0]):
                    s = counter[0]
                    counter[0] += 1
                    return stepper(sampler(s), drop)
            else:
                step = T.make_train_step(optimiser)
                sampler = T.BatchSampler(split, spec.train.batch_size, spec.seed)
                carried = [network, state, opt_state]

                def call(step=step, sampler=sampler, carried=carried, label=label,
                         counter=[0]):
                    s = counter[0]
                    counter[0] += 1
                    key = jr.fold_in(drop, s) if label == "before" else drop
                    out = step(*carried, sampler(s), key)
                    carried[:] = out[:3]
                    return out

            jax.block_until_ready(call())
            loops[label] = call
        times = {"before": [], "after": []}
        for _ in range(repeats):
            for label in ("before", "after"):
                times[label].extend(timing.time_calls(loops[label], warmup=0,
                                                      repeats=1).times_s)
        sampler = after.BatchSampler(split, spec.train.batch_size, spec.seed, trim=False)
        real = float(np.mean([np.sum(np.asarray(sampler(s).lengths)) for s in range(repeats)]))
        b, a = (float(np.median(times[k])) for k in ("before", "after"))
        rows.append({"model": model, "what": "step + host", "before_s": b, "after_s": a,
                     "ratio": b / a, "before_real_tokens_per_s": real / b,
                     "after_real_tokens_per_s": real / a})
        base = step_speedup(model, task, repeats=repeats)
        rows.append({"model": model, "what": "baseline network step / ours",
                     "before_s": base["baseline_median_s"], "after_s": base["step_median_s"],
                     "ratio": base["speedup_over_baseline"]})
    return rows


def main(argv: list[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(description=before_after.__doc__.split("\n")[0])
    parser.add_argument("--before", required=True, help="git revision of the 'before' code")
    parser.add_argument("--models", default=",".join(common.MODELS))
    parser.add_argument("--task", default="listops")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--run-steps", type=int, default=40)
    args = parser.parse_args(argv)
    rows = before_after(args.before, tuple(args.models.split(",")), args.task,
                        repeats=args.repeats, run_steps=args.run_steps)
    print(f"{'model':8s} {'what':58s} {'before s':>10s} {'after s':>10s} {'ratio':>7s}")
    for r in rows:
        print(f"{r['model']:8s} {r['what']:58s} {r['before_s']:10.4f} {r['after_s']:10.4f} "
              f"{r['ratio']:7.2f}")
        if "after_real_tokens_per_s" in r:
            print(f"{'':8s} {'  real tokens/s':58s} {r['before_real_tokens_per_s']:10.0f} "
                  f"{r['after_real_tokens_per_s']:10.0f}")


if __name__ == "__main__":
    main()
