"""Which accuracy runs the report shows, and which learning rates it counts as each cell's tuned
ones: shared by the accuracy section (`harness.studies.accuracy.report`) and by the stability study,
which trains at the rates selected here when the store holds them (`tuned_rates`).

The rule: the runs of the preset the store holds most completely (`shown_runs`); in each
(task, model, depth) cell, the learning-rate pair with the best mean validation metric over
seeds (`harness.studies.accuracy.select`, `configurations`), on validation only.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..store import Store
from ..studies import accuracy as study
from .origins import CUSTOM, in_preset, pick_preset, with_presets

STUDY = "accuracy"
# Column names of the accuracy study's config (dotted, as the store writes a run's config).
MODEL = "cfg.network.layer"
DEPTH = "cfg.network.depth"
TASK = "cfg.task"
LR = study.LR
RECURRENT_LR = study.RECURRENT_LR


def with_keys(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with plain ``model``, ``task``, ``depth``, ``lr`` and ``rlr`` columns (depth 0
    and NaN rates when not recorded)."""
    depth = (pd.to_numeric(frame[DEPTH], errors="coerce").fillna(0).astype(int)
             if DEPTH in frame.columns else 0)
    out = frame.assign(model=frame[MODEL], task=frame[TASK], depth=depth)
    for column, name in ((LR, "lr"), (RECURRENT_LR, "rlr"), (study.RECIPE_LR, "recipe_lr"),
                         (study.RECIPE_RECURRENT_LR, "recipe_rlr")):
        out[name] = (pd.to_numeric(frame[column], errors="coerce") if column in frame.columns
                     else math.nan)
    return out


# A run's parameter budget (`harness.studies.accuracy.AccuracyConfig.match_parameters`):
# absent or empty for a run at equal width.
BUDGET = "cfg.parameter_budget"


def is_matched(runs: pd.DataFrame) -> pd.Series:
    """Which of ``runs`` (rows or runs of the store) were sized to a parameter budget."""
    if BUDGET not in runs.columns:
        return pd.Series(False, index=runs.index)
    return runs[BUDGET].notna()


def shown_runs(store: Store, arm: str = "width"
              ) -> tuple[pd.DataFrame, pd.DataFrame, str | None, str]:
    """Rows and runs of the largest-scale preset in the store, and a note on what was left out.

    ``arm``: ``"width"``, the runs at equal width (every table but the parameter-matched
    one), or ``"matched"``, the runs sized to a parameter budget.
    """
    rows = store.read(STUDY)
    runs = store.runs(STUDY)
    if runs.empty:
        return rows, runs, None, ""
    runs = with_presets(runs, STUDY)
    done = runs[runs["status"] == "done"]
    preset = pick_preset(done["preset"].unique(), STUDY, done["run_id"])
    if preset is None:
        preset = pick_preset(runs["preset"].unique(), STUDY, runs["run_id"])
    keep = in_preset(runs["preset"], preset)
    left_out = runs[~keep]
    note = ""
    if not left_out.empty:
        found = sorted(left_out["preset"].astype(str).unique())
        custom = (
            "; custom: made with key=value overrides or by an earlier version of the grid"
            if CUSTOM in found else ""
        )
        note = (
            f" The store also holds {len(left_out)} run(s) outside preset {preset} "
            f"({', '.join(found)}{custom}), not shown: numbers of different configurations are "
            "never averaged together."
        )
    runs = runs[keep]
    runs = runs[is_matched(runs) == (arm == "matched")]
    if not rows.empty:
        rows = rows[rows["run_id"].isin(set(runs["run_id"]))]
    return rows, runs, preset, note


# --------------------------------------------------------------------------------------------
# Which runs make the one-recipe and the tuned configuration of each cell


def same_value(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


def configurations(final: pd.DataFrame) -> pd.DataFrame:
    """``final`` (keyed by `with_keys`) with boolean columns ``recipe``, ``selected``, ``held_out``
    and ``tuned``: whether the run is at its cell's shared-recipe rates (recorded in its spec);
    at the rates `study.select` picks on validation; of a seed whose validation metric took no
    part in that choice (not one of the cell's tuning seeds, `study.selecting`); and both, the
    tuned configuration, whose test metrics the report averages and compares. A tuning seed
    never enters the tuned configuration: a selection on validation biases the test metric of
    the very runs it selects upwards. A cell with one rate pair was not tuned: every run is in
    all four (also for runs of a study version that did not record the recipe)."""
    is_recipe = np.zeros(len(final), dtype=bool)
    is_selected = np.zeros(len(final), dtype=bool)
    held_out = np.ones(len(final), dtype=bool)
    for key, cell in final.groupby(["task", "model", "depth"]):
        position = final.index.get_indexer(cell.index)
        if cell[["lr", "rlr"]].drop_duplicates().shape[0] == 1:
            is_recipe[position] = is_selected[position] = True
            continue
        keyed = cell.assign(**{LR: cell["lr"], RECURRENT_LR: cell["rlr"]})
        chosen = study.select(keyed, study.selection_of(cell))
        is_recipe[position] = [same_value(a, r_lr) and same_value(b, r_rlr) for a, b, r_lr, r_rlr
                               in zip(cell["lr"], cell["rlr"], cell["recipe_lr"],
                                      cell["recipe_rlr"])]
        tuning = set(study.selecting(keyed)["seed"]) if "seed" in cell.columns else set()
        held_out[position] = ~cell["seed"].isin(tuning).to_numpy() if tuning else False
        if chosen is not None:
            is_selected[position] = [same_value(a, chosen[0]) and same_value(b, chosen[1])
                                     for a, b in zip(cell["lr"], cell["rlr"])]
    return final.assign(recipe=is_recipe, selected=is_selected, held_out=held_out,
                        tuned=is_selected & held_out)


def tuned_rates(store: Store) -> dict[tuple[str, str, int], tuple[float, float]]:
    """``{(model, task, depth): (lr, recurrent_lr)}``: the pair `configurations` selects in each
    cell of the shown preset that was trained at more than one pair (a tuned cell), from its
    finished runs. Cells trained at one pair only (untuned) are left out; so is everything when
    the store holds no accuracy run."""
    rows, runs, _, _ = shown_runs(store)
    if rows.empty or runs.empty:
        return {}
    done = set(runs.loc[runs["status"] == "done", "run_id"])
    final = rows[(rows["kind"] == "final") & rows["run_id"].isin(done)]
    if final.empty:
        return {}
    final = configurations(with_keys(final).reset_index(drop=True))
    out = {}
    for (task, model, depth), cell in final.groupby(["task", "model", "depth"]):
        if cell[["lr", "rlr"]].drop_duplicates().shape[0] < 2:
            continue
        chosen = cell[cell["selected"]][["lr", "rlr"]].drop_duplicates()
        if len(chosen) == 1:
            out[str(model), str(task), int(depth)] = (float(chosen["lr"].iloc[0]),
                                                      float(chosen["rlr"].iloc[0]))
    return out


def bracketing(store: Store) -> pd.DataFrame:
    """Per tuned cell of the shown preset (finished runs at two or more pairs): the pairs tried,
    the one selected, and whether it lies inside the grid (``bracketed``) or at an end. A pair
    whose runs diverged was tried and is worse than any finished one: a selected pair below a
    diverged one is bracketed from above.

    Columns: ``task``, ``model``, ``depth``, ``pairs`` (how many), ``lowest`` and ``highest``
    (the smallest and largest shared rate tried), ``lr`` and ``rlr`` (selected), ``position``
    (``"inside"``, ``"largest"`` or ``"smallest"``), ``bracketed``, ``tuning_seeds`` (how many
    seeds were trained at every pair and select it, `study.selecting`) and ``seeds`` (how many
    were trained at the selected pair), ``held_out`` (how many of those are not tuning seeds:
    the tuned configuration's n) and ``tie`` (whether the selection was decided by the tie
    rule of `study.select`, smaller rates first). Empty without tuned cells.
    """
    columns = ["task", "model", "depth", "pairs", "lowest", "highest", "lr", "rlr", "position",
               "bracketed", "tuning_seeds", "seeds", "held_out", "tie"]
    rows, runs, _, _ = shown_runs(store)
    if rows.empty or runs.empty:
        return pd.DataFrame(columns=columns)
    done = set(runs.loc[runs["status"] == "done", "run_id"])
    final = rows[(rows["kind"] == "final") & rows["run_id"].isin(done)]
    if final.empty:
        return pd.DataFrame(columns=columns)
    final = configurations(with_keys(final).reset_index(drop=True))
    tried = with_keys(runs[runs["status"].isin(("done", "diverged"))])
    out = []
    for (task, model, depth), cell in final.groupby(["task", "model", "depth"]):
        mine = tried[(tried["task"] == task) & (tried["model"] == model)
                     & (tried["depth"] == depth)]
        pairs = sorted(set(zip(cell["lr"], cell["rlr"])) | set(zip(mine["lr"], mine["rlr"])))
        chosen = cell[cell["selected"]][["lr", "rlr"]].drop_duplicates()
        if len(pairs) < 2 or len(chosen) != 1:
            continue
        lr, rlr = float(chosen["lr"].iloc[0]), float(chosen["rlr"].iloc[0])
        position = ("largest" if (lr, rlr) == pairs[-1] else
                    "smallest" if (lr, rlr) == pairs[0] else "inside")
        keyed = cell.assign(**{LR: cell["lr"], RECURRENT_LR: cell["rlr"]})
        selection = study.selection_of(cell)
        out.append((task, model, int(depth), len(pairs), float(pairs[0][0]),
                    float(pairs[-1][0]), lr, rlr, position, position == "inside",
                    int(study.selecting(keyed)["seed"].nunique()),
                    int(cell.loc[cell["selected"], "seed"].nunique()),
                    int(cell.loc[cell["tuned"], "seed"].nunique()),
                    study.tied(keyed, selection)))
    return pd.DataFrame(out, columns=columns)
