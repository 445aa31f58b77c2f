"""What the generated tasks share: a seed, the three split sizes, and splits drawn from disjoint
seed streams.

A generated task's config subclasses `GeneratedConfig` (redeclaring a size field to change its
default) and names its task in ``task``, the prefix of its error messages.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from . import _util

Sample = Callable[[Any, int, np.random.Generator], tuple[np.ndarray, np.ndarray]]


@dataclasses.dataclass(frozen=True)
class GeneratedConfig:
    """Options every generated task has.

    Attributes:
        seed: generation seed.
        num_train, num_val, num_test: split sizes.
    """

    seed: int = 0
    num_train: int = 100_000
    num_val: int = 2_000
    num_test: int = 2_000

    # The task's name, prefixing its error messages; set by each task.
    task: ClassVar[str] = "generated"

    def __post_init__(self):
        _util.integer(f"{self.task}.seed", self.seed, low=0)
        _util.integer(f"{self.task}.num_train", self.num_train, low=1)
        _util.integer(f"{self.task}.num_val", self.num_val, low=1)
        _util.integer(f"{self.task}.num_test", self.num_test, low=1)

    @property
    def sizes(self) -> dict[str, int]:
        return {"train": self.num_train, "val": self.num_val, "test": self.num_test}


def fixed_length(cfg: GeneratedConfig, sample: Sample, length: int) -> dict[str, np.ndarray]:
    """The arrays of a task whose sequences all have ``length`` steps: each split's inputs and
    labels drawn by ``sample(cfg, n, generator)`` from the split's own seed stream."""
    arrays: dict[str, np.ndarray] = {}
    for split, n in cfg.sizes.items():
        inputs, labels = sample(cfg, n, _util.rng(cfg.seed, split))
        arrays[f"{split}/inputs"] = inputs
        arrays[f"{split}/labels"] = labels
        arrays[f"{split}/lengths"] = np.full(n, length, dtype=np.int32)
    return arrays
