"""asv benchmarks of the network's training step at the accuracy study's shapes.

The step is `harness.train`'s, on the batches a run draws (the same sampler, the same cut to
length buckets), at the accuracy study's ``cpu`` preset: 2 blocks, H = 32, d_state = 32, batch
32, BatchNorm, half-GLU (`harness.studies.throughput.step.TrainingStep`). The in-run baseline
network is the same network, parameters and step with each block's layer computed in the public
references' style (`benchmarks.common.reference_forward`: lambda broadcast over time, B u
before a `jax.lax.associative_scan`, or the Annotated S4's Vandermonde kernel and FFT
convolution), so the network-level ratio is measured side by side in one process, calls
alternating, as the layer ratio is.

``python -m benchmarks.bench_network --before REV`` measures before/after ratios against git
revision REV, checked out whole in a temporary git worktree: each arm runs
`benchmarks._revision_arm` in its own process with its checkout first on PYTHONPATH, the arms
alternating (`before_after`). It reports tokens per second of the step with its host work, and
a short run at two learning rates.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
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
    from linrnn_bench.harness.studies import accuracy

    config = accuracy.STUDY.presets[preset]
    for spec in accuracy.grid(config):
        if spec.network.layer == model and spec.task == task and spec.seed == config.seeds[0]:
            return spec
    raise NotImplementedError(f"The accuracy study's {preset} preset has no run of "
                              f"({model}, {task}).")


@functools.cache
def built_task(task: str, options: tuple) -> Any:
    from linrnn_bench import tasks

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

    from linrnn_bench.harness import train as training
    from linrnn_bench.harness.studies.throughput.step import TrainingStep

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

    from linrnn_bench.harness.measure import timing

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

    from linrnn_bench.harness import train as training

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
    """The whole step's roofline columns (`harness.studies.throughput.step.step_counts`), peaks
    measured in this process around the timing."""
    from linrnn_bench.harness.measure import roofline, timing
    from linrnn_bench.harness.studies.throughput.step import step_counts

    step = training_step(model, task)
    median, peaks = roofline.peaks_around(
        lambda: timing.time_calls(lambda: step.call("step"), warmup=1, repeats=repeats).median_s)
    return roofline.roofline_columns(step_counts(step, run_spec(model, task).network), peaks,
                                     median)


def step_compile_seconds(model: str, task: str) -> float:
    """XLA compile seconds of the step (tracing and lowering excluded), caches off (the
    persistent one, and the process's: the step was compiled once already)."""
    import jax

    from linrnn_bench.harness.measure import timing

    step = training_step(model, task)
    lowered = step.stepper.lowered(step.batches[0], step.key)
    jax.clear_caches()
    return timing.compile_lowered(lambda: lowered)[2]


# --------------------------------------------------------------------------------------------
# Before and after: this checkout's training against a git revision's, each in its own process

_ROOT = Path(__file__).resolve().parents[1]
_ARM = Path(__file__).with_name("_revision_arm.py")


class BeforeAfterError(RuntimeError):
    """A revision that git cannot check out, or an arm whose process failed (the message says
    which, with the end of its error output)."""


def _run(command: list[str], *, cwd: Path = _ROOT, env: dict[str, str] | None = None
         ) -> subprocess.CompletedProcess:
    """``command`` run to its end, its output captured: the one place here that starts a
    process (git, and each arm of `before_after`)."""
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)


def _git(*args: str) -> str:
    done = _run(["git", *args])
    if done.returncode:
        raise BeforeAfterError(f"git {' '.join(args)} failed: "
                               f"{(done.stderr.strip().splitlines() or ['?'])[-1]}")
    return done.stdout.strip()


@contextlib.contextmanager
def revision_worktree(revision: str) -> Iterator[Path]:
    """A detached git worktree of ``revision`` in a temporary folder, removed (and git's record
    of it pruned) on leaving, whether by an error, a KeyboardInterrupt or normally."""
    done = _run(["git", "rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}"])
    if done.returncode:
        raise BeforeAfterError(f"--before {revision!r} is not a commit of this repository; "
                               "accepted: any git revision, e.g. HEAD~1, a hash or a tag.")
    commit = done.stdout.strip()
    folder = Path(tempfile.mkdtemp(prefix="linrnn-before-"))
    tree = folder / "tree"
    try:
        _git("worktree", "add", "--detach", str(tree), commit)
        yield tree
    finally:
        _run(["git", "worktree", "remove", "--force", str(tree)])
        shutil.rmtree(folder, ignore_errors=True)
        _run(["git", "worktree", "prune"])


def _arm(root: Path, request: dict) -> dict:
    """`benchmarks._revision_arm.measure` of ``request`` in a fresh process whose ``harness``,
    ``models`` and ``tasks`` are ``root``'s (first on PYTHONPATH). The native kernels' and the
    tasks' caches are this checkout's for both arms (keyed by their sources and configs), so
    the 'before' worktree builds and generates nothing the 'after' arm already has."""
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
             if p and Path(p).resolve() not in (_ROOT, root.resolve())]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), *paths]),
           "LINRNN_NATIVE_CACHE": (os.environ.get("LINRNN_NATIVE_CACHE")
                                   or str(_ROOT / ".cache" / "native")),
           "LINRNN_CACHE": os.environ.get("LINRNN_CACHE") or str(_ROOT / ".cache")}
    done = _run([sys.executable, str(_ARM), json.dumps(request)], cwd=root, env=env)
    if done.returncode:
        tail = "\n    ".join(done.stderr.strip().splitlines()[-5:])
        raise BeforeAfterError(f"The arm on {root} failed (exit {done.returncode}):\n    {tail}")
    for line in done.stderr.splitlines():  # the arm's own notes (settings it left out)
        if line.startswith("bench_network arm:"):
            print(line, file=sys.stderr)
    return json.loads(done.stdout.strip().splitlines()[-1])


def before_after(revision: str, models: tuple[str, ...], task: str, *, repeats: int,
                 run_steps: int, rounds: int = 2) -> list[dict]:
    """Rows of before/after ratios: git ``revision`` (a worktree of it) against this checkout.

    Each arm is a fresh process per model and round (`_arm`), the arms alternating, the order
    reversed every other round (before, after, after, before, ...); times are medians over the
    rounds (a step's over all its calls).

    - ``run 1``, ``run 2``: a whole short run (``run_steps`` steps, two evaluations, compile
      included) at the run's learning rate and seed, then at a third of it and seed 1 (a second
      grid point), first thing in each process, so that the first run compiles from cold in
      both (the persistent cache is off unless the environment switches it on);
    - ``step``: one training step with its host work (drawing the batch, the dropout key) as
      each revision's ``train`` loop runs it, on the same examples (the same sampler order):
      real tokens per second after over before;
    - ``baseline``: the in-run baseline network (reference-style layers) against ours, this
      checkout's, calls alternating in this process.
    """
    import numpy as np

    from linrnn_bench.harness import train as after

    rows = []
    with revision_worktree(revision) as tree:
        roots = {"before": tree, "after": _ROOT}
        for model in models:
            spec = run_spec(model, task)
            request = {"network": dataclasses.asdict(spec.network),
                       "train": dataclasses.asdict(spec.train), "task": spec.task,
                       "task_options": list(spec.task_options), "seed": spec.seed,
                       "run_steps": run_steps, "repeats": repeats}
            results: dict[str, list[dict]] = {"before": [], "after": []}
            for r in range(rounds):
                for label in ("before", "after") if r % 2 == 0 else ("after", "before"):
                    results[label].append(_arm(roots[label], request))
            for point, first in enumerate(results["after"][0]["runs"]):
                b, a = (float(np.median([res["runs"][point]["seconds"] for res in results[k]]))
                        for k in ("before", "after"))
                rows.append({"model": model, "what": f"run {point + 1} (lr {first['lr']:g}, "
                             f"seed {first['seed']}, {run_steps} steps, compile included)",
                             "before_s": b, "after_s": a, "ratio": b / a})
            the_task = built_task(spec.task, spec.task_options)
            sampler = after.BatchSampler(the_task.split("train"), spec.train.batch_size,
                                         spec.seed, trim=False)
            real = float(np.mean([np.sum(np.asarray(sampler(s).lengths))
                                  for s in range(repeats)]))
            b, a = (float(np.median([t for res in results[k] for t in res["step_s"]]))
                    for k in ("before", "after"))
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
    parser.add_argument("--rounds", type=int, default=2,
                        help="processes per arm and model, alternating (default 2)")
    args = parser.parse_args(argv)
    for name in ("repeats", "run_steps", "rounds"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')}={getattr(args, name)}; accepted: a "
                         "positive integer.")
    if args.run_steps < 2:
        parser.error(f"--run-steps={args.run_steps}; accepted: 2 or more (two evaluations).")
    try:
        rows = before_after(args.before, tuple(args.models.split(",")), args.task,
                            repeats=args.repeats, run_steps=args.run_steps, rounds=args.rounds)
    except (BeforeAfterError, NotImplementedError) as e:
        raise SystemExit(f"bench_network: {e}") from None
    print(f"{'model':8s} {'what':58s} {'before s':>10s} {'after s':>10s} {'ratio':>7s}")
    for r in rows:
        print(f"{r['model']:8s} {r['what']:58s} {r['before_s']:10.4f} {r['after_s']:10.4f} "
              f"{r['ratio']:7.2f}")
        if "after_real_tokens_per_s" in r:
            print(f"{'':8s} {'  real tokens/s':58s} {r['before_real_tokens_per_s']:10.0f} "
                  f"{r['after_real_tokens_per_s']:10.0f}")


if __name__ == "__main__":
    main()
