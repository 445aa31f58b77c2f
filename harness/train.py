"""Training and evaluation: the papers' recipe, checkpoints, divergence, model selection.

The recipe (LRU, S5 and S4D papers): AdamW with a linear warm-up then a cosine decay to zero;
the *recurrent* parameters (each layer's `recurrent_mask()`, never parameter names) get their own
learning rate and no weight decay:

    regular:    AdamW(lr * s(t), weight_decay)          encoder, norms, GLU, head, C, D, ...
    recurrent:  Adam(recurrent_lr * s(t))               eigenvalues, angles, timescales, ...
    s(t) = t / T_w for t < T_w, then (1 + cos(pi (t - T_w) / (T - T_w))) / 2

with optional clipping of the global gradient norm before both. Batches are drawn without
replacement from a permutation of the training split that depends only on (seed, epoch), so a
run resumed from a checkpoint sees exactly the batches an uninterrupted one would; the last
incomplete batch of an epoch is dropped (one batch size). Each batch is cut to the shortest of
a few bucket lengths that holds its longest example: only steps that are padding in every
example go, and since padding is exact (`models.network`) the loss is unchanged up to float
round-off, while a task compiles at most four shapes (one for a task shorter than 128 tokens,
where a shape's compile costs more than its shorter steps save: `BUCKET_SPACING`).

Every number of the recipe (learning rates, weight decay, warm-up, steps, clipping threshold)
is data in the optimiser's state, never a constant of the compiled step, so one compilation per
(shape, structure) serves every seed and learning rate of a grid, in a process and, through the
persistent compilation cache, across processes.

Evaluation runs in inference mode (BatchNorm's running statistics, no dropout) over every example
of a split exactly once. Model selection is on validation (accuracy, or loss for regression);
the test split is evaluated once, for the selected checkpoint.

A non-finite loss or gradient stops the run at once: `harness.studies.Diverged` carries the rows
measured so far and the step. The finiteness flag is the only per-step host synchronisation, and
it is read one step late so that the next step is already queued.
"""

from __future__ import annotations

import dataclasses
import errno
import functools
import json
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import optax
from jaxtyping import Array, Float, Int

from models import _validate
from models.network import Network, NetworkConfig, count_parameters, recurrent_mask
from tasks._base import Split, Task, TaskInfo

from . import config as _config
from .measure.timing import Stopwatch
from .runner import progress_bar
from .errors import Diverged

OnEval = Callable[[int, Network, eqx.nn.State], list[dict[str, Any]]]
# 2: the optimiser state holds the hyperparameters; 3: the state is optax's
# (inject_hyperparams of partition), whose leaves are not those of format 2.
_CHECKPOINT_FORMAT = 3


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """The optimisation recipe, shared by every model of a comparison.

    Attributes:
        steps: optimiser updates in total.
        batch_size: training examples per update.
        lr: peak learning rate of the regular parameters.
        recurrent_lr: peak learning rate of the recurrent parameters (no weight decay).
        weight_decay: AdamW's decoupled weight decay on the regular parameters.
        warmup_fraction: the share of ``steps`` spent warming up linearly from zero.
        clip_norm: clip the global gradient norm to this value; None for no clipping.
        eval_every: evaluate on validation (and call ``on_eval``) every this many steps; the
            last step is always evaluated.
        eval_batch_size: examples per evaluation batch (memory only; results do not depend on
            it beyond float round-off).
    """

    steps: int = 1000
    batch_size: int = 32
    lr: float = 3e-3
    recurrent_lr: float = 1e-3
    weight_decay: float = 0.05
    warmup_fraction: float = 0.1
    clip_norm: float | None = None
    eval_every: int = 100
    eval_batch_size: int = 256

    def __post_init__(self):
        for name in ("steps", "batch_size", "eval_every", "eval_batch_size"):
            _validate.positive_int(f"TrainConfig.{name}", getattr(self, name))
        for name, low in (("lr", 0.0), ("recurrent_lr", 0.0), ("weight_decay", 0.0)):
            value = getattr(self, name)
            if not _validate.is_number(value) or not (math.isfinite(value) and value >= low):
                raise ValueError(
                    f"TrainConfig.{name} must be a finite number >= {low}, got {value!r}."
                )
        if self.lr == 0.0:
            raise ValueError("TrainConfig.lr must be positive, got 0.0.")
        if not 0.0 <= self.warmup_fraction < 1.0:
            raise ValueError(
                f"TrainConfig.warmup_fraction must lie in [0, 1), got {self.warmup_fraction!r}."
            )
        if self.clip_norm is not None and not (
            isinstance(self.clip_norm, (int, float)) and self.clip_norm > 0
        ):
            raise ValueError(
                f"TrainConfig.clip_norm must be a positive number or None, got {self.clip_norm!r}."
            )

    @property
    def warmup_steps(self) -> int:
        return int(self.warmup_fraction * self.steps)

    def schedule(self, peak: float) -> optax.Schedule:
        """s(t) times ``peak``: linear warm-up from zero, then cosine to zero at ``steps``."""
        return optax.warmup_cosine_decay_schedule(
            init_value=0.0,
            peak_value=peak,
            warmup_steps=self.warmup_steps,
            decay_steps=self.steps,
            end_value=0.0,
        )


class Batch(NamedTuple):
    """A batch of examples as device arrays (shapes as `tasks.Split`, with n = batch size)."""

    inputs: jax.Array
    labels: jax.Array
    lengths: jax.Array


@dataclasses.dataclass
class TrainResult:
    """What `train` returns.

    Attributes:
        rows: every metric row (evaluation rows, the callback's rows, the final row).
        final: the final row (also the last entry of ``rows``).
        network, state: the network after the last step.
        best_network, best_state: the selected checkpoint (best validation).
    """

    rows: list[dict[str, Any]]
    final: dict[str, Any]
    network: Network
    state: eqx.nn.State
    best_network: Network
    best_state: eqx.nn.State


# --------------------------------------------------------------------------------------------
# Building blocks (public: the stability and throughput studies use them)


def build_network(
    config: NetworkConfig, info: TaskInfo, *, key: jax.Array
) -> tuple[Network, eqx.nn.State]:
    """The network for task ``info`` and its BatchNorm state."""
    if info.input_kind == "tokens":
        size = info.vocab_size
    elif info.input_kind == "real":
        size = info.input_dim
    else:
        raise ValueError(
            f"Task {info.name!r} has input_kind={info.input_kind!r}; accepted: tokens, real."
        )
    return eqx.nn.make_with_state(Network)(
        config,
        input_kind=info.input_kind,
        input_size=size,
        num_classes=info.num_classes,
        target=info.target,
        pair=info.pair,
        key=key,
    )


def parameter_groups(network: Network) -> Any:
    """A pytree like ``eqx.filter(network, eqx.is_inexact_array)``: "recurrent" or "regular"."""
    labels = jax.tree.map(lambda m: "recurrent" if m else "regular", recurrent_mask(network))
    return eqx.filter(labels, jax.tree.map(eqx.is_inexact_array, network))


def hyperparameters(config: TrainConfig, dtype: Any = jnp.float32) -> dict[str, jax.Array]:
    """The recipe's numbers as device scalars of ``dtype`` (the parameters' real dtype), the
    optimiser's injected hyperparameters: data of the compiled step, never constants in it,
    so that one compilation serves every learning rate, weight decay, clipping threshold and
    schedule length of a grid (and every seed). ``clip_norm`` is present only when the recipe
    clips: whether it clips is the optimiser's structure."""
    values = {"lr": config.lr, "recurrent_lr": config.recurrent_lr,
              "weight_decay": config.weight_decay, "warmup_steps": config.warmup_steps,
              "steps": config.steps}
    if config.clip_norm is not None:
        values["clip_norm"] = config.clip_norm
    return {name: jnp.asarray(value, dtype) for name, value in values.items()}


def scheduled(
    count: Int[Array, ""], peak: Float[Array, ""], warmup: Float[Array, ""],
    steps: Float[Array, ""],
) -> Float[Array, ""]:
    """``peak * s(count)`` of the module docstring with traced arguments.

    The same operations, in the same order, as `TrainConfig.schedule` (optax's
    ``warmup_cosine_decay_schedule`` with ``end_value=0``), so the two agree to the last bit;
    optax's own schedules take their lengths as Python numbers, which would make them
    constants of the compiled step.
    """
    # The warm-up branch is selected only when warmup > 0; the maximum keeps 0/0 out of the
    # branch that is discarded.
    ramp = jnp.clip(count, 0, warmup)
    frac = 1 - ramp / jnp.maximum(warmup, 1.0)
    warming = (0.0 - peak) * frac + peak
    decay = jnp.maximum(steps - warmup, 1.0)
    after = jnp.minimum(count - warmup, decay)
    cosine = 0.5 * (1 + jnp.cos(jnp.pi * after / decay))
    return jnp.where(count < warmup, warming, peak * cosine)


def _two_groups(
    lr: Float[Array, ""], recurrent_lr: Float[Array, ""], weight_decay: Float[Array, ""],
    warmup_steps: Float[Array, ""], steps: Float[Array, ""],
    clip_norm: Float[Array, ""] | None = None, *, labels: tuple[str, ...],
) -> optax.GradientTransformation:
    """The module docstring's recipe as optax transformations, for parameters whose leaves (in
    ``jax.tree.leaves`` order) carry ``labels``:

        regular:    -lr s(t) (adam(g) + weight_decay p)      (optax.adamw)
        recurrent:  -recurrent_lr s(t) adam(g)                (optax.adam)

    after clipping the global gradient norm to ``clip_norm`` (None: no clipping)."""

    def rate(peak: Float[Array, ""]) -> optax.Schedule:
        return lambda count: scheduled(count, peak, warmup_steps, steps)

    def group_of(tree: Any) -> Any:
        treedef = jax.tree.structure(tree)
        if treedef.num_leaves != len(labels):
            raise ValueError(
                f"The optimiser was made for {len(labels)} parameter arrays but is given "
                f"{treedef.num_leaves}; call make_optimiser with this network."
            )
        return jax.tree.unflatten(treedef, labels)

    # A function of the tree rather than the labels' tree itself: optax takes a callable tree
    # (an Equinox module is one) for a function.
    groups = optax.partition(
        {"regular": optax.adamw(rate(lr), weight_decay=weight_decay),
         "recurrent": optax.adam(rate(recurrent_lr))},
        group_of,
    )
    if clip_norm is None:
        return groups
    return optax.chain(optax.clip_by_global_norm(clip_norm), groups)


@functools.cache
def _injected(labels: tuple[str, ...]) -> Callable[..., optax.GradientTransformationExtraArgs]:
    # Cached: equal parameter groups give the same factory, so a compiled step keyed by it is
    # reused across seeds and recipes.
    return optax.inject_hyperparams(functools.partial(_two_groups, labels=labels))


Optimiser = Callable[..., optax.GradientTransformationExtraArgs]
OptimiserState = optax.InjectStatefulHyperparamsState


def make_optimiser(network: Network) -> Optimiser:
    """The two-group optimiser of the module docstring for ``network``'s parameters, as
    ``optax.inject_hyperparams`` of ``optax.partition`` (formerly ``multi_transform``):
    ``optimiser(**hyperparameters(config))`` is the optax optimiser of recipe ``config``.

    It depends only on the parameter groups, so equal networks give the same (hashable)
    object and a step compiled for it serves every recipe: the numbers live in the state's
    ``hyperparams`` (`init_optimiser`), and `optimiser_update` rebuilds the transformation from
    them. Whether it clips is the presence of ``clip_norm`` among them.
    """
    return _injected(tuple(jax.tree.leaves(parameter_groups(network))))


def init_optimiser(optimiser: Optimiser, params: Any, config: TrainConfig) -> OptimiserState:
    """The optimiser's state for ``params`` under recipe ``config``: no updates yet, Adam's
    moments at zero, ``config``'s numbers as its hyperparameters."""
    dtype = jnp.finfo(optax.tree.dtype(params, "highest")).dtype  # float32 for complex64
    return optimiser(**hyperparameters(config, dtype)).init(params)


def optimiser_update(optimiser: Optimiser, grads: Any, state: OptimiserState, params: Any
                     ) -> tuple[Any, OptimiserState]:
    """One update of ``optimiser`` with the hyperparameters held in ``state`` (traced, so the
    compiled update serves every recipe)."""
    return optimiser(**state.hyperparams).update(grads, state, params)


def _forward(
    network: Network, state: eqx.nn.State, batch: Batch, key: jax.Array | None
) -> tuple[jax.Array, eqx.nn.State]:
    if key is None:
        fn = lambda x, n: network(x, n, state)  # noqa: E731
        return jax.vmap(fn, axis_name="batch", out_axes=(0, None))(batch.inputs, batch.lengths)
    keys = jr.split(key, batch.inputs.shape[0])
    fn = lambda x, n, k: network(x, n, state, key=k)  # noqa: E731
    return jax.vmap(fn, axis_name="batch", out_axes=(0, None))(batch.inputs, batch.lengths, keys)


def batch_sums(
    network: Network,
    state: eqx.nn.State,
    batch: Batch,
    weights: jax.Array,
    key: jax.Array | None = None,
) -> tuple[jax.Array, jax.Array, jax.Array, eqx.nn.State]:
    """Sums over a batch: (loss, correct predictions, scored predictions), and the new state.

    ``weights`` (n,) is 1 for a real example and 0 for padding. The loss is cross-entropy
    (``"class"``, ``"per_step"`` at steps whose label is not -1) or squared error
    (``"regression"``, where "correct" is 0).
    """
    out, state = _forward(network, state, batch, key)
    if network.target == "class":
        ce = optax.losses.softmax_cross_entropy_with_integer_labels(out, batch.labels)
        hit = (jnp.argmax(out, axis=-1) == batch.labels).astype(jnp.float32)
        return jnp.sum(ce * weights), jnp.sum(hit * weights), jnp.sum(weights), state
    elif network.target == "per_step":
        scored = (batch.labels >= 0).astype(jnp.float32) * weights[:, None]
        labels = jnp.where(batch.labels >= 0, batch.labels, 0)
        ce = optax.losses.softmax_cross_entropy_with_integer_labels(out, labels)
        hit = (jnp.argmax(out, axis=-1) == labels).astype(jnp.float32)
        return jnp.sum(ce * scored), jnp.sum(hit * scored), jnp.sum(scored), state
    elif network.target == "regression":
        err = jnp.square(out - batch.labels)
        return jnp.sum(err * weights), jnp.zeros(()), jnp.sum(weights), state
    else:
        raise ValueError(
            f"Unknown target {network.target!r}; accepted: class, per_step, regression."
        )


def _train_step_body(network, state, opt_state, batch, key, optimiser):
    def loss_fn(net):
        # Dropout keys depend on the update count, so a resumed run draws the same ones.
        step_key = jr.fold_in(key, opt_state.count)
        loss, _, count, new_state = batch_sums(
            net, state, batch, jnp.ones(batch.inputs.shape[0]), step_key
        )
        return loss / jnp.maximum(count, 1.0), new_state

    (loss, state), grads = eqx.filter_value_and_grad(loss_fn, has_aux=True)(network)
    finite = jnp.isfinite(loss) & jnp.isfinite(optax.tree.norm(grads))
    params = eqx.filter(network, eqx.is_inexact_array)
    updates, opt_state = optimiser_update(optimiser, grads, opt_state, params)
    network = eqx.apply_updates(network, updates)
    return network, state, opt_state, loss, finite


class Stepper:
    """The one training step: ``step(batch, key) -> (loss, finite)``, what `train` runs and
    what the throughput study times.

    One forward, backward and optimiser update on ``batch`` (a `Batch`, of host or device
    arrays), dropout from ``fold_in(key, updates so far)``; ``loss`` is the batch's mean loss
    before the update and ``finite`` whether the loss and the gradient norm are finite. The
    network, BatchNorm state and optimiser state live between steps as one flat list of arrays
    (``carry()`` rebuilds them), so a step costs one call of a `jax.jit` function: no pytree of
    modules is split into arrays and structure, hashed and rebuilt on every step. The compiled
    function is shared by every stepper with the same structure (`_flat_step`), so seeds and
    hyperparameters, which are data, compile once per batch shape.
    """

    def __init__(self, optimiser: Optimiser, network: Network, state: eqx.nn.State,
                 opt_state: OptimiserState):
        dynamic, static = eqx.partition((network, state, opt_state), eqx.is_array)
        self._leaves, self._dynamic = jax.tree.flatten(dynamic)
        static_leaves, static_def = jax.tree.flatten(static)
        self._step = _flat_step(tuple(static_leaves), static_def, self._dynamic, optimiser)
        self._static = static

    def __call__(self, batch: Batch, key: jax.Array) -> tuple[jax.Array, jax.Array]:
        self._leaves, loss, finite = self._step(self._leaves, batch, key)
        return loss, finite

    def carry(self) -> tuple[Network, eqx.nn.State, OptimiserState]:
        """The current (network, state, opt_state)."""
        return eqx.combine(jax.tree.unflatten(self._dynamic, self._leaves), self._static)

    def lowered(self, batch: Batch, key: jax.Array) -> Any:
        """The step lowered for ``batch``'s shape (``.compile()`` compiles it)."""
        return self._step.lower(self._leaves, batch, key)

    def compiled(self, batch: Batch, key: jax.Array) -> Any:
        """The step compiled for ``batch``'s shape (``.cost_analysis()``: XLA's counts)."""
        return self.lowered(batch, key).compile()


def _flat_body(static_leaves: tuple, static_def: Any, dynamic_def: Any,
               optimiser: Optimiser) -> Callable[..., tuple]:
    """`_train_step_body` on flat arrays: ``(leaves, batch, key) -> (leaves, loss, finite)``."""

    def flat_train_step(leaves, batch, key):
        static = jax.tree.unflatten(static_def, static_leaves)
        network, state, opt_state = eqx.combine(jax.tree.unflatten(dynamic_def, leaves), static)
        network, state, opt_state, loss, finite = _train_step_body(
            network, state, opt_state, batch, key, optimiser)
        return jax.tree.leaves(eqx.filter((network, state, opt_state), eqx.is_array)), loss, finite

    return flat_train_step


@functools.cache
def _flat_step(static_leaves: tuple, static_def: Any, dynamic_def: Any,
               optimiser: Optimiser) -> Callable[..., tuple]:
    """The jitted step of `Stepper` for one structure (cached: equal structures share it)."""
    return jax.jit(_flat_body(static_leaves, static_def, dynamic_def, optimiser))


@functools.cache
def _flat_group_step(static_leaves: tuple, static_def: Any, dynamic_def: Any,
                     optimiser: Optimiser) -> Callable[..., tuple]:
    """`_flat_step`'s step vmapped over a leading seed axis (`GroupStepper`), with the seeds
    whose ``active`` flag is off or whose step was not finite kept where they were.

    ``(leaves, batch, keys, active) -> (leaves, loss, finite)``: every leaf, the batch's arrays
    and the keys have the seed axis first; ``loss`` and ``finite`` are ``(k,)``. The step is the
    one training step (`_train_step_body`), not a second implementation: vmap only batches it.
    """
    step = jax.vmap(_flat_body(static_leaves, static_def, dynamic_def, optimiser))

    def group_step(leaves, batch, keys, active):
        new, loss, finite = step(leaves, batch, keys)
        keep = active & finite
        new = [jnp.where(keep.reshape(keep.shape + (1,) * (x.ndim - 1)), x, old)
               for x, old in zip(new, leaves)]
        return new, loss, finite

    return jax.jit(group_step)


class GroupStepper:
    """`Stepper` for k seeds of one configuration: the network, BatchNorm state and optimiser
    state of every seed stacked on a leading axis, one call of one compiled program a step.

    ``step(batch, keys, active) -> (loss, finite)``, each ``(k,)``: ``batch`` holds every
    seed's batch stacked (``(k, n, ...)``), ``keys`` every seed's dropout key. A seed whose
    ``active`` flag is off (diverged) or whose loss or gradient is not finite keeps its
    parameters and states, so it never turns the stack non-finite; the other seeds go on.
    """

    def __init__(self, optimiser: Optimiser, network: Network, state: eqx.nn.State,
                 opt_state: OptimiserState):
        dynamic, static = eqx.partition((network, state, opt_state), eqx.is_array)
        self._leaves, self._dynamic = jax.tree.flatten(dynamic)
        static_leaves, static_def = jax.tree.flatten(static)
        self._step = _flat_group_step(tuple(static_leaves), static_def, self._dynamic, optimiser)
        self._static = static

    def __call__(self, batch: Batch, keys: jax.Array, active: np.ndarray
                 ) -> tuple[jax.Array, jax.Array]:
        self._leaves, loss, finite = self._step(self._leaves, batch, keys, active)
        return loss, finite

    def carry(self) -> tuple[Network, eqx.nn.State, OptimiserState]:
        """The current stacked (network, state, opt_state)."""
        return eqx.combine(jax.tree.unflatten(self._dynamic, self._leaves), self._static)


def _eval_sums_body(network, state, batch, weights):
    loss, correct, count, _ = batch_sums(network, state, batch, weights)
    return jnp.stack([loss, correct, count])


_eval_sums = eqx.filter_jit(_eval_sums_body)
# The same sums for a stack of networks (a seed group) on one batch: (k, 3).
_group_eval_sums = eqx.filter_jit(eqx.filter_vmap(
    _eval_sums_body, in_axes=(eqx.if_array(0), eqx.if_array(0), None, None)))


def to_batch(split: Split, index: np.ndarray, length: int | None = None, *,
             device: bool = True) -> Batch:
    """The examples ``index`` of ``split`` as a `Batch`, cut to ``length`` steps.

    ``length`` must be at least the longest example of ``index`` (`trimmed_length`), so only
    padding steps are dropped; None keeps the split's length. ``device=False`` keeps the
    arrays on the host, for a jitted function that transfers its arguments itself.
    """
    inputs, labels, lengths = split.inputs[index], split.labels[index], split.lengths[index]
    if length is not None:
        time = lengths.ndim  # inputs: (n, L[, d]), or (n, 2, L[, d]) for a pair task
        inputs = inputs[(slice(None),) * time + (slice(0, length),)]
        if labels.ndim == 2:  # per-step labels (n, L)
            labels = labels[:, :length]
    if not device:
        return Batch(inputs, labels, lengths)
    return Batch(*jax.device_put((inputs, labels, lengths)))


# The fewest tokens between two bucket lengths. Each bucket is one more compiled training step
# and evaluation (seconds each on a CPU), and a shorter bucket saves at most the tokens it
# drops on the steps that use it (microseconds per token at the cpu presets' widths): at the
# cpu presets' lengths (ListOps 37 tokens, 400 steps) one bucket is faster than four, while a
# long task trained for many steps (LRA ListOps, 2000 tokens) keeps all four.
BUCKET_SPACING = 64


def bucket_lengths(seq_len: int, buckets: int = 4, spacing: int | None = None) -> tuple[int, ...]:
    """The lengths a batch is cut to: ``seq_len`` times k / n for k = 1..n, rounded up to a
    multiple of 8 (at most ``seq_len``), where n is ``buckets`` or fewer, at most
    ``seq_len // spacing`` (`BUCKET_SPACING` by default), so that buckets lie about ``spacing``
    tokens apart or more (the rounding can take up to 7 off a gap); one bucket, ``seq_len``
    itself, for a task shorter than twice ``spacing``. A task compiles at most n shapes."""
    spacing = BUCKET_SPACING if spacing is None else spacing
    buckets = max(1, min(buckets, seq_len // spacing))

    def up_to_8(n: int) -> int:
        return -(-n // 8) * 8

    return tuple(sorted({min(seq_len, up_to_8(-(-seq_len * k // buckets)))
                         for k in range(1, buckets + 1)}))


def trimmed_length(lengths: np.ndarray, buckets: tuple[int, ...]) -> int:
    """The shortest of ``buckets`` that holds the longest of ``lengths`` (every bucket is the
    task's full length when none does, e.g. an empty batch)."""
    longest = int(np.max(lengths, initial=0))
    return next((b for b in buckets if b >= longest), buckets[-1])


def split_length(split: Split) -> int:
    """The padded length of ``split``'s sequences."""
    return int(split.inputs.shape[split.lengths.ndim])


def evaluate(
    network: Network, state: eqx.nn.State, split: Split, *, batch_size: int, trim: bool = True
) -> dict[str, float | None]:
    """Mean loss and accuracy over every example of ``split``, in inference mode.

    Returns ``{"loss", "accuracy"}``; accuracy is None for a regression target. In inference
    mode the examples do not interact, so they are taken in order of length and each batch is
    cut to the bucket (`bucket_lengths`) that holds its longest example (``trim=False`` keeps
    the split's order and length: the same sums up to float round-off). The last batch is
    padded with weight-zero copies, so a split compiles one shape per bucket; the sums stay on
    the device until the end.
    """
    totals = _evaluation_totals(_eval_sums, network, state, split, batch_size, trim)
    return _metrics(np.asarray(totals), network.target)


def evaluate_group(
    networks: Network, states: eqx.nn.State, split: Split, *, batch_size: int, trim: bool = True
) -> list[dict[str, float | None]]:
    """`evaluate` for k networks stacked on a leading axis (a seed group), one dict per seed:
    the same batches (the order does not depend on the seed), one vmapped program."""
    totals = np.asarray(_evaluation_totals(_group_eval_sums, networks, states, split,
                                           batch_size, trim))
    return [_metrics(t, networks.target) for t in totals]


def _evaluation_totals(sums: Callable[..., jax.Array], network: Network, state: eqx.nn.State,
                       split: Split, batch_size: int, trim: bool) -> jax.Array:
    """(loss, correct, count) summed over ``split`` by ``sums`` (`evaluate`'s loop); ``(3,)``,
    or ``(k, 3)`` for a stack of networks."""
    network = eqx.nn.inference_mode(network)
    n = len(split)
    size = min(batch_size, n)
    lengths = split.lengths if split.lengths.ndim == 1 else split.lengths.max(axis=1)
    order = np.argsort(lengths, kind="stable") if trim else np.arange(n)
    buckets = bucket_lengths(split_length(split))
    totals = None
    for start in range(0, n, size):
        index = np.arange(start, start + size)
        weights = (index < n).astype(np.float32)
        index = order[np.where(index < n, index, start)]
        length = trimmed_length(lengths[index], buckets) if trim else None
        batch = to_batch(split, index, length)
        sums_here = sums(network, state, batch, jnp.asarray(weights))
        totals = sums_here if totals is None else totals + sums_here
    assert totals is not None  # a split has at least one example
    return totals


def _metrics(totals: np.ndarray, target: str) -> dict[str, float | None]:
    loss, correct, count = (float(t) for t in totals)
    count = max(count, 1.0)
    accuracy = None if target == "regression" else correct / count
    return {"loss": loss / count, "accuracy": accuracy}


class BatchSampler:
    """Training batches without replacement; epoch e's order depends only on (seed, e).

    Each batch is cut to the bucket (`bucket_lengths`) that holds its longest example
    (``trim=False``: the split's length): the same examples, the same loss up to float
    round-off, without the steps that are padding in every example of the batch.
    """

    def __init__(self, split: Split, batch_size: int, seed: int, *, trim: bool = True,
                 device: bool = True):
        n = len(split)
        if n < batch_size:
            raise ValueError(
                f"The training split has {n} examples, fewer than batch_size={batch_size}; "
                "lower train.batch_size or enlarge the task."
            )
        self.split, self.batch_size, self.seed = split, batch_size, seed
        self.per_epoch = n // batch_size
        self.buckets = bucket_lengths(split_length(split)) if trim else None
        self.device = device  # False: host arrays (`to_batch`)
        self._epoch, self._order = -1, np.arange(0)

    def __call__(self, step: int, length: int | None = None) -> Batch:
        """The batch of step ``step`` (0-based), cut to its bucket, or to ``length`` (at least
        its bucket: a seed group cuts every seed's batch to the longest of their buckets)."""
        index = self.indices(step)
        if length is None:
            length = self.length(index)
        return to_batch(self.split, index, length, device=self.device)

    def indices(self, step: int) -> np.ndarray:
        """The examples of step ``step``'s batch."""
        epoch, i = divmod(step, self.per_epoch)
        if epoch != self._epoch:
            # A seed sequence of (seed, epoch): epochs are independent streams, so resuming at
            # any step reconstructs the same order without replaying earlier epochs.
            rng = np.random.default_rng(np.random.SeedSequence([self.seed, epoch]))
            self._epoch, self._order = epoch, rng.permutation(len(self.split))
        return self._order[i * self.batch_size : (i + 1) * self.batch_size]

    def length(self, index: np.ndarray) -> int | None:
        """The bucket the examples ``index`` are cut to (None: not cut, ``trim=False``)."""
        if self.buckets is None:
            return None
        return trimmed_length(self.split.lengths[index], self.buckets)


# --------------------------------------------------------------------------------------------
# Checkpoints: one file, a JSON header line then equinox's serialised leaves, written atomically


def save_checkpoint(path: Path, header: dict[str, Any], tree: Any) -> None:
    """Write the checkpoint at ``path`` whole or not at all: a temporary file beside it, then
    ``os.replace``. On failure the temporary file is removed and the previous checkpoint, if
    any, is left as it was; a full disk and a checkpoint folder that is a file say so."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise NotADirectoryError(
            f"Cannot keep checkpoints in {path.parent}: it, or a folder above it, is a file. "
            "Move the file aside, or set LINRNN_CHECKPOINTS to another folder."
        ) from None
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(json.dumps(header, allow_nan=True).encode() + b"\n")
            eqx.tree_serialise_leaves(f, tree)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        tmp.unlink(missing_ok=True)
        if isinstance(e, OSError) and e.errno == errno.ENOSPC:
            raise OSError(
                errno.ENOSPC, f"No space left on device: the disk holding {path.parent} is "
                "full, so the checkpoint was not written (the previous one, if any, is kept; "
                "the store is intact). Free space and rerun: the run resumes from its last "
                "checkpoint") from None
        raise


def load_checkpoint(path: Path, like: Any) -> tuple[dict[str, Any], Any]:
    with open(path, "rb") as f:
        header = json.loads(f.readline())
        tree = eqx.tree_deserialise_leaves(f, like)
    return header, tree


def _identity(network_config: NetworkConfig, task: Task, config: TrainConfig, seed: int) -> str:
    """What a checkpoint must match to be resumed: architecture, task, recipe and seed."""
    task_config = task.config
    if dataclasses.is_dataclass(task_config):
        task_config = _config.to_dict(task_config)
    return _config.config_hash(
        network_config, dataclasses.asdict(task.info), repr(task_config),
        _config.to_dict(config), seed,
    )


# --------------------------------------------------------------------------------------------
# The training loop


def train(
    network_config: NetworkConfig,
    task: Task,
    config: TrainConfig,
    *,
    seed: int,
    on_eval: OnEval | None = None,
    checkpoint: str | Path | None = None,
    progress: bool = False,
) -> TrainResult:
    """Train a network on ``task``; select on validation; test the selected checkpoint.

    Arguments:
        network_config: the architecture.
        task: a built task (``info`` and ``split(name)``).
        config: the recipe.
        seed: initialisation, batch order and dropout; the same seed gives bit-identical
            metrics on CPU.
        on_eval: called as ``on_eval(step, network, state)`` at step 0 and after every
            evaluation; the rows it returns join the run's rows (``step`` added if missing).
        checkpoint: a file to save to after every evaluation and resume from; None for none.
            It is deleted once the run ends (finished or diverged).
        progress: show a progress bar over steps (quiet anyway in CI and off a terminal).

    Returns:
        A `TrainResult`. Rows: ``kind="eval"`` (step, lr, train_loss, val_loss,
        val_accuracy), the callback's rows, and one ``kind="final"`` row (best_step,
        val_loss/val_accuracy and test_loss/test_accuracy of the selected checkpoint, params,
        recurrent_params, steps, epochs, train_seconds, and compile_seconds: the part of
        train_seconds XLA spent compiling).

    Raises:
        Diverged: a non-finite loss, gradient or validation loss; its rows are those so far
            plus one ``kind="diverged"`` row with the step.
    """
    info = task.info
    train_split, val_split = task.split("train"), task.split("val")
    base = jr.PRNGKey(seed)
    network, state = build_network(network_config, info, key=jr.fold_in(base, 0))
    dropout_key = jr.fold_in(base, 1)
    optimiser = make_optimiser(network)
    opt_state = init_optimiser(optimiser, eqx.filter(network, eqx.is_inexact_array), config)
    sampler = BatchSampler(train_split, config.batch_size, seed, device=False)
    lr_at = config.schedule(config.lr)
    selection = "loss" if info.target == "regression" else "accuracy"
    params = count_parameters(network)
    recurrent = count_parameters(eqx.filter(network, recurrent_mask(network)))

    path = None if checkpoint is None else Path(checkpoint)
    identity = _identity(network_config, task, config, seed)
    start, rows, best, seconds = 0, [], None, 0.0
    best_network, best_state = network, state
    if path is not None and path.exists():
        resumed = _resume(path, identity, (network, state, opt_state, network, state))
        if resumed is not None:
            header, (network, state, opt_state, best_network, best_state) = resumed
            start, rows, best = header["step"], header["rows"], header["best"]
            seconds = header["seconds"]
            print(f"Resuming {path.name} from step {start} of {config.steps}.")

    def callback(step: int) -> None:
        if on_eval is not None:
            for row in on_eval(step, network, state):
                rows.append({"step": step, **row})

    def diverged(step: int, what: str) -> Diverged:
        if path is not None:
            path.unlink(missing_ok=True)
        rows.append({"kind": "diverged", "step": step})
        return Diverged(f"non-finite {what} at step {step}", rows)

    if start == 0:
        callback(0)
    compiling = [0.0]  # seconds XLA spends compiling in this run (the first shapes it meets)
    listener = _compile_listener(compiling)
    jax.monitoring.register_event_duration_secs_listener(listener)
    clock = Stopwatch()
    losses: list[jax.Array] = []
    pending: tuple[int, jax.Array] | None = None
    bar = progress_bar(config.steps, f"{network_config.layer}/{info.name}", enabled=progress)
    bar.update(start)
    stepper = Stepper(optimiser, network, state, opt_state)
    try:
        for s in range(start, config.steps):
            loss, finite = stepper(sampler(s), dropout_key)
            losses.append(loss)
            if pending is not None and not bool(pending[1]):
                raise diverged(pending[0], "loss or gradient")
            pending = (s + 1, finite)
            bar.update(1)
            step = s + 1
            if step % config.eval_every and step != config.steps:
                continue
            if not bool(finite):
                raise diverged(step, "loss or gradient")
            pending = None
            network, state, opt_state = stepper.carry()
            val = evaluate(network.rescaled(info.timescale), state, val_split,
                           batch_size=config.eval_batch_size)
            if not math.isfinite(val["loss"]):
                raise diverged(step, "validation loss")
            rows.append({
                "kind": "eval",
                "step": step,
                "lr": float(lr_at(step)),
                "train_loss": float(jnp.mean(jnp.stack(losses))),
                "val_loss": val["loss"],
                "val_accuracy": val["accuracy"],
            })
            losses = []
            if best is None or _better(val, best, selection):
                best = {"step": step, **val}
                best_network, best_state = network, state
            callback(step)
            if path is not None and step != config.steps:
                header = {"format": _CHECKPOINT_FORMAT, "identity": identity, "step": step,
                          "rows": rows, "best": best,
                          "seconds": seconds + clock.elapsed()}
                save_checkpoint(path, header, (network, state, opt_state, best_network, best_state))
    finally:
        bar.close()
        jax.monitoring.unregister_event_duration_listener(listener)
    seconds += clock.elapsed()

    assert best is not None  # the last step is always evaluated
    test = evaluate(best_network.rescaled(info.timescale), best_state, task.split("test"),
                    batch_size=config.eval_batch_size)
    final = _final_row(config, best, test, selection, params, recurrent, len(train_split),
                       seconds, compiling[0])
    rows.append(final)
    if path is not None:
        path.unlink(missing_ok=True)
    return TrainResult(rows, final, network, state, best_network, best_state)


_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"


def _compile_listener(total: list[float]) -> Callable[..., None]:
    """A JAX event listener adding the seconds of every backend compile to ``total[0]`` (a
    program found in memory or loaded from the persistent cache compiles nothing)."""

    def listen(event: str, duration: float, **_: Any) -> None:
        if event == _COMPILE_EVENT:
            total[0] += duration

    return listen


def _better(val: dict[str, Any], best: dict[str, Any], selection: str) -> bool:
    # Strictly better only: ties keep the earlier checkpoint.
    if selection == "accuracy":
        return val["accuracy"] > best["accuracy"]
    return val["loss"] < best["loss"]


def _resume(path: Path, identity: str, like: Any) -> tuple[dict[str, Any], Any] | None:
    """The checkpoint at ``path`` if it belongs to this run, else None (and it is removed).

    The header is checked before the leaves are read: another format's leaves need not fit
    ``like``.
    """
    try:
        with open(path, "rb") as f:
            header = json.loads(f.readline())
        if not isinstance(header, dict):
            raise ValueError("its first line is not a header")
        if header.get("format") != _CHECKPOINT_FORMAT:
            print(f"Checkpoint {path} has format {header.get('format')!r}, written by another "
                  f"version of the harness (this one reads format {_CHECKPOINT_FORMAT}); "
                  "starting afresh.")
            path.unlink(missing_ok=True)
            return None
        if header.get("identity") != identity:
            print(f"Checkpoint {path} belongs to another run; starting afresh.")
            path.unlink(missing_ok=True)
            return None
        return load_checkpoint(path, like)
    except (OSError, ValueError, EOFError) as e:
        print(f"Checkpoint {path} is unreadable ({type(e).__name__}: {e}); starting afresh.")
        path.unlink(missing_ok=True)
        return None


# --------------------------------------------------------------------------------------------
# Seed groups: k seeds of one configuration trained as one compiled program


def stack(trees: list[Any]) -> Any:
    """Pytrees of one structure (modules of one configuration) stacked on a new leading axis:
    their arrays stacked, the rest (static fields) taken from the first."""
    dynamic = [eqx.filter(t, eqx.is_array) for t in trees]
    static = eqx.filter(trees[0], eqx.is_array, inverse=True)
    return eqx.combine(jax.tree.map(lambda *xs: jnp.stack(xs), *dynamic), static)


def unstack(tree: Any, i: int) -> Any:
    """Member ``i`` of a tree stacked by `stack`."""
    dynamic, static = eqx.partition(tree, eqx.is_array)
    return eqx.combine(jax.tree.map(lambda x: x[i], dynamic), static)


def _rescaled_group(networks: Network, factor: float) -> Network:
    if factor == 1.0:
        return networks
    return eqx.filter_vmap(lambda n: n.rescaled(factor))(networks)


@dataclasses.dataclass
class _Member:
    """One seed of a group: where it starts (fresh or from its checkpoint) and what it has."""

    seed: int
    path: Path | None
    identity: str
    start: int
    rows: list[dict[str, Any]]
    best: dict[str, Any] | None
    seconds: float
    carry: tuple[Any, ...]  # (network, state, opt_state, best_network, best_state)


def _final_row(config: TrainConfig, best: dict[str, Any], test: dict[str, Any], selection: str,
               params: int, recurrent: int, train_examples: int, seconds: float,
               compile_seconds: float) -> dict[str, Any]:
    """A run's ``kind="final"`` row: the selected step's validation and its test metrics."""
    return {
        "kind": "final",
        "step": config.steps,
        "best_step": best["step"],
        "val_loss": best["loss"],
        "val_accuracy": best["accuracy"],
        "test_loss": test["loss"],
        "test_accuracy": test["accuracy"],
        "selection": selection,
        "params": params,
        "recurrent_params": recurrent,
        "steps": config.steps,
        "epochs": config.steps * config.batch_size / train_examples,
        "train_seconds": round(seconds, 3),
        "compile_seconds": round(compile_seconds, 3),
    }


def train_group(
    network_config: NetworkConfig,
    task: Task,
    config: TrainConfig,
    *,
    seeds: list[int] | tuple[int, ...],
    on_eval: OnEval | None = None,
    checkpoints: list[str | Path | None] | None = None,
    progress: bool = False,
) -> list[TrainResult | Diverged]:
    """`train` for several seeds of one configuration at once: one result per seed, in order.

    Every seed's network, BatchNorm state and optimiser state are stacked on a leading seed
    axis and trained by `train`'s own step under `jax.vmap` (`GroupStepper`): one compiled
    program and one call per step for the k seeds, which at small widths costs little more than
    one seed. Each seed keeps what `train` gives it: its initialisation, its batch order
    (`BatchSampler` of its seed), its dropout keys, its evaluations, its best step and its
    checkpoint (the same file and format as `train`'s: a run resumes from it whether it was
    trained alone or in a group). Where the seeds' batches of a step cut to different length
    buckets, every seed's batch is cut to the longest (padding is exact: the same loss up to
    float round-off). A seed whose loss, gradient or validation loss goes non-finite is
    recorded as `train` records it (its result is the `Diverged` that `train` would raise) and
    frozen; the others go on. Validation and test are evaluated for every seed at once
    (`evaluate_group`) and ``on_eval`` is called per seed with that seed's network.

    Seeds whose checkpoints stand at different steps train as separate groups, one per step.
    ``train_seconds`` and ``compile_seconds`` of a final row are the seed's share of the
    group's: the group's times divided by its size.

    Equal to k calls of `train` up to float round-off: vmap batches the same operations, and
    XLA may order a batched reduction or matrix product differently.
    """
    seeds = list(seeds)
    if not seeds:
        raise ValueError("train_group needs at least one seed.")
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"train_group: seeds repeat a value: {seeds!r}.")
    paths = [None] * len(seeds) if checkpoints is None else [
        None if c is None else Path(c) for c in checkpoints]
    if len(paths) != len(seeds):
        raise ValueError(f"train_group: {len(paths)} checkpoints for {len(seeds)} seeds.")
    info = task.info
    members = []
    for seed, path in zip(seeds, paths):
        network, state = build_network(network_config, info, key=jr.fold_in(jr.PRNGKey(seed), 0))
        optimiser = make_optimiser(network)
        opt_state = init_optimiser(optimiser, eqx.filter(network, eqx.is_inexact_array),
                                   config)
        member = _Member(seed, path, _identity(network_config, task, config, seed), 0, [], None,
                         0.0, (network, state, opt_state, network, state))
        if path is not None and path.exists():
            resumed = _resume(path, member.identity, member.carry)
            if resumed is not None:
                header, member.carry = resumed
                member.start, member.rows = header["step"], header["rows"]
                member.best, member.seconds = header["best"], header["seconds"]
                print(f"Resuming {path.name} from step {member.start} of {config.steps}.")
        members.append(member)
    results: dict[int, TrainResult | Diverged] = {}
    for start in sorted({m.start for m in members}):
        group = [m for m in members if m.start == start]
        for member, result in zip(group, _train_members(network_config, task, config, group,
                                                        optimiser, on_eval, progress)):
            results[member.seed] = result
    return [results[s] for s in seeds]


def _train_members(
    network_config: NetworkConfig, task: Task, config: TrainConfig, members: list[_Member],
    optimiser: Optimiser, on_eval: OnEval | None, progress: bool,
) -> list[TrainResult | Diverged]:
    """Train ``members`` (all starting at one step) as one group; `train_group`'s results."""
    info = task.info
    k = len(members)
    train_split, val_split = task.split("train"), task.split("val")
    samplers = [BatchSampler(train_split, config.batch_size, m.seed, device=False)
                for m in members]
    keys = jnp.stack([jr.fold_in(jr.PRNGKey(m.seed), 1) for m in members])
    lr_at = config.schedule(config.lr)
    selection = "loss" if info.target == "regression" else "accuracy"
    first = members[0].carry[0]
    params = count_parameters(first)
    recurrent = count_parameters(eqx.filter(first, recurrent_mask(first)))
    start = members[0].start
    network, state, opt_state, best_network, best_state = (
        stack([m.carry[i] for m in members]) for i in range(5))
    results: list[TrainResult | Diverged | None] = [None] * k
    active = np.ones(k, dtype=bool)

    def diverged(i: int, step: int, what: str) -> None:
        member = members[i]
        if member.path is not None:
            member.path.unlink(missing_ok=True)
        member.rows.append({"kind": "diverged", "step": step})
        results[i] = Diverged(f"non-finite {what} at step {step}", member.rows)
        active[i] = False

    def check(step: int, finite: jax.Array) -> None:
        for i in np.flatnonzero(active & ~np.asarray(finite)):
            diverged(int(i), step, "loss or gradient")

    def callback(step: int) -> None:
        if on_eval is None:
            return
        for i in np.flatnonzero(active):
            rows = on_eval(step, unstack(network, int(i)), unstack(state, int(i)))
            members[i].rows.extend({"step": step, **row} for row in rows)

    if start == 0:
        callback(0)
    compiling = [0.0]
    listener = _compile_listener(compiling)
    jax.monitoring.register_event_duration_secs_listener(listener)
    clock = Stopwatch()
    losses: list[jax.Array] = []
    pending: tuple[int, jax.Array] | None = None
    bar = progress_bar(config.steps, f"{network_config.layer}/{info.name} x{k}",
                       enabled=progress)
    bar.update(start)
    stepper = GroupStepper(optimiser, network, state, opt_state)
    try:
        for s in range(start, config.steps):
            indices = [sampler.indices(s) for sampler in samplers]
            lengths = [sampler.length(index) for sampler, index in zip(samplers, indices)]
            length = None if lengths[0] is None else max(lengths)
            batches = [to_batch(train_split, index, length, device=False) for index in indices]
            batch = Batch(*(np.stack(parts) for parts in zip(*batches)))
            loss, finite = stepper(batch, keys, active)
            losses.append(loss)
            if pending is not None:
                check(*pending)
                if not active.any():
                    break
            pending = (s + 1, finite)
            bar.update(1)
            step = s + 1
            if step % config.eval_every and step != config.steps:
                continue
            check(step, finite)
            pending = None
            if not active.any():
                break
            network, state, opt_state = stepper.carry()
            vals = evaluate_group(_rescaled_group(network, info.timescale), state, val_split,
                                  batch_size=config.eval_batch_size)
            seen = jnp.stack(losses)
            losses = []
            improved = np.zeros(k, dtype=bool)
            for i in np.flatnonzero(active):
                member, val = members[i], vals[i]
                if not math.isfinite(val["loss"]):
                    diverged(int(i), step, "validation loss")
                    continue
                member.rows.append({
                    "kind": "eval",
                    "step": step,
                    "lr": float(lr_at(step)),
                    "train_loss": float(jnp.mean(seen[:, i])),
                    "val_loss": val["loss"],
                    "val_accuracy": val["accuracy"],
                })
                if member.best is None or _better(val, member.best, selection):
                    member.best = {"step": step, **val}
                    improved[i] = True
            best_network, best_state = _select(improved, (network, state),
                                               (best_network, best_state))
            callback(step)
            elapsed = clock.elapsed() / k
            for i in np.flatnonzero(active):
                member = members[i]
                if member.path is not None and step != config.steps:
                    header = {"format": _CHECKPOINT_FORMAT, "identity": member.identity,
                              "step": step, "rows": member.rows, "best": member.best,
                              "seconds": member.seconds + elapsed}
                    tree = tuple(unstack(t, int(i)) for t in
                                 (network, state, opt_state, best_network, best_state))
                    save_checkpoint(member.path, header, tree)
    finally:
        bar.close()
        jax.monitoring.unregister_event_duration_listener(listener)
    share = clock.elapsed() / k
    if active.any():
        network, state, _ = stepper.carry()
        tests = evaluate_group(_rescaled_group(best_network, info.timescale), best_state,
                               task.split("test"), batch_size=config.eval_batch_size)
    for i in np.flatnonzero(active):
        member, test, best = members[i], tests[i], members[i].best
        assert best is not None  # the last step is always evaluated
        final = _final_row(config, best, test, selection, params, recurrent, len(train_split),
                           member.seconds + share, compiling[0] / k)
        member.rows.append(final)
        if member.path is not None:
            member.path.unlink(missing_ok=True)
        results[i] = TrainResult(member.rows, final, unstack(network, int(i)),
                                 unstack(state, int(i)), unstack(best_network, int(i)),
                                 unstack(best_state, int(i)))
    assert all(r is not None for r in results)
    return results  # type: ignore[return-value]


def _select(mask: np.ndarray, new: Any, old: Any) -> Any:
    """Per seed (the leading axis of every array): ``new`` where ``mask``, else ``old``."""
    if not mask.any():
        return old
    where = jnp.asarray(mask)

    def pick(a: jax.Array, b: jax.Array) -> jax.Array:
        return jnp.where(where.reshape(where.shape + (1,) * (a.ndim - 1)), a, b)

    dynamic_new, static = eqx.partition(new, eqx.is_array)
    dynamic_old = eqx.filter(old, eqx.is_array)
    return eqx.combine(jax.tree.map(pick, dynamic_new, dynamic_old), static)
