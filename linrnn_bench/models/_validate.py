"""The layers' validation: each check names the bad value and what is accepted, and raises
`ValueError`. The generic checks (integers, numbers, ranges, choices) are those of
`linrnn_bench.validation`, re-exported here for the layers' configs and the network; the
layer-specific ones (radius, timescales, the bilinear radius) are this module's.

Float32 limits. The layers compute in float32 by default, where the largest number below 1 is
1 - 2^-24 (about 1 - 6e-8), and ``1 - gamma**2`` for gamma within a few ulps of 1 is mostly
rounding error. `MAX_RADIUS` is the largest initial |lambda| a config may ask for: about 17 ulps
below 1, where |lambda| stays below 1 after rounding and the normalisers sqrt(1 - |lambda|^2)
keep about two correct digits (their gradients stay finite).
"""

from __future__ import annotations

import math
from typing import Any

# The generic checks, shared with the tasks' configs and the harness (`linrnn_bench.validation`),
# re-exported: part of this set.
from ..validation import boolean as boolean
from ..validation import choice as choice
from ..validation import is_integer as is_integer
from ..validation import is_number as is_number
from ..validation import integer as integer
from ..validation import positive_int as positive_int
from ..validation import non_negative_int as non_negative_int
from ..validation import number as number
from ..validation import finite as finite
from ..validation import in_range as in_range
from ..validation import ordered as ordered

# The largest |lambda| (RotRNN's gamma_max, the LRU's r_max) a config accepts (module docstring).
MAX_RADIUS: float = 1.0 - 1e-6
# The smallest initial timescale Delta of S4D and S5: with Re(a) = -1/2 at initialisation,
# |lambda| = exp(-Delta / 2) <= MAX_RADIUS needs Delta >= -2 log(MAX_RADIUS) (about 2e-6).
# Below it a float32 lambda rounds to 1 and B_bar to 0: the layer silently becomes D u.
MIN_TIMESCALE: float = -2.0 * math.log(MAX_RADIUS)


def radius(where: str, value: float) -> None:
    """An initial |lambda| bound (gamma_max, r_max): in (0, `MAX_RADIUS`], float32's limit."""
    in_range(where, value, 0.0, 1.0, closed=False)
    if value > MAX_RADIUS:
        raise ValueError(
            f"{where}={value!r} is too close to 1 for float32: |lambda| would round to 1 (or "
            f"its normaliser sqrt(1 - |lambda|^2) to noise). Accepted values: (0, {MAX_RADIUS}] "
            f"(1 - 1e-6, the largest |lambda| float32 keeps below 1)."
        )


def timescales(where: str, dt_min: float, dt_max: float) -> None:
    """The log-uniform initial timescale range of S4D and S5: `MIN_TIMESCALE` <= dt_min <= dt_max
    < inf (float32's limits; see `MIN_TIMESCALE`)."""
    in_range(f"{where}.dt_min", dt_min, 0.0, math.inf, closed=False)
    if dt_min < MIN_TIMESCALE:
        raise ValueError(
            f"{where}.dt_min={dt_min!r} is too small for float32: lambda = exp(Delta a) rounds "
            f"to 1 and B_bar to 0, which makes the layer a skip connection. Accepted values: "
            f"[{MIN_TIMESCALE:.3g}, dt_max] (|lambda| <= 1 - 1e-6 at Re(a) = -1/2)."
        )
    if not is_number(dt_max) or not math.isfinite(dt_max):
        raise ValueError(
            f"{where}.dt_max={dt_max!r} must be a finite number (an infinite timescale makes "
            f"every output NaN). Accepted values: [dt_min, any finite number]."
        )
    ordered(f"{where}.dt_min", dt_min, f"{where}.dt_max", dt_max)


def bilinear_radius(
    where: str, eigenvalues: Any, dt_min: float, dt_max: float
) -> None:
    """The bilinear discretisation keeps every initial |lambda| <= `MAX_RADIUS` in float32.

    lambda = (1 + a Delta / 2) / (1 - a Delta / 2) tends to -1 as Delta grows, the faster the
    larger |Im a|: S4D-Inv's eigenvalues at N = 256 reach |lambda| = 1 in float32 from
    Delta = 1. Over a range of Delta, 1 - |lambda|^2 = 2 |Re a| Delta / ((1 - Re a Delta / 2)^2
    + (Im a Delta / 2)^2) rises then falls, so the largest |lambda| is at dt_min or dt_max.
    """
    import numpy as np  # here: the other helpers need nothing beyond the standard library

    a = np.asarray(eigenvalues, dtype=np.complex128).ravel()

    def largest(delta: float) -> float:
        half = a * (delta / 2.0)
        return float(np.max(np.abs((1.0 + half) / (1.0 - half))))

    worst = max(largest(dt_min), largest(dt_max))
    if worst <= MAX_RADIUS:
        return
    # The largest dt_max that keeps the limit, by bisection on log Delta (the bound falls with
    # dt_max on the branch that crossed it).
    low, high = math.log(dt_min), math.log(dt_max)
    if largest(dt_min) > MAX_RADIUS:
        hint = "raise dt_min or use discretisation='zoh'"
    else:
        for _ in range(60):
            mid = 0.5 * (low + high)
            low, high = (mid, high) if largest(math.exp(mid)) <= MAX_RADIUS else (low, mid)
        hint = f"accepted: dt_max <= {math.exp(low):.3g} here, or discretisation='zoh'"
    raise ValueError(
        f"{where}: discretisation='bilinear' with dt in [{dt_min!r}, {dt_max!r}] gives an "
        f"initial |lambda| of {worst:.9f}, which float32 rounds to 1 or within a few ulps of "
        f"it (the limit is {MAX_RADIUS}); {hint}."
    )
