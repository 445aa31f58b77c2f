"""The accuracy section's findings: sentences computed from its statistics, true whichever way
the data fall (`harness.report._artifacts.Finding`)."""

from __future__ import annotations

import pandas as pd

from ... import stats as inference
from .. import _stats
from .._artifacts import Finding
from ._data import TITLES, Labels
from ._statistics import Z_INFORMATIVE, friedman_text


def findings(informative: pd.DataFrame, significance: pd.DataFrame, ranks: dict,
             tuned_tasks: list[str], left_out: list[tuple[str, str]], labels: Labels,
             run_ids: tuple[str, ...], bracketed: str = "") -> Finding:
    """What the statistics support: which tasks are informative, each informative task's
    pairwise comparisons, the ranking across tasks, whether the tuning bracketed each
    optimum (``bracketed``: `bracketing_text`), and what the preset leaves out."""
    regression_tasks = set(informative.loc[informative["metric"].str.startswith("test MSE"),
                                           "task"])
    verdicts = dict(zip(informative["task"], informative["informative"]))
    lines = _informative_lines(verdicts, labels)
    flat = [t for t, v in verdicts.items() if v == "no"]
    for task, of_task in (significance.groupby("task") if not significance.empty else []):
        if task in flat:
            continue
        lines.append(_task_finding(labels.task(task), of_task,
                                   regression=task in regression_tasks))
    lines += _rank_findings(ranks)
    if tuned_tasks and bracketed:
        lines.append(bracketed.strip())
    if not tuned_tasks:
        lines.append("No task was tuned at this preset, so these comparisons use one shared "
                     "recipe, which may favour one model's preferred learning rate.")
    if left_out:
        lines.append("Left out of this preset: " + "; ".join(f"{labels.task(task)} ({reason})"
                                                              for task, reason in left_out)
                     + ".")
    return Finding(name="accuracy_findings", title=TITLES["accuracy_findings"],
                   lines=tuple(lines), runs=run_ids)


def _informative_lines(verdicts: dict[str, str], labels: Labels) -> list[str]:
    """Which tasks are informative, which are not, and which cannot be judged."""
    lines = []
    good = [t for t, v in verdicts.items() if v == "yes"]
    flat = [t for t, v in verdicts.items() if v == "no"]
    unknown = [t for t, v in verdicts.items() if v == "unknown"]
    if good:
        lines.append(f"Informative tasks (some model beats the trivial baseline by more than "
                     f"{Z_INFORMATIVE:g} standard errors): {labels.tasks_text(good)}.")
    if flat:
        lines.append(f"Not informative (no model beats the trivial baseline by more than "
                     f"{Z_INFORMATIVE:g} standard errors, so their rankings are noise): "
                     f"{labels.tasks_text(flat)}.")
    if unknown:
        lines.append(f"No trivial baseline is recorded for {labels.tasks_text(unknown)} (runs made "
                     "before the study recorded it), so whether they are informative is not "
                     "stated.")
    return lines


def _task_finding(task: str, of_task: pd.DataFrame, regression: bool) -> str:
    """One task's pairwise comparisons in a sentence: what is significant, and every pair's
    size, interval, d_z, Holm p and detectable difference, true whichever way they come out."""
    unit = "" if regression else " pp"
    n = int(of_task["n"].max()) if len(of_task) else 0
    if n < 2:
        return (f"On {task}, {n} paired seed{'s' if n != 1 else ''}: no difference between "
                "models can be tested (a comparison needs at least two seeds).")
    test = of_task["test"].iloc[0]
    m = int(of_task["m"].iloc[0])
    head = (f"On {task} ({n} paired seeds; {test} test, Holm over the task's {m} "
            f"pair{'s' if m != 1 else ''}, 5%): ")
    spec = ".3g" if regression else ".2f"
    pairs = "; ".join(_stats.comparison_text(r, unit, spec) for r in of_task.itertuples())
    return (head + _stats.family_verdict(of_task) + " Per pair (first − second, 95% CI, d_z, "
            "Holm p, the difference detectable with 80% power at 5% assuming normal "
            f"differences): {pairs}.")


def _rank_findings(ranks: dict) -> list[str]:
    """The ranking across tasks, and only the pairwise claims that hold under every tie-break."""
    table = ranks.get("ranks")
    if not isinstance(table, pd.DataFrame) or table.shape[0] < 2:
        return []
    average = table.mean(axis=0).sort_values()
    best = ", ".join(f"{m} {r:.2f}" for m, r in average.items())
    pairs = ranks.get("pairs")
    apart = (pairs[pairs["significant"]] if isinstance(pairs, pd.DataFrame) and not pairs.empty
             else pd.DataFrame())
    if apart.empty:
        verdict = ("no two models differ significantly across tasks (Wilcoxon signed-rank, "
                   "Holm, 5%, under every tie-break), so no overall ordering is supported.")
    else:
        verdict = "; ".join(
            f"{r.better} ranks better than {r.second if r.better == r.first else r.first} "
            f"(Wilcoxon-Holm p = {r.p_holm:.2g})" for r in apart.itertuples()) + (
            " (Wilcoxon signed-rank, Holm, 5%, under every tie-break).")
    text = (f"Across {table.shape[0]} tasks, average ranks (lower is better): {best}. "
            f"{friedman_text(ranks)} Pairwise: {verdict}")
    if ranks["smallest_p"] > inference.ALPHA:
        text += (f" With {table.shape[0]} tasks the exact Wilcoxon test's smallest p is "
                 f"{ranks['smallest_p']:.3g}, so no pair could have reached 5%.")
    if ranks["weak"]:
        text += (" A rank claim over fewer than five tasks is weak: each task is one "
                 "observation of the ordering.")
    return [text]
