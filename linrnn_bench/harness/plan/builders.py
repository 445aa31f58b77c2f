"""The distinct programs a study compiles, each ready to compile from shapes or to run on random
data: a layer's batched call, a network's training step, an evaluation pass, the network's forward
pass and the stability probe's programs. `RunPlan` is one run of a grid and the programs it calls.

Not to be confused with `harness.programs`, the layer programs the throughput and memory studies
time, which `layer_program` here wraps."""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Callable
from typing import Any

from ..measure import roofline
from .facts import TaskFacts

@dataclasses.dataclass
class Built:
    """One program ready to compile: ``lower()`` gives the lowered program, ``make_call(c)``
    the zero-argument call of a compiled one (its outputs, for `jax.block_until_ready`)."""

    lower: Callable[[], Any]
    make_call: Callable[[Any], Callable[[], Any]]
    algorithm: str | None


@dataclasses.dataclass(eq=False)
class Program:
    """One distinct compiled program of a study.

    Attributes:
        key: its identity: runs (of any study) with equal keys compile the same program.
        label: what it is, for the tables.
        batch: the batch (leading axis) the runs use.
        build: ``(batch, abstract) -> Built``; ``abstract=True`` gives the inputs as shapes.
        counts: ``batch -> roofline.Counts`` of one call, or None where we have no count.
    """

    key: tuple
    label: str
    batch: int
    build: Callable[[int, bool], Built]
    counts: Callable[[int], roofline.Counts | None]


@dataclasses.dataclass
class RunPlan:
    """One run of a study's grid: its id, its group (model / task) and the programs it calls."""

    run_id: str
    group: str
    uses: list[tuple[Program, int]]


def _is_data(x: Any) -> bool:
    import equinox as eqx
    import jax

    return eqx.is_array(x) or isinstance(x, jax.ShapeDtypeStruct)


def jit_program(fn: Callable, *args: Any, algorithm: str | None) -> Built:
    """``fn(*args)`` as one `jax.jit` over the arrays (or shapes) in ``args``."""
    import equinox as eqx
    import jax

    dynamic, static = eqx.partition(args, _is_data)

    def flat(dynamic):
        return fn(*eqx.combine(dynamic, static))

    jitted = jax.jit(flat)
    return Built(lambda: jitted.lower(dynamic), lambda c: (lambda: c(dynamic)), algorithm)


def program_algorithm(module: Any) -> str | None:
    """The algorithm a layer, or a network's first layer, resolves to (for the tables)."""
    from ..programs import resolved_algorithm

    blocks = getattr(module, "blocks", None)
    return resolved_algorithm(blocks[0].layer if blocks else module)


def input_array(shape: tuple[int, ...], dtype: Any, abstract: bool, key: Any, *, low: int = 0,
                high: int | None = None) -> Any:
    """A ShapeDtypeStruct, or random data: normal floats, or integers in [low, high)."""
    import jax
    import jax.numpy as jnp
    import jax.random as jr

    if abstract:
        return jax.ShapeDtypeStruct(shape, dtype)
    if jnp.issubdtype(dtype, jnp.integer):
        if high is None:
            return jnp.full(shape, low, dtype)
        return jr.randint(key, shape, low, max(high, low + 1), dtype)
    return jr.normal(key, shape, dtype)


def network_batch(info: Any, batch: int, abstract: bool, seed: int = 0) -> Any:
    """A `harness.train.Batch` of ``batch`` examples of task ``info``'s shapes at its full
    length (`tasks._base`'s conventions), as shapes or random data."""
    import jax.numpy as jnp
    import jax.random as jr

    from ..train import Batch

    k_x, k_y = jr.split(jr.PRNGKey(seed))
    pair = (2,) if info.pair else ()
    L = info.seq_len
    if info.input_kind == "tokens":
        inputs = input_array((batch, *pair, L), jnp.int32, abstract, k_x, low=1,
                             high=info.vocab_size)
    else:
        inputs = input_array((batch, *pair, L, info.input_dim), jnp.float32, abstract, k_x)
    lengths = input_array((batch, *pair), jnp.int32, abstract, None, low=L)
    if info.target == "regression":
        labels = input_array((batch,), jnp.float32, abstract, k_y)
    else:
        shape = (batch, L) if info.target == "per_step" else (batch,)
        labels = input_array(shape, jnp.int32, abstract, k_y, low=0, high=info.num_classes)
    return Batch(inputs, labels, lengths)


def layer_counts_of(layer: Any, model: str, length: int, mode: str) -> Callable[[int], Any]:
    from linrnn_bench.models.network import count_parameters

    from ..programs import system_shape

    shape = system_shape(model, layer)
    if shape is None:
        return lambda batch: None
    params = count_parameters(layer)
    return lambda batch: roofline.layer_counts(shape, length=length, batch=batch, mode=mode,
                                               params=params)


def layer_program(model: str, d_model: int, d_state: int, options: tuple, mode: str,
                  seq_len: int, batch: int, seed: int = 0) -> Program:
    """A layer's batched program (`harness.programs.layer_program`), as the throughput and
    memory studies compile it."""
    import jax.random as jr

    from linrnn_bench import models

    from .. import programs

    def make_layer():
        return models.build(model, d_model=d_model, d_state=d_state,
                            key=jr.fold_in(jr.PRNGKey(seed), 0), **dict(options))

    def build(b: int, abstract: bool) -> Built:
        import jax

        layer = make_layer()
        function, args, donate, make_call = programs.layer_program(
            layer, mode=mode, batch=b, seq_len=seq_len, d_model=d_model,
            key=jr.fold_in(jr.PRNGKey(seed), 1), abstract=abstract)
        jitted = jax.jit(function, donate_argnums=donate)
        return Built(lambda: jitted.lower(*args), make_call, programs.resolved_algorithm(layer))

    counts = layer_counts_of(make_layer(), model, seq_len, mode)
    key = ("layer", model, d_model, d_state, tuple(options), mode, seq_len)
    label = f"layer {model} {mode} H={d_model} N={d_state} L={seq_len}"
    return Program(key + (batch,), label, batch, build, counts)


def _network(config: Any, info: Any, seed: int = 0) -> tuple[Any, Any]:
    import jax.random as jr

    from ..train import build_network

    return build_network(config, info, key=jr.fold_in(jr.PRNGKey(seed), 0))


def _layers_counts(network: Any, info: Any, mode: str) -> Callable[[int], Any]:
    """The layers' share of a network call (depth x one layer): a lower bound on its work."""
    import equinox as eqx

    from linrnn_bench.models.network import count_parameters

    towers = 2 if info.pair else 1
    layers = [b.layer for b in network.blocks]
    shapes = [roofline.SystemShape.of(eqx.filter_eval_shape(layer.discrete_system))
              for layer in layers]
    params = [count_parameters(layer) for layer in layers]

    def counts(batch: int) -> Any:
        parts = [roofline.layer_counts(s, length=info.seq_len, batch=batch * towers, mode=mode,
                                       params=p) for s, p in zip(shapes, params)]
        return roofline.Counts(sum(c.flops for c in parts), sum(c.bytes for c in parts),
                               "analytic, layers only")

    return counts


def _has_systems(network: Any) -> bool:
    from linrnn_bench import models

    return all(isinstance(b.layer, models.AbstractRecurrentLayer) for b in network.blocks)


def train_step_program(network_config: Any, info: Any, train_config: Any, batch: int,
                       task_key: tuple) -> Program:
    """A network's training step (`harness.train.Stepper`, the step `train` runs) on a batch
    of the task's full length."""
    import equinox as eqx
    import jax.random as jr

    from .. import train as training

    def build(b: int, abstract: bool) -> Built:
        network, state = _network(network_config, info)
        optimiser = training.make_optimiser(network)
        opt_state = training.init_optimiser(optimiser, eqx.filter(network, eqx.is_inexact_array),
                                            train_config)
        stepper = training.Stepper(optimiser, network, state, opt_state)
        data = network_batch(info, b, abstract)
        key = jr.PRNGKey(1)

        def make_call(compiled):
            leaves = [stepper._leaves]

            def call():
                leaves[0], loss, finite = compiled(leaves[0], data, key)
                return leaves[0], loss, finite

            return call

        return Built(lambda: stepper.lowered(data, key), make_call, program_algorithm(network))

    network, _ = _network(network_config, info)
    counts: Callable[[int], Any] = lambda b: None  # noqa: E731
    if _has_systems(network):
        counts = _step_counts(network, network_config, info)
    key = ("train_step", task_key, network_config, batch, train_config.clip_norm is None)
    return Program(key, f"train step {network_config.layer} {info.name} depth="
                        f"{network_config.depth} H={network_config.d_model} L={info.seq_len}",
                   batch, build, counts)


def _step_counts(network: Any, network_config: Any, info: Any) -> Callable[[int], Any]:
    """`harness.studies.throughput.step.step_counts` of a batch of shapes: it reads the task's
    info, the batch's inputs (shape, size, dtype) and the network from what it is given."""
    from ..studies.throughput import step as throughput_step

    def counts(batch: int) -> Any:
        inputs = network_batch(info, batch, abstract=True).inputs
        step = types.SimpleNamespace(
            task=types.SimpleNamespace(info=info), batches=[types.SimpleNamespace(inputs=inputs)],
            stepper=types.SimpleNamespace(carry=lambda: (network,)))
        return throughput_step.step_counts(step, network_config)

    return counts


def eval_program(network_config: Any, info: Any, batch: int, task_key: tuple) -> Program:
    """One batch of an evaluation pass (`harness.train.evaluate`: inference mode)."""
    import equinox as eqx
    import jax.numpy as jnp

    from .. import train as training

    def build(b: int, abstract: bool) -> Built:
        network, state = _network(network_config, info)
        network = eqx.nn.inference_mode(network.rescaled(info.timescale))
        data = network_batch(info, b, abstract)
        weights = input_array((b,), jnp.float32, abstract, None) if abstract else jnp.ones(b)
        return jit_program(training._eval_sums, network, state, data, weights,
                           algorithm=program_algorithm(network))

    network, _ = _network(network_config, info)
    counts = _layers_counts(network, info, "forward") if _has_systems(network) else (
        lambda b: None)
    key = ("eval", task_key, network_config, batch)
    return Program(key, f"evaluation {network_config.layer} {info.name} depth="
                        f"{network_config.depth} H={network_config.d_model} L={info.seq_len}",
                   batch, build, counts)


def network_forward_program(network_config: Any, info: Any, batch: int) -> Program:
    """The network's forward pass in inference mode (the throughput study's network scope)."""
    import equinox as eqx

    from .. import train as training

    def build(b: int, abstract: bool) -> Built:
        network, state = _network(network_config, info)
        network = eqx.nn.inference_mode(network)
        data = network_batch(info, b, abstract)
        return jit_program(lambda n, s, d: training._forward(n, s, d, None)[0], network,
                           state, data, algorithm=program_algorithm(network))

    network, _ = _network(network_config, info)
    key = ("network_forward", info.name, info.seq_len, info.vocab_size, network_config, batch)
    return Program(key, f"network forward {network_config.layer} depth={network_config.depth} "
                        f"H={network_config.d_model} L={info.seq_len}", batch, build,
                   _layers_counts(network, info, "forward"))


def probe_programs(network_config: Any, facts: TaskFacts, probe_size: int, statistics: str,
                   gradients: bool, task_key: tuple) -> list[Program]:
    """The stability probe's programs (`harness.studies.stability_probe.Probe`): the state
    norms and eigenvalue moduli, and (trained runs) the probe loss and per-layer gradient norms."""
    import jax.numpy as jnp

    from ..studies import stability_probe as probe

    info = facts.info

    def norms(b: int, abstract: bool) -> Built:
        import jax

        network, state = _network(network_config, info)
        data = network_batch(info, b, abstract)
        sequences, lengths = data.inputs, data.lengths
        if info.pair:  # the probe reads a pair's first sequence (`stability_probe.Probe`)
            shape = (b, *data.inputs.shape[2:])
            sequences = (jax.ShapeDtypeStruct(shape, data.inputs.dtype) if abstract
                         else data.inputs[:, 0])
            lengths = (jax.ShapeDtypeStruct((b,), jnp.int32) if abstract else data.lengths[:, 0])
        return jit_program(
            lambda n, s, x, n_: probe._norms_and_moduli(n, s, x, n_, statistics),
            network, state, sequences, lengths, algorithm=program_algorithm(network))

    def grads(b: int, abstract: bool) -> Built:
        network, state = _network(network_config, info)
        return jit_program(probe._gradient_norms, network, state,
                           network_batch(info, b, abstract), algorithm=program_algorithm(network))

    network, _ = _network(network_config, info)
    name = f"{network_config.layer} {info.name} depth={network_config.depth} " \
           f"H={network_config.d_model} L={info.seq_len}"
    out = [Program(("probe_norms", task_key, network_config, probe_size, statistics),
                   f"probe norms {name}", probe_size, norms,
                   _layers_counts(network, info, "forward"))]
    if gradients:
        out.append(Program(("probe_grads", task_key, network_config, probe_size),
                           f"probe gradients {name}", probe_size, grads,
                           _layers_counts(network, info, "forward_backward")))
    return out


def training_uses(network: Any, task: str, options: tuple, train: Any,
                   facts: TaskFacts) -> list[tuple[Program, int]]:
    """The programs of `harness.train.train` and their calls: ``steps`` training steps,
    ``ceil(steps / eval_every)`` validation passes and one test pass."""
    step = train_step_program(network, facts.info, train, train.batch_size, (task, options))
    val_bs = min(train.eval_batch_size, facts.sizes["val"])
    test_bs = min(train.eval_batch_size, facts.sizes["test"])
    evaluations = -(-train.steps // train.eval_every)
    uses = [(step, train.steps)]
    val = eval_program(network, facts.info, val_bs, (task, options))
    uses.append((val, evaluations * -(-facts.sizes["val"] // val_bs)))
    if test_bs == val_bs:
        uses[-1] = (val, uses[-1][1] + -(-facts.sizes["test"] // test_bs))
    else:
        uses.append((eval_program(network, facts.info, test_bs, (task, options)),
                     -(-facts.sizes["test"] // test_bs)))
    return uses


def one_line(e: BaseException) -> str:
    """An error as one line, for the tables: its type and its message's first line."""
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"
