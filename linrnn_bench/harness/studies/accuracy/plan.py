"""The accuracy study's runs at a preset and the programs they call, for `harness.plan`."""

from __future__ import annotations

from typing import Any

from ...plan.builders import RunPlan, training_uses
from ...plan.facts import task_facts
from .. import accuracy


def plan(study: Any, config: Any) -> list[RunPlan]:
    """Each run of the grid and the training and evaluation programs it calls."""
    runs = []
    # Priced at its largest: every cell's grid grown by its whole `lr_extend` at both ends.
    for spec in study.grid(accuracy.widest(config)):
        facts = task_facts(spec.task, spec.task_options)
        runs.append(RunPlan(study.run_id(spec), f"{spec.network.layer} / {spec.task}",
                            training_uses(spec.network, spec.task, spec.task_options,
                                          spec.train, facts)))
    return runs
