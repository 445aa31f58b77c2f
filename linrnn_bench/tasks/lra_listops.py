"""Loader: LRA ListOps from the release's TSV files (``listops-1000/`` in ``lra_release``).

``path`` holds ``basic_train.tsv``, ``basic_val.tsv`` and ``basic_test.tsv``: tab-separated,
a ``Source``/``Target`` header, then one tree per line with LRA's parentheses, e.g.
``( ( ( [MAX 2 ) 9 ) ] )`` with target ``9``. Tokenised as the S4 loaders do (see
`tasks.listops`): parentheses dropped, ``]`` kept, an end-of-sequence token appended, sequences
cut to ``max_length`` tokens (S4: 2048). The vocabulary is `tasks.listops.VOCAB`, the same as
the generated task's, so models trained on one read the other.
"""

from __future__ import annotations

import csv
import dataclasses
from pathlib import Path

import numpy as np

from . import _loader, _util
from ._base import SPLITS, TaskInfo
from ._registry import TaskSpec
from .listops import EOS, VOCAB, VOCAB_SIZE

FILES = {"train": "basic_train.tsv", "val": "basic_val.tsv", "test": "basic_test.tsv"}
_DROP = {ord("("): None, ord(")"): None}


@dataclasses.dataclass(frozen=True)
class LRAListOpsConfig(_loader.LoaderConfig):
    """Options of the LRA ListOps loader (`tasks._loader.LoaderConfig` plus these).

    Attributes:
        max_length: tokens kept per sequence, end-of-sequence token included (S4: 2048).
        append_eos: append the end-of-sequence token (S4: yes).
    """

    max_length: int = 2048
    append_eos: bool = True

    expected = "basic_train.tsv, basic_val.tsv and basic_test.tsv (LRA's listops-1000)"

    def __post_init__(self):
        super().__post_init__()
        _util.integer("lra_listops.max_length", self.max_length, low=2)
        _util.boolean("lra_listops.append_eos", self.append_eos)


def files(cfg: LRAListOpsConfig) -> dict[str, Path]:
    root = _util.require_dir(Path(cfg.path), f"LRA ListOps ({cfg.expected})")
    return {s: _util.require_file(root / f, f"the ListOps {s} split") for s, f in FILES.items()}


def read_tsv(path: Path) -> tuple[list[str], list[int]]:
    """Sources and targets of one LRA ListOps TSV file."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f, delimiter="\t"))
    if not rows or [c.strip() for c in rows[0]] != ["Source", "Target"]:
        raise ValueError(f"{path}: expected a 'Source<TAB>Target' header line (LRA ListOps TSV).")
    sources, targets = [], []
    for number, row in enumerate(rows[1:], start=2):
        if not row:
            continue
        if len(row) != 2 or not row[1].strip().isdigit() or not 0 <= int(row[1]) <= 9:
            raise ValueError(f"{path}:{number}: expected '<tree><TAB><digit 0-9>', got {row!r}.")
        sources.append(row[0])
        targets.append(int(row[1]))
    return sources, targets


def tokenise(source: str, *, where: str) -> list[int]:
    """Token ids of one LRA source string (parentheses dropped, as S4's ``listops_tokenizer``)."""
    try:
        return [VOCAB[symbol] for symbol in source.translate(_DROP).split()]
    except KeyError as e:
        accepted = [s for s in VOCAB if s != EOS]
        raise ValueError(f"{where}: unknown symbol {e.args[0]!r}; accepted: {accepted}.") from None


def make(cfg: LRAListOpsConfig) -> dict[str, np.ndarray]:
    paths = files(cfg)
    eos = [VOCAB[EOS]] if cfg.append_eos else []
    keep = cfg.max_length - len(eos)
    read = {}
    for split in SPLITS:
        sources, targets = read_tsv(paths[split])
        idx = _loader.cap(cfg, split, len(sources))
        seqs = [
            np.asarray(tokenise(sources[i], where=f"{paths[split]} row {i + 2}")[:keep] + eos,
                       dtype=np.int32)
            for i in idx
        ]
        read[split] = (seqs, np.asarray(targets, dtype=np.int32)[idx])
    L = max(s.shape[0] for seqs, _ in read.values() for s in seqs)
    arrays: dict[str, np.ndarray] = {}
    for split, (seqs, targets) in read.items():
        arrays[f"{split}/inputs"], arrays[f"{split}/lengths"] = _util.pad(seqs, L, np.int32)
        arrays[f"{split}/labels"] = targets
    return arrays


def info(cfg: LRAListOpsConfig, arrays) -> TaskInfo:
    return TaskInfo(
        name="lra_listops",
        description=DESCRIPTION,
        seq_len=int(arrays["train/inputs"].shape[1]),
        variable_length=True,
        input_kind="tokens",
        vocab_size=VOCAB_SIZE,
        num_classes=10,
    )


DESCRIPTION = "LRA ListOps from the release TSVs (path=listops-1000/): 10 classes, tokens."

TASKS = {
    "lra_listops": TaskSpec(
        name="lra_listops",
        description=DESCRIPTION,
        label="LRA ListOps",
        config_cls=LRAListOpsConfig,
        make=make,
        info=info,
        fingerprint=lambda cfg: _util.fingerprint(list(files(cfg).values())),
        presets=_loader.PRESETS,
    )
}
