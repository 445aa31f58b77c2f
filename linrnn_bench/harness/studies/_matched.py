"""Parameter-matched runs: every model of a cell sized to one parameter budget by its state size.

At equal width and state size the layers differ in size (an LRU layer of H = 32, P = 32 holds
about twice a RotRNN layer's parameters), so an accuracy difference at equal width may be a
difference of size. A matched run keeps the width (and so the encoder, normalisation, GLU and
head, which are the same for every model) and changes ``d_state`` until its recurrent layer
holds the budget's number of trained parameters, within `TOLERANCE`. The budget of a (task,
depth) is a fixed number, or the smallest (largest) layer among the study's models at equal
width. Counts are from shapes alone (`harness.programs.parameter_count`: complex entries count
two), with the options the run ends with, which may derive from ``d_state`` (RotRNN's heads).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

from linrnn_bench import models

from .. import programs
from ..errors import ConfigError

# How far a matched layer's parameter count may be from the budget, as a fraction of it.
TOLERANCE = 0.05
# The budgets a study may name instead of a number of parameters.
RULES = ("smallest", "largest")
# How far above the equal-width state size the search looks (a budget of the largest layer
# may need a few times the state of a small one).
_SEARCH_FACTOR = 4


@functools.cache
def layer_parameters(model: str, d_model: int, d_state: int,
                     options: tuple[tuple[str, Any], ...]) -> int:
    """Trained real numbers of one recurrent layer of ``model`` at these sizes and options."""
    return programs.parameter_count(model, d_model=d_model, d_state=d_state, options=options)


def of_network(network: Any) -> int:
    """`layer_parameters` of one layer of a resolved `models.network.NetworkConfig`."""
    return layer_parameters(network.layer, network.d_model, network.d_state,
                            tuple(network.layer_options))


def counted(network: Any) -> int | None:
    """`of_network`, or None for a layer that cannot be built (a broken registration: its
    own runs fail and record why; it takes no part in a budget)."""
    try:
        return of_network(network)
    except Exception:  # noqa: BLE001 - whatever a user's layer raises when built
        return None


def check_budget(value: Any) -> None:
    """Refuse a budget that is neither one of `RULES` nor a positive integer."""
    if value in RULES:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"parameter_budget={value!r} is not accepted; accepted values: "
                         f"{list(RULES)} or a positive integer (a layer's parameters).")


def budget(rule: str | int, counts: Mapping[str, int]) -> int:
    """The budget of a cell: ``rule`` itself when a number, else the smallest or largest of
    ``counts`` (each model's layer at equal width)."""
    if not isinstance(rule, str):
        return int(rule)
    return min(counts.values()) if rule == "smallest" else max(counts.values())


def matched(at: Callable[[int], Any | None], model: str, d_state: int, target: int,
            where: str) -> Any:
    """The run ``at(d)`` (a run spec with ``network``) sized to ``target`` layer parameters:
    at the accepted state size closest to ``target`` (``at`` returns None for a state size the
    layer's config refuses), searched up to a few times the equal-width ``d_state``; ties go
    to the smaller state. (A model within `TOLERANCE` at equal width keeps its own runs: the
    caller does not ask.)

    A layer's count grows with its state size, so a binary search over the accepted sizes
    finds the crossing. Raises `ConfigError` when the closest is more than `TOLERANCE` away.
    """
    specs = {}
    for d in range(1, max(_SEARCH_FACTOR * d_state, 64) + 1):
        spec = at(d)
        if spec is not None and _accepted(spec.network):
            specs[d] = spec
    sizes = sorted(specs)
    if not sizes:
        raise ConfigError(f"{where}: no state size is accepted by {model}'s config.")

    def count(d: int) -> int:
        return of_network(specs[d].network)

    best = programs.closest_size(sizes, count, target)
    if abs(count(best) - target) > TOLERANCE * target:
        raise ConfigError(
            f"{where}: {model} cannot be sized to {target} layer parameters within "
            f"{TOLERANCE:.0%} by its state size (closest: d_state={best}, {count(best)} "
            "parameters); choose another parameter_budget or width.")
    return specs[best]


def _accepted(network: Any) -> bool:
    try:
        models.make_config(network.layer, d_model=network.d_model, d_state=network.d_state,
                           **dict(network.layer_options))
    except (ValueError, TypeError):
        return False
    return True
