"""Loader: LRA Retrieval, pairs of AAN papers at the byte level (a pair task).

``path`` is the release's ``tsv_data`` directory holding ``new_aan_pairs.train.tsv``,
``new_aan_pairs.eval.tsv`` (the validation split) and ``new_aan_pairs.test.tsv``. Each line has
five tab-separated fields and no header, as LRA's ``matching/input_pipeline.py`` reads them:
``label`` (``0``/``1``, possibly written ``0.0``/``1.0``), ``id1``, ``id2``, ``text1``,
``text2``; no quoting. The label says whether the first paper cites the second (Radev et al.
2013, the ACL Anthology Network).

Each text becomes LRA's byte ids (``byte + 1``, vocabulary 257, 0 padding; TFDS
``ByteTextEncoder``) cut to ``max_length`` bytes (LRA/S4: 4000). Inputs are ``(n, 2, L)``: the
pair axis after the example axis; ``lengths`` ``(n, 2)``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from . import _loader, _util
from ._base import SPLITS, Split, TaskInfo
from ._registry import TaskSpec
from .lra_text import byte_info, encode_bytes

FILES = {
    "train": "new_aan_pairs.train.tsv",
    "val": "new_aan_pairs.eval.tsv",
    "test": "new_aan_pairs.test.tsv",
}


@dataclasses.dataclass(frozen=True)
class LRARetrievalConfig(_loader.LoaderConfig):
    """Options of the LRA Retrieval loader (`tasks._loader.LoaderConfig` plus these).

    Attributes:
        max_length: bytes kept per document (LRA/S4: 4000).
    """

    max_length: int = 4000

    expected = "new_aan_pairs.train.tsv, new_aan_pairs.eval.tsv and new_aan_pairs.test.tsv"

    def __post_init__(self):
        super().__post_init__()
        _util.integer("lra_retrieval.max_length", self.max_length, low=1)


def files(cfg: LRARetrievalConfig) -> dict[str, Path]:
    root = _util.require_dir(Path(cfg.path), f"LRA's tsv_data ({cfg.expected})")
    return {s: _util.require_file(root / f, f"the AAN {s} pairs") for s, f in FILES.items()}


def read_tsv(path: Path, max_length: int | None = None) -> list[tuple[int, bytes, bytes]]:
    """``(label, text1, text2)`` of every line of one AAN pairs file, texts as bytes (cut to
    ``max_length`` bytes if given, so that a large file is not held whole in memory)."""
    out = []
    with open(path, "rb") as f:
        for number, line in enumerate(f, start=1):
            line = line.rstrip(b"\r\n")
            if not line:
                continue
            fields = line.split(b"\t")
            if len(fields) != 5:
                raise ValueError(
                    f"{path}:{number}: expected 5 tab-separated fields (label, id1, id2, text1, "
                    f"text2), got {len(fields)}."
                )
            try:
                label = float(fields[0])
            except ValueError:
                label = -1.0
            if label not in (0.0, 1.0):
                raise ValueError(f"{path}:{number}: label must be 0 or 1, got {fields[0]!r}.")
            out.append((int(label), fields[3][:max_length], fields[4][:max_length]))
    if not out:
        raise ValueError(f"{path}: no pairs found.")
    return out


def make(cfg: LRARetrievalConfig) -> dict[str, np.ndarray]:
    paths = files(cfg)
    L = cfg.max_length
    arrays: dict[str, np.ndarray] = {}
    for split in SPLITS:
        rows = read_tsv(paths[split], L)
        rows = [rows[i] for i in _loader.cap(cfg, split, len(rows))]
        # Ids 1..256 need 16 bits; stored as uint16 (half of int32), widened by `decode`.
        inputs = np.zeros((len(rows), 2, L), dtype=np.uint16)
        lengths = np.zeros((len(rows), 2), dtype=np.int32)
        for i, (_, a, b) in enumerate(rows):
            for j, text in enumerate((a, b)):
                ids = encode_bytes(text, L)
                inputs[i, j, : ids.size] = ids
                lengths[i, j] = ids.size
        if np.any(lengths == 0):
            raise ValueError(f"{paths[split]}: a pair has an empty document.")
        arrays[f"{split}/inputs"] = inputs
        arrays[f"{split}/labels"] = np.array([r[0] for r in rows], dtype=np.int32)
        arrays[f"{split}/lengths"] = lengths
    return arrays


def decode(cfg: LRARetrievalConfig, arrays, split: str) -> Split:
    return Split(
        inputs=arrays[f"{split}/inputs"].astype(np.int32),
        labels=arrays[f"{split}/labels"],
        lengths=arrays[f"{split}/lengths"],
    )


def info(cfg: LRARetrievalConfig, arrays=None) -> TaskInfo:
    return byte_info("lra_retrieval", DESCRIPTION, cfg.max_length, pair=True)


DESCRIPTION = (
    "LRA Retrieval: does one AAN paper cite the other? Byte-level document pairs "
    "(path=tsv_data/); pair task."
)

TASKS = {
    "lra_retrieval": TaskSpec(
        name="lra_retrieval",
        description=DESCRIPTION,
        label="LRA Retrieval",
        config_cls=LRARetrievalConfig,
        make=make,
        info=info,
        decode=decode,
        fingerprint=lambda cfg: _util.fingerprint(list(files(cfg).values())),
        presets=_loader.PRESETS,
    )
}
