"""The stability study records the norms of the layers' own states, through the layer contract."""

from __future__ import annotations

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

from linrnn_bench import tasks
from helpers import assert_printable, assert_rows_declared, tol
from linrnn_bench.harness import state_norm
from linrnn_bench.harness import train as training
from linrnn_bench.harness.config import ConfigError
from linrnn_bench.harness.studies.stability import report as stability_report
from linrnn_bench.harness.studies.stability.report import figures as stability_figures
from linrnn_bench.harness.report import _layout
from linrnn_bench.harness.report.artifacts import Figure, Finding, Missing, Table
from linrnn_bench.harness.runner import run_study
from linrnn_bench.harness.store import Store
from linrnn_bench.harness.studies import stability_probe, stability

SMOKE = stability.STUDY.config("smoke")
F32 = tol(np.float32)


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    store = Store(tmp_path_factory.mktemp("stability") / "store.sqlite")
    summary = run_study(stability.STUDY, SMOKE, store=store, progress=False)
    specs = {stability.STUDY.run_id(s): s for s in stability.grid(SMOKE)}
    return store, summary, specs


def _probe_inputs(spec):
    task = tasks.build(spec.task, **dict(spec.task_options))
    split = task.split("val")
    return task, split.inputs[: spec.probe_size], split.lengths[: spec.probe_size]


def _recurrence(lam: np.ndarray, B: np.ndarray, u: np.ndarray) -> np.ndarray:
    """h_t = lam h_{t-1} + B u_t in float64, h_0 = 0: the slow reference, ``(L, P)``."""
    h = np.zeros(lam.shape, dtype=np.complex128)
    out = []
    for u_t in u:
        h = lam * h + B @ u_t
        out.append(h)
    return np.stack(out)


def _batch_norm(block, x: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """BatchNorm by hand with the batch's statistics over the valid steps of every example
    (``mask`` ``(n, L)``), ``(n, L, H)``."""
    weights = mask[..., None]
    mean = (x * weights).sum(axis=(0, 1)) / mask.sum()
    var = (((x - mean) ** 2) * weights).sum(axis=(0, 1)) / mask.sum()
    out = (x - mean) / np.sqrt(var + block.norm.eps)
    return out * np.asarray(block.norm.weight) + np.asarray(block.norm.bias)


def _direct_norms(network, state, inputs, lengths) -> np.ndarray:
    """||h^k_t|| ``(n, depth, L)`` by hand: each layer's input normalised with the batch's
    statistics (as a training step), then a float64 loop of the layer's discrete system."""
    e = jax.vmap(jax.vmap(network.encoder))(jnp.asarray(inputs))  # ListOps is a token task
    mask = (np.arange(e.shape[1])[None, :] < lengths[:, None]).astype(np.float64)
    norms = []
    current = state
    for k, block in enumerate(network.blocks):
        u = _batch_norm(block, np.asarray(e, dtype=np.float64), mask) * mask[..., None]
        system = block.layer.discrete_system()
        lam = np.asarray(system.lam, dtype=np.complex128).reshape(-1)
        B = np.asarray(system.B, dtype=np.complex128)
        h = np.stack([_recurrence(lam, B, u_i) for u_i in u])
        norms.append(np.sqrt(np.sum(np.abs(h) ** 2, axis=-1)))
        if k + 1 < len(network.blocks):
            # The residual stream for the next block: the network's own block, batch statistics.
            step = jax.vmap(
                lambda e_i, m_i: block(e_i, m_i, current), axis_name="batch", out_axes=(0, None)
            )
            e, current = step(e, jnp.asarray(mask, dtype=e.dtype))
    return np.stack(norms, axis=1)


def test_recorded_norms_equal_norms_of_the_layers_states(smoke):
    store, summary, specs = smoke
    assert summary.counts == {"done": summary.total}, store.runs("stability")["error"].tolist()
    rows = store.read("stability")
    for run_id, spec in specs.items():
        run_rows = rows[(rows["run_id"] == run_id) & (rows["step"] == 0)]
        task, inputs, lengths = _probe_inputs(spec)
        network, state = training.build_network(
            spec.network, task.info, key=jr.fold_in(jr.PRNGKey(spec.seed), 0)
        )
        norms = _direct_norms(network, state, inputs, lengths)
        valid = np.arange(norms.shape[-1])[None, :] < lengths[:, None]
        layer_rows = run_rows[run_rows["kind"] == "layer"]
        layer_rows = layer_rows.set_index(layer_rows["layer"].astype(int))
        assert list(layer_rows.index) == list(range(1, spec.network.depth + 1))
        for k in layer_rows.index:
            values = norms[:, k - 1, :][valid]
            row = layer_rows.loc[k]
            np.testing.assert_allclose(row["norm_mean"], values.mean(), **F32)
            np.testing.assert_allclose(row["norm_std"], values.std(), rtol=1e-3)
            np.testing.assert_allclose(row["norm_max"], values.max(), **F32)
            np.testing.assert_allclose(
                row["norm_last"], norms[np.arange(len(lengths)), k - 1, lengths - 1].mean(), **F32
            )
            modulus = np.abs(np.asarray(network.blocks[k - 1].layer.discrete_system().lam))
            np.testing.assert_allclose(
                [row["lam_min"], row["lam_median"], row["lam_max"]],
                [modulus.min(), np.median(modulus), modulus.max()], **F32,
            )
            assert row["grad_norm"] > 0
        profile = run_rows[run_rows["kind"] == "profile"]
        assert len(profile) > 0
        for _, p in profile.iterrows():
            alive = lengths >= p["t"]
            assert p["examples"] == alive.sum()
            np.testing.assert_allclose(
                p["norm"], norms[alive, int(p["layer"]) - 1, int(p["t"]) - 1].mean(), **F32
            )


def test_stationary_rows_equal_the_long_probes_norms_and_closed_form(smoke):
    # The long probe: the training split's examples back to back (`stability_probe.stream`),
    # probe_length doubled as the per-mode regime check needs; per layer the window's mean
    # norm, its RMS and factors, and the RMS norm over the closed form's for a white input of
    # the energy the layer's actual input puts into each state, by hand.
    store, _, specs = smoke
    rows = store.read("stability")
    for run_id, spec in specs.items():
        got = rows[(rows["run_id"] == run_id) & (rows["step"] == 0)
                   & (rows["kind"] == "stationary")]
        got = got.set_index(got["layer"].astype(int))
        assert list(got.index) == list(range(1, spec.network.depth + 1))
        L = int(got["t_to"].iloc[0])
        ladder = stability_probe.stream_ladder(spec.probe_length)
        assert L in ladder
        task = tasks.build(spec.task, **dict(spec.task_options))
        train = task.split("train")
        inputs = stability_probe.stream(train, ladder[-1], spec.long_probe_size,
                                         pair=task.info.pair)[:, :L]
        lengths = np.full(spec.long_probe_size, L)
        # Every step is a training example's: the first one's tokens open the first sequence.
        assert L > task.info.seq_len and np.all(inputs != 0)
        network, state = training.build_network(
            spec.network, task.info, key=jr.fold_in(jr.PRNGKey(spec.seed), 0))
        norms = _direct_norms(network, state, inputs, lengths)
        for k in got.index:
            row = got.loc[k]
            width = np.maximum(1, np.round(spec.window * lengths)).astype(int)
            window = [norms[i, k - 1, lengths[i] - width[i]:lengths[i]] for i in range(len(lengths))]
            np.testing.assert_allclose(row["norm_stationary"], np.mean([w.mean() for w in window]),
                                       **F32)
            np.testing.assert_allclose(row["norm_rms"], np.sqrt(np.mean(np.concatenate(window) ** 2)),
                                       **F32)
            np.testing.assert_allclose(row["norm_rms"], row["input_rms"] * (
                row["drive_rms"] / row["input_rms"]) * row["gain"], rtol=1e-12)
            assert row["t_from"] == min(lengths - width) + 1 and row["t_to"] == L
            assert bool(row["lengthened"]) and row["examples"] == spec.long_probe_size
            assert row["source"] == "stream"
            system = network.blocks[k - 1].layer.discrete_system()
            lam = np.abs(np.asarray(system.lam, dtype=np.complex128).reshape(-1))
            B = np.asarray(system.B, dtype=np.complex128)
            block = network.blocks[k - 1]
            if k == 1:  # the first layer's input, by hand (deeper ones go through the blocks)
                e = jax.vmap(jax.vmap(network.encoder))(jnp.asarray(inputs))
                mask = (np.arange(e.shape[1])[None, :] < lengths[:, None]).astype(np.float64)
                u = _batch_norm(block, np.asarray(e, dtype=np.float64), mask) * mask[..., None]
                injected = np.sum(np.abs(u @ B.T) ** 2, axis=(0, 1)) / lengths.sum()
                np.testing.assert_allclose(row["input_rms"],
                                           np.sqrt(np.sum(u**2) / lengths.sum()), rtol=1e-4)
                np.testing.assert_allclose(row["drive_rms"], np.sqrt(injected.sum()), rtol=1e-4)
                predicted = [np.sum(injected * (1 - lam ** (2 * t)) / (1 - lam**2))
                             for t in range(1, norms.shape[-1] + 1)]
                measured = np.mean(np.concatenate(window) ** 2)
                expected = np.mean(np.concatenate(
                    [predicted[lengths[i] - width[i]:lengths[i]] for i in range(len(lengths))]))
                np.testing.assert_allclose(row["norm_ratio"], np.sqrt(measured / expected),
                                           rtol=1e-4)
                # The per-mode check on these energies, and the length it chose: the shortest
                # of the ladder whose window opens at the needed step (else the longest).
                regime = state_norm.mode_regime(system.lam, injected, int(row["t_from"]))
                assert bool(row["settled"]) == regime.settled
                np.testing.assert_allclose(row["unsettled_share"], regime.unsettled_share,
                                           atol=1e-4)
            t_from = int(row["t_from"])
            reached = np.sum(np.sum(np.abs(B) ** 2, axis=1) * (1 - lam ** (2 * t_from))
                             / (1 - lam**2)) / np.sum(np.sum(np.abs(B) ** 2, axis=1) / (1 - lam**2))
            np.testing.assert_allclose(row["energy_reached"], reached, rtol=1e-5)
        # The length chosen: one whose window opens at every layer's needed step (then every
        # layer settled), or the longest of the ladder (and the rows say which did not).
        settled = got["needed_from"].notna().all() and int(got["t_from"].iloc[0]) >= float(
            got["needed_from"].max())
        assert settled == got["settled"].astype(bool).all()
        assert settled or L == ladder[-1]


def test_rotrnn_norm_is_the_norm_of_its_real_state(smoke, getkey):
    # The recorded norm is basis-independent: RotRNN's real dense recurrence
    # x_t = gamma P Theta P^T x_{t-1} + xi B u_t has the norm of the engine's complex state.
    spec = next(s for s in stability.grid(SMOKE) if s.variant == "rotrnn")
    task, inputs, lengths = _probe_inputs(spec)
    network, state = training.build_network(spec.network, task.info, key=getkey())
    probe = stability_probe.Probe(task, spec.probe_size, spec.profile_points)
    # The smoke study compiled this measurement for this structure: a fresh draw reuses it.
    norms = stability_probe._norms_and_moduli(
        network, state, probe.sequences, jnp.asarray(probe.lengths), "batch"
    )[0]
    norms = np.asarray(norms)[0, 0]
    block = network.blocks[0]
    e = jax.vmap(jax.vmap(network.encoder))(jnp.asarray(inputs))
    mask = (np.arange(e.shape[1])[None, :] < lengths[:, None]).astype(np.float64)
    u = (_batch_norm(block, np.asarray(e, dtype=np.float64), mask) * mask[..., None])[0]
    layer = block.layer
    P = np.asarray(layer.rotation_basis(), dtype=np.float64)
    angles = np.asarray(layer.angles, dtype=np.float64)
    gamma = np.asarray(layer.decay(), dtype=np.float64)
    xi = np.asarray(layer.input_scale(), dtype=np.float64)
    B = np.asarray(layer.B, dtype=np.float64)
    heads, n = P.shape[0], P.shape[1]
    A = np.zeros((heads, n, n))
    for h in range(heads):
        theta = np.zeros((n, n))
        for j, a in enumerate(angles[h]):
            theta[2 * j : 2 * j + 2, 2 * j : 2 * j + 2] = [[np.cos(a), -np.sin(a)],
                                                          [np.sin(a), np.cos(a)]]
        A[h] = gamma[h] * P[h] @ theta @ P[h].T
    x = np.zeros((heads, n))
    dense = []
    for u_t in u:
        x = np.einsum("hij,hj->hi", A, x) + xi[:, None] * np.einsum("hid,d->hi", B, u_t)
        dense.append(np.sqrt(np.sum(x**2)))
    # float32 round-off of the layer's complex system is the only difference.
    np.testing.assert_allclose(norms, dense, rtol=1e-5, atol=1e-7)


def test_running_statistics_measure_in_inference_mode(getkey):
    # statistics="running" is the network's own inference-mode `layer_states`; at
    # initialisation BatchNorm's running statistics are (0, 1), so the layer sees e / sqrt(1+eps).
    spec = next(s for s in stability.grid(SMOKE) if s.variant == "lru")
    task, inputs, lengths = _probe_inputs(spec)
    network, state = training.build_network(spec.network, task.info, key=getkey())
    inputs, lengths = inputs[:2], lengths[:2]
    # Compiled: one compilation costs less than the many small eager ones.
    norms = np.asarray(eqx.filter_jit(stability_probe.state_norms)(
        network, state, jnp.asarray(inputs), jnp.asarray(lengths), "running"
    ))
    block = network.blocks[0]
    e = np.asarray(jax.vmap(jax.vmap(network.encoder))(jnp.asarray(inputs)), dtype=np.float64)
    mask = (np.arange(e.shape[1])[None, :] < lengths[:, None]).astype(np.float64)
    u = e / np.sqrt(1.0 + block.norm.eps) * mask[..., None]
    system = block.layer.discrete_system()
    lam = np.asarray(system.lam, dtype=np.complex128)
    B = np.asarray(system.B, dtype=np.complex128)
    for i in range(2):
        h = _recurrence(lam, B, u[i])
        np.testing.assert_allclose(norms[i, 0], np.sqrt(np.sum(np.abs(h) ** 2, axis=-1)), **F32)
    with pytest.raises(ValueError, match="accepted"):
        stability_probe.state_norms(network, state, jnp.asarray(inputs), jnp.asarray(lengths),
                                     "ema")


def test_initialisation_only_runs_measure_the_trained_runs_start(smoke):
    # The depth sweep's runs (train=None) draw the network the trained run starts from.
    store, _, specs = smoke
    rows = store.read("stability")
    run_id, spec = next(iter(specs.items()))
    init_rows = stability.run(dataclasses.replace(spec, train=None))
    # No gradients at init only; the long probe's stationary rows as in training.
    assert {r["kind"] for r in init_rows} == {"layer", "profile", "stationary"}
    assert {r["step"] for r in init_rows} == {0}
    step0 = rows[(rows["run_id"] == run_id) & (rows["step"] == 0) & (rows["kind"] == "layer")]
    init_layers = [r for r in init_rows if r["kind"] == "layer"]
    np.testing.assert_allclose(
        [r["norm_mean"] for r in init_layers], step0["norm_mean"].to_numpy(), **F32
    )


def test_trained_runs_record_every_evaluation(smoke):
    store, _, specs = smoke
    # Every row has exactly the columns the study declares for its kind, of their types.
    assert assert_rows_declared(store, "stability", stability.COLUMNS) == {
        "layer", "profile", "probe", "stationary", "eval", "final"}
    rows = store.read("stability")
    for run_id, spec in specs.items():
        run_rows = rows[rows["run_id"] == run_id]
        assert spec.train is not None
        steps = sorted(run_rows.loc[run_rows["kind"] == "layer", "step"].unique())
        expected = list(range(0, spec.train.steps + 1, spec.train.eval_every))
        assert steps == expected
        assert (run_rows["kind"] == "final").sum() == 1
        assert run_rows.loc[run_rows["kind"] == "probe", "probe_loss"].notna().all()


def test_summarise_excludes_padding():
    # Two examples, one layer, L = 4; the second example's last two steps are padding.
    norms = np.array([[[1.0, 2.0, 3.0, 4.0]], [[10.0, 20.0, 99.0, 99.0]]])
    lengths = np.array([4, 2])
    rows = stability_probe.summarise(
        7, norms, lengths, np.array([[0.1, 0.5, 0.9]]), np.array([1, 3]),
        grad_norms=np.array([0.5]), loss=1.25,
    )
    assert rows[0] == {"kind": "probe", "step": 7, "probe_loss": 1.25}
    layer = next(r for r in rows if r["kind"] == "layer")
    assert layer["grad_norm"] == 0.5 and layer["lam_median"] == 0.5
    valid = np.array([1.0, 2.0, 3.0, 4.0, 10.0, 20.0])
    assert layer["step"] == 7 and layer["layer"] == 1
    np.testing.assert_allclose(layer["norm_mean"], valid.mean())
    np.testing.assert_allclose(layer["norm_max"], 20.0)
    np.testing.assert_allclose(layer["norm_last"], (4.0 + 20.0) / 2)
    profile = {r["t"]: r for r in rows if r["kind"] == "profile"}
    assert profile[1]["norm"] == pytest.approx(5.5) and profile[1]["examples"] == 2
    assert profile[3]["norm"] == pytest.approx(3.0) and profile[3]["examples"] == 1


def test_config_errors_name_the_accepted_values():
    with pytest.raises(ValueError, match="unknown variant.*accepted"):
        stability.StabilityConfig(variants=("rotrnn", "transformer"))
    with pytest.raises(ValueError, match="unknown task.*accepted"):
        stability.StabilityConfig(tasks=("listops", "imagenet"))
    with pytest.raises(ValueError, match="train_depths"):
        stability.StabilityConfig(depths=(1, 2), train_depths=(4,))
    with pytest.raises(ValueError, match="train_tasks.*distinct members"):
        stability.StabilityConfig(tasks=("listops", "digits"), train_tasks=("adding",))
    with pytest.raises(ValueError, match="task_preset"):
        stability.StabilityConfig(task_preset="huge")
    with pytest.raises(ValueError, match="statistics.*accepted"):
        stability.StabilityConfig(statistics="ema")
    with pytest.raises(ConfigError, match="Unknown key"):
        stability.STUDY.config("smoke", {"depth": "3"})


def test_cpu_grid():
    config = stability.PRESETS["cpu"]
    specs = [s for s in stability.grid(config) if not s.sweep]  # the sweep: test_stability_sweep
    per_depth = {d: len(config.seeds if d in config.train_depths else config.init_seeds
                        or config.seeds) for d in config.depths}
    assert len(specs) == len(config.tasks) * len(config.variants) * sum(per_depth.values())
    assert len({stability.STUDY.run_id(s) for s in specs}) == len(specs)
    trained_tasks = config.train_tasks or config.tasks
    for spec in specs:
        trained = spec.network.depth in config.train_depths and spec.task in trained_tasks
        assert (spec.train is not None) == trained
        variant = stability.variant(spec.variant)
        assert spec.network.layer == variant.model
        assert set(variant.options) <= set(spec.network.layer_options)
    # The paper's claim on the paper's task: ListOps trained at two depths and five seeds.
    trained = [s for s in specs if s.train is not None]
    assert {s.task for s in trained} == {"listops"}
    assert len({s.network.depth for s in trained}) >= 2 and len(config.seeds) >= 5
    assert {s.variant for s in trained} == set(config.variants)


def test_geometric_interval_is_the_t_interval_of_the_logs_exponentiated():
    # Logs 0, 1, 2: mean 1, s.d. 1, so the 95 % t interval of the log mean is
    # 1 +- t(0.975, 2) / sqrt(3); the geometric mean e, the bounds its exponentials.
    from scipy import stats as scipy_stats

    from linrnn_bench.harness.report.summaries import geometric_interval

    centre, low, high, n = geometric_interval([1.0, np.e, np.e ** 2, np.nan, -1.0])
    half = scipy_stats.t.ppf(0.975, 2) / np.sqrt(3.0)
    assert n == 3  # NaN and the non-positive value have no logarithm: left out
    np.testing.assert_allclose([centre, low, high], np.exp([1.0, 1.0 - half, 1.0 + half]))
    assert np.isnan(geometric_interval([2.0])[1]) and geometric_interval([2.0])[0] == 2.0


def test_profile_leaves_out_points_on_few_examples_and_says_so():
    # Seeds 0 and 1 of one variant, profile over t = 1, 2, 3 on 8, 8 and 3 of 8 examples: the
    # t = 3 point rests on fewer than half the batch and is not drawn, but kept in the data with
    # its count; the caption gives every t's count and what was left out.
    import pandas as pd

    records = [
        {"run_id": f"r{seed}", "seed": seed, "kind": "profile", "step": 0, "layer": 1,
         "t": float(t), "norm": norm * (1.0 + seed), "examples": examples,
         "cfg.network.depth": 1, "cfg.variant": "lru", "cfg.network.layer": "lru",
         "cfg.train.steps": None}
        for seed in (0, 1) for t, norm, examples in ((1, 1.0, 8), (2, 2.0, 8), (3, 3.0, 3))]
    figure = stability_figures._profile_figure(pd.DataFrame.from_records(records), "listops",
                                               "smoke")
    data = figure.data.set_index("t")
    assert list(data["examples"]) == [8, 8, 3] and list(data["drawn"]) == [True, True, False]
    assert (data["n"] == 2).all()
    np.testing.assert_allclose(data["mean_norm"], np.array([1.0, 2.0, 3.0]) * np.sqrt(2.0))
    drawn = [line for line in figure.figure.axes[0].get_lines() if line.get_label() != "_nolegend_"]
    assert [list(line.get_xdata()) for line in drawn] == [[1.0, 2.0]]
    assert "8 examples at t = 1-2, 3 at t = 3" in figure.caption
    assert "fewer than 4 of the 8 examples" in figure.caption and "(t = 3)" in figure.caption
    assert_printable([figure])


def test_report_section(smoke, tmp_path):
    store, _, _ = smoke
    artifacts = stability_report.section(store)
    assert_printable(artifacts)
    kinds = {a.name: type(a) for a in artifacts}
    assert kinds == {
        "stability_stationary_listops_depth1": Figure,
        "stability_components_listops": Table,
        "stability_stationary_listops": Table,
        "stability_stationary_findings_listops": Finding,
        "stability_attribution_listops": Table,
        "stability_attribution_findings_listops": Finding,
        "stability_init_listops": Table,
        # One layer and no head count swept: the sweep's table, and why there is no more.
        "stability_init_sweep_listops": Table,
        "stability_init_heads_listops": Missing,
        "stability_init_tests_listops": Missing,
        "stability_init_sweep_findings_listops": Missing,
        "stability_training_listops": Figure,
        "stability_eigenvalues_listops": Figure,
        "stability_depth_listops": Figure,
        "stability_profile_listops": Figure,
        "stability_summary_listops": Table,
        "stability_spread_listops": Table,
        "stability_findings_listops": Finding,
        "stability_pairs_listops": Missing,  # one seed: no pair to compare
    }
    table = next(a for a in artifacts if a.name == "stability_summary_listops")
    assert list(table.frame.index) == ["RotRNN", "LRU"]
    assert (table.frame["CV (layers, seeds, steps)"] > 0).all()
    spread = next(a for a in artifacts if a.name == "stability_spread_listops")
    assert list(spread.frame.index.get_level_values("Variant")) == ["RotRNN", "LRU"]
    components = next(a for a in artifacts if a.name == "stability_components_listops")
    assert list(components.frame.index.get_level_values("Variant")) == ["RotRNN", "LRU"]
    assert (components.frame["depth"] == 0).all()  # one layer: no depth component
    assert (components.frame["drift"] > 0).all() and components.frame["seed"].isna().all()
    stationary = next(a for a in artifacts if a.name == "stability_findings_listops".replace(
        "findings", "stationary_findings"))
    # The plain verdict on the paper's claim first, then the regime check (met or not).
    assert stationary.lines[0].startswith("The RotRNN paper's claim") and (
        "n = 1 paired seed: " in stationary.lines[0])
    assert "too few seeds to test it" in stationary.lines[0]
    assert stationary.lines[1].startswith("Long probe: the training split's examples")
    assert "Per-mode regime check" in stationary.lines[1]
    assert not any(line.startswith("Depth component at depth 1") for line in stationary.lines)
    assert "Drift component at depth 1 (n = 1): lowest" in " ".join(stationary.lines)
    assert "no pair tested" in " ".join(stationary.lines)
    init = next(a for a in artifacts if a.name == "stability_init_listops")
    assert list(init.frame["seeds"]) == [1, 1] and (init.frame["norm"] > 0).all()
    figure = next(a for a in artifacts if a.name == "stability_stationary_listops_depth1")
    assert _layout.problems(figure.figure) == []
    data = figure.data
    assert len(data) == 2 * 3 and set(data["variant"]) == {"RotRNN", "LRU"}  # variants x evals
    # One seed: the geometric mean over seeds is that seed's norm, with n = 1 and no interval
    # (no bound columns, no band).
    assert (data["n"] == 1).all() and "ci95_low" not in data.columns
    rows = store.read("stability")
    rows = rows[(rows["kind"] == "stationary") & rows["cfg.train.steps"].notna()
                & (rows["cfg.network.depth"] == 1)]
    assert np.allclose(sorted(data["norm_stationary"]), sorted(rows["norm_stationary"]))
    assert "95 % t interval over n = 1 seed per point" in figure.caption
    profile = next(a for a in artifacts if a.name == "stability_profile_listops")
    assert {"examples", "drawn", "n"} <= set(profile.data.columns)
    assert "examples at t = " in profile.caption
    finding = next(a for a in artifacts if a.name == "stability_findings_listops")
    # One seed: the sentence gives the lowest and highest and says no pair was tested.
    assert len(finding.lines) == 2 and "(n = 1): lowest RotRNN" in finding.lines[1]
    assert finding.lines[1].endswith("no pair tested.")
    empty = stability_report.section(Store(tmp_path / "empty.sqlite"))
    assert empty and all(isinstance(a, Missing) for a in empty)
