"""The state norm's closed forms and the components of its variation (stability and theory).

Closed form. A diagonal system h_t = lam * h_{t-1} + B u_t driven by unit white noise
(E u_t u_s^T = I when t = s, 0 otherwise) has, per state p,

    E|h_{p,t}|^2 = ||b_p||^2 (1 - |lam_p|^(2t)) / (1 - |lam_p|^2),

with b_p the p-th row of B (for a bank, the one entry of its channel). It reaches its
stationary level ||b_p||^2 / (1 - |lam_p|^2) only once t >> 1 / (1 - |lam_p|): before that the
norm grows like sqrt(t), whatever the normalisation. RotRNN's xi makes each head's energy
1 - gamma_h^(2t), i.e. a stationary level independent of the decays; the LRU's normaliser does
so only at initialisation. So a claim about the stationary norm is measured where
`energy_reached` is close to 1, and `regime_met` says whether a probe length gets there.

Components. For one variant (a layer and its options) on one task at one depth, the log state
norm ``y[seed, step, layer]`` at the probe's last steps varies in four ways the RotRNN paper
separates, each returned per seed so that variants can be compared paired by seed:

- depth: the standard deviation of y across layers, at each training step, averaged over steps;
- seed: how far a seed's y lies from the mean over seeds (root mean square over steps and
  layers); the spread across seeds is their quadratic mean, up to the n / (n - 1) factor;
- drift: the standard deviation of y over training steps, within one layer of one run,
  averaged over layers;
- settle: the first evaluation step after which a layer's norm stays within a band of its
  final value, the latest over layers.

Logs make the components scale-free: a spread of 0.1 is about 10 % whatever the norm's level.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from linrnn_bench.models import DiscreteSystem

# A probe is in the stationary regime when the white-noise state energy at its measured steps
# is at least this fraction of the stationary level.
STATIONARY_FRACTION = 0.9


def row_energy(system: DiscreteSystem) -> np.ndarray:
    """||b_p||^2 per state ``(P,)``: the energy after one unit white-noise input, float64."""
    B = np.asarray(system.B, dtype=np.complex128)
    if system.structure == "bank":
        # (H, N), channel-major like the engine's flattened state: state (h, n) sees u[:, h].
        return np.abs(B.reshape(-1)) ** 2
    elif system.structure == "mimo":
        return np.sum(np.abs(B) ** 2, axis=1)
    else:
        raise ValueError(f"Unknown system structure {system.structure!r}; accepted: mimo, bank.")


def closed_form_energy(system: DiscreteSystem, length: int,
                       injected: np.ndarray | None = None) -> np.ndarray:
    """E|h_{p,t}|^2 under unit white noise, ``(length, P)`` for t = 1..length, in float64.

    ``injected`` ``(P,)`` replaces ``||b_p||^2`` by the energy E|(B u_t)_p|^2 an actual input
    puts into each state per step: the closed form for a temporally white input of that
    per-state energy (`expected_energy`). Written with ``expm1`` so that moduli near 1 keep
    their digits.
    """
    weights = row_energy(system) if injected is None else np.asarray(injected, np.float64)
    return expected_energy(system.lam, weights, np.arange(1, length + 1))


def expected_energy(lam: np.ndarray, weights: np.ndarray, t: np.ndarray) -> np.ndarray:
    """``weights_p (1 - |lam_p|^(2t)) / (1 - |lam_p|^2)`` per step and state, ``(T, P)`` for the
    steps ``t`` ``(T,)``: the white-noise energy of states with eigenvalues ``lam`` (any shape,
    flattened to P) fed ``weights`` ``(P,)`` per step; ``weights_p t`` on the unit circle."""
    lam = np.asarray(lam, dtype=np.complex128).reshape(-1)
    weights = np.asarray(weights, dtype=np.float64).reshape(-1)
    log_modulus = np.log(np.abs(lam))
    t = np.asarray(t, dtype=np.float64).reshape(-1)[:, None]
    on_circle = log_modulus == 0.0
    safe = np.where(on_circle, -1.0, log_modulus)
    gain = np.where(on_circle, t, np.expm1(2.0 * t * safe) / np.expm1(2.0 * safe))
    return weights * gain


def stationary_energy(system: DiscreteSystem) -> np.ndarray:
    """The t -> infinity limit ``||b_p||^2 / (1 - |lam_p|^2)`` per state, ``(P,)``."""
    lam = np.asarray(system.lam, dtype=np.complex128).reshape(-1)
    return row_energy(system) / (1.0 - np.abs(lam) ** 2)


def has_stationary_level(system: DiscreteSystem) -> bool:
    """Whether every eigenvalue lies strictly inside the unit circle: only then does the state
    energy converge (a trained layer may leave the disc)."""
    return bool(np.all(np.abs(np.asarray(system.lam, dtype=np.complex128)) < 1.0))


def energy_reached(system: DiscreteSystem, t: int) -> float:
    """E||h_t||^2 as a fraction of its stationary level, under unit white noise; NaN for a
    system without one (`has_stationary_level`)."""
    if t < 1:
        raise ValueError(f"t must be a positive step, got {t!r}.")
    if not has_stationary_level(system):
        return math.nan
    at_t = expected_energy(system.lam, row_energy(system), np.array([t]))[0]
    return float(np.sum(at_t) / np.sum(stationary_energy(system)))


def regime_met(systems: list[DiscreteSystem], t: int,
               fraction: float = STATIONARY_FRACTION) -> bool:
    """Whether every layer's white-noise energy at step ``t`` has reached ``fraction`` of its
    stationary level (the norm measured at ``t`` is then the stationary one)."""
    return all(energy_reached(s, t) >= fraction for s in systems)


def steps_to_stationary(system: DiscreteSystem,
                        fraction: float = STATIONARY_FRACTION) -> int | None:
    """The first step t at which `energy_reached` is at least ``fraction`` (bisection on the
    closed form, which increases with t); None for a system without a stationary level, whose
    energy never settles."""
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"fraction must lie in (0, 1), got {fraction!r}.")
    if not has_stationary_level(system):
        return None
    low, high = 1, 1
    while energy_reached(system, high) < fraction:
        low, high = high, high * 2
    while low < high:
        middle = (low + high) // 2
        if energy_reached(system, middle) >= fraction:
            high = middle
        else:
            low = middle + 1
    return high


# The per-mode regime check (`mode_regime`): the modes holding all but CARRYING_SHARE of a
# layer's stationary energy must have run MEMORIES of their memories 1 / (1 - |lam|) before the
# window opens (then each has 1 - |lam|^(2t) >= 1 - exp(-2 * MEMORIES) = 99.75 % of its level);
# a slow tail of modes with at most CARRYING_SHARE of the energy may still be settling. (A
# share per mode would not do: S4D's 1024 states at width 32 each hold about 0.1 %.)
CARRYING_SHARE = 0.01
MEMORIES = 3


@dataclasses.dataclass(frozen=True)
class ModeRegime:
    """The per-mode regime check of one layer at a window opening at step ``t_from``.

    ``settled``: the modes holding all but ``CARRYING_SHARE`` of the stationary energy have run
    ``MEMORIES`` memories by ``t_from`` (False when a fed mode has left the unit disc: no
    stationary level). ``unsettled_share``: the share of the stationary energy held by the
    modes that have not (1.0 without a stationary level). ``slowest``: the largest memory
    1 / (1 - |lam|) among those modes (the slowest "carrying" mode; inf without a stationary
    level). ``needed_from``: the first window step at which the check holds (None: never).
    """

    settled: bool
    unsettled_share: float
    slowest: float
    needed_from: int | None


def mode_regime(lam: np.ndarray, weights: np.ndarray, t_from: int,
                share: float = CARRYING_SHARE, memories: float = MEMORIES) -> ModeRegime:
    """The per-mode regime check (`ModeRegime`) of states with eigenvalues ``lam`` fed
    ``weights`` ``(P,)`` of energy per step (each mode's stationary energy is
    ``weights_p / (1 - |lam_p|^2)``, as `expected_energy`'s limit)."""
    modulus = np.abs(np.asarray(lam, dtype=np.complex128).reshape(-1))
    weights = np.asarray(weights, dtype=np.float64).reshape(-1)
    fed = weights > 0
    if np.any(fed & (modulus >= 1.0)):
        return ModeRegime(False, 1.0, math.inf, None)
    modulus = np.where(fed, modulus, 0.0)
    level = weights / (1.0 - modulus**2)
    total = float(np.sum(level))
    if total <= 0.0:  # no input reaches the states: nothing to settle
        return ModeRegime(True, 0.0, 0.0, 1)
    shares = level / total
    memory = 1.0 / (1.0 - modulus)
    slow_first = np.argsort(-memory, kind="stable")
    tail = int(np.sum(np.cumsum(shares[slow_first]) <= share))  # modes that may still settle
    slowest = float(memory[slow_first[min(tail, len(memory) - 1)]])
    needed_from = int(math.ceil(memories * slowest - 1e-9))  # not rounded up by float error
    return ModeRegime(settled=needed_from <= t_from,
                      unsettled_share=float(np.sum(shares[memories * memory > t_from + 1e-9])),
                      slowest=slowest, needed_from=needed_from)


def _log_norms(norms: np.ndarray) -> np.ndarray:
    norms = np.asarray(norms, dtype=np.float64)
    if norms.ndim != 3:
        raise ValueError(f"norms must be (seeds, steps, layers), got shape {norms.shape}.")
    if not np.all(np.isfinite(norms)) or np.any(norms <= 0):
        raise ValueError("norms must be finite and positive (a diverged run has no components).")
    return np.log(norms)


def depth_component(norms: np.ndarray) -> np.ndarray:
    """Per seed ``(seeds,)``: the s.d. of log norm across layers, averaged over steps; zero
    for a network of one layer. ``norms`` is ``(seeds, steps, layers)``."""
    y = _log_norms(norms)
    if y.shape[2] < 2:
        return np.zeros(y.shape[0])
    return np.mean(np.std(y, axis=2, ddof=1), axis=1)


def seed_component(norms: np.ndarray) -> np.ndarray:
    """Per seed ``(seeds,)``: the root mean square over steps and layers of the seed's log norm
    minus the mean over seeds. Needs at least two seeds."""
    y = _log_norms(norms)
    if y.shape[0] < 2:
        raise ValueError("the seed component needs at least two seeds.")
    deviation = y - np.mean(y, axis=0, keepdims=True)
    return np.sqrt(np.mean(deviation**2, axis=(1, 2)))


def drift_component(norms: np.ndarray) -> np.ndarray:
    """Per seed ``(seeds,)``: the s.d. of log norm over training steps, per layer, averaged
    over layers. Needs at least two steps."""
    y = _log_norms(norms)
    if y.shape[1] < 2:
        raise ValueError("the drift component needs at least two training steps.")
    return np.mean(np.std(y, axis=1, ddof=1), axis=1)


def settle_step(norms: np.ndarray, steps: np.ndarray, band: float = 0.1) -> np.ndarray:
    """Per seed ``(seeds,)``: the first step of ``steps`` after which every layer's norm stays
    within a factor ``1 +- band`` (in log: |log(n / n_final)| <= log(1 + band)) of its final
    value; the latest over layers."""
    y = _log_norms(norms)
    steps = np.asarray(steps)
    if steps.shape != (y.shape[1],) or np.any(np.diff(steps) <= 0):
        raise ValueError(f"steps must be increasing, one per norm step ({y.shape[1]}).")
    if not band > 0:
        raise ValueError(f"band must be positive, got {band!r}.")
    outside = np.abs(y - y[:, -1:, :]) > np.log1p(band)  # (seeds, steps, layers)
    # Index of the last step outside the band, per seed and layer; -1 when none is.
    last_out = np.where(outside.any(axis=1),
                        outside.shape[1] - 1 - np.argmax(outside[:, ::-1, :], axis=1), -1)
    first_in = np.max(last_out, axis=1) + 1  # the latest layer decides; the final step is in
    return steps[first_in]
