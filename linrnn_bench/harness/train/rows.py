"""What a run returns: its metric rows (evaluation, the callback's, diverged and final rows) and
the `TrainResult` that holds them with the trained and the selected networks."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import equinox as eqx
import optax

from linrnn_bench.models.network import Network

from ..errors import Diverged
from .recipe import TrainConfig

OnEval = Callable[[int, Network, eqx.nn.State], list[dict[str, Any]]]


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


def eval_row(step: int, lr_at: optax.Schedule, train_loss: float, val: dict[str, Any]
             ) -> dict[str, Any]:
    """A ``kind="eval"`` row: the learning rate at ``step``, the mean training loss since the
    previous evaluation and the validation metrics ``val``."""
    return {
        "kind": "eval",
        "step": step,
        "lr": float(lr_at(step)),
        "train_loss": train_loss,
        "val_loss": val["loss"],
        "val_accuracy": val["accuracy"],
    }


def add_callback_rows(on_eval: OnEval | None, step: int, network: Network,
                      state: eqx.nn.State, rows: list[dict[str, Any]]) -> None:
    """``on_eval``'s rows for ``step`` appended to ``rows`` (``step`` added where missing)."""
    if on_eval is not None:
        rows.extend({"step": step, **row} for row in on_eval(step, network, state))


def diverged(rows: list[dict[str, Any]], step: int, what: str) -> Diverged:
    """The `Diverged` of a run whose ``what`` went non-finite at ``step``, its ``kind="diverged"``
    row appended to ``rows``."""
    rows.append({"kind": "diverged", "step": step})
    return Diverged(f"non-finite {what} at step {step}", rows)


def final_row(config: TrainConfig, best: dict[str, Any], test: dict[str, Any], selection: str,
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
