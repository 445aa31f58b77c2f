"""The stability study's initialisation sweep: head count x probe length x depth, before any
training (`StabilityConfig.init_seeds` and `sweep_heads`, `harness.studies.stability.report.sweep`)."""

from __future__ import annotations

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

from linrnn_bench import models
from linrnn_bench import tasks
from helpers import assert_printable, tol
from linrnn_bench.harness import train as training
from linrnn_bench.harness.report import _layout
from linrnn_bench.harness.studies.stability import report as stability_report
from linrnn_bench.harness.report.artifacts import Figure, Finding, Missing, Table
from linrnn_bench.harness.studies.stability.report import sweep
from linrnn_bench.harness.runner import run_study
from linrnn_bench.harness.store import Store
from linrnn_bench.harness.studies import stability_probe, stability

# Init-only networks of two blocks: RotRNN at its smoke head count (2) and swept at 1 and 4,
# the LRU (no heads option) beside it; three seeds.
TINY = dataclasses.replace(
    stability.STUDY.config("smoke"), depths=(2,), train_depths=(), seeds=(0, 1),
    init_seeds=(0, 1, 2), sweep_heads=(1, 2, 4))


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    store = Store(tmp_path_factory.mktemp("sweep") / "store.sqlite")
    summary = run_study(stability.STUDY, TINY, store=store, progress=False)
    return store, summary


def test_the_grid_adds_the_sweep_without_changing_a_run_id():
    cpu = stability.PRESETS["cpu"]
    plain = dataclasses.replace(cpu, init_seeds=(), sweep_heads=())
    ids = {stability.STUDY.run_id(s) for s in stability.grid(plain)}
    specs = stability.grid(cpu)
    assert len({stability.STUDY.run_id(s) for s in specs}) == len(specs)
    ordinary = [s for s in specs if not s.sweep]
    # The ordinary runs at the preset's seeds keep their ids (the sweep flag is left out of a
    # run's identity while False); the untrained depths add the extra seeds of init_seeds.
    assert {stability.STUDY.run_id(s) for s in ordinary if s.seed in cpu.seeds} == ids
    for s in ordinary:
        assert s.seed in (cpu.seeds if s.train is not None else cpu.init_seeds)
    swept_specs = [s for s in specs if s.sweep]
    deepest = max(cpu.depths)
    with_heads = [v for v in cpu.variants
                  if "heads" in models.info(stability.variant(v).model).option_names()]
    assert {s.variant for s in swept_specs} == set(with_heads) and with_heads
    for s in swept_specs:
        assert s.train is None and s.network.depth == deepest and s.seed in cpu.init_seeds
        assert dict(s.network.layer_options)["heads"] in cpu.sweep_heads
    # The registration's own head count is the ordinary run, not measured twice.
    own = {s.variant: dict(s.network.layer_options)["heads"] for s in ordinary
           if s.variant in with_heads}
    assert all(dict(s.network.layer_options)["heads"] != own[s.variant] for s in swept_specs)
    assert len(swept_specs) == len(with_heads) * len(cpu.init_seeds) * sum(
        h != own["rotrnn"] for h in cpu.sweep_heads)


def test_sweep_settings_are_checked():
    with pytest.raises(ValueError, match="sweep_heads must be distinct"):
        stability.StabilityConfig(sweep_heads=(2, 2))
    with pytest.raises(ValueError, match="init_seeds must be distinct"):
        stability.StabilityConfig(init_seeds=(0, 0))
    with pytest.raises(ValueError, match="sweep_heads"):
        stability.StabilityConfig(sweep_heads=(0,))
    # A head count the layer cannot take: its config's error, naming the accepted ones.
    with pytest.raises(ValueError, match="accepted heads"):
        stability.grid(dataclasses.replace(stability.PRESETS["cpu"], sweep_heads=(3,)))


def _clone(state):
    """A fresh copy of an equinox state, which refuses to be used twice."""
    leaves, treedef = jax.tree_util.tree_flatten(state)
    return jax.tree_util.tree_unflatten(treedef, leaves)


def test_the_first_layers_of_a_deeper_network_are_a_shallower_network(getkey):
    # What lets the sweep read a network of depth d off the first d layers of a deeper one: a
    # layer's state norms depend only on the blocks below it.
    spec = next(s for s in stability.grid(TINY) if s.variant == "rotrnn")
    task = tasks.build(spec.task, **dict(spec.task_options))
    deep = dataclasses.replace(spec.network, depth=4)
    network, state = training.build_network(deep, task.info, key=getkey())
    shallow = eqx.tree_at(lambda n: n.blocks, network, network.blocks[:2])
    split = task.split("val")
    inputs, lengths = jnp.asarray(split.inputs[:6]), jnp.asarray(split.lengths[:6])
    if inputs.ndim == 3 and task.info.input_kind == "tokens":  # a pair task: its first sequence
        inputs = inputs[:, 0]
    full = np.asarray(stability_probe.state_norms(network, _clone(state), inputs, lengths))
    prefix = np.asarray(stability_probe.state_norms(shallow, _clone(state), inputs, lengths))
    assert full.shape[1] == 4 and prefix.shape[1] == 2
    np.testing.assert_allclose(prefix, full[:, :2], **tol(np.float32))


def test_the_sweep_in_the_report(swept):
    store, summary = swept
    assert summary.counts == {"done": 12}
    artifacts = stability_report.section(store)
    assert_printable(artifacts)
    by_name = {a.name: a for a in artifacts}
    table = by_name["stability_init_sweep_listops"]
    assert isinstance(table, Table)
    index = table.frame.index
    assert set(index.get_level_values("Probe")) == {"task length", "long probe"}
    assert set(index.get_level_values("Depth")) == {1, 2}
    assert set(index.get_level_values("Variant")) == {
        "RotRNN, 1 head", "RotRNN, 2 heads", "RotRNN, 4 heads", "LRU"}
    assert (table.frame["seeds"] == 3).all() and (table.frame["norm"] > 0).all()
    # Depth 1: one layer, no spread across layers; depth 2: a spread, with its interval.
    one = table.frame.xs(1, level="Depth")
    two = table.frame.xs(2, level="Depth")
    assert (one["depth"] == 0).all() and (two["depth"] > 0).all()
    assert (two["depth low"] <= two["depth"]).all() and (two["depth"] <= two["depth high"]).all()
    figure = by_name["stability_init_heads_listops"]
    assert isinstance(figure, Figure) and _layout.problems(figure.figure) == []
    assert set(figure.data["heads"]) == {0, 1, 2, 4}  # 0: the LRU, without a heads option
    finding = by_name["stability_init_sweep_findings_listops"]
    assert isinstance(finding, Finding)
    text = " ".join(finding.lines)
    assert "Probe length" in text and "Head count" in text
    # One short sentence per family; every test is a row of the table it names.
    assert all(len(line) <= 260 for line in finding.lines), finding.lines
    assert "stability_init_tests_listops" in text
    tests = by_name["stability_init_tests_listops"]
    assert isinstance(tests, Table)
    comparisons = set(tests.frame.index.droplevel("Family"))
    assert {("RotRNN", "task length: 1 − 4 heads"), ("LRU", "task length − long probe")
            } <= comparisons
    # Holm within each family: m is the family's size (in the caption), no adjusted p below
    # its own.
    frame = tests.frame.reset_index()
    for family, group in frame.groupby("Family"):
        assert (group["Holm p"] >= group["p"]).all()
        assert f"{family}: " in tests.caption and f"m = {len(group)}" in tests.caption
    # The sweep's own runs stay out of every other table: the ordinary init table sees the
    # registration's head count only, with the three seeds.
    init = by_name["stability_init_listops"]
    assert list(init.frame.index.get_level_values("Variant")) == ["RotRNN", "LRU"]
    assert list(init.frame["seeds"]) == [3, 3]


def test_the_sweep_recomputes_from_the_stored_rows(swept):
    # The table's depth component at depth 2 is the per-seed s.d. of the log norms of the two
    # layers, averaged over seeds, recomputed here from the rows.
    store, _ = swept
    rows = store.read("stability")
    table = sweep.sweep_table(rows, "listops", "custom").frame
    at = rows[(rows["kind"] == "stationary") & (rows["cfg.variant"] == "lru")]
    per_seed = at.pivot_table(index="seed", columns="layer", values="norm_stationary")
    expected = np.log(per_seed.to_numpy()).std(axis=1, ddof=1).mean()
    assert table.loc[("long probe", 2, "LRU"), "depth"] == pytest.approx(expected, rel=1e-9)


def test_without_a_heads_sweep_the_figure_says_so(swept):
    store, _ = swept
    rows = store.read("stability")
    rows = rows[~sweep.is_sweep(rows)]
    figure = sweep.sweep_figure(rows, "listops", "custom")
    assert isinstance(figure, Missing) and "sweep_heads" in figure.reason
