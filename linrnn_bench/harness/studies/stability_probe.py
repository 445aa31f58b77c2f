"""The stability study's measurement: each layer's hidden-state norms on the probe batch
(`Probe`: ``kind="layer"``, ``"profile"`` and ``"probe"`` rows) and on the long probe
(`LongProbe`: ``kind="stationary"`` rows), as `harness.studies.stability`'s docstring defines
them. Read through the layer contract only (each layer's ``hidden_states`` and, where it
declares one, its ``discrete_system``).
"""

from __future__ import annotations

from typing import Any, Literal

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

from linrnn_bench import tasks

from .. import state_norm
from .. import train as training

Statistics = Literal["batch", "running"]
STATISTICS: tuple[str, ...] = ("batch", "running")


def time_grid(length: int, points: int) -> np.ndarray:
    """About ``points`` distinct steps, log-spaced in [1, length], both ends included."""
    return np.unique(np.round(np.geomspace(1, length, points)).astype(np.int64))


def _norm(h: jax.Array) -> jax.Array:
    """||h_t|| per step of complex states ``(L, P)``."""
    return jnp.sqrt(jnp.sum(h.real**2 + h.imag**2, axis=-1))


def _encode(network, x: jax.Array) -> jax.Array:
    # The network's encoder on one sequence (as `Network.__call__` applies it).
    if network.input_kind == "tokens":
        return jax.vmap(network.encoder)(x)
    elif network.input_kind == "real":
        return jax.vmap(network.encoder)(x.astype(jnp.float32))
    else:
        raise ValueError(f"input_kind={network.input_kind!r}; accepted: tokens, real.")


def _per_layer(network, state, x: jax.Array, length: jax.Array, measure) -> list[Any]:
    """``measure(k, layer, u)`` for each block's layer on the input ``u`` it sees inside the
    network on one example (its pre-norm BatchNorm in training mode: the batch's statistics
    under ``vmap(axis_name="batch")``), blocks in order."""
    e = _encode(network, x)
    mask = (jnp.arange(e.shape[0]) < length).astype(e.dtype)
    out = []
    current = state  # equinox refuses a state once used: thread it through
    for k, block in enumerate(network.blocks):
        u, current = block.layer_input(e, mask, current)
        out.append(measure(k, block.layer, u))
        e, current = block(e, mask, current)
    return out


def state_norms(
    network, state, inputs: jax.Array, lengths: jax.Array, statistics: Statistics = "batch"
) -> jax.Array:
    """||h^k_t|| for every probe example, layer and step, ``(n, depth, L)``.

    ``inputs``/``lengths`` are one sequence per example (a pair task passes its first sequence).
    ``statistics`` is how BatchNorm normalises each layer's input: ``"running"`` uses its running
    statistics (inference mode, `Network.layer_states`); ``"batch"`` uses the probe batch's own
    statistics, as a training step does, with no dropout. The two differ most at initialisation,
    where the running statistics are still (0, 1), so pre-norm is the identity and the residual
    stream reaches deeper layers unnormalised.
    """
    if statistics == "running":

        def one(x, length):
            return jnp.stack([_norm(h) for h in network.layer_states(x, length, state)])

        return jax.vmap(one)(inputs, lengths)
    elif statistics == "batch":

        def tower(x, length):
            return jnp.stack(_per_layer(network, state, x, length,
                                        lambda k, layer, u: _norm(layer.hidden_states(u))))

        return jax.vmap(tower, axis_name="batch")(inputs, lengths)
    else:
        raise ValueError(f"statistics={statistics!r}; accepted: {list(STATISTICS)}.")


@eqx.filter_jit
def _norms_and_moduli(network, state, sequences, sequence_lengths, statistics,
                      eigenvalues: bool = True):
    """State norms ``(n, depth, L)`` and min / median / max |lambda| per layer ``(depth, 3)``
    (None when ``eigenvalues`` is False: the layers declare no discrete system)."""
    norms = state_norms(network, state, sequences, sequence_lengths, statistics)
    if not eigenvalues:
        return norms, None
    moduli = []
    for block in network.blocks:
        modulus = jnp.abs(block.layer.discrete_system().lam.reshape(-1))
        moduli.append(jnp.stack([jnp.min(modulus), jnp.median(modulus), jnp.max(modulus)]))
    return norms, jnp.stack(moduli)


def _injected(system, u: jax.Array) -> jax.Array:
    """sum_t |(B u_t)_p|^2 per state ``(P,)`` of the layer's input ``u`` ``(L, H)``: the energy
    the input puts into each state (flattened as `harness.state_norm.row_energy` orders it)."""
    if system.structure == "bank":  # state (h, n) sees u[:, h]
        drive = u[:, :, None] * system.B[None, :, :]
        drive = drive.reshape(u.shape[0], -1)
    elif system.structure == "mimo":
        drive = u.astype(system.B.dtype) @ system.B.T
    else:
        raise ValueError(f"Unknown system structure {system.structure!r}; accepted: mimo, bank.")
    return jnp.sum(drive.real**2 + drive.imag**2, axis=0)


@eqx.filter_jit
def _long_measure(network, state, inputs, lengths, statistics, systems: bool):
    """On the long probe: ||h^k_t|| ``(n, depth, L)``, the energy sum_t ||u_t||^2 of each
    layer's input ``(n, depth)`` and, with ``systems``, the energy each layer's input puts into
    each state ``(n, depth, P)`` (both summed over valid steps) and each layer's discrete
    system (else None, None). BatchNorm as `state_norms` (``statistics``)."""
    if statistics not in STATISTICS:
        raise ValueError(f"statistics={statistics!r}; accepted: {list(STATISTICS)}.")
    model = eqx.nn.inference_mode(network) if statistics == "running" else network
    discrete = [b.layer.discrete_system() for b in model.blocks] if systems else None

    def tower(x, length):
        valid = (jnp.arange(x.shape[0]) < length)[:, None]

        def measure(k, layer, u):
            fed = jnp.where(valid, u, 0.0)  # the input's energy over valid steps only
            return (_norm(layer.hidden_states(u)), jnp.sum(fed.astype(jnp.float32) ** 2),
                    _injected(discrete[k], fed) if systems else None)

        norms, inputs_energy, energy = zip(*_per_layer(model, state, x, length, measure))
        return (jnp.stack(norms), jnp.stack(inputs_energy),
                jnp.stack(energy) if systems else None)

    norms, inputs_energy, energy = jax.vmap(tower, axis_name="batch")(inputs, lengths)
    return norms, inputs_energy, energy, discrete


# The stream probe's lengths: ``probe_length`` times powers of sqrt(2), up to this many
# doublings, the shortest whose window opens late enough for the per-mode regime check
# (`state_norm.mode_regime`). Half doublings: a probe's cost grows with its length, and a
# finer ladder (more compiled lengths) would cost more compiling than it saves.
STREAM_DOUBLINGS = 3
LONG_PROBES: tuple[str, ...] = ("stream", "generator")


def stream_ladder(length: int) -> tuple[int, ...]:
    """The stream probe's candidate lengths for ``probe_length`` ``length``, shortest first."""
    return tuple(int(round(length * 2 ** (k / 2))) for k in range(2 * STREAM_DOUBLINGS + 1))


def stream(split, length: int, size: int, *, pair: bool, seed: int = 0) -> np.ndarray:
    """``size`` sequences of ``length`` steps, each the valid steps of the split's examples
    laid back to back in a random order (``seed``; every example once before any repeats):
    long sequences from the training distribution itself. A pair task streams its first
    sequences."""
    inputs = split.inputs[:, 0] if pair else split.inputs
    lengths = np.asarray(split.lengths[:, 0] if pair else split.lengths)
    if len(lengths) == 0 or int(np.max(lengths)) < 1:
        raise ValueError("The stream probe needs at least one example with a valid step.")
    rng = np.random.default_rng(seed)
    order: list[int] = []
    out = np.zeros((size, length, *inputs.shape[2:]), dtype=inputs.dtype)
    for row in range(size):
        filled = 0
        while filled < length:
            if not order:
                order = list(rng.permutation(len(lengths)))
            i = order.pop()
            take = min(int(lengths[i]), length - filled)
            out[row, filled:filled + take] = inputs[i, :take]
            filled += take
    return out


class LongProbe:
    """The stationary probe: sequences long against the layers' memory, measured at their last
    steps (``kind="stationary"`` rows, `stationary_rows`). Forward only.

    ``source="stream"`` (the presets'): ``size`` sequences of the training split's examples laid
    back to back (`stream`), every step from the distribution the network is trained on; their
    length is one of `stream_ladder` (``length`` to ``2**STREAM_DOUBLINGS`` times it): at each
    measurement the length of the previous one, or the shortest longer one whose window opens
    after the per-mode regime check's steps for the network as it is then
    (`state_norm.mode_regime`), so that within a run it only grows (a layer without a
    discrete system: ``length``). One instance per run (a seed group shares one).
    ``source="generator"``: the task's generator draws ``size`` sequences of ``length`` to
    ``2 * length`` steps by its own rules (`tasks.lengthened`; ListOps by LRA's rules: longer
    and deeper trees than any trained on, an out-of-distribution measure). A task that cannot
    make longer sequences gives ``fallback`` (the probe batch's sequences and lengths) instead,
    and its rows say ``lengthened=False``.
    """

    def __init__(self, task: str, options, length: int, size: int, window: float, *,
                 fallback: tuple[np.ndarray, np.ndarray], statistics: Statistics = "batch",
                 systems: bool = True, source: str = "stream"):
        if source not in LONG_PROBES:
            raise ValueError(f"long probe source={source!r}; accepted: {list(LONG_PROBES)}.")
        self.source = source
        self.ladder, self.rung = (length,), 0
        if source == "stream":
            built = tasks.build(task, **dict(options))
            self.ladder = stream_ladder(length)
            self.sequences = stream(built.split("train"), self.ladder[-1], size,
                                    pair=built.info.pair)
            self.lengths = np.full(size, self.ladder[-1])
            self.lengthened = True
        else:
            self._generated(task, options, length, size, fallback)
        self.window = window
        self.statistics = statistics
        self.systems = systems

    def _generated(self, task: str, options, length: int, size: int,
                   fallback: tuple[np.ndarray, np.ndarray]) -> None:
        longer = tasks.lengthened(task, dict(options), length, size)
        self.lengthened = longer is not None
        if longer is None:
            self.sequences, self.lengths = fallback
            return
        built = tasks.build(task, **longer)
        split = built.split("val")
        if len(split) < size:
            raise ValueError(
                f"The long probe needs {size} sequences; task {task!r} made {len(split)}. "
                "Lower stability.long_probe_size.")
        pair = built.info.pair
        inputs, lengths = split.inputs[:size], np.asarray(split.lengths[:size])
        self.sequences = inputs[:, 0] if pair else inputs
        self.lengths = lengths[:, 0] if pair else lengths

    def _measure(self, step: int, network, state, length: int | None) -> list[dict[str, Any]]:
        sequences, lengths = self.sequences, self.lengths
        if length is not None:
            sequences, lengths = sequences[:, :length], np.full(len(lengths), length)
        norms, inputs_energy, energy, systems = _long_measure(
            network, state, jnp.asarray(sequences), jnp.asarray(lengths), self.statistics,
            self.systems)
        return stationary_rows(
            step, np.asarray(norms, dtype=np.float64), lengths, self.window,
            None if energy is None else np.asarray(energy, dtype=np.float64),
            systems, lengthened=self.lengthened, source=self.source,
            inputs_energy=np.asarray(inputs_energy, dtype=np.float64))

    def __call__(self, step: int, network, state) -> list[dict[str, Any]]:
        if self.source != "stream":
            return self._measure(step, network, state, None)
        # Measured first at the length the previous measurement chose (the ladder's shortest
        # at the first): a run's probe length only grows, so the windows of its evaluations
        # stay comparable, and a network whose memories barely move is measured once.
        rows = self._measure(step, network, state, self.ladder[self.rung])
        needed = [r.get("needed_from") for r in rows]
        if not self.systems or all(r.get("settled", True) for r in rows):
            return rows
        if any(n is None for n in needed):
            # A layer without a stationary level (an eigenvalue left the unit disc): no length
            # settles it, and a longer one only lets its norm grow further (to overflow).
            return rows
        # The shortest longer length whose window opens at every layer's needed step (the
        # longest when none does: the rows then say which modes had not settled).
        fits = [k for k in range(self.rung + 1, len(self.ladder))
                if all(_window_start(self.ladder[k], self.window) >= n for n in needed)]
        self.rung = fits[0] if fits else len(self.ladder) - 1
        return self._measure(step, network, state, self.ladder[self.rung])


def _window_start(length: int, window: float) -> int:
    """The 1-based first step of the window of a sequence of ``length`` steps (`window_mask`)."""
    return length - max(1, round(window * length)) + 1


def long_probe_bytes(size: int, longest: int, d_model: int, d_state: int) -> int:
    """A lower bound on the bytes the long probe holds at once: its ``size`` sequences of (or
    padded to) ``longest`` steps, through one layer: the layer's float32 input
    ``(L, d_model)`` and at least ``d_state`` float32 states per step (each layer's own
    convention gives as many or more)."""
    return size * longest * (d_model + d_state) * 4


def window_mask(lengths: np.ndarray, L: int, window: float) -> np.ndarray:
    """``(n, L)``: True at each example's last ``max(1, round(window * length))`` valid steps."""
    lengths = np.asarray(lengths)
    width = np.maximum(1, np.round(window * lengths)).astype(np.int64)
    t = np.arange(L)[None, :]
    return (t < lengths[:, None]) & (t >= (lengths - width)[:, None])


def stationary_rows(step: int, norms: np.ndarray, lengths: np.ndarray, window: float,
                    energy: np.ndarray | None, systems, *, lengthened: bool,
                    source: str | None = None, inputs_energy: np.ndarray | None = None
                    ) -> list[dict[str, Any]]:
    """``kind="stationary"`` rows from the long probe's norms ``(n, depth, L)``: per layer the
    mean over examples of the mean ||h_t|| over each example's window (`window_mask`) and its
    RMS; with ``inputs_energy`` ``(n, depth)`` (sum_t ||u_t||^2 of each layer's input), the
    input's RMS per step. With the layers' ``systems`` and the injected ``energy``
    ``(n, depth, P)`` (summed over each example's steps): the drive's RMS per step
    (||B u_t||), the gain (the window's RMS norm over the drive's), so that
    ``norm_rms = input_rms * (drive_rms / input_rms) * gain`` exactly; the ratio of the RMS norm
    to the closed form's for a white input of the same per-state energy
    (`harness.state_norm.expected_energy`), the unit white-noise energy reached at the window's
    first step, the layer's memory, and the per-mode regime check (`state_norm.mode_regime`)."""
    n, depth, L = norms.shape
    lengths = np.asarray(lengths)
    inside = window_mask(lengths, L, window)  # (n, L)
    t_from = int(np.min(np.argmax(inside, axis=1))) + 1  # 1-based first step of any window
    rows: list[dict[str, Any]] = []
    for k in range(depth):
        # Steps outside the window are left out, not multiplied by 0 (an overflowed norm there
        # would make the window's mean NaN).
        windowed = np.where(inside, norms[:, k, :], 0.0)
        per_example = np.sum(windowed, axis=1) / np.sum(inside, axis=1)
        measured = np.sum(windowed**2) / np.sum(inside)
        row: dict[str, Any] = {
            "kind": "stationary", "step": step, "layer": k + 1,
            "norm_stationary": float(np.mean(per_example)),
            "t_from": t_from, "t_to": int(np.max(lengths)), "examples": int(n),
            "lengthened": bool(lengthened), "norm_rms": float(np.sqrt(measured)),
        }
        if source is not None:
            row["source"] = source
        if inputs_energy is not None:
            row["input_rms"] = float(np.sqrt(np.sum(inputs_energy[:, k]) / np.sum(lengths)))
        if systems is not None and energy is not None:
            system = jax.tree.map(np.asarray, systems[k])
            injected = np.sum(energy[:, k, :], axis=0) / np.sum(lengths)  # per state and step
            predicted = np.sum(state_norm.expected_energy(
                system.lam, injected, np.arange(1, L + 1)), axis=1)  # (L,)
            expected = np.sum(np.where(inside, predicted[None, :], 0.0)) / np.sum(inside)
            drive = float(np.sqrt(np.sum(injected)))
            regime = state_norm.mode_regime(system.lam, injected, t_from)
            row.update(
                norm_ratio=float(np.sqrt(measured / expected)),
                energy_reached=state_norm.energy_reached(system, t_from),
                memory=state_norm.steps_to_stationary(system),
                drive_rms=drive, gain=float(np.sqrt(measured)) / drive if drive > 0 else None,
                settled=regime.settled, unsettled_share=regime.unsettled_share,
                memory_slowest=regime.slowest if np.isfinite(regime.slowest) else None,
                needed_from=regime.needed_from)
        rows.append(row)
    return rows


@eqx.filter_jit
def _gradient_norms(network, state, batch):
    """The probe batch's mean loss and the norm of its gradient per layer's parameters.

    Training-mode BatchNorm (batch statistics, as in a training step), no dropout.
    """

    def loss_fn(net):
        loss, _, count, _ = training.batch_sums(net, state, batch, jnp.ones(batch.inputs.shape[0]))
        return loss / jnp.maximum(count, 1.0)

    loss, grads = eqx.filter_value_and_grad(loss_fn)(network)
    per_layer = [optax.tree.norm(eqx.filter(b.layer, eqx.is_inexact_array)) for b in grads.blocks]
    return loss, jnp.stack(per_layer)


class Probe:
    """The measurement at one training step: ``probe(step, network, state) -> rows``.

    Used as `harness.train.train`'s ``on_eval`` callback and directly at initialisation.
    ``gradients=False`` leaves out the probe loss and the gradient norms (their compilation
    costs more than the rest of the measurement; the depth sweep at initialisation skips them);
    ``eigenvalues=False`` the eigenvalue moduli (layers without a discrete system).
    """

    def __init__(
        self,
        task,
        size: int,
        profile_points: int,
        *,
        statistics: Statistics = "batch",
        gradients: bool = True,
        eigenvalues: bool = True,
        long: dict[str, Any] | None = None,
    ):
        split = task.split("val")
        if len(split) < size:
            raise ValueError(
                f"The probe batch needs {size} validation examples; task {task.info.name!r} has "
                f"{len(split)}. Lower stability.probe_size or enlarge the task."
            )
        index = np.arange(size)
        self.batch = training.to_batch(split, index)
        self.sequences = self.batch.inputs[:, 0] if task.info.pair else self.batch.inputs
        lengths = np.asarray(split.lengths[index])
        self.lengths = lengths[:, 0] if task.info.pair else lengths
        self.times = time_grid(task.info.seq_len, profile_points)
        self.statistics = statistics
        self.gradients = gradients
        self.eigenvalues = eigenvalues
        # The stationary probe (`LongProbe`'s arguments but the fallback, which is this batch).
        self.long = None if long is None else LongProbe(
            **long, fallback=(self.sequences, self.lengths), statistics=statistics,
            systems=eigenvalues)

    def __call__(self, step: int, network, state) -> list[dict[str, Any]]:
        norms, moduli = _norms_and_moduli(
            network, state, self.sequences, jnp.asarray(self.lengths), self.statistics,
            self.eigenvalues,
        )
        loss, grad_norms = None, None
        if self.gradients:
            loss, grad_norms = _gradient_norms(network, state, self.batch)
            loss, grad_norms = float(loss), np.asarray(grad_norms, dtype=np.float64)
        rows = summarise(
            step,
            np.asarray(norms, dtype=np.float64),
            self.lengths,
            None if moduli is None else np.asarray(moduli, dtype=np.float64),
            self.times,
            grad_norms=grad_norms,
            loss=loss,
        )
        return rows + ([] if self.long is None else self.long(step, network, state))


def summarise(
    step: int,
    norms: np.ndarray,
    lengths: np.ndarray,
    moduli: np.ndarray | None,
    times: np.ndarray,
    *,
    grad_norms: np.ndarray | None = None,
    loss: float | None = None,
) -> list[dict[str, Any]]:
    """Rows from the norms ``(n, depth, L)`` of the valid steps (`harness.studies.stability`);
    ``moduli`` ``(depth, 3)`` fills the eigenvalue columns, None leaves them out."""
    n, depth, L = norms.shape
    valid = np.arange(L)[None, :] < lengths[:, None]  # (n, L)
    last = norms[np.arange(n), :, lengths - 1]  # (n, depth)
    rows: list[dict[str, Any]] = []
    if loss is not None:
        rows.append({"kind": "probe", "step": step, "probe_loss": loss})
    for k in range(depth):
        values = norms[:, k, :][valid]
        row = {
            "kind": "layer",
            "step": step,
            "layer": k + 1,
            "norm_mean": float(np.mean(values)),
            "norm_std": float(np.std(values)),
            "norm_min": float(np.min(values)),
            "norm_max": float(np.max(values)),
            "norm_last": float(np.mean(last[:, k])),
        }
        if moduli is not None:
            row.update(lam_min=float(moduli[k, 0]), lam_median=float(moduli[k, 1]),
                       lam_max=float(moduli[k, 2]))
        if grad_norms is not None:
            row["grad_norm"] = float(grad_norms[k])
        rows.append(row)
        for t in times:
            alive = lengths >= t
            if not np.any(alive):
                continue
            rows.append(
                {
                    "kind": "profile",
                    "step": step,
                    "layer": k + 1,
                    "t": int(t),
                    "norm": float(np.mean(norms[alive, k, t - 1])),
                    "examples": int(np.sum(alive)),
                }
            )
    return rows

