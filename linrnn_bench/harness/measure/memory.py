"""Measuring a compiled program's memory: XLA's memory analysis, the peak bytes of one call, and
the linear fit of bytes against sequence length.

- `compiled_memory`: XLA's memory analysis of a compiled executable, as flat row columns,
  ``total_bytes = argument + output + temp - alias`` the compiled working set;
- `peak_of_one_call`: one call run, and its peak read: the device's peak bytes on an
  accelerator, or on the CPU the process's resident-memory high-water mark over the call (reset
  through ``/proc/self/clear_refs`` before it, Linux), a lower bound on what it touched. A
  device's peak cannot be reset within a process, so a caller that wants one per program runs
  each in a fresh process (`harness.measure.processes.call_in_fresh_process`);
- `fit_linear`: bytes = a + b L by least squares, with the checks of how linear the growth is.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any


def compiled_memory(compiled: Any) -> dict[str, int]:
    """XLA's memory analysis of a compiled executable as flat integer columns: argument,
    output, temporary and aliased bytes, generated code, and the working set
    ``total_bytes = argument + output + temp - alias`` (`harness.studies.memory`)."""
    stats = compiled.memory_analysis()
    if stats is None:
        raise RuntimeError(
            "This backend's compiled executables give no memory analysis; the memory study "
            "needs XLA's buffer assignment (CPU and GPU provide it)."
        )
    argument = int(stats.argument_size_in_bytes)
    output = int(stats.output_size_in_bytes)
    temp = int(stats.temp_size_in_bytes)
    alias = int(stats.alias_size_in_bytes)
    return {
        "argument_bytes": argument,
        "output_bytes": output,
        "temp_bytes": temp,
        "alias_bytes": alias,
        "generated_code_bytes": int(stats.generated_code_size_in_bytes),
        "total_bytes": argument + output + temp - alias,
    }


def peak_of_one_call(call: Callable[[], Any]) -> dict[str, int | None]:
    """Run ``call()`` once (to `jax.block_until_ready`) and read its peak:
    ``device_peak_bytes`` (an accelerator's peak bytes in use, since the process started) or
    ``process_peak_bytes`` (on the CPU: the resident high-water mark over the call minus the
    resident bytes before it; None where ``/proc`` does not give them)."""
    import jax

    peaks: dict[str, int | None] = {"device_peak_bytes": None, "process_peak_bytes": None}
    device = jax.devices()[0]
    if device.memory_stats() is not None:
        jax.block_until_ready(call())
        peaks["device_peak_bytes"] = int(device.memory_stats().get("peak_bytes_in_use", -1))
    else:
        before = _resident_bytes(reset_peak=True)
        jax.block_until_ready(call())
        peak = _peak_resident_bytes()
        if before is not None and peak is not None:
            peaks["process_peak_bytes"] = peak - before
    return peaks


def _resident_bytes(*, reset_peak: bool) -> int | None:
    """The process's resident bytes now (Linux), after resetting its high-water mark."""
    try:
        if reset_peak:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")  # 5: reset the peak resident set size (proc(5))
        return _status_bytes("VmRSS")
    except OSError:
        return None


def _peak_resident_bytes() -> int | None:
    try:
        return _status_bytes("VmHWM")
    except OSError:
        return None


def _status_bytes(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise OSError(f"/proc/self/status has no {field}")


@dataclasses.dataclass(frozen=True)
class LinearFit:
    """y = intercept + slope x by least squares, and how linear the data are."""

    slope: float
    intercept: float
    r2: float
    max_rel_residual: float
    loglog_slope: float
    increment_spread: float
    increment_growth: float

    def linear(self, tolerance: float) -> bool:
        """The increments agree within ``tolerance`` and the log-log slope is within it of 1.

        The relative residual is reported but not tested: a small constant misfit is a large
        fraction of the shortest sequence's bytes without saying anything about growth.
        """
        return self.increment_spread <= tolerance and abs(self.loglog_slope - 1.0) <= tolerance

    def superlinear(self, tolerance: float) -> bool:
        """The increments rise by more than ``tolerance`` from the shortest to the longest L."""
        return self.increment_growth > tolerance


def fit_linear(x: list[float] | tuple[float, ...], y: list[float] | tuple[float, ...]) -> LinearFit:
    """Least-squares line through (x, y), at least two distinct x.

    ``loglog_slope`` is d log(y - a) / d log x between the smallest and largest x, with a the
    fitted intercept: 1 exactly for data on a line, 2 for quadratic growth.
    ``increment_spread`` is (largest - smallest) / slope of the increments dy / dx between
    consecutive x: 0 on a line, growing for L log L or quadratic growth whose increments rise;
    ``increment_growth`` is (last - first increment) / slope, signed: negative when growth slows.
    """
    if len(x) != len(y) or len(x) < 2 or len(set(x)) < 2:
        raise ValueError(
            f"fit_linear needs at least two distinct x with one y each, got {x!r}, {y!r}."
        )
    import numpy as np
    import scipy.stats

    xs, ys = np.asarray(x, np.float64), np.asarray(y, np.float64)
    fit = scipy.stats.linregress(xs, ys)
    slope, intercept = float(fit.slope), float(fit.intercept)
    residual = np.abs(ys - (intercept + slope * xs))
    # Constant y lie on the flat line exactly (linregress's r is undefined there).
    r2 = float(fit.rvalue) ** 2 if np.ptp(ys) > 0 else 1.0
    max_rel = float(np.max(residual / np.where(ys != 0, np.abs(ys), 1.0)))
    lo, hi = int(np.argmin(xs)), int(np.argmax(xs))
    y_lo, y_hi = ys[lo] - intercept, ys[hi] - intercept
    if y_lo > 0 and y_hi > 0:
        loglog = math.log(y_hi / y_lo) / math.log(xs[hi] / xs[lo])
    else:
        loglog = math.nan
    order = np.lexsort((ys, xs))
    dx, dy = np.diff(xs[order]), np.diff(ys[order])
    increments = dy[dx != 0] / dx[dx != 0]
    spread = float(np.ptp(increments)) / abs(slope) if slope else math.inf
    growth = float(increments[-1] - increments[0]) / abs(slope) if slope else math.inf
    return LinearFit(slope, intercept, r2, max_rel, loglog, spread, growth)
