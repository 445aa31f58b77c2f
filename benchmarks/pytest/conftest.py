"""The pytest-benchmark suite imports `benchmarks.common` from the repository root.

This folder is deliberately not a package: asv's discovery imports every package under
benchmarks/, and this suite needs pytest, which asv's environments do not install.
"""

from __future__ import annotations

import sys
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[2]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))
