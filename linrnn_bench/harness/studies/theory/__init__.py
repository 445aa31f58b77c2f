"""The theory checks: the state energy of untrained layers under white noise, and equivalences.

White noise (check ``"white_noise"``). Every layer is a diagonal system (`models.DiscreteSystem`)

    h_t = lam * h_{t-1} + B u_t,      h_0 = 0 before the first input, t = 1, 2, ...

so after t inputs state p is h_{p,t} = sum_{k=1..t} lam_p^(t-k) b_p^T u_k, with b_p^T the p-th
row of B. For i.i.d. inputs with E[u_k] = 0 and E[u_k u_s^T] = delta_ks I the cross terms vanish
and E|b_p^T u_k|^2 = ||b_p||^2 = sum_j |B_pj|^2, hence, exactly, for every diagonal system,

    E|h_{p,t}|^2 = ||b_p||^2 (1 - |lam_p|^(2t)) / (1 - |lam_p|^2),
    E||h_t||^2   = sum_p E|h_{p,t}|^2                                            (closed form)

(for a bank of single-input systems, S4D, state (h, n) sees only channel h: ||b_p||^2 = |B_hn|^2).
RotRNN is the special case the paper builds in: a head's states share |lam_p| = gamma_h and, in
the rotated basis, its rows of B are xi_h P_h^T B_h, so sum_p ||b_p||^2 = xi_h^2 tr(B_h^T B_h)
= 1 - gamma_h^2 and the head's energy is E||x^h_t||^2 = 1 - gamma_h^(2t), whatever P and theta.
The LRU's infinite-sequence formula is the t -> infinity limit ||b_p||^2 / (1 - |lam_p|^2), which
its normaliser exp(gamma_log) = sqrt(1 - |lam|^2) sets to ||B_p||^2 at initialisation.

States are grouped by a shared modulus |lam_p| (RotRNN's heads, S4D's channels; single states for
the LRU and S5); the formula holds for every grouping, so each group and the total are checked.
Three numbers are compared per group and step, all through the layer contract:

- ``measured``: the Monte Carlo mean of ||h_t||^2 over ``samples`` white-noise sequences run
  through `hidden_states`, with its standard error ``measured_se``;
- ``exact``: the expectation computed through `hidden_states` on unit impulses: by time
  invariance E||h_t||^2 = sum_{s<=t} sum_j ||h_s(e_j at step 1)||^2, with no sampling error, so
  it must equal the closed form to round-off;
- ``predicted``: the closed form above, from `discrete_system()` in float64.

Equivalence (check ``"equivalence"``). A registration may declare an exact map onto another
model (`models.Equivalence`): the RotRNN paper states that an LRU whose eigenvalues come in
conjugate pairs is a multi-head RotRNN, and `models.equivalence.rotrnn_to_lru` maps a RotRNN to
an LRU. Over random parameters (a fresh initialisation plus Gaussian noise on every learned
array) the study records the largest difference between the outputs of a layer and of its
image, which must be round-off, and between their state norms.

Both checks read a layer's discrete system and hidden states: a model registered without those
capabilities (a time-varying layer) is not a variant of this study, and naming it is an error
that says so.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from linrnn_bench import models
from linrnn_bench.models import DiscreteSystem
from linrnn_bench.validation import integer, non_negative_int, positive_int

from ...state_norm import closed_form_energy, stationary_energy
from ...variants import build_options, check_variants, variant, variants
from .._schema import Column, Schema
from ..stability_probe import time_grid
from .._study import Study, read_presets, requires

Check = Literal["white_noise", "equivalence"]

# Samples per compiled batch: keeps the (batch, L, P) states of one batch near 128 MiB.
_STATE_BUDGET = 2**24


def white_noise_batch(samples: int, length: int, states: int) -> int:
    """The white-noise samples of one compiled batch (`energy_moments`): all ``samples``
    where their ``(batch, length, states)`` states fit `_STATE_BUDGET`, else as many as fit
    (at least one). `harness.plan` prices the same batches."""
    return max(1, min(samples, _STATE_BUDGET // (length * states)))

# The rows a run writes (module docstring): a white-noise run's profile and summary, an
# equivalence run's trials. E||h_t||^2 is the state energy after t inputs.
COLUMNS = Schema(
    columns={
        "kind": Column(str, "the row kind: 'profile', 'summary' (white noise), 'equivalence'"),
        "variant": Column(str, "the layer variant (`harness.variants`)"),
        "model": Column(str, "its registered model"),
        "t": Column(int, "inputs seen (1 = after the first)"),
        "group": Column(int, "the group of states sharing one modulus |lambda| (-1: all)"),
        "group_size": Column(int, "states in the group"),
        "modulus": Column(float, "the group's |lambda| (NaN for all states)"),
        "measured": Column(float, "Monte Carlo mean of E||h_t||^2 over the white-noise samples"),
        "measured_se": Column(float, "its standard error"),
        "exact": Column(float, "E||h_t||^2 through hidden_states on unit impulses (no "
                               "sampling error)"),
        "predicted": Column(float, "the closed form of E||h_t||^2, from the discrete system"),
        "state_size": Column(int, "P, the layer's states"),
        "groups": Column(int, "groups of states sharing a modulus"),
        "seq_len": Column(int, "L of the white-noise sequences"),
        "samples": Column(int, "white-noise sequences of the Monte Carlo mean"),
        "mc_worst_rel_dev": Column(float, "largest |measured - predicted| / predicted over t, "
                                          "all states"),
        "mc_worst_rel_dev_group": Column(float, "the same over t and groups"),
        "mc_worst_z": Column(float, "largest |measured - predicted| in standard errors"),
        "exact_worst_rel_dev": Column(float, "largest |exact - predicted| / predicted (round-off)"),
        "stationary_total": Column(float, "the t -> infinity energy of all states"),
        "stationary_group_min": Column(float, "the smallest group's t -> infinity energy"),
        "stationary_group_max": Column(float, "the largest group's t -> infinity energy"),
        "modulus_min": Column(float, "the smallest eigenvalue modulus |lambda|"),
        "modulus_max": Column(float, "the largest eigenvalue modulus |lambda|"),
        "trial": Column(int, "the random parameter draw"),
        "max_abs_diff": Column(float, "largest |y - y_image| over steps and channels"),
        "output_scale": Column(float, "largest |y| of the layer"),
        "max_rel_diff": Column(float, "max_abs_diff / output_scale"),
        "state_norm_max_abs_diff": Column(float, "largest difference of the state norms "
                                                 "||h_t|| of the layer and its image"),
        "state_norm_max_rel_diff": Column(float, "that over the layer's largest state norm"),
    },
    kinds={
        "profile": ("variant", "model", "kind", "t", "group", "group_size", "modulus",
                    "measured", "measured_se", "exact", "predicted"),
        "summary": ("variant", "model", "kind", "state_size", "groups", "seq_len", "samples",
                    "mc_worst_rel_dev", "mc_worst_rel_dev_group", "mc_worst_z",
                    "exact_worst_rel_dev", "stationary_total", "stationary_group_min",
                    "stationary_group_max", "modulus_min", "modulus_max"),
        "equivalence": ("variant", "model", "kind", "trial", "max_abs_diff", "output_scale",
                        "max_rel_diff", "state_norm_max_abs_diff", "state_norm_max_rel_diff",
                        "modulus_max"),
    },
)


@dataclasses.dataclass(frozen=True)
class TheoryConfig:
    """The theory checks' configuration.

    Attributes:
        variants: layer variants (keys of `harness.variants.variants()`) checked under white
            noise; ``()``: the base variant of every registered model with a discrete system
            (and its ablations, with ``ablations``).
        ablations: with ``variants=()``, also every ablation of those models.
        equivalence_variants: variants whose model declares an equivalence, each mapped onto
            its equivalent model; ``None``: those among ``variants``; ``()``: skip the check.
        d_model: H, the layer width.
        d_state: the layer's ``d_state`` (its own convention, as `models.build` takes it).
        heads: the number of heads of every layer that has a ``heads`` option (0: the
            registration's ``width_options``).
        seq_len: L, steps of each white-noise sequence.
        samples: white-noise sequences per Monte Carlo estimate.
        trials: random parameter draws of the equivalence check.
        perturb: standard deviation of the Gaussian noise added to every learned array of the
            layer before mapping it (0 keeps the initialisation).
        time_points: steps stored per profile (log-spaced in [1, L]; the worst deviations are
            computed over every step).
        seeds: one run per seed and variant (the seed draws the layer and the noise).
    """

    variants: tuple[str, ...] = ()
    ablations: bool = False
    equivalence_variants: tuple[str, ...] | None = None
    d_model: int = 8
    d_state: int = 16
    heads: int = 4
    seq_len: int = 1024
    samples: int = 1024
    trials: int = 8
    perturb: float = 0.1
    time_points: int = 32
    seeds: tuple[int, ...] = (0,)

    def __post_init__(self):
        if not isinstance(self.ablations, bool):
            raise ValueError(f"theory.ablations must be true or false, got {self.ablations!r}.")
        if self.variants:
            check_variants("theory.variants", self.variants)
            _check_capable("theory.variants", self.variants, _NEEDED)
        if self.equivalence_variants:
            check_variants("theory.equivalence_variants", self.equivalence_variants)
            _check_capable(
                "theory.equivalence_variants", self.equivalence_variants,
                (*_NEEDED, models.EQUIVALENCE),
            )
        for name in ("d_model", "d_state", "seq_len", "samples", "trials"):
            positive_int(f"theory.{name}", getattr(self, name))
        non_negative_int("theory.heads", self.heads)
        integer("theory.time_points", self.time_points, low=2)
        if not self.perturb >= 0:
            raise ValueError(f"theory.perturb must be >= 0, got {self.perturb!r}.")
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"theory.seeds must be distinct and non-empty, got {self.seeds!r}.")


# What both checks read of a layer.
_NEEDED: tuple[str, ...] = (models.DISCRETE_SYSTEM, models.HIDDEN_STATES)


def _capable(key: str, needed: tuple[str, ...]) -> bool:
    return all(models.info(variant(key).model).has(c) for c in needed)


def _check_capable(where: str, keys: tuple[str, ...], needed: tuple[str, ...]) -> None:
    lacking = [k for k in keys if not _capable(k, needed)]
    if lacking:
        raise ValueError(
            f"{where} has {lacking}, whose layers lack a capability this check needs "
            f"({', '.join(needed)}); accepted: {[k for k in variants() if _capable(k, needed)]}."
        )


def chosen_variants(config: TheoryConfig) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(white-noise variants, equivalence variants)`` with the defaults resolved."""
    white = config.variants or tuple(
        key for key, v in variants().items()
        if (config.ablations or key == v.model) and _capable(key, _NEEDED)
    )
    equivalence = config.equivalence_variants
    if equivalence is None:
        equivalence = tuple(k for k in white if _capable(k, (*_NEEDED, models.EQUIVALENCE)))
    return white, equivalence


@dataclasses.dataclass(frozen=True)
class TheoryRun:
    """One run: one check of one variant at one seed (`samples` is ``trials`` for equivalence)."""

    check: Check
    variant: str
    model: str
    options: tuple[tuple[str, Any], ...]
    d_model: int
    d_state: int
    seq_len: int
    samples: int
    time_points: int
    perturb: float
    seed: int


def grid(config: TheoryConfig) -> list[TheoryRun]:
    """White noise for every variant and seed, then the equivalence of every variant that has
    one."""
    runs = []
    white, equivalent = chosen_variants(config)
    explicit = {"heads": config.heads} if config.heads else {}
    for check, names, samples in (
        ("white_noise", white, config.samples),
        ("equivalence", equivalent, config.trials),
    ):
        for name in names:
            chosen = variant(name)
            options = build_options(chosen, config.d_model, config.d_state, explicit)
            for seed in config.seeds:
                runs.append(
                    TheoryRun(
                        check=check,
                        variant=name,
                        model=chosen.model,
                        options=tuple(sorted(options.items())),
                        d_model=config.d_model,
                        d_state=config.d_state,
                        seq_len=config.seq_len,
                        samples=samples,
                        time_points=config.time_points,
                        perturb=config.perturb if check == "equivalence" else 0.0,
                        seed=seed,
                    )
                )
    return runs


def run(spec: TheoryRun) -> list[dict[str, Any]]:
    if spec.check == "white_noise":
        return white_noise(spec)
    elif spec.check == "equivalence":
        return equivalence(spec)
    else:
        raise ValueError(f"Unknown check {spec.check!r}; accepted: 'white_noise', 'equivalence'.")


# --------------------------------------------------------------------------------------------
# White noise


def modulus_groups(modulus: np.ndarray, rtol: float = 1e-5) -> np.ndarray:
    """Group ids ``(P,)``: states whose |lam| agree to ``rtol`` share a group.

    Ids count up from the smallest modulus. Float32 round-off makes the moduli of one RotRNN head
    (or one S4D channel) differ in the last bits, hence the tolerance.
    """
    order = np.argsort(modulus, kind="stable")
    ids = np.empty(len(modulus), dtype=np.int64)
    current = 0
    for rank, p in enumerate(order):
        if rank and modulus[p] - modulus[order[rank - 1]] > rtol * modulus[p]:
            current += 1
        ids[p] = current
    return ids


@eqx.filter_jit
def discrete_system(layer: models.AbstractRecurrentLayer) -> DiscreteSystem:
    """``layer.discrete_system()`` compiled: one compilation instead of many small eager ones."""
    return layer.discrete_system()


@eqx.filter_jit
def energy_moments(layer: models.AbstractRecurrentLayer, u: jax.Array, onehot: jax.Array):
    """Sums over the batch of the group and total energies and of their squares."""
    h = jax.vmap(layer.hidden_states)(u)
    energy = h.real**2 + h.imag**2  # (n, L, P)
    per_group = energy @ onehot  # (n, L, G)
    total = jnp.sum(energy, axis=-1)  # (n, L)
    return (
        jnp.sum(per_group, axis=0),
        jnp.sum(per_group**2, axis=0),
        jnp.sum(total, axis=0),
        jnp.sum(total**2, axis=0),
    )


@eqx.filter_jit
def impulse_energy(layer: models.AbstractRecurrentLayer, length: int) -> jax.Array:
    """sum_j |h_{p,s}|^2 for a unit impulse on channel j at the first step, ``(length, P)``."""
    d_model = layer.discrete_system().d_model
    u = jnp.zeros((d_model, length, d_model)).at[:, 0, :].set(jnp.eye(d_model))
    h = jax.vmap(layer.hidden_states)(u)
    return jnp.sum(h.real**2 + h.imag**2, axis=0)


def monte_carlo_energy(
    layer: models.AbstractRecurrentLayer, groups: np.ndarray, length: int, samples: int, key
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Mean and standard error of the group energies ``(L, G)`` and the total ``(L,)``."""
    n_groups = int(groups.max()) + 1
    onehot = jnp.asarray(np.eye(n_groups, dtype=np.float32)[groups])  # (P, G)
    d_model = discrete_system(layer).d_model
    batch = white_noise_batch(samples, length, len(groups))
    sums = None
    done = 0
    while done < samples:
        n = min(batch, samples - done)
        u = jr.normal(jr.fold_in(key, done), (n, length, d_model))
        moments = [np.asarray(m, dtype=np.float64) for m in energy_moments(layer, u, onehot)]
        sums = moments if sums is None else [s + m for s, m in zip(sums, moments)]
        done += n
    g1, g2, t1, t2 = sums

    def mean_se(first, second):
        mean = first / samples
        var = np.maximum(second / samples - mean**2, 0.0) * samples / max(samples - 1, 1)
        return mean, np.sqrt(var / samples)

    group_mean, group_se = mean_se(g1, g2)
    total_mean, total_se = mean_se(t1, t2)
    return group_mean, group_se, total_mean, total_se


@dataclasses.dataclass(frozen=True)
class _Energies:
    """E||h_t||^2 of one layer under white noise, three ways: per modulus group ``(L, G)`` and
    in total ``(L,)``.

    Attributes:
        predicted, predicted_total: the closed form (`closed_form_energy`).
        exact, exact_total: the sum of the impulse responses' energies up to t
            (`impulse_energy`), exact up to floating point.
        measured, measured_total: the Monte Carlo mean over noise samples
            (`monte_carlo_energy`), with its standard errors ``measured_se``,
            ``measured_total_se``.
    """

    predicted: np.ndarray
    predicted_total: np.ndarray
    exact: np.ndarray
    exact_total: np.ndarray
    measured: np.ndarray
    measured_se: np.ndarray
    measured_total: np.ndarray
    measured_total_se: np.ndarray


def _energies(layer: models.AbstractRecurrentLayer, system: DiscreteSystem, groups: np.ndarray,
              onehot: np.ndarray, length: int, samples: int, key) -> _Energies:
    """``layer``'s white-noise energies for ``length`` steps, summed over the modulus groups
    (``onehot``: ``(P, G)``), the Monte Carlo estimate from ``samples`` sequences drawn with
    ``key``."""
    predicted_state = closed_form_energy(system, length)  # (L, P)
    exact_state = np.cumsum(np.asarray(impulse_energy(layer, length), dtype=np.float64), axis=0)
    measured, measured_se, measured_total, measured_total_se = monte_carlo_energy(
        layer, groups, length, samples, key
    )
    return _Energies(
        predicted=predicted_state @ onehot, predicted_total=predicted_state.sum(axis=1),
        exact=exact_state @ onehot, exact_total=exact_state.sum(axis=1),
        measured=measured, measured_se=measured_se, measured_total=measured_total,
        measured_total_se=measured_total_se,
    )


def _profile_rows(base: dict[str, Any], e: _Energies, times: np.ndarray, onehot: np.ndarray,
                  group_modulus: np.ndarray) -> list[dict[str, Any]]:
    """The ``profile`` rows: at each t of ``times``, the total (group -1) and each group's
    energies, measured (with its standard error), exact and predicted."""
    n_state, n_groups = onehot.shape
    rows: list[dict[str, Any]] = []
    for t in times:
        i = t - 1
        rows.append(
            {
                **base,
                "kind": "profile",
                "t": int(t),
                "group": -1,
                "group_size": n_state,
                "modulus": float("nan"),
                "measured": e.measured_total[i],
                "measured_se": e.measured_total_se[i],
                "exact": e.exact_total[i],
                "predicted": e.predicted_total[i],
            }
        )
        for g in range(n_groups):
            rows.append(
                {
                    **base,
                    "kind": "profile",
                    "t": int(t),
                    "group": g,
                    "group_size": int(onehot[:, g].sum()),
                    "modulus": group_modulus[g],
                    "measured": e.measured[i, g],
                    "measured_se": e.measured_se[i, g],
                    "exact": e.exact[i, g],
                    "predicted": e.predicted[i, g],
                }
            )
    return rows


def _worst_rel(a: np.ndarray, b: np.ndarray) -> float:
    """The largest relative deviation of ``a`` from ``b``."""
    return float(np.max(np.abs(a - b) / b))


def _worst_z(a: np.ndarray, b: np.ndarray, se: np.ndarray) -> float:
    """The largest deviation of ``a`` from ``b`` in standard errors ``se`` (a zero standard
    error counts as the smallest positive float, not a division by zero)."""
    return float(np.max(np.abs(a - b) / np.maximum(se, np.finfo(np.float64).tiny)))


def _summary_row(base: dict[str, Any], e: _Energies, spec: TheoryRun, modulus: np.ndarray,
                 n_groups: int, stationary: np.ndarray) -> dict[str, Any]:
    """The ``summary`` row: the sizes, the worst deviations of the measured and the exact
    energies from the closed form, the stationary energies and the moduli's range."""
    return {
        **base,
        "kind": "summary",
        "state_size": len(modulus),
        "groups": n_groups,
        "seq_len": spec.seq_len,
        "samples": spec.samples,
        "mc_worst_rel_dev": _worst_rel(e.measured_total, e.predicted_total),
        "mc_worst_rel_dev_group": _worst_rel(e.measured, e.predicted),
        "mc_worst_z": max(
            _worst_z(e.measured_total, e.predicted_total, e.measured_total_se),
            _worst_z(e.measured, e.predicted, e.measured_se),
        ),
        "exact_worst_rel_dev": max(
            _worst_rel(e.exact_total, e.predicted_total), _worst_rel(e.exact, e.predicted)
        ),
        "stationary_total": float(stationary.sum()),
        "stationary_group_min": float(stationary.min()),
        "stationary_group_max": float(stationary.max()),
        "modulus_min": float(modulus.min()),
        "modulus_max": float(modulus.max()),
    }


def white_noise(spec: TheoryRun) -> list[dict[str, Any]]:
    """Measured, exact and closed-form E||h_t||^2 per modulus group and in total."""
    key_layer, key_noise = jr.split(jr.PRNGKey(spec.seed))
    layer = models.build(
        spec.model, d_model=spec.d_model, d_state=spec.d_state, key=key_layer, **dict(spec.options)
    )
    system = discrete_system(layer)
    modulus = np.abs(np.asarray(system.lam, dtype=np.complex128).reshape(-1))
    groups = modulus_groups(modulus)
    n_groups = int(groups.max()) + 1
    onehot = np.eye(n_groups)[groups]  # (P, G)
    energies = _energies(layer, system, groups, onehot, spec.seq_len, spec.samples, key_noise)
    stationary = stationary_energy(system) @ onehot
    group_modulus = (modulus @ onehot) / onehot.sum(axis=0)
    base = {"variant": spec.variant, "model": spec.model}
    return [
        *_profile_rows(base, energies, time_grid(spec.seq_len, spec.time_points), onehot,
                       group_modulus),
        _summary_row(base, energies, spec, modulus, n_groups, stationary),
    ]


# --------------------------------------------------------------------------------------------
# Equivalence


def perturb_parameters(module: eqx.Module, scale: float, key) -> eqx.Module:
    """``module`` with N(0, scale^2) noise added to every floating-point array leaf."""
    params, static = eqx.partition(module, eqx.is_inexact_array)
    leaves, treedef = jax.tree_util.tree_flatten(params)
    keys = jr.split(key, max(len(leaves), 1))
    noisy = [leaf + scale * jr.normal(k, leaf.shape, leaf.dtype) for leaf, k in zip(leaves, keys)]
    return eqx.combine(jax.tree_util.tree_unflatten(treedef, noisy), static)


@eqx.filter_jit
def outputs_and_norms(layer: models.AbstractRecurrentLayer, u: jax.Array):
    """The layer's outputs ``(L, H)`` and its state norm per step ``(L,)`` for one input."""
    h = layer.hidden_states(u)
    return layer(u), jnp.sqrt(jnp.sum(h.real**2 + h.imag**2, axis=-1))


def equivalence(spec: TheoryRun) -> list[dict[str, Any]]:
    """Output and state-norm differences between random layers and their equivalent images
    (e.g. RotRNNs and the LRUs `models.equivalence.rotrnn_to_lru` maps them to)."""
    equivalence = models.info(spec.model).equivalence
    if equivalence is None:
        raise ValueError(f"Model {spec.model!r} declares no equivalence to check.")
    to_image = equivalence.function()

    key = jr.PRNGKey(spec.seed)
    rows = []
    for trial in range(spec.samples):
        key_init, key_noise, key_input = jr.split(jr.fold_in(key, trial), 3)
        layer = models.build(
            spec.model, d_model=spec.d_model, d_state=spec.d_state, key=key_init,
            **dict(spec.options),
        )
        if spec.perturb > 0:
            layer = perturb_parameters(layer, spec.perturb, key_noise)
        image = to_image(layer)
        u = jr.normal(key_input, (spec.seq_len, spec.d_model))
        y_own, norm_own = (np.asarray(a, dtype=np.float64) for a in outputs_and_norms(layer, u))
        y_image, norm_image = (
            np.asarray(a, dtype=np.float64) for a in outputs_and_norms(image, u)
        )
        output_scale = float(np.max(np.abs(y_own)))
        norm_scale = float(np.max(norm_own))
        max_abs = float(np.max(np.abs(y_own - y_image)))
        norm_abs = float(np.max(np.abs(norm_own - norm_image)))
        rows.append(
            {
                "variant": spec.variant,
                "model": spec.model,
                "kind": "equivalence",
                "trial": trial,
                "max_abs_diff": max_abs,
                "output_scale": output_scale,
                "max_rel_diff": max_abs / output_scale,
                "state_norm_max_abs_diff": norm_abs,
                "state_norm_max_rel_diff": norm_abs / norm_scale,
                "modulus_max": float(np.max(np.abs(np.asarray(discrete_system(layer).lam)))),
            }
        )
    return rows


PRESETS = read_presets(__name__, TheoryConfig)

STUDY = Study(
    name="theory",
    description="Closed-form white-noise state energy vs measured, and exact equivalences.",
    presets=PRESETS,
    grid=grid,
    run=run,
    planner=f"{__name__}.plan:plan",
    section=f"{__name__}.report:SECTION",
    skip_reason=requires(*_NEEDED),
)
