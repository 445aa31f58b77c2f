"""Report section of the theory checks: white-noise state energy and the LRU <=> RotRNN map."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from ...store import Store
from .. import theory as study
from ...variants import variants
from ...report import style
from ...report.artifacts import (Artifact, Figure, Section, Table, all_missing, drawn_data,
                                 no_runs, run_ids)
from ...report.origins import largest_preset

# The study's row columns (`harness.studies.theory.COLUMNS`): ``C.predicted``.
C = study.COLUMNS.names

TITLE = "Theory checks"

INTRO = (
    "Two checks of what the layers must satisfy by construction, on untrained layers. "
    "White noise: with i.i.d. zero-mean unit-covariance inputs, a diagonal system "
    "h_t = lambda h_{t-1} + B u_t (h_0 = 0) has, exactly, "
    "E|h_{p,t}|^2 = ||b_p||^2 (1 - |lambda_p|^{2t}) / (1 - |lambda_p|^2) for each state p, with "
    "b_p the p-th row of B; for RotRNN a head's states share |lambda| = gamma and the normaliser "
    "xi makes their rows' energy sum to 1 - gamma^2, so the head's energy is 1 - gamma^{2t} (the "
    "paper's claim), and the LRU's infinite-sequence value is the t -> infinity limit. The study "
    "compares this closed form, computed from each layer's discrete system, with a Monte Carlo "
    "mean of ||h_t||^2 over white-noise sequences run through the layer's `hidden_states`, and "
    "with the exact expectation obtained through `hidden_states` on unit impulses (which must "
    "agree with the closed form to float32 round-off). States are grouped by a shared |lambda| "
    "(RotRNN's heads, S4D's channels, single states for the LRU and S5). Equivalence: random "
    "RotRNNs (a fresh initialisation plus Gaussian noise on every learned array) are mapped to "
    "LRUs by `models.equivalence.rotrnn_to_lru`, and the largest output difference on a random "
    "input is recorded; it must be round-off."
)

# Per-group curves are drawn when a layer has at most this many groups (RotRNN's heads); beyond
# it the total alone stays readable.
_MAX_GROUP_CURVES = 8
_FLOAT32_EPS = float(np.finfo(np.float32).eps)


def _variant_order(names) -> list[str]:
    # Registered variants in the registry's order, then any the registry does not know.
    known = list(variants())
    present = set(names)
    return [v for v in known if v in present] + sorted(present - set(known))


def _label(variant: str) -> str:
    known = variants()
    return known[variant].label if variant in known else variant


# What the section makes, by name (the titles under which the index lists what is missing).
_NOISE_TITLES = {
    "theory_white_noise": "Measured vs predicted state energy",
    "theory_white_noise_ratio": "Measured / predicted state energy",
    "theory_white_noise_table": "Worst deviation from the closed form",
}
_EQUIVALENCE_TITLES = {"theory_equivalence": "LRU ⇔ multi-head RotRNN"}
_TITLES = {**_NOISE_TITLES, **_EQUIVALENCE_TITLES}


def section(store: Store) -> list[Artifact]:
    frame, preset = largest_preset(store.read("theory"), "theory")
    if frame.empty:
        return all_missing(_TITLES, no_runs("theory"))
    noise = frame[frame["cfg.check"] == "white_noise"]
    equivalence = frame[frame["cfg.check"] == "equivalence"]
    out: list[Artifact] = []
    if noise.empty:
        out += all_missing(_NOISE_TITLES, f"no finished white-noise runs at preset {preset}")
    else:
        out += [_energy_figure(noise, preset), _ratio_figure(noise, preset),
                _noise_table(noise, preset)]
    if equivalence.empty:
        out += all_missing(_EQUIVALENCE_TITLES,
                           f"no finished equivalence runs at preset {preset}")
    else:
        out.append(_equivalence_table(equivalence, preset))
    return out


def _first_seed(noise: pd.DataFrame) -> pd.DataFrame:
    """One run per variant, the smallest seed's: the curves of one draw, not an average."""
    keep = noise.groupby(C.variant)["seed"].transform("min") == noise["seed"]
    return noise[keep]


def _step_axes(ax, title: str) -> None:
    ax.set_xscale("log")
    style.plain_log_ticks(ax, "x")
    ax.set_title(title, fontsize=7.5)
    ax.set_xlabel(r"step $t$")


def _energy_figure(noise: pd.DataFrame, preset: str | None) -> Figure:
    style.apply_style()
    frame = _first_seed(noise)
    profile = frame[frame[C.kind] == "profile"]
    variants = _variant_order(profile[C.variant].unique())
    fig, axes = style.panels(len(variants), 2.0, width="full")
    data: list[pd.DataFrame] = []
    for ax, variant in zip(axes.flat, variants):
        rows = profile[profile[C.variant] == variant]
        model = rows[C.model].iloc[0]
        colour = style.model_colour(model)
        n_groups = int(rows[C.group].max()) + 1
        groups = range(n_groups) if n_groups <= _MAX_GROUP_CURVES else [-1]
        for g in groups:
            g_rows = rows[rows[C.group] == g].sort_values(C.t)
            drawn = pd.DataFrame({
                "variant": _label(variant), "group": g, "t": g_rows[C.t].to_numpy(),
                "predicted_energy": g_rows[C.predicted].to_numpy(),
                "measured_energy": g_rows[C.measured].to_numpy(),
                "measured_2se": (2 * g_rows[C.measured_se]).to_numpy()})
            data.append(drawn)
            ax.plot(drawn["t"], drawn["predicted_energy"], color=colour, linewidth=1.0,
                    alpha=0.8)
            ax.errorbar(
                drawn["t"], drawn["measured_energy"], yerr=drawn["measured_2se"], fmt="none",
                ecolor=style.REFERENCE_COLOUR, elinewidth=0.6,
            )
            ax.plot(drawn["t"], drawn["measured_energy"], linestyle="none",
                    marker=style.model_marker(model), markersize=1.8, color=style.REFERENCE_COLOUR)
        what = f"{n_groups} groups" if n_groups <= _MAX_GROUP_CURVES else "all states"
        ax.set_yscale("log")
        style.plain_log_ticks(ax)
        _step_axes(ax, f"{style.math_text(_label(variant))}\n({what})")
    for row in axes:
        row[0].set_ylabel(r"$E\,\|h_t\|^2$")
    seeds = sorted(frame["seed"].unique())
    samples = int(frame["cfg.samples"].iloc[0])
    return Figure(
        name="theory_white_noise",
        title="Measured vs predicted state energy under white noise",
        caption=(
            f"E‖h_t‖² of untrained layers under unit white noise, preset {preset}, seed "
            f"{seeds[0]}. Lines: the closed form ‖b_p‖² (1 - |λ_p|^(2t)) / (1 - |λ_p|²) "
            f"summed over a group of states sharing |λ| (for RotRNN each curve is one head and "
            f"equals 1 - γ^(2t)); markers: the Monte Carlo mean over n = {samples} sequences "
            f"through the layer's hidden states, bars ± 2 standard errors of that mean. Layers "
            f"with more than {_MAX_GROUP_CURVES} groups show the total over all states. "
            f"Log-log axes."
        ),
        figure=fig,
        runs=run_ids(frame),
        data=drawn_data(data),
    )


def _ratio_figure(noise: pd.DataFrame, preset: str | None) -> Figure:
    """Per variant a panel (one shared y axis): the Monte Carlo energy over the closed form
    against t, over the band that two standard errors allow around 1. A panel each: seven
    overlapping bands on one axis read as one grey mass."""
    style.apply_style()
    frame = _first_seed(noise)
    total = frame[(frame[C.kind] == "profile") & (frame[C.group] == -1)]
    variants = _variant_order(total[C.variant].unique())
    fig, axes = style.panels(len(variants), 1.5, sharey=True)
    data: list[pd.DataFrame] = []
    for ax, variant in zip(axes.flat, variants):
        rows = total[total[C.variant] == variant].sort_values(C.t)
        model = rows[C.model].iloc[0]
        band = (2 * rows[C.measured_se] / rows[C.predicted]).to_numpy()
        drawn = pd.DataFrame({
            "variant": _label(variant), "t": rows[C.t].to_numpy(),
            "ratio": (rows[C.measured] / rows[C.predicted]).to_numpy(),
            "band_low": 1 - band, "band_high": 1 + band})
        data.append(drawn)
        colour = style.model_colour(model)
        ax.fill_between(drawn["t"], drawn["band_low"], drawn["band_high"], color=colour,
                        alpha=0.2, linewidth=0)
        ax.axhline(1.0, color=style.REFERENCE_COLOUR, linewidth=0.6)
        ax.plot(drawn["t"], drawn["ratio"], color=colour, marker=style.model_marker(model),
                markersize=1.8, linewidth=0.8)
        _step_axes(ax, style.math_text(_label(variant)))
    for row in axes:
        row[0].set_ylabel("measured / predicted\n" + r"$E\,\|h_t\|^2$")
    samples = int(frame["cfg.samples"].iloc[0])
    return Figure(
        name="theory_white_noise_ratio",
        title="Measured / predicted state energy under white noise",
        caption=(
            f"Ratio of the Monte Carlo E‖h_t‖² (the mean over n = {samples} white-noise "
            f"sequences, total over all states) to the closed form, preset {preset}, smallest "
            f"seed, one panel per layer variant on one y axis, log t axis. Shaded: the ratios "
            f"that 2 standard errors of the Monte Carlo mean allow around 1; a curve inside its "
            f"band is consistent with the formula."
        ),
        figure=fig,
        runs=run_ids(frame),
        data=drawn_data(data),
    )


def _by_variant(rows: pd.DataFrame, record: Callable[[pd.DataFrame], dict]) -> pd.DataFrame:
    """A table of one row per variant of ``rows``, labelled, in the registry's order: the
    ``record`` of its rows."""
    records = {_label(v): record(rows[rows[C.variant] == v])
               for v in _variant_order(rows[C.variant].unique())}
    return pd.DataFrame.from_dict(records, orient="index").rename_axis("Variant")


def _noise_record(rows: pd.DataFrame) -> dict:
    return {
        "states P": int(rows[C.state_size].iloc[0]),
        "groups": int(rows[C.groups].iloc[0]),
        "seeds": int(rows["seed"].nunique()),
        "MC worst rel. dev. (total)": rows[C.mc_worst_rel_dev].max(),
        "MC worst rel. dev. (group)": rows[C.mc_worst_rel_dev_group].max(),
        "MC worst |z|": rows[C.mc_worst_z].max(),
        "exact worst rel. dev.": rows[C.exact_worst_rel_dev].max(),
        "E‖h_∞‖² (mean)": rows[C.stationary_total].mean(),
        "group E‖h_∞‖² min": rows[C.stationary_group_min].min(),
        "group E‖h_∞‖² max": rows[C.stationary_group_max].max(),
    }


def _noise_table(noise: pd.DataFrame, preset: str | None) -> Table:
    summary = noise[noise[C.kind] == "summary"]
    frame = _by_variant(summary, _noise_record)
    first = summary.iloc[0]
    return Table(
        name="theory_white_noise_table",
        title="Worst deviation of the state energy from the closed form",
        caption=(
            f"Untrained layers under unit white noise, preset {preset}, "
            f"L = {int(first[C.seq_len])} steps, {int(first[C.samples])} Monte Carlo sequences "
            f"per run; worst over every step, group and seed. 'MC' compares the Monte Carlo "
            f"mean with the closed form (its size is set by sampling noise: |z| is the deviation "
            f"in standard errors); 'exact' compares the expectation computed through the layer's "
            f"hidden states on unit impulses with the closed form, and should be float32 "
            f"round-off (eps = {_FLOAT32_EPS:.1e}) times the accumulated steps. E‖h_∞‖²: "
            f"the t → ∞ limit Σ_p ‖b_p‖² / (1 − |λ_p|²); RotRNN with ξ has "
            f"exactly 1 per head."
        ),
        frame=frame,
        # Deviations to three decimals, |z| to two; the exact deviation (float32 round-off)
        # and the energies span decades: scientific.
        digits={"states P": 0, "groups": 0, "seeds": 0, "MC worst rel. dev. (total)": 3,
                "MC worst rel. dev. (group)": 3, "MC worst |z|": 2,
                "exact worst rel. dev.": "sci", "E‖h_∞‖² (mean)": "g",
                "group E‖h_∞‖² min": "g", "group E‖h_∞‖² max": "g"},
        runs=run_ids(summary),
        short_caption=(
            f"Untrained layers, unit white noise ({int(first[C.seq_len])} steps, "
            f"{int(first[C.samples])} Monte Carlo sequences per run); worst over steps, groups "
            "and seeds: relative deviation from the closed form of the Monte Carlo mean (|z|: "
            "in standard errors) and of the exact expectation. E‖h_∞‖²: stationary limit. "
            f"Preset {preset}."),
    )


def _equivalence_record(rows: pd.DataFrame) -> dict:
    return {
        "trials": len(rows),
        "max |y_rot − y_lru|": rows[C.max_abs_diff].max(),
        "max rel. output diff.": rows[C.max_rel_diff].max(),
        "max rel. state-norm diff.": rows[C.state_norm_max_rel_diff].max(),
        "max |λ|": rows[C.modulus_max].max(),
    }


def _equivalence_table(equivalence: pd.DataFrame, preset: str | None) -> Table:
    frame = _by_variant(equivalence, _equivalence_record)
    first = equivalence.iloc[0]
    return Table(
        name="theory_equivalence",
        title="LRU ⇔ multi-head RotRNN: largest output difference",
        caption=(
            f"Random RotRNNs (fresh initialisation plus N(0, {float(first['cfg.perturb'])}^2) "
            f"noise on every learned array; d_model = {int(first['cfg.d_model'])}, d_state = "
            f"{int(first['cfg.d_state'])}) mapped to LRUs by models.equivalence.rotrnn_to_lru, "
            f"run on a random input of {int(first['cfg.seq_len'])} steps, preset {preset}. "
            f"Relative differences are divided by the largest |output| (or state norm) of the "
            f"RotRNN; float32 round-off is about {_FLOAT32_EPS:.1e} per operation, and the "
            f"difference grows with the sequence length because the LRU stores each angle "
            f"as a positive phase (one round-off), which the recurrence multiplies by t."
        ),
        frame=frame,
        # Differences are float32 round-off (decades apart): scientific; |λ| by its
        # distance to 1.
        digits={"trials": 0, "max |y_rot − y_lru|": "sci", "max rel. output diff.": "sci",
                "max rel. state-norm diff.": "sci", "max |λ|": "near_one"},
        runs=run_ids(equivalence),
        short_caption=(
            f"Random RotRNNs (width {int(first['cfg.d_model'])}, state size "
            f"{int(first['cfg.d_state'])}, initialisation perturbed) mapped to LRUs, run on "
            f"{int(first['cfg.seq_len'])} random steps: largest absolute and relative "
            f"differences of output and state norm (float32 round-off is about "
            f"{_FLOAT32_EPS:.1e} per operation). Preset {preset}."),
    )


SECTION = Section("theory", TITLE, INTRO, section)
