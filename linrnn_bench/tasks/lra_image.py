"""Loader: LRA Image, CIFAR-10 in grey, pixel by pixel (length 1024), from the python batches.

``path`` is the ``cifar-10-batches-py`` directory of ``cifar-10-python.tar.gz`` (Krizhevsky
2009): ``data_batch_1`` ... ``data_batch_5`` and ``test_batch``, each a pickled dict with
``b"data"`` (10000 x 3072 uint8: the red plane, then green, then blue, each 32x32 row by row)
and ``b"labels"``. The files are Python pickles: read only a release you trust.

Grey as LRA computes it (``tf.image.rgb_to_grayscale`` on uint8): ``g = 0.2989 r + 0.5870 g +
0.1140 b`` on values scaled to [0, 1], back to uint8 by ``floor(255.5 g)``. Inputs: with
``encoding="real"`` one feature per step, normalised with S4's grey CIFAR statistics
(``(g/255 - 122.6/255) / (61.0/255)``); with ``encoding="tokens"`` LRA's integer pixels, shifted
by one because 0 is padding here (vocabulary 257).

Splits: the test batch is ``test``; ``val`` is a random ``val_size`` of the 50000 training
images (S4 holds out a random 10%; LRA the last 10% in TFDS order).
"""

from __future__ import annotations

import dataclasses
import pickle
from pathlib import Path

import numpy as np

from . import _loader, _util
from .pathfinder import ENCODINGS, Encoding, pixel_spec

TRAIN_FILES = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST_FILE = "test_batch"
GREY_WEIGHTS = np.array([0.2989, 0.5870, 0.1140])
MEAN, STD = 122.6 / 255.0, 61.0 / 255.0  # S4's grey CIFAR normalisation


@dataclasses.dataclass(frozen=True)
class LRAImageConfig(_loader.LoaderConfig):
    """Options of the LRA Image loader (`tasks._loader.LoaderConfig` plus these).

    Attributes:
        val_size: training images held out as the validation split.
        encoding: ``"real"`` (normalised grey, one feature) or ``"tokens"`` (pixel + 1).
    """

    val_size: int = 5000
    encoding: Encoding = "real"

    expected = "CIFAR-10's python batches data_batch_1..5 and test_batch"

    def __post_init__(self):
        super().__post_init__()
        _util.integer("lra_image.val_size", self.val_size, low=1)
        _util.choice("lra_image.encoding", self.encoding, ENCODINGS)


def files(cfg: LRAImageConfig) -> dict[str, list[Path]]:
    root = _util.require_dir(Path(cfg.path), f"cifar-10-batches-py ({cfg.expected})")
    train = [_util.require_file(root / f, "a CIFAR-10 training batch") for f in TRAIN_FILES]
    return {"train": train, "test": [_util.require_file(root / TEST_FILE, "CIFAR-10's test batch")]}


def read_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """One CIFAR-10 python batch: pixels ``(n, 3072) uint8`` and labels ``(n,) int32``."""
    try:
        with open(path, "rb") as f:
            batch = pickle.load(f, encoding="bytes")
        data = np.asarray(batch[b"data"], dtype=np.uint8)
        labels = np.asarray(batch[b"labels"], dtype=np.int32)
    except (pickle.UnpicklingError, EOFError, KeyError, TypeError, ValueError) as e:
        raise ValueError(
            f"{path}: not a CIFAR-10 python batch (a pickled dict with b'data' n x 3072 uint8 and "
            f"b'labels'): {type(e).__name__}: {e}"
        ) from None
    if data.ndim != 2 or data.shape[1] != 3072 or labels.shape != (data.shape[0],):
        raise ValueError(f"{path}: expected b'data' of shape (n, 3072) and n labels.")
    if labels.size and (labels.min() < 0 or labels.max() > 9):
        raise ValueError(f"{path}: labels must lie in 0..9.")
    return data, labels


def grey(data: np.ndarray) -> np.ndarray:
    """``(n, 3072)`` RGB planes -> ``(n, 1024)`` uint8 grey, as ``tf.image.rgb_to_grayscale``."""
    rgb = data.reshape(-1, 3, 1024).astype(np.float64) / 255.0
    g = np.einsum("c,ncl->nl", GREY_WEIGHTS, rgb)
    return np.clip(np.floor(g * 255.5), 0, 255).astype(np.uint8)


def make(cfg: LRAImageConfig) -> dict[str, np.ndarray]:
    paths = files(cfg)
    train = [read_batch(p) for p in paths["train"]]
    train_x = grey(np.concatenate([d for d, _ in train]))
    train_y = np.concatenate([y for _, y in train])
    test_x, test_y = read_batch(paths["test"][0])
    keep, held = _util.holdout(len(train_y), cfg.val_size, cfg.seed)
    parts = {
        "train": (train_x[keep], train_y[keep]),
        "val": (train_x[held], train_y[held]),
        "test": (grey(test_x), test_y),
    }
    arrays: dict[str, np.ndarray] = {}
    for split, (x, y) in parts.items():
        idx = _loader.cap(cfg, split, len(y))
        arrays[f"{split}/inputs"] = x[idx]  # uint8; `decode_pixels` normalises
        arrays[f"{split}/labels"] = y[idx]
        arrays[f"{split}/lengths"] = np.full(len(idx), 1024, dtype=np.int32)
    return arrays


DESCRIPTION = "LRA Image: grey CIFAR-10 pixel by pixel (path=cifar-10-batches-py/); 10 classes."

TASKS = {
    "lra_image": pixel_spec(
        "lra_image",
        DESCRIPTION,
        lambda cfg: 32,
        classes=10,
        normalise=(MEAN, STD),
        label="LRA Image",
        config_cls=LRAImageConfig,
        make=make,
        fingerprint=lambda cfg: _util.fingerprint([p for ps in files(cfg).values() for p in ps]),
        presets=_loader.PRESETS,
    )
}
