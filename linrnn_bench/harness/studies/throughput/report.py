"""Report section of the throughput study: tokens per second and roofline fractions."""

from __future__ import annotations

import pandas as pd

from ...store import Store
from .. import throughput as study
from ...report import style
from ...report.style import MODE_LABELS
from ...report.artifacts import (Artifact, Figure, Missing, Section, Table, all_missing,
                                 drawn_data, no_runs, run_ids)
from ...report.origins import largest_preset
from ...report.programs import MODES, keyed_table, mode_size_axes

# The study's row columns (`harness.studies.throughput.COLUMNS`): ``C.tokens_per_s``.
C = study.COLUMNS.names

TITLE = "Throughput"

INTRO = (
    "Tokens per second (batch x length / median wall time) of each layer alone and of the full "
    "network, for inference (forward) and for one training step (forward, backward and Adam "
    "update), over sequence lengths and batch sizes, each layer at a published size (its LRA "
    "ListOps configuration, H = 128) and at a matched parameter count. Each run compiles ahead "
    "of time (compile time is reported apart), makes warm-up calls, then times repeated calls, "
    "each ending in block_until_ready; the median and the quartiles are reported. The engine's "
    "algorithm (sequential or parallel scan, or FFT convolution) is recorded per row. The "
    "roofline fraction is t_bound / t_median with t_bound = max(F / peak FLOP/s, Q / peak "
    "bytes/s): F and Q are our analytic count of the layer's model FLOPs (the recurrence form, "
    "complex arithmetic in real operations) and its minimum memory traffic; the peaks are a "
    "float32 matmul and an in-place streaming pass measured in the same process just before "
    "and after the timing, the better kept, so that machine load moves the peak and the "
    "workload together. For the network the count covers its recurrent layers only, so its "
    "fraction is an upper bound. On a shared CPU the absolute numbers are noisy; compare ratios "
    "within one run."
)

_TITLES = {
    "throughput_tokens_per_s": "Tokens per second against sequence length",
    "throughput_roofline_fraction": "Roofline fraction against sequence length",
    "throughput_summary": "Tokens per second and roofline fraction at L = 1024 and L = 16384",
    "throughput_training_step": "The network's training step at the accuracy study's shapes",
    "throughput_all": "Every throughput measurement",
}


def section(store: Store) -> list[Artifact]:
    frame, preset = largest_preset(store.read("throughput"), "throughput")
    if frame.empty:
        return all_missing(_TITLES, no_runs("throughput"))
    out: list[Artifact] = []
    layer = frame[frame[C.scope] == "layer"]
    for name, column, label in (
        ("throughput_tokens_per_s", C.tokens_per_s, "tokens / s"),
        ("throughput_roofline_fraction", C.roofline_fraction, "roofline fraction (bound / time)"),
    ):
        if layer.empty:
            out.append(Missing(name, _TITLES[name], f"no layer-scope rows at preset {preset}"))
        else:
            out.append(_figure(layer, preset, name, column, label))
    out.append(_summary(frame, preset))
    if _measures_steps(preset) or (C.scope in frame and (frame[C.scope] == "step").any()):
        out.append(_training_step(frame, preset))
    out.append(_all(frame, preset))
    return out


def _order(frame: pd.DataFrame) -> list[str]:
    return style.order_models(frame[C.model].unique())


def _smallest_batch(frame: pd.DataFrame) -> pd.DataFrame:
    # One curve per model: the smallest batch measured, which every length has.
    return frame[frame[C.batch] == frame[C.batch].min()]


def _blank_models(frame: pd.DataFrame, column: str) -> list[str]:
    """The models without a single finite ``column`` value (no roofline count: no discrete
    system): drawn nowhere and named in the caption with the reason, not listed in a legend
    without a point."""
    return [m for m in _order(frame)
            if not pd.to_numeric(frame.loc[frame[C.model] == m, column], errors="coerce")
            .replace([float("inf"), -float("inf")], float("nan")).notna().any()]


def _panel(ax, rows: pd.DataFrame, mode: str, size: str, column: str,
           label: str) -> list[pd.DataFrame]:
    """One panel (one mode and size): ``column`` against L per model on log-log axes, at the
    smallest batch; for tokens per second, a band between the times' quartiles. Returns the
    plotted numbers, one frame per model."""
    data: list[pd.DataFrame] = []
    rows = _smallest_batch(rows)
    for model in _order(rows):
        r = rows[rows[C.model] == model].sort_values(C.seq_len)
        drawn = pd.DataFrame({
            "mode": MODE_LABELS[mode], "size": size, "model": style.model_label(model),
            "batch": r[C.batch].to_numpy(), "seq_len": r[C.seq_len].to_numpy(),
            column: pd.to_numeric(r[column], errors="coerce").to_numpy(dtype=float)})
        if column == C.tokens_per_s:
            # The quartiles of the times, as a band of tokens/s.
            tokens = r[C.batch] * r[C.seq_len]
            drawn["tokens_per_s_at_q75_time"] = (tokens / r[C.time_q75_s]).to_numpy()
            drawn["tokens_per_s_at_q25_time"] = (tokens / r[C.time_q25_s]).to_numpy()
        data.append(drawn)
        ax.plot(drawn["seq_len"], drawn[column], color=style.model_colour(model),
                marker=style.model_marker(model), label=style.model_label(model))
        if column == C.tokens_per_s:
            ax.fill_between(drawn["seq_len"], drawn["tokens_per_s_at_q75_time"],
                            drawn["tokens_per_s_at_q25_time"],
                            color=style.model_colour(model), alpha=0.15, linewidth=0)
    style.length_axes(ax, f"{MODE_LABELS[mode]}, {size} size", label)
    return data


def _figure_caption(frame: pd.DataFrame, preset: str | None, column: str, label: str,
                    batch: int, blank: list[str]) -> str:
    """The caption: what is drawn, on which hardware and backend, how to read the bands or
    the fraction, and why each model in ``blank`` is not drawn."""
    hardware = ", ".join(sorted(set(frame[C.device_kind].astype(str))))
    return (
        f"{label[0].upper() + label[1:]} of each layer alone against L at batch {batch}, "
        f"preset {preset}, on {hardware} (backend {', '.join(sorted(set(frame[C.backend])))}), "
        f"each point the median of {_calls_text(frame)}; log-log axes. "
        + ("Bands: tokens/s at the first and third quartiles of those calls' times. "
           if column == C.tokens_per_s else
           "Fraction = roofline bound / median time; the bound uses our analytic FLOP and "
           "byte count and the matmul and bandwidth peaks measured in the same process. ")
        + "Absolute numbers on a shared machine are noisy; ratios within a run are not."
        + "".join(f" {style.model_label(m)}: not drawn, {_why_blank(m, label)}."
                  for m in blank)
    )


def _calls_text(frame: pd.DataFrame) -> str:
    """"n = 3 timed calls" (or "n = 3 to 5 ..."): the timed calls behind each point."""
    counts = sorted({int(n) for n in pd.to_numeric(frame.get(C.time_repeats), errors="coerce")
                     .dropna()}) if C.time_repeats in frame.columns else []
    if not counts:
        return "the timed calls"
    n = f"{counts[0]}" if len(counts) == 1 else f"{counts[0]} to {counts[-1]}"
    return f"n = {n} timed calls"


def _figure(frame: pd.DataFrame, preset: str | None, name: str, column: str, label: str) -> Figure:
    """``column`` against L of each layer alone, one panel per size (rows) and mode (columns),
    at the smallest batch (`_panel`)."""
    fig, cells = mode_size_axes(frame)
    batch = int(frame[C.batch].min())
    blank = _blank_models(frame, column)
    frame = frame[~frame[C.model].isin(blank)]
    data: list[pd.DataFrame] = []
    for ax, mode, size in cells:
        data += _panel(ax, frame[(frame[C.size] == size) & (frame[C.mode] == mode)], mode, size,
                       column, label)
    style.figure_legend(fig)
    return Figure(
        name=name,
        title=_TITLES[name],
        caption=_figure_caption(frame, preset, column, label, batch, blank),
        figure=fig,
        runs=run_ids(frame),
        data=drawn_data(data),
    )


def _why_blank(model: str, label: str) -> str:
    """Why ``model`` has no finite ``label`` value: a roofline needs the analytic count that
    reads the layer's discrete system."""
    from linrnn_bench import models

    try:
        info = models.info(model)
    except ValueError:
        return f"no finite {label} recorded and its layer does not resolve here"
    if not info.has(models.DISCRETE_SYSTEM):
        return (f"no {label}: its registration declares no discrete system, from which the "
                "analytic FLOP and byte count is made")
    return f"no finite {label} recorded"


def _summary(frame: pd.DataFrame, preset: str | None) -> Artifact:
    name = "throughput_summary"
    layer = frame[(frame[C.scope] == "layer") & (frame[C.size] == "paper")]
    lengths = [L for L in (1024, 16384) if L in set(layer[C.seq_len])]
    if layer.empty or not lengths:
        return Missing(name, _TITLES[name],
                       f"no paper-size layer rows at L = 1024 or 16384 at preset {preset}")
    records = {}
    used = []
    for model in _order(layer):
        record = {}
        for L in lengths:
            for mode in [m for m in MODES if m in set(layer[C.mode])]:
                rows = layer[(layer[C.model] == model) & (layer[C.seq_len] == L)
                             & (layer[C.mode] == mode)]
                if rows.empty:
                    continue
                row = rows.loc[rows[C.batch].idxmin()]
                used.append(row["run_id"])
                tag = f"{MODE_LABELS[mode]} L={L}"
                record[f"{tag} tok/s"] = row[C.tokens_per_s]
                record[f"{tag} roofline"] = row[C.roofline_fraction]
                record[f"{tag} B"] = int(row[C.batch])
        record["algorithm"] = ", ".join(sorted(set(layer[layer[C.model] == model][C.algorithm])))
        records[style.model_label(model)] = record
    table = pd.DataFrame.from_dict(records, orient="index").rename_axis("Model")
    best = {c: "max" for c in table.columns if c.endswith("tok/s") or c.endswith("roofline")}
    return Table(
        name=name,
        title=_TITLES[name],
        caption=(
            f"Each layer alone at its paper size, preset {preset}: tokens per second (median) "
            "and roofline fraction at L = 1024 and L = 16384, at the smallest batch B measured "
            "there (column B). Measured on a shared machine: absolute values vary between runs."
        ),
        frame=table,
        best=best,
        digits="g",
        runs=tuple(sorted(set(used))),
        short_caption=(
            f"Each layer alone at its paper size: median tokens per second and roofline "
            f"fraction at the smallest batch B measured, best in bold. Shared machine: "
            f"absolute values vary between runs. Preset {preset}."),
    )


def _measures_steps(preset: str | None) -> bool:
    """Whether ``preset``'s throughput grid times the training step (True when it cannot be
    told): a preset that does not is not missing the step table, it does not make it."""
    from ... import studies

    try:
        return "step" in studies.get("throughput").config(preset).scopes
    except Exception:
        return True


def _training_step(frame: pd.DataFrame, preset: str | None) -> Artifact:
    name = "throughput_training_step"
    step = frame[frame[C.scope] == "step"] if C.scope in frame else frame.iloc[:0]
    if step.empty:
        return Missing(name, _TITLES[name],
                       f"no step-scope rows at preset {preset} (linrnn-bench study "
                       "throughput scopes=step)")
    columns = {
        C.tokens_per_s: "real tok/s",
        C.time_median_s: "step s",
        C.layers_median_s: "layers s",
        C.rest_median_s: "rest s",
        C.optimiser_median_s: "optimiser s",
        C.host_median_s: "host s",
        C.evaluation_median_s: "evaluation s",
        C.compile_s: "compile s",
        C.compile_share: "compile share",
        C.roofline_fraction: "roofline",
        C.bound_limiter: "bound by",
        C.seq_len: "L cut",
        C.real_tokens_per_step: "real tokens",
        C.padded_tokens_per_step: "padded tokens",
    }
    table = keyed_table(step, {C.task: "task", C.model: "model"}, columns)
    return Table(
        name=name,
        title=_TITLES[name],
        caption=(
            f"One training step (forward, backward, optimiser update) of the network each "
            f"accuracy run trains, at that study's preset {step[C.study_preset].iloc[0]}, on the "
            "run's own batches cut to their length bucket; throughput in real (unpadded) "
            "tokens. Its parts, timed alternately in one process: the layers' forward and "
            "backward alone, the optimiser update alone, the rest of the step (encoder, norms, "
            "GLU, residuals, head, loss: the step minus those two), drawing a batch on the host, "
            "one validation pass. Compile: the step's and the evaluation's first call minus "
            "their medians; its share of a run estimated as steps x (step + host) + passes x "
            "evaluation + compile. Roofline: the whole step's analytic count "
            "(harness.studies.throughput.step.step_counts) against the peaks measured in the run."
        ),
        frame=table,
        digits="g",
        runs=run_ids(step),
        short_caption=(
            "One training step of each accuracy run's network on its own batches: real "
            "(unpadded) tokens per second, median times of the step and its parts (s), compile "
            "time and its estimated share of a run, roofline fraction. Preset "
            f"{step[C.study_preset].iloc[0]}."),
    )


def _all(frame: pd.DataFrame, preset: str | None) -> Table:
    columns = {
        C.algorithm: "algorithm",
        C.d_state: "state size",
        C.params: "parameters",
        C.tokens_per_s: "tok/s",
        C.time_median_s: "median s",
        C.time_q25_s: "q25 s",
        C.time_q75_s: "q75 s",
        C.compile_s: "compile s",
        C.roofline_fraction: "roofline",
        C.bound_limiter: "bound by",
        C.allocator: "allocator",
    }
    table = keyed_table(frame, {C.scope: "scope", C.model: "model", C.size: "size",
                                C.mode: "mode", C.seq_len: "L", C.batch: "B"}, columns)
    return Table(
        name="throughput_all",
        title=_TITLES["throughput_all"],
        caption=(
            f"Every row of the throughput study at preset {preset}: median time and quartiles "
            "of the timed calls, compile time (ahead of time for a layer; first call minus "
            "median for the network), the roofline fraction and which roof binds, and the heap "
            "allocator (glibc page-faults every fresh buffer over 32 MiB)."
        ),
        frame=table,
        digits="g",
        runs=run_ids(frame),
        short_caption=(
            "Every row of the throughput study: median and quartile times of the timed calls "
            "(s), compile time (s), roofline fraction and the roof that binds, heap allocator. "
            f"Preset {preset}."),
    )


SECTION = Section("throughput", TITLE, INTRO, section)
