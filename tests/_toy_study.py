"""A toy sixth study, registered by `tests/test_study_registry.py` alone: one registration
(presets, grid, run, planner, report section) that the runner, ``plan``, the report and the
command line must find through the study registry, with no other module edited.

Kept apart from the test module so that the lazy ``module:name`` strings of its registration
name a module importable without pytest."""

from __future__ import annotations

import dataclasses
from typing import Any

import pandas as pd

from linrnn_bench.harness.plan import RunPlan
from linrnn_bench.harness.report import Missing, Section, Table
from linrnn_bench.harness.report.artifacts import no_runs
from linrnn_bench.harness.studies import PRESET_NAMES, Study

NAME = "toy"


@dataclasses.dataclass(frozen=True)
class ToyConfig:
    """How many runs the grid makes, and the command line's ``layer.<option>`` values."""

    runs: int = 2
    layer_options: tuple[tuple[str, str], ...] = ()


@dataclasses.dataclass(frozen=True)
class ToySpec:
    seed: int
    layer_options: tuple[tuple[str, str], ...] = ()


def grid(config: ToyConfig) -> list[ToySpec]:
    return [ToySpec(seed, config.layer_options) for seed in range(config.runs)]


def run(spec: ToySpec) -> list[dict[str, Any]]:
    return [{"square": float(spec.seed**2), "options": repr(spec.layer_options)}]


def take_layer_options(config: ToyConfig, options: dict[str, str]) -> ToyConfig:
    return dataclasses.replace(config, layer_options=tuple(options.items()))


def plan(study: Study, config: ToyConfig) -> list[RunPlan]:
    """Each run of the grid, calling no compiled program."""
    return [RunPlan(study.run_id(spec), f"toy seed {spec.seed}", []) for spec in study.grid(config)]


def build(store: Any) -> list[Table | Missing]:
    rows = store.read(NAME)
    if rows.empty:
        return [Missing("toy_squares", "Toy squares", no_runs(NAME))]
    frame = pd.DataFrame({"square": rows["square"].to_numpy()},
                         index=pd.Index(rows["seed"].to_numpy(), name="seed"))
    return [Table("toy_squares", "Toy squares", "Each run's square of its seed.", frame)]


SECTION = Section(NAME, "Toy study", "A toy study registered by a test.", build,
                  followed_by_published=True)

STUDY = Study(NAME, "a toy sixth study registered by a test",
              dict.fromkeys(PRESET_NAMES, ToyConfig()), grid, run,
              planner=f"{__name__}:plan", section=f"{__name__}:SECTION",
              take_layer_options=take_layer_options)
