"""The theory checks: the white-noise closed form is exact where it must be, and the study
records what the layers compute."""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np
import pytest

from linrnn_bench import models
from helpers import assert_printable, assert_rows_declared, tol
from linrnn_bench.harness.config import ConfigError
from linrnn_bench.harness.studies.theory import report as theory_report
from linrnn_bench.harness.report.artifacts import Figure, Missing, Table
from linrnn_bench.harness.runner import run_study
from linrnn_bench.harness.store import Store
from linrnn_bench.harness.studies import theory

SMOKE = theory.PRESETS["smoke"]


def _layer(name: str, key, **options):
    # The smoke preset's sizes, so the compiled functions are shared with the smoke study.
    extra = {"heads": SMOKE.heads} if name == "rotrnn" else {}
    return models.build(
        name, d_model=SMOKE.d_model, d_state=SMOKE.d_state, key=key, **extra, **options
    )


@pytest.mark.parametrize("name", models.names())
def test_closed_form_equals_expectation_through_hidden_states(name, getkey):
    # The expectation through hidden_states on unit impulses has no sampling error, so it must
    # equal the closed form from the discrete system to float32 round-off, for every layer.
    layer = _layer(name, getkey())
    length = SMOKE.seq_len
    closed = theory.closed_form_energy(theory.discrete_system(layer), length)
    exact = np.cumsum(np.asarray(theory.impulse_energy(layer, length), dtype=np.float64), axis=0)
    assert closed.shape == exact.shape == (length, layer.state_size)
    np.testing.assert_allclose(exact, closed, rtol=5e-5, atol=0)


def test_rotrnn_head_energy_is_one_minus_gamma_to_the_2t(getkey):
    # The paper's normalisation: per head, E||x^h_t||^2 = 1 - gamma_h^(2t) for every P, theta.
    layer = _layer("rotrnn", getkey())
    length = SMOKE.seq_len
    system = theory.discrete_system(layer)
    modulus = np.abs(np.asarray(system.lam)).reshape(-1)
    groups = theory.modulus_groups(modulus)
    assert groups.max() + 1 == 2  # the two heads
    per_group = theory.closed_form_energy(system, length) @ np.eye(2)[groups]
    gamma = np.sort(np.asarray(layer.decay(), dtype=np.float64))  # groups count up in modulus
    t = np.arange(1, length + 1)[:, None]
    np.testing.assert_allclose(per_group, 1.0 - gamma[None, :] ** (2 * t), rtol=1e-5)
    # Without xi the head energy is not normalised: the check can fail.
    unnormalised = _layer("rotrnn", getkey(), normalise=False)
    stationary = theory.stationary_energy(theory.discrete_system(unnormalised))
    assert not np.allclose(stationary.sum(), 2.0, rtol=1e-2)


def test_closed_form_on_hand_built_systems():
    # One state: E|h_t|^2 = |b|^2 (1 - r^(2t)) / (1 - r^2), so |b|^2 after one input.
    r, theta = 0.8, 0.3
    lam = jnp.asarray([r * np.exp(1j * theta)], dtype=jnp.complex64)
    B = jnp.asarray([[0.6 + 0.8j, 1.0]], dtype=jnp.complex64)  # ||b||^2 = 1 + 1 = 2
    system = models.DiscreteSystem(lam=lam, B=B, C=jnp.ones((2, 1), jnp.complex64), D=jnp.zeros(2))
    energy = theory.closed_form_energy(system, 3)[:, 0]
    expected = 2.0 * np.array([1.0, 1 + r**2, 1 + r**2 + r**4])
    np.testing.assert_allclose(energy, expected, rtol=1e-6)
    # A bank (state (h, n) sees channel h only) equals the MIMO system with block-diagonal B.
    lam_bank = jnp.asarray([[0.9, 0.5j], [0.7, -0.2]], dtype=jnp.complex64)
    B_bank = jnp.asarray([[1.0, 2.0j], [0.5, 1 + 1j]], dtype=jnp.complex64)
    bank = models.DiscreteSystem(lam=lam_bank, B=B_bank, C=B_bank, D=jnp.zeros(2), structure="bank")
    B_mimo = jnp.zeros((4, 2), jnp.complex64).at[0:2, 0].set(B_bank[0]).at[2:4, 1].set(B_bank[1])
    mimo = models.DiscreteSystem(lam=lam_bank.reshape(-1), B=B_mimo, C=B_mimo.T, D=jnp.zeros(2))
    np.testing.assert_allclose(
        theory.closed_form_energy(bank, 20), theory.closed_form_energy(mimo, 20), rtol=1e-12
    )


def test_modulus_groups():
    modulus = np.array([0.9, 0.5, 0.9 * (1 + 1e-7), 0.5, 0.99])
    np.testing.assert_array_equal(theory.modulus_groups(modulus), [1, 0, 1, 0, 2])


def test_config_errors_name_the_accepted_values():
    with pytest.raises(ValueError, match="unknown variant.*accepted"):
        theory.TheoryConfig(variants=("rotrnn", "gru"))
    with pytest.raises(ValueError, match="lack a capability.*equivalence.*accepted"):
        theory.TheoryConfig(equivalence_variants=("lru",))
    with pytest.raises(ValueError, match="time_points"):
        theory.TheoryConfig(time_points=1)
    with pytest.raises(ConfigError, match="Unknown key"):
        theory.STUDY.config("smoke", {"sample": "3"})


def test_grid_is_one_run_per_check_variant_and_seed():
    config = dataclasses.replace(SMOKE, seeds=(0, 1))
    specs = theory.grid(config)
    white, equivalence = theory.chosen_variants(config)
    # The defaults: every registered model's base variant, and those with an equivalence.
    assert white == tuple(m.name for m in models.infos())
    assert equivalence == tuple(m.name for m in models.infos() if m.equivalence is not None)
    assert len(specs) == 2 * (len(white) + len(equivalence))
    assert len({theory.STUDY.run_id(s) for s in specs}) == len(specs)
    rotrnn = next(s for s in specs if s.variant == "rotrnn")
    assert dict(rotrnn.options) == {"heads": config.heads}


@pytest.fixture(scope="module")
def smoke_store(tmp_path_factory):
    store = Store(tmp_path_factory.mktemp("theory") / "store.sqlite")
    summary = run_study(theory.STUDY, theory.STUDY.config("smoke"), store=store, progress=False)
    return store, summary


def test_smoke_study_matches_the_closed_forms(smoke_store):
    store, summary = smoke_store
    assert summary.counts == {"done": summary.total}, store.runs("theory")["error"].tolist()
    # Every row has exactly the columns the study declares for its kind, of their types.
    assert assert_rows_declared(store, "theory", theory.COLUMNS) == {
        "profile", "summary", "equivalence"}
    rows = store.read("theory")
    profile = rows[rows["kind"] == "profile"]
    assert set(profile["variant"]) == set(theory.chosen_variants(SMOKE)[0])
    # Stored exact expectations equal the stored closed forms (float32 round-off).
    np.testing.assert_allclose(profile["exact"], profile["predicted"], rtol=5e-5)
    summaries = rows[rows["kind"] == "summary"].set_index("variant")
    assert (summaries["exact_worst_rel_dev"] < 5e-5).all()
    # Monte Carlo: within sampling noise of the formula (a wrong formula is many SE away).
    assert (summaries["mc_worst_z"] < 5.0).all()
    assert (summaries["mc_worst_rel_dev"] < 0.5).all()
    # RotRNN's xi makes every head's stationary energy exactly 1.
    rot = summaries.loc["rotrnn"]
    np.testing.assert_allclose([rot["stationary_group_min"], rot["stationary_group_max"]], 1.0,
                               rtol=1e-4)
    # The group totals add up to the all-states total.
    for (variant, t), at_t in profile.groupby(["variant", "t"]):
        groups = at_t[at_t["group"] >= 0]
        total = at_t[at_t["group"] == -1].iloc[0]
        np.testing.assert_allclose(groups["predicted"].sum(), total["predicted"], rtol=1e-9)
        np.testing.assert_allclose(groups["measured"].sum(), total["measured"], **tol(np.float32))


def test_smoke_equivalence_is_round_off(smoke_store):
    store, _ = smoke_store
    rows = store.read("theory")
    equivalence = rows[rows["kind"] == "equivalence"]
    assert len(equivalence) == SMOKE.trials
    assert (equivalence["max_rel_diff"] < 1e-5).all()
    assert (equivalence["state_norm_max_rel_diff"] < 1e-5).all()
    assert (equivalence["output_scale"] > 0.1).all()  # a real output, not a trivial zero


def test_report_section(smoke_store, tmp_path):
    store, _ = smoke_store
    artifacts = theory_report.section(store)
    assert_printable(artifacts)
    kinds = {a.name: type(a) for a in artifacts}
    assert kinds == {
        "theory_white_noise": Figure,
        "theory_white_noise_ratio": Figure,
        "theory_white_noise_table": Table,
        "theory_equivalence": Table,
    }
    table = next(a for a in artifacts if a.name == "theory_white_noise_table")
    assert list(table.frame.index) == ["RotRNN", "LRU", "S4D", "S5"]
    empty = theory_report.section(Store(tmp_path / "empty.sqlite"))
    assert all(isinstance(a, Missing) for a in empty) and len(empty) == 4
