"""A preset priced and rehearsed before an accelerator hour is spent.

``python -m harness plan --preset P [--device NAME]`` lists, per study, the runs the preset's
grid makes (per model and task, and what the store already holds) and every *distinct program*
they compile: a layer's batched call, a network's training step, an evaluation pass, a probe.
For each program it gives

- its FLOPs and bytes: our analytic count (`harness.measure.roofline.layer_counts`, and for a network's
  training step `harness.studies.throughput_step.step_counts`) and XLA's cost analysis beside it;
- its compiled memory: XLA's memory analysis of the program compiled at the preset's real
  shapes from `jax.ShapeDtypeStruct` inputs (nothing of that size is allocated), as the memory
  study does (`harness.measure.memory.compiled_memory`); a program whose working set exceeds the
  device's usable memory is flagged, with the largest batch that would fit;
- the roofline bound of one call, max(FLOPs / peak FLOP/s, bytes / bandwidth), on this machine
  (peaks measured by `harness.measure.roofline.measure_peaks`, as the throughput study measures them) or
  on an accelerator from `DEVICES` (published peaks) or ``--peak-flops/--bandwidth``.

A run's predicted time is the sum over its programs of calls x bound. **The bound is a lower
bound on time, never an estimate of it**: it assumes every FLOP at the matmul peak and every
byte at the memory bandwidth, and leaves out compiles, host work, process starts and a
sequential scan's dependent steps. It says which runs cannot be cheap, not how long they take.

``python -m harness rehearse --preset P`` builds, compiles and runs every distinct program of
every study for two calls on the local backend, at the preset's real shapes (sequence length,
width, depth, state size); only the batch is reduced, and then said, where this machine's
memory cannot hold the program. It generates every task of the preset (or counts a loader task
as not generated: it reads a release from disk, checked on small files by the loader tests),
timing each. A failure is recorded with its cause and the rehearsal goes on; the failures are
listed at the end.

The accelerator's code path. The engine resolves ``algorithm="auto"`` by backend
(`models._engine.resolve_algorithm`): the CPU kernels (``native``, ``fused``) on a CPU, the
parallel scan (MIMO systems) and the FFT convolution (banks) elsewhere. Every program here is
traced inside `models._engine.assume_backend` (``"gpu"`` by default), so the programs compiled
and rehearsed are the ones an accelerator would run; the algorithm column says which. No kernel
of this project exists only for an accelerator (the only hand-written kernels, `models._native`,
are CPU-only), so nothing is left out of the rehearsal on that account; what a CPU cannot
rehearse is XLA's GPU compiler and the device's own memory limits.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import traceback
import types
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from .measure import roofline, timing
from .measure.memory import compiled_memory
from . import studies as _studies

# The share of a device's memory a JAX process may use by default: JAX preallocates 75% of an
# accelerator's memory for its allocator (XLA_PYTHON_CLIENT_MEM_FRACTION changes it).
DEVICE_MEMORY_FRACTION = 0.75
# The share of this machine's available memory a rehearsed program may take.
LOCAL_MEMORY_FRACTION = 0.6


# --------------------------------------------------------------------------------------------
# Devices


@dataclasses.dataclass(frozen=True)
class Device:
    """An accelerator's published peaks.

    Attributes:
        name: the product.
        flops_per_s: the FLOP/s the bound uses: the dense TF32 tensor-core peak, the rate of
            float32 matmuls at JAX's default precision on these GPUs (element-wise work runs at
            the lower FP32 rate, so this peak gives the smaller time: a lower bound).
        fp32_flops_per_s: the FP32 (non-tensor) peak, shown for reference.
        bf16_flops_per_s: the dense BF16 tensor-core peak, shown for reference.
        bytes_per_s: memory bandwidth.
        memory_bytes: memory (decimal gigabytes, as the datasheet states them).
        source: where the numbers come from.
    """

    name: str
    flops_per_s: float
    fp32_flops_per_s: float
    bf16_flops_per_s: float
    bytes_per_s: float
    memory_bytes: float
    source: str

    def peaks(self) -> roofline.Peaks:
        return roofline.Peaks(self.flops_per_s, self.bytes_per_s, 0, 0)


_T = 1e12
DEVICES: dict[str, Device] = {
    # Dense rates: the datasheets print the tensor-core rates "with sparsity", twice these.
    "a100-40gb": Device("NVIDIA A100 40GB SXM", 156 * _T, 19.5 * _T, 312 * _T, 1.555e12, 40e9,
                        "NVIDIA A100 Tensor Core GPU datasheet"),
    "a100-80gb": Device("NVIDIA A100 80GB SXM", 156 * _T, 19.5 * _T, 312 * _T, 2.039e12, 80e9,
                        "NVIDIA A100 Tensor Core GPU datasheet"),
    "h100": Device("NVIDIA H100 SXM", 494.7 * _T, 67 * _T, 989.4 * _T, 3.35e12, 80e9,
                   "NVIDIA H100 Tensor Core GPU datasheet (SXM)"),
    "h200": Device("NVIDIA H200 SXM", 494.7 * _T, 67 * _T, 989.4 * _T, 4.8e12, 141e9,
                   "NVIDIA H200 Tensor Core GPU datasheet (SXM)"),
}


@dataclasses.dataclass(frozen=True)
class Target:
    """What the plan prices for: peaks, usable memory and a description."""

    description: str
    peaks: roofline.Peaks
    memory_bytes: float


def local_target(*, matmul_size: int = 1024, stream_mib: int = 64, repeats: int = 3) -> Target:
    """This machine: peaks measured now (`roofline.measure_peaks`, the throughput study's
    measurement), memory the available memory now."""
    import jax

    peaks = roofline.measure_peaks(matmul_size=matmul_size, stream_mib=stream_mib,
                                   repeats=repeats)
    memory = available_memory() * LOCAL_MEMORY_FRACTION
    return Target(f"this machine ({jax.devices()[0].device_kind}; measured peaks "
                  f"{peaks.flops_per_s / 1e9:.1f} GFLOP/s, {peaks.bytes_per_s / 1e9:.1f} GB/s; "
                  f"{LOCAL_MEMORY_FRACTION:.0%} of the {available_memory() / 2**30:.1f} GiB "
                  "available)", peaks, memory)


def device_target(name: str | None, peak_flops: float | None = None,
                  bandwidth: float | None = None, memory: float | None = None) -> Target:
    """A `DEVICES` entry, its peaks replaced by any of ``peak_flops``/``bandwidth``/``memory``
    given; or, without a name, a device made of those three (all needed)."""
    if name is not None:
        if name not in DEVICES:
            raise ValueError(f"Unknown device {name!r}; accepted: {', '.join(DEVICES)}.")
        d = DEVICES[name]
        flops = peak_flops or d.flops_per_s
        bytes_ = bandwidth or d.bytes_per_s
        mem = memory or d.memory_bytes
        text = (f"{d.name}: {mem / 1e9:.0f} GB ({DEVICE_MEMORY_FRACTION:.0%} usable by JAX's "
                f"default preallocation), {bytes_ / 1e12:.2f} TB/s; {flops / _T:.1f} TFLOP/s "
                f"used for the bound (dense TF32 tensor cores; FP32 {d.fp32_flops_per_s / _T:g}, "
                f"BF16 dense {d.bf16_flops_per_s / _T:g}); source: {d.source}")
        if peak_flops or bandwidth or memory:
            text += "; overridden on the command line"
    else:
        if not (peak_flops and bandwidth):
            raise ValueError("A device without a name needs --peak-flops and --bandwidth "
                             f"(or --device, one of {', '.join(DEVICES)}).")
        flops, bytes_ = peak_flops, bandwidth
        mem = memory or math.inf
        text = (f"a device of {flops / _T:g} TFLOP/s and {bytes_ / 1e12:g} TB/s (given), "
                + ("memory unlimited" if mem == math.inf else f"{mem / 1e9:g} GB"))
    for label, value in (("peak FLOP/s", flops), ("bandwidth", bytes_), ("memory", mem)):
        if not value > 0:
            raise ValueError(f"The {label} must be positive, got {value!r}.")
    usable = mem * DEVICE_MEMORY_FRACTION if name is not None or memory else mem
    return Target(text, roofline.Peaks(flops, bytes_, 0, 0), usable)


def available_memory() -> int:
    """This machine's available memory now, bytes (``MemAvailable`` of ``/proc/meminfo``)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


# --------------------------------------------------------------------------------------------
# The accelerator's code path


@contextlib.contextmanager
def accelerator_path(backend: str | None = "gpu") -> Iterator[None]:
    """Trace programs as on ``backend`` (`models._engine.assume_backend`); None: as here."""
    if backend is None:
        yield
        return
    from models import _engine

    with _engine.assume_backend(backend):
        yield


# --------------------------------------------------------------------------------------------
# Programs


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


def _jitted(fn: Callable, *args: Any, algorithm: str | None) -> Built:
    """``fn(*args)`` as one `jax.jit` over the arrays (or shapes) in ``args``."""
    import equinox as eqx
    import jax

    dynamic, static = eqx.partition(args, _is_data)

    def flat(dynamic):
        return fn(*eqx.combine(dynamic, static))

    jitted = jax.jit(flat)
    return Built(lambda: jitted.lower(dynamic), lambda c: (lambda: c(dynamic)), algorithm)


def _algorithm(module: Any) -> str | None:
    from .programs import resolved_algorithm

    blocks = getattr(module, "blocks", None)
    return resolved_algorithm(blocks[0].layer if blocks else module)


def _array(shape: tuple[int, ...], dtype: Any, abstract: bool, key: Any, *, low: int = 0,
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

    from .train import Batch

    k_x, k_y = jr.split(jr.PRNGKey(seed))
    pair = (2,) if info.pair else ()
    L = info.seq_len
    if info.input_kind == "tokens":
        inputs = _array((batch, *pair, L), jnp.int32, abstract, k_x, low=1, high=info.vocab_size)
    else:
        inputs = _array((batch, *pair, L, info.input_dim), jnp.float32, abstract, k_x)
    lengths = _array((batch, *pair), jnp.int32, abstract, None, low=L)
    if info.target == "regression":
        labels = _array((batch,), jnp.float32, abstract, k_y)
    else:
        shape = (batch, L) if info.target == "per_step" else (batch,)
        labels = _array(shape, jnp.int32, abstract, k_y, low=0, high=info.num_classes)
    return Batch(inputs, labels, lengths)


def _layer_counts_of(layer: Any, model: str, length: int, mode: str) -> Callable[[int], Any]:
    from models.network import count_parameters

    from .programs import system_shape

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

    import models

    from . import programs

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

    counts = _layer_counts_of(make_layer(), model, seq_len, mode)
    key = ("layer", model, d_model, d_state, tuple(options), mode, seq_len)
    label = f"layer {model} {mode} H={d_model} N={d_state} L={seq_len}"
    return Program(key + (batch,), label, batch, build, counts)


def _network(config: Any, info: Any, seed: int = 0) -> tuple[Any, Any]:
    import jax.random as jr

    from .train import build_network

    return build_network(config, info, key=jr.fold_in(jr.PRNGKey(seed), 0))


def _layers_counts(network: Any, info: Any, mode: str) -> Callable[[int], Any]:
    """The layers' share of a network call (depth x one layer): a lower bound on its work."""
    import equinox as eqx

    from models.network import count_parameters

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
    import models

    return all(isinstance(b.layer, models.AbstractRecurrentLayer) for b in network.blocks)


def train_step_program(network_config: Any, info: Any, train_config: Any, batch: int,
                       task_key: tuple) -> Program:
    """A network's training step (`harness.train.Stepper`, the step `train` runs) on a batch
    of the task's full length."""
    import equinox as eqx
    import jax.random as jr

    from . import train as training

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

        return Built(lambda: stepper.lowered(data, key), make_call, _algorithm(network))

    network, _ = _network(network_config, info)
    counts: Callable[[int], Any] = lambda b: None  # noqa: E731
    if _has_systems(network):
        counts = _step_counts(network, network_config, info)
    key = ("train_step", task_key, network_config, batch, train_config.clip_norm is None)
    return Program(key, f"train step {network_config.layer} {info.name} depth="
                        f"{network_config.depth} H={network_config.d_model} L={info.seq_len}",
                   batch, build, counts)


def _step_counts(network: Any, network_config: Any, info: Any) -> Callable[[int], Any]:
    """`harness.studies.throughput_step.step_counts` of a batch of shapes: it reads the task's
    info, the batch's inputs (shape, size, dtype) and the network from what it is given."""
    from .studies import throughput_step

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

    from . import train as training

    def build(b: int, abstract: bool) -> Built:
        network, state = _network(network_config, info)
        network = eqx.nn.inference_mode(network.rescaled(info.timescale))
        data = network_batch(info, b, abstract)
        weights = _array((b,), jnp.float32, abstract, None) if abstract else jnp.ones(b)
        return _jitted(training._eval_sums, network, state, data, weights,
                       algorithm=_algorithm(network))

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

    from . import train as training

    def build(b: int, abstract: bool) -> Built:
        network, state = _network(network_config, info)
        network = eqx.nn.inference_mode(network)
        data = network_batch(info, b, abstract)
        return _jitted(lambda n, s, d: training._forward(n, s, d, None)[0], network, state,
                       data, algorithm=_algorithm(network))

    network, _ = _network(network_config, info)
    key = ("network_forward", info.name, info.seq_len, info.vocab_size, network_config, batch)
    return Program(key, f"network forward {network_config.layer} depth={network_config.depth} "
                        f"H={network_config.d_model} L={info.seq_len}", batch, build,
                   _layers_counts(network, info, "forward"))


# --------------------------------------------------------------------------------------------
# Tasks


def is_loader(task: str) -> bool:
    """Whether a task reads a release from disk (its registration fingerprints files)."""
    from tasks import _registry

    return _registry.spec(task).fingerprint is not None


_COUNT_FIELDS = ("num_train", "num_val", "num_test")


def reduced_options(task: str, options: Mapping[str, Any], examples: int | None
                    ) -> dict[str, Any]:
    """``options`` with every split's example count capped at ``examples`` (None: as given);
    a task without such counts is unchanged."""
    import tasks

    fields = {f.name: f.default for f in dataclasses.fields(tasks.config_class(task))}
    out = dict(options)
    if examples is None:
        return out
    for name in _COUNT_FIELDS:
        if name in fields:
            out[name] = min(int(out.get(name, fields[name])), examples)
    return out


@dataclasses.dataclass
class TaskFacts:
    """What the plan needs of a task: its info and its splits' sizes."""

    info: Any
    sizes: dict[str, int]


_FACTS: dict[tuple, TaskFacts] = {}


def task_facts(task: str, options: tuple) -> TaskFacts:
    """The task's `TaskInfo` (from a copy of it with a few examples per split, unless it has
    no example counts, when it is built whole) and its splits' sizes."""
    import tasks

    key = (task, tuple(options))
    if key in _FACTS:
        return _FACTS[key]
    given = dict(options)
    small = reduced_options(task, given, 64)
    built = tasks.build(task, use_cache=small == given, **small)
    sizes = {}
    for split, field in zip(tasks.SPLITS, _COUNT_FIELDS):
        if field in small:
            default = {f.name: f.default for f in dataclasses.fields(tasks.config_class(task))}
            sizes[split] = int(given.get(field, default[field]))
        else:
            sizes[split] = len(built.split(split))
    _FACTS[key] = TaskFacts(built.info, sizes)
    return _FACTS[key]


# --------------------------------------------------------------------------------------------
# The studies' runs and programs


def _training_uses(network: Any, task: str, options: tuple, train: Any,
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


def _plan_accuracy(study: Any, config: Any) -> list[RunPlan]:
    from .studies import accuracy

    runs = []
    # Priced at its largest: every cell's grid grown by its whole `lr_extend` at both ends.
    for spec in study.grid(accuracy.widest(config)):
        facts = task_facts(spec.task, spec.task_options)
        runs.append(RunPlan(study.run_id(spec), f"{spec.network.layer} / {spec.task}",
                            _training_uses(spec.network, spec.task, spec.task_options,
                                           spec.train, facts)))
    return runs


def probe_programs(network_config: Any, facts: TaskFacts, probe_size: int, statistics: str,
                   gradients: bool, task_key: tuple) -> list[Program]:
    """The stability probe's programs (`harness.studies._stability_probe.Probe`): the state
    norms and eigenvalue moduli, and (trained runs) the probe loss and per-layer gradient norms."""
    import jax.numpy as jnp

    from .studies import _stability_probe as probe

    info = facts.info

    def norms(b: int, abstract: bool) -> Built:
        import jax

        network, state = _network(network_config, info)
        data = network_batch(info, b, abstract)
        sequences, lengths = data.inputs, data.lengths
        if info.pair:  # the probe reads a pair's first sequence (`_stability_probe.Probe`)
            shape = (b, *data.inputs.shape[2:])
            sequences = (jax.ShapeDtypeStruct(shape, data.inputs.dtype) if abstract
                         else data.inputs[:, 0])
            lengths = (jax.ShapeDtypeStruct((b,), jnp.int32) if abstract else data.lengths[:, 0])
        return _jitted(lambda n, s, x, n_: probe._norms_and_moduli(n, s, x, n_, statistics),
                       network, state, sequences, lengths, algorithm=_algorithm(network))

    def grads(b: int, abstract: bool) -> Built:
        network, state = _network(network_config, info)
        return _jitted(probe._gradient_norms, network, state,
                       network_batch(info, b, abstract), algorithm=_algorithm(network))

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


def _plan_stability(study: Any, config: Any) -> list[RunPlan]:
    runs = []
    for spec in study.grid(config):
        facts = task_facts(spec.task, spec.task_options)
        key = (spec.task, spec.task_options)
        probes = probe_programs(spec.network, facts, spec.probe_size, spec.statistics,
                                spec.train is not None, key)
        if spec.train is None:
            uses = [(probes[0], 1)]
        else:
            evaluations = -(-spec.train.steps // spec.train.eval_every) + 1  # step 0 too
            uses = _training_uses(spec.network, spec.task, spec.task_options, spec.train, facts)
            uses += [(p, evaluations) for p in probes]
        for program, _ in uses:  # the variant names what the layer's options alone say
            if not program.label.endswith("]"):
                program.label += f" [{spec.variant}]"
        runs.append(RunPlan(study.run_id(spec), f"{spec.variant} / {spec.task}", uses))
    return runs


def _theory_layer(spec: Any, model: str | None = None) -> Any:
    import jax.random as jr

    import models

    key_layer, _ = jr.split(jr.PRNGKey(spec.seed))
    return models.build(model or spec.model, d_model=spec.d_model, d_state=spec.d_state,
                        key=key_layer, **dict(spec.options))


def _plan_theory(study: Any, config: Any) -> list[RunPlan]:
    import jax
    import jax.numpy as jnp
    import numpy as np

    import models

    from .studies import theory

    runs = []
    for spec in study.grid(config):
        L, H = spec.seq_len, spec.d_model
        name = f"{spec.variant} H={H} N={spec.d_state} L={L}"
        layer = _theory_layer(spec)
        base = ("theory", spec.model, spec.options, H, spec.d_state, L)
        if spec.check == "white_noise":
            modulus = np.abs(np.asarray(theory.discrete_system(layer).lam)).reshape(-1)
            groups = int(theory.modulus_groups(modulus).max()) + 1
            states = modulus.size
            batch = max(1, min(spec.samples, theory._STATE_BUDGET // (L * states)))

            def energy(b, abstract, spec=spec, groups=groups, states=states):
                layer = _theory_layer(spec)
                u = _array((b, spec.seq_len, spec.d_model), jnp.float32, abstract,
                           jax.random.PRNGKey(1))
                # The program depends on the groups' count only; which state is in which
                # group is data (here any assignment of that shape).
                onehot = (jax.ShapeDtypeStruct((states, groups), jnp.float32) if abstract
                          else jnp.eye(groups, dtype=jnp.float32)[np.arange(states) % groups])
                return _jitted(theory._energy_moments, layer, u, onehot,
                               algorithm=_algorithm(layer))

            def impulse(b, abstract, spec=spec):
                layer = _theory_layer(spec)
                return _jitted(lambda l: theory.impulse_energy(l, spec.seq_len), layer,
                               algorithm=_algorithm(layer))

            counts = _layer_counts_of(layer, spec.model, L, "forward")
            uses = [(Program(base + ("energy", groups, batch), f"white-noise energy {name}",
                             batch, energy, counts), -(-spec.samples // batch)),
                    (Program(base + ("impulse",), f"impulse energy {name}", H, impulse,
                             counts), 1)]
        else:
            image_model = models.info(spec.model).equivalence.target
            uses = []
            for which in (spec.model, image_model):
                def outputs(b, abstract, spec=spec, which=which):
                    layer = _theory_layer(spec)
                    if which != spec.model:
                        layer = models.info(spec.model).equivalence.function()(layer)
                    u = _array((spec.seq_len, spec.d_model), jnp.float32, abstract,
                               jax.random.PRNGKey(2))
                    return _jitted(theory._outputs_and_norms, layer, u,
                                   algorithm=_algorithm(layer))

                uses.append((Program(base + ("outputs", which), f"outputs and norms {which} "
                                     f"(from {name})", 1, outputs, lambda b: None),
                             spec.samples))
        runs.append(RunPlan(study.run_id(spec), spec.variant, uses))
    return runs


def _plan_throughput(study: Any, config: Any) -> list[RunPlan]:
    from models.network import NetworkConfig
    from tasks._base import TaskInfo

    from .programs import resolved_d_state
    from .studies import throughput, throughput_step

    runs = []
    for spec in study.grid(config):
        if isinstance(spec, throughput_step.StepRun):
            facts = task_facts(spec.task, spec.task_options)
            step = train_step_program(spec.network, facts.info, spec.train,
                                      spec.train.batch_size, (spec.task, spec.task_options))
            calls = 1 + (spec.warmup + spec.repeats)
            runs.append(RunPlan(study.run_id(spec), f"{spec.model} / {spec.task}",
                                [(step, calls)]))
            continue
        d_state = resolved_d_state(spec)
        calls = 1 + spec.warmup + spec.repeats
        if spec.scope == "layer":
            program = layer_program(spec.model, spec.d_model, d_state, spec.options, spec.mode,
                                    spec.seq_len, spec.batch, spec.seed)
        else:
            info = TaskInfo(name="throughput", description="synthetic tokens",
                            seq_len=spec.seq_len, variable_length=False, input_kind="tokens",
                            num_classes=throughput.NETWORK_CLASSES,
                            vocab_size=throughput.NETWORK_VOCAB)
            network = NetworkConfig(layer=spec.model, layer_options=spec.options,
                                    depth=spec.depth, d_model=spec.d_model, d_state=d_state)
            if spec.mode == "train":
                from .train import TrainConfig

                program = train_step_program(network, info, TrainConfig(
                    steps=1000, batch_size=spec.batch), spec.batch, ("throughput",))
            else:
                program = network_forward_program(network, info, spec.batch)
        runs.append(RunPlan(study.run_id(spec), f"{spec.model} {spec.size} ({spec.scope})",
                            [(program, calls)]))
    return runs


def _plan_memory(study: Any, config: Any) -> list[RunPlan]:
    from .programs import resolved_d_state

    runs = []
    for spec in study.grid(config):
        d_state = resolved_d_state(spec)
        # On an accelerator each length is run once, in a fresh process (`memory.run`).
        uses = [(layer_program(spec.model, spec.d_model, d_state, spec.options, spec.mode, L,
                               spec.batch, spec.seed), 1) for L in spec.seq_lens]
        runs.append(RunPlan(study.run_id(spec), f"{spec.model} {spec.size}", uses))
    return runs


# Each study's runs and the programs they call. A study missing here is listed as not priced.
PLANNERS: dict[str, Callable[[Any, Any], list[RunPlan]]] = {
    "accuracy": _plan_accuracy,
    "stability": _plan_stability,
    "theory": _plan_theory,
    "throughput": _plan_throughput,
    "memory": _plan_memory,
}


@dataclasses.dataclass
class StudyPlan:
    """A study's runs at a preset, or why it could not be planned."""

    name: str
    runs: list[RunPlan]
    recorded: dict[str, str]
    error: str | None = None

    def programs(self) -> list[Program]:
        """The distinct programs of the runs, in first-use order."""
        seen: dict[tuple, Program] = {}
        for run in self.runs:
            for program, _ in run.uses:
                seen.setdefault(program.key, program)
        return list(seen.values())


def catalogue(preset: str, *, configs: Mapping[str, Any] | None = None,
              names: Sequence[str] | None = None, store: Any = None,
              backend: str | None = "gpu") -> list[StudyPlan]:
    """Every study's runs and programs at ``preset`` (``configs[name]`` replaces a study's
    preset config; ``names`` selects studies). A study whose grid or planner fails is listed
    with its error, and the others go on."""
    out = []
    with accelerator_path(backend):
        for name in names or _studies.names():
            study = _studies.get(name)
            recorded = store.recorded(name) if store is not None else {}
            try:
                config = (configs or {}).get(name) or study.config(preset)
                planner = PLANNERS.get(name)
                if planner is None:
                    raise NotImplementedError(f"no planner for study {name!r} in harness.plan")
                out.append(StudyPlan(name, planner(study, config), recorded))
            except Exception as e:  # noqa: BLE001 - listed, and the other studies go on
                out.append(StudyPlan(name, [], recorded, error=_one_line(e)))
    return out


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"


# --------------------------------------------------------------------------------------------
# Pricing


@dataclasses.dataclass
class Priced:
    """One program compiled at shapes and priced for a target."""

    program: Program
    algorithm: str | None = None
    counts: roofline.Counts | None = None
    xla: dict[str, float | None] = dataclasses.field(default_factory=dict)
    memory: dict[str, int] = dataclasses.field(default_factory=dict)
    compile_s: float | None = None
    bound_s: float | None = None
    fits: bool | None = None
    largest_batch: int | None = None
    error: str | None = None


def compile_abstract(program: Program, batch: int | None = None) -> tuple[Any, Built, float]:
    """``(compiled, built, seconds)``: the program compiled from shapes at ``batch``."""
    built = program.build(program.batch if batch is None else batch, True)
    compiled, lower_s, compile_s = timing.compile_lowered(built.lower)
    return compiled, built, lower_s + compile_s


def _jax_compiled(compiled: Any) -> Any:
    return getattr(compiled, "compiled", compiled)  # equinox wraps jax's Compiled


def price(program: Program, target: Target, *, compile: bool = True,
          backend: str | None = "gpu") -> Priced:
    """Counts, XLA's costs and memory, the bound of one call and whether it fits."""
    out = Priced(program)
    try:
        out.counts = program.counts(program.batch)
        if compile:
            with accelerator_path(backend):
                compiled, built, out.compile_s = compile_abstract(program)
                out.algorithm = built.algorithm
                compiled = _jax_compiled(compiled)
                out.xla = roofline.xla_costs(compiled)
                out.memory = compiled_memory(compiled)
                total = out.memory["total_bytes"]
                out.fits = total <= target.memory_bytes
                if not out.fits:
                    out.largest_batch = _largest_batch(program, total, target.memory_bytes)
        counts = out.counts
        if counts is None and out.xla.get("xla_flops") is not None:
            counts = roofline.Counts(out.xla["xla_flops"], out.xla["xla_bytes"] or 0.0,
                                     "XLA's cost analysis")
            out.counts = counts
        if counts is not None:
            out.bound_s = roofline.bound(counts, target.peaks).seconds
    except Exception as e:  # noqa: BLE001 - priced as failed, the plan goes on
        out.error = _one_line(e)
    return out


def _largest_batch(program: Program, total_at_batch: int, budget: float) -> int:
    """The largest batch whose working set fits ``budget``, on the line through the working
    sets at batch 1 and at the program's batch (0: not even one example fits)."""
    B = program.batch
    if B <= 1:
        return 0
    one = compiled_memory(_jax_compiled(compile_abstract(program, 1)[0]))["total_bytes"]
    per_example = (total_at_batch - one) / (B - 1)
    if per_example <= 0:
        return B if one <= budget else 0
    return max(0, min(B - 1, int((budget - (one - per_example)) // per_example)))


# --------------------------------------------------------------------------------------------
# The plan as text


def _si(value: float | None, unit: str = "") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.3g}{prefix}{unit}"
    return f"{value:.3g}{unit}"


def _gib(value: float | None) -> str:
    return "-" if value is None else f"{value / 2**30:.2f}"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds >= 3600:
        return f"{seconds / 3600:.2f} h"
    if seconds >= 60:
        return f"{seconds / 60:.1f} min"
    return f"{seconds:.3g} s"


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    cells = [list(map(str, header))] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]


def plan_text(plans: list[StudyPlan], target: Target, *, preset: str, compile: bool = True,
              backend: str | None = "gpu", progress: Callable[[str], None] | None = None
              ) -> str:
    """The plan of ``plans`` priced for ``target``, as text."""
    lines = [f"Plan of preset {preset!r} for {target.description}.",
             "Times are roofline LOWER BOUNDS on execution, max(FLOPs / peak FLOP/s, bytes / "
             "bandwidth) per call summed over calls: no compile, host work, process start or "
             "sequential dependency is in them, and real runs take longer, often many times "
             "longer. Memory is XLA's buffer assignment compiled here (CPU) from shapes, with "
             f"the engine's algorithm as on {backend or 'this backend'}; a GPU compile assigns "
             "buffers its own way.", ""]
    priced: dict[tuple, Priced] = {}
    report_total = 0.0
    report_pending = 0.0
    compile_total = 0.0
    for plan in plans:
        lines.append(f"== {plan.name}")
        if plan.error:
            lines += [f"  not planned: {plan.error}", ""]
            continue
        status = {"done": 0, "diverged": 0, "failed": 0}
        groups: dict[str, list[int]] = {}
        for run in plan.runs:
            s = plan.recorded.get(run.run_id)
            if s in status:
                status[s] += 1
            g = groups.setdefault(run.group, [0, 0])
            g[0] += 1
            g[1] += s in ("done", "diverged")
        to_run = len(plan.runs) - status["done"] - status["diverged"]
        lines.append(f"  {len(plan.runs)} runs; the store holds {status['done']} done, "
                     f"{status['diverged']} diverged, {status['failed']} failed; {to_run} to run")
        lines += _table(("runs of", "runs", "recorded"),
                        [(g, n, r) for g, (n, r) in groups.items()])
        programs = plan.programs()
        calls: dict[tuple, int] = {}
        for run in plan.runs:
            for program, n in run.uses:
                calls[program.key] = calls.get(program.key, 0) + n
        rows = []
        for i, program in enumerate(programs):
            if program.key not in priced:
                if progress:
                    progress(f"[{plan.name} {i + 1}/{len(programs)}] {program.label} "
                             f"B={program.batch}")
                priced[program.key] = price(program, target, compile=compile, backend=backend)
                compile_total += priced[program.key].compile_s or 0.0
            p = priced[program.key]
            counts = p.counts
            fit = ("-" if p.fits is None else "yes" if p.fits
                   else f"NO (B<={p.largest_batch})")
            total_s = None if p.bound_s is None else p.bound_s * calls[program.key]
            rows.append((program.label, program.batch, p.algorithm or "-", calls[program.key],
                         _si(counts and counts.flops), _si(p.xla.get("xla_flops")),
                         _si(counts and counts.bytes, "B"), _si(p.xla.get("xla_bytes"), "B"),
                         _gib(p.memory.get("total_bytes")), fit, _si(p.bound_s, "s"),
                         _duration(total_s), p.error or ""))
        lines.append(f"  {len(programs)} distinct programs (FLOPs/bytes per call; ours = "
                     "harness.measure.roofline's count, XLA = its cost analysis):")
        lines += _table(("program", "B", "algorithm", "calls", "FLOPs ours", "FLOPs XLA",
                         "bytes ours", "bytes XLA", "memory GiB", "fits", "bound/call",
                         "bound total", "error"), rows)
        total = pending = 0.0
        unpriced = 0
        for run in plan.runs:
            seconds = 0.0
            for program, n in run.uses:
                bound = priced[program.key].bound_s
                if bound is None:
                    unpriced += 1
                    continue
                seconds += bound * n
            total += seconds
            if plan.recorded.get(run.run_id) not in ("done", "diverged"):
                pending += seconds
        report_total += total
        report_pending += pending
        too_big = sum(1 for p in programs if priced[p.key].fits is False)
        lines.append(f"  total (lower bound): {_duration(total)} for all runs, "
                     f"{_duration(pending)} for the {to_run} to run"
                     + (f"; {unpriced} program uses without a count are left out"
                        if unpriced else "")
                     + (f"; {too_big} program(s) do not fit the memory" if too_big else ""))
        lines.append("")
    lines.append(f"== report total (lower bound): {_duration(report_total)} for every run, "
                 f"{_duration(report_pending)} for the runs not yet in the store")
    if compile:
        lines.append(f"   compiling the {len(priced)} distinct programs took "
                     f"{_duration(compile_total)} here (CPU), not counted above")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# The rehearsal


@dataclasses.dataclass
class Rehearsed:
    """One program (or task) rehearsed."""

    what: str
    ok: bool
    batch: int | None = None
    planned_batch: int | None = None
    algorithm: str | None = None
    compile_s: float | None = None
    step_s: float | None = None
    memory_bytes: int | None = None
    error: str | None = None
    detail: str | None = None

    @property
    def reduced(self) -> bool:
        return self.batch is not None and self.batch != self.planned_batch


def rehearse_program(program: Program, *, budget: float, steps: int = 2,
                     backend: str | None = "gpu") -> Rehearsed:
    """Compile ``program`` at its shapes, halving the batch until its working set fits
    ``budget`` bytes, then run it ``steps`` times on random data; the last call is timed."""
    out = Rehearsed(program.label, False, planned_batch=program.batch)
    try:
        with accelerator_path(backend):
            batch = program.batch
            clock = timing.Stopwatch()
            while True:
                compiled, built, _ = compile_abstract(program, batch)
                memory = compiled_memory(_jax_compiled(compiled))["total_bytes"]
                if memory <= budget or batch == 1:
                    break
                batch = max(1, batch // 2)
            out.compile_s = clock.elapsed()
            out.batch, out.memory_bytes, out.algorithm = batch, memory, built.algorithm
            if memory > budget:
                raise MemoryError(f"{memory / 2**30:.1f} GiB at batch 1 exceeds this "
                                  f"machine's {budget / 2**30:.1f} GiB")
            call = program.build(batch, False).make_call(compiled)
            if steps:  # the last call timed, the others warm it up
                out.step_s = timing.time_calls(call, warmup=steps - 1, repeats=1).min_s
        out.ok = True
    except Exception as e:  # noqa: BLE001 - collected; the rehearsal goes on
        out.error = _one_line(e)
        out.detail = traceback.format_exc()
    return out


def preset_tasks(preset: str, configs: Mapping[str, Any] | None = None,
                 names: Sequence[str] | None = None) -> list[tuple[str, tuple]]:
    """The distinct (task, options) the studies' grids at ``preset`` train or probe on."""
    out: dict[tuple, None] = {}
    for name in names or _studies.names():
        study = _studies.get(name)
        try:
            config = (configs or {}).get(name) or study.config(preset)
            specs = study.grid(config)
        except Exception:  # noqa: BLE001 - the programs' rehearsal reports the grid's error
            continue
        for spec in specs:
            task = getattr(spec, "task", None)
            if isinstance(task, str):
                out[(task, tuple(getattr(spec, "task_options", ())))] = None
    return list(out)


def rehearse_task(task: str, options: tuple, *, examples: int | None = None) -> Rehearsed:
    """Generate ``task`` with ``options`` (example counts capped at ``examples``), timed,
    without the cache; a loader task is not generated (it reads a release from disk)."""
    import tasks

    given = dict(options)
    what = f"task {task} " + " ".join(f"{k}={v}" for k, v in sorted(given.items()))
    if is_loader(task):
        return Rehearsed(what, True, error="loader: reads a release from disk; not generated "
                                           "(tests/test_tasks_loaders.py checks it on small "
                                           "files in the release's format)")
    out = Rehearsed(what, False)
    try:
        small = reduced_options(task, given, examples)
        clock = timing.Stopwatch()
        built = tasks.build(task, use_cache=False, **small)
        for split in tasks.SPLITS:
            built.split(split)  # decoded and checked against the array conventions
        seconds = clock.elapsed()
        made = sum(len(built.split(s)) for s in tasks.SPLITS)
        full = sum(task_facts(task, options).sizes.values())
        out.ok, out.compile_s = True, seconds
        out.batch, out.planned_batch = made, full
        if made < full:
            out.step_s = seconds * full / made
            out.detail = (f"{made} of {full} examples generated in {seconds:.1f} s; all "
                          f"{full}: about {seconds * full / made:.0f} s (extrapolated, linear)")
    except Exception as e:  # noqa: BLE001 - collected; the rehearsal goes on
        out.error = _one_line(e)
        out.detail = traceback.format_exc()
    return out


def rehearse(preset: str, *, configs: Mapping[str, Any] | None = None,
             names: Sequence[str] | None = None, match: str | None = None,
             limit: int | None = None, task_examples: int | None = None,
             budget: float | None = None, steps: int = 2, backend: str | None = "gpu",
             programs: list[Program] | None = None, with_tasks: bool = True,
             progress: Callable[[str], None] | None = None
             ) -> tuple[list[Rehearsed], list[Rehearsed], list[StudyPlan]]:
    """``(programs, tasks, plans)`` rehearsed: every distinct program of every study at the
    preset (those whose label contains ``match``; the first ``limit``) and every task."""
    plans = catalogue(preset, configs=configs, names=names, backend=backend)
    if programs is None:
        seen: dict[tuple, Program] = {}
        for plan in plans:
            for program in plan.programs():
                seen.setdefault(program.key, program)
        programs = [p for p in seen.values() if match is None or match in p.label]
        programs = programs[:limit] if limit is not None else programs
    budget = budget if budget is not None else available_memory() * LOCAL_MEMORY_FRACTION
    results = []
    for plan in plans:
        if plan.error:
            results.append(Rehearsed(f"study {plan.name}", False, error=plan.error))
    for i, program in enumerate(programs):
        if progress:
            progress(f"[{i + 1}/{len(programs)}] {program.label} B={program.batch}")
        results.append(rehearse_program(program, budget=budget, steps=steps, backend=backend))
    task_results = []
    for task, options in preset_tasks(preset, configs, names) if with_tasks else ():
        if progress:
            progress(f"task {task}")
        task_results.append(rehearse_task(task, options, examples=task_examples))
    return results, task_results, plans


def rehearsal_text(programs: list[Rehearsed], tasks_: list[Rehearsed], *, preset: str,
                   seconds: float, backend: str | None = "gpu") -> str:
    """The rehearsal's tables and its failures, as text."""
    lines = [f"Rehearsal of preset {preset!r}: programs traced as on "
             f"{backend or 'this backend'} and run here; {seconds:.0f} s in all.", ""]
    rows = []
    for r in programs:
        batch = "-" if r.batch is None else (
            f"{r.batch} (reduced from {r.planned_batch})" if r.reduced else str(r.batch))
        rows.append((r.what, "ok" if r.ok else "FAILED", batch, r.algorithm or "-",
                     "-" if r.compile_s is None else f"{r.compile_s:.2f}",
                     "-" if r.step_s is None else f"{r.step_s:.3f}", _gib(r.memory_bytes)))
    lines += _table(("program", "status", "batch", "algorithm", "compile s", "step s",
                     "memory GiB"), rows)
    reduced = sum(r.reduced for r in programs)
    if reduced:
        lines.append(f"  {reduced} program(s) ran at a reduced batch: this machine's memory "
                     "cannot hold the preset's batch (the plan gives its memory).")
    lines.append("")
    rows = [(r.what, "ok" if r.ok and not r.error else "not generated" if r.ok else "FAILED",
             "-" if r.batch is None else r.batch,
             "-" if r.compile_s is None else f"{r.compile_s:.1f}",
             "-" if r.step_s is None else f"~{r.step_s:.0f} (extrapolated)")
            for r in tasks_]
    lines += _table(("task", "status", "examples", "generation s", "all examples s"), rows)
    notes = [r for r in tasks_ if r.ok and r.error]
    for r in notes:
        lines.append(f"  {r.what}: {r.error}")
    failed = [r for r in (*programs, *tasks_) if not r.ok]
    lines.append("")
    if failed:
        lines.append(f"{len(failed)} failure(s):")
        for r in failed:
            lines.append(f"  {r.what}: {r.error}")
    else:
        lines.append(f"every program ({len(programs)}) and task ({len(tasks_)}) ok.")
    return "\n".join(lines)
