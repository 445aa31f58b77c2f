"""The accuracy section's findings: sentences computed from its statistics, true whichever way
the data fall (`harness.report.artifacts.Finding`)."""

from __future__ import annotations

import pandas as pd

from .... import stats as inference
from ....report.artifacts import Finding
from ._data import TITLES, Labels
from ._statistics import Z_INFORMATIVE, friedman_text


def findings(informative: pd.DataFrame, significance: pd.DataFrame, ranks: dict,
             tuned_tasks: list[str], left_out: list[tuple[str, str]], labels: Labels,
             run_ids: tuple[str, ...], bracketed: str = "",
             converged: pd.DataFrame | None = None) -> Finding:
    """What the statistics support: which tasks are informative, each informative task's
    largest difference (and its verdicts where n lets the test decide), the ranking across
    tasks, how many runs were still improving (``converged``: `peaked_last`), whether the
    tuning bracketed each optimum (``bracketed``: `bracketing_text`), and what the preset
    leaves out. What the design cannot decide is said once, in `design_lines`."""
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
    if converged is not None and not converged.empty:
        lines.append(_convergence_finding(converged, labels))
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


def _convergence_finding(converged: pd.DataFrame, labels: Labels) -> str:
    """How many tuned runs peaked at their last evaluation, per task; most of them doing so
    says the comparisons are of models still improving."""
    per_task = converged.groupby("task")[["at_last", "runs"]].sum()
    total, runs = int(per_task["at_last"].sum()), int(per_task["runs"].sum())
    text = (f"Still improving when training ended (best validation at the last evaluation): "
            f"{total} of {runs} compared runs ("
            + ", ".join(f"{labels.task(task)} {int(r.at_last)}/{int(r.runs)}"
                        for task, r in per_task.iterrows()) + ")")
    if 2 * total > runs:
        text += ("; most had not converged, so these are comparisons at this training budget, "
                 "not of the models' best")
    return text + "."


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
    """One task's comparisons in one sentence: its largest difference with its interval and n,
    and, where n lets the exact test reach the Holm level, which pairs differ; every pair's
    detail is in the table accuracy_significance."""
    unit = " MSE" if regression else " pp"
    spec = ".2g" if regression else ".1f"
    n = int(of_task["n"].max()) if len(of_task) else 0
    if n < 2:
        return (f"On {task}, {n} paired seed{'s' if n != 1 else ''}: no difference between "
                "models can be tested (a comparison needs at least two seeds).")
    top = of_task.loc[of_task["diff"].abs().idxmax()]
    text = (f"On {task} (n = {n}): largest difference {top['first']} − {top['second']} "
            f"{top['diff']:+{spec}}{unit}, 95% CI [{top['low']:+{spec}}, {top['high']:+{spec}}]")
    m = int(of_task["m"].iloc[0])
    if float(of_task["smallest_p"].max()) <= inference.ALPHA / max(m, 1):
        supported = of_task[of_task["significant"]]
        text += ("; significant (Holm, 5%): " + ", ".join(
            f"{r.better} over {r.second if r.better == r.first else r.first}"
            for r in supported.itertuples()) if not supported.empty
            else "; no pair differs significantly (Holm, 5%)")
    return text + " (every pair: accuracy_significance)."


def _rank_findings(ranks: dict) -> list[str]:
    """The ranking across tasks, and the pairwise claims only where the exact Wilcoxon test
    can reach the Holm level (else `design_lines` says why none is made)."""
    table = ranks.get("ranks")
    if not isinstance(table, pd.DataFrame) or table.shape[0] < 2:
        return []
    average = table.mean(axis=0).sort_values()
    best = ", ".join(f"{m} {r:.2f}" for m, r in average.items())
    text = (f"Across {table.shape[0]} tasks, average ranks (lower is better): {best}. "
            f"{friedman_text(ranks)}")
    if ranks["weak"]:
        text += " Fewer than five tasks: each is one observation of the ordering."
    k = table.shape[1]
    if ranks["smallest_p"] > inference.ALPHA / max(k * (k - 1) // 2, 1):
        return [text]
    pairs = ranks.get("pairs")
    apart = (pairs[pairs["significant"]] if isinstance(pairs, pd.DataFrame) and not pairs.empty
             else pd.DataFrame())
    if apart.empty:
        text += " No two models differ significantly across tasks (Wilcoxon-Holm, 5%)."
    else:
        text += " " + "; ".join(
            f"{r.better} ranks better than {r.second if r.better == r.first else r.first} "
            f"(Wilcoxon-Holm p = {r.p_holm:.2g})" for r in apart.itertuples()) + "."
    return [text]
