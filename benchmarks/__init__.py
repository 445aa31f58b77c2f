"""Speed and memory benchmarks of the layers (asv and pytest-benchmark); see README.md."""

# A benchmark run is a program of the project's: its process settings first, before numpy or jax
# load (one OpenBLAS thread, malloc keeping freed blocks: linrnn_bench/harness/process_settings.py).
from linrnn_bench.harness import process_settings

process_settings.apply()
