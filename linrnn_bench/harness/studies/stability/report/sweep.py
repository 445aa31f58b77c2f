"""The initialisation sweep: where each layer's spread of state norms comes from before any
training, by head count x probe length x depth.

Read from step 0 of every run at the deepest depth the study measured (the ordinary runs at the
registration's head count and the sweep's own, `StabilityRun.sweep`). Both probes of a run give
one regime each: the probe batch at the task's own lengths (``norm_mean``: the transient
build-up, where the norm still grows like sqrt(t)) and the long probe (``norm_stationary``: the
stationary level the normalisers fix). A network of depth d is stood for by the layers 1..d of
the deepest network: at initialisation a layer's input depends only on the layers below it,
whose parameters are drawn independently of the ones above, so the first d layers of a deeper
network are distributed as a network of d layers.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable

import numpy as np
import pandas as pd

from .... import state_norm
from .... import stats as inference
from ....report import style
from ....report.artifacts import Artifact, Figure, Finding, Missing, Table, run_ids
from ._data import C, _indexed, _label, _variant_order
from ._statistics import init_components, norms_by_seed
from .pairs import digits_of_tests

# The two regimes a run's probes measure: the row kind and its per-layer norm column.
PROBES: dict[str, tuple[str, str]] = {
    "task length": ("layer", C.norm_mean),
    "long probe": ("stationary", C.norm_stationary),
}


def is_sweep(frame: pd.DataFrame) -> pd.Series:
    """Rows of the initialisation sweep's own runs (head counts other than the study's)."""
    if "cfg.sweep" not in frame.columns:
        return pd.Series(False, index=frame.index)
    return frame["cfg.sweep"].fillna(False).astype(bool)


def _heads(options) -> int:
    """The ``heads`` option of a run's layer (``cfg.network.layer_options``), 0 without one."""
    if isinstance(options, str):
        options = json.loads(options)
    return int(dict(options or ()).get("heads") or 0)


def sweep_rows(frame: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """Step-0 rows of both probes at the deepest depth measured, with ``heads``; the depth."""
    at_init = frame[(frame[C.step] == 0) & frame[C.kind].isin([k for k, _ in PROBES.values()])]
    if at_init.empty:
        return at_init, 0
    depth = int(at_init["cfg.network.depth"].max())
    rows = at_init[at_init["cfg.network.depth"] == depth]
    return rows.assign(heads=rows["cfg.network.layer_options"].map(_heads)), depth


def prefix_depths(deepest: int) -> list[int]:
    """The network depths read from a network of ``deepest`` layers: powers of two, and itself."""
    return sorted({2 ** k for k in range(int(math.log2(deepest)) + 1)} | {deepest})


def summary(rows: pd.DataFrame, deepest: int) -> pd.DataFrame:
    """One record per (probe, variant, heads, network depth d): seeds, the geometric mean norm over
    layers 1..d and seeds, and per seed its depth component (s.d. of log norm across layers
    1..d) and seed component (RMS deviation of its log norms from the mean over seeds), each
    with its mean and 95 % t interval over seeds, bounded below by 0
    (`harness.stats.nonnegative_interval`)."""
    records = []
    for probe, (kind, column) in PROBES.items():
        of_kind = rows[rows[C.kind] == kind]
        for (variant, heads), group in of_kind.groupby(["cfg.variant", "heads"]):
            norms, seeds = norms_by_seed(group, column)
            if not seeds:
                continue
            records += [{"probe": probe, "variant": variant, "heads": heads, "network_depth": d,
                         "seeds": len(seeds), "norm": float(np.exp(np.log(norms[:, :d]).mean())),
                         **init_components(norms[:, :d])}
                        for d in prefix_depths(deepest)]
    return pd.DataFrame.from_records(records)


def _heads_text(heads: int) -> str:
    return f"{heads} head{'s' if heads != 1 else ''}"


def _label_heads(variant: str, heads: int) -> str:
    return f"{_label(variant)}, {_heads_text(heads)}" if heads else _label(variant)


def _ordered(frame: pd.DataFrame) -> pd.DataFrame:
    order = {v: i for i, v in enumerate(_variant_order(frame["variant"].unique()))}
    probes = {p: i for i, p in enumerate(PROBES)}
    return (frame.assign(_p=frame["probe"].map(probes), _v=frame["variant"].map(order))
            .sort_values(["_p", "network_depth", "_v", "heads"]).drop(columns=["_p", "_v"]))


def _lengths_text(rows: pd.DataFrame) -> str:
    """The two probes' lengths in words, from the rows (the long probe's window and span)."""
    long = rows[rows[C.kind] == "stationary"]
    text = "the probe batch at the task's own lengths"
    if not long.empty:
        text += (f"; the long probe's sequences run to {int(long[C.t_to].max())} steps, its "
                 f"norm averaged from step {int(long[C.t_from].min())} on")
        if not long[C.lengthened].astype(bool).all():
            text += " (the task could not lengthen its sequences: the long probe is the probe batch)"
    return text


def sweep_table(frame: pd.DataFrame, task: str, preset: str | None) -> Artifact:
    """The sweep as a table: probe x depth x variant (and head count)."""
    name = f"stability_init_sweep_{task}"
    title = (f"Spread of the state norm at initialisation by head count, probe length and depth "
             f"({style.task_label(task)})")
    rows, deepest = sweep_rows(frame)
    if rows.empty:
        return Missing(name, title, "no runs measured at initialisation")
    data = _ordered(summary(rows, deepest))
    variants = [_label_heads(v, h) for v, h in zip(data["variant"], data["heads"])]
    out = _indexed(data.drop(columns=["probe", "variant", "heads", "network_depth"]),
                   {"Probe": data["probe"], "Depth": data["network_depth"], "Variant": variants})
    return Table(
        name=name, title=title,
        caption=(
            f"Before training, on {style.task_label(task)} (preset {preset}): the layers 1..d "
            f"of the {deepest}-block networks stand for a network of depth d (at initialisation "
            f"a layer's input depends only on the layers below it). 'norm': geometric mean of "
            f"the per-layer norm over those layers and the seeds; 'depth': s.d. of log norm "
            f"across the d layers of one network; 'seed': RMS deviation of a seed's log norms "
            f"from the mean over seeds; each the mean over seeds with its 95% t interval (not "
            f"shown where n < 3). "
            f"Probes: {_lengths_text(rows)}; 'task length' is the mean norm over each "
            f"example's steps (the transient build-up), 'long probe' its stationary level. "
            f"Layers with a heads option are measured at every head count the preset sweeps "
            f"(their registration's own is the study's ordinary run)."),
        frame=out, digits={c: 3 for c in out.columns if c != "seeds"}, runs=run_ids(rows),
        short_caption=(
            f"Layers 1..d of the {deepest}-block networks as a depth-d network, before "
            "training: state norm (geometric mean), its depth and seed components (log units); "
            "means over seeds, 95% t intervals where n ≥ 3. "
            f"{style.task_label(task)}, preset {preset}."),
        n="seeds",
        intervals=tuple(c for c in out.columns if c.endswith((" low", " high"))),
    )


_PANEL_TITLES = {"task length": "probe at the task's lengths (transient)",
                 "long probe": "long probe (stationary)"}

# An ablation's line style, by its place among its model's variants (the model's own: solid).
_LINES = ("-", "--", ":", "-.")


def _panel(ax, data: pd.DataFrame, component: str, heads_span: tuple[float, float]) -> None:
    """One component in one regime against head count: a variant with a heads option as a line
    with 95 % error bars at its head counts (set a few points apart on the page so that the
    bars do not cover each other; ticks at the head counts); one without, as a level with its
    band across."""
    names = _variant_order(data["variant"].unique())
    swept = [v for v in names if (data.loc[data["variant"] == v, "heads"] > 0).all()]
    for variant in names:
        at = data[data["variant"] == variant].sort_values("heads")
        model = at["model"].iloc[0]
        colour = style.model_colour(model)
        kin = [v for v in names if data.loc[data["variant"] == v, "model"].iloc[0] == model]
        line = _LINES[kin.index(variant) % len(_LINES)]
        centre, low, high = (at[component].to_numpy(float), at[f"{component} low"].to_numpy(float),
                             at[f"{component} high"].to_numpy(float))
        if variant in swept:
            bars = ax.errorbar(at["heads"].to_numpy(float), centre,
                               yerr=[centre - low, high - centre], color=colour,
                               linestyle=line, marker=style.model_marker(model), markersize=3,
                               capsize=2, linewidth=1.0, elinewidth=0.7,
                               label=style.math_text(_label(variant)))
            style.dodge([bars], 4.0 * (swept.index(variant) - (len(swept) - 1) / 2))
        else:
            ax.axhspan(low[0], high[0], color=colour, alpha=0.12, linewidth=0)
            ax.axhline(centre[0], color=colour, linestyle=line, linewidth=1.0,
                       label=style.math_text(_label(variant)))
    ax.set_xscale("log", base=2)
    ax.set_xlim(heads_span[0] / 1.4, heads_span[1] * 1.4)
    style.ticks_at(ax, sorted(data.loc[data["heads"] > 0, "heads"].unique()), "x")


def sweep_figure(frame: pd.DataFrame, task: str, preset: str | None) -> Artifact:
    """The sweep at the deepest depth: the depth and seed components (rows) in each regime
    (columns) against head count; one shared y axis per component."""
    name = f"stability_init_heads_{task}"
    title = f"Spread of the state norm at initialisation by head count ({style.task_label(task)})"
    rows, deepest = sweep_rows(frame)
    counts = rows.groupby("cfg.variant")["heads"].nunique() if not rows.empty else pd.Series()
    if rows.empty or not (counts >= 2).any():
        return Missing(name, title, "the preset sweeps no head count (stability.sweep_heads)")
    import matplotlib.pyplot as plt

    style.apply_style()
    data = summary(rows, deepest)
    data = data[data["network_depth"] == deepest]
    models_of = rows.groupby("cfg.variant")["cfg.network.layer"].first()
    data = data.assign(model=data["variant"].map(models_of))
    probes = [p for p in PROBES if (data["probe"] == p).any()]
    heads = data.loc[data["heads"] > 0, "heads"]
    fig, axes = plt.subplots(2, len(probes), squeeze=False, sharex=True, sharey="row",
                             figsize=(style.FULL_WIDTH_IN, 4.4))
    for column, probe in enumerate(probes):
        for row, component in enumerate(("depth", "seed")):
            ax = axes[row, column]
            _panel(ax, data[data["probe"] == probe], component, (heads.min(), heads.max()))
            if row == 0:
                ax.set_title(_PANEL_TITLES[probe])
            else:
                ax.set_xlabel("heads")
    for row in axes:  # after every panel is drawn: the shared limits then hold them all
        row[0].set_ylim(bottom=0)
    axes[0, 0].set_ylabel(f"depth: s.d. of log norm\nacross {deepest} layers")
    axes[1, 0].set_ylabel("seed: RMS deviation\nof a seed's log norms")
    style.figure_legend(fig, ncol=4)
    table = _ordered(data).drop(columns=["model"])
    return Figure(
        name=name, title=title,
        caption=(
            f"Before training, on {style.task_label(task)} (preset {preset}), the "
            f"{deepest}-block networks: the spread of the per-layer state norm across the layers "
            f"of one network (top) and across seeds (bottom), for the probe batch at the task's "
            f"own lengths (left: the transient build-up) and the long probe (right: the "
            f"stationary level; {_lengths_text(rows)}). A layer with a heads option is drawn "
            f"at each head count measured, with the 95% t interval over seeds "
            f"({style.n_seeds_text(data['seeds'])}); a layer without one as a level with its "
            f"interval as a band; an ablation in its model's colour, dashed or dotted; the "
            f"points of one head count are set a few points apart. The same numbers at every "
            f"depth d <= {deepest} are in the table stability_init_sweep_{task}."),
        figure=fig, runs=run_ids(rows), data=table.reset_index(drop=True),
    )


def _per_seed(rows: pd.DataFrame, deepest: int) -> dict[tuple[str, str, int], pd.Series]:
    """``{(probe, variant, heads): depth component per seed}`` across all ``deepest`` layers."""
    out = {}
    for probe, (kind, column) in PROBES.items():
        of_kind = rows[rows[C.kind] == kind]
        for (variant, heads), group in of_kind.groupby(["cfg.variant", "heads"]):
            norms, seeds = norms_by_seed(group, column)
            if seeds and deepest >= 2:
                out[probe, variant, heads] = pd.Series(
                    state_norm.depth_component(norms[:, None, :]), index=seeds)
    return out


@dataclasses.dataclass(frozen=True)
class _Family:
    """One family of tests on the sweep: its finding's opening words, how its networks pair,
    what its n counts, its table caption's words, and its test (`harness.stats`)."""

    opening: str
    design: str
    counted: str
    caption: str
    compare: Callable[..., inference.Comparison]


_FAMILIES = {
    "probe length": _Family(
        "Probe length, task length − long probe", "paired by seed", "paired seeds",
        "task length − long probe, each variant at its registration's head count, paired by "
        "seed (the same networks on both probes)", inference.paired),
    "head count": _Family(
        "Head count, the fewest against the most heads measured", "independent networks",
        "networks in both groups",
        "the fewest against the most heads measured, per probe, independent networks (Welch's "
        "interval; the larger of Welch's and the permutation p)", inference.unpaired),
}


def _sweep_tests(values: dict[tuple[str, str, int], pd.Series], registered: dict[str, int]
                 ) -> pd.DataFrame:
    """Every test on the sweep, one row each, with Holm's correction within its family and the
    difference its test could detect with 80 % power at the family's first Holm level."""
    tests = []  # (family, variant, comparison, first values, second values)
    for variant in _variant_order(registered):
        key = ("task length", variant, registered[variant]), ("long probe", variant,
                                                              registered[variant])
        if all(k in values for k in key):
            tests.append(("probe length", _label(variant), "task length − long probe",
                          values[key[0]], values[key[1]]))
    for probe in PROBES:
        for variant in _variant_order({v for p, v, _ in values if p == probe}):
            counts = sorted(h for p, v, h in values if (p, v) == (probe, variant) and h)
            if len(counts) >= 2:
                tests.append(("head count", _label(variant),
                              f"{probe}: {counts[0]} − {_heads_text(counts[-1])}",
                              values[probe, variant, counts[0]],
                              values[probe, variant, counts[-1]]))
    records = []
    for family in _FAMILIES:
        mine = [t for t in tests if t[0] == family]
        compare = _FAMILIES[family].compare
        found = [compare(first, second) for *_, first, second in mine]
        p_holm = inference.holm([c.p for c in found])
        m = max(1, int(np.isfinite([c.p for c in found]).sum())) if found else 1
        for (_, variant, label, first, second), c, adjusted in zip(mine, found, p_holm):
            records.append({
                "Family": family, "Variant": variant, "Comparison": label, "n": c.n,
                "difference": c.diff,
                "95% CI low": c.low, "95% CI high": c.high, "effect size": c.effect,
                "test": c.test, "p": c.p, "tests (m)": m, "Holm p": adjusted,
                "MDD at Holm level": compare(first, second, alpha=inference.ALPHA / m).mdd,
            })
    return pd.DataFrame.from_records(records)


def _family_line(tests: pd.DataFrame, family: str, name: str) -> str | None:
    """One short sentence: how many of the family's tests are supported after Holm, and the
    largest difference with its interval and n; the rest is in the table ``name``."""
    mine = tests[tests["Family"] == family]
    if mine.empty:
        return None
    spec = _FAMILIES[family]
    supported = int((mine["Holm p"] <= inference.ALPHA).sum())
    top = mine.loc[mine["difference"].abs().idxmax()]
    counts = sorted(set(mine["n"].astype(int)))
    n = f"{counts[0]}" if len(counts) == 1 else f"{counts[0]} to {counts[-1]}"
    return (f"{spec.opening} ({spec.design}, n = {n} {spec.counted}): "
            f"{supported} of {len(mine)} differ after Holm; "
            f"largest {top['Variant']}, {top['Comparison']} {top['difference']:+.3g} "
            f"[{top['95% CI low']:+.3g}, "
            f"{top['95% CI high']:+.3g}] (every test: {name}).")


def _init_values(frame: pd.DataFrame) -> tuple[pd.DataFrame, int, dict, dict[str, int]]:
    """The sweep's rows, its deepest depth, the depth component per seed of each (probe,
    variant, heads), and each variant's registered head count."""
    rows, deepest = sweep_rows(frame)
    values = _per_seed(rows, deepest) if not rows.empty else {}
    ordinary = rows[~is_sweep(rows)] if not rows.empty else rows
    registered = dict(zip(ordinary["cfg.variant"], ordinary["heads"])) if values else {}
    return rows, deepest, values, registered


def sweep_tests_table(frame: pd.DataFrame, task: str, preset: str | None) -> Artifact:
    """Every test the sweep's finding summarises, one row each."""
    name = f"stability_init_tests_{task}"
    title = f"Every test on the spread at initialisation ({style.task_label(task)})"
    rows, deepest, values, registered = _init_values(frame)
    tests = _sweep_tests(values, registered) if values else pd.DataFrame()
    if tests.empty:
        return Missing(name, title, "no network of two or more layers measured at initialisation")
    # The test and m are one per family: said in the caption, not repeated on every row.
    out = (tests.assign(n=tests["n"].astype("Int64")).drop(columns=["test", "tests (m)"])
           .set_index(["Family", "Variant", "Comparison"]))
    per_family = "; ".join(
        f"{family}: {', '.join(sorted(set(group['test'])))}, m = {int(group['tests (m)'].iloc[0])}"
        for family, group in tests.groupby("Family", sort=False))
    return Table(
        name=name, title=title,
        caption=(
            f"Before training, on {style.task_label(task)} (preset {preset}): the depth "
            f"component (s.d. of log norm across the {deepest} layers of one network), per "
            f"test: first minus second, its 95% interval, the effect size (d_z paired, Hedges' "
            f"g unpaired), the test's p, Holm's adjustment over the family's m tests "
            f"({per_family}), and the "
            f"difference the test could detect with 80% power at Holm's first level (inf: not "
            f"at this n); n counts the paired seeds of a paired test and the networks of "
            f"both groups of an unpaired one. Probe length: "
            f"{_FAMILIES['probe length'].caption}. Head count: "
            f"{_FAMILIES['head count'].caption}."),
        short_caption=(
            f"Tests on the depth component before training: first − second, 95% interval, "
            f"effect size, p, Holm p over the family's m tests ({per_family}), MDD at Holm's "
            f"first level. {style.task_label(task)}, preset {preset}."),
        n="n", intervals=("95% CI low", "95% CI high"),
        frame=out, digits=digits_of_tests(out), runs=run_ids(rows),
    )


def sweep_finding(frame: pd.DataFrame, task: str, preset: str | None) -> Artifact:
    """Where the depth component at initialisation comes from, in two families of tests: the
    probe's length (the same networks on both probes, paired by seed) and the head count (the
    fewest against the most heads measured: independent networks, unpaired); one sentence per
    family, every test in `sweep_tests_table`."""
    name, title = (f"stability_init_sweep_findings_{task}",
                   f"Where the spread at initialisation comes from ({style.task_label(task)})")
    rows, deepest, values, registered = _init_values(frame)
    if not values:
        return Missing(name, title, "no network of two or more layers measured at initialisation")
    tests = _sweep_tests(values, registered)
    lines = [f"Depth component (s.d. of log norm across the {deepest} layers of one network) "
             f"before training on {style.task_label(task)}, preset {preset}."]
    lines += [line for family in _FAMILIES
              if (line := _family_line(tests, family, f"stability_init_tests_{task}"))]
    return Finding(name=name, title=title, lines=tuple(lines), runs=run_ids(rows))
