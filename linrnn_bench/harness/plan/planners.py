"""Each study's runs at a preset and the programs they call (`plan_<study>`, which a study
names as its `Study.planner`), and `catalogue`, every study's runs and what the store already
holds of them."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from .. import studies as _studies
from .builders import (Program, RunPlan, program_algorithm, input_array, jit_program, layer_counts_of,
                       one_line, eval_program, layer_program, network_forward_program,
                       probe_programs, train_step_program)
from .facts import TaskFacts, task_facts
from .targets import accelerator_path

def _training_uses(network: Any, task: str, options: tuple, train: Any,
                   facts: TaskFacts) -> list[tuple[Program, int]]:
    """The programs of `harness.train.train` and their calls: ``steps`` training steps,
    ``ceil(steps / eval_every)`` validation passes and one test pass."""
    step = train_step_program(network, facts.info, train, train.batch_size, (task, options))
    val_bs = min(train.eval_batch_size, facts.sizes["val"])
    test_bs = min(train.eval_batch_size, facts.sizes["test"])
    evaluations = -(-train.steps // train.eval_every)
    uses = [(step, train.steps)]
    val = eval_program(network, facts.info, val_bs, (task, options))
    uses.append((val, evaluations * -(-facts.sizes["val"] // val_bs)))
    if test_bs == val_bs:
        uses[-1] = (val, uses[-1][1] + -(-facts.sizes["test"] // test_bs))
    else:
        uses.append((eval_program(network, facts.info, test_bs, (task, options)),
                     -(-facts.sizes["test"] // test_bs)))
    return uses


def plan_accuracy(study: Any, config: Any) -> list[RunPlan]:
    from ..studies import accuracy

    runs = []
    # Priced at its largest: every cell's grid grown by its whole `lr_extend` at both ends.
    for spec in study.grid(accuracy.widest(config)):
        facts = task_facts(spec.task, spec.task_options)
        runs.append(RunPlan(study.run_id(spec), f"{spec.network.layer} / {spec.task}",
                            _training_uses(spec.network, spec.task, spec.task_options,
                                           spec.train, facts)))
    return runs


def plan_stability(study: Any, config: Any) -> list[RunPlan]:
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
            uses = _training_uses(spec.network, spec.task, spec.task_options, spec.train, facts)
            uses += [(p, evaluations) for p in probes]
        for program, _ in uses:  # the variant names what the layer's options alone say
            if not program.label.endswith("]"):
                program.label += f" [{spec.variant}]"
        runs.append(RunPlan(study.run_id(spec), f"{spec.variant} / {spec.task}", uses))
    return runs


def _theory_layer(spec: Any, model: str | None = None) -> Any:
    import jax.random as jr

    from linrnn_bench import models

    key_layer, _ = jr.split(jr.PRNGKey(spec.seed))
    return models.build(model or spec.model, d_model=spec.d_model, d_state=spec.d_state,
                        key=key_layer, **dict(spec.options))


def plan_theory(study: Any, config: Any) -> list[RunPlan]:
    import jax
    import jax.numpy as jnp
    import numpy as np

    from linrnn_bench import models

    from ..studies import theory

    runs = []
    for spec in study.grid(config):
        L, H = spec.seq_len, spec.d_model
        name = f"{spec.variant} H={H} N={spec.d_state} L={L}"
        layer = _theory_layer(spec)
        base = ("theory", spec.model, spec.options, H, spec.d_state, L)
        if spec.check == "white_noise":
            modulus = np.abs(np.asarray(theory.discrete_system(layer).lam)).reshape(-1)
            groups = int(theory.modulus_groups(modulus).max()) + 1
            states = modulus.size
            batch = theory.white_noise_batch(spec.samples, L, states)

            def energy(b, abstract, spec=spec, groups=groups, states=states):
                layer = _theory_layer(spec)
                u = input_array((b, spec.seq_len, spec.d_model), jnp.float32, abstract,
                           jax.random.PRNGKey(1))
                # The program depends on the groups' count only; which state is in which
                # group is data (here any assignment of that shape).
                onehot = (jax.ShapeDtypeStruct((states, groups), jnp.float32) if abstract
                          else jnp.eye(groups, dtype=jnp.float32)[np.arange(states) % groups])
                return jit_program(theory.energy_moments, layer, u, onehot,
                               algorithm=program_algorithm(layer))

            def impulse(b, abstract, spec=spec):
                layer = _theory_layer(spec)
                return jit_program(lambda l: theory.impulse_energy(l, spec.seq_len), layer,
                               algorithm=program_algorithm(layer))

            counts = layer_counts_of(layer, spec.model, L, "forward")
            uses = [(Program(base + ("energy", groups, batch), f"white-noise energy {name}",
                             batch, energy, counts), -(-spec.samples // batch)),
                    (Program(base + ("impulse",), f"impulse energy {name}", H, impulse,
                             counts), 1)]
        else:
            image_model = models.info(spec.model).equivalence.target
            uses = []
            for which in (spec.model, image_model):
                def outputs(b, abstract, spec=spec, which=which):
                    layer = _theory_layer(spec)
                    if which != spec.model:
                        layer = models.info(spec.model).equivalence.function()(layer)
                    u = input_array((spec.seq_len, spec.d_model), jnp.float32, abstract,
                               jax.random.PRNGKey(2))
                    return jit_program(theory.outputs_and_norms, layer, u,
                                   algorithm=program_algorithm(layer))

                uses.append((Program(base + ("outputs", which), f"outputs and norms {which} "
                                     f"(from {name})", 1, outputs, lambda b: None),
                             spec.samples))
        runs.append(RunPlan(study.run_id(spec), spec.variant, uses))
    return runs


def plan_throughput(study: Any, config: Any) -> list[RunPlan]:
    from linrnn_bench.models.network import NetworkConfig
    from linrnn_bench.tasks._base import TaskInfo

    from ..programs import resolved_d_state
    from ..studies import throughput, throughput_step

    runs = []
    for spec in study.grid(config):
        if isinstance(spec, throughput_step.StepRun):
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
                from ..train import TrainConfig

                program = train_step_program(network, info, TrainConfig(
                    steps=1000, batch_size=spec.batch), spec.batch, ("throughput",))
            else:
                program = network_forward_program(network, info, spec.batch)
        runs.append(RunPlan(study.run_id(spec), f"{spec.model} {spec.size} ({spec.scope})",
                            [(program, calls)]))
    return runs


def plan_memory(study: Any, config: Any) -> list[RunPlan]:
    from ..programs import resolved_d_state

    runs = []
    for spec in study.grid(config):
        d_state = resolved_d_state(spec)
        # On an accelerator each length is run once, in a fresh process (`memory.run`).
        uses = [(layer_program(spec.model, spec.d_model, d_state, spec.options, spec.mode, L,
                               spec.batch, spec.seed), 1) for L in spec.seq_lens]
        runs.append(RunPlan(study.run_id(spec), f"{spec.model} {spec.size}", uses))
    return runs


@dataclasses.dataclass
class StudyPlan:
    """A study's runs at a preset, or why it could not be planned."""

    name: str
    runs: list[RunPlan]
    recorded: dict[str, str]
    error: str | None = None

    def programs(self) -> list[Program]:
        """The distinct programs of the runs, in first-use order."""
        seen: dict[tuple, Program] = {}
        for run in self.runs:
            for program, _ in run.uses:
                seen.setdefault(program.key, program)
        return list(seen.values())


def catalogue(preset: str, *, configs: Mapping[str, Any] | None = None,
              names: Sequence[str] | None = None, store: Any = None,
              backend: str | None = "gpu") -> list[StudyPlan]:
    """Every study's runs and programs at ``preset`` (``configs[name]`` replaces a study's
    preset config; ``names`` selects studies). A study whose grid or planner fails is listed
    with its error, and the others go on."""
    out = []
    with accelerator_path(backend):
        for name in names or _studies.names():
            study = _studies.get(name)
            recorded = store.recorded(name) if store is not None else {}
            try:
                config = (configs or {}).get(name) or study.config(preset)
                out.append(StudyPlan(name, study.plan(config), recorded))
            except Exception as e:  # noqa: BLE001 - listed, and the other studies go on
                out.append(StudyPlan(name, [], recorded, error=one_line(e)))
    return out
