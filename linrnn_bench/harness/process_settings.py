"""Process-wide settings that speed and memory depend on, applied by the programs the project
runs (the command line, its worker processes, the fresh processes of `harness.measure`, the
tests), never by importing the library (`apply`).

- One OpenBLAS thread, set before numpy, scipy or jax load it: LAPACK runs inside RotRNN's layer
  (the matrix exponential's solve), and after each call OpenBLAS's idle threads spin for a
  while, taking a core from XLA's matmuls on a small machine (docs/performance.md, "Process
  settings").
- glibc's malloc keeping freed memory in the process (`keep_freed_memory`), set before jax
  starts XLA's threads: XLA's CPU client allocates a compiled program's temporary buffers
  afresh on every call, on its worker threads; glibc serves a request above its mmap threshold
  (at most 32 MiB) with a fresh mmap, and a worker thread's own arena gives a large freed block
  back to the system, so every call of a program whose temporaries pass that threshold
  page-faults all of them in again (benchmarks/README.md, "Seed groups"). One arena with high
  mmap and trim thresholds reuses the block instead. The Makefile's GLIBC_TUNABLES do the same
  for `make report`'s processes; where they are set, they stand.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

# mallopt's parameters (glibc's malloc.h).
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD, M_ARENA_MAX = -1, -3, -8
# Blocks below this come from the heap and freed memory up to this stays in the process: a
# compiled program's temporaries up to this size are reused from call to call.
KEEP_BYTES = 256 * 2**20
ENV = "LINRNN_KEEP_FREED_MEMORY"
# What `keep_freed_memory` set in this process ("" when it set nothing): every run's
# provenance records it (``malloc``), beside the environment's GLIBC_TUNABLES.
applied = ""


def apply() -> None:
    """Apply this module's settings to the current process (each at most once; a variable the
    user set stands): call it first thing in a program, before numpy or jax is imported."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    if not applied:
        keep_freed_memory()


def keep_freed_memory(keep_bytes: int = KEEP_BYTES) -> bool:
    """One malloc arena, with mmap and trim thresholds of ``keep_bytes``; True if applied.

    Does nothing (returns False) when ``$LINRNN_KEEP_FREED_MEMORY`` is ``0``, when
    ``$GLIBC_TUNABLES`` is set (the Makefile's settings, or the user's, which glibc read at start
    and the results record), or where the C library is not glibc. Only threads that have not
    allocated yet share the one arena, so call it before jax runs anything.
    """
    if os.environ.get(ENV, "1") == "0" or os.environ.get("GLIBC_TUNABLES"):
        return False
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
        libc.gnu_get_libc_version  # glibc only: musl or macOS's libc tune differently
    except (OSError, AttributeError, TypeError):
        return False
    settings = ((M_ARENA_MAX, 1), (M_MMAP_THRESHOLD, keep_bytes), (M_TRIM_THRESHOLD, keep_bytes))
    if not all(mallopt(param, value) == 1 for param, value in settings):
        return False
    global applied
    applied = f"mallopt arena_max=1:mmap_threshold={keep_bytes}:trim_threshold={keep_bytes}"
    return True
