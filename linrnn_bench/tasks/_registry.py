"""The task registry: one line per task, a `TaskSpec` in the task's own file, and `build`.

A task file defines a frozen config dataclass (with ``seed`` and its size options), a pure
``make(config) -> arrays`` that draws everything from local generators made from the seed, its
`TaskInfo`, and its ``smoke``/``cpu``/``gpu`` preset options; it exposes them as
``TASKS = {name: TaskSpec(...)}``. Building looks the arrays up in the cache (see `tasks._cache`)
and calls ``make`` only on a miss.
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from . import _cache
from ._base import SPLITS, Split, TaskInfo

logger = logging.getLogger("linrnn_bench.tasks")

PRESETS: tuple[str, ...] = ("smoke", "cpu", "gpu")

# name -> module defining it (in its ``TASKS`` dict). Adding a task: one file, one line here.
_REGISTRY: dict[str, str] = {
    # generated
    "listops": "linrnn_bench.tasks.listops",
    "pathfinder": "linrnn_bench.tasks.pathfinder",
    "pathx": "linrnn_bench.tasks.pathfinder",
    "mqar": "linrnn_bench.tasks.mqar",
    "selective_copy": "linrnn_bench.tasks.selective_copy",
    "adding": "linrnn_bench.tasks.adding",
    # real data shipped in packages
    "digits": "linrnn_bench.tasks.digits",
    "ucr": "linrnn_bench.tasks.ucr",
    # loaders for real releases on disk (path=...)
    "lra_listops": "linrnn_bench.tasks.lra_listops",
    "lra_text": "linrnn_bench.tasks.lra_text",
    "lra_retrieval": "linrnn_bench.tasks.lra_retrieval",
    "lra_image": "linrnn_bench.tasks.lra_image",
    "lra_pathfinder": "linrnn_bench.tasks.lra_pathfinder",
    "lra_pathx": "linrnn_bench.tasks.lra_pathfinder",
    "speech_commands": "linrnn_bench.tasks.speech_commands",
    "speech_commands_8khz": "linrnn_bench.tasks.speech_commands",
}

Arrays = Mapping[str, np.ndarray]


def _default_decode(config: Any, arrays: Arrays, split: str) -> Split:
    return Split(
        inputs=arrays[f"{split}/inputs"],
        labels=arrays[f"{split}/labels"],
        lengths=arrays[f"{split}/lengths"],
    )


@dataclasses.dataclass(frozen=True)
class TaskSpec:
    """Everything the registry knows about one task.

    Attributes:
        name: registry key.
        description: one line for ``linrnn-bench list``.
        config_cls: the frozen config dataclass; its ``__post_init__`` validates every value.
        make: config -> arrays ``{"train/inputs": ..., "train/labels": ..., ...}`` (plus any
            extra arrays ``decode`` needs); pure and deterministic in the config.
        info: (config, arrays) -> `TaskInfo` (loaders read sizes off the data).
        presets: ``{"smoke": options, "cpu": options, "gpu": options}``.
        decode: (config, arrays, split) -> `Split`; turns a compact stored form (uint8 pixels,
            int16 audio) into the contract's arrays. Default: the stored arrays as they are.
        fingerprint: config -> JSON-able identity of the files a loader reads (in the cache key).
        version: bump when ``make`` changes what it returns, so old cache files are not reused.
        label: the task's name as papers write it ("ListOps"), for figures and tables; or a
            function of the task's options (a mapping, possibly partial) returning it, for a
            task whose name depends on them (``ucr``: the data set). Empty: derived from
            ``name`` (`default_label`).
        lengthen: ``(options, length, count) -> options`` that make the generator draw at
            least ``count`` validation sequences of at least ``length`` steps by the task's own
            rules (the stability study's stationary probe, which must be long against the
            layers' memory); None when the task's sequences cannot be made longer.
    """

    name: str
    description: str
    config_cls: type
    make: Callable[[Any], Arrays]
    info: Callable[[Any, Arrays], TaskInfo]
    presets: Mapping[str, Mapping[str, Any]]
    decode: Callable[[Any, Arrays, str], Split] = _default_decode
    fingerprint: Callable[[Any], Any] | None = None
    version: int = 1
    label: str | Callable[[Mapping[str, Any]], str] = ""
    lengthen: Callable[[Mapping[str, Any], int, int], dict[str, Any]] | None = None

    def __post_init__(self):
        if not (callable(self.label) or (isinstance(self.label, str) and "\n" not in self.label)):
            raise ValueError(
                f"Task {self.name!r}: label must be one line of text or a function of the "
                f"task's options returning one, got {self.label!r}."
            )
        missing = [p for p in PRESETS if p not in self.presets]
        if missing:
            raise ValueError(f"Task {self.name!r} lacks presets {missing}.")
        if "\n" in self.description:
            raise ValueError(f"Task {self.name!r}: the description must be one line.")
        accepted = {f.name for f in dataclasses.fields(self.config_cls)}
        for preset, options in self.presets.items():
            unknown = sorted(set(options) - accepted)
            if unknown:
                raise ValueError(f"Task {self.name!r} preset {preset!r} sets unknown {unknown}.")


class BuiltTask:
    """A built task: ``info``, ``config`` and ``split(name)`` (see `tasks._base.Task`).

    Attributes:
        cache_path: the cache file holding the arrays (None when built without the cache).
        cache_hit: whether the arrays came from the cache rather than from ``make``.
    """

    def __init__(
        self,
        spec: TaskSpec,
        config: Any,
        arrays: Arrays,
        *,
        cache_path: Path | None,
        cache_hit: bool,
    ):
        self.spec = spec
        self.config = config
        self.info: TaskInfo = spec.info(config, arrays)
        self.cache_path = cache_path
        self.cache_hit = cache_hit
        self._arrays = arrays
        self._splits: dict[str, Split] = {}

    def split(self, name: str) -> Split:
        """The split ``name`` (one of ``"train"``, ``"val"``, ``"test"``), checked against the
        array conventions of `tasks._base` the first time it is asked for."""
        if name not in SPLITS:
            raise ValueError(f"Unknown split {name!r}; accepted splits: {', '.join(SPLITS)}.")
        if name not in self._splits:
            split = self.spec.decode(self.config, self._arrays, name)
            check_split(self.info, split, where=f"{self.info.name}/{name}")
            self._splits[name] = split
        return self._splits[name]

    def __repr__(self) -> str:
        sizes = "/".join(str(int(self._arrays[f"{s}/labels"].shape[0])) for s in SPLITS)
        return f"BuiltTask({self.info.name!r}, L={self.info.seq_len}, n={sizes})"


# -------------------------------------------------------------------------------------------
# Lookups


def names() -> list[str]:
    """Registered task names, in registry order."""
    return list(_REGISTRY)


def spec(name: str) -> TaskSpec:
    if name not in _REGISTRY:
        raise ValueError(f"Unknown task {name!r}; accepted tasks: {', '.join(_REGISTRY)}.")
    return importlib.import_module(_REGISTRY[name]).TASKS[name]


def default_label(name: str) -> str:
    """A task key written as words, for a task whose registration names no label:
    underscores as spaces, the first letter a capital (``"selective_copy"`` -> "Selective
    copy"; ``"my_task"`` -> "My task")."""
    words = str(name).replace("_", " ").strip()
    return words[:1].upper() + words[1:] if words else str(name)


def label(name: str, options: Mapping[str, Any] | None = None) -> str:
    """Task ``name`` as papers write it ("ListOps", "JapaneseVowels"), for figures and tables.

    ``options`` are the task's options a run used (any subset; e.g. ``{"dataset":
    "JapaneseVowels"}``), for a task whose name depends on them. A name the registry does not
    know (a task from elsewhere, an old store's) gets `default_label`, never an error: a report
    labels whatever its store holds.
    """
    if name not in _REGISTRY:
        return default_label(name)
    given = spec(name).label
    text = given(dict(options or {})) if callable(given) else given
    return text or default_label(name)


def config_class(name: str) -> type:
    """The frozen config dataclass of task ``name``."""
    return spec(name).config_cls


def describe(name: str) -> str:
    """One line describing task ``name``."""
    return spec(name).description


def preset_options(name: str, preset: str) -> dict[str, Any]:
    """The options task ``name`` uses at ``preset`` (``smoke``, ``cpu`` or ``gpu``)."""
    s = spec(name)
    if preset not in s.presets:
        raise ValueError(
            f"Unknown preset {preset!r} for task {name!r}; accepted presets: {', '.join(PRESETS)}."
        )
    return dict(s.presets[preset])


def lengthened(name: str, options: Mapping[str, Any], length: int,
               count: int) -> dict[str, Any] | None:
    """Options of task ``name`` whose validation split holds at least ``count`` sequences of at
    least ``length`` steps, drawn by the task's own rules from ``options``; None when the task
    cannot make longer sequences (its `TaskSpec` declares no ``lengthen``)."""
    s = spec(name)
    if s.lengthen is None:
        return None
    return s.lengthen(dict(options), length, count)


def make_config(name: str, **options: Any) -> Any:
    """The validated config of task ``name``; unknown or missing options are errors."""
    cls = config_class(name)
    fields = dataclasses.fields(cls)
    accepted = [f.name for f in fields]
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise ValueError(
            f"Unknown option(s) {unknown} for task {name!r}; accepted options: "
            f"{', '.join(accepted)}."
        )
    required = [
        f.name
        for f in fields
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    missing = [r for r in required if r not in options]
    if missing:
        raise ValueError(
            f"Task {name!r} needs option(s) {missing} (no default); e.g. "
            f"tasks.build({name!r}, {missing[0]}=...). {describe(name)}"
        )
    return cls(**options)


# -------------------------------------------------------------------------------------------
# Building


def build(
    name: str,
    *,
    cache_dir: str | os.PathLike | None = None,
    use_cache: bool = True,
    **options: Any,
) -> BuiltTask:
    """Build task ``name`` with ``options`` (validated), from the cache when it holds them.

    ``cache_dir`` (not part of the cache key) overrides the cache location; ``use_cache=False``
    generates without reading or writing the cache.
    """
    return from_config(name, make_config(name, **options), cache_dir=cache_dir, use_cache=use_cache)


def from_config(
    name: str,
    config: Any,
    *,
    cache_dir: str | os.PathLike | None = None,
    use_cache: bool = True,
) -> BuiltTask:
    """Build task ``name`` from an already validated config object."""
    s = spec(name)
    if not isinstance(config, s.config_cls):
        raise TypeError(
            f"Task {name!r} needs a {s.config_cls.__name__}, got {type(config).__name__}."
        )
    if not use_cache:
        return BuiltTask(s, config, dict(s.make(config)), cache_path=None, cache_hit=False)
    extra = s.fingerprint(config) if s.fingerprint is not None else None
    cache_key = _cache.key(name, s.version, config, extra)
    path = _cache.path_for(_cache.resolve_dir(cache_dir), name, cache_key)
    if path.exists():
        try:
            arrays = _cache.load(path, cache_key=cache_key)
        except _cache.CacheCorrupt as e:
            logger.warning("Cache file %s is corrupt (%s); regenerating it.", path, e)
        else:
            logger.info("Task %s: cache hit %s", name, path)
            return BuiltTask(s, config, arrays, cache_path=path, cache_hit=True)
    arrays = dict(s.make(config))
    _cache.save(path, arrays, cache_key=cache_key, task=name)
    logger.info("Task %s: generated and cached in %s", name, path)
    return BuiltTask(s, config, arrays, cache_path=path, cache_hit=False)


# -------------------------------------------------------------------------------------------
# The array conventions of tasks._base, checked


class ContractError(RuntimeError):
    """A task produced arrays that break the conventions of `tasks._base` (a bug in the task)."""


def check_split(info: TaskInfo, split: Split, *, where: str) -> None:
    """Raise `ContractError` unless ``split`` follows the conventions for ``info``."""
    n = split.labels.shape[0]
    lead = (n, 2) if info.pair else (n,)
    L = info.seq_len
    if info.input_kind == "tokens":
        want_shape, want_dtype = (*lead, L), np.int32
    else:
        want_shape, want_dtype = (*lead, L, info.input_dim), np.float32
    _expect(where, "inputs", split.inputs, want_shape, want_dtype)
    _expect(where, "lengths", split.lengths, lead, np.int32)
    if info.target == "class":
        _expect(where, "labels", split.labels, (n,), np.int32)
        bad = (split.labels < 0) | (split.labels >= info.num_classes)
    elif info.target == "per_step":
        _expect(where, "labels", split.labels, (n, L), np.int32)
        bad = (split.labels < -1) | (split.labels >= info.num_classes)
    elif info.target == "regression":
        _expect(where, "labels", split.labels, (n,), np.float32)
        bad = ~np.isfinite(split.labels)
    else:
        raise ContractError(f"{where}: unknown target {info.target!r}.")
    if np.any(bad):
        raise ContractError(f"{where}: labels outside the accepted range for {info.target!r}.")
    if n and (split.lengths.min() < 1 or split.lengths.max() > L):
        raise ContractError(f"{where}: lengths outside [1, {L}].")
    if not info.variable_length and n and np.any(split.lengths != L):
        raise ContractError(f"{where}: lengths vary although info.variable_length is False.")
    if info.input_kind == "tokens" and n:
        if split.inputs.min() < 0 or split.inputs.max() >= info.vocab_size:
            raise ContractError(f"{where}: token ids outside [0, {info.vocab_size}).")
    elif n and not np.all(np.isfinite(split.inputs)):
        raise ContractError(f"{where}: non-finite input features.")


def _expect(where: str, field: str, array: np.ndarray, shape: tuple, dtype: Any) -> None:
    if not isinstance(array, np.ndarray) or array.shape != shape or array.dtype != dtype:
        got = (getattr(array, "shape", None), getattr(array, "dtype", None))
        raise ContractError(f"{where}: {field} should be {shape} {np.dtype(dtype)}, got {got}.")
