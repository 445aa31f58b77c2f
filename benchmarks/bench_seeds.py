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

    from harness import train

    jax.clear_caches()
    train._flat_step.cache_clear()
    train._flat_group_step.cache_clear()


def _timed(fn) -> tuple[float, float]:
    """(wall seconds, compile seconds) of ``fn()``."""
    import jax

    from harness import train
    from harness.measure.timing import Stopwatch

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
    from harness import train

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
    args = parser.parse_args(argv)
    for model in args.models.split(","):
        for task in args.tasks.split(","):
            for seeds in (int(s) for s in args.seeds.split(",")):
                print(seed_group_times(model, task, seeds, steps=args.steps), flush=True)


if __name__ == "__main__":
    main()
