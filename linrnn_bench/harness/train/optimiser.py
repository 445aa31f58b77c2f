"""The two-group optimiser of the recipe as optax transformations.

The recurrent parameters (each layer's `recurrent_mask()`, never parameter names) get their own
learning rate and no weight decay:

    regular:    AdamW(lr * s(t), weight_decay)          encoder, norms, GLU, head, C, D, ...
    recurrent:  Adam(recurrent_lr * s(t))               eigenvalues, angles, timescales, ...
    s(t) = t / T_w for t < T_w, then (1 + cos(pi (t - T_w) / (T - T_w))) / 2

with optional clipping of the global gradient norm before both. Every number of the recipe is an
injected hyperparameter (`optax.inject_hyperparams`): data in the optimiser's state, never a
constant of the compiled step.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import optax
from jaxtyping import Array, Float, Int

from linrnn_bench.models.network import Network, recurrent_mask

from .recipe import TrainConfig


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
