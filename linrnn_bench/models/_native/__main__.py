"""``python -m linrnn_bench.models._native``: build the native kernels now (set-up) and say whether they run."""

from . import status

current = status()
if current.available:
    print(f"native kernels: built ({current.library})")
else:
    # Not an error: the engine then runs the XLA loop, and every run records which one ran.
    print("native kernels: NOT available; the engine runs the XLA loop (and, for S4D, the "
          f"convolution) instead: {current.reason}")
