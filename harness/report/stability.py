"""Report section of the stability study: hidden-state norms through training, depth and seeds."""

from __future__ import annotations

import math

import matplotlib.colors as mcolors
import matplotlib.pyplot as plt
from matplotlib.ticker import MaxNLocator
import numpy as np
import pandas as pd

from ..store import Store
from ..studies import stability as study
from .. import stats as inference
from ..variants import variant as variant_of
from ..variants import variants
from . import _stats, style
from ._artifacts import Artifact, Figure, Finding, Missing, Section, Table, all_missing, no_runs
from ._provenance import in_preset, pick_preset, with_presets

# The study's row columns (`harness.studies.stability.COLUMNS`): ``C.norm_mean``.
C = study.COLUMNS.names

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
    "deviation over mean) of the per-step mean norm across layers, seeds and evaluation steps."
)

_STATUSES = ("done", "diverged")


def _label(variant: str) -> str:
    known = variants()
    if variant in known:
        return known[variant].label
    try:  # a user's layer by import path: its registration's label
        return variant_of(variant).label
    except ValueError:
        return variant


def _variant_order(names) -> list[str]:
    present = set(names)
    known = variants()
    return [v for v in known if v in present] + sorted(present - set(known))


def _grey_legend(fig) -> None:
    """One legend above the panels (outside every axes, so it covers no data): each label once,
    its line in the grey of its shade's lightness, since the panels' colours are the models'
    and a shade means the same in each (lighter: shallower layer or depth)."""
    from matplotlib.lines import Line2D

    entries: dict[str, Line2D] = {}
    for label, handle in style.legend_entries(fig).items():
        if isinstance(handle, Line2D):
            r, g, b = mcolors.to_rgb(handle.get_color())
            grey = (0.299 * r + 0.587 * g + 0.114 * b,) * 3
            entries[label] = Line2D([], [], color=grey, linestyle=handle.get_linestyle(),
                                    linewidth=handle.get_linewidth(), marker=handle.get_marker(),
                                    markersize=handle.get_markersize())
    style.figure_legend(fig, entries)


def _shade(colour: str, k: int, depth: int) -> tuple[float, float, float]:
    """``colour`` lightened towards white for shallow layers: layer ``depth`` is the full colour."""
    weight = 0.35 + 0.65 * (k / depth if depth > 1 else 1.0)
    rgb = np.array(mcolors.to_rgb(colour))
    return tuple(weight * rgb + (1.0 - weight) * np.ones(3))


def _selected(store: Store) -> tuple[pd.DataFrame, pd.DataFrame, str | None]:
    """Rows and runs of the largest-scale preset present (presets never mix in one figure)."""
    rows = store.read("stability", statuses=_STATUSES)
    runs = store.runs("stability")
    if rows.empty:
        return rows, runs, None
    rows = with_presets(rows, "stability")
    preset = pick_preset(rows["preset"].unique(), "stability", rows["run_id"].unique())
    rows = rows[in_preset(rows["preset"], preset)]
    runs = with_presets(runs, "stability")
    runs = runs[in_preset(runs["preset"], preset)]
    return rows, runs, preset


def _trained(frame: pd.DataFrame) -> pd.Series:
    if "cfg.train.steps" not in frame.columns:
        return pd.Series(False, index=frame.index)
    return frame["cfg.train.steps"].notna()


def _panels(n: int, height: float = 1.8):
    """Panels sharing one y-axis, so that the variants compare at a glance."""
    ncols = min(4, n)
    nrows = math.ceil(n / ncols)
    fig, axes = plt.subplots(
        nrows, ncols, figsize=(style.FULL_WIDTH_IN, height * nrows), squeeze=False,
        sharey=True,
    )
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return fig, axes


def _run_ids(frame: pd.DataFrame) -> tuple[str, ...]:
    return tuple(sorted(frame["run_id"].unique()))


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
    for task in sorted(rows["cfg.task"].unique()):
        frame = rows[rows["cfg.task"] == task]
        layer = frame[frame[C.kind] == "layer"]
        trained = layer[_trained(layer)]
        if trained.empty and not _trained_by_design(preset, task):
            pass  # the preset measures this task at initialisation only (said in the summary)
        elif trained.empty:
            reason = f"no trained runs on {task} at preset {preset}"
            out += [
                Missing(f"stability_training_{task}", f"Norm through training ({task})", reason),
                Missing(f"stability_eigenvalues_{task}", f"|lambda| through training ({task})",
                        reason),
            ]
        else:
            depths = sorted(int(d) for d in trained["cfg.network.depth"].unique())
            for depth in reversed(depths):
                out.append(_training_figure(trained, task, preset, depth,
                                            deepest=depth == depths[-1]))
            out.append(_eigen_figure(trained, task, preset))
        out.append(_depth_figure(layer, task, preset))
        out.append(_profile_figure(frame[frame[C.kind] == "profile"], task, preset))
        task_runs = runs[runs["cfg.task"] == task] if "cfg.task" in runs.columns else runs
        out.append(_summary_table(frame, task_runs, task, preset))
        if not trained.empty:
            spread = spread_by_run(trained)
            out.append(_spread_table(spread, task, preset, _run_ids(trained)))
            out.append(_finding(spread, task, preset, _run_ids(trained)))
    return out


def _trained_by_design(preset: str | None, task: str) -> bool:
    """Whether ``preset``'s grid trains networks on ``task`` (True when it cannot be told)."""
    from .. import studies

    try:
        config = studies.get("stability").config(preset)
    except Exception:
        return True
    return task in (config.train_tasks or config.tasks) and bool(config.train_depths)


# --------------------------------------------------------------------------------------------
# Figures


def _deepest_trained(trained: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    depth = int(trained["cfg.network.depth"].max())
    return trained[trained["cfg.network.depth"] == depth], depth


def relative_norms(trained: pd.DataFrame) -> pd.DataFrame:
    """``trained``'s layer rows with ``relative``: each layer's mean norm over its value at
    step 0 of the same run (1 at initialisation; the drift through training, free of the
    variants' different scales)."""
    start = (trained[trained[C.step] == 0].set_index(["run_id", C.layer])[C.norm_mean]
             .rename("initial"))
    joined = trained.join(start, on=["run_id", C.layer])
    return joined.assign(relative=joined[C.norm_mean] / joined["initial"])


def _training_figure(trained: pd.DataFrame, task: str, preset: str | None, depth: int,
                     deepest: bool) -> Artifact:
    style.apply_style()
    trained = relative_norms(trained[trained["cfg.network.depth"] == depth])
    variants = _variant_order(trained["cfg.variant"].unique())
    fig, axes = _panels(len(variants))
    for ax, variant in zip(axes.flat, variants):
        rows = trained[trained["cfg.variant"] == variant]
        colour = style.model_colour(rows["cfg.network.layer"].iloc[0])
        for k in range(1, depth + 1):
            shade = _shade(colour, k, depth)
            at_k = rows[rows[C.layer] == k]
            for _, seed_rows in at_k.groupby("seed"):
                seed_rows = seed_rows.sort_values(C.step)
                ax.plot(seed_rows[C.step], seed_rows["relative"], color=shade, alpha=0.35,
                        linewidth=0.6)
            mean = np.exp(np.log(at_k["relative"]).groupby(at_k[C.step]).mean())
            ax.plot(mean.index, mean.values, color=shade, linewidth=1.6, label=f"layer {k}")
        ax.axhline(1.0, color="black", linewidth=0.5, linestyle=":")
        ax.set_title(_label(variant))
        ax.set_yscale("log")
        style.plain_log_ticks(ax)
        ax.set_xlabel("training step")
    for row in axes:
        row[0].set_ylabel("||h|| / ||h|| at init")
    seeds = sorted(trained["seed"].unique())
    _grey_legend(fig)
    return Figure(
        name=f"stability_training_{task}" if deepest else f"stability_training_{task}_depth{depth}",
        title=f"Hidden-state norm through training, relative to initialisation ({task}, "
              f"depth {depth})",
        caption=(
            f"Mean over the probe batch and time of the state norm ||h_t|| of each layer of a "
            f"{depth}-block network trained on {task} (preset {preset}), at every evaluation "
            f"step, divided by the same layer's value at initialisation (1 = no drift; dotted). "
            f"Light lines: {len(seeds)} seeds; bold: their geometric mean; darker shades are "
            f"deeper layers. One panel per layer variant, all on one log-scale y-axis, so the "
            f"variants' drifts compare directly. The absolute norms are in the summary table."
        ),
        figure=fig,
        runs=_run_ids(trained),
    )


def _eigen_figure(trained: pd.DataFrame, task: str, preset: str | None) -> Artifact:
    style.apply_style()
    trained, depth = _deepest_trained(trained)
    variants = _variant_order(trained["cfg.variant"].unique())
    # A layer without a discrete system has no eigenvalue columns: named, not drawn empty.
    blank = [v for v in variants if C.lam_max not in trained.columns or not pd.to_numeric(
        trained.loc[trained["cfg.variant"] == v, C.lam_max], errors="coerce").notna().any()]
    variants = [v for v in variants if v not in blank]
    name = f"stability_eigenvalues_{task}"
    title = f"Eigenvalue moduli through training ({task})"
    if not variants:
        return Missing(name, title, "no measured layer declares a discrete system")
    fig, axes = _panels(len(variants))
    for ax, variant in zip(axes.flat, variants):
        rows = trained[trained["cfg.variant"] == variant]
        colour = style.model_colour(rows["cfg.network.layer"].iloc[0])
        # Over the network's layers: the modulus closest to 1, the median, the farthest.
        per_seed = rows.groupby(["seed", C.step]).agg(
            lam_max=(C.lam_max, "max"), lam_median=(C.lam_median, "median"),
            lam_min=(C.lam_min, "min"),
        )
        mean = per_seed.groupby(C.step).mean()
        for column, linestyle, what in (
            ("lam_max", "-", "max |lambda|"),
            ("lam_median", "--", "median"),
            ("lam_min", ":", "min"),
        ):
            ax.plot(mean.index, 1.0 - mean[column], color=colour, linestyle=linestyle, label=what)
        ax.set_title(_label(variant))
        ax.set_yscale("log")
        style.plain_log_ticks(ax)
        ax.set_xlabel("training step")
    for row in axes:
        row[0].set_ylabel("1 - |lambda|")
    _grey_legend(fig)
    return Figure(
        name=name,
        title=title,
        caption=(
            f"Distance of the eigenvalue moduli from the unit circle, 1 - |lambda|, over all "
            f"{depth} layers of the trained networks on {task} (preset {preset}): the largest "
            f"modulus over layers (solid), the median of the layers' medians (dashed) and the "
            f"smallest (dotted), averaged over seeds. A solid line falling towards zero is drift "
            f"towards instability. Log scale."
            + "".join(f" {_label(v)}: not drawn, its registration declares no discrete system "
                      "(no fixed eigenvalues)." for v in blank)
        ),
        figure=fig,
        runs=_run_ids(trained),
    )


def _depth_figure(layer: pd.DataFrame, task: str, preset: str | None) -> Artifact:
    style.apply_style()
    variants = _variant_order(layer["cfg.variant"].unique())
    fig, axes = _panels(len(variants))
    depths = sorted(int(d) for d in layer["cfg.network.depth"].unique())
    trained_mask = _trained(layer)
    for ax, variant in zip(axes.flat, variants):
        rows = layer[layer["cfg.variant"] == variant]
        colour = style.model_colour(rows["cfg.network.layer"].iloc[0])
        for i, depth in enumerate(depths):
            at_depth = rows[rows["cfg.network.depth"] == depth]
            if at_depth.empty:
                continue
            shade = _shade(colour, i + 1, len(depths))
            init = at_depth[at_depth[C.step] == 0].groupby(C.layer)[C.norm_mean].mean()
            ax.plot(init.index, init.values, color=shade, marker="o", markersize=2.5,
                    label=f"depth {depth}, init")
            done = at_depth[trained_mask.loc[at_depth.index]]
            if not done.empty:
                last = done[done[C.step] == done.groupby("run_id")[C.step].transform("max")]
                final = last.groupby(C.layer)[C.norm_mean].mean()
                ax.plot(final.index, final.values, color=shade, marker="s", markersize=2.5,
                        linestyle="--", label=f"depth {depth}, trained")
        ax.set_title(_label(variant))
        ax.set_yscale("log")
        style.plain_log_ticks(ax)
        ax.set_xlabel("layer index")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    for row in axes:
        row[0].set_ylabel("mean ||h_t||")
    _grey_legend(fig)
    return Figure(
        name=f"stability_depth_{task}",
        title=f"Hidden-state norm by layer index and network depth ({task})",
        caption=(
            f"Mean state norm of each layer (x: its index in the network) for networks of depth "
            f"{', '.join(map(str, depths))} on {task} (preset {preset}), at initialisation "
            f"(solid, circles) and after training (dashed, squares; trained depths only), "
            f"averaged over seeds. Log scale."
        ),
        figure=fig,
        runs=_run_ids(layer),
    )


def _profile_figure(profile: pd.DataFrame, task: str, preset: str | None) -> Artifact:
    if profile.empty:
        return Missing(f"stability_profile_{task}", f"Norm over time ({task})",
                       f"no profile rows on {task} at preset {preset}")
    style.apply_style()
    trained = profile[_trained(profile)]
    source = trained if not trained.empty else profile
    depth = int(source["cfg.network.depth"].max())
    source = source[source["cfg.network.depth"] == depth]
    variants = _variant_order(source["cfg.variant"].unique())
    fig, axes = _panels(len(variants))
    for ax, variant in zip(axes.flat, variants):
        rows = source[source["cfg.variant"] == variant]
        colour = style.model_colour(rows["cfg.network.layer"].iloc[0])
        final_step = int(rows[C.step].max())
        for k in range(1, depth + 1):
            shade = _shade(colour, k, depth)
            at_k = rows[rows[C.layer] == k]
            for step, linestyle in ((0, "-"), (final_step, "--")):
                if step == 0 and final_step == 0 and linestyle == "--":
                    continue
                curve = at_k[at_k[C.step] == step].groupby(C.t)[C.norm].mean()
                ax.plot(curve.index, curve.values, color=shade, linestyle=linestyle,
                        label=f"layer {k}, step {step}")
        ax.set_title(_label(variant))
        ax.set_xscale("log")
        ax.set_yscale("log")
        style.plain_log_ticks(ax)
        ax.set_xlabel("time step t")
    for row in axes:
        row[0].set_ylabel("mean ||h_t|| at step t")
    what = "initialisation (solid) and the last evaluation (dashed)" if not trained.empty else (
        "initialisation"
    )
    _grey_legend(fig)
    return Figure(
        name=f"stability_profile_{task}",
        title=f"Hidden-state norm over time ({task})",
        caption=(
            f"Mean over the probe examples still running at step t of the state norm ||h_t||, "
            f"per layer of the {depth}-block networks on {task} (preset {preset}), at {what}, "
            f"averaged over seeds. Log-log scale."
        ),
        figure=fig,
        runs=_run_ids(source),
    )


# --------------------------------------------------------------------------------------------
# The summary table


def _cv(values: pd.Series) -> float:
    values = values.dropna()
    if len(values) < 2 or values.mean() == 0:
        return float("nan")
    return float(values.std(ddof=0) / values.mean())


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
            record["max |lambda|, trained"] = last[C.lam_max].max()
            v_final = finals[finals["cfg.variant"] == variant]
            v_final = v_final[v_final["cfg.network.depth"] == depth]
            if not v_final.empty and v_final[C.val_accuracy].notna().any():
                record["val. accuracy"] = v_final[C.val_accuracy].mean()
        i_rows = layer[(layer["cfg.variant"] == variant) & (layer[C.step] == 0)]
        deepest = int(i_rows["cfg.network.depth"].max())
        per_layer = i_rows[i_rows["cfg.network.depth"] == deepest].groupby(C.layer)[C.norm_mean]
        record[f"CV over layers at init (depth {deepest})"] = _cv(per_layer.mean())
        v_runs = runs[runs["cfg.variant"] == variant] if "cfg.variant" in runs.columns else runs
        record["runs diverged"] = int((v_runs["status"] == "diverged").sum())
        record["runs"] = len(v_runs)
        records[_label(variant)] = record
    table = pd.DataFrame.from_dict(records, orient="index")
    return Table(
        name=f"stability_summary_{task}",
        title=f"Spread of the hidden-state norm ({task})",
        caption=_summary_caption(table, task, preset),
        frame=table,
        best={c: "min" for c in ("CV (layers, seeds, steps)", "CV over training (mean)")
              if c in table.columns},
        digits=3,
        runs=_run_ids(frame),
    )


def _summary_caption(table: pd.DataFrame, task: str, preset: str | None) -> str:
    text = (
        f"Hidden-state norm on {task} (preset {preset}). Norms are the mean of ||h_t|| over the "
        f"probe batch and time, per layer; 'init' and 'trained' average them over the layers "
        f"and seeds of the deepest trained network at step 0 and at its last evaluation. "
        f"'CV (layers, seeds, steps)' is the coefficient of variation of these per-layer means "
        f"over every layer, seed and evaluation step: the one-number spread of the claim. "
        f"'CV over training' is the same within one layer of one run, averaged. "
        f"'CV over layers at init' is across the layers of the deepest network measured at "
        f"initialisation, averaged over seeds first."
    )
    if "trained depth" not in table.columns:
        text += (f" At this preset the networks on {task} are measured at initialisation only "
                 "(the trained columns are absent).")
    else:
        text += (" Which differences between the layers the seeds support is in the spread "
                 "table and the findings.")
    return text


# --------------------------------------------------------------------------------------------
# The spread per run, and the verdict on it


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
            "cv": _stats.coefficient_of_variation(run[C.norm_mean]),
            "drift": float(np.exp(np.mean(np.log(last["relative"])))),
        })
    return pd.DataFrame.from_records(
        records, columns=["run_id", "variant", "model", "depth", "seed", "cv", "drift"])


def _spread_summary(spread: pd.DataFrame) -> pd.DataFrame:
    """Per (depth, variant): seeds, the mean spread with its t interval, the drift."""
    records = []
    for (depth, variant), runs in spread.groupby(["depth", "variant"]):
        _, low, high, _ = inference.mean_interval(runs["cv"])
        records.append({
            "depth": int(depth), "variant": variant, "model": runs["model"].iloc[0],
            "seeds": len(runs), "cv": float(runs["cv"].mean()), "cv_low": low, "cv_high": high,
            "drift": float(np.exp(np.mean(np.log(runs["drift"])))),
        })
    return pd.DataFrame.from_records(records)


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
        title=f"Spread of the hidden-state norm per run, with 95% intervals ({task})",
        caption=(
            f"For every trained network on {task} (preset {preset}): the coefficient of "
            "variation (standard deviation over mean) of the per-layer mean state norm over "
            "all its layers and evaluation steps, i.e. how much the norm moves through training "
            "and across depth in one run; its mean over seeds with a 95% t interval over seeds "
            "(a percentile bootstrap under-covers at so few seeds), and "
            "the geometric mean over layers and seeds of the last evaluation's norm over the "
            "initial one (1 = no drift)."
        ),
        frame=frame,
        digits=3,
        runs=run_ids,
    )


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
        text = (f"On {task} at depth {depth} ({n} seed{'s' if n != 1 else ''}, preset "
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
                text += (" Per pair (first − second, 95% CI, d_z, Holm p, the difference "
                         "detectable with 80% power at 5% assuming normal differences): "
                         + "; ".join(_stats.comparison_text(r, spec=".3g")
                                     for r in family.itertuples()) + ".")
        lines.append(text)
        ablations = at_depth[~at_depth["variant"].isin(base)]
        if not ablations.empty:
            lines.append(f"Ablations on {task} at depth {depth}: " + ", ".join(
                f"{_label(r.variant)} {r.cv:.3g} [{r.cv_low:.3g}, {r.cv_high:.3g}]"
                for r in ablations.sort_values("cv").itertuples()) + ".")
    return Finding(name=f"stability_findings_{task}",
                   title=f"What the stability statistics support ({task})",
                   lines=tuple(lines), runs=run_ids)


def variants_of_models(names) -> list[str]:
    """The variants that are a model's own configuration (no ablation): keyed by the model."""
    known = variants()
    return [v for v in names if v in known and known[v].model == v]


SECTION = Section("stability", TITLE, INTRO, section)
