"""Seed groups: k seeds of one configuration trained as one compiled program (`train_group`),
each recorded as `train` records it; and the stacking of their pytrees on a seed axis."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from linrnn_bench.models.network import Network, NetworkConfig
from linrnn_bench.tasks import Split, Task

from ..errors import Diverged
from .batches import Batch, BatchSampler, to_batch
from .evaluate import _better, evaluate_group
from .loop import (_diverged, _dropout_key, _evaluation_steps, _Facts, _facts, _finish,
                   _fresh, _measured, _Member, _resume_member, _save)
from .optimiser import Optimiser
from .recipe import TrainConfig
from .rows import OnEval, TrainResult, add_callback_rows, eval_row
from .step import GroupStepper


def train_group(
    network_config: NetworkConfig,
    task: Task,
    config: TrainConfig,
    *,
    seeds: list[int] | tuple[int, ...],
    on_eval: OnEval | None = None,
    checkpoints: list[str | Path | None] | None = None,
    progress: bool = False,
) -> list[TrainResult | Diverged]:
    """`train` for several seeds of one configuration at once: one result per seed, in order.

    Every seed's network, BatchNorm state and optimiser state are stacked on a leading seed
    axis and trained by `train`'s own step under `jax.vmap` (`GroupStepper`): one compiled
    program and one call per step for the k seeds, which at small widths costs little more than
    one seed. Each seed keeps what `train` gives it: its initialisation, its batch order
    (`BatchSampler` of its seed), its dropout keys, its evaluations, its best step and its
    checkpoint (the same file and format as `train`'s: a run resumes from it whether it was
    trained alone or in a group). Where the seeds' batches of a step cut to different length
    buckets, every seed's batch is cut to the longest (padding is exact: the same loss up to
    float round-off). A seed whose loss, gradient or validation loss goes non-finite is
    recorded as `train` records it (its result is the `Diverged` that `train` would raise) and
    frozen; the others go on. Validation and test are evaluated for every seed at once
    (`evaluate_group`) and ``on_eval`` is called per seed with that seed's network.

    Seeds whose checkpoints stand at different steps train as separate groups, one per step.
    ``train_seconds`` and ``compile_seconds`` of a final row are the seed's share of the
    group's: the group's times divided by its size.

    Equal to k calls of `train` up to float round-off: vmap batches the same operations, and
    XLA may order a batched reduction or matrix product differently.
    """
    seeds = list(seeds)
    paths = _group_paths(seeds, checkpoints)
    members = []
    for seed, path in zip(seeds, paths):
        member, optimiser = _fresh(network_config, task, config, seed, path)
        _resume_member(member, config)
        members.append(member)
    # `optimiser` serves every seed: `make_optimiser` is cached on the parameter groups,
    # which one configuration shares.
    results: dict[int, TrainResult | Diverged] = {}
    for start in sorted({m.start for m in members}):
        group = [m for m in members if m.start == start]
        for member, result in zip(group, _train_members(network_config, task, config, group,
                                                        optimiser, on_eval, progress)):
            results[member.seed] = result
    return [results[s] for s in seeds]


def _group_paths(seeds: list[int], checkpoints: list[str | Path | None] | None
                 ) -> list[Path | None]:
    """Each seed's checkpoint file (None: none), after checking the seeds and the files agree."""
    if not seeds:
        raise ValueError("train_group needs at least one seed.")
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"train_group: seeds repeat a value: {seeds!r}.")
    paths = [None] * len(seeds) if checkpoints is None else [
        None if c is None else Path(c) for c in checkpoints]
    if len(paths) != len(seeds):
        raise ValueError(f"train_group: {len(paths)} checkpoints for {len(seeds)} seeds.")
    return paths


def _train_members(
    network_config: NetworkConfig, task: Task, config: TrainConfig, members: list[_Member],
    optimiser: Optimiser, on_eval: OnEval | None, progress: bool,
) -> list[TrainResult | Diverged]:
    """Train ``members`` (all starting at one step) as one group; `train_group`'s results."""
    info, k, start = task.info, len(members), members[0].start
    train_split, val_split = task.split("train"), task.split("val")
    samplers = [BatchSampler(train_split, config.batch_size, m.seed, device=False)
                for m in members]
    keys = jnp.stack([_dropout_key(m.seed) for m in members])
    facts = _facts(info, config, members[0].carry[0], train_split)
    group = _Group(members)
    if start == 0:
        group.add_callback_rows(on_eval, 0)
    with _measured(config.steps, start, f"{network_config.layer}/{info.name} x{k}",
                   progress) as meter:
        stepper = GroupStepper(optimiser, group.network, group.state, group.opt_state)

        def step(s: int) -> jax.Array:
            return group.step(stepper, _group_batch(samplers, train_split, s), keys)

        for at in _evaluation_steps(config, start, step, group.check, meter.bar):
            group.validate(at, stepper, val_split, info.timescale, facts, config)
            group.add_callback_rows(on_eval, at)
            if at != config.steps:
                group.save(at, meter.clock.elapsed() / k)
    return group.finish(stepper, task, config, facts, meter.clock.elapsed() / k,
                        meter.compiling[0] / k)


def _group_batch(samplers: list[BatchSampler], split: Split, step: int) -> Batch:
    """Every seed's batch of ``step`` stacked (``(k, n, ...)``, host arrays), each cut to the
    longest of their buckets."""
    indices = [sampler.indices(step) for sampler in samplers]
    lengths = [sampler.length(index) for sampler, index in zip(samplers, indices)]
    length = None if lengths[0] is None else max(lengths)
    batches = [to_batch(split, index, length, device=False) for index in indices]
    return Batch(*(np.stack(parts) for parts in zip(*batches)))


class _Group:
    """The seeds of a group while they train: their (network, state, opt_state, best_network,
    best_state), each stacked on a leading seed axis, which seeds are still active, the result
    of each that has ended, and the training losses since the last evaluation."""

    def __init__(self, members: list[_Member]):
        self.members = members
        self.network, self.state, self.opt_state, self.best_network, self.best_state = (
            stack([m.carry[i] for m in members]) for i in range(5))
        self.results: list[TrainResult | Diverged | None] = [None] * len(members)
        self.active = np.ones(len(members), dtype=bool)
        self.losses: list[jax.Array] = []

    def step(self, stepper: GroupStepper, batch: Batch, keys: jax.Array) -> jax.Array:
        """One step of the active seeds; their finiteness flags ``(k,)``."""
        loss, finite = stepper(batch, keys, self.active)
        self.losses.append(loss)
        return finite

    def diverge(self, i: int, step: int, what: str) -> None:
        """Seed ``i`` recorded as diverged (its result is the `Diverged` `train` raises) and
        frozen."""
        self.results[i] = _diverged(self.members[i], step, what)
        self.active[i] = False

    def check(self, step: int, finite: jax.Array) -> bool:
        """The seeds whose step ``step`` was not finite diverged; whether any goes on."""
        for i in np.flatnonzero(self.active & ~np.asarray(finite)):
            self.diverge(int(i), step, "loss or gradient")
        return bool(self.active.any())

    def add_callback_rows(self, on_eval: OnEval | None, step: int) -> None:
        """``on_eval``'s rows of each active seed, with that seed's network and state."""
        if on_eval is None:
            return
        for i in np.flatnonzero(self.active):
            add_callback_rows(on_eval, step, unstack(self.network, int(i)),
                              unstack(self.state, int(i)), self.members[i].rows)

    def validate(self, step: int, stepper: GroupStepper, val_split: Split, timescale: float,
                 facts: _Facts, config: TrainConfig) -> None:
        """Every active seed evaluated on validation after ``step``: its eval row, or its
        divergence; its best step and best network where it improved."""
        self.network, self.state, self.opt_state = stepper.carry()
        vals = evaluate_group(_rescaled_group(self.network, timescale), self.state, val_split,
                              batch_size=config.eval_batch_size)
        seen = jnp.stack(self.losses)  # (steps since the last evaluation, k)
        self.losses = []
        improved = np.zeros(len(self.members), dtype=bool)
        for i in np.flatnonzero(self.active):
            member, val = self.members[i], vals[i]
            if not math.isfinite(val["loss"]):
                self.diverge(int(i), step, "validation loss")
                continue
            member.rows.append(eval_row(step, facts.lr_at, float(jnp.mean(seen[:, i])), val))
            if member.best is None or _better(val, member.best, facts.selection):
                member.best = {"step": step, **val}
                improved[i] = True
        self.best_network, self.best_state = _select(
            improved, (self.network, self.state), (self.best_network, self.best_state))

    def save(self, step: int, elapsed: float) -> None:
        """Each active seed's checkpoint after ``step`` (``elapsed``: its share of the group's
        seconds so far)."""
        for i in np.flatnonzero(self.active):
            member = self.members[i]
            if member.path is not None:
                tree = tuple(unstack(t, int(i)) for t in (
                    self.network, self.state, self.opt_state, self.best_network,
                    self.best_state))
                _save(member, step, member.seconds + elapsed, tree)

    def finish(self, stepper: GroupStepper, task: Task, config: TrainConfig, facts: _Facts,
               share: float, compile_share: float) -> list[TrainResult | Diverged]:
        """Each active seed's selected step tested, its final row and result; every result."""
        if self.active.any():
            network, state, _ = stepper.carry()
            tests = evaluate_group(_rescaled_group(self.best_network, task.info.timescale),
                                   self.best_state, task.split("test"),
                                   batch_size=config.eval_batch_size)
        for i in np.flatnonzero(self.active):
            member = self.members[i]
            final = _finish(member, config, facts, tests[i], member.seconds + share,
                            compile_share)
            self.results[i] = TrainResult(member.rows, final, unstack(network, int(i)),
                                          unstack(state, int(i)),
                                          unstack(self.best_network, int(i)),
                                          unstack(self.best_state, int(i)))
        assert all(r is not None for r in self.results)
        return self.results  # type: ignore[return-value]


# --------------------------------------------------------------------------------------------
# A seed axis on pytrees


def stack(trees: list[Any]) -> Any:
    """Pytrees of one structure (modules of one configuration) stacked on a new leading axis:
    their arrays stacked, the rest (static fields) taken from the first."""
    dynamic = [eqx.filter(t, eqx.is_array) for t in trees]
    static = eqx.filter(trees[0], eqx.is_array, inverse=True)
    return eqx.combine(jax.tree.map(lambda *xs: jnp.stack(xs), *dynamic), static)


def unstack(tree: Any, i: int) -> Any:
    """Member ``i`` of a tree stacked by `stack`."""
    dynamic, static = eqx.partition(tree, eqx.is_array)
    return eqx.combine(jax.tree.map(lambda x: x[i], dynamic), static)


def _rescaled_group(networks: Network, factor: float) -> Network:
    if factor == 1.0:
        return networks
    return eqx.filter_vmap(lambda n: n.rescaled(factor))(networks)


def _select(mask: np.ndarray, new: Any, old: Any) -> Any:
    """Per seed (the leading axis of every array): ``new`` where ``mask``, else ``old``."""
    if not mask.any():
        return old
    where = jnp.asarray(mask)

    def pick(a: jax.Array, b: jax.Array) -> jax.Array:
        return jnp.where(where.reshape(where.shape + (1,) * (a.ndim - 1)), a, b)

    dynamic_new, static = eqx.partition(new, eqx.is_array)
    dynamic_old = eqx.filter(old, eqx.is_array)
    return eqx.combine(jax.tree.map(pick, dynamic_new, dynamic_old), static)
