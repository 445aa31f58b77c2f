"""Checks shared by the layers' and the tasks' configs and the harness: each names the bad value
and what is accepted, and raises `ValueError` (STYLE.md section 9). Standard library only:
models and tasks both import it, and neither may import the other. A value is an integer when it
is an ``int`` (or a numpy integer) and not a ``bool``; a number when it is also allowed to be a
float, and is never NaN."""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any


def choice(where: str, value: Any, accepted: Sequence[Any]) -> None:
    """``value`` is one of ``accepted``."""
    if value not in accepted:
        raise ValueError(f"{where}={value!r} is not accepted; accepted values: {list(accepted)}.")


def boolean(where: str, value: Any) -> None:
    """``value`` is True or False (a 0 or 1 is not taken for one)."""
    if not isinstance(value, bool):
        raise ValueError(f"{where} must be true or false, got {value!r}.")


def is_integer(value: Any) -> bool:
    """Whether ``value`` is an integer (a Python or numpy int, never a bool)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    """Whether ``value`` is a real number that is not NaN (never a bool)."""
    return (
        isinstance(value, numbers.Real) and not isinstance(value, bool) and not math.isnan(value)
    )


def integer(where: str, value: Any, *, low: int | None = None, high: int | None = None) -> None:
    """``value`` is an integer in ``[low, high]`` (either bound may be None: unbounded)."""
    if not is_integer(value):
        raise ValueError(f"{where} must be an integer{_int_bounds(low, high)}, got {value!r}.")
    if (low is not None and value < low) or (high is not None and value > high):
        raise ValueError(
            f"{where}={value!r} is not accepted; it must be an integer{_int_bounds(low, high)}."
        )


def _int_bounds(low: int | None, high: int | None) -> str:
    if low is None and high is None:
        return ""
    if high is None:
        return " >= 1 (a positive integer)" if low == 1 else f" >= {low}"
    if low is None:
        return f" <= {high}"
    return f" in [{low}, {high}]"


def positive_int(where: str, value: Any) -> None:
    if not is_integer(value) or value <= 0:
        raise ValueError(f"{where} must be a positive integer, got {value!r}.")


def non_negative_int(where: str, value: Any) -> None:
    if not is_integer(value) or value < 0:
        raise ValueError(f"{where} must be a non-negative integer, got {value!r}.")


def number(
    where: str, value: Any, *, low: float = -math.inf, high: float = math.inf, closed: bool = True
) -> None:
    """``value`` is a real number in ``[low, high]`` (``(low, high)`` if not ``closed``)."""
    if not is_number(value):
        bounded = math.isfinite(low) or math.isfinite(high)
        accepted = f" in {_bounds(low, high, closed)}" if bounded else ""
        raise ValueError(f"{where} must be a number{accepted}, got {value!r}.")
    in_range(where, value, low, high, closed=closed)


def finite(where: str, value: Any, *, low: float = -math.inf, closed: bool = True) -> None:
    """``value`` is a finite real number ``>= low`` (``> low`` if not ``closed``)."""
    accepted = f"a finite number {'>=' if closed else '>'} {low:g}"
    if (
        not is_number(value)
        or not math.isfinite(value)
        or not (value >= low if closed else value > low)
    ):
        raise ValueError(f"{where} must be {accepted}, got {value!r}.")


def in_range(where: str, value: float, low: float, high: float, *, closed: bool = True) -> None:
    if not is_number(value):
        raise ValueError(f"{where} must be a number, got {value!r}.")
    ok = low <= value <= high if closed else low < value < high
    if not ok:
        raise ValueError(f"{where}={value!r} must lie in {_bounds(low, high, closed)}.")


def _bounds(low: float, high: float, closed: bool) -> str:
    return f"[{low}, {high}]" if closed else f"({low}, {high})"


def ordered(where_low: str, low: float, where_high: str, high: float) -> None:
    if not low <= high:
        raise ValueError(f"{where_low}={low!r} must not exceed {where_high}={high!r}.")
