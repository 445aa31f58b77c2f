"""What a study is: a config, its presets, a grid of independent runs, and one run's rows."""

from __future__ import annotations

import dataclasses
import importlib
import importlib.resources
import tomllib
from collections.abc import Callable, Hashable, Mapping
from typing import Any, Generic, TypeVar

from .. import config as _config
from ..errors import Diverged as Diverged  # re-exported: its old import place

# Presets from the smallest scale to the largest (the report shows the largest in the store).
PRESET_NAMES: tuple[str, ...] = ("smoke", "cpu", "cpu-full", "gpu")
# A study with no preset of its own under a key here runs the preset it names: ``cpu-full``
# adds seeds, steps, tasks and tuning to the accuracy and stability studies; the machine
# studies (theory, throughput, memory) are already complete at ``cpu``.
PRESET_FALLBACK: dict[str, str] = {"cpu-full": "cpu"}

C = TypeVar("C")  # the study's config dataclass
S = TypeVar("S")  # the study's run spec dataclass
# `Study.one_run`: (config, model, task, seeds, the command line's key=value pairs) -> config.
OneRun = Callable[[Any, str, str, tuple[int, ...], tuple[tuple[str, str], ...]], Any]


def resolve(reference: str) -> Any:
    """The object a ``"module:name"`` reference names, its module imported now: a study names
    its planner and report section this way, so that registering (and running) it imports
    neither the planning nor the drawing code."""
    module, _, name = reference.partition(":")
    if not module or not name:
        raise ValueError(f"{reference!r} is not a reference of the form 'module:name'.")
    return getattr(importlib.import_module(module), name)


def read_presets(package: str, cls: type[C]) -> dict[str, C]:
    """The presets in the ``presets.toml`` beside ``package``'s ``__init__.py``: each table
    one preset (named as in `PRESET_NAMES`), built by `config.from_table`. A bad name, key or
    value is a `ConfigError` naming the file, the preset and what is accepted."""
    where = f"{package.replace('.', '/')}/presets.toml"
    try:
        tables = tomllib.loads(importlib.resources.files(package).joinpath("presets.toml")
                               .read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise _config.ConfigError(f"{where}: {e}") from None
    unknown = [name for name in tables if name not in PRESET_NAMES]
    if unknown:
        raise _config.ConfigError(f"{where}: unknown preset(s) {', '.join(unknown)}; accepted: "
                                  f"{', '.join(PRESET_NAMES)}.")
    return {name: _config.from_table(cls, table, what=f"{where} [{name}]")
            for name, table in tables.items()}


def enters_all(model: Any) -> str | None:
    """The default `Study.skip_reason`: every model can enter."""
    return None


@dataclasses.dataclass(frozen=True)
class _Requires:
    """A `Study.skip_reason` naming the capabilities a model's registration lacks (a plain
    object rather than a closure, so that a study pickles to the worker processes)."""

    capabilities: tuple[str, ...]

    def __call__(self, model: Any) -> str | None:
        lacking = [c for c in self.capabilities if not model.has(c)]
        if not lacking:
            return None
        return f"{model.label} declares no {', '.join(lacking)}, which this study reads"


def requires(*capabilities: str) -> Callable[[Any], str | None]:
    """A `Study.skip_reason` for a study that reads these capabilities of a layer
    (`models.CAPABILITIES`): the reason names the ones a model's registration lacks."""
    return _Requires(tuple(capabilities))


@dataclasses.dataclass(frozen=True)
class Group:
    """Runs of a study trained together as one program (a seed group, `Study.group`): one unit
    of work for an executor, recorded as one run per spec."""

    specs: tuple[Any, ...]

    @property
    def lead(self) -> Any:
        """The first run: what an executor orders the group by."""
        return self.specs[0]


def lead(unit: Any) -> Any:
    """The spec an executor orders a unit of work by: a `Group`'s first run, or the spec."""
    return unit.lead if isinstance(unit, Group) else unit


@dataclasses.dataclass(frozen=True)
class Study(Generic[C, S]):
    """One study.

    Attributes:
        name: registry key (``accuracy``, ``stability``, ...).
        description: one line for ``linrnn-bench list``.
        presets: ``{"smoke": config, "cpu": config, "gpu": config}``.
        grid: config -> the independent runs, each a frozen dataclass spec (JSON-able fields,
            including its seed if it has one). The spec is the run's identity.
        run: spec -> metric rows (flat dicts of scalars). Raise `Diverged` for a diverged run;
            any other exception records the run as failed and the grid goes on.
        version: bump when what a run measures changes, so old rows are not reused.
        exclusive: its runs time the machine: they run one at a time, never
            beside another run, whatever the executor offers (`harness.executors`).
        skip_reason: `models.ModelInfo` -> why the model cannot enter this study (a capability
            its registration lacks), or ``None``; `requires` builds one. ``check-layer`` and
            the study's default model selection read it.
        programs: spec -> a hashable key, equal for runs that compile the same programs (they
            differ only in data such as the seed or the learning rates), or ``None``: runs
            differing only in their seed. Worker processes use it to compile each program once
            (`harness.executors.schedule`); it never changes what a run computes.
        group: ``(config, spec) ->`` a hashable key, equal for runs that may train together
            as one seed group (they differ only in their seed), or ``None`` for a run trained
            alone; ``None`` (the field) for a study without groups. The study's config decides
            (e.g. ``group_seeds=false`` turns grouping off). Grouping never changes a run's
            identity nor, beyond float round-off, its rows.
        run_group: specs of one group -> one entry per spec, in order: its rows, or the
            exception that run would raise (`Diverged` for a diverged seed). Raising fails
            every run of the group.
        from_store: ``(config, store) ->`` the config with what its grid reads from the
            results store filled in (another study's results: the stability study trains at
            the learning rates the accuracy study selected); None for a grid that depends on
            its config alone. `bind` applies it; the runner binds before building the grid,
            and the report binds with the store it renders, so both see the same runs.
        planner: ``"module:function"``, the function ``(study, config) -> list[RunPlan]``
            giving each run of the grid and the programs it calls (`harness.plan`), or None
            for a study ``plan`` lists as not priced. Imported only when a plan is made.
        section: ``"module:NAME"``, its report `Section` (`harness.report`), or None for a
            study the report states has no section. Imported only when the report is drawn.
        take_layer_options: ``(config, {option: value}) -> config`` with the command line's
            ``layer.<option>`` values applied, or None for a study that refuses them (its
            layers' settings are its own config keys).
        one_run: ``(config, model, task, seeds, overrides) -> config`` narrowed to one model
            on one task with ``seeds`` (trained as one group) and the command line's
            ``key=value`` pairs as its last settings: the run ``linrnn-bench train`` makes;
            None for a study ``train`` cannot make a run of. A bad value is a `ValueError`.
        resolve_run: ``(config, model, task) ->`` the settings of that run and where each came
            from (`harness.settings.Resolved`), which ``linrnn-bench train --explain`` prints;
            given with ``one_run``.
    """

    name: str
    description: str
    presets: Mapping[str, C]
    grid: Callable[[C], list[S]]
    run: Callable[[S], list[dict[str, Any]]]
    version: int = 1
    exclusive: bool = False
    skip_reason: Callable[[Any], str | None] = enters_all
    programs: Callable[[S], Hashable] | None = None
    group: Callable[[C, S], Hashable | None] | None = None
    run_group: Callable[[list[S]], list[list[dict[str, Any]] | Exception]] | None = None
    from_store: Callable[[C, Any], C] | None = None
    planner: str | None = None
    section: str | None = None
    take_layer_options: Callable[[C, Mapping[str, str]], C] | None = None
    one_run: OneRun | None = None
    resolve_run: Callable[[C, str, str], Any] | None = None

    def __post_init__(self):
        if (self.group is None) != (self.run_group is None):
            raise ValueError(f"Study {self.name!r}: group and run_group go together.")
        if (self.one_run is None) != (self.resolve_run is None):
            raise ValueError(f"Study {self.name!r}: one_run and resolve_run go together.")
        missing = [p for p in PRESET_NAMES if p not in self.presets and p not in PRESET_FALLBACK]
        if missing:
            raise ValueError(f"Study {self.name!r} lacks presets {missing}.")
        for field, reference in (("planner", self.planner), ("section", self.section)):
            if reference is not None and not all(reference.partition(":")[::2]):
                raise ValueError(f"Study {self.name!r}: {field}={reference!r} is not a "
                                 "reference of the form 'module:name'.")

    def config(self, preset: str, overrides: Mapping[str, Any] | None = None) -> C:
        """The preset's config with ``key=value`` overrides applied and validated."""
        if preset not in self.presets and PRESET_FALLBACK.get(preset) in self.presets:
            preset = PRESET_FALLBACK[preset]
        if preset not in self.presets:
            raise _config.ConfigError(
                f"Unknown preset {preset!r} for study {self.name!r}; accepted: "
                f"{', '.join(self.presets)}."
            )
        return _config.replace(self.presets[preset], overrides or {}, what=f"{self.name} config")

    def bind(self, config: C, store: Any | None) -> C:
        """``config`` with what its grid reads from ``store`` (`from_store`); ``config`` as it
        is for a study whose grid reads no store, or without a store."""
        if self.from_store is None or store is None:
            return config
        return self.from_store(config, store)

    def plan(self, config: C) -> list[Any]:
        """Each run of ``config``'s grid and the programs it calls (`planner`)."""
        if self.planner is None:
            raise NotImplementedError(f"study {self.name!r} declares no planner")
        return resolve(self.planner)(self, config)

    def report_section(self) -> Any | None:
        """Its report `Section` (`section`), imported now; None where it declares none."""
        return None if self.section is None else resolve(self.section)

    def units(self, config: C, specs: list[S]) -> list[Any]:
        """``specs`` as units of work, in the grid's order: a `Group` for the runs of one
        group key (each group where its first run stood), a spec for a run trained alone. A
        group of one run is a plain spec."""
        if self.group is None:
            return list(specs)
        keys = [self.group(config, spec) for spec in specs]
        members: dict[Hashable, list[S]] = {}
        for key, spec in zip(keys, specs):
            if key is not None:
                members.setdefault(key, []).append(spec)
        units: list[Any] = []
        for key, spec in zip(keys, specs):
            if key is None or len(members[key]) == 1:
                units.append(spec)
            elif members[key][0] is spec:
                units.append(Group(tuple(members[key])))
        return units

    def run_id(self, spec: S) -> str:
        return _config.config_hash(spec, self.name, self.version)
