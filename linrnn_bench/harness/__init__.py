"""linrnn-bench harness: training, the four studies, the results store, reports and the command line."""

import os

# One OpenBLAS thread (unless the user chose otherwise), set before numpy, scipy or jax load it:
# LAPACK runs inside RotRNN's layer (the matrix exponential's solve), and after each call
# OpenBLAS's idle threads spin for a while, taking a core from XLA's matmuls on a small machine
# (measured: docs/performance.md, "Process settings").
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


# Keep freed memory in the process, set before jax starts XLA's threads (glibc only; off with
# LINRNN_KEEP_FREED_MEMORY=0). XLA's CPU client allocates a compiled program's temporary
# buffers afresh on every call, on its worker threads: glibc serves a request above its mmap
# threshold (at most 32 MiB) with a fresh mmap, and a worker thread's own arena gives a large
# freed block back to the system, so every call of a program whose temporaries pass that
# threshold page-faults all of them in again (measured: benchmarks/README.md, "Seed groups").
# One arena with high mmap and trim thresholds reuses the block instead; it must be set before
# the threads allocate. The Makefile's GLIBC_TUNABLES do the same for `make`'s processes;
# where they are set, they stand.
from . import _malloc  # noqa: E402

_malloc.keep_freed_memory()
