"""What the stability section reads from the store, and how it names what it shows.

`_selected` takes the rows and runs of the largest-scale preset in the store (presets never mix
in one figure); `_trained` and `_stationary` pick the trained runs' rows and their long-probe
rows; `_label` and `_variant_order` name and order the layer variants (the registry's order,
then any user's layer by import path).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from ....store import Store
from ... import stability as study
from ....variants import variant as variant_of
from ....variants import variants
from ....report.origins import in_preset, pick_preset, with_presets


# The study's row columns (`harness.studies.stability.COLUMNS`): ``C.norm_mean``.
C = study.COLUMNS.names

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


def _indexed(frame: pd.DataFrame, levels: dict[str, Any]) -> pd.DataFrame:
    """A table's ``frame`` indexed by ``levels`` (``{heading: values}``), its seed counts
    whole numbers."""
    frame = frame.set_axis(pd.MultiIndex.from_arrays(list(levels.values()), names=list(levels)))
    return frame.assign(seeds=frame["seeds"].astype("Int64"))


def _trained_by_design(preset: str | None, task: str) -> bool:
    """Whether ``preset``'s grid trains networks on ``task`` (True when it cannot be told)."""
    from .... import studies

    try:
        config = studies.get("stability").config(preset)
    except Exception:
        return True
    return task in (config.train_tasks or config.tasks) and bool(config.train_depths)


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


def variants_of_models(names) -> list[str]:
    """The variants that are a model's own configuration (no ablation): keyed by the model."""
    known = variants()
    return [v for v in names if v in known and known[v].model == v]


def _stationary(frame: pd.DataFrame) -> pd.DataFrame:
    """The trained runs' long-probe rows."""
    return frame[(frame[C.kind] == "stationary") & _trained(frame)]
