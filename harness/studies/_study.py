"""What a study is: a config, its presets, a grid of independent runs, and one run's rows."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

from .. import config as _config
from ..errors import Diverged as Diverged  # re-exported: its old import place

PRESET_NAMES: tuple[str, ...] = ("smoke", "cpu", "gpu")

C = TypeVar("C")  # the study's config dataclass
S = TypeVar("S")  # the study's run spec dataclass


@dataclasses.dataclass(frozen=True)
class Study(Generic[C, S]):
    """One study.

    Attributes:
        name: registry key (``accuracy``, ``stability``, ...).
        description: one line for ``python -m harness list``.
        presets: ``{"smoke": config, "cpu": config, "gpu": config}``.
        grid: config -> the independent runs, each a frozen dataclass spec (JSON-able fields,
            including its seed if it has one). The spec is the run's identity.
        run: spec -> metric rows (flat dicts of scalars). Raise `Diverged` for a diverged run;
            any other exception records the run as failed and the grid goes on.
        version: bump when what a run measures changes, so old rows are not reused.
        exclusive: its runs time the machine: they run one at a time, never
            beside another run, whatever the executor offers (`harness.executors`).
    """

    name: str
    description: str
    presets: Mapping[str, C]
    grid: Callable[[C], list[S]]
    run: Callable[[S], list[dict[str, Any]]]
    version: int = 1
    exclusive: bool = False

    def __post_init__(self):
        missing = [p for p in PRESET_NAMES if p not in self.presets]
        if missing:
            raise ValueError(f"Study {self.name!r} lacks presets {missing}.")

    def config(self, preset: str, overrides: Mapping[str, Any] | None = None) -> C:
        """The preset's config with ``key=value`` overrides applied and validated."""
        if preset not in self.presets:
            raise _config.ConfigError(
                f"Unknown preset {preset!r} for study {self.name!r}; accepted: "
                f"{', '.join(self.presets)}."
            )
        return _config.replace(self.presets[preset], overrides or {}, what=f"{self.name} config")

    def run_id(self, spec: S) -> str:
        return _config.config_hash(spec, self.name, self.version)
