"""One arm of ``python -m benchmarks.bench_network --before REV``, run as a script in its own
process.

The arm measures the training code of whichever checkout comes first on ``PYTHONPATH``: a git
worktree of REV for the 'before' arm, this checkout for the 'after' arm
(`benchmarks.bench_network.before_after` starts both). It imports the project's ``harness``,
``models`` and ``tasks`` only (as ``linrnn_bench.*``, or as top-level packages at revisions
before the one import name, `_project`), never ``benchmarks`` (whose files are this checkout's, absent or different at
REV), and follows the APIs of older revisions where they differ (the branches below).

Input: one JSON argument (`measure`'s ``request``). Output: one JSON line on stdout, the last.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import sys
import time
from typing import Any


def _project(*modules: str) -> list[Any]:
    """The project's modules (``"harness.train"``) at this revision: under ``linrnn_bench``, or,
    at revisions before the one import name, as the top-level packages they were then."""
    import importlib

    try:
        importlib.import_module("linrnn_bench.harness")
        prefix = "linrnn_bench."
    except ModuleNotFoundError:
        prefix = ""
    return [importlib.import_module(prefix + name) for name in modules]


def _tuples(value: Any) -> Any:
    """JSON's lists back to the tuples the configs hold."""
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


def _config(cls: type, values: dict[str, Any]) -> Any:
    """``cls(**values)``, leaving out (and saying so) fields this revision's class lacks."""
    names = {f.name for f in dataclasses.fields(cls)}
    left_out = sorted(set(values) - names)
    if left_out:
        print(f"bench_network arm: this revision's {cls.__name__} has no {left_out}; measured "
              "without them.", file=sys.stderr)
    return cls(**{k: _tuples(v) for k, v in values.items() if k in names})


def _step_loop(T: Any, network_config: Any, task: Any, recipe: Any, seed: int):
    """One call of the training step with its host work (drawing the batch, the dropout key),
    as this revision's ``train`` loop runs it, on the run's batches in order."""
    import equinox as eqx
    import jax.random as jr

    key = jr.fold_in(jr.PRNGKey(seed), 0)
    drop = jr.fold_in(jr.PRNGKey(seed), 1)
    split = task.split("train")
    network, state = T.build_network(network_config, task.info, key=key)
    params = eqx.filter(network, eqx.is_inexact_array)
    if hasattr(T, "init_optimiser"):  # optax's optimiser, the recipe in its state
        optimiser = T.make_optimiser(network)
        opt_state = T.init_optimiser(optimiser, params, recipe)
    else:  # a revision whose optimiser's init took the recipe, or did not
        optimiser = T.make_optimiser(network, recipe)
        takes_recipe = len(inspect.signature(optimiser.init).parameters) == 2
        opt_state = optimiser.init(params, recipe) if takes_recipe else optimiser.init(params)
    counter = [0]
    if hasattr(T, "Stepper"):  # the training loop's step since it was added
        stepper = T.Stepper(optimiser, network, state, opt_state)
        sampler = T.BatchSampler(split, recipe.batch_size, seed, device=False)

        def call():
            counter[0] += 1
            return stepper(sampler(counter[0] - 1), drop)

        return call
    # Before `Stepper` the loop called `make_train_step`'s step, folding the key on the host.
    step = T.make_train_step(optimiser)
    sampler = T.BatchSampler(split, recipe.batch_size, seed)
    carried = [network, state, opt_state]

    def call():
        s = counter[0]
        counter[0] += 1
        out = step(*carried, sampler(s), jr.fold_in(drop, s))
        carried[:] = out[:3]
        return out

    return call


def measure(request: dict[str, Any]) -> dict[str, Any]:
    """The arm's measurement of one model on one task.

    ``request``: ``network`` and ``train`` (the run's `NetworkConfig` and `TrainConfig` as
    dicts), ``task`` and ``task_options`` (its name and ``[name, value]`` pairs), ``seed``,
    ``run_steps`` and ``repeats``. Returns ``runs`` (two whole short runs, ``run_steps`` steps
    and two evaluations each, compile included: first thing in the process, so the first is
    cold, then at a third of the learning rate and seed 1) and ``step_s`` (``repeats`` timed
    calls of the step with its host work, after one untimed call).
    """
    import jax

    tasks, T, network = _project("tasks", "harness.train", "models.network")
    NetworkConfig = network.NetworkConfig

    network_config = _config(NetworkConfig, request["network"])
    spec_recipe = _config(T.TrainConfig, request["train"])
    task = tasks.build(request["task"], **dict(_tuples(request["task_options"])))
    run_steps, seed = request["run_steps"], request["seed"]
    recipe = dataclasses.replace(spec_recipe, steps=run_steps, eval_every=run_steps // 2)
    runs = []
    for lr, run_seed in ((recipe.lr, seed), (recipe.lr / 3, 1)):
        start = time.perf_counter()
        T.train(network_config, task, dataclasses.replace(recipe, lr=lr), seed=run_seed)
        runs.append({"lr": lr, "seed": run_seed, "seconds": time.perf_counter() - start})
    call = _step_loop(T, network_config, task, spec_recipe, seed)
    jax.block_until_ready(call())
    step_s = []
    for _ in range(request["repeats"]):
        start = time.perf_counter()
        jax.block_until_ready(call())
        step_s.append(time.perf_counter() - start)
    return {"runs": runs, "step_s": step_s}


if __name__ == "__main__":
    print(json.dumps(measure(json.loads(sys.argv[1]))))
