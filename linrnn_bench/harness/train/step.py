"""The network of a task, the loss sums of a batch, and the one compiled training step
(`Stepper`, and `GroupStepper`: the same step vmapped over a seed group)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import optax

from linrnn_bench.models.network import Network, NetworkConfig
from linrnn_bench.tasks import TaskInfo

from .batches import Batch
from .optimiser import Optimiser, OptimiserState, optimiser_update


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
