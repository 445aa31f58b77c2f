"""A toy study of seed groups for the kill test of `tests/test_seed_group.py`, and its driver.

Three configurations of three seeds; the seeds of a configuration train as one group
(`Study.group`). A group sleeps ``LINRNN_FAULT_SLEEP`` seconds (half a second by default, so
that a driver can be killed while groups are in flight) and returns rows that depend on the run
only, as a real group's do up to float round-off.

Run as a script, it is the driver: ``python _group_fault_study.py STORE WORKERS`` runs the grid
with the processes executor.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from typing import Any

from linrnn_bench.harness.studies import PRESET_NAMES, Study

CONFIGS, SEEDS = 3, 3
RUNS = CONFIGS * SEEDS


@dataclasses.dataclass(frozen=True)
class Spec:
    config: int
    seed: int


def grid(config: Any) -> list[Spec]:
    return [Spec(c, s) for s in range(SEEDS) for c in range(CONFIGS)]


def rows(spec: Spec) -> list[dict[str, Any]]:
    return [{"config_value": spec.config, "seed_value": spec.seed,
             "score": float(10 * spec.config + spec.seed), "j": j} for j in range(3)]


def run(spec: Spec) -> list[dict[str, Any]]:
    time.sleep(float(os.environ.get("LINRNN_FAULT_SLEEP", "0.5")))
    return rows(spec)


def group(config: Any, spec: Spec) -> int:
    return spec.config


def run_group(specs: list[Spec]) -> list[list[dict[str, Any]]]:
    time.sleep(float(os.environ.get("LINRNN_FAULT_SLEEP", "0.5")))
    return [rows(spec) for spec in specs]


STUDY = Study("group_faults", "toy grid of seed groups for fault injection",
              dict.fromkeys(PRESET_NAMES), grid, run, group=group, run_group=run_group)


def main(store_path: str, workers: int) -> int:
    from linrnn_bench.harness.executors import ProcessExecutor
    from linrnn_bench.harness.runner import run_study
    from linrnn_bench.harness.store import Store

    run_study(STUDY, None, store=Store(store_path), executor=ProcessExecutor(workers),
              progress=False)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2])))
