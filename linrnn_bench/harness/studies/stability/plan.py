"""The stability study's runs at a preset and the programs they call, for `harness.plan`."""

from __future__ import annotations

from typing import Any

from ...plan.builders import RunPlan, probe_programs, training_uses
from ...plan.facts import task_facts


def plan(study: Any, config: Any) -> list[RunPlan]:
    """Each run of the grid: its probes and, for a trained run, its training programs."""
    runs = []
    for spec in study.grid(config):
        facts = task_facts(spec.task, spec.task_options)
        key = (spec.task, spec.task_options)
        probes = probe_programs(spec.network, facts, spec.probe_size, spec.statistics,
                                spec.train is not None, key)
        if spec.train is None:
            uses = [(probes[0], 1)]
        else:
            evaluations = -(-spec.train.steps // spec.train.eval_every) + 1  # step 0 too
            uses = training_uses(spec.network, spec.task, spec.task_options, spec.train, facts)
            uses += [(p, evaluations) for p in probes]
        for program, _ in uses:  # the variant names what the layer's options alone say
            if not program.label.endswith("]"):
                program.label += f" [{spec.variant}]"
        runs.append(RunPlan(study.run_id(spec), f"{spec.variant} / {spec.task}", uses))
    return runs
