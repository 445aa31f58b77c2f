"""The accuracy study's grid: sizes, order, recipes, identities, validation, presets."""

from __future__ import annotations

import dataclasses

import pytest

from linrnn_bench import models
from linrnn_bench import tasks
from linrnn_bench.harness import config as C
from linrnn_bench.harness.studies import accuracy as A


def test_grid_is_models_by_tasks_by_seeds_by_depths_with_seeds_outermost():
    config = A.STUDY.config("smoke", {"models": "lru,s5", "tasks": "digits,mqar", "seeds": "0,1",
                                      "depths": "1,2"})
    specs = A.grid(config)
    assert len(specs) == 2 * 2 * 2 * 2
    assert [s.seed for s in specs] == [0] * 8 + [1] * 8
    assert {(s.network.layer, s.task, s.network.depth) for s in specs[:8]} == {
        (m, t, d) for m in ("lru", "s5") for t in ("digits", "mqar") for d in (1, 2)
    }
    ids = {A.STUDY.run_id(s) for s in specs}
    assert len(ids) == len(specs)
    assert A.grid(config) == specs  # the same config gives the same runs, so resuming works
    # Task sizes come from the tasks' own presets; the recipe is shared by every model.
    mqar = [s for s in specs if s.task == "mqar"]
    assert dict(mqar[0].task_options) == tasks.preset_options("mqar", "smoke")
    assert len({s.train for s in specs}) == 1


def test_recipes_apply_to_their_model_and_task_only():
    recipes = (
        A.Recipe(model="lru", task="*", overrides=(("layer.r_min", 0.5), ("train.lr", 0.01)),
                 source="test"),
        A.Recipe(model="*", task="mqar", overrides=(("network.d_model", 16),
                                                     ("task.num_kv_pairs", 2))),
    )
    base = A.STUDY.config("smoke", {"models": "lru,s5", "tasks": "digits,mqar", "seeds": "0"})
    grid = A.grid(dataclasses.replace(base, recipes=recipes))
    specs = {(s.network.layer, s.task): s for s in grid}
    assert dict(specs["lru", "digits"].network.layer_options) == {"r_min": 0.5}
    assert specs["lru", "digits"].train.lr == 0.01
    assert specs["s5", "digits"].network.layer_options == ()
    assert specs["s5", "digits"].train.lr == base.train.lr
    assert specs["s5", "mqar"].network.d_model == 16
    assert specs["lru", "digits"].network.d_model == base.network.d_model
    assert dict(specs["s5", "mqar"].task_options)["num_kv_pairs"] == 2


def test_bad_settings_fail_at_grid_time_with_what_is_accepted():
    base = A.STUDY.config("smoke", {"models": "lru", "tasks": "mqar"})
    with pytest.raises(C.ConfigError, match=r"Unknown key 'nope' for accuracy run \(lru, mqar\) "
                                            r"layer \(LRUConfig\); accepted keys: algorithm"):
        A.grid(dataclasses.replace(base, recipes=(A.Recipe(overrides=(("layer.nope", 1),)),)))
    with pytest.raises(C.ConfigError, match=r"Unknown key 'nope' for accuracy run \(lru, mqar\) "
                                            r"task"):
        A.grid(dataclasses.replace(base, recipes=(A.Recipe(overrides=(("task.nope", 1),)),)))
    with pytest.raises(C.ConfigError, match=r"layer.r_min='low' is not a number"):
        A.grid(dataclasses.replace(base, recipes=(A.Recipe(overrides=(("layer.r_min", "low"),)),)))
    with pytest.raises(C.ConfigError, match="Unknown key 'colour'"):
        A.grid(dataclasses.replace(base, recipes=(A.Recipe(overrides=(("train.colour", 1),)),)))
    with pytest.raises(ValueError, match="must be \\(key, value\\) with a key starting with"):
        A.Recipe(overrides=(("lr", 0.1),))


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"models": "lru,gru"}, r"Unknown models \['gru'\]; accepted: lru, rotrnn, s4d, s5"),
        ({"tasks": "imagenet"}, r"Unknown tasks \['imagenet'\]; accepted: listops"),
        ({"seeds": "()"}, r"seeds must be non-negative integers, at least one"),
        ({"seeds": "1,1"}, r"seeds repeat a value"),
        ({"depths": "0"}, r"depths must be positive integers"),
        ({"task_preset": "huge"}, r"task_preset='huge' is not accepted"),
        ({"network.norm": "group"}, r"network.norm='group' is not accepted"),
        ({"train.steps": "0"}, r"steps must be a positive integer"),
    ],
)
def test_config_errors_name_the_accepted_values(overrides, message):
    with pytest.raises(C.ConfigError, match=message):
        A.STUDY.config("smoke", overrides)


def test_presets_cover_every_model_with_one_recipe_per_task():
    for name, preset in A.STUDY.presets.items():
        assert set(preset.models) == set(models.names()), name
        every = A.grid(preset)
        specs = [s for s in every if s.parameter_budget is None]  # equal width
        # Every (model, task, seed, depth) once per learning-rate pair of its task: the recipe's
        # alone, or the tuning grid's on a tuned task, there at its tuning seeds (the other
        # seeds join at the selected pair once the store holds the selection).
        pairs = {t: len(A.candidates(preset, next(s for s in specs if s.task == t)))
                 for t in preset.tasks}
        seeds = {t: len(A.tune_seeds(preset) if t in preset.tune_tasks else preset.seeds)
                 for t in preset.tasks}
        assert len(specs) == len(preset.models) * max(1, len(preset.depths)) * sum(
            pairs[t] * seeds[t] for t in preset.tasks)
        # A parameter-matched run only on a task of match_parameters, at its cell's pairs.
        assert {s.task for s in every if s.parameter_budget is not None} <= set(
            preset.match_parameters)
        assert all(pairs[t] == 1 for t in preset.tasks if t not in preset.tune_tasks)
        # Honest comparisons: within a task, every model gets the same steps, batch and width.
        for task in preset.tasks:
            same = {(s.train.steps, s.train.batch_size, s.network.d_model, s.network.depth)
                    for s in specs if s.task == task}
            assert len(same) == 1, (name, task, same)
    assert len(A.STUDY.presets["cpu"].seeds) >= 5  # effect sizes and intervals over five paired seeds
    # Every task of the default preset tuned on the same grid for every model (issue 27).
    assert set(A.STUDY.presets["cpu"].tune_tasks) == set(A.STUDY.presets["cpu"].tasks)
    # Exact tests that can reach 5 % after Holm over six pairs, on held-out seeds alone.
    full = A.STUDY.presets["cpu-full"]
    assert len(full.seeds) - full.tuning_seeds >= 10 and full.tuning_seeds >= 1


@pytest.mark.parametrize("preset", ["cpu", "cpu-full"])
def test_every_run_of_the_cpu_presets_is_evaluated_often_enough_to_show_a_plateau(preset):
    # Issue 42: a validation curve shows whether it has levelled off only with >= 8 points
    # (every eval_every steps and the last, as `harness.train` evaluates).
    for spec in A.grid(A.STUDY.config(preset)):
        steps, every = spec.train.steps, spec.train.eval_every
        evaluations = steps // every + (steps % every != 0)
        assert evaluations >= 8, (spec.task, steps, every)
