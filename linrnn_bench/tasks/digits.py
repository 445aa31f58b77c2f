"""Sequential digits: scikit-learn's bundled 8x8 digits, read pixel by pixel (length 64).

The 1797 images of the UCI optical recognition of handwritten digits test set (Alpaydin &
Kaynak 1998) that scikit-learn ships (``sklearn.datasets.load_digits``, BSD-3 licence; the UCI
data under CC BY 4.0), each pixel an integer 0-16. The file ``load_digits`` parses,
``sklearn/datasets/data/digits.csv.gz`` (64 pixels then the label per row), is read here
directly through the installed distribution's file list: the same numbers without the seconds
that importing scikit-learn takes. Inputs are one feature per step,
``(pixel/16 - 0.5)/0.5`` in [-1, 1]. With ``permute=True`` the 64 steps are reordered by one
fixed random permutation drawn from ``permutation_seed`` (the permuted-MNIST idea at small
scale): the permutation stays the same whatever ``seed`` is, so runs with different seeds face
the same task.

The examples are shuffled with ``seed`` and split ``val_size`` / ``test_size`` / the rest;
``max_train`` keeps only a random subset of the training examples (smoke runs).
"""

from __future__ import annotations

import dataclasses
from importlib import metadata
from pathlib import Path

import numpy as np

from . import _util
from ._base import TaskInfo
from ._registry import TaskSpec

NUM_EXAMPLES = 1797
DATA_FILE = "sklearn/datasets/data/digits.csv.gz"


@dataclasses.dataclass(frozen=True)
class DigitsConfig:
    """Options of sequential digits.

    Attributes:
        seed: shuffles the examples before splitting.
        val_size, test_size: examples in the validation and test splits.
        max_train: keep at most this many training examples (None: all the rest).
        permute: reorder the pixels by a fixed random permutation.
        permutation_seed: seed of that permutation (independent of ``seed``).
    """

    seed: int = 0
    val_size: int = 270
    test_size: int = 270
    max_train: int | None = None
    permute: bool = False
    permutation_seed: int = 0

    def __post_init__(self):
        _util.integer("digits.seed", self.seed, low=0)
        _util.integer("digits.val_size", self.val_size, low=1)
        _util.integer("digits.test_size", self.test_size, low=1)
        _util.optional_integer("digits.max_train", self.max_train)
        _util.boolean("digits.permute", self.permute)
        _util.integer("digits.permutation_seed", self.permutation_seed, low=0)
        if self.val_size + self.test_size >= NUM_EXAMPLES:
            raise ValueError(
                f"digits: val_size + test_size = {self.val_size + self.test_size} leaves no "
                f"training example of the {NUM_EXAMPLES}; make them smaller."
            )


def permutation(permutation_seed: int) -> np.ndarray:
    """The fixed pixel order used with ``permute=True``."""
    return _util.rng(permutation_seed, "permutation").permutation(64)


def read_digits() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's digits: pixels ``(1797, 64)`` in 0..16 and labels ``(1797,)``."""
    path = Path(str(metadata.distribution("scikit-learn").locate_file(DATA_FILE)))
    table = np.loadtxt(_util.require_file(path, "scikit-learn's digits"), delimiter=",")
    if table.shape != (NUM_EXAMPLES, 65):
        raise ValueError(f"{path}: expected {NUM_EXAMPLES} rows of 64 pixels and a label.")
    return table[:, :64], table[:, 64].astype(np.int32)


def make(cfg: DigitsConfig) -> dict[str, np.ndarray]:
    data, labels = read_digits()
    pixels = (data / 16.0 - 0.5) / 0.5
    if cfg.permute:
        pixels = pixels[:, permutation(cfg.permutation_seed)]
    order = _util.rng(cfg.seed, "holdout").permutation(len(labels))
    test = order[: cfg.test_size]
    val = order[cfg.test_size : cfg.test_size + cfg.val_size]
    train = order[cfg.test_size + cfg.val_size :]
    train = train[_util.subsample(len(train), cfg.max_train, cfg.seed, "train")]
    arrays: dict[str, np.ndarray] = {}
    for split, idx in (("train", train), ("val", val), ("test", test)):
        arrays[f"{split}/inputs"] = pixels[idx, :, None].astype(np.float32)
        arrays[f"{split}/labels"] = labels[idx]
        arrays[f"{split}/lengths"] = np.full(len(idx), 64, dtype=np.int32)
    return arrays


def info(cfg: DigitsConfig, arrays=None) -> TaskInfo:
    return TaskInfo(
        name="digits",
        description=DESCRIPTION,
        seq_len=64,
        variable_length=False,
        input_kind="real",
        input_dim=1,
        num_classes=10,
    )


def _label(options) -> str:
    # scikit-learn's copy of the UCI "Optical Recognition of Handwritten Digits" test set, read
    # pixel by pixel: the sequential-MNIST idea on 8x8 digits, permuted as in psMNIST.
    return "Permuted digits" if options.get("permute") else "Sequential digits"


DESCRIPTION = (
    "Sequential digits: scikit-learn's 8x8 handwritten digits pixel by pixel (length 64, "
    "optionally permuted); 10 classes."
)

TASKS = {
    "digits": TaskSpec(
        name="digits",
        description=DESCRIPTION,
        label=_label,
        config_cls=DigitsConfig,
        make=make,
        info=info,
        presets={
            "smoke": dict(max_train=256),
            "cpu": dict(),
            "gpu": dict(),
        },
    )
}
