"""Loader: LRA Text, IMDb reviews at the byte level, from the ``aclImdb`` release.

``path`` is the ``aclImdb`` directory of ``aclImdb_v1.tar.gz`` (Maas et al. 2011): it holds
``train/pos``, ``train/neg``, ``test/pos`` and ``test/neg``, one review per ``.txt`` file
(25000 per split). LRA reads the same reviews through TFDS ``imdb_reviews``; the label is 1 for
a positive review, 0 for a negative one.

Byte level with LRA's vocabulary (TFDS ``ByteTextEncoder``): each UTF-8 byte ``b`` becomes the
id ``b + 1`` (0 is padding; vocabulary 257), and a review is cut to ``max_length`` bytes
(the LRA paper: 4K; S4/S5: 4096). Files are read in sorted name order, negatives first.

Validation: IMDb has none. LRA and S4 use the test set as the validation set (``val_split =
"test"``), which selects on test; the default here holds out a random ``val_size`` of the
training reviews instead (``val_split="holdout"``), so model selection never sees the test set.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Literal

import numpy as np

from . import _loader, _util
from ._base import TaskInfo
from ._registry import TaskSpec

ValSplit = Literal["holdout", "test"]


@dataclasses.dataclass(frozen=True)
class LRATextConfig(_loader.LoaderConfig):
    """Options of the LRA Text loader (`tasks._loader.LoaderConfig` plus these).

    Attributes:
        max_length: bytes kept per review (S4/S5: 4096).
        val_split: ``"holdout"`` (``val_size`` training reviews) or ``"test"`` (LRA's practice).
        val_size: reviews held out of the training split when ``val_split="holdout"``.
    """

    max_length: int = 4096
    val_split: ValSplit = "holdout"
    val_size: int = 2500

    expected = "aclImdb's train/pos, train/neg, test/pos and test/neg folders of .txt reviews"

    def __post_init__(self):
        super().__post_init__()
        _util.integer("lra_text.max_length", self.max_length, low=1)
        _util.choice("lra_text.val_split", self.val_split, ["holdout", "test"])
        _util.integer("lra_text.val_size", self.val_size, low=1)


def review_files(cfg: LRATextConfig) -> dict[str, list[tuple[Path, int]]]:
    """``{"train": [(file, label), ...], "test": [...]}`` in sorted order, negatives first."""
    root = _util.require_dir(Path(cfg.path), f"the aclImdb directory ({cfg.expected})")
    out: dict[str, list[tuple[Path, int]]] = {}
    for split in ("train", "test"):
        items = []
        for label, polarity in ((0, "neg"), (1, "pos")):
            folder = _util.require_dir(root / split / polarity, f"the {split} {polarity} reviews")
            found = sorted(folder.glob("*.txt"))
            if not found:
                raise FileNotFoundError(f"Expected review .txt files in {folder}; found none.")
            items += [(p, label) for p in found]
        out[split] = items
    return out


def encode_bytes(data: bytes, max_length: int) -> np.ndarray:
    """LRA's byte encoding: ids ``byte + 1`` (TFDS ``ByteTextEncoder``), cut to ``max_length``."""
    return np.frombuffer(data[:max_length], dtype=np.uint8).astype(np.int32) + 1


def make(cfg: LRATextConfig) -> dict[str, np.ndarray]:
    found = review_files(cfg)
    train, test = found["train"], found["test"]
    if cfg.val_split == "holdout":
        keep, held = _util.holdout(len(train), cfg.val_size, cfg.seed)
        parts = {"train": [train[i] for i in keep], "val": [train[i] for i in held], "test": test}
    else:
        parts = {"train": train, "val": test, "test": test}
    arrays: dict[str, np.ndarray] = {}
    for split, items in parts.items():
        items = [items[i] for i in _loader.cap(cfg, split, len(items))]
        seqs = [encode_bytes(p.read_bytes(), cfg.max_length) for p, _ in items]
        arrays[f"{split}/inputs"], arrays[f"{split}/lengths"] = _util.pad(
            seqs, cfg.max_length, np.int32
        )
        arrays[f"{split}/labels"] = np.array([label for _, label in items], dtype=np.int32)
    return arrays


def fingerprint(cfg: LRATextConfig) -> list:
    # Listing 50000 files costs little next to reading them; their count and the folder times
    # stand for the data.
    found = review_files(cfg)
    folders = sorted({p.parent for items in found.values() for p, _ in items})
    return [len(found["train"]), len(found["test"]), _util.fingerprint(folders)]


def byte_info(name: str, description: str, max_length: int, pair: bool = False) -> TaskInfo:
    """The `TaskInfo` of an LRA byte-level task (here and in `tasks.lra_retrieval`): token ids
    ``byte + 1`` (vocabulary 257), up to ``max_length`` per text, two classes."""
    return TaskInfo(
        name=name,
        description=description,
        seq_len=max_length,
        variable_length=True,
        input_kind="tokens",
        vocab_size=257,
        num_classes=2,
        pair=pair,
    )


def info(cfg: LRATextConfig, arrays=None) -> TaskInfo:
    return byte_info("lra_text", DESCRIPTION, cfg.max_length)


DESCRIPTION = "LRA Text: IMDb reviews as bytes (path=aclImdb/), positive or negative; tokens."

TASKS = {
    "lra_text": TaskSpec(
        name="lra_text",
        description=DESCRIPTION,
        label="LRA Text",
        config_cls=LRATextConfig,
        make=make,
        info=info,
        fingerprint=fingerprint,
        presets=_loader.PRESETS,
    )
}
