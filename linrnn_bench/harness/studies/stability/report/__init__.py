"""Report section of the stability study: hidden-state norms through training, depth and seeds.

The section is a package by role: `_data` (which rows and runs, from the store; the variants'
labels and order), `_statistics` (intervals over seeds, the spread per run, the stationary
norm's components), `tables`, `figures` and `findings` (the spread's verdict, the regime check,
the stationary verdict), `sweep` (the initialisation sweep); this module puts them in the report's order.
"""

from __future__ import annotations

import pandas as pd

from ....store import Store
from ....report import style
from ....report.artifacts import Artifact, Missing, Section, all_missing, no_runs, run_ids
from ._data import C, _selected, _stationary, _trained, _trained_by_design, \
    relative_norms, variants_of_models
from ._statistics import BAND, COMPONENTS, comparison_pairs, components_by_seed, \
    spread_by_run, stationary_arrays
from .attribution import attribution_finding, attribution_table, factor_logs
from .figures import _depth_figure, _eigen_figure, _profile_figure, _stationary_figure, \
    _training_figure
from .findings import _finding, _stationary_finding, regime_text, spread_families, \
    stationary_families
from .pairs import pairs_table
from .sweep import is_sweep, sweep_figure, sweep_finding, sweep_table, sweep_tests_table
from .tables import _components_table, _init_table, _levels_table, _spread_table, \
    _summary_table

__all__ = ["BAND", "COMPONENTS", "INTRO", "SECTION", "TITLE", "comparison_pairs",
           "components_by_seed", "regime_text", "relative_norms", "section", "spread_by_run",
           "stationary_arrays", "variants_of_models"]


TITLE = "Stability of the hidden-state norm"

INTRO = (
    "The RotRNN paper's central claim is that its rotation and normaliser xi keep the norm of "
    "the hidden state near constant through training, across depth and seeds, while the LRU's "
    "learned normaliser lets it drift. This study measures the same quantity for every layer: "
    "the Euclidean norm ||h_t|| of the layer's forward state vector at each step t (for RotRNN "
    "the norm of its real state, since the change of basis P is orthogonal), taken from the "
    "layer's own `hidden_states` on the input the layer sees inside the network in a training "
    "step (pre-norm BatchNorm with the probe batch's statistics, no dropout, padding excluded; "
    "inference-mode running statistics are (0, 1) at initialisation, which would leave deeper "
    "layers' inputs unnormalised, so they are not used by default). It is averaged over a fixed "
    "probe batch (the first validation examples, the same for every model and seed) and over "
    "time, and kept as a profile over t. Networks of several depths are measured at "
    "initialisation; some depths are also trained with the shared recipe (AdamW, warm-up and "
    "cosine decay, a separate learning rate for the recurrent parameters) and measured at every "
    "evaluation, together "
    "with the gradient norm of each layer's parameters and the eigenvalue moduli |lambda| of "
    "each layer. Ablations: RotRNN with xi off and with ring-initialised gamma, the LRU with its "
    "gamma normaliser off. The spread is summarised by the coefficient of variation (standard "
    "deviation over mean) of the per-step mean norm across layers, seeds and evaluation steps. "
    "That probe is as long as the task's sequences, which at the cpu sizes are far shorter than "
    "the layers' memory: its norms are the transient build-up (which grows like sqrt(t) "
    "whatever the normalisation), not the stationary level the normalisers fix. The claim is "
    "therefore measured on a long probe: the training split's examples laid back to back (the "
    "distribution the networks are trained on), long enough that every mode carrying a share "
    "of a layer's stationary energy has run three of its memories 1/(1 - |lambda|) before the "
    "window over each sequence's last steps opens (checked per mode, per measurement). Its norm "
    "is split into five components (across layers, across seeds, the move from initialisation, "
    "the drift after a burn-in, and the settle step), each compared seed by seed with "
    "calibrated tests, and attributed to the layer's input scale or to its recurrence's gain. "
    "The coefficient of variation is kept as the transient-regime measure."
)

# What the section makes with no run at all, by name (each task adds its own figures).
_NO_RUNS_TITLES = {
    "stability_training": "Hidden-state norm through training",
    "stability_depth": "Hidden-state norm by layer and depth",
    "stability_summary": "Spread of the hidden-state norm",
}


def section(store: Store) -> list[Artifact]:
    rows, runs, preset = _selected(store)
    if rows.empty:
        return all_missing(_NO_RUNS_TITLES, no_runs("stability"))
    out: list[Artifact] = []
    # The initialisation sweep's own runs are in its table and figure only.
    swept = is_sweep(rows)
    everything, rows = rows, rows[~swept]
    runs = runs[~is_sweep(runs)]
    for task in sorted(rows["cfg.task"].unique()):
        frame = rows[rows["cfg.task"] == task]
        layer = frame[frame[C.kind] == "layer"]
        trained = layer[_trained(layer)]
        if trained.empty and not _trained_by_design(preset, task):
            pass  # the preset measures this task at initialisation only (said in the summary)
        elif trained.empty:
            reason = f"no trained runs on {style.task_label(task)} at preset {preset}"
            out += [
                Missing(f"stability_training_{task}", f"Norm through training ({style.task_label(task)})", reason),
                Missing(f"stability_eigenvalues_{task}", f"|lambda| through training ({style.task_label(task)})",
                        reason),
            ]
        else:
            depths = sorted(int(d) for d in trained["cfg.network.depth"].unique())
            out += _stationary_artifacts(frame, trained, task, preset, depths)
            for depth in reversed(depths):
                out.append(_training_figure(trained, task, preset, depth,
                                            deepest=depth == depths[-1]))
            out.append(_eigen_figure(trained, task, preset))
        out.append(_init_table(frame, task, preset))
        with_sweep = everything[everything["cfg.task"] == task]
        out += [sweep_table(with_sweep, task, preset), sweep_figure(with_sweep, task, preset),
                sweep_tests_table(with_sweep, task, preset),
                sweep_finding(with_sweep, task, preset)]
        out.append(_depth_figure(layer, task, preset))
        out.append(_profile_figure(frame[frame[C.kind] == "profile"], task, preset))
        task_runs = runs[runs["cfg.task"] == task] if "cfg.task" in runs.columns else runs
        out.append(_summary_table(frame, task_runs, task, preset))
        if not trained.empty:
            spread = spread_by_run(trained)
            out.append(_spread_table(spread, task, preset, run_ids(trained)))
            out.append(_finding(spread, task, preset, run_ids(trained)))
            out.append(_pairs(frame, trained, spread, task, preset))
    return out


def _stationary_artifacts(frame: pd.DataFrame, trained: pd.DataFrame, task: str,
                          preset: str | None, depths: list[int]) -> list[Artifact]:
    """The headline: the long probe's stationary norms (figure per trained depth), their four
    components, their levels, and the verdicts."""
    stationary = _stationary(frame)
    if stationary.empty:
        return [Missing(f"stability_components_{task}",
                        f"Components of the stationary state norm ({style.task_label(task)})",
                        "no long-probe rows in the trained runs (stored before study version "
                        "4; rerun the stability study)")]
    arrays = stationary_arrays(stationary)
    logs = factor_logs(stationary)
    run_ids = sorted({r for a in arrays.values() for r in a["run_ids"]})
    out: list[Artifact] = [_stationary_figure(stationary, task, preset, d)
                           for d in reversed(depths)
                           if (stationary["cfg.network.depth"] == d).any()]
    out += [_components_table(arrays, task, preset, run_ids),
            _levels_table(trained, stationary, task, preset),
            attribution_table(logs, stationary, task, preset),
            _stationary_finding(arrays, stationary, task, preset, run_ids),
            attribution_finding(logs, stationary, task)]
    return out


def _pairs(frame: pd.DataFrame, trained: pd.DataFrame, spread: pd.DataFrame, task: str,
           preset: str | None) -> Artifact:
    """Every pair the two findings compare, in one table (`pairs.pairs_table`)."""
    stationary = _stationary(frame)
    families = [spread_families(spread)]
    if not stationary.empty:
        families.append(stationary_families(stationary_arrays(stationary), stationary))
    families = [f for f in families if not f.empty]
    runs = tuple(sorted(set(run_ids(trained)) | set(run_ids(stationary))))
    return pairs_table(pd.concat(families, ignore_index=True) if families else pd.DataFrame(),
                       task, preset, runs)


SECTION = Section("stability", TITLE, INTRO, section)
