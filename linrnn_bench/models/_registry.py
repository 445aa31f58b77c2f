"""The model registry: a model's whole identity card, and ``models.build(name, ...)``.

Each layer file registers itself once, with its frozen config class and everything the harness
needs to know about it (label, paper size, per-task options, ablations, capabilities):

    @register("lru", LRUConfig, label="LRU", paper_size=PaperSize(...), ...)
    class LRU(AbstractRecurrentLayer): ...   # constructed as LRU(config, *, key=key)

A config class is a frozen dataclass whose first fields are ``d_model`` and ``d_state`` and whose
``__post_init__`` validates every value (see `models._validate`). The studies, the report and the
benchmarks read a model only through its `ModelInfo` (``models.info(name)``); none of them
names a model.

An outside layer joins through the same door: its module calls `register` on its layer class
(or on a factory ``(config, *, key) -> layer``), and the harness reaches it by import path,
``model=package.module:Layer`` (`resolve`), or by name once an installed package declares it in
the ``linrnn_bench.models`` entry-point group. It need not be built on our engine: it declares
the capabilities it has, and a study that needs one it lacks leaves it out, saying why.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import importlib
import inspect
import logging
import re
import sys
from collections.abc import Callable, Mapping, Set
from typing import Any

# --------------------------------------------------------------------------------------------
# Capabilities: what a layer offers beyond ``(L, H) -> (L, H)``.

# ``layer.discrete_system()`` returns its time-invariant `DiscreteSystem` (the theory checks, the
# roofline's counts, the benchmarks' in-run reference and the stability study's eigenvalue
# moduli read it).
DISCRETE_SYSTEM = "discrete_system"
# ``layer.hidden_states(u)`` returns the states ``(L, P)`` whose norm is the paper's state norm
# (the stability and theory studies read it).
HIDDEN_STATES = "hidden_states"
# ``layer.recurrent_mask()`` marks the recurrent parameter group that training gives its own
# learning rate and no weight decay.
RECURRENT_MASK = "recurrent_mask"
# ``layer.rescaled(factor)`` multiplies its timescales (Speech Commands' zero-shot test).
RESCALE = "rescale"
# `ModelInfo.equivalence` maps the layer onto another registered model, exactly.
EQUIVALENCE = "equivalence"

CAPABILITIES: tuple[str, ...] = (
    DISCRETE_SYSTEM, HIDDEN_STATES, RECURRENT_MASK, RESCALE, EQUIVALENCE
)
# What every layer built on `AbstractRecurrentLayer` has.
ENGINE_CAPABILITIES: frozenset[str] = frozenset({DISCRETE_SYSTEM, HIDDEN_STATES, RECURRENT_MASK})

BUILTIN = "builtin"
# The layers of this package, in the order every table and legend lists them (and the order of
# their colours in the report): importing a module runs its `register` line.
_BUILTIN_MODULES: tuple[str, ...] = ("rotrnn", "lru", "s4d", "s5")
ENTRY_POINT_GROUP = "linrnn_bench.models"

Options = tuple[tuple[str, Any], ...]


def _options(where: str, options: Any) -> Options:
    """``options`` as sorted ``(name, value)`` pairs; a mapping is accepted too."""
    if isinstance(options, Mapping):
        options = tuple(options.items())
    if not isinstance(options, tuple) or not all(
        isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], str) for p in options
    ):
        raise TypeError(f"{where} must be (name, value) pairs, got {options!r}.")
    return tuple(options)


def _text(where: str, value: Any, *, empty: bool = False) -> None:
    if not isinstance(value, str) or (not empty and not value):
        raise TypeError(f"{where} must be a {'' if empty else 'non-empty '}string, got {value!r}.")


@dataclasses.dataclass(frozen=True)
class PaperSize:
    """The layer's size in one published configuration, with where it comes from.

    Attributes:
        d_model: H, the width.
        d_state: the state size in the layer's own convention (as `build` takes it).
        options: further layer options of that configuration, as ``(name, value)`` pairs.
        source: the paper, table or code the numbers come from.
    """

    d_model: int
    d_state: int
    options: Options = ()
    source: str = ""

    def __post_init__(self):
        object.__setattr__(self, "options", _options("PaperSize.options", self.options))
        _text("PaperSize.source", self.source)


@dataclasses.dataclass(frozen=True)
class TaskOptions:
    """Layer options a model's paper prescribes for a task and preset (``"*"``: any).

    ``options`` are the layer config's fields, and ``d_state`` (the state size the network
    gives this layer). `task_options` merges every entry that applies, in order, later entries
    winning.
    """

    task: str = "*"
    preset: str = "*"
    options: Options = ()
    source: str = ""

    def __post_init__(self):
        _text("TaskOptions.task", self.task)
        _text("TaskOptions.preset", self.preset)
        object.__setattr__(self, "options", _options("TaskOptions.options", self.options))
        _text("TaskOptions.source", self.source)

    def applies(self, task: str, preset: str) -> bool:
        return self.task in ("*", task) and self.preset in ("*", preset)


@dataclasses.dataclass(frozen=True)
class Ablation:
    """A variant of the model that switches one mechanism off or changes its initialisation.

    Attributes:
        key: the variant's name, ``"<model>-<what>"`` (e.g. ``"lru-no-gamma"``).
        options: the layer options that make it.
        label: how tables and legends name it.
        note: what it switches, for captions.
    """

    key: str
    options: Options
    label: str
    note: str

    def __post_init__(self):
        _text("Ablation.key", self.key)
        object.__setattr__(self, "options", _options("Ablation.options", self.options))
        _text("Ablation.label", self.label)
        _text("Ablation.note", self.note, empty=True)


@dataclasses.dataclass(frozen=True)
class PublishedTime:
    """Median times of a model's public reference implementation at one sequence length."""

    seq_len: int
    forward_ms: float
    forward_backward_ms: float


@dataclasses.dataclass(frozen=True)
class BenchmarkInfo:
    """How the layer benchmarks (benchmarks/) measure this model.

    Attributes:
        d_state: the benchmark's state size (the layer's own convention).
        structure: how the in-run reference computes it, as the public code does: ``"scan"``
            (an associative scan over all states) or ``"convolution"`` (a kernel and an FFT).
        note: the state size in words.
        published: times of the public implementation, measured on the project's machine.
        published_source: where and how those times were measured.
    """

    d_state: int
    structure: str
    note: str
    published: tuple[PublishedTime, ...] = ()
    published_source: str = ""

    def __post_init__(self):
        if self.structure not in ("scan", "convolution"):
            raise ValueError(
                f"BenchmarkInfo.structure={self.structure!r}; accepted: 'scan', 'convolution'."
            )

    def published_ms(self, seq_len: int) -> tuple[float, float] | None:
        """``(forward, forward+backward)`` ms of the public code at ``seq_len``, if measured."""
        for p in self.published:
            if p.seq_len == seq_len:
                return p.forward_ms, p.forward_backward_ms
        return None


@dataclasses.dataclass(frozen=True)
class Equivalence:
    """An exact map of this model onto another registered model.

    Attributes:
        target: the other model's registry name.
        mapping: import path ``module:function`` of ``layer -> equivalent layer``.
        source: the claim and where it is made.
    """

    target: str
    mapping: str
    source: str

    def function(self) -> Callable[[Any], Any]:
        module, _, attr = self.mapping.partition(":")
        return getattr(importlib.import_module(module), attr)


@dataclasses.dataclass(frozen=True)
class ModelInfo:
    """Everything the harness knows about a model; see `register` for the fields."""

    name: str
    label: str
    config_cls: type
    layer_cls: Callable[..., Any]
    note: str = ""
    paper_size: PaperSize | None = None
    task_options: tuple[TaskOptions, ...] = ()
    ablations: tuple[Ablation, ...] = ()
    width_options: Callable[[int, int], dict[str, Any]] | None = None
    benchmark: BenchmarkInfo | None = None
    capabilities: frozenset[str] = ENGINE_CAPABILITIES
    equivalence: Equivalence | None = None
    origin: str = BUILTIN
    source_sha256: str | None = None

    def has(self, capability: str) -> bool:
        if capability not in CAPABILITIES:
            raise ValueError(f"Unknown capability {capability!r}; accepted: {list(CAPABILITIES)}.")
        return capability in self.capabilities

    def option_names(self) -> tuple[str, ...]:
        """The config's fields: the options `build` accepts (``d_model``, ``d_state`` first)."""
        return tuple(f.name for f in dataclasses.fields(self.config_cls))


_REGISTRY: dict[str, ModelInfo] = {}
# Import paths already resolved: path -> registry name.
_PATHS: dict[str, str] = {}


def register(
    name: str,
    config_cls: type,
    *,
    label: str | None = None,
    note: str = "",
    paper_size: PaperSize | None = None,
    task_options: tuple[TaskOptions, ...] = (),
    ablations: tuple[Ablation, ...] = (),
    width_options: Callable[[int, int], dict[str, Any]] | None = None,
    benchmark: BenchmarkInfo | None = None,
    capabilities: Set[str] = ENGINE_CAPABILITIES,
    equivalence: Equivalence | None = None,
    replace: bool = False,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register a layer class (or factory) called as ``layer_cls(config, *, key=key)``.

    The class or factory must give an `equinox.Module` mapping ``(L, H) -> (L, H)``; an outside
    one is checked once per config when first built (`from_config`).

    Arguments:
        name: the registry key (lower case, no ``:``), e.g. ``"lru"``.
        config_cls: the frozen config dataclass; its first fields are ``d_model`` and
            ``d_state``, and its ``__post_init__`` validates.
        label: the name as papers write it (default ``name``).
        note: what the registered defaults are, for captions (e.g. "paper initialisation").
        paper_size: the layer's size in one published configuration (throughput, memory).
        task_options: options the paper prescribes per task and preset (`task_options`).
        ablations: variants the stability and theory studies compare with the model.
        width_options: ``(d_model, d_state) -> options`` that the harness passes unless set
            explicitly (e.g. a head count that keeps the paper's head size).
        benchmark: the layer benchmarks' shape and the public code's times.
        capabilities: what the layer offers (`CAPABILITIES`); an outside layer not built on
            `AbstractRecurrentLayer` declares its own.
        equivalence: an exact map onto another registered model (needs `EQUIVALENCE`).
        replace: replace a registration already under ``name`` (e.g. a notebook cell run
            again). Without it, a second registration of ``name`` is an error, except the very
            same registration again (the same object and arguments), which changes nothing.
    """
    if not isinstance(replace, bool):
        raise TypeError(f"Model {name!r}: replace must be True or False, got {replace!r}.")
    if not isinstance(name, str) or not name or ":" in name or name != name.strip():
        raise ValueError(f"A model name is a non-empty string without ':', got {name!r}.")
    if not (dataclasses.is_dataclass(config_cls) and isinstance(config_cls, type)):
        raise TypeError(f"Model {name!r}: config_cls must be a dataclass, got {config_cls!r}.")
    fields = [f.name for f in dataclasses.fields(config_cls)]
    if fields[:2] != ["d_model", "d_state"]:
        raise TypeError(
            f"Model {name!r}: {config_cls.__name__}'s first fields must be d_model and d_state, "
            f"got {fields[:2]}."
        )
    capabilities = frozenset(capabilities)
    unknown = sorted(capabilities - set(CAPABILITIES))
    if unknown:
        raise ValueError(
            f"Model {name!r} declares unknown capabilities {unknown}; accepted: "
            f"{list(CAPABILITIES)}."
        )
    if (equivalence is not None) != (EQUIVALENCE in capabilities):
        raise ValueError(
            f"Model {name!r}: the capability {EQUIVALENCE!r} and an `equivalence` go together."
        )
    for ablation in ablations:
        _check_options(name, fields, ablation.options, f"ablation {ablation.key!r}")
    for entry in task_options:
        _check_options(name, fields, entry.options, f"task options {entry.source!r}")
    if paper_size is not None:
        _check_options(name, fields, paper_size.options, "paper_size")

    def decorate(layer_cls: Callable[..., Any]) -> Callable[..., Any]:
        if not callable(layer_cls):
            raise TypeError(
                f"Model {name!r}: register decorates a layer class or a factory "
                f"(config, *, key) -> layer, got {layer_cls!r}."
            )
        origin = _origin(layer_cls)
        registration = ModelInfo(
            name=name,
            label=name if label is None else label,
            config_cls=config_cls,
            layer_cls=layer_cls,
            note=note,
            paper_size=paper_size,
            task_options=tuple(task_options),
            ablations=tuple(ablations),
            width_options=width_options,
            benchmark=benchmark,
            capabilities=capabilities,
            equivalence=equivalence,
            origin=origin,
            source_sha256=None if origin == BUILTIN else _source_sha256(layer_cls),
        )
        existing = _REGISTRY.get(name)
        if existing is not None and existing != registration and not replace:
            if existing.origin == BUILTIN:
                raise ValueError(
                    f"Model {name!r} is one of this package's layers; choose another name for "
                    f"{origin} (or pass replace=True to register to replace ours on purpose)."
                )
            raise ValueError(
                f"Model {name!r} is already registered (by {existing.origin}); to replace it "
                f"with {origin} (e.g. a notebook cell run again) pass replace=True to "
                "register, or choose another name."
            )
        if existing is not None and existing != registration:
            # Import paths resolved to the old registration no longer name it.
            for path in [p for p, n in _PATHS.items() if n == name]:
                del _PATHS[path]
        _REGISTRY[name] = registration
        return layer_cls

    return decorate


def _check_options(name: str, fields: list[str], options: Options, where: str) -> None:
    unknown = sorted({k for k, _ in options} - set(fields))
    if unknown:
        raise ValueError(
            f"Model {name!r}: {where} sets unknown option(s) {unknown}; accepted: {fields}."
        )


def _origin(layer_cls: Callable[..., Any]) -> str:
    module = getattr(layer_cls, "__module__", "") or ""
    if module.split(".")[0] == __name__.split(".")[0]:
        return BUILTIN
    return f"{module}:{getattr(layer_cls, '__qualname__', getattr(layer_cls, '__name__', '?'))}"


def _source_sha256(layer_cls: Callable[..., Any]) -> str | None:
    """sha256 of the file that defines ``layer_cls`` (``None`` if it has no file)."""
    try:
        path = inspect.getsourcefile(layer_cls)
    except TypeError:
        return None
    if path is None:
        return None
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


# --------------------------------------------------------------------------------------------
# Lookup


def resolve(name_or_path: str) -> str:
    """The registry name of a model given by name or by import path ``module:attribute``.

    An import path imports the module (whose `register` line registers the layer) and returns
    the name under which ``attribute`` (the registered layer class or factory) is registered.
    """
    if not isinstance(name_or_path, str) or not name_or_path:
        raise ValueError(f"A model is a registry name or 'module:attribute', got {name_or_path!r}.")
    if ":" not in name_or_path:
        _load_all()
        if name_or_path not in _REGISTRY and name_or_path in _LEFT_OUT:
            raise ValueError(_LEFT_OUT[name_or_path])  # an installed entry point, left out
        if name_or_path not in _REGISTRY:
            raise ValueError(
                f"Unknown model {name_or_path!r}; accepted models: {', '.join(names())}, or an "
                "outside layer by import path 'package.module:Layer'."
            )
        return name_or_path
    if name_or_path in _PATHS:
        return _PATHS[name_or_path]
    module_name, _, attr = name_or_path.partition(":")
    if not module_name or not attr or ":" in attr:
        raise ValueError(
            f"Model path {name_or_path!r} is not of the form 'package.module:Layer'."
        )
    _load_all()
    module = _import_outside(name_or_path, module_name)
    target = module
    for part in attr.split("."):
        if not hasattr(target, part):
            raise ValueError(
                f"Model path {name_or_path!r}: module {module_name!r} has no attribute {attr!r}."
            )
        target = getattr(target, part)
    found = [info.name for info in _REGISTRY.values() if info.layer_cls is target]
    if not found:
        raise ValueError(
            f"Model path {name_or_path!r}: {attr!r} is not registered; decorate it with "
            "@models.register(name, ConfigClass, ...) in its module."
        )
    _PATHS[name_or_path] = found[0]
    return found[0]


def _import_outside(path: str, module_name: str) -> Any:
    """Import an outside layer's module; any failure is one line naming the module and error.

    A module that fails part-way may have registered layers before it failed: those
    registrations are removed (Python forgets the failed module, so importing it again once
    fixed registers afresh); a module it imported successfully keeps its own.
    """
    before = set(_REGISTRY)
    try:
        return importlib.import_module(module_name)
    except Exception as e:  # noqa: BLE001 (a user's module may fail in any way; the cause is named)
        for name in set(_REGISTRY) - before:
            if getattr(_REGISTRY[name].layer_cls, "__module__", None) not in sys.modules:
                del _REGISTRY[name]
        missing = getattr(e, "name", None) if isinstance(e, ModuleNotFoundError) else None
        if missing is not None and (module_name + ".").startswith(missing + "."):
            raise ValueError(
                f"Model path {path!r}: cannot import module {module_name!r} ({e}); is it on "
                "PYTHONPATH or installed?"
            ) from e
        raise ValueError(
            f"Model path {path!r}: importing module {module_name!r} failed with "
            f"{_one_line(e)}; fix the module (python -c 'import {module_name}' shows where)."
        ) from e


def _one_line(e: BaseException) -> str:
    """``Type: message``, the message cut to its first line (a user's error may span many)."""
    lines = str(e).strip().splitlines()
    return f"{type(e).__name__}: {lines[0].rstrip('.')}" if lines else type(e).__name__


def _kind(value: Any) -> str:
    """What ``value`` is, in words: "None", "an array of shape (4, 4)", "a Plain"."""
    if value is None:
        return "None"
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return f"an array of shape {tuple(value.shape)}"
    return f"a {type(value).__name__}"


def info(name: str) -> ModelInfo:
    """The registration of model ``name`` (or import path, see `resolve`)."""
    return _REGISTRY[resolve(name)]


def infos() -> tuple[ModelInfo, ...]:
    """Every registration: ours in their listing order, then outside ones as registered."""
    _load_all()
    builtin = [n for n in _BUILTIN_MODULES if n in _REGISTRY]
    others = [n for n in _REGISTRY if n not in builtin]
    return tuple(_REGISTRY[n] for n in [*builtin, *others])


def names() -> list[str]:
    """Registered model names, sorted."""
    _load_all()
    return sorted(_REGISTRY)


def config_class(name: str) -> type:
    return info(name).config_cls


def task_options(name: str, task: str, preset: str) -> dict[str, Any]:
    """The options model ``name``'s paper prescribes for ``task`` at ``preset``, merged in
    registration order (a later entry wins); ``d_state`` among them is the network's."""
    out: dict[str, Any] = {}
    for entry in info(name).task_options:
        if entry.applies(task, preset):
            out.update(entry.options)
    return out


def make_config(name: str, **options: Any) -> Any:
    """The validated config of model ``name``; unknown options are an error listing the valid ones."""
    cls = config_class(name)
    accepted = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        # A spelling of another paper's code (the S5 code's ``discretization``) or a typo:
        # name the option meant.
        meant = {u: difflib.get_close_matches(u, accepted, n=1, cutoff=0.8) for u in unknown}
        hints = "".join(f" {u!r} is spelt {m[0]!r} here." for u, m in meant.items() if m)
        raise ValueError(
            f"Unknown option(s) {unknown} for model {name!r}; accepted options: "
            f"{', '.join(accepted)}.{hints}"
        )
    try:
        inspect.signature(cls).bind(**options)
    except TypeError as e:
        # A config class with required fields beyond d_model and d_state (or an ``__init__``
        # of its own): the options given cannot make it.
        raise ValueError(
            f"Model {resolve(name)!r}: its config class {cls.__name__} cannot be made from "
            f"the options {sorted(options)} ({_one_line(e)}); give its other fields defaults, "
            "or set them (layer.<field>=...)."
        ) from e
    return cls(**options)


def build(name: str, *, d_model: int, d_state: int, key: Any, **options: Any) -> Any:
    """Build layer ``name`` mapping ``(L, d_model) -> (L, d_model)`` with ``d_state`` states."""
    config = make_config(name, d_model=d_model, d_state=d_state, **options)
    return from_config(name, config, key=key)


def from_config(name: str, config: Any, *, key: Any) -> Any:
    """Layer ``name`` built from its validated ``config``.

    An outside layer is checked here, once per config: its class or factory must give an
    `equinox.Module` that maps ``(L, H) -> (L, H)`` (traced by `equinox.filter_eval_shape`, so
    nothing runs); anything else, or an exception while building, is a ``ValueError`` of one
    line naming the model, where it comes from and what went wrong.
    """
    import equinox as eqx

    model = info(name)
    if not isinstance(config, model.config_cls):
        raise TypeError(
            f"Model {name!r} needs a {model.config_cls.__name__}, got {type(config).__name__}."
        )
    if model.origin == BUILTIN:
        return model.layer_cls(config, key=key)
    where = f"Model {model.name!r} ({model.origin})"
    try:
        layer = model.layer_cls(config, key=key)
    except Exception as e:  # noqa: BLE001 (a user's code may fail in any way; the cause is named)
        raise ValueError(
            f"{where}: building the layer failed with {_one_line(e)}; a registered class or "
            "factory is called as layer_cls(config, *, key=key)."
        ) from e
    if not isinstance(layer, eqx.Module):
        raise ValueError(
            f"{where} built {_kind(layer)}, not an equinox.Module; a registered class "
            "or factory must return an equinox.Module mapping (L, H) -> (L, H) (a Flax linen "
            "module: wrap it in models.flax.linen.FromLinen)."
        )
    _check_output(where, model, config, layer)
    return layer


# Outside layers whose output was checked: (layer class or factory, config).
_CHECKED: set[tuple[Any, Any]] = set()
# The sequence length of the check: any length must do; this one is check-layer's.
_CHECK_LENGTH = 16


def _check_output(where: str, model: ModelInfo, config: Any, layer: Any) -> None:
    """``layer`` maps a float32 ``(L, H)`` sequence to one ``(L, H)`` array, H = d_model."""
    import equinox as eqx
    import jax
    import jax.numpy as jnp

    try:
        seen = (model.layer_cls, config)
        if seen in _CHECKED:
            return
    except TypeError:  # an unhashable config: checked on every build
        seen = None
    H = config.d_model
    u = jax.ShapeDtypeStruct((_CHECK_LENGTH, H), jnp.float32)
    # The layer's arrays as shapes: the check traces, and works inside an outer transform.
    shaped = jax.tree.map(
        lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype) if eqx.is_array(a) else a, layer
    )
    try:
        y = eqx.filter_eval_shape(lambda m, x: m(x), shaped, u)
    except Exception as e:  # noqa: BLE001 (as in `from_config`)
        raise ValueError(
            f"{where}: calling the layer on a float32 (L, H) = {u.shape} sequence failed with "
            f"{_one_line(e)}; a layer maps one sequence (L, H) -> (L, H)."
        ) from e
    if not isinstance(y, jax.ShapeDtypeStruct) or y.shape != u.shape:
        got = f"shape {y.shape}" if isinstance(y, jax.ShapeDtypeStruct) else _kind(y)
        raise ValueError(
            f"{where}: its layer maps (L, H) = {u.shape} to {got}; a layer maps (L, H) -> "
            f"(L, H) with H = d_model = {H}."
        )
    if seen is not None:
        _CHECKED.add(seen)


_loaded = False


def _load_all() -> None:
    """Import our layer modules (their `register` lines), then the entry points' modules."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    for module in _BUILTIN_MODULES:
        importlib.import_module(f"{__package__}.{module}")
    _load_entry_points()


# Installed entry points left out: entry-point name -> the one line saying why (`resolve`
# gives it as the error when the name is asked for).
_LEFT_OUT: dict[str, str] = {}
_logger = logging.getLogger("linrnn_bench.models")


def _load_entry_points() -> None:
    """Register the model of each installed distribution's `ENTRY_POINT_GROUP` entry point.

    Another package may be broken in any way (a module that fails to import, an entry point
    named otherwise than its registration, an entry_points.txt that cannot be read): each such
    entry point is left out with one warning line naming its distribution and the error, so
    that our models and the other entry points stay usable; asking for it by name gives that
    line as the error.
    """
    for distribution, entries in _entry_points():
        for entry in entries:
            try:
                _load_entry_point(entry)
            except ValueError as e:
                _leave_out(entry.name, (
                    f"The {ENTRY_POINT_GROUP!r} entry point {entry.name!r} = {entry.value!r} of "
                    f"the installed distribution {distribution!r} is left out: {e}"))
            else:
                _LEFT_OUT.pop(entry.name, None)


def _load_entry_point(entry: Any) -> None:
    """Register ``entry``'s model; a ``ValueError`` says why it cannot be."""
    if ":" not in entry.value:
        raise ValueError("its value is not of the form 'package.module:Layer'.")
    name = resolve(entry.value)
    if name != entry.name:
        raise ValueError(
            f"it registers its layer as {name!r}; the entry point's name must be the "
            "registered name."
        )


def _entry_points() -> list[tuple[str, list[Any]]]:
    """``(distribution name, its entry points of the group)`` of the installed distributions,
    the first of a name on ``sys.path`` winning (as `importlib.metadata.entry_points` has it).

    Read one distribution at a time, so that one whose entry_points.txt cannot be parsed (which
    makes `importlib.metadata.entry_points` raise for every group) is left out alone, with a
    warning when it declares this group.
    """
    from importlib import metadata

    found, seen = [], set()
    for dist in metadata.distributions():
        name = dist.metadata["Name"] or "?"
        key = re.sub(r"[-_.]+", "-", name).lower()  # PEP 503's normalised name
        if key in seen:
            continue
        seen.add(key)
        try:
            entries = [e for e in dist.entry_points if e.group == ENTRY_POINT_GROUP]
        except Exception as e:  # noqa: BLE001 (another package's metadata may fail in any way)
            if f"[{ENTRY_POINT_GROUP}]" in (dist.read_text("entry_points.txt") or ""):
                _leave_out(None, (
                    f"The installed distribution {name!r} declares {ENTRY_POINT_GROUP!r} entry "
                    f"points, but its entry_points.txt cannot be read ({_one_line(e)}); its "
                    "models are left out (reinstall or fix it)."))
            continue
        if entries:
            found.append((name, entries))
    return found


def _leave_out(name: str | None, line: str) -> None:
    """Warn with ``line`` (one line); ``name``, asked for as a model, gives it as the error."""
    if name is not None:
        _LEFT_OUT[name] = line
    _logger.warning("%s", line)
