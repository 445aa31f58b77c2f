"""A tuning grid that brackets each cell's optimum (`AccuracyConfig.lr_extend`): the pair beyond
an end continues the grid's spacing; a cell grows only once its seeds have finished, only while
its selection (on validation) lies at an end, never past the bound; the runner runs what the
grid gains; the report's presets count the added runs as the preset's own."""

from __future__ import annotations

import dataclasses
import math

import matplotlib.pyplot as plt
import pandas as pd
import pytest

from linrnn_bench.harness.errors import Diverged
from linrnn_bench.harness.runner import run_study
from linrnn_bench.harness.store import Store
from linrnn_bench.harness.studies import accuracy as A

_GRID = dict(lr_grid=(3e-3, 1e-2, 3e-2), recurrent_lr_grid=(1e-3, 3e-3, 1e-2),
             lr_pairing="paired")


def _config(lr_extend: int, **overrides) -> A.AccuracyConfig:
    return dataclasses.replace(
        A.STUDY.config("smoke"), models=("lru",), tasks=("digits",), tune_tasks=("digits",),
        lr_extend=lr_extend, **{"seeds": (1, 2), **_GRID, **overrides})


def _study(best_lr: float, *, fail_lr: float | None = None,
           diverge_above: float = math.inf) -> A.Study:
    """The accuracy study with training replaced by a validation accuracy that peaks at
    ``best_lr`` (on a log scale), the same for every seed; ``fail_lr`` raises; a shared rate
    above ``diverge_above`` diverges."""

    def run(spec: A.RunSpec) -> list[dict]:
        if fail_lr is not None and math.isclose(spec.train.lr, fail_lr):
            raise RuntimeError("this run fails")
        if spec.train.lr > diverge_above:
            raise Diverged("non-finite loss", [{"kind": "diverged", "step": 2}], step=2)
        accuracy = 0.9 - 0.1 * abs(math.log10(spec.train.lr / best_lr))
        return [{"kind": "final", "step": 4, "val_accuracy": accuracy, "val_loss": 1 - accuracy,
                 "test_accuracy": accuracy, "test_loss": 1 - accuracy, "selection": "accuracy"}]

    return dataclasses.replace(A.STUDY, run=run, group=None, run_group=None)


def _pairs(config: A.AccuracyConfig) -> list[tuple[float, float]]:
    return sorted({(s.train.lr, s.train.recurrent_lr) for s in A.grid(config)})


def test_the_pair_beyond_an_end_continues_the_grids_spacing():
    pairs = list(zip(_GRID["lr_grid"], _GRID["recurrent_lr_grid"]))
    assert A.next_pair(pairs, +1) == (0.1, 0.03)
    assert A.next_pair(pairs, -1) == (0.001, 0.0003)
    assert A.next_pair([*pairs, (0.1, 0.03)], +1) == (0.3, 0.1)
    assert A.next_pair([(1e-3, 1e-3), (2e-3, 1e-3)], +1) == (4e-3, 1e-3)  # geometric: its factor


@pytest.mark.parametrize("best_lr, expected_top",
                         [(0.1, (0.3, 0.1)), (0.03, (0.1, 0.03)), (10.0, (0.3, 0.1))])
def test_the_grid_grows_until_the_selection_is_inside_or_the_bound_is_reached(
        tmp_path, best_lr, expected_top):
    store = Store(tmp_path / "s.sqlite")
    config = _config(lr_extend=2)
    study = _study(best_lr)
    summary = run_study(study, config, store=store, progress=False)
    bound = study.bind(config, store)
    pairs = _pairs(bound)
    # The peak at 0.1 is bracketed by 0.03 and 0.3 (two steps up); one at 0.03 by 0.01 and 0.1
    # (one step); one at 10 stays at the end after the bound of two steps.
    assert pairs[-1] == expected_top
    assert pairs[0] == (3e-3, 1e-3)  # the smallest pair is never selected: no step down
    assert len(pairs) == 3 + len(bound.lr_extensions)
    assert {e[:3] for e in bound.lr_extensions} <= {("lru", "digits", 1)}
    # Every run of the grown grid ran, once.
    assert set(store.recorded("accuracy")) == {study.run_id(s) for s in A.grid(bound)}
    assert summary.counts == {"done": 2 * len(pairs)}
    # A second call finds nothing to do and the same grid.
    assert run_study(study, config, store=store, progress=False).counts == {}
    assert study.bind(config, store) == bound


def test_a_cell_waits_for_its_every_seed_and_a_grid_without_lr_extend_stays(tmp_path):
    store = Store(tmp_path / "s.sqlite")
    # The end pair fails for one run: the cell is undecided, so the grid does not grow.
    summary = run_study(_study(1.0, fail_lr=3e-2), _config(lr_extend=2), store=store,
                        progress=False)
    assert summary.counts == {"done": 4, "failed": 2}
    assert A.STUDY.bind(_config(lr_extend=2), store).lr_extensions == ()
    # Without lr_extend the grid is the config's, whatever the store holds.
    assert _pairs(A.STUDY.bind(_config(lr_extend=0), store)) == _pairs(_config(lr_extend=0))


@pytest.mark.parametrize("best_lr, grown", [(10.0, [(0.1, 0.1), (1.0, 1.0)]),
                                             (1e-6, [(1e-4, 1e-4), (1e-5, 1e-5)])])
def test_the_grid_grows_along_its_own_diagonal_whatever_the_recipe(tmp_path, best_lr, grown):
    # The recipe's pair (3e-3, 1e-3) is trained beside this two-pair diagonal but is not on it:
    # each step beyond an end continues the grid's own spacing (both rates times 10), not one
    # measured through the recipe's pair (which stepped to (3e-2, 1e-2), off the diagonal).
    store = Store(tmp_path / "s.sqlite")
    config = _config(lr_extend=2, lr_grid=(1e-3, 1e-2), recurrent_lr_grid=(1e-3, 1e-2))
    assert (config.train.lr, config.train.recurrent_lr) == (3e-3, 1e-3)
    study = _study(best_lr)
    run_study(study, config, store=store, progress=False)
    bound = study.bind(config, store)
    assert [e[3:] for e in bound.lr_extensions] == grown
    # What a plan prices (`widest`) holds what the grid grew into.
    assert set(bound.lr_extensions) <= set(A.widest(config).lr_extensions)


def test_a_plan_prices_the_widest_grid():
    config = _config(lr_extend=2)
    assert _pairs(A.widest(config)) == [(3e-4, 1e-4), (1e-3, 3e-4), (3e-3, 1e-3),
                                        (1e-2, 3e-3), (3e-2, 1e-2), (0.1, 0.03), (0.3, 0.1)]
    assert A.widest(_config(lr_extend=0)) == _config(lr_extend=0)


def test_lr_extend_is_refused_where_it_cannot_apply():
    with pytest.raises(ValueError, match="lr_extend must be an integer from 0 to"):
        _config(lr_extend=-1)
    with pytest.raises(ValueError, match="needs lr_pairing='paired'"):
        _config(lr_extend=1, lr_pairing="product")


def test_the_report_says_whether_each_optimum_is_bracketed(tmp_path):
    from linrnn_bench.harness.report import origins, selection

    store = Store(tmp_path / "s.sqlite")
    run_study(_study(10.0), _config(lr_extend=1), store=store, progress=False)
    with origins.reading(store):
        table = selection.bracketing(store)
    # A peak beyond the grid grown by one step: still at the largest pair, not bracketed.
    assert table[["model", "task", "pairs", "highest", "position", "bracketed"]].values.tolist() == [
        ["lru", "digits", 4, 0.1, "largest", False]]
    grown = Store(tmp_path / "t.sqlite")
    run_study(_study(0.03), _config(lr_extend=1), store=grown, progress=False)
    with origins.reading(grown):
        assert selection.bracketing(grown)["bracketed"].tolist() == [True]


# --------------------------------------------------------------------------------------------
# Tuning on the first seeds, the other seeds at the selected pair (`tuning_seeds`)


def test_the_other_seeds_run_at_the_selected_pair_once_the_selection_is_final(tmp_path):
    store = Store(tmp_path / "s.sqlite")
    config = _config(lr_extend=2, seeds=(1, 2, 3), tuning_seeds=1)
    study = _study(0.1)
    assert A.tune_seeds(config) == (1,)
    # Before anything ran: the tuning seed at every pair of the grid, no other seed.
    assert {s.seed for s in A.grid(config)} == {1}
    summary = run_study(study, config, store=store, progress=False)
    bound = study.bind(config, store)
    # Seed 1 climbed 3e-2 -> 0.1 -> 0.3 and selected 0.1 (bracketed); seeds 2 and 3 then ran
    # there alone: 5 + 2 runs, each once.
    assert bound.lr_selected == (("lru", "digits", 1, 0.1, 0.03),)
    by_seed = {}
    for s in A.grid(bound):
        by_seed.setdefault(s.seed, set()).add((s.train.lr, s.train.recurrent_lr))
    assert by_seed[1] == {(3e-3, 1e-3), (1e-2, 3e-3), (3e-2, 1e-2), (0.1, 0.03), (0.3, 0.1)}
    assert by_seed[2] == by_seed[3] == {(0.1, 0.03)}
    assert summary.counts == {"done": 7}
    assert set(store.recorded("accuracy")) == {study.run_id(s) for s in A.grid(bound)}
    # A completing run is the very run the full grid would have trained (the same id).
    full = A.widest(dataclasses.replace(config, tuning_seeds=0))  # every seed, every pair
    assert {study.run_id(s) for s in A.grid(bound)} < {study.run_id(s) for s in A.grid(full)}
    assert run_study(study, config, store=store, progress=False).counts == {}
    # The report selects on the tuning seed: the tuned configuration is every seed at 0.1.
    from linrnn_bench.harness.report import origins, selection

    with origins.reading(store):
        assert selection.tuned_rates(store) == {("lru", "digits", 1): (0.1, 0.03)}
        assert selection.bracketing(store)["bracketed"].tolist() == [True]


def test_no_other_seed_runs_while_the_tuning_seeds_are_undecided(tmp_path):
    store = Store(tmp_path / "s.sqlite")
    config = _config(lr_extend=0, seeds=(1, 2, 3), tuning_seeds=2)
    summary = run_study(_study(1.0, fail_lr=3e-2), config, store=store, progress=False)
    # The failed runs leave the cell undecided: seed 3 waits (failed runs are retried by the
    # next call); without lr_extend a decided cell completes at once.
    assert summary.counts == {"done": 4, "failed": 2}
    assert A.STUDY.bind(config, store).lr_selected == ()
    done = Store(tmp_path / "t.sqlite")
    summary = run_study(_study(1.0), config, store=done, progress=False)
    assert summary.counts == {"done": 7}
    assert A.STUDY.bind(config, done).lr_selected == (("lru", "digits", 1, 3e-2, 1e-2),)


def test_selection_reads_the_seeds_trained_at_every_pair():
    rows = pd.DataFrame({
        "seed": [1, 1, 2, 3], A.LR: [1e-3, 1e-2, 1e-2, 1e-2], A.RECURRENT_LR: [1e-3] * 4,
        "val_accuracy": [0.8, 0.7, 0.99, 0.99], "val_loss": [0.2, 0.3, 0.0, 0.0]})
    # Seeds 2 and 3 ran at 1e-2 only (after seed 1 chose it, say): they do not weigh in.
    assert A.select(rows, "accuracy") == (1e-3, 1e-3)
    assert A.selecting(rows)["seed"].tolist() == [1, 1]
    # Every seed at every pair: all of them count, as before.
    both = pd.concat([rows, rows.iloc[[0, 0]].assign(seed=[2, 3])])
    assert A.select(both, "accuracy") == (1e-2, 1e-3)


def test_tuning_seeds_is_checked_and_a_plan_prices_the_completing_seeds():
    with pytest.raises(ValueError, match="tuning_seeds must be a non-negative integer"):
        _config(lr_extend=0, tuning_seeds=-1)
    config = _config(lr_extend=1, seeds=(1, 2, 3), tuning_seeds=1)
    wide = A.grid(A.widest(config))
    # Seed 1 at the grid's 3 pairs and one step beyond each end; seeds 2 and 3 at one pair.
    assert sorted(s.seed for s in wide) == [1] * 5 + [2, 3]
    # tuning_seeds as many as the seeds: every seed at every pair.
    assert A.tune_seeds(_config(lr_extend=0, tuning_seeds=2)) == (1, 2)


def test_tuning_seeds_that_cannot_mean_anything_are_refused():
    with pytest.raises(ValueError, match=r"tuning_seeds=5 is more than the 2 seeds.*"
                                         r"accepted: 0 to 2"):
        _config(lr_extend=0, tuning_seeds=5)
    with pytest.raises(ValueError, match=r"tuning_seeds=1 needs a tuned task.*tune_tasks is "
                                         r"empty.*accepted: tuning_seeds=0"):
        dataclasses.replace(_config(lr_extend=0), tune_tasks=(), tuning_seeds=1)
    # A preset's tuning_seeds (cpu: 2) does not stop `train`'s one run at the recipe (no
    # tuned task, the seeds given), nor the sizing of its parameter-matched runs.
    cpu = A.STUDY.config("cpu", {"match_parameters": "digits"})
    assert cpu.tuning_seeds == 2 and A._sizing_key(cpu).tuning_seeds == 0
    from linrnn_bench.harness.cli import main

    assert main(["train", "model=lru", "task=digits", "seed=0", "--explain"]) == 0


def test_a_diverged_rate_above_the_selected_one_brackets_it(tmp_path):
    from linrnn_bench.harness.report import origins, selection

    store = Store(tmp_path / "s.sqlite")
    # Better and better up to 0.1; 0.3 diverges: 0.1 is selected, bracketed by the diverged
    # pair above it (tried, and worse than any finished one), and the grid stops growing.
    summary = run_study(_study(10.0, diverge_above=0.2), _config(lr_extend=3), store=store,
                        progress=False)
    assert summary.counts == {"done": 8, "diverged": 2}
    with origins.reading(store):
        table = selection.bracketing(store)
    assert table[["lr", "pairs", "highest", "position", "bracketed"]].values.tolist() == [
        [0.1, 5, 0.3, "inside", True]]


def test_a_layer_outside_the_presets_list_keeps_its_tuned_runs_in_the_preset(tmp_path,
                                                                              monkeypatch):
    from linrnn_bench.harness.report import origins

    # The cpu preset as if it listed RotRNN alone: the LRU's runs stand for a user's layer,
    # whose preset is found by building the grid with it as the only model.
    cpu = dataclasses.replace(A.STUDY.presets["cpu"], models=("rotrnn",))
    monkeypatch.setitem(A.STUDY.presets, "cpu", cpu)
    store = Store(tmp_path / "s.sqlite")
    config = dataclasses.replace(cpu, models=("lru",))
    run_study(_study(0.03), config, store=store, progress=False)
    ids = set(store.recorded("accuracy"))
    completing = {A.STUDY.run_id(s) for s in A.grid(A.STUDY.bind(config, store))
                  if s.seed not in A.tune_seeds(config)}
    assert completing and completing <= ids  # seeds 2-4 ran at each cell's selected pair
    with origins.reading(store):
        labels = origins.run_presets("accuracy", sorted(ids), dict.fromkeys(ids, "lru"))
    # Every run, the completing ones and the grid's growth included, is the preset's.
    assert {labels[i] for i in ids} == {"cpu"}


def test_no_tuning_seed_enters_a_tuned_mean_or_test(tmp_path):
    from linrnn_bench.harness.report import origins
    from linrnn_bench.harness.studies.accuracy import report as accuracy
    from linrnn_bench.harness.studies.accuracy.report import _data

    # Seed 1 tunes; seeds 2 and 3 are held out. The tuning seed's test accuracy is made 1.0 at
    # every pair, so that any leak of it into a tuned mean shows.
    base = _study(0.03)

    def run(spec: A.RunSpec) -> list[dict]:
        rows = base.run(spec)
        return [{**rows[-1], "test_accuracy": 1.0}] if spec.seed == 1 else rows

    store = Store(tmp_path / "s.sqlite")
    config = dataclasses.replace(_config(lr_extend=0, seeds=(1, 2, 3), tuning_seeds=1),
                                 models=("lru", "s5"))
    run_study(dataclasses.replace(base, run=run), config, store=store, progress=False)
    with origins.reading(store):
        selection = _data.load(store)
        artifacts = {a.name: a for a in accuracy.build(store)}
    plt.close("all")  # only the tables are read
    tuned = selection.tuned_final
    assert set(tuned["seed"]) == {2, 3} and set(tuned["lr"]) == {3e-2}
    # Seed 1 chose the pair (it is the one trained at every pair) and is in no tuned number.
    assert selection.final.loc[selection.final["seed"] == 1, "tuned"].eq(False).all()
    assert selection.final.loc[selection.final["seed"] == 1, "selected"].any()
    assert artifacts["accuracy_tuned"].frame.at["LRU", "Sequential digits"] == pytest.approx(90.0)
    assert set(artifacts["accuracy_significance"].frame["paired seeds"]) == {2}


def test_a_store_without_held_out_seeds_shows_no_tuned_number(tmp_path):
    from linrnn_bench.harness.report import origins
    from linrnn_bench.harness.studies.accuracy import report as accuracy

    store = Store(tmp_path / "s.sqlite")
    config = _config(lr_extend=0, seeds=(1, 2), tuning_seeds=0)  # every seed at every pair
    run_study(_study(0.03), config, store=store, progress=False)
    with origins.reading(store):
        artifacts = {a.name: a for a in accuracy.build(store)}
    plt.close("all")
    assert "no seed is held out" in artifacts["accuracy_tuned"].reason
    assert "no seed is held out" in artifacts["accuracy_significance"].reason
    assert artifacts["accuracy_test"].frame.shape[0] >= 1  # the one recipe is still shown


def test_a_matched_cell_is_tuned_on_its_own_tuning_seeds_and_holds_the_others_out():
    config = dataclasses.replace(
        _config(lr_extend=1, seeds=(1, 2, 3), tuning_seeds=1), models=("rotrnn", "lru"),
        match_parameters=("digits",),
        network=dataclasses.replace(A.STUDY.config("smoke").network, d_model=16, d_state=16))
    specs = A.grid(config)
    matched = [s for s in specs if s.parameter_budget is not None]
    # Before any selection: the tuning seed alone, at every pair, in both arms.
    assert matched and {s.seed for s in specs} == {1}
    cells = {A.cell_key(s) for s in matched}
    assert all(model.startswith("matched:") for model, _, _ in cells)
    # A matched cell's selection trains its held-out seeds at its own pair.
    (model, task, depth), = cells
    bound = dataclasses.replace(config, lr_selected=((model, task, depth, 1e-2, 3e-3),))
    held = [s for s in A.grid(bound) if s.parameter_budget is not None and s.seed != 1]
    assert {(s.seed, s.train.lr) for s in held} == {(2, 1e-2), (3, 1e-2)}
    # The widest grid prices the matched cell's growth and held-out seeds too.
    wide = [s for s in A.grid(A.widest(config)) if s.parameter_budget is not None]
    assert {s.seed for s in wide} == {1, 2, 3} and len(wide) == 5 + 2
