"""Loader: LRA Pathfinder (32x32) and Path-X (128x128) from the release's image folders.

``path`` is the release's ``pathfinder32`` (or ``pathfinder128`` for Path-X) directory. Inside,
each difficulty folder (``curv_baseline``, ``curv_contour_length_9``,
``curv_contour_length_14``; LRA uses the hardest, 14) holds ``imgs/<batch>/sample_<i>.png``
and ``metadata/<batch>.npy``. Despite the suffix, a metadata file is text: one line per image,
space-separated, field 0 the image folder relative to the difficulty folder (``imgs/0``),
field 1 the file name, field 3 the label (1: connected); this is how LRA's
``data/pathfinder.py`` and S4's ``PathFinderDataset`` read it. Images are 8-bit grey PNGs.

Splits: the examples (metadata files in numeric order, lines in order) are split at random
80/10/10 with ``seed``, as S4 does (LRA splits 80/10/10 in TFDS order). Empty image files
(the release has at least one; LRA filters them, S4 lists it) are left out and counted in the
log; any other unreadable image is an error naming it.

Inputs as `tasks.pathfinder`: ``encoding="real"`` gives ``(pixel/255 - 0.5)/0.5``, one feature
per step (S4/S5); ``"tokens"`` gives ``pixel + 1`` (LRA's integer pixels; 0 is padding here).
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Literal

import numpy as np
from PIL import Image, UnidentifiedImageError

from . import _loader, _util
from ._base import SPLITS
from .pathfinder import ENCODINGS, Encoding, pixel_spec

logger = logging.getLogger("linrnn_bench.tasks.lra_pathfinder")

DIFFICULTIES: tuple[str, ...] = ("curv_baseline", "curv_contour_length_9", "curv_contour_length_14")
Difficulty = Literal["curv_baseline", "curv_contour_length_9", "curv_contour_length_14"]


@dataclasses.dataclass(frozen=True)
class LRAPathfinderConfig(_loader.LoaderConfig):
    """Options of the LRA Pathfinder loader (`tasks._loader.LoaderConfig` plus these).

    Attributes:
        difficulty: which difficulty folder (LRA: ``curv_contour_length_14``).
        val_fraction, test_fraction: shares of the examples in the val and test splits.
        encoding: ``"real"`` (normalised pixels, one feature) or ``"tokens"`` (pixel + 1).
    """

    difficulty: Difficulty = "curv_contour_length_14"
    val_fraction: float = 0.1
    test_fraction: float = 0.1
    encoding: Encoding = "real"

    resolution = 32
    expected = "pathfinder32/<difficulty>/metadata/*.npy and imgs/ (LRA release)"

    def __post_init__(self):
        super().__post_init__()
        _util.choice("lra_pathfinder.difficulty", self.difficulty, DIFFICULTIES)
        _util.number("lra_pathfinder.val_fraction", self.val_fraction, low=0.0, high=0.5,
                     closed=False)
        _util.number("lra_pathfinder.test_fraction", self.test_fraction, low=0.0, high=0.5,
                     closed=False)
        _util.choice("lra_pathfinder.encoding", self.encoding, ENCODINGS)


@dataclasses.dataclass(frozen=True)
class LRAPathXConfig(LRAPathfinderConfig):
    """Options of the LRA Path-X loader: `LRAPathfinderConfig` on ``pathfinder128``."""

    resolution = 128
    expected = "pathfinder128/<difficulty>/metadata/*.npy and imgs/ (LRA release)"


def metadata_files(cfg: LRAPathfinderConfig) -> list[Path]:
    root = _util.require_dir(Path(cfg.path), f"the Pathfinder release ({cfg.expected})")
    folder = _util.require_dir(root / cfg.difficulty / "metadata", "the metadata folder")
    found = [p for p in folder.glob("*.npy") if p.stem.isdigit()]
    if not found:
        raise FileNotFoundError(f"Expected metadata files <n>.npy in {folder}; found none.")
    return sorted(found, key=lambda p: int(p.stem))


def read_metadata(cfg: LRAPathfinderConfig) -> tuple[list[Path], np.ndarray]:
    """Image paths and labels of every example listed in the metadata files, in order."""
    base = Path(cfg.path) / cfg.difficulty
    images, labels = [], []
    for meta in metadata_files(cfg):
        for number, line in enumerate(meta.read_text().splitlines(), start=1):
            fields = line.split()
            if not fields:
                continue
            if len(fields) < 4 or fields[3] not in ("0", "1"):
                raise ValueError(
                    f"{meta}:{number}: expected '<folder> <file> <n> <label 0/1> ...', got "
                    f"{line[:80]!r}."
                )
            images.append(base / fields[0] / fields[1])
            labels.append(int(fields[3]))
    return images, np.asarray(labels, dtype=np.int32)


def read_image(path: Path, resolution: int) -> np.ndarray | None:
    """The image's grey pixels ``(resolution**2,) uint8``; None for an empty file."""
    if not path.is_file():
        raise FileNotFoundError(f"Expected the image {path} listed in the metadata.")
    if path.stat().st_size == 0:
        return None
    try:
        with Image.open(path) as im:
            pixels = np.asarray(im.convert("L"), dtype=np.uint8)
    except (UnidentifiedImageError, OSError) as e:
        raise ValueError(f"{path}: not a readable image ({e}).") from None
    if pixels.shape != (resolution, resolution):
        raise ValueError(f"{path}: expected {resolution}x{resolution} pixels, got {pixels.shape}.")
    return pixels.reshape(-1)


def make(cfg: LRAPathfinderConfig) -> dict[str, np.ndarray]:
    images, labels = read_metadata(cfg)
    n = len(images)
    n_test, n_val = int(cfg.test_fraction * n), int(cfg.val_fraction * n)
    if n - n_test - n_val < 1 or n_val < 1 or n_test < 1:
        raise ValueError(f"{cfg.path}: {n} examples are too few for a train/val/test split.")
    order = _util.rng(cfg.seed, "holdout").permutation(n)
    parts = {
        "test": np.sort(order[:n_test]),
        "val": np.sort(order[n_test : n_test + n_val]),
        "train": np.sort(order[n_test + n_val :]),
    }
    arrays: dict[str, np.ndarray] = {}
    L = cfg.resolution**2
    for split in SPLITS:
        idx = parts[split][_loader.cap(cfg, split, len(parts[split]))]
        pixels, kept, empty = [], [], 0
        for i in idx:
            p = read_image(images[i], cfg.resolution)
            if p is None:
                empty += 1
                continue
            pixels.append(p)
            kept.append(i)
        if empty:
            logger.info("%s: left out %d empty image file(s) in the %s split.", cfg.path, empty,
                        split)
        arrays[f"{split}/inputs"] = np.stack(pixels) if pixels else np.zeros((0, L), np.uint8)
        arrays[f"{split}/labels"] = labels[np.asarray(kept, dtype=np.int64)]
        arrays[f"{split}/lengths"] = np.full(len(kept), L, dtype=np.int32)
    return arrays


DESCRIPTIONS = {
    "lra_pathfinder": "LRA Pathfinder 32x32 from the release (path=pathfinder32/): are the "
    "markers connected? 2 classes.",
    "lra_pathx": "LRA Path-X 128x128 from the release (path=pathfinder128/): are the markers "
    "connected? 2 classes.",
}

LABELS = {"lra_pathfinder": "LRA Pathfinder", "lra_pathx": "LRA Path-X"}

TASKS = {
    name: pixel_spec(
        name,
        DESCRIPTIONS[name],
        lambda cfg: cfg.resolution,
        config_cls=config_cls,
        label=LABELS[name],
        make=make,
        fingerprint=lambda cfg: _util.fingerprint(metadata_files(cfg)),
        presets=_loader.PRESETS,
    )
    for name, config_cls in (("lra_pathfinder", LRAPathfinderConfig),
                             ("lra_pathx", LRAPathXConfig))
}
