"""The memory study's runs at a preset and the programs they call, for `harness.plan`."""

from __future__ import annotations

from typing import Any

from ...plan.builders import RunPlan, layer_program
from ...programs import resolved_d_state


def plan(study: Any, config: Any) -> list[RunPlan]:
    """Each run of the grid and the layer program it compiles at each length."""
    runs = []
    for spec in study.grid(config):
        d_state = resolved_d_state(spec)
        # On an accelerator each length is run once, in a fresh process (`memory.run`).
        uses = [(layer_program(spec.model, spec.d_model, d_state, spec.options, spec.mode, L,
                               spec.batch, spec.seed), 1) for L in spec.seq_lens]
        runs.append(RunPlan(study.run_id(spec), f"{spec.model} {spec.size}", uses))
    return runs
