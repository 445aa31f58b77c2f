"""``python -m models._native``: build the native scan now (set-up) and say whether it runs."""

from . import status

current = status()
if current.available:
    print(f"native scan: built ({current.library})")
else:
    # Not an error: the engine then runs the XLA loop, and every run records which one ran.
    print(f"native scan: NOT available, the XLA loop ('sequential') will run instead: "
          f"{current.reason}")
