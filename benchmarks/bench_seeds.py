"""Seed groups against seeds one by one: k seeds of one accuracy-study run, side by side.

The same k seeds of the accuracy study's ``cpu`` run of (model, task) are trained twice in one
process: one by one (`harness.train.train`, k runs) and as one seed group
(`harness.train.train_group`), alternating, so both see the same machine load. Each is measured

- cold: every compiled program dropped first (`jax.clear_caches`; the persistent compilation
  cache is off in this process), so the time includes compiling, as a fresh process's grid does;
- warm: the same arm again right after, its programs compiled (as a grid's later runs find
  them).

The arms run one after the other (alone cold, alone warm, group cold, group warm), in one
process, so they share the machine's load as closely as a sequence can.

Reported per arm: wall seconds, of which XLA compile seconds (the backend-compile events), and
the ratio alone / group of the wall times.

    python -m benchmarks.bench_seeds --models lru --tasks listops,digits --seeds 5,10

``--profile`` profiles the group's step and evaluation at each number of seeds instead
(`profile_group`: XLA's cost and memory analysis, CPU time and page faults, a trace split into
the step's parts):

    python -m benchmarks.bench_seeds --profile --models lru --tasks listops --seeds 1,4,10

The results are recorded in benchmarks/README.md; ``asv`` tracks the warm ratio at 5 seeds
(`TrackSeedGroupSpeedup`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .bench_network import PRESET, TASKS, built_task, run_spec

# Issue 34's goal: ten seeds as one program in a third of the wall time of ten runs.
TARGET_SPEEDUP = 3.0


def _clear() -> None:
    import jax

    from linrnn_bench.harness import train

    jax.clear_caches()
    train._flat_step.cache_clear()
    train._flat_group_step.cache_clear()


def _timed(fn) -> tuple[float, float]:
    """(wall seconds, compile seconds) of ``fn()``."""
    import jax

    from linrnn_bench.harness import train
    from linrnn_bench.harness.measure.timing import Stopwatch

    compiling = [0.0]
    listener = train._compile_listener(compiling)
    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        clock = Stopwatch()
        fn()
        wall = clock.elapsed()
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
    return wall, compiling[0]


def seed_group_times(model: str, task: str, seeds: int, *, steps: int | None = None,
                     cold: bool = True, preset: str = PRESET) -> dict[str, Any]:
    """Wall and compile seconds of ``seeds`` seeds one by one and as one group (module
    docstring); ``steps`` shortens the runs (None: the preset's)."""
    from linrnn_bench.harness import train

    spec = run_spec(model, task, preset)
    config = spec.train if steps is None else dataclasses.replace(
        spec.train, steps=steps, eval_every=min(spec.train.eval_every, steps))
    built = built_task(spec.task, spec.task_options)
    chosen = list(range(seeds))

    def alone() -> None:
        for seed in chosen:
            train.train(spec.network, built, config, seed=seed)

    def group() -> None:
        results = train.train_group(spec.network, built, config, seeds=chosen)
        assert all(isinstance(r, train.TrainResult) for r in results)

    out: dict[str, Any] = {"model": model, "task": task, "seeds": seeds, "steps": config.steps}
    for name, fn in (("alone", alone), ("group", group)):
        # Cold: this arm's programs dropped first; warm: the same arm again right after.
        _clear()
        for state in ("cold", "warm") if cold else ("warm",):
            if state == "warm" and not cold:
                fn()  # compile first: warm means the programs are in memory
            wall, compiled = _timed(fn)
            out[f"{state}_{name}_s"] = round(wall, 2)
            out[f"{state}_{name}_compile_s"] = round(compiled, 2)
    for state in ("cold", "warm") if cold else ("warm",):
        out[f"{state}_speedup"] = round(out[f"{state}_alone_s"] / out[f"{state}_group_s"], 2)
    return out


def _group_parts(model: str, task: str, seeds: int, preset: str = PRESET):
    """(GroupStepper, its batch, keys, active, stacked network, state, the built task, config)
    for ``seeds`` seeds of the accuracy study's run, as `harness.train.train_group` makes them
    at step 0."""
    import equinox as eqx
    import jax
    import jax.numpy as jnp
    import jax.random as jr
    import numpy as np

    from linrnn_bench.harness import train

    spec = run_spec(model, task, preset)
    built = built_task(spec.task, spec.task_options)
    config = spec.train
    split = built.split("train")
    members = []
    for seed in range(seeds):
        network, state = train.build_network(spec.network, built.info,
                                             key=jr.fold_in(jr.PRNGKey(seed), 0))
        optimiser = train.make_optimiser(network)
        members.append((network, state, train.init_optimiser(
            optimiser, eqx.filter(network, eqx.is_inexact_array), config)))
    network, state, opt_state = (train.stack([m[i] for m in members]) for i in range(3))
    samplers = [train.BatchSampler(split, config.batch_size, s, device=False)
                for s in range(seeds)]
    indices = [s.indices(0) for s in samplers]
    length = max(s.length(i) or 0 for s, i in zip(samplers, indices)) or None
    batch = train.Batch(*jax.device_put(tuple(
        np.stack(parts) for parts in zip(*(train.to_batch(split, i, length, device=False)
                                           for i in indices)))))
    keys = jnp.stack([jr.fold_in(jr.PRNGKey(s), 1) for s in range(seeds)])
    stepper = train.GroupStepper(optimiser, network, state, opt_state)
    return stepper, batch, keys, np.ones(seeds, bool), network, state, built, config


def _usage(fn) -> tuple[float, float, float, float]:
    """(wall, user CPU, system CPU) milliseconds and minor page faults of ``fn()``."""
    import resource

    before = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    fn()
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_SELF)
    return (wall * 1e3, (after.ru_utime - before.ru_utime) * 1e3,
            (after.ru_stime - before.ru_stime) * 1e3, after.ru_minflt - before.ru_minflt)


def _categorised(hlo: str, trace_dir: str, calls: int) -> dict[str, float]:
    """Thread-milliseconds per call in each part of the step, from a `jax.profiler` trace of
    ``calls`` calls of the program whose optimised HLO is ``hlo``: each executed instruction
    is put in a part by the ``op_name`` of its metadata (forward: ``jvp``, backward:
    ``transpose``, the native kernels: ``ffi_call``, the frozen-seed mask: ``_where``, the
    optimiser update: the rest, outside the gradient)."""
    import collections
    import glob
    import gzip
    import json
    import re

    op_names = {}
    for line in hlo.splitlines():
        match = re.match(r'\s*(?:ROOT )?%(\S+) = .*?op_name="([^"]*)"', line)
        if match:
            op_names[match.group(1)] = match.group(2)

    def part(op: str) -> str:
        if "ffi_call" in op:
            return "native kernel, " + ("backward" if "transpose(" in op else "forward")
        if "_where" in op or op.endswith("/and"):
            return "frozen-seed mask"
        where = ("backward" if "transpose(" in op else "forward" if "jvp(" in op
                 else "optimiser update")
        for module in ("Linear", "Embedding"):
            if f"eqx.nn.{module}" in op:
                return f"{where}: {module}"
        return f"{where}: other"

    (path,) = glob.glob(f"{trace_dir}/plugins/profile/*/perfetto_trace.json.gz")
    with gzip.open(path) as f:
        trace = json.load(f)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    totals: dict[str, float] = collections.Counter()
    for event in events:
        if event.get("ph") == "X" and event["name"] in op_names:
            totals[part(op_names[event["name"]])] += event["dur"] / 1e3 / calls
    return dict(totals)


def profile_group(model: str, task: str, seeds: list[int], *, repeats: int = 15,
                  trace: bool = True, preset: str = PRESET) -> list[dict[str, Any]]:
    """Where a seed group's step and evaluation spend their time, for each k in ``seeds``.

    Per k: XLA's cost analysis of the compiled step (flops, bytes) and its temporary memory;
    the step's and the validation evaluation's wall time, user and system CPU time and minor
    page faults (median over ``repeats`` calls, the k alternating call by call so that they see
    the same machine load); and with ``trace`` the thread time per part of the step
    (`_categorised`) from a `jax.profiler` trace of ten calls.
    """
    import tempfile

    import jax
    import numpy as np

    from linrnn_bench.harness import train

    parts = {k: _group_parts(model, task, k, preset) for k in seeds}
    out: dict[int, dict[str, Any]] = {}
    calls = {}
    for k, (stepper, batch, keys, active, network, state, built, config) in parts.items():
        compiled = stepper._step.lower(stepper._leaves, batch, keys, active).compile()
        cost, memory = compiled.cost_analysis(), compiled.memory_analysis()
        val = built.split("val")
        evaluate = (lambda n=network, s=state, v=val, c=config: train.evaluate_group(
            n, s, v, batch_size=c.eval_batch_size))
        step = (lambda st=stepper, b=batch, ks=keys, a=active: st(b, ks, a)[1].block_until_ready())
        for _ in range(2):
            step(), evaluate()
        calls[k] = (step, evaluate, compiled.as_text())
        out[k] = {"model": model, "task": task, "seeds": k,
                  "step_mflop": round(cost["flops"] / 1e6, 1),
                  "step_mbytes": round(cost["bytes accessed"] / 1e6, 1),
                  "step_temp_mib": round(memory.temp_size_in_bytes / 2**20, 1)}
    samples: dict[tuple[int, str], list] = {(k, w): [] for k in seeds for w in ("step", "eval")}
    for _ in range(repeats):
        for k in seeds:
            step, evaluate, _ = calls[k]
            samples[k, "step"].append(_usage(step))
            samples[k, "eval"].append(_usage(evaluate))
    for (k, what), values in samples.items():
        median = np.median(np.array(values), axis=0)
        for name, value in zip(("wall_ms", "user_ms", "sys_ms", "faults"), median):
            out[k][f"{what}_{name}"] = round(float(value), 2)
        out[k][f"{what}_wall_ms_per_seed"] = round(float(median[0]) / k, 2)
    if trace:
        for k in seeds:
            step, _, hlo = calls[k]
            with tempfile.TemporaryDirectory() as folder:
                jax.profiler.start_trace(folder, create_perfetto_trace=True)
                for _ in range(10):
                    step()
                jax.profiler.stop_trace()
                out[k]["step_parts_ms"] = {
                    p: round(v, 2) for p, v in sorted(_categorised(hlo, folder, 10).items())}
    return [out[k] for k in seeds]


class TrackSeedGroupSpeedup:
    """asv: one-by-one wall time over the group's for 5 seeds, warm, at the cpu preset
    (target `TARGET_SPEEDUP` at 10 seeds; 5 here to keep asv's run short)."""

    params = (list(TASKS),)
    param_names = ["task"]
    unit = "x"
    timeout = 1800

    def setup(self, task: str) -> None:
        from .bench_network import _setup_cache

        _setup_cache()

    def track_warm_speedup(self, task: str) -> float:
        return seed_group_times("lru", task, 5, cold=False)["warm_speedup"]


def main(argv: list[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="lru")
    parser.add_argument("--tasks", default=",".join(TASKS))
    parser.add_argument("--seeds", default="5,10")
    parser.add_argument("--steps", type=int, default=None,
                        help="shorten every run to this many steps (default: the preset's)")
    parser.add_argument("--profile", action="store_true",
                        help="instead of whole runs, profile the group's step and evaluation at "
                             "each number of seeds (`profile_group`)")
    args = parser.parse_args(argv)
    if args.profile:
        seeds = [int(s) for s in args.seeds.split(",")]
        for model in args.models.split(","):
            for task in args.tasks.split(","):
                for row in profile_group(model, task, seeds):
                    print(row, flush=True)
        return
    for model in args.models.split(","):
        for task in args.tasks.split(","):
            for seeds in (int(s) for s in args.seeds.split(",")):
                print(seed_group_times(model, task, seeds, steps=args.steps), flush=True)


if __name__ == "__main__":
    main()
