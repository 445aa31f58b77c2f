"""linrnn-bench harness: training, the four studies, the results store, reports and the command line."""

import os

# One OpenBLAS thread (unless the user chose otherwise), set before numpy, scipy or jax load it:
# LAPACK runs inside RotRNN's layer (the matrix exponential's solve), and after each call
# OpenBLAS's idle threads spin for a while, taking a core from XLA's matmuls on a small machine
# (measured on two cores: RotRNN forward, B = 8, L = 4096, 45 -> 32 ms with one thread).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

