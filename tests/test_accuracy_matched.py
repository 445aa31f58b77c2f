"""Parameter-matched runs (`AccuracyConfig.match_parameters`): each model's recurrent layer
sized to the cell's budget within 5 % by its state size, run ids of equal-width runs unchanged,
the matched runs kept out of every equal-width table and shown in a table of their own."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest

from linrnn_bench.harness import config as _config
from linrnn_bench.harness.errors import ConfigError
from linrnn_bench.harness.report import origins
from linrnn_bench.harness.studies.accuracy.report import build
from linrnn_bench.harness.runner import run_study
from linrnn_bench.harness.store import Store
from linrnn_bench.harness.studies import _matched
from linrnn_bench.harness.studies import accuracy as A
from linrnn_bench.models.network import NetworkConfig


def _config_matched(**overrides) -> A.AccuracyConfig:
    # Width 16: at the smoke preset's 8 a state size's step moves a layer by more than 5 %.
    settings = dict(models=("rotrnn", "lru", "s4d"), seeds=(0, 1),
                    match_parameters=("digits",),
                    network=NetworkConfig(depth=1, d_model=16, d_state=16))
    return dataclasses.replace(A.STUDY.config("smoke"), **{**settings, **overrides})


@pytest.mark.parametrize("rule", ["smallest", "largest"])
def test_every_model_is_sized_to_the_budget_within_five_percent(rule):
    config = _config_matched(parameter_budget=rule)
    specs = A.grid(config)
    width = {s.network.layer: _matched.of_network(s.network) for s in specs
             if s.parameter_budget is None and s.seed == 0}
    budget = min(width.values()) if rule == "smallest" else max(width.values())
    matched = {s.network.layer: s for s in specs if s.parameter_budget is not None
               and s.seed == 0}
    for model, count in width.items():
        if abs(count - budget) <= 0.05 * budget:
            assert model not in matched  # within the budget already: its width runs serve
        else:
            spec = matched[model]
            assert spec.parameter_budget == budget
            assert abs(_matched.of_network(spec.network) - budget) <= 0.05 * budget
            assert spec.network.d_model == config.network.d_model
            assert spec.network.d_state != config.network.d_state
    # Every seed of a matched cell, at the same learning rates as its equal-width runs.
    assert len([s for s in specs if s.parameter_budget is not None]) == 2 * len(matched)


def test_equal_width_run_ids_are_those_recorded_before_the_option_existed():
    # The field is left out of a run's identity at its default: the hash of the dict without it.
    spec = A.grid(A.STUDY.config("smoke"))[0]
    tree = _config.to_dict(spec)
    assert "parameter_budget" not in tree
    assert A.STUDY.run_id(spec) == _config.config_hash(tree, A.STUDY.name, A.STUDY.version)
    sized = dataclasses.replace(spec, parameter_budget=1000)
    assert _config.to_dict(sized)["parameter_budget"] == 1000
    assert A.STUDY.run_id(sized) != A.STUDY.run_id(spec)


def test_a_budget_out_of_reach_or_not_accepted_is_refused():
    with pytest.raises(ConfigError, match=r"cannot be sized to 10 layer parameters within 5%"):
        A.grid(_config_matched(parameter_budget=10))
    with pytest.raises(ValueError, match=r"accepted values: \['smallest', 'largest'\]"):
        _config_matched(parameter_budget="median")
    with pytest.raises(ValueError, match="must be distinct members of tasks"):
        _config_matched(match_parameters=("listops",))


def test_matched_runs_have_their_own_table_and_leave_the_others_unchanged(tmp_path,
                                                                         monkeypatch):
    import matplotlib

    # The section draws its figures too (only its tables are read here, and then closed).
    monkeypatch.setitem(matplotlib.rcParams, "figure.max_open_warning", 0)
    config = _config_matched(models=("rotrnn", "lru"))  # the LRU sized down to RotRNN's
    store = Store(tmp_path / "matched.sqlite")
    run_study(A.STUDY, config, store=store, progress=False)
    matched_ids = [A.STUDY.run_id(s) for s in A.grid(config) if s.parameter_budget is not None]
    assert matched_ids and all(store.status(i) == "done" for i in matched_ids)

    def tables(of: Store) -> dict:
        import matplotlib.pyplot as plt

        with origins.reading(of):
            artifacts = {a.name: a for a in build(of)}
        plt.close("all")  # only the tables are read
        return artifacts

    with_matched = tables(store)
    table = with_matched["accuracy_matched"].frame
    models = set(table.index.get_level_values("Model"))
    assert models == {"RotRNN", "LRU"}
    sizes = [(int(v.split(" ")[0]), int(v.split("(")[1].rstrip(")")))
             for v in table["layer parameters (budget)"]]
    budgets = {b for _, b in sizes}
    assert len(budgets) == 1
    assert all(abs(count - b) <= 0.05 * b for count, b in sizes)
    assert table["n seeds"].eq(2).all()
    # Its pair, paired by seed within the matched arm: 2 seeds.
    pairs = with_matched["accuracy_matched_significance"].frame
    assert len(pairs) == 1 and pairs["paired seeds"].eq(2).all()
    assert with_matched["accuracy_matched_significance"].caption.startswith(
        "At a common parameter budget")
    # The equal-width tables read only the equal-width runs: the same with the matched deleted.
    store.delete(matched_ids)
    without = tables(store)
    for name in ("accuracy_test", "accuracy_detail", "accuracy_significance"):
        assert with_matched[name].frame.equals(without[name].frame), name
    assert with_matched["accuracy_detail"].caption == without["accuracy_detail"].caption
    # A grid that sizes no task to a budget, without such runs: no matched table at all.
    assert "accuracy_matched" not in without and "accuracy_matched_significance" not in without


def test_a_preset_that_sizes_a_task_says_its_matched_runs_are_missing(tmp_path):
    from linrnn_bench.harness.studies.accuracy import report as section
    from linrnn_bench.harness.report.artifacts import Missing

    store = Store(tmp_path / "empty.sqlite")
    labels = section.Labels(pd.DataFrame({"depth": [2], "task": ["listops"],
                                          "cfg.task_options": [[]]}))
    missing = section._matched_artifacts(store, "cpu-full", pd.DataFrame(), labels, "", "")
    assert [m.name for m in missing] == ["accuracy_matched", "accuracy_matched_significance"]
    assert all(isinstance(m, Missing) and "preset cpu-full sizes ListOps" in m.reason
               for m in missing)
    assert section._matched_artifacts(store, "cpu", pd.DataFrame(), labels, "", "") == []
