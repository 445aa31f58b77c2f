"""The stability section's statistics: the geometric mean over seeds with its interval, the
spread of the norm per run, and the stationary norm's four components per seed (depth, seed,
drift, settle step, from `harness.state_norm`) with the pairs a verdict compares
(`harness.stats`)."""

from __future__ import annotations

import functools
import math

import numpy as np
import pandas as pd

from .... import state_norm
from .... import stats as inference
from ....variants import variants
from ....report import summaries
from ._data import C, _label, _variant_order, relative_norms


def _interval_rows(values: pd.Series, by: pd.Series) -> pd.DataFrame:
    """Per value of ``by`` (index, sorted): the geometric mean of ``values`` over seeds and its
    95 % t interval (`summaries.geometric_interval`: the t interval of the log values,
    exponentiated), as columns ``centre``, ``ci95_low``, ``ci95_high``, ``n``."""
    records = {key: summaries.geometric_interval(group) for key, group in values.groupby(by)}
    return pd.DataFrame.from_dict(records, orient="index",
                                  columns=["centre", "ci95_low", "ci95_high", "n"]).sort_index()


# The summary's spread of the norm: an infinite norm (one that overflowed) makes it NaN, where
# the per-run spread (`spread_by_run`) leaves it out.
_cv = functools.partial(summaries.coefficient_of_variation, drop_infinite=False)


def spread_by_run(trained: pd.DataFrame) -> pd.DataFrame:
    """One line per trained run: variant, model, depth, seed, its spread ``cv`` (coefficient of
    variation of the per-layer mean norm over every layer and evaluation step of the run:
    through training and across depth) and ``drift`` (geometric mean over layers of the last
    evaluation's norm over the initial one)."""
    rel = relative_norms(trained)
    records = []
    for run_id, run in rel.groupby("run_id"):
        last = run[run[C.step] == run[C.step].max()]
        records.append({
            "run_id": run_id,
            "variant": run["cfg.variant"].iloc[0],
            "model": run["cfg.network.layer"].iloc[0],
            "depth": int(run["cfg.network.depth"].iloc[0]),
            "seed": int(run["seed"].iloc[0]),
            "cv": summaries.coefficient_of_variation(run[C.norm_mean]),
            "drift": float(np.exp(np.mean(np.log(last["relative"])))),
        })
    return pd.DataFrame.from_records(
        records, columns=["run_id", "variant", "model", "depth", "seed", "cv", "drift"])


def _spread_summary(spread: pd.DataFrame) -> pd.DataFrame:
    """Per (depth, variant): seeds, the mean spread with its t interval, the drift."""
    records = []
    for (depth, variant), runs in spread.groupby(["depth", "variant"]):
        _, low, high, _ = inference.nonnegative_interval(runs["cv"])
        records.append({
            "depth": int(depth), "variant": variant, "model": runs["model"].iloc[0],
            "seeds": len(runs), "cv": float(runs["cv"].mean()), "cv_low": low, "cv_high": high,
            "drift": float(np.exp(np.mean(np.log(runs["drift"])))),
        })
    return pd.DataFrame.from_records(records)


BAND = 0.1  # settle: within a factor 1 +- BAND of the final norm (`state_norm.settle_step`)
# The drift is measured after a burn-in of this fraction of the training steps (the 10 % warm-up
# and as much again): it is then the drift of a trained network's norm; the move away from the
# initialisation is a component of its own ("from init").
BURN_IN = 0.2

# (key, column label, what it is, in words)
COMPONENTS = (
    ("depth", "depth", "the s.d. of log stationary norm across layers, averaged over "
                       "evaluation steps"),
    ("seed", "seed", "the RMS over steps and layers of a seed's log stationary norm minus the "
                     "mean over seeds"),
    ("init", "from init", f"the |log| of the stationary norm at the first evaluation after the "
                          f"burn-in (the first {BURN_IN:.0%} of training) over its value at "
                          f"step 0, averaged over layers"),
    ("drift", "drift", "the s.d. of log stationary norm over the evaluations after the burn-in "
                       "within one layer, averaged over layers"),
    ("settle", "settle step", f"the first evaluation step after which every layer's stationary "
                              f"norm stays within {BAND:.0%} of its final value"),
)


def stationary_arrays(stationary: pd.DataFrame) -> dict[tuple[int, str], dict]:
    """Per (depth, variant) of trained runs' ``kind="stationary"`` rows: ``norms`` ``(seeds,
    steps, layers)`` of the stationary norm, ``seeds``, ``steps``, ``run_ids``, ``burn_in``
    (the first training step after the burn-in, `BURN_IN` of the runs' steps) and ``dropped``:
    runs without a finite, positive stationary norm at every evaluation step (diverged in
    training, or overflowed on the probe), left out of the components."""
    out = {}
    for (depth, variant), rows in stationary.groupby(["cfg.network.depth", "cfg.variant"]):
        steps = np.sort(rows[C.step].unique()).astype(int)
        depth = int(depth)
        arrays, seeds, run_ids, dropped = [], [], [], 0
        for run_id, run in rows.groupby("run_id"):
            table = run.pivot_table(index=C.step, columns=C.layer, values=C.norm_stationary)
            table = table.reindex(index=steps, columns=range(1, depth + 1))
            values = table.to_numpy(dtype=float)
            if not np.all(np.isfinite(values) & (values > 0)):
                dropped += 1
                continue
            arrays.append(values)
            seeds.append(int(run["seed"].iloc[0]))
            run_ids.append(run_id)
        order = np.argsort(seeds)
        trained_steps = pd.to_numeric(rows.get("cfg.train.steps"), errors="coerce").max()
        burn_in = int(math.ceil(BURN_IN * trained_steps)) if np.isfinite(trained_steps) else 0
        out[(depth, variant)] = dict(burn_in=burn_in,
            norms=np.stack(arrays)[order] if arrays else np.zeros((0, len(steps), depth)),
            seeds=[seeds[i] for i in order], steps=steps, run_ids=tuple(run_ids),
            dropped=dropped)
    return out


def components_by_seed(norms: np.ndarray, steps: np.ndarray, burn_in: int = 0
                       ) -> pd.DataFrame:
    """One row per seed (in ``norms``' order), one column per component (`COMPONENTS`): the
    drift over the evaluations at ``burn_in`` or later, the move from initialisation up to the
    first of them after step 0. NaN where a component is not defined (seed: one seed; drift:
    fewer than two evaluations after the burn-in; from init: no step 0, or no evaluation
    after it)."""
    n = norms.shape[0]
    nan = np.full(n, np.nan)
    steps = np.asarray(steps)
    after = steps >= burn_in
    later = np.flatnonzero((steps >= max(burn_in, 1)))
    moved = nan
    if len(steps) and steps[0] == 0 and len(later):
        moved = np.mean(np.abs(np.log(norms[:, later[0], :] / norms[:, 0, :])), axis=1)
    return pd.DataFrame({
        "depth": state_norm.depth_component(norms),
        "seed": state_norm.seed_component(norms) if n >= 2 else nan,
        "init": moved,
        "drift": state_norm.drift_component(norms[:, after]) if after.sum() >= 2 else nan,
        "settle": state_norm.settle_step(norms, steps, BAND).astype(float),
    })


def comparison_pairs(names) -> list[tuple[str, str]]:
    """The pairs a verdict compares: every two models' own variants (in the registry's order),
    then each model's own variant against each of its ablations (normalised against not)."""
    known = variants()
    bases = [v for v in _variant_order(names) if v in known and known[v].model == v]
    pairs = [(a, b) for i, a in enumerate(bases) for b in bases[i + 1:]]
    for base in bases:
        pairs += [(base, v) for v in _variant_order(names)
                  if v != base and v in known and known[v].model == base]
    return pairs


def _components_summary(arrays: dict) -> pd.DataFrame:
    """Per (depth, variant): seeds, and each component's mean over seeds with its 95 % t
    interval bounded below by 0, the components' support (`harness.stats.nonnegative_interval`)."""
    records = []
    for (depth, variant), a in arrays.items():
        if not a["seeds"]:
            continue
        by_seed = components_by_seed(a["norms"], a["steps"], a["burn_in"])
        record = {"network_depth": depth, "variant": variant, "seeds": len(a["seeds"])}
        for key, _, _ in COMPONENTS:
            mean, low, high, _ = inference.nonnegative_interval(by_seed[key])
            record.update({key: mean, f"{key}_low": low, f"{key}_high": high})
        records.append(record)
    return pd.DataFrame.from_records(records)


def _geo(values: pd.Series) -> float:
    x = pd.to_numeric(values, errors="coerce").dropna()
    x = x[x > 0]
    return float(np.exp(np.mean(np.log(x)))) if len(x) else math.nan


def _lambda_shift(layer: pd.DataFrame) -> dict[str, float]:
    """How far the decays moved in training, from the layer rows' moduli (step 0 to the last)."""
    out = {"delta median |lambda|": math.nan, "largest |delta max |lambda||": math.nan}
    if layer.empty or C.lam_median not in layer.columns:
        return out
    last = layer[layer[C.step] == layer.groupby("run_id")[C.step].transform("max")]
    start = layer[layer[C.step] == 0].set_index(["run_id", C.layer])[[C.lam_median, C.lam_max]]
    joined = last.set_index(["run_id", C.layer])[[C.lam_median, C.lam_max]].join(
        start.add_suffix("_0"), how="inner")
    joined = joined.apply(pd.to_numeric, errors="coerce").dropna()
    if joined.empty:
        return out
    out["delta median |lambda|"] = float(
        (joined[C.lam_median] - joined[f"{C.lam_median}_0"]).mean())
    out["largest |delta max |lambda||"] = float(
        (joined[C.lam_max] - joined[f"{C.lam_max}_0"]).abs().max())
    return out


def _pair_family(values: dict[str, pd.Series], pairs: list[tuple[str, str]], *,
                 paired: bool = True) -> pd.DataFrame | None:
    """One family of comparisons over ``pairs``, Holm over them: each pair paired on its common
    seeds (`harness.stats.pairwise`), or, with ``paired=False``, as two independent groups
    (`harness.stats.unpaired`: for a quantity whose seed-wise values do not correspond across
    layers). ``mdd_family`` is each pair's MDD at the family's first Holm level."""
    frames = []
    for a, b in pairs:
        if paired:
            scores = pd.concat([values[a].rename(_label(a)), values[b].rename(_label(b))],
                               axis=1)
            frames.append(inference.pairwise(scores, higher_is_better=False))
        else:
            c = inference.unpaired(values[a], values[b])
            frames.append(pd.DataFrame([{"first": _label(a), "second": _label(b),
                                         **c.as_dict()}]))
    if not frames:
        return None
    family = pd.concat(frames, ignore_index=True)
    m = int(np.isfinite(family["p"].to_numpy(dtype=float)).sum())
    family["m"] = m
    family["p_holm"] = inference.holm(family["p"].to_numpy(dtype=float))
    family["significant"] = family["p_holm"] <= inference.ALPHA
    favours = np.where(-family["diff"] > 0, family["first"], family["second"])
    family["better"] = np.where(family["significant"], favours, "")
    family_alpha = inference.ALPHA / max(m, 1)
    if paired:
        family["mdd_family"] = [
            math.nan if r.n < 2 else (
                (inference.sign_flip_mdd(r.n, family_alpha) if r.test == "exact sign-flip"
                 else inference.paired_t_mdd(r.n, family_alpha)) * r.sd)
            for r in family.itertuples()]
    else:
        family["mdd_family"] = [inference.unpaired(values[a], values[b],
                                                   alpha=family_alpha).mdd for a, b in pairs]
    return family


def norms_by_seed(rows: pd.DataFrame, column: str) -> tuple[np.ndarray, list[int]]:
    """``(seeds, layers)`` of ``column`` for one network configuration's rows at one step, and
    the seeds (those with every layer)."""
    table = rows.pivot_table(index="seed", columns=C.layer, values=column).dropna()
    return table.to_numpy(dtype=float), [int(s) for s in table.index]


def init_components(norms: np.ndarray) -> dict[str, float]:
    """The depth and seed components of untrained networks' norms ``(seeds, layers)``, each the
    mean over seeds with its 95 % t interval: ``{"depth": .., "depth low": .., "depth high":
    .., "seed": ..}`` (the seed component needs two seeds; NaN with fewer)."""
    at_init = np.asarray(norms, dtype=float)[:, None, :]  # (seeds, 1 step, layers)
    record: dict[str, float] = {}
    for key, component, fewest in (("depth", state_norm.depth_component, 1),
                                   ("seed", state_norm.seed_component, 2)):
        per_seed = component(at_init) if len(at_init) >= fewest else np.array([])
        mean, low, high, _ = inference.nonnegative_interval(per_seed)
        record.update({key: mean, f"{key} low": low, f"{key} high": high})
    return record
