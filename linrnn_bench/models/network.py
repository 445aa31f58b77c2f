"""The network around a recurrent layer: encoder, residual blocks, pooling and a task head.

One example in, one prediction out (batching is `jax.vmap` with ``axis_name="batch"``, which
BatchNorm needs for its statistics):

    e_0     = encode(x)                                   embedding (tokens) or linear (real)
    u_k     = mask * norm_k(e_{k-1})                      pre-norm; padding steps set to zero
    e_k     = e_{k-1} + drop(act(layer_k(u_k)))           k = 1..depth (post-norm: norm after +)
    z       = pool(e_depth)                               masked mean, or the last valid step
    output  = head(z)                                     classes, one real, or per-step classes

The activation follows the S5 code (`lindermanlab/S5`, ``s5/layers.py``), of which the LRU's GLU
block is the ``"glu"`` case: g = drop(gelu(y)) and

    "gelu":      drop(g)
    "glu":       drop(W_1 g * sigmoid(W_2 g))             (S5 "full_glu", the LRU block)
    "half_glu":  drop(g * sigmoid(W_2 g))                 (S5 "half_glu1")

Dropout draws one mask per channel and shares it over time, as S5's ``broadcast_dims=[0]``.

Padding is exact for both scan directions: each layer's input is zero at padding steps, so a
reverse scan reaches the last valid step with a zero state. BatchNorm's statistics are taken over
the valid steps of the batch (the S5 and LRU code include the padding steps): then nothing at a
valid step depends on how far a batch is padded, so training may cut a batch to its longest
example (`harness.train`) without changing its loss; pooling ignores padding too.

A pair task (LRA Retrieval) runs both sequences through the same tower and classifies the
features ``[a, b, a * b, a - b]`` with a two-layer MLP, as the LRA two-tower head.

This module never imports `tasks`: what a task looks like arrives as plain constructor
arguments (input kind, vocabulary size or feature dimension, classes, target, pair).
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Literal

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Complex, Float, Int, PRNGKeyArray, PyTree

from . import _validate
from ._base import AbstractRecurrentLayer
from ._registry import config_class, from_config, make_config, names, resolve

Norm = Literal["batch", "layer"]
Activation = Literal["gelu", "glu", "half_glu"]
Pooling = Literal["mean", "last"]
InputKind = Literal["tokens", "real"]
Target = Literal["class", "per_step", "regression"]

NORMS: tuple[str, ...] = ("batch", "layer")
ACTIVATIONS: tuple[str, ...] = ("gelu", "glu", "half_glu")
POOLINGS: tuple[str, ...] = ("mean", "last")
INPUT_KINDS: tuple[str, ...] = ("tokens", "real")
TARGETS: tuple[str, ...] = ("class", "per_step", "regression")

# The running-average rate of BatchNorm's statistics, as the S5 code (flax's momentum 0.9).
BATCH_NORM_MOMENTUM = 0.9
_JSON_SCALARS = (str, int, float, bool, type(None))


def _options(where: str, value: Any) -> tuple[tuple[str, Any], ...]:
    """Layer options as ``(name, value)`` pairs sorted by name (so equal options hash equal)."""
    out = []
    for pair in value:
        if not (isinstance(pair, (tuple, list)) and len(pair) == 2 and isinstance(pair[0], str)):
            raise ValueError(f"{where} must be (name, value) pairs, got the item {pair!r}.")
        name, item = pair
        item = tuple(item) if isinstance(item, list) else item
        scalars = item if isinstance(item, tuple) else (item,)
        if not all(isinstance(s, _JSON_SCALARS) for s in scalars):
            raise ValueError(
                f"{where}: option {name!r} = {item!r} must be a number, string, boolean, None "
                "or a tuple of those (it is part of the run's identity)."
            )
        out.append((name, item))
    seen = [n for n, _ in out]
    repeated = sorted({n for n in seen if seen.count(n) > 1})
    if repeated:
        raise ValueError(f"{where} names {repeated} more than once.")
    return tuple(sorted(out))


@dataclasses.dataclass(frozen=True)
class NetworkConfig:
    """The network around a layer.

    Attributes:
        layer: registry key of the recurrent layer (`models.names()`), or an outside layer's
            import path ``package.module:Layer`` (`models.resolve`).
        layer_options: the layer's own options as ``(name, value)`` pairs (``bidirectional``,
            initialisation ranges, ...), validated by the layer's config class.
        depth: number of residual blocks.
        d_model: H, the width of every block.
        d_state: the layer's state size (its meaning is the layer's: P, or N per channel).
        norm: ``"batch"`` (BatchNorm over batch and time) or ``"layer"`` (LayerNorm per step).
        prenorm: normalise the block input (True) or the block output after the residual.
        dropout: dropout rate inside each block, in [0, 1).
        activation: ``"gelu"``, ``"glu"`` or ``"half_glu"`` (see the module docstring).
        pooling: ``"mean"`` over valid steps or the ``"last"`` valid step.
    """

    # Dotted keys under ``layer.`` are the layer config's own fields (``layer.r_min=0.5``):
    # `harness.config.replace` parses them by that class's annotations into ``layer_options``.
    OPTION_GROUPS: ClassVar[dict[str, tuple[str, str, tuple[str, ...]]]] = {
        "layer": ("layer_options", "layer_config_class", ("d_model", "d_state"))
    }

    layer: str = "lru"
    layer_options: tuple[tuple[str, Any], ...] = ()
    depth: int = 2
    d_model: int = 64
    d_state: int = 64
    norm: Norm = "batch"
    prenorm: bool = True
    dropout: float = 0.0
    activation: Activation = "half_glu"
    pooling: Pooling = "mean"

    def __post_init__(self):
        object.__setattr__(
            self, "layer_options", _options("NetworkConfig.layer_options", self.layer_options)
        )
        if ":" in str(self.layer):
            resolve(self.layer)  # an outside layer's import path must name a registered layer
        else:
            _validate.choice("NetworkConfig.layer", self.layer, names())
        _validate.positive_int("NetworkConfig.depth", self.depth)
        _validate.positive_int("NetworkConfig.d_model", self.d_model)
        _validate.positive_int("NetworkConfig.d_state", self.d_state)
        _validate.choice("NetworkConfig.norm", self.norm, NORMS)
        _validate.choice("NetworkConfig.prenorm", self.prenorm, (True, False))
        _validate.choice("NetworkConfig.activation", self.activation, ACTIVATIONS)
        _validate.choice("NetworkConfig.pooling", self.pooling, POOLINGS)
        _validate.number("NetworkConfig.dropout", self.dropout, low=0.0, high=1.0)
        if self.dropout == 1.0:
            raise ValueError("NetworkConfig.dropout=1.0 drops everything; use a rate in [0, 1).")
        # Unknown or invalid layer options fail here, at construction, naming what is accepted.
        self.layer_config()

    @staticmethod
    def layer_config_class(layer: str) -> type:
        """The config class of ``layer`` (a registry key or an outside layer's import path)."""
        return config_class(layer)

    def layer_config(self) -> Any:
        """The layer's validated config (its class from the registry)."""
        return make_config(
            self.layer, d_model=self.d_model, d_state=self.d_state, **dict(self.layer_options)
        )


def _batch_norm(
    norm: eqx.nn.BatchNorm, x: Float[Array, "L H"], mask: Float[Array, " L"], state: eqx.nn.State
) -> tuple[Float[Array, "L H"], eqx.nn.State]:
    """``eqx.nn.BatchNorm`` (``mode="batch"``) of one example, statistics over valid steps only.

    In training, with sums over the valid steps of every example of the batch (``norm``'s axis):

        mean = sum m_t x_t / sum m_t,    var = sum m_t (x_t - mean)^2 / sum m_t
        y_t  = (x_t - mean) / sqrt(var + eps) * weight + bias

    and the running averages (and their counter) are updated exactly as Equinox does; with every
    step valid this is Equinox's BatchNorm. In inference the running averages, zero-debiased as
    Equinox does, replace the batch's statistics. Written on (L, H) with no transposes.
    """
    counter = state.get(norm.batch_counter)
    hidden_mean, hidden_var = state.get(norm.batch_state_index)
    if norm.inference:
        scale = jnp.where(counter == 0, 1, 1 - norm.momentum**counter)
        mean, var = hidden_mean / scale, hidden_var / scale
    else:
        count = jnp.maximum(jax.lax.psum(jnp.sum(mask), norm.axis_name), 1.0)
        mean = jax.lax.psum(mask @ x, norm.axis_name) / count
        centred = (x - mean[None, :]) * mask[:, None]
        var = jax.lax.psum(jnp.sum(centred * centred, axis=0), norm.axis_name) / count
        var = jnp.maximum(0.0, var)
        momentum = norm.momentum
        state = state.set(norm.batch_counter, counter + 1)
        state = state.set(norm.batch_state_index, (
            hidden_mean * momentum + mean * (1 - momentum),
            hidden_var * momentum + var * (1 - momentum),
        ))
    y = (x - mean[None, :]) / jnp.sqrt(var + norm.eps)[None, :]
    if norm.channelwise_affine:
        y = y * norm.weight[None, :] + norm.bias[None, :]
    return y, state


class Block(eqx.Module):
    """One residual block: norm, layer, activation with dropout, residual (see the module)."""

    norm: eqx.nn.BatchNorm | eqx.nn.LayerNorm
    layer: AbstractRecurrentLayer
    out1: eqx.nn.Linear | None
    out2: eqx.nn.Linear | None
    dropout: float = eqx.field(static=True)
    activation: Activation = eqx.field(static=True)
    prenorm: bool = eqx.field(static=True)

    def __init__(self, config: NetworkConfig, *, key: PRNGKeyArray):
        layer_key, out1_key, out2_key = jr.split(key, 3)
        H = config.d_model
        if config.norm == "batch":
            self.norm = eqx.nn.BatchNorm(
                H, axis_name="batch", momentum=BATCH_NORM_MOMENTUM, mode="batch"
            )
        elif config.norm == "layer":
            self.norm = eqx.nn.LayerNorm(H)
        else:
            raise ValueError(f"norm={config.norm!r} is not accepted; accepted values: {NORMS}.")
        self.layer = from_config(config.layer, config.layer_config(), key=layer_key)
        self.out1 = eqx.nn.Linear(H, H, key=out1_key) if config.activation == "glu" else None
        self.out2 = (
            eqx.nn.Linear(H, H, key=out2_key)
            if config.activation in ("glu", "half_glu")
            else None
        )
        self.dropout = float(config.dropout)
        self.activation = config.activation
        self.prenorm = config.prenorm

    def _normalise(
        self, x: Float[Array, "L H"], mask: Float[Array, " L"], state: eqx.nn.State
    ) -> tuple[Float[Array, "L H"], eqx.nn.State]:
        if isinstance(self.norm, eqx.nn.BatchNorm):
            return _batch_norm(self.norm, x, mask, state)
        return jax.vmap(self.norm)(x), state

    def layer_input(
        self, x: Float[Array, "L H"], mask: Float[Array, " L"], state: eqx.nn.State
    ) -> tuple[Float[Array, "L H"], eqx.nn.State]:
        """What the layer sees: the (pre-)normalised block input, zero at padding steps."""
        if self.prenorm:
            x, state = self._normalise(x, mask, state)
        return x * mask[:, None], state

    def _drop(self, y: Float[Array, "L H"], key: PRNGKeyArray | None) -> Float[Array, "L H"]:
        if key is None or self.dropout == 0.0:
            return y
        keep = jr.bernoulli(key, 1.0 - self.dropout, (y.shape[1],))
        return jnp.where(keep[None, :], y / (1.0 - self.dropout), 0.0)

    def __call__(
        self,
        x: Float[Array, "L H"],
        mask: Float[Array, " L"],
        state: eqx.nn.State,
        *,
        key: PRNGKeyArray | None = None,
    ) -> tuple[Float[Array, "L H"], eqx.nn.State]:
        """One block; ``key=None`` means no dropout (evaluation)."""
        keys = (None, None) if key is None else tuple(jr.split(key))
        u, state = self.layer_input(x, mask, state)
        g = self._drop(jax.nn.gelu(self.layer(u)), keys[0])
        if self.activation == "gelu":
            y = g
        elif self.activation == "glu":
            assert self.out1 is not None and self.out2 is not None
            y = self._drop(jax.vmap(self.out1)(g) * jax.nn.sigmoid(jax.vmap(self.out2)(g)), keys[1])
        elif self.activation == "half_glu":
            assert self.out2 is not None
            y = self._drop(g * jax.nn.sigmoid(jax.vmap(self.out2)(g)), keys[1])
        else:
            raise ValueError(
                f"activation={self.activation!r} is not accepted; accepted values: {ACTIVATIONS}."
            )
        x = x + y
        if not self.prenorm:
            x, state = self._normalise(x, mask, state)
        return x, state


class Network(eqx.Module):
    """Encoder, ``depth`` residual blocks around a registered layer, pooling, task head.

    Build it with its state (BatchNorm's running statistics) as

        network, state = eqx.nn.make_with_state(Network)(config, input_kind=..., ..., key=key)

    and call it on one example inside ``jax.vmap(..., axis_name="batch")``.
    """

    encoder: eqx.nn.Embedding | eqx.nn.Linear
    blocks: tuple[Block, ...]
    head: eqx.nn.Linear | eqx.nn.MLP
    input_kind: InputKind = eqx.field(static=True)
    target: Target = eqx.field(static=True)
    pair: bool = eqx.field(static=True)
    pooling: Pooling = eqx.field(static=True)
    num_classes: int = eqx.field(static=True)

    def __init__(
        self,
        config: NetworkConfig,
        *,
        input_kind: InputKind,
        input_size: int,
        num_classes: int,
        target: Target = "class",
        pair: bool = False,
        key: PRNGKeyArray,
    ):
        """Arguments:
            config: the architecture.
            input_kind: ``"tokens"`` (integer ids, 0 is padding) or ``"real"`` (features).
            input_size: the vocabulary size including padding (tokens) or the features per
                step (real).
            num_classes: classes of the target (1 for regression).
            target: ``"class"`` (one label per sequence), ``"per_step"`` (a label per step)
                or ``"regression"`` (one real number per sequence).
            pair: whether an example is two sequences (two-tower head).
            key: initialisation key.
        """
        _validate.choice("input_kind", input_kind, INPUT_KINDS)
        _validate.choice("target", target, TARGETS)
        _validate.positive_int("input_size", input_size)
        _validate.positive_int("num_classes", num_classes)
        if target == "regression" and num_classes != 1:
            raise ValueError(f"A regression target has num_classes=1, got {num_classes}.")
        if pair and target != "class":
            raise ValueError(
                f"A pair task (two-tower head) needs target='class', got target={target!r}."
            )
        encoder_key, head_key, *block_keys = jr.split(key, 2 + config.depth)
        H = config.d_model
        if input_kind == "tokens":
            self.encoder = eqx.nn.Embedding(input_size, H, key=encoder_key)
        else:
            self.encoder = eqx.nn.Linear(input_size, H, key=encoder_key)
        self.blocks = tuple(Block(config, key=k) for k in block_keys)
        if pair:
            self.head = eqx.nn.MLP(4 * H, num_classes, H, depth=1, activation=jax.nn.gelu,
                                   key=head_key)
        else:
            self.head = eqx.nn.Linear(H, num_classes, key=head_key)
        self.input_kind = input_kind
        self.target = target
        self.pair = pair
        self.pooling = config.pooling
        self.num_classes = num_classes

    # ---------------------------------------------------------------------------------------

    def _encode(self, x: Int[Array, " L"] | Float[Array, "L d"]) -> Float[Array, "L H"]:
        if self.input_kind == "tokens":
            return jax.vmap(self.encoder)(x)
        return jax.vmap(self.encoder)(x.astype(jnp.float32))

    def _tower(
        self,
        x: Int[Array, " L"] | Float[Array, "L d"],
        length: Int[Array, ""],
        state: eqx.nn.State,
        key: PRNGKeyArray | None,
    ) -> tuple[Float[Array, "L H"], Float[Array, " L"], eqx.nn.State]:
        e = self._encode(x)
        mask = (jnp.arange(e.shape[0]) < length).astype(e.dtype)
        keys = [None] * len(self.blocks) if key is None else list(jr.split(key, len(self.blocks)))
        for block, block_key in zip(self.blocks, keys):
            e, state = block(e, mask, state, key=block_key)
        return e, mask, state

    def _pool(self, e: Float[Array, "L H"], mask: Float[Array, " L"]) -> Float[Array, " H"]:
        if self.pooling == "mean":
            return jnp.sum(e * mask[:, None], axis=0) / jnp.maximum(jnp.sum(mask), 1.0)
        elif self.pooling == "last":
            last = jnp.maximum(jnp.sum(mask).astype(jnp.int32) - 1, 0)
            return e[last]
        else:
            raise ValueError(
                f"pooling={self.pooling!r} is not accepted; accepted values: {POOLINGS}."
            )

    def __call__(
        self,
        x: Array,
        length: Int[Array, "..."],
        state: eqx.nn.State,
        *,
        key: PRNGKeyArray | None = None,
    ) -> tuple[Float[Array, "..."], eqx.nn.State]:
        """The prediction for one example.

        Arguments:
            x: tokens ``(L,)`` or features ``(L, d)``; a pair task stacks two: ``(2, L[, d])``.
            length: valid steps, ``()`` (pair: ``(2,)``).
            state: BatchNorm's running statistics.
            key: dropout key; None disables dropout.

        Returns:
            ``(output, state)``: logits ``(C,)`` for ``"class"``, ``(L, C)`` for
            ``"per_step"``, a scalar for ``"regression"``; the updated state.
        """
        if self.pair:
            keys = (None, None) if key is None else tuple(jr.split(key))
            # Both towers share weights and BatchNorm statistics, as LRA's two-tower model.
            ea, mask_a, state = self._tower(x[0], length[0], state, keys[0])
            eb, mask_b, state = self._tower(x[1], length[1], state, keys[1])
            a, b = self._pool(ea, mask_a), self._pool(eb, mask_b)
            return self.head(jnp.concatenate([a, b, a * b, a - b])), state
        e, mask, state = self._tower(x, length, state, key)
        if self.target == "per_step":
            return jax.vmap(self.head)(e), state
        out = self.head(self._pool(e, mask))
        if self.target == "regression":
            return out[0], state
        return out, state

    def layer_states(
        self, x: Array, length: Int[Array, ""], state: eqx.nn.State
    ) -> list[Complex[Array, "L P"]]:
        """Each layer's forward hidden states on its own input, in inference mode.

        Block k's entry is ``layer_k.hidden_states(u_k)`` where ``u_k`` is the normalised,
        masked input that layer k sees (see the module docstring); BatchNorm uses its running
        statistics, so one example needs no batch. ``x`` is one sequence (for a pair task,
        pass one of the two). States at padding steps are those of a zero input.
        """
        model = eqx.nn.inference_mode(self)
        e = model._encode(x)
        mask = (jnp.arange(e.shape[0]) < length).astype(e.dtype)
        out = []
        for block in model.blocks:
            u, _ = block.layer_input(e, mask, state)
            out.append(block.layer.hidden_states(u))
            e, _ = block(e, mask, state)
        return out

    def rescaled(self, factor: float) -> Network:
        """The network with every layer's timescales multiplied by ``factor``.

        Used to evaluate at another sampling rate (Speech Commands at 8 kHz: factor 2, as the
        S4 and S5 papers). A layer without timescales raises `NotImplementedError` (see
        `AbstractRecurrentLayer.rescaled`).
        """
        if factor == 1.0:
            return self
        layers = [block.layer.rescaled(factor) for block in self.blocks]
        return eqx.tree_at(lambda n: [b.layer for b in n.blocks], self, layers)


def recurrent_mask(network: Network) -> PyTree[bool]:
    """A pytree like ``network``: True on the arrays of the recurrent optimiser group.

    Every leaf is False except where a block's layer says otherwise (`recurrent_mask()` of
    the layer), so the encoder, norms, GLU and head are regular parameters.
    """
    mask = jax.tree.map(lambda _: False, network)
    return eqx.tree_at(
        lambda n: [b.layer for b in n.blocks],
        mask,
        [b.layer.recurrent_mask() for b in network.blocks],
    )


def count_parameters(tree: PyTree) -> int:
    """Trained real numbers in ``tree``: every inexact array, a complex entry counting two.

    BatchNorm's running statistics live in the state, not the module, so they do not count.
    """
    total = 0
    for leaf in jax.tree.leaves(eqx.filter(tree, eqx.is_inexact_array)):
        total += leaf.size * (2 if jnp.iscomplexobj(leaf) else 1)
    return int(total)
