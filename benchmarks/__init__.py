"""Speed and memory benchmarks of the layers (asv and pytest-benchmark); see README.md."""

# Imported first for its process settings (one OpenBLAS thread; see harness/__init__.py).
import harness  # noqa: F401
