"""Converters between an Equinox layer and the flat parameter dicts of the Flax modules.

Two layouts exist for each layer:

- ``"ours"``: one entry per array field of the Equinox layer, under the field's own name
  (``nu_log``, ``B_re``, ``C_reverse_re``, ...); fields that are ``None`` (an unused option,
  e.g. ``C_reverse`` of a unidirectional layer) have no entry. The generic linen and NNX
  modules hold this layout. `from_flax_params` also reads a renamed field under its former
  name (`RENAMED`).
- ``"published"``: the parameter names and shapes of the published Flax codebase of that
  model, which the drop-in linen modules (`models.flax.linen`) hold, so that a checkpoint of the
  published code loads as it is. S4D has no published Flax codebase, so no such layout.

Mapping table (ours <-> published; H channels, P stored states, heads, N_h = N / heads):

    LRU  <-> minimal-LRU (NicolasZucchet/minimal-LRU, lru/model.py, class LRU)
        nu_log (P,)      nu_log (P,)           identity
        theta_log (P,)   theta_log (P,)        identity
        gamma_log (P,)   gamma_log (P,)        identity (normaliser="learned" only)
        B_re, B_im (P,H) B_re, B_im (P,H)      identity
        C_re, C_im (H,P) C_re, C_im (H,P)      identity
        D (H,)           D (H,)                identity
        (the published module has no bidirectional option: C_reverse_* has no counterpart)

    S5   <-> S5 (lindermanlab/S5, s5/ssm.py, class S5SSM; P counts states after halving)
        Lambda_re (P,)   Lambda_re (P,)        identity
        Lambda_im (P,)   Lambda_im (P,)        identity
        B_re, B_im (P,H) B (P,H,2)             B[..., 0] = B_re, B[..., 1] = B_im
        C_re, C_im (H,P) C (H,P,2)             C[..., 0] = C_re, C[..., 1] = C_im
        C_reverse_*      C1, C2 (H,P,2)        bidirectional: C1 = C, C2 = C_reverse
                         or C (H,2P,2)         bidirectional with C_init="complex_normal":
                                               C[:, :P] = C, C[:, P:] = C_reverse
        D (H,)           D (H,)                identity
        Delta_log (P,)   log_step (P,1)        log_step[:, 0] = Delta_log

    RotRNN <-> the RotRNN authors' Flax module (class RotRNN(rotrnn_dim, model_dim, n_heads,
    ...), an extension of the S5 code)
        M (heads,N_h,N_h)   M (heads,N_h,N_h)     identity
        angles (heads,N_h/2) theta (heads,N_h/2)  identity
        gamma_loglog (heads,) gamma_log (heads,1) gamma_log[:, 0] = gamma_loglog (both hold
                                                  log(-log gamma); the published name is kept)
        B (heads,N_h,H)     B (heads,N_h,H)       identity
        C (H,N)             C (H,N)               identity
        C_reverse (H,N)     C2 (H,N)              identity (bidirectional)
        D (H,)              D (H,)                identity
        (the published module always normalises: normalise=True only)

Every transform is a slice, a stack or a reshape, so conversions are exact: a round trip in
either direction returns the same bits.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any, Literal

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from flax import linen, nnx
from jaxtyping import Array, Float

from linrnn_bench import models
from linrnn_bench.models.lru import LRU, LRUConfig
from linrnn_bench.models.rotrnn import RotRNN, RotRNNConfig
from linrnn_bench.models.s5 import S5, S5Config

Layout = Literal["ours", "published"]
LAYOUTS: tuple[str, ...] = ("ours", "published")
# The models whose published Flax code has a layout here, and where that code lives.
PUBLISHED: dict[str, str] = {
    "lru": "minimal-LRU (NicolasZucchet/minimal-LRU, lru/model.py)",
    "s5": "S5 (lindermanlab/S5, s5/ssm.py)",
    "rotrnn": "the RotRNN authors' Flax module (RotRNN(rotrnn_dim, model_dim, n_heads, ...))",
}

Params = dict[str, Float[Array, "..."]]
# Fields renamed since layout "ours" dicts were first written: (model, old name) -> new name. A
# dict under the old name is read as under the new one, so saved "ours" parameters still load.
RENAMED: dict[tuple[str, str], str] = {
    # RotRNN's gamma_log held log(-log gamma), not log gamma as the LRU's gamma_log does.
    ("rotrnn", "gamma_log"): "gamma_loglog",
}
# The dtypes a parameter may have: the layers' maths (complex64 / complex128 from real and
# imaginary parts) is not defined in half precision, so float16 and bfloat16 are refused, not
# cast (a cast would change the bits that the round trips promise to keep).
ACCEPTED_DTYPES: tuple[Any, ...] = (jnp.dtype(jnp.float32), jnp.dtype(jnp.float64))


# --------------------------------------------------------------------------------------------
# "ours": the layer's array fields by name


def shaped_layer(name: str, config: Any) -> eqx.Module:
    """Layer ``name`` under ``config`` with `jax.ShapeDtypeStruct` leaves: its structure only.

    Built by `equinox.filter_eval_shape`, so no initialiser runs on data; cached per config
    (configs are frozen dataclasses) and registered class (a registration replaced with
    ``replace=True`` is built afresh). Field names and shapes do not depend on the float dtype.
    """
    return _shaped_layer(models.info(name).layer_cls, name, config)


@functools.cache
def _shaped_layer(layer_cls: Any, name: str, config: Any) -> eqx.Module:
    return eqx.filter_eval_shape(models.from_config, name, config, key=jr.PRNGKey(0))


def _skeleton(name: str, config: Any) -> tuple[Any, tuple[str, ...], tuple[tuple[int, ...], ...]]:
    """(treedef, field names, field shapes) of layer ``name`` under ``config``."""
    return _skeleton_of(models.info(name).layer_cls, name, config)


@functools.cache
def _skeleton_of(
    layer_cls: Any, name: str, config: Any
) -> tuple[Any, tuple[str, ...], tuple[tuple[int, ...], ...]]:
    leaves, treedef = jax.tree_util.tree_flatten_with_path(shaped_layer(name, config))
    names = tuple(_path_name(path) for path, _ in leaves)
    if len(set(names)) != len(names):
        raise ValueError(f"Model {name!r} has array leaves with clashing names: {names}.")
    return treedef, names, tuple(tuple(leaf.shape) for _, leaf in leaves)


def _path_name(path: tuple) -> str:
    # A field of the layer is one GetAttrKey; a nested module's field is joined with dots.
    parts = []
    for entry in path:
        for attr in ("name", "key", "idx"):
            if hasattr(entry, attr):
                parts.append(str(getattr(entry, attr)))
                break
        else:
            parts.append(str(entry))
    return ".".join(parts)


def field_shapes(name: str, config: Any) -> dict[str, tuple[int, ...]]:
    """``{field name: shape}`` of the arrays of layer ``name`` under ``config`` (layout "ours")."""
    _, names, shapes = _skeleton(name, config)
    return dict(zip(names, shapes))


def _ours_from_layer(layer: eqx.Module) -> Params:
    leaves = jax.tree_util.tree_flatten_with_path(layer)[0]
    return {_path_name(path): leaf for path, leaf in leaves}


def _layer_from_ours(name: str, params: Mapping[str, Array], config: Any):
    treedef, names, shapes = _skeleton(name, config)
    _check_entries(name, "ours", params, dict(zip(names, shapes)))
    return jax.tree_util.tree_unflatten(treedef, [params[n] for n in names])


def _check_entries(
    name: str, layout: str, params: Mapping[str, Any], expected: Mapping[str, tuple[int, ...]]
) -> None:
    """The names and shapes of ``params`` are exactly ``expected``, or a ValueError says which."""
    missing = sorted(set(expected) - set(params))
    unknown = sorted(set(params) - set(expected))
    if missing or unknown:
        raise ValueError(
            f"Parameters of model {name!r} (layout {layout!r}) do not match its config: "
            f"missing {missing}, unexpected {unknown}. Expected names and shapes: "
            f"{dict(expected)}."
        )
    for key, shape in expected.items():
        value = params[key]
        got = tuple(getattr(value, "shape", ()))
        if got != tuple(shape):
            raise ValueError(
                f"Parameter {key!r} of model {name!r} (layout {layout!r}) has shape {got}; its "
                f"config needs {tuple(shape)}. Expected names and shapes: {dict(expected)}."
            )
        dtype = jnp.result_type(value)
        if dtype not in ACCEPTED_DTYPES:
            raise ValueError(
                f"Parameter {key!r} of model {name!r} has dtype {dtype}; parameters are real "
                "float32 or float64 arrays (the layers compute in them): cast them, e.g. "
                "jax.tree.map(lambda a: a.astype(jnp.float32), params)."
            )


def _as_array(name: str, key: str, value: Any) -> Any:
    """``value`` as it is if it is an array (jax or numpy, or a tracer), else `jnp.asarray` of
    it (a nested list); anything that is not array-like is a TypeError naming the entry."""
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return value
    try:
        return jnp.asarray(value)
    except (TypeError, ValueError) as e:
        hint = (" (pass the flat dict, e.g. variables['params'], not the variables)"
                if isinstance(value, Mapping) else "")
        raise TypeError(
            f"Parameter {key!r} of model {name!r} is a {type(value).__name__}, not an array"
            f"{hint}: {str(e).splitlines()[0] if str(e) else ''}"
        ) from None


# --------------------------------------------------------------------------------------------
# "published": the three Flax codebases


def _lru_to_published(layer: LRU) -> Params:
    if layer.gamma_log is None or layer.C_reverse_re is not None:
        raise ValueError(
            "minimal-LRU's layout has the learned normaliser and no reverse scan: convert an LRU "
            "with normaliser='learned' and bidirectional=False, or use layout='ours'."
        )
    return {k: getattr(layer, k) for k in ("nu_log", "theta_log", "gamma_log", "B_re", "B_im",
                                           "C_re", "C_im", "D")}


def _lru_from_published(params: Mapping[str, Array], config: LRUConfig) -> Params:
    if config.normaliser != "learned" or config.bidirectional:
        raise ValueError(
            "minimal-LRU's layout has the learned normaliser and no reverse scan; the config "
            f"has normaliser={config.normaliser!r}, bidirectional={config.bidirectional!r}. "
            "Use normaliser='learned', bidirectional=False, or layout='ours'."
        )
    H, P = config.d_model, config.d_state
    expected = {"nu_log": (P,), "theta_log": (P,), "gamma_log": (P,), "B_re": (P, H),
                "B_im": (P, H), "C_re": (H, P), "C_im": (H, P), "D": (H,)}
    _check_entries("lru", "published", params, expected)
    return dict(params)


def _pair(re: Array, im: Array) -> Array:
    # The S5 code's complex parameters: real and imaginary parts on a last axis of size 2.
    return jnp.stack([re, im], axis=-1)


def _s5_to_published(layer: S5, config: S5Config | None) -> Params:
    bidirectional = layer.C_reverse_re is not None
    if config is not None:
        _check_s5_config(layer, config)
    elif bidirectional:
        # The layer does not keep C_init, and the published layout depends on it: guessing
        # would write C1 / C2 where the S5 code (and the layer's own config) holds one C.
        raise ValueError(
            "A bidirectional S5's published layout depends on the C_init it was built with (one "
            "C (H, 2P, 2) for C_init='complex_normal', C1 and C2 otherwise), which the layer "
            "does not keep: pass config=, the layer's S5Config."
        )
    params = {"Lambda_re": layer.Lambda_re, "Lambda_im": layer.Lambda_im,
              "B": _pair(layer.B_re, layer.B_im), "D": layer.D,
              "log_step": layer.Delta_log[:, None]}
    C = _pair(layer.C_re, layer.C_im)
    if layer.C_reverse_re is None or layer.C_reverse_im is None:
        params["C"] = C
    elif config is not None and config.C_init == "complex_normal":
        params["C"] = jnp.concatenate([C, _pair(layer.C_reverse_re, layer.C_reverse_im)], 1)
    else:
        params["C1"], params["C2"] = C, _pair(layer.C_reverse_re, layer.C_reverse_im)
    return params


def _check_s5_config(layer: S5, config: Any) -> None:
    """``config`` is an S5Config whose layer has ``layer``'s fields and shapes."""
    if not isinstance(config, S5Config):
        raise TypeError(f"config= must be the layer's S5Config, got {type(config).__name__}.")
    expected = field_shapes("s5", config)
    got = {k: tuple(v.shape) for k, v in _ours_from_layer(layer).items()}
    if got != expected:
        raise ValueError(
            f"config= does not describe this S5 layer: its config gives fields {expected}, the "
            f"layer has {got}. Pass the S5Config the layer was built with."
        )


def _s5_from_published(params: Mapping[str, Array], config: S5Config) -> Params:
    H = config.d_model
    P = config.d_state // 2 if config.conj_sym else config.d_state
    expected = {"Lambda_re": (P,), "Lambda_im": (P,), "B": (P, H, 2), "D": (H,),
                "log_step": (P, 1)}
    if not config.bidirectional:
        expected["C"] = (H, P, 2)
    elif config.C_init == "complex_normal":
        expected["C"] = (H, 2 * P, 2)  # the S5 code's one C for both directions
    else:
        expected["C1"] = expected["C2"] = (H, P, 2)
    _check_entries("s5", "published", params, expected)
    if config.bidirectional and config.C_init == "complex_normal":
        C, C_reverse = params["C"][:, :P], params["C"][:, P:]
    elif config.bidirectional:
        C, C_reverse = params["C1"], params["C2"]
    else:
        C, C_reverse = params["C"], None
    ours = {"Lambda_re": params["Lambda_re"], "Lambda_im": params["Lambda_im"],
            "B_re": params["B"][..., 0], "B_im": params["B"][..., 1],
            "C_re": C[..., 0], "C_im": C[..., 1], "D": params["D"],
            "Delta_log": params["log_step"][:, 0]}
    if C_reverse is not None:
        ours["C_reverse_re"], ours["C_reverse_im"] = C_reverse[..., 0], C_reverse[..., 1]
    return ours


def _rotrnn_to_published(layer: RotRNN) -> Params:
    if not layer.normalise:
        raise ValueError(
            "The RotRNN authors' module always normalises the input by xi: convert a RotRNN "
            "with normalise=True, or use layout='ours'."
        )
    params = {"theta": layer.angles, "M": layer.M, "B": layer.B, "C": layer.C, "D": layer.D,
              "gamma_log": layer.gamma_loglog[:, None]}
    if layer.C_reverse is not None:
        params["C2"] = layer.C_reverse
    return params


def _rotrnn_from_published(params: Mapping[str, Array], config: RotRNNConfig) -> Params:
    if not config.normalise:
        raise ValueError(
            "The RotRNN authors' module always normalises the input by xi; the config has "
            "normalise=False. Use normalise=True, or layout='ours'."
        )
    heads, H, N = config.heads, config.d_model, config.d_state
    Nh = N // heads
    expected = {"theta": (heads, Nh // 2), "M": (heads, Nh, Nh), "B": (heads, Nh, H),
                "C": (H, N), "D": (H,), "gamma_log": (heads, 1)}
    if config.bidirectional:
        expected["C2"] = (H, N)
    _check_entries("rotrnn", "published", params, expected)
    ours = {"M": params["M"], "angles": params["theta"], "gamma_loglog": params["gamma_log"][:, 0],
            "B": params["B"], "C": params["C"], "D": params["D"]}
    if config.bidirectional:
        ours["C_reverse"] = params["C2"]
    return ours


# --------------------------------------------------------------------------------------------
# Public entry points


def _check_layout(layout: str) -> None:
    if layout not in LAYOUTS:
        raise ValueError(f"layout={layout!r} is not accepted; accepted values: {list(LAYOUTS)}.")


def to_flax_params(
    layer: eqx.Module, *, layout: str = "ours", config: Any = None
) -> Params:
    """The Flax parameter dict of ``layer`` in ``layout`` (module docstring: the mapping table).

    Arguments:
        layer: an Equinox layer (`models.build`); anything else is a TypeError.
        layout: ``"ours"`` (field names) or ``"published"`` (the published codebase's names).
        config: only read for an S5 in the published layout, and required for a bidirectional
            one: with ``C_init="complex_normal"`` the S5 code holds both output maps in one
            ``C`` ``(H, 2P, 2)``, otherwise in ``C1`` and ``C2``, and the layer does not keep
            its ``C_init``. It must describe the layer (its fields' shapes are checked).

    Returns:
        ``{name: array}``, sharing the layer's arrays (no copy).
    """
    _check_layout(layout)
    if not isinstance(layer, eqx.Module):
        if isinstance(layer, (linen.Module, nnx.Module)):
            hint = "; a Flax module's parameters are already Flax parameters (its variables)"
        else:
            hint = ""
        raise TypeError(
            f"to_flax_params takes an Equinox layer (models.build or models.from_config), got "
            f"{'None' if layer is None else 'a ' + type(layer).__name__}{hint}."
        )
    if layout == "ours":
        return _ours_from_layer(layer)
    if isinstance(layer, LRU):
        return _lru_to_published(layer)
    if isinstance(layer, S5):
        return _s5_to_published(layer, config)
    if isinstance(layer, RotRNN):
        return _rotrnn_to_published(layer)
    raise ValueError(
        f"{type(layer).__name__} has no published Flax layout; published layouts exist for "
        f"{sorted(PUBLISHED)}. Use layout='ours'."
    )


def from_flax_params(
    name: str, params: Mapping[str, Any], config: Any, *, layout: str = "ours"
) -> eqx.Module:
    """The Equinox layer ``name`` holding ``params`` (a dict in ``layout``) under ``config``.

    The inverse of `to_flax_params`: no initialiser runs, the arrays are used as they are
    (the published layouts' transforms are slices). Names and shapes are checked against the
    config, and a mismatch names the expected ones.

    Arguments:
        name: a registered model name (`models.names()`).
        params: the flat parameter dict, e.g. ``variables["params"]`` of a linen module. Its
            values are float32 or float64 arrays (jax or numpy); nested lists are converted
            with `jnp.asarray`; float16 and bfloat16 are refused (`ACCEPTED_DTYPES`), not cast.
        config: the model's config (`models.make_config`).
        layout: ``"ours"`` or ``"published"``.
    """
    _check_layout(layout)
    if not isinstance(config, models.config_class(name)):
        raise TypeError(
            f"Model {name!r} needs a {models.config_class(name).__name__}, got "
            f"{type(config).__name__}."
        )
    if not isinstance(params, Mapping):
        raise TypeError(
            f"params must be a mapping of names to arrays, got {type(params).__name__}."
        )
    params = {key: _as_array(name, key, value) for key, value in params.items()}
    if layout == "published":
        if name == "lru":
            params = _lru_from_published(params, config)
        elif name == "s5":
            params = _s5_from_published(params, config)
        elif name == "rotrnn":
            params = _rotrnn_from_published(params, config)
        else:
            raise ValueError(
                f"Model {name!r} has no published Flax layout; published layouts exist for "
                f"{sorted(PUBLISHED)}. Use layout='ours'."
            )
    else:
        params = _renamed(name, params)
    return _layer_from_ours(name, params, config)


def _renamed(name: str, params: Params) -> Params:
    """``params`` with each old field name of model ``name`` (`RENAMED`) under its new name,
    unless the new name is there too (then the dict is left for `_check_entries` to refuse)."""
    renames = {old: new for (model, old), new in RENAMED.items()
               if model == name and old in params and new not in params}
    return {renames.get(key, key): value for key, value in params.items()}
