"""Seed groups: k seeds of one configuration trained as one program equal k separate runs.

`harness.train.train_group` stacks the seeds' parameters and optimiser states on a leading axis
and runs `train`'s own step under `jax.vmap`. What must hold: each seed's rows and final
parameters equal a separate `train` of that seed up to float round-off, for every registered
layer and an outside one; a diverged seed is recorded as `train` records it and the others go
on; a group interrupted after a checkpoint resumes to the same rows; the store sees one run per
seed, with the run id of a separate run; and a grouped grid killed with SIGKILL resumes with
nothing lost or doubled.

Tolerance: vmap batches the same operations in the same order per seed, but XLA may lower a
batched matrix product or reduction differently (another blocking, another summation order), so
a seed's numbers may differ from the separate run's in the last bits: float32 round-off, about
1e-7 relative per operation, grown over a few steps of Adam. Measured worst differences over
these runs: 5e-7 on the metrics (losses, accuracies) and 1.2e-7 on the parameters at the
digits smoke size, 2.3e-6 on one LRU parameter at the ListOps smoke size (see `PARAM_ATOL`).
The bounds asserted, rtol = 1e-5 with atol = 1e-6 (metrics) and 1e-5 (parameters), are a few
times the largest seen and far below any difference a bug would make (a wrong seed, batch or
key changes the loss in its first digits).
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import equinox as eqx
import jax
import numpy as np
import pandas as pd
import pytest

from linrnn_bench import models
from linrnn_bench import tasks
from linrnn_bench.harness import train as T
from linrnn_bench.harness.errors import Diverged
from linrnn_bench.harness.runner import pending, run_study
from linrnn_bench.harness.store import Store
from linrnn_bench.harness.studies import Group, accuracy
from linrnn_bench.models.network import NetworkConfig

from helpers import isolated_registry

TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS))
import _group_fault_study  # noqa: E402  (after the path: spawned workers import it by name)

RTOL, ATOL = 1e-5, 1e-6
# Parameters: Adam divides each gradient component by its own root mean square, so a component
# that is itself of round-off size moves by up to the learning rate (3e-3 here) in a direction
# round-off picks; the worst seen was 2.3e-6 (LRU). 1e-5 is four times that and 300 times below
# one step of the learning rate, which a wrong batch, seed or key would show.
PARAM_ATOL = 1e-5
SEEDS = (0, 1)
CONFIG = T.TrainConfig(steps=3, batch_size=8, eval_every=2, eval_batch_size=64)
S6 = "examples.s6:S6"


@pytest.fixture(scope="module")
def task():
    return tasks.build("listops", **tasks.preset_options("listops", "smoke"))


def _network(layer: str) -> NetworkConfig:
    return NetworkConfig(layer=layer, depth=1, d_model=8, d_state=8)


def _assert_rows_close(group_rows, alone_rows) -> None:
    assert len(group_rows) == len(alone_rows)
    for g, a in zip(group_rows, alone_rows):
        assert g.keys() == a.keys()
        for key in g:
            if key.endswith("_seconds"):
                continue
            if isinstance(a[key], float):
                np.testing.assert_allclose(g[key], a[key], rtol=RTOL, atol=ATOL, err_msg=key)
            else:
                assert g[key] == a[key], key


def _assert_trees_close(x, y) -> None:
    xs = jax.tree.leaves(eqx.filter(x, eqx.is_array))
    ys = jax.tree.leaves(eqx.filter(y, eqx.is_array))
    assert len(xs) == len(ys) > 0
    for u, v in zip(xs, ys):
        np.testing.assert_allclose(np.asarray(u), np.asarray(v), rtol=RTOL, atol=PARAM_ATOL)


def _check_equivalent(layer: str, task) -> None:
    grouped = T.train_group(_network(layer), task, CONFIG, seeds=SEEDS)
    for seed, result in zip(SEEDS, grouped):
        alone = T.train(_network(layer), task, CONFIG, seed=seed)
        assert isinstance(result, T.TrainResult)
        _assert_rows_close(result.rows, alone.rows)
        _assert_trees_close(result.network, alone.network)
        _assert_trees_close(result.best_network, alone.best_network)
    # The seeds are different runs (else the comparison above would prove little).
    assert grouped[0].final["val_loss"] != grouped[1].final["val_loss"]


@pytest.mark.parametrize("layer", models.names())
def test_each_seed_of_a_group_equals_its_separate_run(layer, task):
    _check_equivalent(layer, task)


def test_an_outside_layer_trains_in_a_group_as_alone(task):
    with isolated_registry("examples.s6", "examples"):
        _check_equivalent(models.resolve(S6), task)


class _Poisoned:
    """A task whose training example ``bad`` has a non-finite input: the seeds whose batches
    draw it diverge there, the others never see it."""

    def __init__(self, task, bad: int):
        self.info, self.config, self._task = task.info, task.config, task
        inputs = np.array(task.split("train").inputs, dtype=np.float32)
        inputs[bad] = np.nan
        self._train = dataclasses.replace(task.split("train"), inputs=inputs)

    def split(self, name: str):
        return self._train if name == "train" else self._task.split(name)


def test_a_diverged_seed_does_not_stop_the_others():
    task = tasks.build("adding", **tasks.preset_options("adding", "smoke"))
    config = T.TrainConfig(steps=4, batch_size=8, eval_every=2, eval_batch_size=64)
    split = task.split("train")
    seen = {s: [T.BatchSampler(split, 8, s).indices(i) for i in range(4)] for s in SEEDS}
    # An example in seed 0's third batch that seed 1 never draws: seed 0 diverges at step 3.
    bad = next(int(i) for i in seen[0][2] if not any(i in b for b in seen[1]))
    poisoned = _Poisoned(task, bad)
    network = _network("lru")
    grouped = T.train_group(network, poisoned, config, seeds=SEEDS)
    with pytest.raises(Diverged) as alone:
        T.train(network, poisoned, config, seed=0)
    assert isinstance(grouped[0], Diverged) and grouped[0].step == alone.value.step == 3
    _assert_rows_close(grouped[0].rows, alone.value.rows)
    assert isinstance(grouped[1], T.TrainResult)
    _assert_rows_close(grouped[1].rows, T.train(network, poisoned, config, seed=1).rows)
    assert np.isfinite(grouped[1].final["test_loss"])


def test_an_interrupted_group_resumes_from_its_checkpoints(task, tmp_path):
    network = _network("s4d")
    config = dataclasses.replace(CONFIG, steps=4)
    paths = [tmp_path / f"run-{s}.eqx" for s in SEEDS]
    whole = T.train_group(network, task, config, seeds=SEEDS)

    class Stop(Exception):
        pass

    def stop_after_first_checkpoint(step, net, state):
        if step == 4:  # after the step-2 checkpoints were written
            raise Stop
        return []

    with pytest.raises(Stop):
        T.train_group(network, task, config, seeds=SEEDS, checkpoints=paths,
                      on_eval=stop_after_first_checkpoint)
    assert all(p.exists() for p in paths)
    # Seed 1 resumes alone (a separate run reads a group's checkpoint), seed 0 in a group.
    resumed_alone = T.train(network, task, config, seed=1, checkpoint=paths[1])
    resumed = T.train_group(network, task, config, seeds=SEEDS, checkpoints=paths)
    assert not any(p.exists() for p in paths)
    for before, after in zip(whole, resumed):
        _assert_rows_close(after.rows, before.rows)
    _assert_rows_close(resumed_alone.rows, whole[1].rows)


def test_a_grouped_run_has_the_id_and_rows_of_a_separate_one(tmp_path, monkeypatch):
    monkeypatch.setenv("LINRNN_CHECKPOINTS", str(tmp_path / "checkpoints"))
    study = accuracy.STUDY
    config = study.config("smoke", {"models": "lru", "seeds": "0,1,2", "group_seeds": "true"})
    alone = dataclasses.replace(config, group_seeds=False)
    specs = study.grid(config)
    assert [study.run_id(s) for s in specs] == [study.run_id(s) for s in study.grid(alone)]
    assert study.units(config, specs) == [Group(tuple(specs))]
    assert study.units(alone, specs) == specs
    # One seed recorded alone; the grid then groups only the two that are missing.
    store = Store(tmp_path / "store.sqlite")
    run_study(study, dataclasses.replace(alone, seeds=(1,)), store=store, progress=False)
    todo = pending(study, specs, store, fresh=False)
    assert [s.seed for s in todo] == [0, 2]
    assert study.units(config, todo) == [Group(tuple(todo))]
    summary = run_study(study, config, store=store, progress=False)
    assert summary.counts == {"done": 2} and summary.skipped == 1
    runs = store.runs("accuracy").set_index("run_id")
    assert sorted(runs.index) == sorted(study.run_id(s) for s in specs)
    groups = {int(s): int(g) for s, g in zip(runs["seed"], runs["prov.seed_group"])}
    assert groups == {0: 2, 1: 1, 2: 2}
    # Seed 0 trained alone gives the grouped seed 0's rows.
    other = Store(tmp_path / "alone.sqlite")
    run_study(study, dataclasses.replace(alone, seeds=(0,)), store=other, progress=False)
    rows = store.read("accuracy")
    grouped = rows[rows["cfg.seed"] == 0].to_dict("records")
    single = other.read("accuracy").to_dict("records")
    keep = lambda r: {k: v for k, v in r.items()  # noqa: E731
                      if not k.startswith("prov.") and not k.endswith(("_at", "_seconds"))
                      and not (isinstance(v, float) and np.isnan(v))}
    _assert_rows_close([keep(r) for r in grouped], [keep(r) for r in single])


def test_a_killed_grouped_grid_resumes_with_nothing_lost_or_doubled(tmp_path):
    """SIGKILL the driver of a grouped grid (the processes executor, two workers) while groups
    are in flight; the rerun records every run once, with the rows of an uninterrupted grid."""
    baseline = Store(tmp_path / "baseline.sqlite")
    os.environ["LINRNN_FAULT_SLEEP"] = "0"
    try:
        run_study(_group_fault_study.STUDY, None, store=baseline, progress=False)
    finally:
        del os.environ["LINRNN_FAULT_SLEEP"]
    store_path = tmp_path / "store.sqlite"
    Store(store_path)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS.parent), str(TESTS)]),
           "LINRNN_JAX_CACHE": ""}
    driver = subprocess.Popen(
        [sys.executable, "-c",
         f"import sys, _group_fault_study as g; sys.exit(g.main({str(store_path)!r}, 2))"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not Store(store_path).recorded(_group_fault_study.STUDY.name):
        assert time.monotonic() < deadline and driver.poll() is None, "no run was recorded"
        time.sleep(0.02)
    driver.send_signal(signal.SIGKILL)
    driver.wait()
    store = Store(store_path)
    recorded = store.recorded(_group_fault_study.STUDY.name)
    assert 0 < len(recorded) < _group_fault_study.RUNS  # killed in the middle
    summary = run_study(_group_fault_study.STUDY, None, store=store, progress=False)
    assert summary.skipped == len(recorded)
    assert summary.counts == {"done": _group_fault_study.RUNS - len(recorded)}
    assert _fault_rows(store).equals(_fault_rows(baseline))


def _fault_rows(store: Store) -> pd.DataFrame:
    frame = store.read(_group_fault_study.STUDY.name)
    keep = [c for c in frame.columns if not c.startswith("prov.") and not c.endswith("_at")]
    return frame[keep].sort_values(["run_id", "j"]).reset_index(drop=True)
