"""A toy study for the fault-injection tests (`tests/test_faults.py`), and its driver.

Kept apart from the test module so that the driver process and its spawned workers import
only this and the harness (no pytest, no JAX at import). Each run sleeps ``LINRNN_FAULT_SLEEP``
seconds (half a second by default, so that a driver can be killed while runs are in flight),
writes a file named after its seed into ``LINRNN_FAULT_FILES`` (standing for the checkpoints a
real run writes beside the store), and returns rows that depend on its seed only.

Run as a script, it is the driver: ``python _fault_study.py STORE WORKERS`` runs the grid with
the processes executor (``WORKERS`` workers; ``ray``: a local Ray instead), and SIGTERM stops
it as the command line does (exit status 130). Each run also writes ``start-<seed>`` when it
starts. `report_main` is the driver of a ``report --workers 2`` whose figure workers are held
alive, so that it can be killed while they are.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from pathlib import Path
from typing import Any

from linrnn_bench.harness.studies import PRESET_NAMES, Study

RUNS = 4


@dataclasses.dataclass(frozen=True)
class Spec:
    seed: int


def grid(config: Any) -> list[Spec]:
    return [Spec(s) for s in range(RUNS)]


def run(spec: Spec) -> list[dict[str, Any]]:
    folder = os.environ.get("LINRNN_FAULT_FILES")
    if folder:  # this run has started (the Ray test kills its driver once one has)
        (Path(folder) / f"start-{spec.seed}").write_text(f"{os.getpid()}\n")
    time.sleep(float(os.environ.get("LINRNN_FAULT_SLEEP", "0.5")))
    if folder:
        (Path(folder) / f"run-{spec.seed}").write_text(f"{time.time()!r}\n")
    # The padding makes each run need fresh pages of the store (the full-disk test).
    return [{"seed_value": spec.seed, "square": float(spec.seed**2), "j": j, "pad": "x" * 2000}
            for j in range(3)]


STUDY = Study("faults", "toy grid for fault injection", dict.fromkeys(PRESET_NAMES), grid, run)


def main(store_path: str, workers: int | str) -> int:
    """Run the grid into ``store_path`` with ``workers`` worker processes, or with the Ray
    executor (a local Ray) when ``workers`` is ``"ray"``."""
    from linrnn_bench.harness.executors import ProcessExecutor, RayExecutor
    from linrnn_bench.harness.measure import lifetime
    from linrnn_bench.harness.runner import run_study
    from linrnn_bench.harness.store import Store

    executor = RayExecutor() if workers == "ray" else ProcessExecutor(int(workers))
    try:
        with lifetime.stop_signals():
            run_study(STUDY, None, store=Store(store_path), executor=executor, progress=False)
    except KeyboardInterrupt:
        return lifetime.INTERRUPTED
    return 0


def held_figure_worker_init() -> None:
    """The report's figure-worker initialiser, then a pause of ``LINRNN_FAULT_SLEEP`` seconds
    that holds the render with both workers alive (so that its driver can be killed then);
    each worker first writes a file ``worker-<pid>`` into ``LINRNN_FAULT_FILES`` (it runs
    after `harness.measure.lifetime.tie_to_driver`, so the worker is tied to its driver by then)."""
    (Path(os.environ["LINRNN_FAULT_FILES"]) / f"worker-{os.getpid()}").write_text("")
    from linrnn_bench.harness.report import writers

    writers._figure_worker_init()  # the worker imported the module afresh: not replaced
    time.sleep(float(os.environ.get("LINRNN_FAULT_SLEEP", "0.5")))


def report_main(store_path: str, out: str) -> int:
    """``linrnn-bench report --workers 2`` on ``store_path``, its figure workers held
    by `held_figure_worker_init`."""
    from linrnn_bench.harness import cli
    from linrnn_bench.harness.report import writers

    writers._figure_worker_init = held_figure_worker_init
    return cli.main(["report", "--workers", "2", "--store", store_path, "--out", out])
