"""Validation helpers for model configs: errors name the bad value and what is accepted."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any


def choice(where: str, value: Any, accepted: Sequence[Any]) -> None:
    if value not in accepted:
        raise ValueError(f"{where}={value!r} is not accepted; accepted values: {list(accepted)}.")


def positive_int(where: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{where} must be a positive integer, got {value!r}.")


def in_range(where: str, value: float, low: float, high: float, *, closed: bool = True) -> None:
    ok = low <= value <= high if closed else low < value < high
    if not ok:
        bounds = f"[{low}, {high}]" if closed else f"({low}, {high})"
        raise ValueError(f"{where}={value!r} must lie in {bounds}.")


def ordered(where_low: str, low: float, where_high: str, high: float) -> None:
    if not low <= high:
        raise ValueError(f"{where_low}={low!r} must not exceed {where_high}={high!r}.")


def timescales(where: str, dt_min: float, dt_max: float) -> None:
    """The log-uniform initial timescale range of S4D and S5: 0 < dt_min <= dt_max."""
    in_range(f"{where}.dt_min", dt_min, 0.0, math.inf, closed=False)
    ordered(f"{where}.dt_min", dt_min, f"{where}.dt_max", dt_max)
