"""What the memory and throughput sections share: both measure each layer's programs
(`harness.programs`) per mode, size, length and batch, drawn one panel per size and mode and
tabled by configuration."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from . import style

MODES: tuple[str, ...] = tuple(style.MODE_LABELS)
SIZES: tuple[str, ...] = ("paper", "matched")


def mode_size_axes(frame: pd.DataFrame) -> tuple[Any, list[tuple[Any, str, str]]]:
    """A full-width figure of one panel per size (rows) and mode (columns) of ``frame``,
    sharing the length axis: ``(fig, [(ax, mode, size), ...])``, row by row."""
    import matplotlib.pyplot as plt

    style.apply_style()
    modes = [m for m in MODES if m in set(frame["mode"])]
    sizes = [s for s in SIZES if s in set(frame["size"])]
    fig, axes = plt.subplots(
        len(sizes), len(modes), figsize=(style.FULL_WIDTH_IN, 2.2 * len(sizes)), squeeze=False,
        sharex=True,
    )
    return fig, [(axes[i][j], mode, size) for i, size in enumerate(sizes)
                 for j, mode in enumerate(modes)]


def keyed_table(frame: pd.DataFrame, keys: Mapping[str, str],
                columns: Mapping[str, str]) -> pd.DataFrame:
    """``frame``'s ``columns`` sorted and indexed by ``keys`` (both ``{column: heading}``),
    models and tasks as papers write them."""
    frame = frame.sort_values(list(keys))
    frame = frame.assign(model=frame["model"].map(style.model_labels(frame["model"])))
    if "task" in frame.columns:
        frame["task"] = [style.task_label(t) if isinstance(t, str) else t for t in frame["task"]]
    return (frame.set_index(list(keys))[list(columns)].rename(columns=columns)
            .rename_axis(list(keys.values())))
