"""The stability section's pairs: every comparison its findings summarise, one row each, with
its size, interval, test, Holm-adjusted p and the difference its test could detect at the
Holm level (the findings say in one sentence what each family supports)."""

from __future__ import annotations

import pandas as pd

from ....report import style
from ....report.artifacts import Artifact, Missing, Table


def digits_of_tests(frame: pd.DataFrame) -> dict[str, int]:
    return {c: 2 if c in ("p", "Holm p") else 3 for c in frame.columns}


def pairs_table(families: pd.DataFrame, task: str, preset: str | None,
                run_ids: tuple[str, ...]) -> Artifact:
    """``families`` (`findings.stationary_families` and `findings.spread_families` together)
    as one table, by measure and depth."""
    name = f"stability_pairs_{task}"
    title = f"Every pair the stability findings compare ({style.task_label(task)})"
    if families.empty:
        return Missing(name, title, "no pair of variants with two seeds in common")
    frame = pd.DataFrame({
        "Measure": families["component"],
        "Depth": families["depth"].astype(int),
        "Pair": families["first"] + " − " + families["second"],
        "n": families["n"].astype("Int64"),
        "difference": families["diff"],
        "95% CI low": families["low"],
        "95% CI high": families["high"],
        "effect size": families["effect"],
        "test": families["test"],
        "p": families["p"],
        "pairs (m)": families["m"].astype("Int64"),
        "Holm p": families["p_holm"],
        "MDD at Holm level": families["mdd_family"],
    }).set_index(["Measure", "Depth", "Pair"])
    return Table(
        name=name, title=title,
        caption=(
            f"Trained networks on {style.task_label(task)} (preset {preset}). Each row is one "
            f"pair of variants on one measure at one depth: first minus second, the 95% "
            f"interval of that difference, the effect size (d_z paired, Hedges' g for the seed "
            f"component, whose seeds do not pair), the test, its p, Holm's adjustment over the "
            f"m pairs of that measure at that depth, and the difference the test could detect "
            f"with 80% power at Holm's first level (inf: not at this n). Lower is steadier "
            f"for every measure."),
        short_caption=(
            f"Every pair of variants the stability findings compare, per measure and depth: "
            f"first − second, 95% interval, effect size, test, p, Holm p over the measure's m "
            f"pairs, MDD at Holm's first level; lower is steadier. {style.task_label(task)}, "
            f"preset {preset}."),
        n="n", intervals=("95% CI low", "95% CI high"),
        frame=frame, digits=digits_of_tests(frame), runs=run_ids,
    )
