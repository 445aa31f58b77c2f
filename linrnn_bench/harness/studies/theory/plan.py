"""The theory study's runs at a preset and the programs they call, for `harness.plan`."""

from __future__ import annotations

from typing import Any

from ...plan.builders import (Program, RunPlan, input_array, jit_program, layer_counts_of,
                              program_algorithm)
from .. import theory


def _theory_layer(spec: Any) -> Any:
    """The random layer a theory run builds from its spec (as `theory.run` does)."""
    import jax.random as jr

    from linrnn_bench import models

    key_layer, _ = jr.split(jr.PRNGKey(spec.seed))
    return models.build(spec.model, d_model=spec.d_model, d_state=spec.d_state, key=key_layer,
                        **dict(spec.options))


def _white_noise_uses(spec: Any, layer: Any, base: tuple, name: str
                      ) -> list[tuple[Program, int]]:
    """A white-noise run's programs: the energy moments of its batches, the impulse energy."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    modulus = np.abs(np.asarray(theory.discrete_system(layer).lam)).reshape(-1)
    groups = int(theory.modulus_groups(modulus).max()) + 1
    states = modulus.size
    batch = theory.white_noise_batch(spec.samples, spec.seq_len, states)

    def energy(b, abstract):
        layer = _theory_layer(spec)
        u = input_array((b, spec.seq_len, spec.d_model), jnp.float32, abstract,
                        jax.random.PRNGKey(1))
        # The program depends on the groups' count only; which state is in which
        # group is data (here any assignment of that shape).
        onehot = (jax.ShapeDtypeStruct((states, groups), jnp.float32) if abstract
                  else jnp.eye(groups, dtype=jnp.float32)[np.arange(states) % groups])
        return jit_program(theory.energy_moments, layer, u, onehot,
                           algorithm=program_algorithm(layer))

    def impulse(b, abstract):
        layer = _theory_layer(spec)
        return jit_program(lambda l: theory.impulse_energy(l, spec.seq_len), layer,
                           algorithm=program_algorithm(layer))

    counts = layer_counts_of(layer, spec.model, spec.seq_len, "forward")
    return [(Program(base + ("energy", groups, batch), f"white-noise energy {name}", batch,
                     energy, counts), -(-spec.samples // batch)),
            (Program(base + ("impulse",), f"impulse energy {name}", spec.d_model, impulse,
                     counts), 1)]


def _equivalence_uses(spec: Any, base: tuple, name: str) -> list[tuple[Program, int]]:
    """An equivalence run's programs: the outputs and norms of the layer and of its image."""
    import jax
    import jax.numpy as jnp

    from linrnn_bench import models

    image_model = models.info(spec.model).equivalence.target
    uses = []
    for which in (spec.model, image_model):
        def outputs(b, abstract, which=which):
            layer = _theory_layer(spec)
            if which != spec.model:
                layer = models.info(spec.model).equivalence.function()(layer)
            u = input_array((spec.seq_len, spec.d_model), jnp.float32, abstract,
                            jax.random.PRNGKey(2))
            return jit_program(theory.outputs_and_norms, layer, u,
                               algorithm=program_algorithm(layer))

        uses.append((Program(base + ("outputs", which), f"outputs and norms {which} "
                             f"(from {name})", 1, outputs, lambda b: None), spec.samples))
    return uses


def plan(study: Any, config: Any) -> list[RunPlan]:
    """Each run of the grid: its white-noise and impulse energies, or its equivalence's
    outputs and norms."""
    runs = []
    for spec in study.grid(config):
        name = f"{spec.variant} H={spec.d_model} N={spec.d_state} L={spec.seq_len}"
        base = ("theory", spec.model, spec.options, spec.d_model, spec.d_state, spec.seq_len)
        if spec.check == "white_noise":
            uses = _white_noise_uses(spec, _theory_layer(spec), base, name)
        else:
            uses = _equivalence_uses(spec, base, name)
        runs.append(RunPlan(study.run_id(spec), spec.variant, uses))
    return runs
