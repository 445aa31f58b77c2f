"""A run's settings, resolved in one place and in one order, with where each value came from.

Every training run (the accuracy study's, ``linrnn-bench train``'s, the stability study's)
gets its network, layer options, task options and training recipe from `resolve`. The sources,
from the lowest precedence to the highest (a later one replaces an earlier one's value):

1. **defaults**: the layer's and the task's config classes, and the study's shared network
   and training configs (``network.*``, ``train.*``: the preset's, with the study's
   ``key=value`` overrides);
2. **the task's preset** (`tasks.preset_options`): ``task.*``;
3. **the run's depth** when the study sweeps depths: ``network.depth``;
4. **the model's registration for this task and preset** (`models.task_options`: what its paper
   prescribes, e.g. the LRU's ListOps ring): ``layer.*`` and ``network.d_state``;
5. **the study's layer options for every model**: ``layer.*``;
6. **the study's recipes, in order** (`Recipe`: per model and/or task, with their source), the
   command line's last: ``network.*``, ``train.*``, ``task.*``, ``layer.*``.

Beneath every layer option set by 4-6, the options the registration derives from the width and
state size the run ends with (`models.ModelInfo.width_options`, e.g. RotRNN's head count) fill
those that nothing else set: they are computed last, from the final sizes, but never replace an
explicit value.

``linrnn-bench train ... --explain`` prints `Resolved.explain` (each effective option, its
value and its source) without training.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from linrnn_bench import models
from linrnn_bench import tasks
from linrnn_bench.models.network import NetworkConfig

from . import config as _config
from .train import TrainConfig

# The keys a recipe may set: ``network.<field>``, ``train.<field>``, ``task.<option>``,
# ``layer.<option>`` (the layer's own options).
PREFIXES: tuple[str, ...] = ("network.", "train.", "task.", "layer.")
# Fields of a layer's config that the network sets (``network.d_model``, ``network.d_state``).
NETWORK_FIELDS: tuple[str, ...] = ("d_model", "d_state")

# Source labels of the values nothing else set.
STUDY_NETWORK = "the study's network"
STUDY_TRAIN = "the study's training recipe"
LAYER_DEFAULT = "the layer's default"
TASK_DEFAULT = "the task's default"
COMMAND_LINE = "command line"  # the source of the recipe a command line's key=value make


@dataclasses.dataclass(frozen=True)
class Recipe:
    """Settings for the runs of one model and/or task, with where they come from.

    Attributes:
        model: a model name, or ``"*"`` for every model.
        task: a task name, or ``"*"`` for every task.
        overrides: ``(key, value)`` pairs; a key is ``network.<field>``, ``train.<field>``,
            ``task.<option>`` or ``layer.<option>`` (the layer's own options). A recipe for every
            model sets a layer option only on the models whose config has it (`sets_layer`).
        source: the paper, table or choice the values come from.
    """

    model: str = "*"
    task: str = "*"
    overrides: tuple[tuple[str, Any], ...] = ()
    source: str = ""

    def __post_init__(self):
        pairs = self.overrides.items() if isinstance(self.overrides, Mapping) else self.overrides
        object.__setattr__(self, "overrides", tuple(tuple(p) for p in pairs))
        for pair in self.overrides:
            if len(pair) != 2 or not isinstance(pair[0], str) or not pair[0].startswith(PREFIXES):
                raise ValueError(
                    f"Recipe override {pair!r} must be (key, value) with a key starting with one "
                    f"of {list(PREFIXES)}."
                )
            if pair[0].partition(".")[2].partition(".")[0] in ("layer", "layer_options") and (
                    pair[0].startswith("network.")):
                # The grid's model sets the layer; its options are ``layer.<option>``.
                raise ValueError(
                    f"Recipe override {pair[0]!r} is not accepted: each run's layer is the "
                    "grid's model, and its options are set as layer.<option>."
                )

    def applies(self, model: str, task: str) -> bool:
        return self.model in ("*", model) and self.task in ("*", task)

    def sets_layer(self, model: str, option: str) -> bool:
        """Whether this recipe sets the layer option ``option`` on ``model``. A recipe for
        every model (``"*"``) sets it only on models whose config has it, so that an outside
        layer's config is never asked for a field it lacks (a setting one paper prescribes
        belongs in that model's registration); an option no registered model has is passed
        on, for the config to refuse as a typo."""
        if self.model != "*" or option in models.info(model).option_names():
            return True
        return not any(option in m.option_names() for m in models.infos())

    def label(self) -> str:
        """How `Resolved.explain` names this recipe as a source."""
        if self.source == COMMAND_LINE:
            return "the command line"
        return f"recipe: {self.source}" if self.source else "recipe"


@dataclasses.dataclass(frozen=True)
class Resolved:
    """A run's resolved settings and, for each option set by a source, where it came from.

    Attributes:
        network: the network config (``layer`` is the model, ``layer_options`` its options).
        train: the training recipe.
        task_options: the task's options, sorted by name.
        sources: ``{key: source}`` for every option a source set (keys ``network.<field>``,
            ``train.<field>``, ``task.<option>``, ``layer.<option>``); the others are defaults.
    """

    model: str
    task: str
    network: NetworkConfig
    train: TrainConfig
    task_options: tuple[tuple[str, Any], ...]
    sources: Mapping[str, str]

    def explain(self) -> list[tuple[str, Any, str]]:
        """``(key, value, source)`` of every effective option: the network's fields, the
        layer's, the task's and the training recipe's, each with the source that set it (or
        the default it kept)."""
        out: list[tuple[str, Any, str]] = [("network.layer", self.model, "the run's model")]
        for field in dataclasses.fields(self.network):
            if field.name in ("layer", "layer_options"):
                continue
            key = f"network.{field.name}"
            out.append((key, getattr(self.network, field.name),
                        self.sources.get(key, STUDY_NETWORK)))
        layer = dict(self.network.layer_options)
        for name, value in _defaults(models.config_class(self.model), NETWORK_FIELDS).items():
            key = f"layer.{name}"
            out.append((key, layer.get(name, value), self.sources.get(key, LAYER_DEFAULT)))
        task = dict(self.task_options)
        for name, value in _defaults(tasks.config_class(self.task)).items():
            key = f"task.{name}"
            out.append((key, task.get(name, value), self.sources.get(key, TASK_DEFAULT)))
        for field in dataclasses.fields(self.train):
            key = f"train.{field.name}"
            out.append((key, getattr(self.train, field.name),
                        self.sources.get(key, STUDY_TRAIN)))
        return out


def _defaults(cls: type, reserved: Iterable[str] = ()) -> dict[str, Any]:
    """``{field: default}`` of a config class (None for a field without one)."""
    out = {}
    for field in dataclasses.fields(cls):
        if field.name in reserved:
            continue
        if field.default is not dataclasses.MISSING:
            out[field.name] = field.default
        elif field.default_factory is not dataclasses.MISSING:
            out[field.name] = field.default_factory()
        else:
            out[field.name] = None
    return out


def resolve(
    model: str,
    task: str,
    *,
    task_preset: str,
    network: NetworkConfig,
    train: TrainConfig,
    depth: int | None = None,
    layer_options: Iterable[tuple[str, Any]] = (),
    recipes: Iterable[Recipe] = (),
    where: str = "run",
) -> Resolved:
    """The settings of one run of ``model`` on ``task``, in the module docstring's order.

    Arguments:
        task_preset: the tasks' (and the registrations') preset: ``smoke``, ``cpu``, ``gpu``.
        network, train: the study's shared configs (source 1); ``network.layer`` and
            ``network.layer_options`` are replaced by ``model`` and its resolved options.
        depth: the run's depth when the study sweeps depths (source 3); None keeps
            ``network.depth``.
        layer_options: the study's options for every model (source 5), set as given.
        recipes: the study's recipes in order (source 6); those that do not apply to
            (``model``, ``task``) are skipped.
        where: how errors name the run.

    Text values (the command line's) are parsed by the annotations of the layer's, the task's
    and the network's and training recipe's config classes; a bad key or value is a
    `harness.config.ConfigError` naming the run.
    """
    sources: dict[str, str] = {}
    net: dict[str, Any] = {}
    training: dict[str, Any] = {}
    if depth is not None:
        net["depth"] = depth
        sources["network.depth"] = "the study's depths"
    task_options = tasks.preset_options(task, task_preset)
    sources.update({f"task.{k}": f"the task's {task_preset} preset" for k in task_options})
    layer = _registration_options(model, task, task_preset, net, sources)
    for key, value in layer_options:
        layer[key] = value
        sources[f"layer.{key}"] = "the study's layer options"
    _apply_recipes(recipes, model, task,
                   {"network": net, "train": training, "task": task_options, "layer": layer},
                   sources)
    layer = _with_width_options(model, network, net, layer, sources, where)
    layer = _config.parse_fields(
        models.config_class(model), layer, f"{where} layer", reserved=NETWORK_FIELDS)
    task_options = _config.parse_fields(tasks.config_class(task), task_options, f"{where} task")
    net.update(layer=model, layer_options=tuple(layer.items()))
    resolved_network = _config.replace(network, net, what=f"{where} network")
    resolved_train = _config.replace(train, training, what=f"{where} train")
    try:
        tasks.make_config(task, **task_options)  # fail at grid time, not in every run
    except (TypeError, ValueError) as e:
        raise _config.ConfigError(f"{where}: {e}") from None
    return Resolved(model, task, resolved_network, resolved_train,
                    tuple(sorted(task_options.items())), sources)


def _registration_options(model: str, task: str, task_preset: str, net: dict[str, Any],
                          sources: dict[str, str]) -> dict[str, Any]:
    """Source 4: the layer options ``model``'s registration prescribes for ``task`` at
    ``task_preset`` (a prescribed ``d_state`` goes into ``net``, the network's fields), each
    recorded in ``sources`` as the registration's, with the reasons it gives."""
    prescribed = models.task_options(model, task, task_preset)
    registration = f"the {model} registration for {task} at {task_preset}"
    reasons = [e.source for e in models.info(model).task_options
               if e.applies(task, task_preset) and e.source]
    if reasons:
        registration += f" ({'; '.join(reasons)})"
    if "d_state" in prescribed:
        net["d_state"] = prescribed.pop("d_state")
        sources["network.d_state"] = registration
    sources.update({f"layer.{k}": registration for k in prescribed})
    return dict(prescribed)


def _apply_recipes(recipes: Iterable[Recipe], model: str, task: str,
                   parts: dict[str, dict[str, Any]], sources: dict[str, str]) -> None:
    """Source 6: each recipe that applies to (``model``, ``task``), in order, sets its values
    into ``parts`` (``network``, ``train``, ``task``, ``layer``: the options gathered so far,
    by the key's prefix) and records itself in ``sources``; a recipe for every model skips a
    layer option the model lacks (`Recipe.sets_layer`)."""
    for recipe in recipes:
        if not recipe.applies(model, task):
            continue
        for key, value in recipe.overrides:
            head, _, rest = key.partition(".")
            if head == "layer" and not recipe.sets_layer(model, rest):
                continue
            parts[head][rest] = value
            sources[key] = recipe.label()


def _with_width_options(model: str, network: NetworkConfig, net: dict[str, Any],
                        layer: dict[str, Any], sources: dict[str, str],
                        where: str) -> dict[str, Any]:
    """``layer`` beneath the options ``model``'s registration derives from the width and state
    size the run ends with (``network`` with ``net``'s fields; a recipe or the user may set
    them): a derived option fills only what no source set, and is recorded in ``sources``."""
    width = models.info(model).width_options
    if not width:
        return layer
    sizes = _config.replace(network, {k: net[k] for k in NETWORK_FIELDS if k in net},
                            what=f"{where} network")
    derived = width(sizes.d_model, sizes.d_state)
    label = (f"the {model} registration's width options (d_model={sizes.d_model}, "
             f"d_state={sizes.d_state})")
    sources.update({f"layer.{k}": label for k in derived if k not in layer})
    return {**derived, **layer}


def explain_text(resolved: Resolved) -> str:
    """`Resolved.explain` as an aligned table: option, value, source."""
    rows = [(key, repr(value) if isinstance(value, str) else str(value), source)
            for key, value, source in resolved.explain()]
    width_key = max(len(r[0]) for r in rows)
    width_value = max(len(r[1]) for r in rows)
    head = [f"{'option':<{width_key}}  {'value':<{width_value}}  source",
            f"{'-' * width_key}  {'-' * width_value}  ------"]
    return "\n".join(head + [f"{k:<{width_key}}  {v:<{width_value}}  {s}" for k, v, s in rows])
