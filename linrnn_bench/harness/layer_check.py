"""``linrnn-bench check-layer MODEL``: does a layer keep the contract the studies rely on?

A layer maps one sequence ``(L, H) -> (L, H)`` and keeps its dtype; it is an `equinox.Module`
that `jax.jit`, `jax.grad` and `jax.vmap` go through; its output and gradient stay finite on a
long sequence; and it offers what its registration declares (hidden states ``(L, P)``, a
discrete system, a recurrent mask shaped like the layer). A NaN or an infinity in any array a
check computes fails its row. Each check is one row: ``ok``, ``fail`` with the reason, or
``skip`` where the registration does not declare the capability. The last rows say which
studies the layer can enter and what each needs (`study_checks`): a study whose needs the
registration lacks (each study's `Study.skip_reason`) or whose contract rows failed says
"cannot enter" and why.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
from collections.abc import Callable
from typing import Any, Literal

from linrnn_bench import models

Status = Literal["ok", "fail", "skip"]


@dataclasses.dataclass(frozen=True)
class Check:
    """One row of the table: what was checked, its status and what was seen."""

    name: str
    status: Status
    detail: str


def _finite(what: str, *trees: Any) -> None:
    """Raise `FloatingPointError` naming ``what`` if any array leaf holds a NaN or infinity."""
    import jax
    import numpy as np

    for leaf in jax.tree.leaves(trees):
        if hasattr(leaf, "dtype") and np.issubdtype(leaf.dtype, np.inexact) and not bool(
            np.all(np.isfinite(np.asarray(leaf)))
        ):
            raise FloatingPointError(f"{what} holds NaN or Inf")


def _run(name: str, check: Callable[[], str]) -> Check:
    # A contract check may fail in any way a foreign layer can (a wrong shape, a tracer leak, a
    # NaN), and each failure is a row of the table: so every exception becomes ``fail``.
    try:
        return Check(name, "ok", check())
    except Exception as e:  # noqa: BLE001 (reported, not swallowed: it is the row's detail)
        return Check(name, "fail", f"{type(e).__name__}: {e}".strip().split("\n")[0][:200])


@dataclasses.dataclass(frozen=True)
class _Subject:
    """A built layer and what its checks share.

    The input and the compiled programs are made once so that each check reuses what an
    earlier one compiled (eager dispatch would compile each operation on its own, which costs
    more than one compiled program).
    """

    layer: Any
    u: Any  # (L, H) float32: the input of every short-sequence check
    params: Any  # the layer's inexact arrays (the rest is in the compiled programs' closure)
    call: Callable[[Any, Any], Any]  # compiled ``layer(x)``
    output_and_grads: Callable[[Any, Any], Any]  # compiled (output, (d/d params, d/d x))
    long_key: Any  # the key of the long sequence's input
    long_length: int


def _subject(layer: Any, u: Any, long_key: Any, long_length: int) -> _Subject:
    """The shared input and compiled programs of ``layer``'s checks.

    One compiled program gives the output and both gradients of ``sum(y**2)`` (parameters and
    input), at both lengths, so the grad and long-sequence checks share it.
    """
    import equinox as eqx
    import jax
    import jax.numpy as jnp

    params, static = eqx.partition(layer, eqx.is_inexact_array)

    def loss(p: Any, x: jax.Array) -> jax.Array:
        return jnp.sum(jnp.square(eqx.combine(p, static)(x)))

    output_and_grads = eqx.filter_jit(
        lambda p, x: (eqx.combine(p, static)(x), jax.grad(loss, argnums=(0, 1))(p, x))
    )
    return _Subject(layer, u, params, eqx.filter_jit(lambda m, x: m(x)), output_and_grads,
                    long_key, long_length)


def _registration(name: str, info: Any) -> Check:
    """The first row: the resolved name, its label, where it came from and what it declares."""
    return Check(
        "registration", "ok",
        f"{name!r} ({info.label}), from {info.origin}; capabilities: "
        f"{', '.join(sorted(info.capabilities)) or 'none'}",
    )


def _options(name: str, info: Any, d_model: int, d_state: int) -> dict[str, Any]:
    """The options its label's variant gives the layer (`build_options`), as a study would
    build it."""
    from .variants import Variant, build_options

    return build_options(Variant(name, (), info.label, ""), d_model, d_state)


def _check_fits(name: str, info: Any, options: dict[str, Any], d_model: int, d_state: int,
                long_length: int) -> None:
    """Refuse (``ValueError``) sizes whose arrays cannot fit in memory, before any is made: an
    allocation that fails inside XLA aborts the process instead of raising.

    The estimate is a lower bound from shapes alone (`equinox.filter_eval_shape`): the
    parameters and their gradients (the grad check holds both), the long sequence's input,
    output and input gradient, and its hidden states where the layer declares them.
    """
    import equinox as eqx
    import jax
    import jax.numpy as jnp

    u = jax.ShapeDtypeStruct((long_length, d_model), jnp.float32)
    try:
        layer = eqx.filter_eval_shape(lambda key: models.build(
            name, d_model=d_model, d_state=d_state, key=key, **options), jax.random.PRNGKey(0))
    except MemoryError as e:  # an initialiser's own (numpy) arrays alone exceed memory
        raise ValueError(f"Model {name!r} at d_model={d_model}, d_state={d_state}: building "
                         f"it runs out of memory ({e}); lower --d-model or --d-state.") from e
    except Exception:  # noqa: BLE001 (the build row reports a layer that cannot be built)
        return
    states = None
    if info.has(models.HIDDEN_STATES):
        try:
            states = eqx.filter_eval_shape(lambda m, x: m.hidden_states(x), layer, u)
        except Exception:  # noqa: BLE001 (the hidden-states row reports it; no states counted)
            states = None
    parameters = sum(_bytes(leaf) for leaf in jax.tree.leaves(layer))
    sequence = 3 * _bytes(u)
    held = sum(_bytes(leaf) for leaf in jax.tree.leaves(states))
    need, (memory, where) = 2 * parameters + sequence + held, _memory()
    if need > memory:
        raise ValueError(
            f"Model {name!r} at d_model={d_model}, d_state={d_state}, long_length={long_length} "
            f"needs at least {_gib(need)} for the checks' arrays (parameters and their "
            f"gradients {_gib(2 * parameters)}, the long sequence's states {_gib(held)}, its "
            f"input, output and gradient {_gib(sequence)}), more than the {_gib(memory)} of "
            f"{where}; lower --d-model, --d-state or --long-length.")


def _bytes(leaf: Any) -> int:
    """The bytes of an array or shape leaf (0 for anything else)."""
    shape, dtype = getattr(leaf, "shape", None), getattr(leaf, "dtype", None)
    return 0 if shape is None or dtype is None else math.prod(shape) * dtype.itemsize


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"


def _memory() -> tuple[int, str]:
    """``(bytes, what they are)``: the default device's memory where it reports a limit (an
    accelerator), else this machine's physical memory."""
    import jax

    device = jax.devices()[0]
    limit = (device.memory_stats() or {}).get("bytes_limit")
    if limit:
        return int(limit), f"the {device.device_kind}'s memory"
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"), "this machine's memory"


def _build(name: str, options: dict[str, Any], d_model: int, d_state: int, key: Any
           ) -> tuple[Check, Any]:
    """The build row and the layer (``None`` when building failed, which ends the checks),
    built with ``options`` (`_options`); it must be an `equinox.Module`."""
    import equinox as eqx

    built: list[Any] = []

    def build() -> str:
        layer = models.build(name, d_model=d_model, d_state=d_state, key=key, **options)
        if not isinstance(layer, eqx.Module):
            raise TypeError(f"the layer is a {type(layer).__name__}, not an equinox.Module")
        built.append(layer)
        return f"H={d_model}, d_state={d_state}" + (f", {options}" if options else "")

    row = _run("build", build)
    return row, (built[0] if built else None)


def _shape(s: _Subject) -> str:
    """``(L, H) -> (L, H)``, traced (not run) with `jax.eval_shape`."""
    import jax

    y = jax.eval_shape(s.layer, s.u)
    if y.shape != s.u.shape:
        raise ValueError(f"(L, H) = {s.u.shape} gave {y.shape}; expected {s.u.shape}")
    return f"{s.u.shape} -> {y.shape}"


def _dtype(s: _Subject) -> str:
    """float32 in, float32 out, traced (not run) with `jax.eval_shape`."""
    import jax

    y = jax.eval_shape(s.layer, s.u)
    if y.dtype != s.u.dtype:
        raise TypeError(f"float32 in, {y.dtype} out")
    return f"{s.u.dtype} -> {y.dtype}"


def _jit(s: _Subject) -> str:
    """The compiled call runs and its output is finite."""
    import jax.numpy as jnp

    y = s.call(s.layer, s.u)
    if not bool(jnp.all(jnp.isfinite(y))):
        raise FloatingPointError("the compiled call's output is not finite")
    return "compiles and runs under jax.jit"


def _grad(s: _Subject) -> str:
    """The gradients w.r.t. the parameters and the input are finite, and not all zero (a
    layer whose parameters do not reach its output could not be trained)."""
    import jax
    import jax.numpy as jnp

    _, (g_params, g_u) = s.output_and_grads(s.params, s.u)
    leaves = [*jax.tree.leaves(g_params), g_u]
    if not all(bool(jnp.all(jnp.isfinite(leaf))) for leaf in leaves):
        raise FloatingPointError("a gradient is not finite")
    if not any(bool(jnp.any(leaf != 0)) for leaf in jax.tree.leaves(g_params)):
        raise ValueError("every parameter gradient is zero")
    return "finite, w.r.t. the parameters and the input"


def _vmap(s: _Subject) -> str:
    """`jax.vmap` over a batch of two sequences gives what each gives alone (batching is the
    caller's, so a layer must not mix the sequences of a batch)."""
    import equinox as eqx
    import jax
    import jax.numpy as jnp
    import numpy as np

    batch = jnp.stack([s.u, 2.0 * s.u])
    together = eqx.filter_jit(lambda m, x: jax.vmap(m)(x))(s.layer, batch)
    _finite("the vmapped output", together)
    alone = jnp.stack([s.call(s.layer, s.u), s.call(s.layer, 2.0 * s.u)])
    np.testing.assert_allclose(together, alone, rtol=1e-4, atol=1e-5, equal_nan=False)
    return f"{batch.shape} -> {together.shape}, each sequence as alone"


def _long(s: _Subject) -> str:
    """Output and gradients stay finite on a long sequence (where a recurrence that is not
    stable overflows)."""
    import jax
    import jax.numpy as jnp
    import jax.random as jr

    x = jr.normal(s.long_key, (s.long_length, s.u.shape[1]), jnp.float32)
    y, (g_params, g_u) = s.output_and_grads(s.params, x)
    leaves = [y, g_u, *jax.tree.leaves(g_params)]
    if not all(bool(jnp.all(jnp.isfinite(leaf))) for leaf in leaves):
        raise FloatingPointError(f"non-finite output or gradient at L={s.long_length}")
    return f"L={s.long_length}: output and gradient finite"


def _hidden_states(s: _Subject) -> str:
    """`hidden_states` gives a finite ``(L, P)`` array (what the stability and theory studies
    read)."""
    import equinox as eqx

    length = s.u.shape[0]
    h = eqx.filter_jit(lambda m, x: m.hidden_states(x))(s.layer, s.u)
    if h.ndim != 2 or h.shape[0] != length:
        raise ValueError(f"hidden_states gave {h.shape}; expected (L, P) with L={length}")
    _finite("hidden_states", h)
    return f"(L, P) = {h.shape}, {h.dtype}"


def _discrete_system(s: _Subject) -> str:
    """`discrete_system` gives a finite `models.DiscreteSystem` whose eigenvalues lie inside
    the unit circle (a stable recurrence)."""
    import jax.numpy as jnp

    system = s.layer.discrete_system()
    if not isinstance(system, models.DiscreteSystem):
        raise TypeError(f"discrete_system() gave a {type(system).__name__}")
    _finite("the discrete system", system)
    modulus = float(jnp.max(jnp.abs(system.lam)))
    if not modulus < 1:
        raise ValueError(f"max |lambda| = {modulus} >= 1")
    return f"{system.structure}, P={system.state_size}, max |lambda| = {modulus:.4f}"


def _recurrent_mask(s: _Subject) -> str:
    """`recurrent_mask` is a tree shaped like the layer (what the optimiser's groups read);
    the detail counts the arrays it marks."""
    import equinox as eqx
    import jax

    mask = s.layer.recurrent_mask()
    if jax.tree.structure(mask) != jax.tree.structure(s.layer):
        raise ValueError("the mask's tree is not the layer's")
    marked = [bool(m) for m, leaf in zip(jax.tree.leaves(mask), jax.tree.leaves(s.layer))
              if eqx.is_inexact_array(leaf) and m]
    return f"{len(marked)} array(s) in the recurrent group"


def _parameters(s: _Subject) -> str:
    """Every parameter is finite; the detail counts the real numbers."""
    _finite("a parameter", s.params)
    return f"{models.count_parameters(s.layer)} real numbers"


# The checks every layer gets, in the table's order (the "parameters" row comes last).
_CONTRACT_CHECKS: tuple[tuple[str, Callable[[_Subject], str]], ...] = (
    ("shape (L, H) -> (L, H)", _shape), ("dtype kept", _dtype), ("jit", _jit), ("grad", _grad),
    ("vmap", _vmap), ("long sequence", _long),
)
# The checks of a capability; a row is ``skip`` where the registration does not declare it.
_CAPABILITY_CHECKS: tuple[tuple[str, Callable[[_Subject], str]], ...] = (
    (models.HIDDEN_STATES, _hidden_states), (models.DISCRETE_SYSTEM, _discrete_system),
    (models.RECURRENT_MASK, _recurrent_mask),
)


def check_layer(
    model: str, *, d_model: int = 4, d_state: int = 8, length: int = 16,
    long_length: int = 4096, seed: int = 0,
) -> list[Check]:
    """The contract checks of ``model`` (a registry name or an import path ``module:Layer``).

    Raises ``ValueError`` when the model cannot be resolved, or when its arrays at these sizes
    cannot fit in memory (`_check_fits`; the message says why); every later problem is a
    ``fail`` row.
    """
    import jax.numpy as jnp
    import jax.random as jr

    name = models.resolve(model)
    info = models.info(name)
    out = [_registration(name, info)]
    k_layer, k_u, k_long = jr.split(jr.PRNGKey(seed), 3)
    options = _options(name, info, d_model, d_state)
    _check_fits(name, info, options, d_model, d_state, long_length)
    row, layer = _build(name, options, d_model, d_state, k_layer)
    out.append(row)
    if layer is None:
        return out
    s = _subject(layer, jr.normal(k_u, (length, d_model), jnp.float32), k_long, long_length)
    for check_name, check in _CONTRACT_CHECKS:
        out.append(_run(check_name, functools.partial(check, s)))
    for capability, check in _CAPABILITY_CHECKS:
        if info.has(capability):
            out.append(_run(capability.replace("_", " "), functools.partial(check, s)))
        else:
            out.append(Check(capability.replace("_", " "), "skip", "not declared"))
    out.append(_run("parameters", functools.partial(_parameters, s)))
    out.extend(study_checks(name, out))
    return out


# The rows every study needs (a study that reads a capability also needs that capability's row).
_CONTRACT_ROWS: tuple[str, ...] = ("build", "shape (L, H) -> (L, H)", "dtype kept", "jit", "grad",
                                   "vmap", "long sequence", "parameters")


def study_needs(study: Any) -> tuple[tuple[str, ...], str]:
    """The capabilities ``study`` reads (`models.CAPABILITIES`) and its needs in words.

    A study's `Study.skip_reason` made by `requires` names its capabilities; any other (the
    throughput and memory studies' paper size) is asked about a registration that declares
    nothing, and its answer is the need.
    """
    capabilities = tuple(getattr(study.skip_reason, "capabilities", ()))
    words = [c.replace("_", " ") for c in capabilities]
    if not capabilities:
        bare = dataclasses.replace(models.infos()[0], label="a layer", capabilities=frozenset(),
                                   paper_size=None)
        reason = study.skip_reason(bare)
        if reason:
            words.append(reason.removeprefix("a layer ").replace("registers no ", "a "))
    return capabilities, ", ".join(words) or "the contract rows only"


def study_checks(model: str, contract: list[Check] = ()) -> list[Check]:
    """One row per study: ``ok`` if the model can enter it; ``skip`` when its registration
    lacks what the study needs (the study's reason); ``fail`` when a contract row the study
    needs (``contract``: the rows above) failed. Each row says what the study needs."""
    from . import studies

    out = []
    info = models.info(model)
    failed = {c.name for c in contract if c.status == "fail"}
    for name in studies.names():
        study = studies.get(name)
        capabilities, needs = study_needs(study)
        reason = study.skip_reason(info)
        broken = [r for r in (*_CONTRACT_ROWS, *(c.replace("_", " ") for c in capabilities))
                  if r in failed]
        if reason:
            out.append(Check(f"study {name}", "skip", f"cannot enter: {reason} (needs {needs})"))
        elif broken:
            out.append(Check(f"study {name}", "fail",
                             f"cannot enter: contract row(s) {', '.join(broken)} failed "
                             f"(needs {needs})"))
        else:
            out.append(Check(f"study {name}", "ok", f"can enter (needs {needs})"))
    return out


def format_table(checks: list[Check]) -> str:
    """The checks as a plain-text table: check, status, detail."""
    width = max(len(c.name) for c in checks)
    lines = [f"{'check':<{width}}  status  detail", f"{'-' * width}  ------  ------"]
    lines += [f"{c.name:<{width}}  {c.status:<6}  {c.detail}" for c in checks]
    return "\n".join(lines)
