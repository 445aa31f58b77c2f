"""What makes training fast without changing it: hyperparameters as data (one compilation for
a grid), batches cut to their longest example (the same loss, metrics and BatchNorm statistics
up to float round-off), evaluation in order of length."""

from __future__ import annotations

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

from linrnn_bench.harness import train as T
from linrnn_bench.models.network import NetworkConfig
from linrnn_bench.tasks._base import Split, TaskInfo

from helpers import tol

L = 40


@pytest.fixture
def close_buckets(monkeypatch):
    """Cutting checked at a length short enough to test quickly: the training code's buckets
    lie 64 tokens apart (`harness.train.BUCKET_SPACING`), which leaves one at L = 40. Patched
    where `bucket_lengths` reads it."""
    monkeypatch.setattr(T.batches, "BUCKET_SPACING", 1)


def fresh(state):
    """A copy of a BatchNorm state: Equinox refuses a state object that was already updated."""
    return jax.tree.unflatten(*reversed(jax.tree.flatten(state)))


def split_of(info: TaskInfo, n: int, seed: int, lengths: tuple[int, int] = (4, 24)) -> Split:
    """Random examples of ``info``'s kind with lengths in ``lengths`` (by default all shorter
    than L, so a batch of them can be cut)."""
    rng = np.random.default_rng(seed)
    shape = (n, 2) if info.pair else (n,)
    lengths = rng.integers(lengths[0], lengths[1] + 1, shape).astype(np.int32)
    valid = np.arange(L) < lengths[..., None]
    if info.input_kind == "tokens":
        x = np.where(valid, rng.integers(1, info.vocab_size, (*shape, L)), 0).astype(np.int32)
    else:
        x = np.where(valid[..., None], rng.normal(size=(*shape, L, info.input_dim)), 0.0)
        x = x.astype(np.float32)
    if info.target == "per_step":
        y = np.where(valid, rng.integers(0, info.num_classes, (n, L)), -1).astype(np.int32)
    elif info.target == "regression":
        y = rng.normal(size=n).astype(np.float32)
    else:
        y = rng.integers(0, info.num_classes, n).astype(np.int32)
    return Split(x, y, lengths)


def info_of(kind="tokens", target="class", pair=False) -> TaskInfo:
    return TaskInfo(
        name="toy", description="toy", seq_len=L, variable_length=True, input_kind=kind,
        num_classes=1 if target == "regression" else 3,
        vocab_size=7 if kind == "tokens" else None, input_dim=None if kind == "tokens" else 2,
        target=target, pair=pair,
    )


# Between them: BatchNorm over two blocks (the second block's input is not constant at padding
# steps), both towers of a pair task, a reverse scan, per-step labels, real inputs, post-norm,
# S4D's FFT convolution (whose length changes with the cut) and last-step pooling.
CASES = {
    "pair task, bidirectional, two blocks": (
        info_of(pair=True),
        NetworkConfig(layer="lru", depth=2, d_model=8, d_state=8,
                      layer_options=(("bidirectional", True),)),
    ),
    "per-step labels, real inputs, post-norm": (
        info_of(kind="real", target="per_step"),
        NetworkConfig(layer="s5", depth=1, d_model=8, d_state=8, prenorm=False),
    ),
    "regression, S4D, last step": (
        info_of(target="regression"),
        NetworkConfig(layer="s4d", depth=1, d_model=8, d_state=8, pooling="last"),
    ),
}


PLAIN = (info_of(), NetworkConfig(layer="lru", depth=1, d_model=8, d_state=8))


@pytest.mark.parametrize("case", list(CASES))
def test_a_cut_batch_gives_the_loss_metrics_and_statistics_of_the_padded_one(case):
    info, config = CASES[case]
    split = split_of(info, 12, seed=1)
    net, state = T.build_network(config, info, key=jr.PRNGKey(0))
    index = np.arange(12)
    longest = int(split.lengths.max())
    cut = T.trimmed_length(split.lengths, T.bucket_lengths(L, spacing=1))
    assert longest <= cut < L  # the cut drops steps
    forward = eqx.filter_jit(lambda net, state, batch: T.batch_sums(
        net, state, batch, jnp.ones(12), jr.PRNGKey(3)))
    padded_batch = T.to_batch(split, index)
    full, full_correct, full_count, full_state = forward(net, fresh(state), padded_batch)
    cut_batch = T.to_batch(split, index, cut)
    assert cut_batch.inputs.shape[1 + info.pair] == cut
    short, short_correct, short_count, short_state = forward(net, fresh(state), cut_batch)
    np.testing.assert_allclose(short, full, **tol(np.float32))
    assert short_correct == full_correct and short_count == full_count
    # BatchNorm's running statistics (the state) come from the valid steps only.
    for a, b in zip(jax.tree.leaves(short_state), jax.tree.leaves(full_state)):
        np.testing.assert_allclose(a, b, **tol(np.float32))


def test_evaluation_in_order_of_length_cut_per_batch_gives_the_split_loss_and_accuracy(
        close_buckets):
    info, config = CASES["pair task, bidirectional, two blocks"]
    split = split_of(info, 12, seed=1, lengths=(4, L))
    net, state = T.build_network(config, info, key=jr.PRNGKey(0))
    # Batches of 8: the 8 shortest examples (cut) and the 4 longest with 4 weight-zero copies.
    trimmed = T.evaluate(net, state, split, batch_size=8)
    padded = T.evaluate(net, fresh(state), split, batch_size=12, trim=False)
    np.testing.assert_allclose(trimmed["loss"], padded["loss"], **tol(np.float32))
    assert trimmed["accuracy"] == padded["accuracy"]


def test_batch_norm_statistics_are_those_of_the_valid_steps():
    info, config = PLAIN
    split = split_of(info, 6, seed=2)
    net, state = T.build_network(config, info, key=jr.PRNGKey(0))
    batch = T.to_batch(split, np.arange(6))
    block = net.blocks[0]
    mask = (np.arange(L) < np.asarray(batch.lengths)[:, None]).astype(np.float32)

    # Compiled: one program costs less than the many small eager ones it replaces.
    @eqx.filter_jit
    def encode_and_normalise(net, state, inputs, mask):
        e = jax.vmap(jax.vmap(net.encoder))(inputs)  # (n, L, H)
        normed, new_state = jax.vmap(
            lambda x, m: net.blocks[0].layer_input(x, m, state), axis_name="batch",
            out_axes=(0, None),
        )(e, mask)
        return e, normed, new_state

    e, normed, new_state = encode_and_normalise(net, fresh(state), batch.inputs,
                                                jnp.asarray(mask))
    valid = np.asarray(e)[mask > 0]  # (valid steps, H)
    mean, var = valid.mean(0), valid.var(0)
    expected = (valid - mean) / np.sqrt(var + block.norm.eps)
    np.testing.assert_allclose(np.asarray(normed)[mask > 0], expected, rtol=1e-4, atol=1e-5)
    assert np.all(np.asarray(normed)[mask == 0] == 0.0)
    running_mean, running_var = new_state.get(block.norm.batch_state_index)
    np.testing.assert_allclose(running_mean, 0.1 * mean, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(running_var, 0.9 + 0.1 * var, rtol=1e-4, atol=1e-6)

    # With every step valid it is Equinox's BatchNorm (statistics over batch and time).
    x = jnp.asarray(np.random.default_rng(1).standard_normal((4, L, 8)), jnp.float32)

    # One program for both (the all-valid mask is an argument, so nothing is folded away).
    @eqx.filter_jit
    def ours_and_theirs(block, our_state, their_state, x, valid):
        ours = jax.vmap(lambda x: block._normalise(x, valid, our_state),
                        axis_name="batch", out_axes=(0, None))(x)
        theirs = jax.vmap(lambda x: block.norm(x.T, their_state), axis_name="batch",
                          out_axes=(0, None))(x)
        return ours, theirs

    (ours, our_state), (theirs, their_state) = ours_and_theirs(
        net.blocks[0], fresh(state), fresh(state), x, jnp.ones(L))
    np.testing.assert_allclose(ours, jnp.swapaxes(theirs, 1, 2), rtol=1e-4, atol=1e-5)
    for a, b in zip(jax.tree.leaves(our_state), jax.tree.leaves(their_state)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)


def test_buckets_are_few_and_hold_every_length():
    assert T.BUCKET_SPACING == 64
    assert T.bucket_lengths(2000) == (504, 1000, 1504, 2000)
    assert T.bucket_lengths(250) == (88, 168, 250)  # four would lie under 64 tokens apart
    assert T.bucket_lengths(37) == (37,) and T.bucket_lengths(127) == (127,)
    assert T.bucket_lengths(250, spacing=1) == (64, 128, 192, 250)
    assert T.bucket_lengths(29, spacing=1) == (8, 16, 24, 29)
    assert T.bucket_lengths(5, spacing=1) == (5,)
    buckets = T.bucket_lengths(250, spacing=1)
    assert [T.trimmed_length(np.array(n), buckets) for n in (1, 64, 65, 200, 250)] == [
        64, 64, 128, 250, 250]


@pytest.mark.parametrize("warmup_fraction", [0.0, 0.1, 0.5])
def test_the_traced_schedule_is_optax_schedule(warmup_fraction):
    config = T.TrainConfig(steps=37, warmup_fraction=warmup_fraction, lr=3e-3)
    hyper = T.hyperparameters(config)
    counts = jnp.arange(0, 40, dtype=jnp.int32)
    traced = jax.jit(jax.vmap(lambda c, h: T.scheduled(c, h["lr"], h["warmup_steps"],
                                                       h["steps"]),
                              in_axes=(0, None)))(counts, hyper)
    reference = jax.jit(jax.vmap(config.schedule(config.lr)))(counts)
    # Equal up to float round-off (XLA turns optax's division by a constant into a
    # multiplication by its reciprocal): a unit or two in the last place, relative to the peak.
    np.testing.assert_allclose(traced, reference, rtol=1e-6, atol=1e-6 * config.lr)


def test_one_compilation_serves_every_seed_and_learning_rate():
    info, config = PLAIN

    class Task:
        def __init__(self):
            self.info = info
            self.config = "toy"
            # Every example full length: every batch has the one shape of the cut.
            self._splits = {name: split_of(info, 40, seed=i, lengths=(L, L))
                            for i, name in enumerate(("train", "val", "test"))}

        def split(self, name):
            return self._splits[name]

    task = Task()
    recipe = T.TrainConfig(steps=3, batch_size=8, eval_every=3, eval_batch_size=40)
    T.train(config, task, recipe, seed=0)
    # Another seed, learning rates, weight decay and length of schedule: no new compilation
    # (one step function per structure, and neither the step's programs, one per batch shape,
    # nor the evaluation's compile again; host-side scalars such as the logged learning rate
    # may).
    steps = T._flat_step.cache_info().currsize
    compiles: list[str] = []

    def listen(event: str, duration: float, **kwargs) -> None:
        if event == T._COMPILE_EVENT and kwargs.get("fun_name") in (
                "jit(flat_train_step)", "jit(_eval_sums)"):
            compiles.append(kwargs["fun_name"])

    other = dataclasses.replace(recipe, steps=4, lr=1e-2, recurrent_lr=5e-4, weight_decay=0.0,
                                warmup_fraction=0.5)
    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        T.train(config, task, other, seed=7)
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)
    assert T._flat_step.cache_info().currsize == steps
    assert compiles == []
    # The listener sees the step's compilations (it would fail above, not vacuously pass).
    T._flat_step.cache_clear()
    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        T.train(config, task, other, seed=7)
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)
    assert "jit(flat_train_step)" in compiles
