"""The schema of a study's rows: per row kind, the columns its rows carry, their types and meaning.

A study's `run` returns flat rows (`harness.studies._study.Study`). Its module declares them
once, as ``COLUMNS`` (a `Schema`); the report reads the column names from there
(``COLUMNS.names.tokens_per_s``, an `AttributeError` for a column the study does not write),
and the tests check that every row a smoke run stores has exactly its kind's columns, of the
declared types (`Schema.problems`). The run's config (``cfg.*``) and provenance (``prov.*``)
columns are the store's (`harness.store.Store.read`), not a study's.

The training rows (``kind`` ``"eval"``, ``"final"``, ``"diverged"``) are written by
`harness.train.train` for every study that trains; `TRAINING` declares them once for those.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any


@dataclasses.dataclass(frozen=True)
class Column:
    """One column of a study's rows.

    Attributes:
        type: the type of its values as the store gives them back (JSON: ``int``, ``float``,
            ``str`` or ``bool``); an ``int`` is accepted where ``float`` is declared, a
            ``bool`` never where a number is.
        meaning: what it holds, with its unit.
        nullable: ``None`` where it does not apply (said in ``meaning``).
    """

    type: type
    meaning: str
    nullable: bool = False

    def accepts(self, value: Any) -> bool:
        if value is None:
            return self.nullable
        if self.type is bool or isinstance(value, bool):
            return self.type is bool and isinstance(value, bool)
        if self.type is float:
            return isinstance(value, (int, float))
        return isinstance(value, self.type)


class Names:
    """The declared column names as attributes: ``names.val_loss == "val_loss"``; a name the
    study does not declare is an `AttributeError` listing those it does."""

    def __init__(self, columns: Mapping[str, Column]):
        self._columns = tuple(columns)

    def __getattr__(self, name: str) -> str:
        if name.startswith("_") or name not in self._columns:
            raise AttributeError(
                f"{name!r} is not a declared column; declared: {', '.join(self._columns)}."
            )
        return name

    def __dir__(self) -> list[str]:
        return list(self._columns)


@dataclasses.dataclass(frozen=True)
class Schema:
    """The rows one study writes.

    Attributes:
        columns: every column of the study's rows, name -> `Column`.
        kinds: row kind -> the columns every row of that kind has; a row's kind is its value
            in the column ``by``.
        optional: row kind -> the columns only some rows of that kind have (their `Column`
            says when).
        by: the column that tells a row's kind.
    """

    columns: Mapping[str, Column]
    kinds: Mapping[str, tuple[str, ...]]
    optional: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    by: str = "kind"

    def __post_init__(self):
        for kind, names in (*self.kinds.items(), *self.optional.items()):
            unknown = [n for n in names if n not in self.columns]
            if unknown:
                raise ValueError(f"Row kind {kind!r} names undeclared columns {unknown}.")
            if self.by not in self.kinds.get(kind, ()):
                raise ValueError(f"Row kind {kind!r} lacks its kind column {self.by!r}.")
        unused = set(self.columns) - {n for names in (*self.kinds.values(),
                                                       *self.optional.values()) for n in names}
        if unused:
            raise ValueError(f"Columns {sorted(unused)} are in no row kind.")

    @property
    def names(self) -> Names:
        return Names(self.columns)

    def of(self, kind: str) -> tuple[str, ...]:
        """Every column a row of ``kind`` may have: the required ones, then the optional."""
        return (*self.kinds[kind], *self.optional.get(kind, ()))

    def problems(self, row: Mapping[str, Any]) -> list[str]:
        """What is wrong with ``row`` against this schema (empty: nothing)."""
        kind = row.get(self.by)
        if kind not in self.kinds:
            return [f"{self.by}={kind!r} is not a declared row kind ({list(self.kinds)})"]
        required, optional = set(self.kinds[kind]), set(self.optional.get(kind, ()))
        out = []
        missing = sorted(required - set(row))
        if missing:
            out.append(f"{self.by}={kind!r} row lacks {missing}")
        extra = sorted(set(row) - required - optional)
        if extra:
            out.append(f"{self.by}={kind!r} row has undeclared {extra}")
        for name, value in row.items():
            column = self.columns.get(name)
            if column is not None and not column.accepts(value):
                shown = "NaN" if isinstance(value, float) and math.isnan(value) else repr(value)
                out.append(f"{name}={shown} is not of type {column.type.__name__}"
                           f"{' or None' if column.nullable else ''}")
        return out


def merged(*parts: Mapping[str, Column]) -> dict[str, Column]:
    """The union of column declarations; a name declared twice must be declared alike."""
    out: dict[str, Column] = {}
    for part in parts:
        for name, column in part.items():
            if out.setdefault(name, column) != column:
                raise ValueError(f"Column {name!r} is declared twice, differently.")
    return out


# --------------------------------------------------------------------------------------------
# A measured layer program's configuration (`harness.programs`) and the engine path it resolved
# to, shared by the throughput and memory studies

PROGRAM: dict[str, Column] = {
    "model": Column(str, "the model, as named in the config (a registry name or an import "
                         "path)"),
    "mode": Column(str, "'forward', 'forward_backward' or 'train' (one optimiser step)"),
    "seq_len": Column(int, "L, steps per sequence"),
    "batch": Column(int, "B, sequences per call"),
    "d_model": Column(int, "H, the layer width"),
    "d_state": Column(int, "the layer's d_state (its own convention)"),
    "dtype": Column(str, "the dtype of the computation"),
    "algorithm": Column(str, "the engine algorithm of the program (`resolved_algorithm`); None "
                             "for a layer not on the engine", nullable=True),
    "states": Column(int, "P, complex states of one step; None if the layer has no system or "
                          "hidden states", nullable=True),
}


# --------------------------------------------------------------------------------------------
# The training rows (`harness.train.train`), shared by the studies that train

TRAINING: dict[str, Column] = {
    "kind": Column(str, "the row kind: 'eval' (a validation point), 'final' (the run's "
                        "result), 'diverged' (where a run stopped)"),
    "step": Column(int, "optimiser steps taken (final: the run's total)"),
    "lr": Column(float, "the regular learning rate of the schedule at this step"),
    "train_loss": Column(float, "mean training loss over the steps since the last evaluation"),
    "val_loss": Column(float, "validation loss (final: at the selected step)"),
    "val_accuracy": Column(float, "validation accuracy as a fraction (final: at the selected "
                                  "step); None on a regression task", nullable=True),
    "best_step": Column(int, "the step selected on validation"),
    "test_loss": Column(float, "test loss at the selected step"),
    "test_accuracy": Column(float, "test accuracy as a fraction at the selected step; None on "
                                   "a regression task", nullable=True),
    "selection": Column(str, "what selects the step: 'accuracy' (highest) or 'loss' (lowest)"),
    "params": Column(int, "trained real numbers of the network (a complex entry counts two)"),
    "recurrent_params": Column(int, "those of them in the recurrent optimiser group"),
    "steps": Column(int, "the run's optimiser steps"),
    "epochs": Column(float, "passes over the training split: steps x batch / examples"),
    "train_seconds": Column(float, "wall time of the training loop, s (a timing)"),
    "compile_seconds": Column(float, "of which XLA compiled, s (a timing)"),
}
TRAINING_KINDS: dict[str, tuple[str, ...]] = {
    "eval": ("kind", "step", "lr", "train_loss", "val_loss", "val_accuracy"),
    "final": ("kind", "step", "best_step", "val_loss", "val_accuracy", "test_loss",
              "test_accuracy", "selection", "params", "recurrent_params", "steps", "epochs",
              "train_seconds", "compile_seconds"),
    "diverged": ("kind", "step"),
}


# --------------------------------------------------------------------------------------------
# How the process ran (`harness.measure.roofline.environment_columns`), on the measuring
# studies' rows

ENVIRONMENT: dict[str, Column] = {
    "allocator": Column(str, "the process's heap allocator ('glibc', 'tcmalloc', ...)"),
    "ld_preload": Column(str, "LD_PRELOAD of the process"),
    "glibc_tunables": Column(str, "GLIBC_TUNABLES of the process (the Makefile's settings)"),
    "xla_flags": Column(str, "XLA_FLAGS of the process that compiled"),
    "backend": Column(str, "JAX's backend ('cpu', 'gpu', ...)"),
    "device_kind": Column(str, "the first device's kind"),
}
