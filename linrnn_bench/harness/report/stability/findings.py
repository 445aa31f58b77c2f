"""The stability section's findings: the transient-regime spread, the regime check and the
stationary-regime verdict, sentences computed from its statistics, true whichever way the data
fall (`harness.report._artifacts.Finding`)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ... import state_norm
from ... import stats as inference
from .. import _stats, style
from .._artifacts import Finding
from ._data import C, _label, _variant_order, variants_of_models
from ._statistics import BURN_IN, COMPONENTS, _pair_family, _spread_summary, \
    comparison_pairs, components_by_seed


def _finding(spread: pd.DataFrame, task: str, preset: str | None,
             run_ids: tuple[str, ...]) -> Finding:
    """Per trained depth: the layers ranked by spread, and every pair of layers (each model's
    own variant, not the ablations) compared seed by seed (`harness.stats.pairwise`: the exact
    sign-flip test, Holm over the depth's pairs), with its size, interval and MDD."""
    lines = []
    summary = _spread_summary(spread)
    base = set(variants_of_models(summary["variant"]))
    for depth, at_depth in summary.groupby("depth"):
        models_here = at_depth[at_depth["variant"].isin(base)].sort_values("cv")
        if models_here.empty:
            continue
        n = int(at_depth["seeds"].min())
        ranked = ", ".join(f"{_label(r.variant)} {r.cv:.3g} [{r.cv_low:.3g}, {r.cv_high:.3g}]"
                           for r in models_here.itertuples())
        runs = spread[spread["depth"] == depth]
        text = (f"On {style.task_label(task)} at depth {depth} ({n} seed{'s' if n != 1 else ''}, preset "
                f"{preset}), the spread of the state norm through training and across layers "
                f"(CV; mean and 95% t interval over seeds), from lowest: {ranked}.")
        ordered = list(models_here["variant"])
        if len(ordered) >= 2:
            by_seed = runs[runs["variant"].isin(ordered)].pivot_table(
                index="seed", columns="variant", values="cv", aggfunc="mean")
            by_seed = by_seed.reindex(columns=ordered).rename(columns=_label)
            family = inference.pairwise(by_seed, higher_is_better=False)
            if int(family["n"].max()) < 2:
                text += (" With fewer than two seeds run by both layers of a pair, no "
                         "difference between layers can be tested.")
            else:
                m = int(family["m"].iloc[0])
                text += (f" Compared seed by seed ({family['test'].iloc[0]} test, Holm over the "
                         f"{m} pair{'s' if m != 1 else ''} at this depth, 5%; a lower CV is "
                         f"steadier): {_stats.family_verdict(family)}")
                text += (" Per pair (first − second, 95% CI, effect size, Holm p, the difference "
                         "detectable with 80% power at 5% assuming normal differences): "
                         + "; ".join(_stats.comparison_text(r, spec=".3g")
                                     for r in family.itertuples()) + ".")
        lines.append(text)
        ablations = at_depth[~at_depth["variant"].isin(base)]
        if not ablations.empty:
            lines.append(f"Ablations on {style.task_label(task)} at depth {depth}: " + ", ".join(
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


def _stationary_finding(arrays: dict, stationary: pd.DataFrame, task: str,
                        preset: str | None, run_ids) -> Finding:
    """Per trained depth and component: the variants' means with intervals, then every pair of
    `comparison_pairs` compared seed by seed (`harness.stats.pairwise` on each pair alone,
    Holm over the depth's pairs of that component), with the scale measured and the paper's."""
    lines = [regime_text(stationary)]
    steps_trained = int(pd.to_numeric(stationary["cfg.train.steps"]).max())
    verdict = claim_verdict(arrays, stationary, task, steps_trained)
    if verdict:
        lines.insert(0, verdict)
    for depth in sorted({d for d, _ in arrays}):
        here = {v: a for (d, v), a in arrays.items() if d == depth and a["seeds"]}
        if not here:
            continue
        per_seed = {v: components_by_seed(a["norms"], a["steps"], a["burn_in"]).set_index(
            pd.Index(a["seeds"], name="seed")) for v, a in here.items()}
        n = min(len(a["seeds"]) for a in here.values())
        dropped = sum(a["dropped"] for a in here.values())
        at = stationary[stationary["cfg.network.depth"] == depth]
        scale = (f"Measured on {style.task_label(task)} at depth {depth}, {n} seed{'s' if n != 1 else ''}, "
                 f"{steps_trained} training steps (evaluations "
                 f"{', '.join(str(s) for s in next(iter(here.values()))['steps'])}), long-probe "
                 f"sequences of {int(at[C.t_from].min())}-{int(at[C.t_to].max())} steps, preset "
                 f"{preset}" + (f"; {dropped} run(s) without every evaluation (diverged) left "
                                "out" if dropped else "")
                 + ". The RotRNN paper's claim is about ListOps, through training, across the "
                   "depth of its networks and across seeds.")
        lines.append(scale)
        # A layer whose window never reached the stationary regime measures no stationary
        # claim: it stays in the tables and leaves the tests' families.
        unsettled = set(_unsettled(at, tuple(here)))
        pairs = [(a, b) for a, b in comparison_pairs(here) if a in here and b in here
                 and a not in unsettled and b not in unsettled]
        if unsettled:
            lines.append("Left out of the comparisons below (not in the stationary regime): "
                         + ", ".join(_label(v) for v in sorted(unsettled)) + ".")
        for key, label, what in COMPONENTS:
            if key == "depth" and depth == 1:
                lines.append("Depth component at depth 1: not defined (one layer).")
                continue
            values = {v: per_seed[v][key] for v in here}
            means_by = {v: float(values[v].mean()) for v in here}  # NaN when undefined
            ranked = sorted(here, key=lambda v: (math.isnan(means_by[v]), means_by[v]))
            means = []
            for v in ranked:
                mean, low, high, _ = inference.nonnegative_interval(values[v])
                means.append(f"{_label(v)} {mean:.3g} [{low:.3g}, {high:.3g}]")
            text = (f"{label.capitalize()} component ({what}) at depth {depth}, mean and 95% "
                    f"t interval over seeds, from lowest: {', '.join(means)}.")
            # A seed's seed component is its deviation from its own layer's mean over seeds:
            # the seeds of two layers do not correspond, so the layers are compared unpaired.
            paired = key != "seed"
            family = _pair_family(values, pairs, paired=paired)
            if family is None or int(family["n"].max()) < 2:
                text += " Fewer than two seeds in common: no pair can be tested."
            else:
                m = int(family["m"].iloc[0])
                how = ("Paired by seed" if paired else "As independent groups (a seed's "
                       "deviation is from its own layer's mean, so seeds do not pair)")
                text += (f" {how} ({family['test'].iloc[0]} test, Holm over the {m} "
                         f"pair{'s' if m != 1 else ''} of this component at this depth, 5%; "
                         f"lower is steadier): {_stats.family_verdict(family)}"
                         " Per pair (first − second, 95% CI, effect size, Holm p, the difference "
                         "detectable with 80% power at 5%): "
                         + "; ".join(_stats.comparison_text(r, spec=".3g")
                                     for r in family.itertuples()) + ".")
            lines.append(text)
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
    from ...studies import accuracy

    try:
        config = accuracy.STUDY.config("gpu")
        if task not in config.tasks:
            return ""
        resolved = accuracy.resolve(config, config.models[0], task)
    except Exception:  # noqa: BLE001 (a preset that cannot be built leaves the comparison out)
        return ""
    return (f" (papers: {resolved.network.depth} blocks, H = {resolved.network.d_model}, "
            f"{resolved.train.steps:,} steps)")
