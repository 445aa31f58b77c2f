"""The stability section's findings: the transient-regime spread, the regime check and the
stationary-regime verdict, sentences computed from its statistics, true whichever way the data
fall (`harness.report.artifacts.Finding`)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from .... import state_norm
from .... import stats as inference
from ....report import summaries, style
from ....report.artifacts import Finding
from ._data import C, _label, _variant_order, variants_of_models
from ._statistics import BURN_IN, COMPONENTS, _pair_family, _spread_summary, \
    comparison_pairs, components_by_seed


def spread_families(spread: pd.DataFrame) -> pd.DataFrame:
    """The transient spread's comparisons: per trained depth, every pair of the models' own
    variants (not the ablations) compared seed by seed on their CV (`harness.stats.pairwise`,
    Holm over the depth's pairs; lower is steadier), with ``depth`` and ``component``."""
    frames = []
    base = set(variants_of_models(spread["variant"]))
    for depth, runs in spread[spread["variant"].isin(base)].groupby("depth"):
        order = _variant_order(runs["variant"].unique())
        if len(order) < 2:
            continue
        by_seed = runs.pivot_table(index="seed", columns="variant", values="cv",
                                   aggfunc="mean").reindex(columns=order).rename(columns=_label)
        family = inference.pairwise(by_seed, higher_is_better=False)
        if int(family["n"].max()) >= 2:
            frames.append(family.assign(depth=int(depth), component=SPREAD))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


SPREAD = "CV (transient)"


def _finding(spread: pd.DataFrame, task: str, preset: str | None,
             run_ids: tuple[str, ...]) -> Finding:
    """Per trained depth, one sentence: the models' own variants' spread (CV), lowest and
    highest with intervals, and what their pairs support (`spread_families`; the pairs in the
    table ``stability_pairs_<task>``); the ablations in one more."""
    summary = _spread_summary(spread)
    base = set(variants_of_models(summary["variant"]))
    families = spread_families(spread)
    lines = [f"The spread of the state norm through training and across layers (CV) on the "
             f"probe batch at the task's own lengths, on {style.task_label(task)}, preset "
             f"{preset}: a transient-regime measure (lower is steadier)."]
    design = design_text(families)
    if design:
        lines.append(design)
    for depth, at_depth in summary.groupby("depth"):
        runs = spread[(spread["depth"] == depth) & spread["variant"].isin(base)]
        values = {v: r.set_index("seed")["cv"] for v, r in runs.groupby("variant")}
        family = families[families["depth"] == depth] if not families.empty else None
        if values:
            lines.append(_component_line(SPREAD, int(depth), values, family,
                                         f"stability_pairs_{task}"))
        ablations = at_depth[~at_depth["variant"].isin(base)]
        if not ablations.empty:
            lines.append(f"Ablations at depth {depth}: " + ", ".join(
                f"{_label(r.variant)} {r.cv:.3g} [{r.cv_low:.3g}, {r.cv_high:.3g}]"
                for r in ablations.sort_values("cv").itertuples()) + ".")
    return Finding(name=f"stability_findings_{task}",
                   title=f"The transient-regime spread: the probe batch at the task's own "
                         f"lengths ({style.task_label(task)})",
                   lines=tuple(lines), runs=run_ids)


def regime_text(stationary: pd.DataFrame, fraction: float = state_norm.STATIONARY_FRACTION
                ) -> str:
    """Whether the long probe's window is in the stationary regime, in one sentence true
    whichever way it comes out: the smallest white-noise energy reached at the window's first
    step over every layer, seed and step, per variant with a discrete system; and whether the
    task could draw longer sequences at all."""
    if stationary.empty:
        return "No long-probe rows: the stationary regime was not measured."
    if _checked_per_mode(stationary):
        return mode_regime_text(stationary)
    t_from, t_to = int(stationary[C.t_from].min()), int(stationary[C.t_to].max())
    text = ""
    if not stationary[C.lengthened].astype(bool).all():
        text += ("The task cannot draw longer sequences, so the long probe is the probe batch "
                 "at the task's own lengths. ")
    reached = (pd.to_numeric(stationary.get(C.energy_reached), errors="coerce")
               if C.energy_reached in stationary.columns else pd.Series(dtype=float))
    ratio = (pd.to_numeric(stationary.get(C.norm_ratio), errors="coerce")
             if C.norm_ratio in stationary.columns else pd.Series(math.nan, stationary.index))
    # A layer with a system but no energy fraction has an eigenvalue outside the unit disc:
    # no stationary level, so its window is never stationary.
    outside = ratio.notna() & reached.reindex(stationary.index).isna()
    by_variant = reached.groupby(stationary["cfg.variant"]).min().dropna()
    for v in set(stationary.loc[outside, "cfg.variant"]):
        by_variant[v] = -math.inf
    without = sorted(set(stationary["cfg.variant"]) - set(by_variant.index))
    short = by_variant[by_variant < fraction]
    text += (f"Regime check (probe steps {t_from}-{t_to}, window the last {_window(stationary)}): ")
    if by_variant.empty:
        text += "no measured layer declares a discrete system, so it cannot be checked."
    elif short.empty:
        text += (f"met: every layer's white-noise energy at step {t_from} is at least "
                 f"{fraction:.0%} of its stationary level (smallest "
                 f"{by_variant.min():.3f}, {_label(by_variant.idxmin())}).")
    else:
        transient = {v: r for v, r in short.items() if np.isfinite(r)}
        unstable = [v for v, r in short.items() if not np.isfinite(r)]
        parts = []
        if transient:
            parts.append("NOT met for " + ", ".join(f"{_label(v)} (smallest {r:.3f})"
                                                    for v, r in transient.items())
                         + f": their windows are still transient (energy below {fraction:.0%}"
                         " of the stationary level)")
        if unstable:
            parts.append("no stationary level for " + ", ".join(_label(v) for v in unstable)
                         + " (an eigenvalue left the unit disc in training: the norm grows "
                         "with the probe's length)")
        met = by_variant[by_variant >= fraction]
        text += ("; ".join(parts) + ", so their components do not measure the stationary claim"
                 + (f"; met for the others (smallest {met.min():.3f}, {_label(met.idxmin())})."
                    if not met.empty else "."))
    if without:
        text += (" Not checkable (no discrete system): "
                 + ", ".join(_label(v) for v in without) + ".")
    return text


_SOURCES = {
    "stream": "the training split's examples laid back to back (the training distribution)",
    "generator": "sequences drawn by the task's generator at longer lengths than trained on "
                 "(out of the training distribution)",
}


def _checked_per_mode(stationary: pd.DataFrame) -> bool:
    """Whether the rows carry the per-mode regime check (study version 5 on)."""
    return C.settled in stationary.columns and stationary[C.settled].notna().any()


def _failed(stationary: pd.DataFrame) -> pd.Series:
    """Rows whose per-mode regime check failed (a row of a layer without a system: False)."""
    return pd.to_numeric(stationary[C.settled], errors="coerce") == 0


def mode_regime_text(stationary: pd.DataFrame) -> str:
    """The long probe and its per-mode regime check (`harness.state_norm.mode_regime`) in two
    sentences true whichever way it comes out: where the sequences come from, their lengths
    and window; per variant with a discrete system, met in every row, or in how many not, with
    the largest share of the stationary energy in modes still settling and the slowest
    carrying mode's memory."""
    sources = sorted(set(stationary.get(C.source, pd.Series(dtype=object)).dropna()))
    where = "; ".join(_SOURCES.get(s, s) for s in sources) or "the long probe"
    text = (f"Long probe: {where}, {int(stationary[C.t_to].min())}-"
            f"{int(stationary[C.t_to].max())} steps, window the last {_window(stationary)}. "
            f"Per-mode regime check (the modes holding all but "
            f"{state_norm.CARRYING_SHARE:.0%} of a layer's stationary energy have run "
            f"{state_norm.MEMORIES} memories 1/(1 - |lambda|) before the window opens): ")
    checked = stationary[stationary[C.settled].notna()]
    failed = _failed(checked)
    parts_ok, parts_not = [], []
    for v in _variant_order(checked["cfg.variant"].unique()):
        mine = checked["cfg.variant"] == v
        bad = checked[mine & failed]
        if bad.empty:
            parts_ok.append(_label(v))
            continue
        memory = pd.to_numeric(bad[C.memory_slowest], errors="coerce")
        how = ("an eigenvalue left the unit disc" if memory.isna().any() else
               f"up to {pd.to_numeric(bad[C.unsettled_share]).max():.0%} of the energy in modes "
               f"still settling, slowest carrying memory {memory.max():,.0f} steps")
        parts_not.append(f"{_label(v)} in {len(bad)} of {int(mine.sum())} layer measurements "
                         f"({how})")
    if parts_not:
        text += "NOT met for " + "; ".join(parts_not)
        text += (f"; met for {', '.join(parts_ok)}." if parts_ok else ".")
    else:
        text += f"met for every variant ({', '.join(parts_ok)})."
    without = sorted(set(stationary["cfg.variant"]) - set(checked["cfg.variant"]))
    if without:
        text += (" Not checkable (no discrete system): "
                 + ", ".join(_label(v) for v in without) + ".")
    return text


def _window(stationary: pd.DataFrame) -> str:
    """The window as the runs' config states it (a fraction of each sequence)."""
    widths = (stationary["cfg.window"].dropna().unique() if "cfg.window" in stationary.columns
              else [])
    return f"{float(widths[0]):.0%} of each sequence" if len(widths) == 1 else "steps"


def stationary_families(arrays: dict, stationary: pd.DataFrame) -> pd.DataFrame:
    """Every comparison of the stationary components: per trained depth and component, the
    pairs of `comparison_pairs` between variants in the stationary regime, Holm over the pairs
    of that component at that depth (`_pair_family`; the seed component unpaired, as a seed's
    deviation is from its own layer's mean). One row per pair, with ``depth`` and
    ``component``; empty when no pair has two seeds."""
    frames = []
    for depth in sorted({d for d, _ in arrays}):
        here = {v: a for (d, v), a in arrays.items() if d == depth and a["seeds"]}
        unsettled = set(_unsettled(stationary[stationary["cfg.network.depth"] == depth],
                                   tuple(here)))
        pairs = [(a, b) for a, b in comparison_pairs(here) if a in here and b in here
                 and a not in unsettled and b not in unsettled]
        per_seed = _per_seed(here)
        for key, label, _ in COMPONENTS:
            if key == "depth" and depth == 1:
                continue
            family = _pair_family({v: per_seed[v][key] for v in here}, pairs,
                                  paired=key != "seed")
            if family is not None and int(family["n"].max()) >= 2:
                frames.append(family.assign(depth=depth, component=label))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _per_seed(here: dict) -> dict[str, pd.DataFrame]:
    return {v: components_by_seed(a["norms"], a["steps"], a["burn_in"]).set_index(
        pd.Index(a["seeds"], name="seed")) for v, a in here.items()}


def design_text(families: pd.DataFrame, alpha: float = inference.ALPHA) -> str | None:
    """Said once: when no comparison of ``families`` can pass Holm's first level at its n
    (the exact test's smallest p above alpha / m), which no effect size could change."""
    if families.empty:
        return None
    first_level = alpha / families["m"].astype(float)
    if not bool((families["smallest_p"] > first_level).all()):
        return None
    n = int(families["n"].max())
    m = int(families["m"].max())
    return (f"At n = {n} paired seeds no comparison below can be declared: the exact test's "
            f"smallest p ({float(families['smallest_p'].min()):.3g}) is above Holm's first level "
            f"over {m} pairs ({alpha / m:.2g}). The estimates and intervals stand.")


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]


def _component_line(label: str, depth: int, values: dict[str, pd.Series],
                    family: pd.DataFrame | None, name: str) -> str:
    """One component at one depth in one sentence: the lowest and highest variant with their
    means and intervals, n, and what the pairs support (the pairs are in ``name``)."""
    means = {v: inference.nonnegative_interval(x) for v, x in values.items()}
    ranked = sorted((v for v in means if math.isfinite(means[v][0])), key=lambda v: means[v][0])
    if not ranked:
        return f"{_capital(label)} at depth {depth}: not defined."
    n = min(int(pd.Series(values[v]).notna().sum()) for v in ranked)

    def one(v: str) -> str:
        mean, low, high, _ = means[v]
        return f"{_label(v)} {mean:.3g} [{low:.3g}, {high:.3g}]"

    text = (f"{_capital(label)} at depth {depth} (n = {n}): lowest {one(ranked[0])}"
            + (f", highest {one(ranked[-1])}" if len(ranked) > 1 else ""))
    if family is None or family.empty:
        return text + "; no pair tested."
    supported = family[family["significant"]]
    if (family["smallest_p"] > inference.ALPHA / family["m"]).all():
        return text + f"; no pair decidable at this n ({name})."
    if supported.empty:
        return text + (f"; no pair differs after Holm (smallest Holm p "
                       f"{float(family['p_holm'].min()):.2g}; {name}).")
    return text + "; lower after Holm: " + ", ".join(
        f"{r.better} < {r.second if r.better == r.first else r.first}"
        for r in supported.itertuples()) + f" ({name})."


def _stationary_finding(arrays: dict, stationary: pd.DataFrame, task: str,
                        preset: str | None, run_ids) -> Finding:
    """The verdict on the paper's claim, the regime check, the scale, then one short sentence
    per trained depth and component (`_component_line`); the per-pair detail is the table
    ``stability_pairs_<task>`` (`stationary_families`)."""
    lines = [regime_text(stationary)]
    steps_trained = int(pd.to_numeric(stationary["cfg.train.steps"]).max())
    verdict = claim_verdict(arrays, stationary, task, steps_trained)
    if verdict:
        lines.insert(0, verdict)
    depths = sorted({d for (d, _), a in arrays.items() if a["seeds"]})
    if not depths:
        return Finding(name=f"stability_stationary_findings_{task}",
                       title=f"The stationary-regime verdict ({style.task_label(task)})",
                       lines=tuple(lines), runs=tuple(run_ids))
    some = next(a for a in arrays.values() if a["seeds"])
    dropped = sum(a["dropped"] for a in arrays.values())
    lines.append(
        f"Measured on {style.task_label(task)} at depth{'s' if len(depths) > 1 else ''} "
        f"{', '.join(map(str, depths))}, {steps_trained} training steps (evaluations "
        f"{', '.join(str(x) for x in some['steps'])}), preset {preset}"
        + (f"; {dropped} run(s) without a finite stationary norm at every evaluation "
           f"(diverged, or overflowed on the probe) left out" if dropped
           else "") + ". The RotRNN paper's claim is about ListOps, through training, across "
                      "the depth of its networks and across seeds.")
    families = stationary_families(arrays, stationary)
    design = design_text(families)
    if design:
        lines.append(design)
    name = f"stability_pairs_{task}"
    for depth in depths:
        here = {v: a for (d, v), a in arrays.items() if d == depth and a["seeds"]}
        unsettled = _unsettled(stationary[stationary["cfg.network.depth"] == depth], tuple(here))
        if unsettled:
            lines.append(f"Left out of the comparisons at depth {depth} (not in the stationary "
                         f"regime): {', '.join(_label(v) for v in sorted(unsettled))}.")
        per_seed = _per_seed(here)
        for key, label, _ in COMPONENTS:
            if key == "depth" and depth == 1:
                continue
            family = (families[(families["depth"] == depth) & (families["component"] == label)]
                      if not families.empty else None)
            lines.append(_component_line(f"{label} component", depth,
                                         {v: per_seed[v][key] for v in here}, family, name))
    return Finding(name=f"stability_stationary_findings_{task}",
                   title=f"The stationary-regime verdict ({style.task_label(task)})",
                   lines=tuple(lines), runs=tuple(run_ids))


# The paper's claim, tested once: RotRNN's stationary norm drifts less through training than the
# LRU's. The pre-declared primary test pools the trained depths (each seed's drift component
# averaged over them), paired by seed; the per-depth, per-component comparisons are secondary.
CLAIM = ("rotrnn", "lru")


def claim_verdict(arrays: dict, stationary: pd.DataFrame, task: str, steps: int) -> str | None:
    """One plain sentence on the RotRNN paper's claim, computed from the data whichever way it
    falls: RotRNN − LRU in the drift component (the s.d. of a layer's log stationary norm over
    training), each seed's value averaged over the trained depths, the exact sign-flip test
    over the paired seeds (`harness.stats.paired`), with the scale it was measured at and the
    papers'. None when either layer has no runs here."""
    rotrnn, lru = CLAIM
    depths = sorted({d for d, v in arrays if v == rotrnn and arrays[d, v]["seeds"]}
                    & {d for d, v in arrays if v == lru and arrays[d, v]["seeds"]})
    if not depths:
        return None

    def pooled(variant: str) -> pd.Series:
        per_depth = [components_by_seed(arrays[d, variant]["norms"], arrays[d, variant]["steps"],
                                        arrays[d, variant]["burn_in"])
                     ["drift"].set_axis(arrays[d, variant]["seeds"]) for d in depths]
        return pd.concat(per_depth, axis=1).mean(axis=1, skipna=False)

    both = pd.concat([pooled(rotrnn), pooled(lru)], axis=1, join="inner").dropna()
    c = inference.paired(both.iloc[:, 0], both.iloc[:, 1])
    width = sorted({int(w) for w in pd.to_numeric(
        stationary.get("cfg.network.d_model", pd.Series(dtype=float)), errors="coerce").dropna()})
    head = (f"The RotRNN paper's claim (its norm drifts less through training than the LRU's; "
            f"drift after the first {BURN_IN:.0%} of training) on "
            f"{style.task_label(task)}, {_depths_text(depths)}, n = {c.n} "
            f"paired seed{'s' if c.n != 1 else ''}: drift RotRNN − LRU {c.diff:+.3g} "
            f"[{c.low:+.3g}, {c.high:+.3g}], p = {c.p:.2g} ({c.test})")
    if c.n < 2:
        verdict = "too few seeds to test it"
    elif c.p <= inference.ALPHA:
        verdict = "supported" if c.diff < 0 else "contradicted (RotRNN's drifts more)"
    elif c.smallest_p > inference.ALPHA:
        lean = ("towards the claim" if c.high < 0 else "against it" if c.low > 0
                else "either way")
        verdict = (f"undecidable at this n (smallest p {c.smallest_p:.3g}), the interval "
                   f"leaning {lean}")
    else:
        verdict = f"not supported at 5% (MDD {c.mdd:.3g})"
    unsettled = _unsettled(stationary, CLAIM)
    if unsettled:
        verdict += (f"; {' and '.join(_label(v) for v in unsettled)} not in the stationary "
                    "regime (see the regime check)")
    scale = f"width {'/'.join(map(str, width)) or '?'}, {steps} steps" + _papers_scale(task)
    return f"{head}: {verdict}; {scale}."


def _unsettled(stationary: pd.DataFrame, variants: tuple[str, ...],
               fraction: float = state_norm.STATIONARY_FRACTION) -> list[str]:
    """Which of ``variants`` the long probe's window did not reach the stationary regime for:
    the per-mode check failed in any of its rows (`mode_regime_text`), or, in rows stored
    before it, the energy was below ``fraction`` of the stationary level somewhere, or there
    was no stationary level."""
    if _checked_per_mode(stationary):
        failed = _failed(stationary)
        return [v for v in variants if (failed & (stationary["cfg.variant"] == v)).any()]
    if C.energy_reached not in stationary.columns:
        return []
    reached = pd.to_numeric(stationary[C.energy_reached], errors="coerce")
    out = []
    for v in variants:
        mine = reached[stationary["cfg.variant"] == v]
        if not mine.empty and (mine.isna().any() or float(mine.min()) < fraction):
            out.append(v)
    return out


def _depths_text(depths: list[int]) -> str:
    return (f"depth {depths[0]}" if len(depths) == 1
            else f"depths {', '.join(map(str, depths))} pooled")


def _papers_scale(task: str) -> str:
    """`` (papers: D blocks, H = W, S steps)``: the task's paper-scale run as the accuracy
    study's gpu preset states it (with its source, LRU Table 9), or "" where that preset does
    not run the task."""
    from ... import accuracy

    try:
        config = accuracy.STUDY.config("gpu")
        if task not in config.tasks:
            return ""
        resolved = accuracy.resolve(config, config.models[0], task)
    except Exception:  # noqa: BLE001 (a preset that cannot be built leaves the comparison out)
        return ""
    return (f" (papers: {resolved.network.depth} blocks, H = {resolved.network.d_model}, "
            f"{resolved.train.steps:,} steps)")
