"""Evaluation and model selection: mean loss and accuracy over every example of a split, in
inference mode, and which of two validations is better."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from linrnn_bench.models.network import Network
from linrnn_bench.tasks import Split

from .batches import bucket_lengths, split_length, to_batch, trimmed_length
from .step import batch_sums


def _eval_sums_body(network, state, batch, weights):
    loss, correct, count, _ = batch_sums(network, state, batch, weights)
    return jnp.stack([loss, correct, count])


_eval_sums = eqx.filter_jit(_eval_sums_body)
# The same sums for a stack of networks (a seed group) on one batch: (k, 3).
_group_eval_sums = eqx.filter_jit(eqx.filter_vmap(
    _eval_sums_body, in_axes=(eqx.if_array(0), eqx.if_array(0), None, None)))


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


def _better(val: dict[str, Any], best: dict[str, Any], selection: str) -> bool:
    # Strictly better only: ties keep the earlier checkpoint.
    if selection == "accuracy":
        return val["accuracy"] > best["accuracy"]
    return val["loss"] < best["loss"]
