"""What several test files share: a registry that forgets the layers a test registers, and a
toy layer module written to a temporary directory (an outside layer, as a user writes one)."""

from __future__ import annotations

import contextlib
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

from models import _registry

# A fifth model of ours in miniature: one file, one register line, on the shared engine. Real
# decays lambda_p = sigmoid(decay_p) in (0, 1), B and C real, plain Re readout.
TOY_SOURCE = textwrap.dedent('''
    """A toy diagonal recurrence registered from outside the package."""
    import dataclasses

    import equinox as eqx
    import jax
    import jax.numpy as jnp
    import jax.random as jr

    import models


    @dataclasses.dataclass(frozen=True)
    class ToyConfig:
        d_model: int
        d_state: int
        algorithm: str = "auto"


    @models.register(
        "toy", ToyConfig, label="Toy",
        paper_size=models.PaperSize(8, 8, (), "no paper: a test's toy"),
    )
    class Toy(models.AbstractRecurrentLayer):
        decay: jax.Array
        B: jax.Array
        C: jax.Array
        D: jax.Array
        algorithm: str = eqx.field(static=True)

        def __init__(self, config, *, key):
            k_decay, k_b, k_c = jr.split(key, 3)
            self.decay = jr.uniform(k_decay, (config.d_state,), minval=1.0, maxval=4.0)
            self.B = jr.normal(k_b, (config.d_state, config.d_model)) / config.d_model**0.5
            self.C = jr.normal(k_c, (config.d_model, config.d_state)) / config.d_state**0.5
            self.D = jnp.zeros((config.d_model,))
            self.algorithm = config.algorithm

        def discrete_system(self):
            return models.DiscreteSystem(
                lam=jax.nn.sigmoid(self.decay).astype(jnp.complex64),
                B=self.B.astype(jnp.complex64), C=self.C.astype(jnp.complex64), D=self.D,
            )

        def recurrent_mask(self):
            mask = jax.tree.map(lambda _: False, self)
            return eqx.tree_at(lambda m: m.decay, mask, True)


    def _broken(config, *, key):
        return lambda u: u[:, :1]  # drops channels: not (L, H) -> (L, H), not a Module


    models.register("broken", ToyConfig, label="Broken")(_broken)
''')


@contextlib.contextmanager
def isolated_registry(*outside_modules: str) -> Iterator[None]:
    """Inside: register freely. After: the registry and the resolved import paths are as
    before, and ``outside_modules`` are forgotten (imported again, they register again)."""
    _registry._load_all()
    registry, paths = dict(_registry._REGISTRY), dict(_registry._PATHS)
    try:
        yield
    finally:
        _registry._REGISTRY.clear()
        _registry._REGISTRY.update(registry)
        _registry._PATHS.clear()
        _registry._PATHS.update(paths)
        for name in outside_modules:
            sys.modules.pop(name, None)


def write_toy_module(directory: Path, name: str = "toy_layer") -> Path:
    """Write the toy layer module into ``directory`` (put it on ``sys.path``); its path."""
    path = directory / f"{name}.py"
    path.write_text(TOY_SOURCE)
    return path
