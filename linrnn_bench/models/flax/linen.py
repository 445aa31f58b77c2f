"""The layers as Flax linen modules (a generic one, and drop-ins for the published codebases),
and a user's linen module as a layer of ours.

A linen module here holds parameters and nothing else: on each call it rebuilds the Equinox
layer from them (`from_flax_params`, slices and a `tree_unflatten`) and calls it, so the maths,
the engine algorithms and the native CPU kernels are the Equinox layer's, and a jitted call
compiles to the same program (benchmarks/bench_flax.py measures it). Initialisation draws the
Equinox layer once (`models.from_config`) from the first parameter's key and declares every
array from that one draw, so correlated fields (LRU's normaliser, computed from its
eigenvalues) stay consistent.

- `Layer`: any registered model, parameters named as the Equinox layer's fields.
- `LRU`: minimal-LRU's ``LRU(d_hidden, d_model, r_min, r_max, max_phase)``.
- `S5SSM`, `init_S5SSM`: the S5 code's SSM and its init factory (``step_rescale`` at call set-up).
- `RotRNN`: the RotRNN authors' ``RotRNN(rotrnn_dim, model_dim, n_heads, gamma_min, gamma_max,
  max_phase, bidirectional, step_rescale)``.

Each maps one sequence ``(L, H) -> (L, H)``; batch with ``nn.vmap`` as the published code does
(``variable_axes={"params": None}, split_rngs={"params": False}``). Parameter names and shapes:
the mapping table in `models.flax._convert`.

`FromLinen` goes the other way: an Equinox layer around a user's own linen module, so that the
module registers (`models.register`) and enters the studies as any outside layer does.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import equinox as eqx
import flax.linen as nn
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from flax.core import FrozenDict
from jaxtyping import Array, Float, PRNGKeyArray, PyTree

from linrnn_bench import models
from linrnn_bench.models import s5 as _s5
from linrnn_bench.models.lru import LRUConfig
from linrnn_bench.models.rotrnn import RotRNNConfig
from linrnn_bench.models.s5 import S5Config

from ._convert import Layout, field_shapes, from_flax_params, shaped_layer, to_flax_params


def _declare(
    module: nn.Module, draw: Callable[[PRNGKeyArray], dict[str, Array]], names: tuple[str, ...]
) -> dict[str, Array]:
    """``self.param`` for every name; at init all values come from one ``draw(key)``.

    The first parameter's key (linen derives one per parameter) draws the whole layer, so the
    values are one sample of the layer's initial distribution, correlated fields included.
    """
    drawn: dict[str, Array] = {}

    def init(name: str) -> Callable[[PRNGKeyArray], Array]:
        def value(key: PRNGKeyArray) -> Array:
            if not drawn:
                drawn.update(draw(key))
            return drawn[name]

        return value

    return {name: module.param(name, init(name)) for name in names}


def _call(
    name: str, config: Any, params: Mapping[str, Array], layout: Layout, u: Array,
    rescale: float = 1.0,
) -> Array:
    layer = from_flax_params(name, params, config, layout=layout)
    if rescale != 1.0:  # 1.0 (the default) leaves Delta's bits as they are
        layer = layer.rescaled(rescale)
    return layer(u)


def _published_names(name: str, config: Any) -> tuple[str, ...]:
    # The published layout's names for this config: convert a shape-only layer.
    convert = functools.partial(to_flax_params, layout="published", config=config)
    return tuple(eqx.filter_eval_shape(convert, shaped_layer(name, config)))


def _call_published(module: nn.Module, name: str, config: Any, u: Array) -> Array:
    """A drop-in's call: its params in the published layout, drawn as our layer draws them."""

    def draw(key: PRNGKeyArray) -> dict[str, Array]:
        layer = models.from_config(name, config, key=key)
        return to_flax_params(layer, layout="published")

    params = _declare(module, draw, _published_names(name, config))
    return _call(name, config, params, "published", u)


class _Validated(nn.Module):
    """A module whose ``config()`` is validated at construction, not at the first call."""

    def __post_init__(self):
        self.config()
        super().__post_init__()


class Layer(_Validated):
    """Any registered layer as a linen module; its params are the Equinox layer's fields.

    ``Layer(model="lru", d_model=64, d_state=128, options={"r_min": 0.5})`` (linen reserves the
    attribute ``name`` for the submodule's name, so the model is ``model``). The config is
    validated at construction: an unknown model or option is an error listing accepted ones.

    Attributes:
        model: a registered model name (`models.names()`).
        d_model: H, input and output channels.
        d_state: the model's state size (its config's ``d_state``).
        options: the model's other config options.
    """

    model: str
    d_model: int
    d_state: int
    options: Mapping[str, Any] = FrozenDict()

    def config(self) -> Any:
        """The model's validated config."""
        return models.make_config(
            self.model, d_model=self.d_model, d_state=self.d_state, **dict(self.options)
        )

    @nn.compact
    def __call__(self, u: Float[Array, "L H"]) -> Float[Array, "L H"]:
        config = self.config()

        def draw(key: PRNGKeyArray) -> dict[str, Array]:
            return to_flax_params(models.from_config(self.model, config, key=key))

        names = tuple(field_shapes(self.model, config))
        params = _declare(self, draw, names)
        return _call(self.model, config, params, "ours", u)


class FromLinen(eqx.Module):
    """A user's linen module as an Equinox layer: the module (static) and its params (the
    trained arrays); a call is ``module.apply({"params": params}, u)``.

    What makes a linen module a model of the harness: register a factory that returns one,

        @models.register("mine", MineConfig, label="Mine", capabilities={models.RECURRENT_MASK})
        def mine(config, *, key):
            return FromLinen(Mine(config.d_model, config.d_state), config.d_model, key=key,
                             recurrent=("decay",))

    and name it by import path (``model=my_module:mine``) as any outside layer. It offers a
    recurrent mask (the capability the accuracy study reads) and no hidden states or discrete
    system, which a linen module does not expose in one agreed form.

    Arguments:
        module: a linen module mapping one sequence ``(L, H) -> (L, H)``.
        d_model: H; ``module.init`` traces an input ``(1, H)``, so its params must not depend
            on L.
        key: the key of ``module.init``.
        recurrent: the params in the recurrent optimiser group (their own learning rate, no
            weight decay): paths in the params tree joined by ``/`` (``"decay"``,
            ``"Dense_0/kernel"``), or a prefix of them (``"Dense_0"``); ``()`` for none.
    """

    params: PyTree[Array]
    module: nn.Module = eqx.field(static=True)
    recurrent: tuple[str, ...] = eqx.field(static=True)

    def __init__(
        self, module: nn.Module, d_model: int, *, key: PRNGKeyArray,
        recurrent: tuple[str, ...] = (),
    ):
        if not isinstance(module, nn.Module):
            raise TypeError(f"FromLinen takes a flax.linen Module, got {type(module).__name__}.")
        self.params = module.init(key, jnp.zeros((1, d_model), jnp.float32))["params"]
        self.module = module
        self.recurrent = tuple(recurrent)
        paths = _param_paths(self.params)
        unknown = [r for r in self.recurrent if not any(_under(p, r) for p in paths)]
        if unknown:
            raise ValueError(
                f"FromLinen: recurrent={unknown} names no parameter of "
                f"{type(module).__name__}; accepted: {paths} (or a prefix of one)."
            )

    def __call__(self, u: Float[Array, "L H"]) -> Float[Array, "L H"]:
        return self.module.apply({"params": self.params}, u)

    def recurrent_mask(self) -> "FromLinen":
        """The layer's tree with True on the params that ``recurrent`` names."""
        marked = jax.tree_util.tree_map_with_path(
            lambda path, _: any(_under(_joined(path), r) for r in self.recurrent), self.params
        )
        mask = jax.tree.map(lambda _: False, self)
        return eqx.tree_at(lambda m: m.params, mask, marked)


def _joined(path: tuple[Any, ...]) -> str:
    """A params-tree path as ``"Dense_0/kernel"``."""
    return "/".join(str(getattr(k, "key", k)) for k in path)


def _param_paths(params: PyTree[Array]) -> list[str]:
    return [_joined(path) for path, _ in jax.tree_util.tree_flatten_with_path(params)[0]]


def _under(path: str, name: str) -> bool:
    return path == name or path.startswith(name + "/")


class LRU(_Validated):
    """minimal-LRU's ``LRU`` (NicolasZucchet/minimal-LRU, lru/model.py), on our LRU layer.

    Same attributes, defaults, call (one ``(L, H)`` sequence) and params (``nu_log, theta_log,
    gamma_log, B_re, B_im, C_re, C_im, D``), so a script swaps the class and keeps its
    checkpoint. Initialisation is our LRU's, the same distribution as minimal-LRU's.

    The published default ``r_max=1`` is read as `LRUConfig` reads it: as the published
    half-open ring, stored as 1 - 1e-6 (`LRUConfig`'s docstring says why); the two rings
    differ by at most 1e-6 in |lambda|.

    Attributes (minimal-LRU's): d_hidden (P states), d_model (H), r_min, r_max, max_phase.
    ``algorithm`` (ours, last, so positional calls are unchanged): the engine algorithm.
    """

    d_hidden: int
    d_model: int
    r_min: float = 0.0
    r_max: float = 1.0
    max_phase: float = 6.28
    algorithm: str = "auto"

    def config(self) -> LRUConfig:
        return LRUConfig(
            d_model=self.d_model, d_state=self.d_hidden, r_min=self.r_min,
            r_max=self.r_max, max_phase=self.max_phase, algorithm=self.algorithm,
        )

    @nn.compact
    def __call__(self, inputs: Float[Array, "L H"]) -> Float[Array, "L H"]:
        return _call_published(self, "lru", self.config(), inputs)


class S5SSM(_Validated):
    """The S5 code's ``S5SSM`` (lindermanlab/S5, s5/ssm.py), on our S5 layer.

    Same attributes (the initial eigenvalues and eigenvectors come from the caller, as
    ``train.py`` computes them), call and params: ``Lambda_re, Lambda_im (P,), B (P, H, 2),
    C (H, P, 2)`` (bidirectional: ``C1, C2``, or one ``C (H, 2P, 2)`` with
    ``C_init="complex_normal"``), ``D (H,)``, ``log_step (P, 1)``; ``P`` counts the states
    after conjugate halving, and ``V`` is ``(2P, P)`` under ``conj_sym`` (``(P, P)`` otherwise).
    ``step_rescale`` multiplies every timescale (`models.s5.S5.rescaled`).

    Initialisation: our S5 layer's initialisers with the caller's ``V``: B~ = V^{-1} B and
    C~ = C V as `models.s5` draws them, Lambda as given, D and log_step as our layer draws them.
    ``Vinv`` must be V^* (what ``train.py`` passes): our initialiser uses V^*, so any other
    ``Vinv`` is an error rather than silently ignored. ``V=None`` (as the S5 code allows with
    ``C_init="complex_normal"``) takes V from ``Vinv``; ``Vinv=None`` takes it from ``V``.
    """

    Lambda_re_init: Any
    Lambda_im_init: Any
    V: Any
    Vinv: Any
    H: int
    P: int
    C_init: str
    discretization: str
    dt_min: float
    dt_max: float
    conj_sym: bool = True
    clip_eigs: bool = False
    bidirectional: bool = False
    step_rescale: float = 1.0
    algorithm: str = "auto"

    def _eigenvectors(self) -> np.ndarray:
        """V, or V = Vinv^* when ``V=None``: the S5 code runs without V when
        ``C_init="complex_normal"`` (only its B initialiser needs the eigenvectors, through
        Vinv), and our initialiser uses V^* for B, so Vinv determines it."""
        if self.V is not None:
            return np.asarray(self.V)
        if self.Vinv is None:
            raise ValueError(
                "S5SSM needs the eigenvectors of its initial state matrix: pass V (and "
                "Vinv = V^*) as the S5 code's train.py computes them, or at least Vinv."
            )
        return np.asarray(self.Vinv).conj().T

    def config(self) -> S5Config:
        full = 2 * self.P if self.conj_sym else self.P
        V = self._eigenvectors()
        if tuple(np.shape(V)) != (full, self.P):
            raise ValueError(
                f"S5SSM.V has shape {tuple(np.shape(V))}; with P={self.P} and "
                f"conj_sym={self.conj_sym} it must be {(full, self.P)} (the eigenvectors of the "
                "kept eigenvalues, as the S5 code's train.py slices them)."
            )
        if self.discretization not in ("zoh", "bilinear"):
            raise ValueError(
                f"S5SSM.discretization={self.discretization!r} is not accepted; accepted "
                "values: ['zoh', 'bilinear']."
            )
        return S5Config(
            d_model=self.H, d_state=full, conj_sym=self.conj_sym, C_init=self.C_init,
            discretisation=self.discretization, dt_min=self.dt_min, dt_max=self.dt_max,
            clip_eigs=self.clip_eigs, bidirectional=self.bidirectional, algorithm=self.algorithm,
        )

    def _draw(self, config: S5Config, key: PRNGKeyArray) -> dict[str, Array]:
        V = self._eigenvectors()
        if self.Vinv is not None and not np.allclose(np.asarray(self.Vinv), V.conj().T,
                                                      atol=1e-5):
            raise ValueError(
                "S5SSM.Vinv is not V^* (the conjugate transpose of V), which the S5 code's "
                "train.py passes and our initialiser (B~ = V^* B) assumes."
            )
        k_layer, k_B, k_C, k_C_reverse = jr.split(key, 4)
        layer = models.from_config("s5", config, key=k_layer)  # D and log Delta
        V = jnp.asarray(V)
        B = _s5._input_map(k_B, V, self.H)
        C = _s5._output_map(k_C, V, self.H, self.C_init)
        replace = {
            "Lambda_re": jnp.asarray(self.Lambda_re_init, layer.Lambda_re.dtype),
            "Lambda_im": jnp.asarray(self.Lambda_im_init, layer.Lambda_im.dtype),
            "B_re": B.real, "B_im": B.imag, "C_re": C.real, "C_im": C.imag,
        }
        if self.bidirectional:
            C_reverse = _s5._output_map(k_C_reverse, V, self.H, self.C_init)
            replace["C_reverse_re"], replace["C_reverse_im"] = C_reverse.real, C_reverse.imag
        ours = to_flax_params(layer)
        ours.update(replace)
        layer = from_flax_params("s5", ours, config)
        return to_flax_params(layer, layout="published", config=config)

    @nn.compact
    def __call__(self, input_sequence: Float[Array, "L H"]) -> Float[Array, "L H"]:
        config = self.config()
        draw = functools.partial(self._draw, config)
        params = _declare(self, draw, _published_names("s5", config))
        return _call("s5", config, params, "published", input_sequence, self.step_rescale)


def init_S5SSM(
    H: int, P: int, Lambda_re_init: Any, Lambda_im_init: Any, V: Any, Vinv: Any, C_init: str,
    discretization: str, dt_min: float, dt_max: float, conj_sym: bool, clip_eigs: bool,
    bidirectional: bool,
) -> Callable[..., S5SSM]:
    """The S5 code's factory: `S5SSM` with everything but ``step_rescale`` bound.

    The layer around it calls ``ssm(step_rescale=...)``, as the S5 code's ``S5Layer`` does.
    """
    return functools.partial(
        S5SSM, H=H, P=P, Lambda_re_init=Lambda_re_init, Lambda_im_init=Lambda_im_init, V=V,
        Vinv=Vinv, C_init=C_init, discretization=discretization, dt_min=dt_min, dt_max=dt_max,
        conj_sym=conj_sym, clip_eigs=clip_eigs, bidirectional=bidirectional,
    )


class RotRNN(_Validated):
    """The RotRNN authors' Flax ``RotRNN`` (their extension of the S5 code), on our RotRNN layer.

    Same attributes and defaults, call (one ``(L, H)`` sequence) and params: ``theta (heads,
    N_h/2), M (heads, N_h, N_h), B (heads, N_h, H), C (H, N)``, ``C2`` when bidirectional,
    ``D (H,), gamma_log (heads, 1)``, with N = ``rotrnn_dim`` and heads = ``n_heads``.
    Initialisation is our RotRNN's with ``gamma_init="loglog_uniform"``, the authors' draw.

    Accepted and ignored, as in the authors' code: ``step_rescale`` (a RotRNN is defined in
    discrete time; the S5 training script passes it to every sequence layer).

    Bidirectional: the reverse direction here scans the input backwards through the same
    transition, read out by ``C2`` (the RotRNN paper). The authors' module's
    bidirectional branch does not run as published (it passes ``reverse=True`` as a keyword to a
    `jax.vmap`-ed function, which raises), so a published checkpoint with ``C2`` cannot come
    from it; a ``C2`` is read as this reverse scan's output map.

    Attributes (the authors'): rotrnn_dim (N), model_dim (H), n_heads, gamma_min, gamma_max,
    max_phase, bidirectional, step_rescale. ``algorithm`` (ours, last): the engine algorithm.
    """

    rotrnn_dim: int = 64
    model_dim: int = 128
    n_heads: int = 64
    gamma_min: float = 0.9
    gamma_max: float = 0.999
    max_phase: float = 6.28
    bidirectional: bool = False
    step_rescale: float = 0.0
    algorithm: str = "auto"

    def config(self) -> RotRNNConfig:
        return RotRNNConfig(
            d_model=self.model_dim, d_state=self.rotrnn_dim, heads=self.n_heads,
            gamma_init="loglog_uniform", gamma_min=self.gamma_min, gamma_max=self.gamma_max,
            max_phase=self.max_phase, normalise=True, bidirectional=self.bidirectional,
            algorithm=self.algorithm,
        )

    @nn.compact
    def __call__(self, input_sequence: Float[Array, "L H"]) -> Float[Array, "L H"]:
        return _call_published(self, "rotrnn", self.config(), input_sequence)


__all__ = ["Layer", "LRU", "RotRNN", "S5SSM", "init_S5SSM"]
