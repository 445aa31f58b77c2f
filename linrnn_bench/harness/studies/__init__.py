"""The study registry: each study is a module exposing ``STUDY`` (a `Study`)."""

from __future__ import annotations

import importlib

from ._study import PRESET_NAMES as PRESET_NAMES
from ._study import Diverged as Diverged
from ._study import Group as Group
from ._study import lead as lead
from ._study import Study as Study

# name -> module; a study is one module and one line here. Order is the report's order.
_REGISTRY: dict[str, str] = {
    "accuracy": "linrnn_bench.harness.studies.accuracy",
    "stability": "linrnn_bench.harness.studies.stability",
    "theory": "linrnn_bench.harness.studies.theory",
    "throughput": "linrnn_bench.harness.studies.throughput",
    "memory": "linrnn_bench.harness.studies.memory",
}


def names() -> list[str]:
    """Registered study names, in report order."""
    return list(_REGISTRY)


def get(name: str) -> Study:
    """The study registered as ``name``; an unknown name is an error listing the accepted ones."""
    if name not in _REGISTRY:
        raise KeyError(f"Unknown study {name!r}; accepted: {', '.join(_REGISTRY)}.")
    return importlib.import_module(_REGISTRY[name]).STUDY


def training() -> Study:
    """The study whose one run ``linrnn-bench train`` makes: the first registered study with a
    `Study.one_run` (the accuracy study's training run)."""
    for name in _REGISTRY:
        study = get(name)
        if study.one_run is not None:
            return study
    raise LookupError(f"No registered study makes one training run (Study.one_run); "
                      f"registered: {', '.join(_REGISTRY)}.")
