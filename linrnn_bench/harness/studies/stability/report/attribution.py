"""Where a change of the stationary norm through training comes from: the scale of the layer's
input, or the recurrence. Per layer and measurement, exactly
(`harness.studies.stability_probe.stationary_rows`),

    norm_rms = input_rms * (drive_rms / input_rms) * gain,

the layer's input after the block's normalisation, the input matrix's amplification of it
(B with the layer's own normaliser: RotRNN's xi, the LRU's gamma) and the recurrence's gain (the
window's RMS norm over its drive's). A change is the product of the three factors' changes, so
their logs add: the drive (input and B together) and the gain say which of the two moved.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ....report import style
from ....report.artifacts import Artifact, Finding, Missing, Table, run_ids
from ._data import C, _indexed, _label, _variant_order
from ._statistics import BURN_IN

# (key, label): the norm, then its three factors.
FACTORS = (("norm", "norm"), ("input", "input u"), ("transfer", "B u / u"), ("gain", "gain"))
SPANS = (("init", "from init"), ("burn", "after burn-in"))


def factor_logs(stationary: pd.DataFrame) -> pd.DataFrame:
    """Per trained run and layer: the log change of the norm and of each factor (`FACTORS`)
    from step 0 to the last evaluation (``init``) and from the first evaluation after the
    burn-in (`BURN_IN` of the training steps) to the last (``burn``), with the run's variant,
    depth and seed. Empty when the rows predate the factors' columns (study version 5)."""
    needed = (C.norm_rms, C.input_rms, C.drive_rms, C.gain)
    if any(c not in stationary.columns for c in needed):
        return pd.DataFrame()
    rows = stationary.dropna(subset=list(needed))
    records = []
    for (run_id, layer), run in rows.groupby(["run_id", C.layer]):
        run = run.sort_values(C.step)
        steps = run[C.step].to_numpy()
        burn_in = max(1, math.ceil(BURN_IN * float(run["cfg.train.steps"].iloc[0])))
        after = np.flatnonzero(steps >= burn_in)
        if steps[0] != 0 or not len(after):
            continue
        values = {"norm": run[C.norm_rms], "input": run[C.input_rms],
                  "transfer": run[C.drive_rms] / run[C.input_rms], "gain": run[C.gain]}
        logs = {k: np.log(pd.to_numeric(v).to_numpy(dtype=float)) for k, v in values.items()}
        record = {"run_id": run_id, "layer": int(layer), "variant": run["cfg.variant"].iloc[0],
                  "depth": int(run["cfg.network.depth"].iloc[0]),
                  "seed": int(run["seed"].iloc[0])}
        for key, _ in FACTORS:
            record[f"{key} init"] = logs[key][-1] - logs[key][0]
            record[f"{key} burn"] = logs[key][-1] - logs[key][after[0]]
        records.append(record)
    return pd.DataFrame.from_records(records)


def _summary(logs: pd.DataFrame) -> pd.DataFrame:
    """Per (depth, variant): seeds and each factor's change as a ratio, the geometric mean over
    layers and seeds (the exponential of the mean log), in the variants' order."""
    means = logs.groupby(["depth", "variant"]).mean(numeric_only=True)
    ratios = np.exp(means[[f"{k} {s}" for s, _ in SPANS for k, _ in FACTORS]])
    ratios.insert(0, "seeds", logs.groupby(["depth", "variant"])["seed"].nunique())
    order = {v: i for i, v in enumerate(_variant_order(logs["variant"].unique()))}
    return ratios.sort_index(key=lambda ix: ix.map(order) if ix.name == "variant" else ix)


def attribution_table(logs: pd.DataFrame, stationary: pd.DataFrame, task: str,
                      preset: str | None) -> Artifact:
    """The norm's change and its three factors' (`FACTORS`; ``logs`` from `factor_logs` of
    ``stationary``), from initialisation and after the burn-in, per trained depth and
    variant."""
    name = f"stability_attribution_{task}"
    title = f"What moved the stationary norm in training: input scale or recurrence ({style.task_label(task)})"
    if logs.empty:
        return Missing(name, title, "no input, drive and gain columns in the long-probe rows "
                                    "(stored before stability study version 5; rerun it)")
    summary = _summary(logs)
    frame = _indexed(
        summary.rename(columns={f"{k} {s}": f"{label}, {span}" for s, span in SPANS
                                for k, label in FACTORS}),
        {"Depth": summary.index.get_level_values("depth"),
         "Variant": [_label(v) for v in summary.index.get_level_values("variant")]})
    return Table(
        name=name, title=title,
        caption=(
            f"Trained networks on {style.task_label(task)} (preset {preset}), long probe. Each "
            f"layer's stationary RMS norm is exactly the product of its input's RMS (after the "
            f"block's normalisation), the input matrix's amplification B u / u (with the "
            f"layer's normaliser) and the recurrence's gain (the RMS norm over the drive "
            f"||B u||'s). Each column is a factor's change as a ratio (1 = unchanged), the "
            f"geometric mean over layers and seeds, from step 0 to the last evaluation ('from "
            f"init') and from the first evaluation after the burn-in (the first "
            f"{BURN_IN:.0%} of training) to the last; the norm's ratio is the product of the "
            f"three beside it."),
        short_caption=(
            f"The stationary RMS norm's change in training and its three factors (input RMS, "
            f"B u / u, the recurrence's gain; their product is the norm), geometric means over "
            f"layers and seeds, from initialisation and after the {BURN_IN:.0%} burn-in. "
            f"{style.task_label(task)}, preset {preset}."),
        frame=frame, digits={c: 3 for c in frame.columns}, runs=run_ids(stationary),
    )


def attribution_finding(logs: pd.DataFrame, stationary: pd.DataFrame, task: str) -> Artifact:
    """One sentence per model at the deepest trained depth: how much its stationary norm moved
    from initialisation, and whether the drive (input and B) or the recurrence's gain carried
    it, from ``logs`` (`factor_logs` of ``stationary``)."""
    name = f"stability_attribution_findings_{task}"
    title = f"What moved the stationary norm ({style.task_label(task)})"
    if logs.empty:
        return Missing(name, title, "no input, drive and gain columns (stored before stability "
                                    "study version 5)")
    depth = int(logs["depth"].max())
    summary = _summary(logs[logs["depth"] == depth]).loc[depth]
    lines = []
    for variant, r in summary.iterrows():
        drive = math.log(r["input init"]) + math.log(r["transfer init"])
        gain = math.log(r["gain init"])
        carrier = ("the drive (input and B)" if abs(drive) > abs(gain) else
                   "the recurrence's gain")
        lines.append(
            f"{_label(variant)} at depth {depth} (n = {int(r['seeds'])} seeds): norm "
            f"×{r['norm init']:.3g} from init (input ×{r['input init']:.3g}, B u / u "
            f"×{r['transfer init']:.3g}, gain ×{r['gain init']:.3g}), mostly {carrier}; "
            f"×{r['norm burn']:.3g} after the burn-in.")
    return Finding(name=name, title=title, lines=tuple(lines), runs=run_ids(stationary))
