"""Checks shared by the layers' and the tasks' configs: each names the bad value and what is
accepted, and raises `ValueError` (STYLE.md section 9). Standard library only: models and tasks
both import it, and neither may import the other."""

from __future__ import annotations

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
