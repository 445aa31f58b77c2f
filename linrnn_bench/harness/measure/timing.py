"""Timing programs: compiling ahead of time, timing repeated calls, wall-clock stopwatches.

Every time the harness records (a run's seconds, a layer's call, a compile) is read here, from
`time.perf_counter` (monotonic, the finest clock Python offers):

- `compile_timed` and `compile_lowered`: a program traced, lowered and compiled, with the
  lowering and XLA's compile timed apart, the persistent compilation cache off
  (`no_compilation_cache`), so that a compile time is a compile, never a load from disk;
- `time_calls`: ``k`` calls, each timed from the call to `jax.block_until_ready` on its result,
  after untimed warm-up calls (`Timing`: median, quartiles, extremes);
- `Stopwatch`: wall-clock seconds of anything else (a run, a training loop, a first call that
  compiles), for code that is not a single program call.
"""

from __future__ import annotations

import contextlib
import dataclasses
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any


class Stopwatch:
    """Wall-clock seconds since it was started (or since its last `lap`)."""

    def __init__(self) -> None:
        self._start = self._lap = time.perf_counter()

    def elapsed(self) -> float:
        """Seconds since the stopwatch was started."""
        return time.perf_counter() - self._start

    def lap(self) -> float:
        """Seconds since the start or the previous lap, whichever is later; starts the next."""
        now = time.perf_counter()
        seconds, self._lap = now - self._lap, now
        return seconds


@dataclasses.dataclass(frozen=True)
class Timing:
    """Wall-clock times of repeated calls, in seconds, with their median and spread."""

    times_s: tuple[float, ...]

    def __post_init__(self):
        if not self.times_s:
            raise ValueError("Timing needs at least one time.")

    @property
    def median_s(self) -> float:
        return statistics.median(self.times_s)

    @property
    def min_s(self) -> float:
        return min(self.times_s)

    @property
    def max_s(self) -> float:
        return max(self.times_s)

    @property
    def q25_s(self) -> float:
        import numpy as np

        return float(np.quantile(self.times_s, 0.25))  # linear between order statistics

    @property
    def q75_s(self) -> float:
        import numpy as np

        return float(np.quantile(self.times_s, 0.75))

    def summary(self, prefix: str = "time") -> dict[str, float | int]:
        """Flat row columns ``<prefix>_median_s``, ``_min_s``, ``_q25_s``, ``_q75_s``, ``_max_s``
        and ``_repeats``."""
        return {
            f"{prefix}_median_s": self.median_s,
            f"{prefix}_min_s": self.min_s,
            f"{prefix}_q25_s": self.q25_s,
            f"{prefix}_q75_s": self.q75_s,
            f"{prefix}_max_s": self.max_s,
            f"{prefix}_repeats": len(self.times_s),
        }


def time_calls(call: Callable[[], Any], *, warmup: int, repeats: int) -> Timing:
    """Time ``call()`` (which must return the arrays it produced) ``repeats`` times.

    Each timing runs from the call to `jax.block_until_ready` on its result, so asynchronous
    dispatch cannot hide work. ``warmup`` untimed calls come first (caches, page mappings).
    A call that threads state (a training step) keeps it in its own closure.
    """
    import jax

    from linrnn_bench import validation

    validation.integer("time_calls: warmup", warmup, low=0)
    validation.positive_int("time_calls: repeats", repeats)
    for _ in range(warmup):
        jax.block_until_ready(call())
    times = []
    for _ in range(repeats):
        clock = Stopwatch()
        jax.block_until_ready(call())
        times.append(clock.elapsed())
    return Timing(tuple(times))


def time_first_call(call: Callable[[], Any]) -> float:
    """Seconds of ``call()``'s first call, to `jax.block_until_ready` on its result, with the
    persistent compilation cache off: the call compiles what it runs, never loads it from disk.
    """
    import jax

    clock = Stopwatch()
    with no_compilation_cache():
        jax.block_until_ready(call())
    return clock.elapsed()


def compile_lowered(lower: Callable[[], Any]) -> tuple[Any, float, float]:
    """``(compiled, lower_s, compile_s)``: ``lower()`` (tracing and lowering to StableHLO,
    Python work, which returns an object with ``.compile()``) and its compilation by XLA, timed
    apart; the compile runs with the persistent compilation cache off (`no_compilation_cache`),
    so ``compile_s`` is a compile, not a cache load."""
    clock = Stopwatch()
    lowered = lower()
    lower_s = clock.lap()
    with no_compilation_cache():
        compiled = lowered.compile()
    return compiled, lower_s, clock.lap()


def compile_timed(
    function: Callable, *args: Any, donate_argnums: tuple[int, ...] = ()
) -> tuple[Any, float, float]:
    """``(compiled, lower_s, compile_s)``: ``jax.jit(function)`` lowered and compiled for ``args``
    (`compile_lowered`); neither time is part of a run's time. ``donate_argnums`` as
    `jax.jit`'s."""
    import jax

    return compile_lowered(
        lambda: jax.jit(function, donate_argnums=donate_argnums).lower(*args))


@contextlib.contextmanager
def no_compilation_cache() -> Iterator[None]:
    """The persistent compilation cache off inside the block (restored after): compiles made
    here are timed as compiles, never as loads from disk.

    jax decides once per process whether the cache is used (at the first compile), so the
    setting alone would not stop a later load: the cache's state is reset on the way in, so
    that the setting is read again, and on the way out, so that it is used again after.
    """
    import jax
    from jax.experimental.compilation_cache import compilation_cache

    enabled = jax.config.jax_enable_compilation_cache
    jax.config.update("jax_enable_compilation_cache", False)
    compilation_cache.reset_cache()
    try:
        yield
    finally:
        jax.config.update("jax_enable_compilation_cache", enabled)
        compilation_cache.reset_cache()
