"""One resolver of a run's settings (`harness.settings`): the accuracy grid it builds is the one
the study built before it existed, and it says where each effective option came from."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

import models
import tasks
from harness import config as _config
from harness import settings
from harness.studies import accuracy as A


def _old_resolve(config: A.AccuracyConfig, model: str, task: str, depth: int, seed: int
                 ) -> A.RunSpec:
    """The accuracy study's resolution as it was before `harness.settings` (kept here only, to
    show that the resolver yields the same runs, hence the same run ids in the store)."""
    network: dict[str, Any] = {"depth": depth}
    training: dict[str, Any] = {}
    task_options = tasks.preset_options(task, config.task_preset)
    prescribed = models.task_options(model, task, config.task_preset)
    if "d_state" in prescribed:
        network["d_state"] = prescribed.pop("d_state")
    layer_options = dict(prescribed)
    layer_options.update(config.network.layer_options)
    for recipe in config.recipes:
        if not recipe.applies(model, task):
            continue
        for key, value in recipe.overrides:
            head, _, rest = key.partition(".")
            if head == "layer" and not (recipe.model != "*" or rest in models.info(
                    model).option_names() or not any(rest in m.option_names()
                                                     for m in models.infos())):
                continue
            {"network": network, "train": training, "task": task_options,
             "layer": layer_options}[head][rest] = value
    where = f"accuracy run ({model}, {task})"
    width = models.info(model).width_options
    if width:
        sizes = _config.replace(config.network, {k: network[k] for k in ("d_model", "d_state")
                                                 if k in network}, what=f"{where} network")
        layer_options = {**width(sizes.d_model, sizes.d_state), **layer_options}
    layer_options = _config.parse_fields(
        models.config_class(model), layer_options, f"{where} layer", reserved=("d_model",
                                                                              "d_state"))
    task_options = _config.parse_fields(tasks.config_class(task), task_options, f"{where} task")
    network.update(layer=model, layer_options=tuple(layer_options.items()))
    resolved_network = _config.replace(config.network, network, what=f"{where} network")
    resolved_train = _config.replace(config.train, training, what=f"{where} train")
    tasks.make_config(task, **task_options)
    options = tuple(sorted(task_options.items()))
    return A.RunSpec(task, options, resolved_network, resolved_train, seed,
                     resolved_train.lr, resolved_train.recurrent_lr)


def _old_grid(config: A.AccuracyConfig) -> list[A.RunSpec]:
    specs = []
    for seed in config.seeds:
        for task in config.tasks:
            for model in config.models:
                for depth in config.depths or (config.network.depth,):
                    spec = _old_resolve(config, model, task, depth, seed)
                    for lr, recurrent_lr in A.candidates(config, spec):
                        specs.append(dataclasses.replace(spec, train=dataclasses.replace(
                            spec.train, lr=lr, recurrent_lr=recurrent_lr)))
    return specs


_COMMAND_LINE = A.Recipe(overrides=(("layer.r_min", "0.4"), ("layer.heads", "2"),
                                    ("train.lr", "0.02"), ("network.d_state", "16")),
                         source="command line")
_ADDING = A.Recipe(task="adding", overrides=(("task.seq_len", "50"),), source="command line")


@pytest.mark.parametrize("preset", ["smoke", "cpu", "cpu-full", "gpu"])
def test_every_preset_resolves_to_the_runs_it_resolved_to_before(preset):
    config = A.STUDY.config(preset)
    new = A.grid(config)
    assert new == _old_grid(config)
    assert [A.STUDY.run_id(s) for s in new] == [A.STUDY.run_id(s) for s in _old_grid(config)]


@pytest.mark.parametrize("changes", [
    {"depths": (1, 3)},
    {"network": A.NetworkConfig(depth=1, d_model=8, d_state=8, layer_options=(("bidirectional",
                                                                                True),))},
    {"recipes": (_ADDING, _COMMAND_LINE)},
    {"recipes": (A.Recipe(model="rotrnn", overrides=(("layer.heads", 4),)), _COMMAND_LINE)},
])
def test_overrides_resolve_as_before(changes):
    config = dataclasses.replace(A.STUDY.config("smoke", {"tasks": "digits,adding,listops"}),
                                 **changes)
    assert A.grid(config) == _old_grid(config)


def _sources(resolved: settings.Resolved) -> dict[str, tuple[Any, str]]:
    return {key: (value, source) for key, value, source in resolved.explain()}


def test_each_option_says_where_it_came_from():
    config = dataclasses.replace(A.STUDY.config("cpu"), recipes=(
        *A.STUDY.config("cpu").recipes,
        A.Recipe(overrides=(("layer.max_phase", "1.5"),), source=settings.COMMAND_LINE)))
    lru = _sources(A.resolve(config, "lru", "listops"))
    assert lru["layer.r_min"][0] == 0.0 and "lru registration for listops" in lru["layer.r_min"][1]
    assert lru["layer.max_phase"] == (1.5, "the command line")
    assert lru["train.steps"][0] == 400 and lru["train.steps"][1].startswith("recipe: ListOps")
    assert lru["train.lr"] == (config.train.lr, settings.STUDY_TRAIN)
    assert lru["network.d_model"] == (32, settings.STUDY_NETWORK)
    assert lru["task.max_depth"][1] == "the task's cpu preset"
    assert lru["layer.bidirectional"] == (False, settings.LAYER_DEFAULT)
    rotrnn = _sources(A.resolve(config, "rotrnn", "listops"))
    assert rotrnn["layer.heads"][0] == 4 and "width options" in rotrnn["layer.heads"][1]
    assert "layer.max_phase" in rotrnn  # RotRNN has the option: the command line sets it too
    gpu = _sources(A.resolve(A.STUDY.config("gpu"), "rotrnn", "listops"))
    assert gpu["layer.heads"][0] == 32 and "registration" in gpu["layer.heads"][1]
    assert gpu["network.d_state"][0] == 128 and "registration" in gpu["network.d_state"][1]
    # Every effective option is listed once, and each listed value is the run's.
    keys = [k for k, _, _ in A.resolve(config, "s5", "digits").explain()]
    assert len(keys) == len(set(keys))
    assert {f"train.{f.name}" for f in dataclasses.fields(A.TrainConfig)} <= set(keys)
