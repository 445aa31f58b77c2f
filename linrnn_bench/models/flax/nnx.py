"""The layers as Flax NNX modules: the Equinox layer's arrays as `nnx.Param` attributes.

``Layer("lru", d_model=64, d_state=128, rngs=nnx.Rngs(0), r_min=0.5)`` builds the Equinox layer
(`models.build`, so the initial distribution is the layer's own) and keeps each of its array
fields as an ``nnx.Param`` attribute of the same name (``module.nu_log``, ``module.B_re``, ...),
so `nnx.state`, `nnx.split` / `nnx.merge`, `nnx.jit`, `nnx.grad` and `nnx.Optimizer` see them.
A call rebuilds the Equinox layer from the current values and calls it: the maths is the layer's.
`LRU`, `RotRNN`, `S4D` and `S5` fix the model name. Each maps one sequence ``(L, H) -> (L, H)``;
batch with `jax.vmap` / `nnx.vmap` over the input only.
"""

from __future__ import annotations

from typing import Any

import equinox as eqx
from flax import nnx
from jaxtyping import Array, Float

from linrnn_bench import models

from ._convert import from_flax_params, to_flax_params

# Attributes of the module itself, which a layer field must not shadow.
_RESERVED: tuple[str, ...] = ("model", "config", "param_names")


class Layer(nnx.Module):
    """Any registered layer as an NNX module (module docstring).

    Arguments:
        model: a registered model name (`models.names()`).
        d_model: H, input and output channels.
        d_state: the model's state size (its config's ``d_state``).
        rngs: the initialisation key is ``rngs.params()``.
        **options: the model's other config options; unknown ones are an error listing the
            accepted ones.
    """

    def __init__(self, model: str, *, d_model: int, d_state: int, rngs: nnx.Rngs, **options: Any):
        if not isinstance(rngs, nnx.Rngs):
            raise TypeError(
                f"rngs must be an nnx.Rngs (its params() key initialises the layer), got "
                f"{type(rngs).__name__}; pass e.g. rngs=nnx.Rngs(0)."
            )
        self.model = model
        self.config = models.make_config(model, d_model=d_model, d_state=d_state, **options)
        layer = models.from_config(model, self.config, key=rngs.params())
        params = to_flax_params(layer)
        clash = sorted(set(params) & set(_RESERVED))
        if clash:
            raise ValueError(f"Model {model!r} has fields {clash} that NNX's Layer reserves.")
        self.param_names = tuple(params)
        for name, value in params.items():
            setattr(self, name, nnx.Param(value))

    def layer(self) -> eqx.Module:
        """The Equinox layer holding the current parameter values."""
        params = {name: getattr(self, name)[...] for name in self.param_names}
        return from_flax_params(self.model, params, self.config)

    def __call__(self, u: Float[Array, "L H"]) -> Float[Array, "L H"]:
        return self.layer()(u)


class LRU(Layer):
    """The LRU (`models.lru`) as an NNX module; options are `models.lru.LRUConfig`'s."""

    def __init__(self, d_model: int, d_state: int, *, rngs: nnx.Rngs, **options: Any):
        super().__init__("lru", d_model=d_model, d_state=d_state, rngs=rngs, **options)


class RotRNN(Layer):
    """RotRNN (`models.rotrnn`) as an NNX module; options are `RotRNNConfig`'s."""

    def __init__(self, d_model: int, d_state: int, *, rngs: nnx.Rngs, **options: Any):
        super().__init__("rotrnn", d_model=d_model, d_state=d_state, rngs=rngs, **options)


class S4D(Layer):
    """S4D (`models.s4d`) as an NNX module; options are `S4DConfig`'s."""

    def __init__(self, d_model: int, d_state: int, *, rngs: nnx.Rngs, **options: Any):
        super().__init__("s4d", d_model=d_model, d_state=d_state, rngs=rngs, **options)


class S5(Layer):
    """S5 (`models.s5`) as an NNX module; options are `S5Config`'s."""

    def __init__(self, d_model: int, d_state: int, *, rngs: nnx.Rngs, **options: Any):
        super().__init__("s5", d_model=d_model, d_state=d_state, rngs=rngs, **options)


__all__ = ["Layer", "LRU", "RotRNN", "S4D", "S5"]
