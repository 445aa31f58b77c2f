"""What the plan needs of a task: whether it reads a release from disk, its options with the
example counts capped, its info and its splits' sizes, and the tasks a preset's grids use."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from .. import studies as _studies

def is_loader(task: str) -> bool:
    """Whether a task reads a release from disk (its registration fingerprints files)."""
    from linrnn_bench import tasks

    return tasks.spec(task).fingerprint is not None


_COUNT_FIELDS = ("num_train", "num_val", "num_test")


def reduced_options(task: str, options: Mapping[str, Any], examples: int | None
                    ) -> dict[str, Any]:
    """``options`` with every split's example count capped at ``examples`` (None: as given);
    a task without such counts is unchanged."""
    from linrnn_bench import tasks

    fields = {f.name: f.default for f in dataclasses.fields(tasks.config_class(task))}
    out = dict(options)
    if examples is None:
        return out
    for name in _COUNT_FIELDS:
        if name in fields:
            out[name] = min(int(out.get(name, fields[name])), examples)
    return out


@dataclasses.dataclass
class TaskFacts:
    """What the plan needs of a task: its info and its splits' sizes."""

    info: Any
    sizes: dict[str, int]


_FACTS: dict[tuple, TaskFacts] = {}


def task_facts(task: str, options: tuple) -> TaskFacts:
    """The task's `TaskInfo` (from a copy of it with a few examples per split, unless it has
    no example counts, when it is built whole) and its splits' sizes."""
    from linrnn_bench import tasks

    key = (task, tuple(options))
    if key in _FACTS:
        return _FACTS[key]
    given = dict(options)
    small = reduced_options(task, given, 64)
    built = tasks.build(task, use_cache=small == given, **small)
    sizes = {}
    for split, field in zip(tasks.SPLITS, _COUNT_FIELDS):
        if field in small:
            default = {f.name: f.default for f in dataclasses.fields(tasks.config_class(task))}
            sizes[split] = int(given.get(field, default[field]))
        else:
            sizes[split] = len(built.split(split))
    _FACTS[key] = TaskFacts(built.info, sizes)
    return _FACTS[key]


def preset_tasks(preset: str, configs: Mapping[str, Any] | None = None,
                 names: Sequence[str] | None = None) -> list[tuple[str, tuple]]:
    """The distinct (task, options) the studies' grids at ``preset`` train or probe on."""
    out: dict[tuple, None] = {}
    for name in names or _studies.names():
        study = _studies.get(name)
        try:
            config = (configs or {}).get(name) or study.config(preset)
            specs = study.grid(config)
        except Exception:  # noqa: BLE001 - the programs' rehearsal reports the grid's error
            continue
        for spec in specs:
            task = getattr(spec, "task", None)
            if isinstance(task, str):
                out[(task, tuple(getattr(spec, "task_options", ())))] = None
    return list(out)
