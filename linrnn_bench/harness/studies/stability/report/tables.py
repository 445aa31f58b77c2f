"""The stability section's tables: the summary of the norm's spread, the spread per run, the
stationary norm's components and levels, and the initialisation sweep."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ....report import style
from ....report.artifacts import Artifact, Missing, Table, run_ids
from ._data import C, _deepest_trained, _indexed, _label, _trained, _variant_order
from ._statistics import COMPONENTS, _components_summary, _cv, _geo, _lambda_shift, \
    _spread_summary, init_components, norms_by_seed

# The headers of the decays' change (`_lambda_shift`'s keys) as the tables print them.
_SHIFT_HEADERS = {"delta median |lambda|": "Δ median |λ|",
                  "largest |delta max |lambda||": "largest change of max |λ|"}


def _interval_columns(frame: pd.DataFrame) -> tuple[str, ...]:
    return tuple(c for c in frame.columns if str(c).endswith((" low", " high")))


def _on(task: str, preset: str | None) -> str:
    """The task and preset, as a short caption's last words."""
    return f"{style.task_label(task)}, preset {preset}."


def _summary_table(frame: pd.DataFrame, runs: pd.DataFrame, task: str,
                   preset: str | None) -> Table:
    layer = frame[frame[C.kind] == "layer"]
    trained_mask = _trained(layer)
    trained = layer[trained_mask]
    finals = frame[frame[C.kind] == "final"]
    records: dict[str, dict[str, float]] = {}
    for variant in _variant_order(layer["cfg.variant"].unique()):
        record: dict[str, float] = {}
        t_rows = trained[trained["cfg.variant"] == variant]
        if not t_rows.empty:
            t_rows, depth = _deepest_trained(t_rows)
            first = t_rows[t_rows[C.step] == 0]
            last = t_rows[t_rows[C.step] == t_rows.groupby("run_id")[C.step].transform("max")]
            paired = first.set_index(["run_id", C.layer])[C.norm_mean].to_frame("init").join(
                last.set_index(["run_id", C.layer])[C.norm_mean].rename("final"), how="inner"
            )
            record["trained depth"] = depth
            record["norm, init"] = first[C.norm_mean].mean()
            record["norm, trained"] = last[C.norm_mean].mean()
            record["trained / init (geo. mean)"] = float(
                np.exp(np.mean(np.log(paired["final"] / paired["init"])))
            )
            record["CV (layers, seeds, steps)"] = _cv(t_rows[C.norm_mean])
            record["CV over training (mean)"] = float(
                t_rows.groupby(["run_id", C.layer])[C.norm_mean].agg(_cv).mean()
            )
            record["grad norm, trained (median)"] = last[C.grad_norm].median()
            record["max |λ|, trained"] = last[C.lam_max].max()
            v_final = finals[finals["cfg.variant"] == variant]
            v_final = v_final[v_final["cfg.network.depth"] == depth]
            if not v_final.empty and v_final[C.val_accuracy].notna().any():
                # In percent, as every accuracy of the report.
                record["val. acc. (%)"] = 100 * v_final[C.val_accuracy].mean()
        i_rows = layer[(layer["cfg.variant"] == variant) & (layer[C.step] == 0)]
        deepest = int(i_rows["cfg.network.depth"].max())
        per_layer = i_rows[i_rows["cfg.network.depth"] == deepest].groupby(C.layer)[C.norm_mean]
        record[f"CV over layers at init (depth {deepest})"] = _cv(per_layer.mean())
        v_runs = runs[runs["cfg.variant"] == variant] if "cfg.variant" in runs.columns else runs
        record["runs diverged"] = int((v_runs["status"] == "diverged").sum())
        record["runs"] = len(v_runs)
        records[_label(variant)] = record
    table = pd.DataFrame.from_dict(records, orient="index").rename_axis("Variant")
    return Table(
        name=f"stability_summary_{task}",
        title=f"Spread of the hidden-state norm ({style.task_label(task)})",
        caption=_summary_caption(table, task, preset),
        frame=table,
        best={c: "min" for c in ("CV (layers, seeds, steps)", "CV over training (mean)")
              if c in table.columns},
        digits={c: _summary_format(c) for c in table.columns},
        runs=run_ids(frame),
        short_caption=(
            "Per-layer mean of ‖h_t‖ over the probe batch and time, averaged over layers and "
            "seeds of the deepest trained network, at initialisation and at the end; "
            "coefficients of variation (CV; lower is steadier, best in bold); largest |λ|. "
            f"{_on(task, preset)}"),
    )


def _summary_format(column: str) -> int | str:
    """The summary table's format of ``column``: counts whole, |λ| by its distance to 1,
    accuracy in percent to one decimal, the rest to three decimals."""
    if column in ("trained depth", "runs diverged", "runs"):
        return 0
    if column == "max |λ|, trained":
        return "near_one"
    return 1 if column == "val. acc. (%)" else 3


def _summary_caption(table: pd.DataFrame, task: str, preset: str | None) -> str:
    text = (
        f"Hidden-state norm on {style.task_label(task)} (preset {preset}). Norms are the mean of ‖h_t‖ over the "
        f"probe batch and time, per layer; 'init' and 'trained' average them over the layers "
        f"and seeds of the deepest trained network at step 0 and at its last evaluation. "
        f"'CV (layers, seeds, steps)' is the coefficient of variation of these per-layer means "
        f"over every layer, seed and evaluation step, on the probe batch at the task's own "
        f"lengths (a transient-regime measure; the claim is tested in the stationary regime, "
        f"stability_stationary_findings). "
        f"'CV over training' is the same within one layer of one run, averaged. "
        f"'CV over layers at init' is across the layers of the deepest network measured at "
        f"initialisation, averaged over seeds first."
    )
    if "trained depth" not in table.columns:
        text += (f" At this preset the networks on {style.task_label(task)} are measured at initialisation only "
                 "(the trained columns are absent).")
    else:
        text += (" Which differences between the layers the seeds support is in the spread "
                 "table and the findings.")
    return text


def _spread_table(spread: pd.DataFrame, task: str, preset: str | None,
                  run_ids: tuple[str, ...]) -> Artifact:
    summary = _spread_summary(spread)
    order = {v: i for i, v in enumerate(_variant_order(summary["variant"]))}
    summary = summary.assign(o=summary["variant"].map(order)).sort_values(["depth", "o"])
    frame = pd.DataFrame({
        "Depth": summary["depth"],
        "Variant": [_label(v) for v in summary["variant"]],
        "seeds": summary["seeds"].astype("Int64"),
        "CV (layers, steps), mean": summary["cv"],
        "95% CI low": summary["cv_low"],
        "95% CI high": summary["cv_high"],
        "trained / init (geo. mean)": summary["drift"],
    }).set_index(["Depth", "Variant"])
    return Table(
        name=f"stability_spread_{task}",
        title=f"Spread of the hidden-state norm per run, with 95% intervals ({style.task_label(task)})",
        caption=(
            f"For every trained network on {style.task_label(task)} (preset {preset}): the coefficient of "
            "variation (standard deviation over mean) of the per-layer mean state norm over "
            "all its layers and evaluation steps, i.e. how much the norm moves through training "
            "and across depth in one run; its mean over seeds with a 95% t interval over seeds "
            "(a percentile bootstrap under-covers at so few seeds; not shown where n < 3), and "
            "the geometric mean over layers and seeds of the last evaluation's norm over the "
            "initial one (1 = no drift)."
        ),
        frame=frame,
        digits=3,
        runs=run_ids,
        short_caption=(
            "Per trained network: CV of the per-layer mean state norm over layers and steps "
            "(mean over seeds, 95% t interval where n ≥ 3); last over initial norm, geometric "
            f"mean (1: no drift). {_on(task, preset)}"),
        n="seeds",
        intervals=("95% CI low", "95% CI high"),
    )


def _components_table(arrays: dict, task: str, preset: str | None, run_ids) -> Table:
    summary = _components_summary(arrays)
    order = {v: i for i, v in enumerate(_variant_order(summary["variant"]))}
    summary = summary.assign(o=summary["variant"].map(order)).sort_values(
        ["network_depth", "o"])
    columns = {"seeds": summary["seeds"].astype("Int64")}
    for key, label, _ in COMPONENTS:
        columns[label] = summary[key]
        columns[f"{label} low"] = summary[f"{key}_low"]
        columns[f"{label} high"] = summary[f"{key}_high"]
    frame = pd.DataFrame(columns)
    frame.index = pd.MultiIndex.from_arrays(
        [summary["network_depth"], [_label(v) for v in summary["variant"]]],
        names=["Depth", "Variant"])
    digits = {c: (0 if c.startswith("settle") else 3) for c in frame.columns}
    return Table(
        name=f"stability_components_{task}",
        title=f"Components of the stationary state norm's variation ({style.task_label(task)})",
        caption=(
            f"The stationary state norm (mean ‖h_t‖ over the last steps of long probe "
            f"sequences, per layer) of every trained network on {style.task_label(task)} (preset {preset}), "
            f"split into four components, each computed per seed and given as its mean over "
            f"seeds with a 95% t interval (low, high; n = seeds; not shown where n < 3): "
            + "; ".join(f"{label}: {what}" for _, label, what in COMPONENTS)
            + ". The first three are in natural-log units (0.1 is about 10%); a network of one "
              "layer has no depth component (0). Lower is steadier."),
        frame=frame, digits=digits, runs=tuple(run_ids),
        best={label: "min" for _, label, _ in COMPONENTS if label in frame.columns},
        short_caption=(
            "The stationary norm's variation in components per seed (depth, seed, drift: log "
            "units; settle: a step): mean over seeds, 95% t interval (low, high) where n ≥ 3; "
            f"lower is steadier, best in bold. {_on(task, preset)}"),
        n="seeds",
        intervals=_interval_columns(frame),
    )


def _levels_table(trained: pd.DataFrame, stationary: pd.DataFrame, task: str,
                  preset: str | None) -> Table:
    """Per (depth, variant): the stationary norm's level at initialisation and at the end, its
    ratio to the closed form, the regime, the memory, and how far the decays moved."""
    records = []
    for (depth, variant), rows in stationary.groupby(["cfg.network.depth", "cfg.variant"]):
        last_step = rows.groupby("run_id")[C.step].transform("max")
        first, last = rows[rows[C.step] == 0], rows[rows[C.step] == last_step]
        record = {"depth": int(depth), "variant": variant, "seeds": rows["seed"].nunique(),
                  "norm, init": _geo(first[C.norm_stationary]),
                  "norm, trained": _geo(last[C.norm_stationary])}
        # (column, label, the rows it is taken over, how): absent for a layer without a system.
        for column, label, source, how in (
                (C.norm_ratio, "/ closed form, trained", last, "median"),
                (C.energy_reached, "energy reached (min)", rows, "min"),
                (C.memory, "memory, trained (max)", last, "max")):
            values = (pd.to_numeric(source[column], errors="coerce")
                      if column in source.columns else pd.Series(dtype=float))
            record[label] = getattr(values, how)() if values.notna().any() else math.nan
        lam = trained[(trained["cfg.network.depth"] == depth)
                      & (trained["cfg.variant"] == variant)]
        record.update(_lambda_shift(lam))
        records.append(record)
    summary = pd.DataFrame.from_records(records)
    order = {v: i for i, v in enumerate(_variant_order(summary["variant"]))}
    summary = summary.assign(o=summary["variant"].map(order)).sort_values(["depth", "o"])
    frame = summary.drop(columns=["depth", "variant", "o"])
    frame.index = pd.MultiIndex.from_arrays(
        [summary["depth"], [_label(v) for v in summary["variant"]]], names=["Depth", "Variant"])
    frame["seeds"] = frame["seeds"].astype("Int64")
    frame = frame.rename(columns=_SHIFT_HEADERS)
    digits = {c: 3 for c in frame.columns}
    # The decays' changes span decades (1e-5 to 1e-2): scientific, one format per column.
    digits.update({"memory, trained (max)": 0, "seeds": 0,
                   **{c: "sci" for c in _SHIFT_HEADERS.values()}})
    return Table(
        name=f"stability_stationary_{task}",
        title=f"The stationary state norm and the decays ({style.task_label(task)})",
        caption=(
            f"Trained networks on {style.task_label(task)} (preset {preset}). 'norm': the stationary norm (mean "
            f"‖h_t‖ over the long probe's last steps), geometric mean over layers and seeds, "
            f"at step 0 and at the last evaluation. '/ closed form': the window's RMS norm over "
            f"the closed form's sqrt(E‖h_t‖²) for the layer's current system fed a "
            f"temporally white input that puts the same energy per state per step as the "
            f"layer's actual input (median over layers and seeds; 1 = the input's correlation "
            f"over time does not move the norm; it is not a test of the normaliser, whose "
            f"effect is in the absolute norm). 'energy reached': the unit white-noise energy at "
            f"the window's first step over its stationary level (>= 0.9: stationary), smallest "
            f"over layers, seeds and steps. 'memory': steps to 90% of the stationary energy, "
            f"largest over layers at the end. 'delta': the last evaluation's eigenvalue moduli "
            f"minus step 0's, per layer (median |λ|: mean over layers and seeds; max "
            f"|λ|: the largest absolute change). Empty cells: the layer declares no discrete "
            f"system."),
        frame=frame, digits=digits, runs=run_ids(stationary),
        short_caption=(
            "Stationary norm (mean ‖h_t‖ over the long probe's last steps; geometric mean) at "
            "initialisation and trained; ratio to the white-noise closed form; smallest "
            "energy reached (≥ 0.9: stationary); memory (steps); change of |λ| in training. "
            f"{_on(task, preset)}"),
    )


def _init_table(frame: pd.DataFrame, task: str, preset: str | None) -> Artifact:
    """The initialisation sweep: at every measured depth, the stationary norm's spread across
    layers and across seeds before any training (step 0 of every run, trained or not)."""
    rows = frame[(frame[C.kind] == "stationary") & (frame[C.step] == 0)]
    name, title = (f"stability_init_{task}",
                   f"The stationary state norm at initialisation, by depth ({style.task_label(task)})")
    if rows.empty:
        return Missing(name, title, "no long-probe rows (stored before study version 4)")
    records = []
    for (depth, variant), at in rows.groupby(["cfg.network.depth", "cfg.variant"]):
        norms, seeds = norms_by_seed(at, C.norm_stationary)
        record = {"network_depth": int(depth), "variant": variant, "seeds": len(seeds),
                  "norm": _geo(at[C.norm_stationary]), **init_components(norms)}
        reached = (pd.to_numeric(at[C.energy_reached], errors="coerce")
                   if C.energy_reached in at.columns else pd.Series(dtype=float))
        record["energy reached (min)"] = reached.min() if reached.notna().any() else math.nan
        records.append(record)
    summary = pd.DataFrame.from_records(records)
    order = {v: i for i, v in enumerate(_variant_order(summary["variant"]))}
    summary = summary.assign(o=summary["variant"].map(order)).sort_values(
        ["network_depth", "o"])
    frame_out = _indexed(summary.drop(columns=["network_depth", "variant", "o"]),
                         {"Depth": summary["network_depth"],
                          "Variant": [_label(v) for v in summary["variant"]]})
    return Table(
        name=name, title=title,
        caption=(
            f"Before training, on {style.task_label(task)} (preset {preset}): the stationary norm (mean ‖h_t‖ "
            f"over the long probe's last steps; geometric mean over layers and seeds), its "
            f"depth component (s.d. of log norm across the layers of one network) and seed "
            f"component (RMS deviation of a seed's log norms from the mean over seeds), each "
            f"with its mean and 95% t interval over seeds (not shown where n < 3), and the "
            f"smallest white-noise energy "
            f"reached at the window's start (>= 0.9: stationary). Every variant's "
            f"registration options (heads as registered); the head count and the probe length "
            f"are swept in the table stability_init_sweep_{task}."),
        frame=frame_out, digits={c: 3 for c in frame_out.columns}, runs=run_ids(rows),
        short_caption=(
            "Before training: stationary norm (geometric mean over layers and seeds), its depth "
            "and seed components (log units), means over seeds with 95% t intervals where "
            f"n ≥ 3, and the smallest energy reached (≥ 0.9: stationary). {_on(task, preset)}"),
        n="seeds",
        intervals=_interval_columns(frame_out),
    )
