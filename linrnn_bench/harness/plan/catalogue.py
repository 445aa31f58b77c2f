"""`catalogue`: every study's runs at a preset and the programs they call (each study's
planner, `Study.planner`), and what the store already holds of them."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from .. import studies as _studies
from .builders import Program, RunPlan, one_line
from .targets import accelerator_path


@dataclasses.dataclass
class StudyPlan:
    """A study's runs at a preset, or why it could not be planned."""

    name: str
    runs: list[RunPlan]
    recorded: dict[str, str]
    error: str | None = None

    def programs(self) -> list[Program]:
        """The distinct programs of the runs, in first-use order."""
        seen: dict[tuple, Program] = {}
        for run in self.runs:
            for program, _ in run.uses:
                seen.setdefault(program.key, program)
        return list(seen.values())


def catalogue(preset: str, *, configs: Mapping[str, Any] | None = None,
              names: Sequence[str] | None = None, store: Any = None,
              backend: str | None = "gpu") -> list[StudyPlan]:
    """Every study's runs and programs at ``preset`` (``configs[name]`` replaces a study's
    preset config; ``names`` selects studies). A study whose grid or planner fails is listed
    with its error, and the others go on."""
    out = []
    with accelerator_path(backend):
        for name in names or _studies.names():
            study = _studies.get(name)
            recorded = store.recorded(name) if store is not None else {}
            try:
                config = (configs or {}).get(name) or study.config(preset)
                out.append(StudyPlan(name, study.plan(config), recorded))
            except Exception as e:  # noqa: BLE001 - listed, and the other studies go on
                out.append(StudyPlan(name, [], recorded, error=one_line(e)))
    return out
