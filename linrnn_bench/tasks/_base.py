"""The task contract: a task describes itself and yields numpy splits.

A task is built by `tasks.build(name, **options)` from a frozen, validated config. It exposes
``info`` (a `TaskInfo`) and ``split(name)`` for ``"train"``, ``"val"`` and ``"test"``, each a
`Split` of numpy arrays, nothing framework-specific.

Array conventions (n examples, L = info.seq_len, d = info.input_dim):

- inputs: tokens ``(n, L) int32`` (0 is padding) or real features ``(n, L, d) float32``;
  pair tasks add a leading pair axis after n: ``(n, 2, L)`` or ``(n, 2, L, d)``.
- lengths: ``(n,) int32`` (pair tasks ``(n, 2)``), the number of valid steps; steps at and past
  ``lengths`` are padding and must be masked.
- labels, by ``info.target``:
    ``"class"``     ``(n,) int32`` in ``[0, num_classes)``: one label per sequence;
    ``"per_step"``  ``(n, L) int32``: a label per step, ``-1`` where no prediction is scored
                    (e.g. MQAR's key/value positions);
    ``"regression"`` ``(n,) float32``: one real target per sequence (``num_classes`` is 1).
"""

from __future__ import annotations

import dataclasses
from typing import Literal, Protocol

import numpy as np

InputKind = Literal["tokens", "real"]
Target = Literal["class", "per_step", "regression"]
SPLITS: tuple[str, ...] = ("train", "val", "test")


@dataclasses.dataclass(frozen=True)
class TaskInfo:
    """What a model and the harness need to know about a task.

    Attributes:
        name: registry key.
        description: one line, shown by ``linrnn-bench list``.
        seq_len: L, the maximum sequence length (arrays are padded to it).
        variable_length: whether lengths differ between examples.
        input_kind: ``"tokens"`` (embedding) or ``"real"`` (linear encoder).
        vocab_size: number of token ids including padding 0 (tokens only, else None).
        input_dim: d, features per step (real only, else None).
        num_classes: classes of the target (1 for regression).
        target: ``"class"``, ``"per_step"`` or ``"regression"``.
        pair: whether each example is two sequences (two-tower head).
        timescale: multiply every layer's timescale Delta by this at evaluation (1.0 usually;
            2.0 for Speech Commands' 8 kHz zero-shot test split, as the S4/S5 papers do).
    """

    name: str
    description: str
    seq_len: int
    variable_length: bool
    input_kind: InputKind
    num_classes: int
    vocab_size: int | None = None
    input_dim: int | None = None
    target: Target = "class"
    pair: bool = False
    timescale: float = 1.0


@dataclasses.dataclass(frozen=True)
class Split:
    """One split: ``inputs``, ``labels``, ``lengths`` (see the module docstring for shapes)."""

    inputs: np.ndarray
    labels: np.ndarray
    lengths: np.ndarray

    def __len__(self) -> int:
        return int(self.labels.shape[0])


class Task(Protocol):
    """A built task: its description, its validated config and its splits."""

    info: TaskInfo
    config: object

    def split(self, name: str) -> Split: ...
