"""One resolver of a run's settings (`harness.settings`): the accuracy grid it builds is the one
the study built before it existed, and it says where each effective option came from."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from linrnn_bench import models
from linrnn_bench import tasks
from linrnn_bench.harness import config as _config
from linrnn_bench.harness import settings
from linrnn_bench.harness.studies import accuracy as A


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
                    for lr, recurrent_lr in A.tuning_pairs(config, spec):
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
    # The equal-width runs (the parameter-matched ones came later: tests/test_accuracy_matched).
    new = [s for s in A.grid(config) if s.parameter_budget is None]
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
    assert rotrnn["layer.heads"][0] == 8 and "width options" in rotrnn["layer.heads"][1]
    assert "layer.max_phase" in rotrnn  # RotRNN has the option: the command line sets it too
    gpu = _sources(A.resolve(A.STUDY.config("gpu"), "rotrnn", "listops"))
    assert gpu["layer.heads"][0] == 32 and "registration" in gpu["layer.heads"][1]
    assert gpu["network.d_state"][0] == 128 and "registration" in gpu["network.d_state"][1]
    # Every effective option is listed once, and each listed value is the run's.
    keys = [k for k, _, _ in A.resolve(config, "s5", "digits").explain()]
    assert len(keys) == len(set(keys))
    assert {f"train.{f.name}" for f in dataclasses.fields(A.TrainConfig)} <= set(keys)


# --------------------------------------------------------------------------------------------
# The stability study: the accuracy study's networks, and its selected learning rates


def _lru_run(config) -> Any:
    from linrnn_bench.harness.studies import stability as S

    return next(r for r in S.grid(config) if r.variant == "lru" and r.train is not None)


def test_stability_takes_per_task_options_from_the_registration(monkeypatch):
    from linrnn_bench.harness.studies import stability as S
    from linrnn_bench.models import _registry

    config = S.STUDY.config("smoke")
    assert dict(_lru_run(config).network.layer_options) == {"r_min": 0.0, "r_max": 0.99}
    # The registration says another ring for ListOps: the stability run follows it.
    info = models.info("lru")
    ring = models.TaskOptions("listops", options=(("r_min", 0.5), ("r_max", 0.95)),
                              source="a test")
    monkeypatch.setitem(_registry._REGISTRY, "lru",
                        dataclasses.replace(info, task_options=(ring,)))
    assert dict(_lru_run(config).network.layer_options) == {"r_min": 0.5, "r_max": 0.95}
    # RotRNN's heads at gpu come from its registration (N = 128 in 32 heads: N_h = 4), not
    # from a copy in the stability preset; the stability run's network is the accuracy run's.
    gpu = S.STUDY.config("gpu")
    rotrnn, _ = S.resolve(gpu, "rotrnn", "listops", 6)
    assert dict(rotrnn.network.layer_options)["heads"] == 32
    assert rotrnn.network.d_state == 128
    accuracy = A.resolve(A.STUDY.config("gpu"), "rotrnn", "listops")
    assert rotrnn.network.layer_options == accuracy.network.layer_options
    # An ablation's own option still wins over everything.
    no_gamma, _ = S.resolve(config, "lru-no-gamma", "listops", 1)
    assert dict(no_gamma.network.layer_options)["normaliser"] == "none"


def _tuned_accuracy_store(path, best: tuple[float, float]):
    """A store holding a tuned accuracy cell (LRU on ListOps at the smoke size, two rate pairs,
    two seeds) whose best mean validation accuracy is at ``best``."""
    from linrnn_bench.harness import config as hc
    from linrnn_bench.harness.store import Store

    config = A.STUDY.config("smoke", {"models": "lru", "tasks": "listops", "seeds": "0,1",
                                      "tune_tasks": "listops", "lr_grid": "0.003,0.03",
                                      "recurrent_lr_grid": "0.001,0.01",
                                      "lr_pairing": "paired"})
    store = Store(path)
    for spec in A.grid(config):
        pair = (spec.train.lr, spec.train.recurrent_lr)
        accuracy = 0.6 if pair == best else 0.3
        store.record(run_id=A.STUDY.run_id(spec), study="accuracy", status="done",
                     config=hc.to_dict(spec), config_hash=hc.config_hash(spec), seed=spec.seed,
                     provenance={}, rows=[{"kind": "final", "step": 4, "val_accuracy": accuracy,
                                           "val_loss": 1.0, "selection": "accuracy",
                                           "test_accuracy": accuracy}])
    return store


def test_stability_trains_at_the_accuracy_studys_selected_rates(tmp_path):
    from linrnn_bench.harness.report import selection
    from linrnn_bench.harness.studies import stability as S

    store = _tuned_accuracy_store(tmp_path / "s.sqlite", best=(0.03, 0.01))
    assert selection.tuned_rates(store) == {("lru", "listops", 1): (0.03, 0.01)}
    config = S.STUDY.config("smoke")
    bound = S.STUDY.bind(config, store)
    lru = _lru_run(bound)
    assert (lru.train.lr, lru.train.recurrent_lr, lru.lr_source) == (0.03, 0.01, "selected")
    # RotRNN has no tuned cell in the store: the recipe's rates, and it says so.
    rotrnn = next(r for r in S.grid(bound) if r.variant == "rotrnn")
    assert (rotrnn.train.lr, rotrnn.lr_source) == (config.lr, "recipe")
    # Without the store, or with lr_source=recipe, the recipe's rates; the run ids differ.
    plain = _lru_run(config)
    assert (plain.train.lr, plain.lr_source) == (config.lr, "recipe")
    assert S.STUDY.run_id(plain) != S.STUDY.run_id(lru)
    recipe = S.STUDY.bind(dataclasses.replace(config, lr_source="recipe"), store)
    assert _lru_run(recipe) == plain
    # Another selection in the store makes another run.
    other = _tuned_accuracy_store(tmp_path / "t.sqlite", best=(0.003, 0.001))
    assert _lru_run(S.STUDY.bind(config, other)).train.lr == 0.003


def test_the_report_places_selected_rate_runs_in_their_preset(tmp_path):
    from linrnn_bench.harness.report import origins
    from linrnn_bench.harness.studies import stability as S

    store = _tuned_accuracy_store(tmp_path / "s.sqlite", best=(0.03, 0.01))
    run_id = S.STUDY.run_id(_lru_run(S.STUDY.bind(S.STUDY.config("smoke"), store)))
    # Read with the store it was made from, the run is in the smoke grid; without it, it is
    # not (its rates are not the recipe's).
    with origins.reading(store):
        assert origins.run_presets("stability", [run_id])[run_id] == "smoke"
    assert origins.run_presets("stability", [run_id])[run_id] == origins.CUSTOM
