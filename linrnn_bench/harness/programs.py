"""What the throughput and memory studies and the layer benchmarks share: which layers and sizes
they measure, the layer's compiled programs and parameter counts.

Sizes. ``"paper"`` is a layer at the width and state size of one published configuration (its
registration's `models.PaperSize`); ``"matched"`` keeps the paper's options and picks the
``d_state`` whose parameter count is closest to a target (`matched_d_state`).

Programs. `layer_program` is the layer's batched computation in one of `roofline.MODES`:
``"forward"`` (y = layer(u) over a batch), ``"forward_backward"`` (the VJP with a fixed random
cotangent dy: gradients w.r.t. the parameters and the input) and ``"train"`` (one Adam step on
the mean squared error to a fixed random target).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any, Literal

from linrnn_bench import models

from .measure import roofline

Size = Literal["paper", "matched"]
SIZES: tuple[str, ...] = ("paper", "matched")

# The LRU's parameter count at H = 128, P = 128 (the layer benchmarks' shape): 4 H P for the
# complex B and C, 3 P for nu, theta and gamma, H for D.
DEFAULT_MATCHED_PARAMS = 4 * 128 * 128 + 3 * 128 + 128

# Bytes of one complex64 state.
COMPLEX_BYTES = 8


# --------------------------------------------------------------------------------------------
# Validating selections


def choices(where: str, values: tuple, accepted: tuple) -> None:
    """``values`` is non-empty, without repeats, and each one is in ``accepted``."""
    if not values:
        raise ValueError(f"{where} must not be empty; accepted values: {list(accepted)}.")
    bad = [v for v in values if v not in accepted]
    if bad:
        raise ValueError(f"{where} has {bad}, not accepted; accepted values: {list(accepted)}.")
    if len(set(values)) != len(values):
        raise ValueError(f"{where}={values!r} repeats a value.")


def measured_models(where: str, selected: tuple[str, ...]) -> tuple[str, ...]:
    """The models named (registry names or import paths), or for ``()`` every registered model
    that has a paper size, the size both studies start from."""
    if not selected:
        return tuple(n for n in models.names() if models.info(n).paper_size is not None)
    if len(set(selected)) != len(selected):
        raise ValueError(f"{where}={selected!r} repeats a model.")
    for name in selected:
        try:
            paper_size(name)  # resolves the name and checks the size is there
        except ValueError as e:
            raise ValueError(f"{where} has {name!r}, not accepted: {e}") from e
    return tuple(selected)


def without_paper_size(model: models.ModelInfo) -> str | None:
    """The throughput and memory studies' `Study.skip_reason`: they start from a paper size."""
    if model.paper_size is None:
        return f"{model.label} registers no paper_size, the size these studies measure"
    return None


def paper_size(model: str) -> models.PaperSize:
    """The paper size registered for ``model``, or an error saying where to add it."""
    paper = models.info(model).paper_size
    if paper is None:
        raise ValueError(
            f"Model {model!r} registers no paper size, which the throughput and memory studies "
            "start from; pass paper_size=models.PaperSize(d_model, d_state, options, source) "
            "to its models.register line."
        )
    return paper


# --------------------------------------------------------------------------------------------
# Sizes


def parameter_count(model: str, *, d_model: int, d_state: int, options: tuple) -> int:
    """Trained real numbers of a layer (complex entries count two, as
    `models.network.count_parameters`), from shapes alone: no array is built."""
    import equinox as eqx
    import jax
    import jax.numpy as jnp

    layer = eqx.filter_eval_shape(
        lambda key: models.build(model, d_model=d_model, d_state=d_state, key=key, **dict(options)),
        jax.random.PRNGKey(0),
    )
    total = 0
    for leaf in jax.tree.leaves(layer):
        if isinstance(leaf, jax.ShapeDtypeStruct) and jnp.issubdtype(leaf.dtype, jnp.inexact):
            complex_entry = jnp.issubdtype(leaf.dtype, jnp.complexfloating)
            total += math.prod(leaf.shape) * (2 if complex_entry else 1)
    return total


@functools.cache
def matched_d_state(
    model: str, d_model: int, options: tuple, target: int, limit: int = 8192
) -> int:
    """The valid ``d_state`` (config validation accepts it) whose parameter count is closest to
    ``target``; ties go to the smaller state.

    A layer's count grows with ``d_state`` at fixed width and options, so a binary search over
    the valid values finds the crossing.
    """
    valid = []
    for d_state in range(1, limit + 1):
        try:
            models.make_config(model, d_model=d_model, d_state=d_state, **dict(options))
        except ValueError:
            continue
        valid.append(d_state)
    if not valid:
        raise ValueError(f"No d_state in [1, {limit}] is valid for {model!r} with {options}.")

    return closest_size(
        valid, lambda d: parameter_count(model, d_model=d_model, d_state=d, options=options),
        target)


def closest_size(sizes: list[int], count: Callable[[int], int], target: int) -> int:
    """The size among ``sizes`` (ascending) whose ``count`` is closest to ``target``; ties go
    to the smaller size. ``count`` grows with the size, so a binary search finds the crossing
    and only a few sizes are counted."""
    low, high = 0, len(sizes) - 1
    while low < high:  # the first size whose count reaches the target
        mid = (low + high) // 2
        if count(sizes[mid]) < target:
            low = mid + 1
        else:
            high = mid
    near = [sizes[i] for i in (low - 1, low) if 0 <= i < len(sizes)]
    return min(near, key=lambda d: (abs(count(d) - target), d))


def resolved_d_state(spec: Any) -> int:
    """A run's ``d_state``: the paper's, or for ``d_state=None`` the one matching
    ``spec.matched_params`` (fields ``model``, ``d_model``, ``d_state``, ``options``)."""
    if spec.d_state is not None:
        return spec.d_state
    return matched_d_state(spec.model, spec.d_model, spec.options, spec.matched_params)


# --------------------------------------------------------------------------------------------
# What a measurement reads of a layer


def system_shape(model: str, layer: Any) -> roofline.SystemShape | None:
    """The discrete system's sizes (the roofline's counts need them), or ``None`` for a layer
    registered without a discrete system."""
    import equinox as eqx

    if not models.info(model).has(models.DISCRETE_SYSTEM):
        return None
    return roofline.SystemShape.of(eqx.filter_eval_shape(layer.discrete_system))


def state_count(model: str, layer: Any, d_model: int) -> int | None:
    """P, the complex states of one step: the discrete system's, else the hidden states' width,
    else ``None``."""
    import jax
    import jax.numpy as jnp

    shape = system_shape(model, layer)
    if shape is not None:
        return shape.states
    if models.info(model).has(models.HIDDEN_STATES):
        u = jax.ShapeDtypeStruct((1, d_model), jnp.float32)
        return int(jax.eval_shape(layer.hidden_states, u).shape[-1])
    return None


def resolved_algorithm(layer: Any) -> str | None:
    """The engine algorithm the layer runs, ``None`` for a layer not built on the engine."""
    if isinstance(layer, models.AbstractRecurrentLayer):
        return layer.resolved_algorithm()
    return None


# --------------------------------------------------------------------------------------------
# Programs


def layer_program(
    layer: Any, *, mode: str, batch: int, seq_len: int, d_model: int, key: Any,
    abstract: bool = False,
) -> tuple[Callable, tuple, tuple[int, ...], Callable]:
    """``(function, args, donate, make_call)`` of the layer's computation in ``mode``, on
    ``(batch, seq_len, d_model)`` float32 inputs drawn from ``key``.

    ``make_call(compiled)`` returns the zero-argument call that
    `harness.measure.timing.time_calls` times; a training step threads its parameters and
    optimiser state through its closure, donating them (as a training loop does) so that no
    step allocates fresh parameter buffers.

    ``abstract=True`` gives the inputs as shapes alone (`jax.ShapeDtypeStruct`), for a program
    that is compiled and never run (the memory study's analysis): drawing them would compile a
    sampler per shape and fill B x L x H floats twice, several times the compile's own cost at
    the longest L. Its ``make_call`` is then not to be called.
    """
    import equinox as eqx
    import jax
    import jax.numpy as jnp
    import jax.random as jr

    params, static = eqx.partition(layer, eqx.is_inexact_array)
    k_u, k_y = jr.split(key)
    shape = (batch, seq_len, d_model)
    if abstract:
        u = other = jax.ShapeDtypeStruct(shape, jnp.float32)
    else:
        u = jr.normal(k_u, shape, jnp.float32)
        other = jr.normal(k_y, shape, jnp.float32)  # the cotangent dy, or the regression target

    def forward(p, u):
        return jax.vmap(eqx.combine(p, static))(u)

    if mode == "forward":
        return forward, (params, u), (), lambda c: (lambda: c(params, u))
    elif mode == "forward_backward":

        def forward_backward(p, u, dy):
            return jax.vjp(forward, p, u)[1](dy)

        return forward_backward, (params, u, other), (), lambda c: (lambda: c(params, u, other))
    elif mode == "train":
        return _train_program(forward, params, u, other)
    else:
        raise ValueError(f"mode={mode!r}; accepted values: {list(roofline.MODES)}.")


def _train_program(forward: Callable, params: Any, u: Any, target: Any
                   ) -> tuple[Callable, tuple, tuple[int, ...], Callable]:
    """`layer_program`'s ``"train"`` mode: one Adam step on the mean squared error of
    ``forward(params, u)`` against ``target``, its parameters and optimiser state donated."""
    import jax
    import jax.numpy as jnp
    import optax

    optimiser = optax.adam(1e-3)

    def step(p, opt_state, u, target):
        def loss_fn(p):
            return jnp.mean(jnp.square(forward(p, u) - target))

        loss, grads = jax.value_and_grad(loss_fn)(p)
        updates, opt_state = optimiser.update(grads, opt_state, p)
        return optax.apply_updates(p, updates), opt_state, loss

    opt_state = optimiser.init(params)

    def make_call(compiled):
        # Copies: the donated buffers must not be the layer's own arrays.
        state = [jax.tree.map(jnp.copy, params), opt_state]

        def call():
            p, o, loss = compiled(state[0], state[1], u, target)
            state[:] = [p, o]
            return p, o, loss

        return call

    return step, (params, opt_state, u, target), (0, 1), make_call
