"""The throughput study's runs at a preset and the programs they call, for `harness.plan`."""

from __future__ import annotations

from typing import Any

from ...plan.builders import (RunPlan, layer_program, network_forward_program,
                              train_step_program)
from ...plan.facts import task_facts
from ...programs import resolved_d_state
from .. import throughput
from .step import StepRun


def plan(study: Any, config: Any) -> list[RunPlan]:
    """Each run of the grid and the one program it times."""
    from linrnn_bench.models.network import NetworkConfig
    from linrnn_bench.tasks import TaskInfo


    runs = []
    for spec in study.grid(config):
        if isinstance(spec, StepRun):
            facts = task_facts(spec.task, spec.task_options)
            step = train_step_program(spec.network, facts.info, spec.train,
                                      spec.train.batch_size, (spec.task, spec.task_options))
            calls = 1 + (spec.warmup + spec.repeats)
            runs.append(RunPlan(study.run_id(spec), f"{spec.model} / {spec.task}",
                                [(step, calls)]))
            continue
        d_state = resolved_d_state(spec)
        calls = 1 + spec.warmup + spec.repeats
        if spec.scope == "layer":
            program = layer_program(spec.model, spec.d_model, d_state, spec.options, spec.mode,
                                    spec.seq_len, spec.batch, spec.seed)
        else:
            info = TaskInfo(name="throughput", description="synthetic tokens",
                            seq_len=spec.seq_len, variable_length=False, input_kind="tokens",
                            num_classes=throughput.NETWORK_CLASSES,
                            vocab_size=throughput.NETWORK_VOCAB)
            network = NetworkConfig(layer=spec.model, layer_options=spec.options,
                                    depth=spec.depth, d_model=spec.d_model, d_state=d_state)
            if spec.mode == "train":
                from ...train import TrainConfig

                program = train_step_program(network, info, TrainConfig(
                    steps=1000, batch_size=spec.batch), spec.batch, ("throughput",))
            else:
                program = network_forward_program(network, info, spec.batch)
        runs.append(RunPlan(study.run_id(spec), f"{spec.model} {spec.size} ({spec.scope})",
                            [(program, calls)]))
    return runs
