"""What the loaders of real releases share: the ``path`` they read, a seed, and size caps.

A loader's config subclasses `LoaderConfig`: ``path`` is required (no default; the user says where
the release is), ``seed`` draws any held-out or capped subsets, and ``max_train`` / ``max_val`` /
``max_test`` keep a random subset of each split (the ``smoke`` and ``cpu`` presets use them).
Caps are applied before the examples are read, so a small preset reads few files.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np

from . import _util

# The caps the presets of every loader use.
PRESETS: dict[str, dict[str, int]] = {
    "smoke": dict(max_train=64, max_val=16, max_test=16),
    "cpu": dict(max_train=2000, max_val=250, max_test=250),
    "gpu": dict(),
}


@dataclasses.dataclass(frozen=True)
class LoaderConfig:
    """Options every loader has.

    Attributes:
        path: the directory of the release (see each loader for what it must hold).
        seed: draws held-out and capped subsets.
        max_train, max_val, max_test: keep at most this many examples of the split (None: all).
    """

    path: str
    seed: int = 0
    max_train: int | None = None
    max_val: int | None = None
    max_test: int | None = None

    # What ``path`` must hold, for error messages; set by each loader.
    expected: ClassVar[str] = "the release files"

    def __post_init__(self):
        name = type(self).__name__
        _util.data_path(f"{name}.path", self.path, self.expected)
        _util.integer(f"{name}.seed", self.seed, low=0)
        _util.optional_integer(f"{name}.max_train", self.max_train)
        _util.optional_integer(f"{name}.max_val", self.max_val)
        _util.optional_integer(f"{name}.max_test", self.max_test)


def cap(cfg: LoaderConfig, split: str, n: int) -> np.ndarray:
    """Sorted indices of the examples of ``split`` (of ``n``) that its cap keeps."""
    return _util.subsample(n, getattr(cfg, f"max_{split}"), cfg.seed, split)
