"""A toy study for the fault-injection tests (`tests/test_faults.py`), and its driver.

Kept apart from the test module so that the driver process and its spawned workers import
only this and the harness (no pytest, no JAX at import). Each run sleeps ``LINRNN_FAULT_SLEEP``
seconds (half a second by default, so that a driver can be killed while runs are in flight),
writes a file named after its seed into ``LINRNN_FAULT_FILES`` (standing for the checkpoints a
real run writes beside the store), and returns rows that depend on its seed only.

Run as a script, it is the driver: ``python _fault_study.py STORE WORKERS`` runs the grid with
the processes executor, and SIGTERM stops it as the command line does (exit status 130).
"""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from harness.studies import PRESET_NAMES, Study

RUNS = 4


@dataclasses.dataclass(frozen=True)
class Spec:
    seed: int


def grid(config: Any) -> list[Spec]:
    return [Spec(s) for s in range(RUNS)]


def run(spec: Spec) -> list[dict[str, Any]]:
    time.sleep(float(os.environ.get("LINRNN_FAULT_SLEEP", "0.5")))
    folder = os.environ.get("LINRNN_FAULT_FILES")
    if folder:
        (Path(folder) / f"run-{spec.seed}").write_text(f"{time.time()!r}\n")
    # The padding makes each run need fresh pages of the store (the full-disk test).
    return [{"seed_value": spec.seed, "square": float(spec.seed**2), "j": j, "pad": "x" * 2000}
            for j in range(3)]


STUDY = Study("faults", "toy grid for fault injection", dict.fromkeys(PRESET_NAMES), grid, run)


def main(store_path: str, workers: int) -> int:
    from harness.cli import _stop
    from harness.executors import ProcessExecutor
    from harness.runner import run_study
    from harness.store import Store

    signal.signal(signal.SIGTERM, _stop)
    try:
        run_study(STUDY, None, store=Store(store_path), executor=ProcessExecutor(workers),
                  progress=False)
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2])))
