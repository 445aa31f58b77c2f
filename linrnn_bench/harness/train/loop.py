"""The training loop: `train` (one seed), and the parts a seed group (`group.py`) shares with it:
a run's start (fresh or resumed from its checkpoint), the facts its rows need, the measuring of
its time, the steps with their one-step-late divergence check, checkpoints and the final row."""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import optax

from linrnn_bench.models.network import Network, NetworkConfig, count_parameters, recurrent_mask
from linrnn_bench.tasks import Split, Task, TaskInfo

from ..errors import Diverged
from ..measure.timing import Stopwatch
from ..runner import progress_bar
from . import rows as _rows
from .batches import BatchSampler
from .checkpoints import _CHECKPOINT_FORMAT, _identity, _resume, save_checkpoint
from .evaluate import _better, evaluate
from .optimiser import Optimiser, init_optimiser, make_optimiser
from .recipe import TrainConfig
from .rows import OnEval, TrainResult, add_callback_rows, eval_row, final_row
from .step import Stepper, build_network


def train(
    network_config: NetworkConfig,
    task: Task,
    config: TrainConfig,
    *,
    seed: int,
    on_eval: OnEval | None = None,
    checkpoint: str | Path | None = None,
    progress: bool = False,
) -> TrainResult:
    """Train a network on ``task``; select on validation; test the selected checkpoint.

    Arguments:
        network_config: the architecture.
        task: a built task (``info`` and ``split(name)``).
        config: the recipe.
        seed: initialisation, batch order and dropout; the same seed gives bit-identical
            metrics on CPU.
        on_eval: called as ``on_eval(step, network, state)`` at step 0 and after every
            evaluation; the rows it returns join the run's rows (``step`` added if missing).
        checkpoint: a file to save to after every evaluation and resume from; None for none.
            It is deleted once the run ends (finished or diverged).
        progress: show a progress bar over steps (quiet anyway in CI and off a terminal).

    Returns:
        A `TrainResult`. Rows: ``kind="eval"`` (step, lr, train_loss, val_loss,
        val_accuracy), the callback's rows, and one ``kind="final"`` row (best_step,
        val_loss/val_accuracy and test_loss/test_accuracy of the selected checkpoint, params,
        recurrent_params, steps, epochs, train_seconds, and compile_seconds: the part of
        train_seconds XLA spent compiling).

    Raises:
        Diverged: a non-finite loss, gradient or validation loss; its rows are those so far
            plus one ``kind="diverged"`` row with the step.
    """
    info = task.info
    train_split, val_split = task.split("train"), task.split("val")
    member, optimiser = _fresh(network_config, task, config, seed,
                               None if checkpoint is None else Path(checkpoint))
    sampler = BatchSampler(train_split, config.batch_size, seed, device=False)
    facts = _facts(info, config, member.carry[0], train_split)
    _resume_member(member, config)
    if member.start == 0:
        add_callback_rows(on_eval, 0, member.carry[0], member.carry[1], member.rows)
    with _measured(config.steps, member.start, f"{network_config.layer}/{info.name}",
                   progress) as meter:
        stepper = Stepper(optimiser, *member.carry[:3])
        _run_alone(member, stepper, sampler, _dropout_key(seed), val_split, info.timescale,
                   facts, config, on_eval, meter)
    member.seconds += meter.clock.elapsed()

    network, state, _, best_network, best_state = member.carry
    test = evaluate(best_network.rescaled(info.timescale), best_state, task.split("test"),
                    batch_size=config.eval_batch_size)
    final = _finish(member, config, facts, test, member.seconds, meter.compiling[0])
    return TrainResult(member.rows, final, network, state, best_network, best_state)


def _run_alone(member: _Member, stepper: Stepper, sampler: BatchSampler, key: jax.Array,
               val_split: Split, timescale: float, facts: _Facts, config: TrainConfig,
               on_eval: OnEval | None, meter: _Meter) -> None:
    """`train`'s steps and evaluations. ``member.carry`` holds (network, state, opt_state,
    best_network, best_state) as of the last evaluation; a divergence raises `Diverged`."""
    losses: list[jax.Array] = []

    def step(s: int) -> jax.Array:
        loss, finite = stepper(sampler(s), key)
        losses.append(loss)
        return finite

    def check(at: int, finite: jax.Array) -> bool:
        if not bool(finite):
            raise _diverged(member, at, "loss or gradient")
        return True

    for at in _evaluation_steps(config, member.start, step, check, meter.bar):
        network, state, opt_state = stepper.carry()
        val = evaluate(network.rescaled(timescale), state, val_split,
                       batch_size=config.eval_batch_size)
        if not math.isfinite(val["loss"]):
            raise _diverged(member, at, "validation loss")
        member.rows.append(eval_row(at, facts.lr_at, float(jnp.mean(jnp.stack(losses))), val))
        losses.clear()
        best_network, best_state = member.carry[3:]
        if member.best is None or _better(val, member.best, facts.selection):
            member.best = {"step": at, **val}
            best_network, best_state = network, state
        member.carry = (network, state, opt_state, best_network, best_state)
        add_callback_rows(on_eval, at, network, state, member.rows)
        if member.path is not None and at != config.steps:
            _save(member, at, member.seconds + meter.clock.elapsed(), member.carry)


# --------------------------------------------------------------------------------------------
# The parts `train` and a seed group share


@dataclasses.dataclass
class _Member:
    """One seed of a run: where it starts (fresh or from its checkpoint) and what it has."""

    seed: int
    path: Path | None
    identity: str
    start: int
    rows: list[dict[str, Any]]
    best: dict[str, Any] | None
    seconds: float
    carry: tuple[Any, ...]  # (network, state, opt_state, best_network, best_state)


def _fresh(network_config: NetworkConfig, task: Task, config: TrainConfig, seed: int,
           path: Path | None) -> tuple[_Member, Optimiser]:
    """Seed ``seed`` at step 0 (its network from ``fold_in(PRNGKey(seed), 0)``, Adam's moments at
    zero) and its optimiser; `_resume_member` then takes up its checkpoint at ``path``."""
    network, state = build_network(network_config, task.info,
                                   key=jr.fold_in(jr.PRNGKey(seed), 0))
    optimiser = make_optimiser(network)
    opt_state = init_optimiser(optimiser, eqx.filter(network, eqx.is_inexact_array), config)
    member = _Member(seed, path, _identity(network_config, task, config, seed), 0, [], None,
                     0.0, (network, state, opt_state, network, state))
    return member, optimiser


def _resume_member(member: _Member, config: TrainConfig) -> None:
    """``member`` taken up from its checkpoint, if it has one of this run (`_resume`)."""
    path = member.path
    if path is None or not path.exists():
        return
    resumed = _resume(path, member.identity, member.carry)
    if resumed is not None:
        header, member.carry = resumed
        member.start, member.rows = header["step"], header["rows"]
        member.best, member.seconds = header["best"], header["seconds"]
        print(f"Resuming {path.name} from step {member.start} of {config.steps}.")


def _dropout_key(seed: int) -> jax.Array:
    """The key a seed's dropout keys are folded from (the step count folded in by the step)."""
    return jr.fold_in(jr.PRNGKey(seed), 1)


@dataclasses.dataclass(frozen=True)
class _Facts:
    """What a run's rows need besides its metrics."""

    lr_at: optax.Schedule  # the regular parameters' learning rate at a step
    selection: str  # "accuracy", or "loss" for a regression target
    params: int
    recurrent: int
    train_examples: int


def _facts(info: TaskInfo, config: TrainConfig, network: Network, train_split: Split
           ) -> _Facts:
    return _Facts(
        lr_at=config.schedule(config.lr),
        selection="loss" if info.target == "regression" else "accuracy",
        params=count_parameters(network),
        recurrent=count_parameters(eqx.filter(network, recurrent_mask(network))),
        train_examples=len(train_split),
    )


_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"


def _compile_listener(total: list[float]) -> Callable[..., None]:
    """A JAX event listener adding the seconds of every backend compile to ``total[0]`` (a
    program found in memory or loaded from the persistent cache compiles nothing)."""

    def listen(event: str, duration: float, **_: Any) -> None:
        if event == _COMPILE_EVENT:
            total[0] += duration

    return listen


@dataclasses.dataclass
class _Meter:
    """A run's clock, its progress bar and the seconds XLA spent compiling in it (the first
    shapes it meets): ``compiling[0]``."""

    compiling: list[float]
    clock: Stopwatch
    bar: Any


@contextlib.contextmanager
def _measured(steps: int, start: int, label: str, progress: bool) -> Iterator[_Meter]:
    """A `_Meter` counting compiles and showing progress while the block runs."""
    compiling = [0.0]
    listener = _compile_listener(compiling)
    jax.monitoring.register_event_duration_secs_listener(listener)
    meter = _Meter(compiling, Stopwatch(), progress_bar(steps, label, enabled=progress))
    meter.bar.update(start)
    try:
        yield meter
    finally:
        meter.bar.close()
        jax.monitoring.unregister_event_duration_listener(listener)


def _evaluation_steps(config: TrainConfig, start: int, step: Callable[[int], jax.Array],
                      check: Callable[[int, jax.Array], bool], bar: Any) -> Iterator[int]:
    """Run steps ``start`` to ``config.steps - 1`` and yield the step count after each one the
    run evaluates at (every ``eval_every`` steps and the last).

    ``step(s)`` queues step ``s`` and returns its finiteness flag; ``check(count, finite)``
    reads a flag (the host waits for it) and says whether the run goes on. A flag is read one
    step late, once the next step is queued, and at once at an evaluation. This is the only
    per-step host synchronisation.
    """
    pending: tuple[int, jax.Array] | None = None
    for s in range(start, config.steps):
        finite = step(s)
        if pending is not None and not check(*pending):
            return
        pending = (s + 1, finite)
        bar.update(1)
        count = s + 1
        if count % config.eval_every and count != config.steps:
            continue
        pending = None
        if not check(count, finite):
            return
        yield count


def _diverged(member: _Member, step: int, what: str) -> Diverged:
    """``member``'s `Diverged` (its checkpoint removed, its diverged row added)."""
    if member.path is not None:
        member.path.unlink(missing_ok=True)
    return _rows.diverged(member.rows, step, what)


def _save(member: _Member, step: int, seconds: float, tree: Any) -> None:
    """``member``'s checkpoint after ``step`` (``tree``: its carry), when it keeps one."""
    if member.path is None:
        return
    header = {"format": _CHECKPOINT_FORMAT, "identity": member.identity, "step": step,
              "rows": member.rows, "best": member.best, "seconds": seconds}
    save_checkpoint(member.path, header, tree)


def _finish(member: _Member, config: TrainConfig, facts: _Facts, test: dict[str, Any],
            seconds: float, compile_seconds: float) -> dict[str, Any]:
    """``member``'s final row, added to its rows, its checkpoint removed (the run has ended)."""
    assert member.best is not None  # the last step is always evaluated
    final = final_row(config, member.best, test, facts.selection, facts.params,
                      facts.recurrent, facts.train_examples, seconds, compile_seconds)
    member.rows.append(final)
    if member.path is not None:
        member.path.unlink(missing_ok=True)
    return final
