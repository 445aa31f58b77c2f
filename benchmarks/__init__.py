"""Speed and memory benchmarks of the layers (asv and pytest-benchmark); see README.md."""

# Imported first for its process settings (one OpenBLAS thread; see linrnn_bench/harness/__init__.py).
from linrnn_bench import harness  # noqa: F401
