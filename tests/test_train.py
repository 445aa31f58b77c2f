"""Training: optimiser groups, schedule, batching, losses, determinism, resume, divergence."""

from __future__ import annotations

import dataclasses
import functools
import json

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from linrnn_bench.harness import train as T
from linrnn_bench.harness.runner import execute
from linrnn_bench.harness.studies import Diverged, Study
from linrnn_bench.models.network import NetworkConfig, recurrent_mask
from linrnn_bench.tasks._base import Split, TaskInfo

from helpers import tol

L, N = 16, 48


@dataclasses.dataclass(frozen=True)
class ToyConfig:
    seed: int = 0
    nan_example: int | None = None  # a training example whose inputs are NaN (real inputs)


class ToyTask:
    """Is the token 3 (the feature 3, for real inputs) present at least twice? Variable length."""

    def __init__(self, config: ToyConfig = ToyConfig(), *, kind: str = "tokens",
                 target: str = "class"):
        self.config = config
        self.info = TaskInfo(
            name="toy", description="toy", seq_len=L, variable_length=True, input_kind=kind,
            num_classes=1 if target == "regression" else 2,
            vocab_size=6 if kind == "tokens" else None, input_dim=None if kind == "tokens" else 1,
            target=target,
        )
        self._splits = {}
        for i, name in enumerate(("train", "val", "test")):
            rng = np.random.default_rng([config.seed, i])
            n = N if name == "train" else 20
            lengths = rng.integers(L // 2, L + 1, n).astype(np.int32)
            valid = np.arange(L) < lengths[:, None]
            x = np.where(valid, rng.integers(1, 6, (n, L)), 0).astype(np.int32)
            if target == "class":
                y = ((x == 3).sum(1) >= 2).astype(np.int32)
            elif target == "per_step":
                y = np.where(valid & (np.arange(L) % 2 == 1), (x == 3).cumsum(1) % 2, -1)
                y = y.astype(np.int32)
            else:
                y = (x == 3).mean(1).astype(np.float32)
            if kind == "real":
                x = x[..., None].astype(np.float32)
                if name == "train" and config.nan_example is not None:
                    x[config.nan_example] = np.nan
            self._splits[name] = Split(x, y, lengths)

    def split(self, name: str) -> Split:
        return self._splits[name]


NET = NetworkConfig(layer="lru", depth=1, d_model=8, d_state=8, norm="batch")
RECIPE = T.TrainConfig(steps=6, batch_size=16, eval_every=2, eval_batch_size=32, lr=1e-2)


def without_time(rows):
    return [{k: v for k, v in r.items() if k not in ("train_seconds", "compile_seconds")}
            for r in rows]


# --------------------------------------------------------------------------------------------
# Config, schedule, batches


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("steps", 0, "steps must be a positive integer, got 0"),
        ("lr", 0.0, "lr must be positive"),
        ("recurrent_lr", -1.0, "recurrent_lr must be a finite number >= 0.0"),
        ("warmup_fraction", 1.0, r"warmup_fraction must lie in \[0, 1\)"),
        ("clip_norm", -1.0, "clip_norm must be a positive number or None"),
    ],
)
def test_train_config_rejects_bad_values(field, value, message):
    with pytest.raises(ValueError, match=message):
        T.TrainConfig(**{field: value})


def test_schedule_warms_up_linearly_then_decays_by_cosine_to_zero():
    c = T.TrainConfig(steps=100, warmup_fraction=0.1, lr=1.0)
    s = c.schedule(2.0)
    np.testing.assert_allclose([s(0), s(5), s(10), s(55), s(100)], [0.0, 1.0, 2.0, 1.0, 0.0],
                               atol=1e-6)


def test_batches_cover_each_example_once_per_epoch_and_resume_anywhere():
    split = ToyTask().split("train")
    sampler = T.BatchSampler(split, 16, seed=3)
    assert sampler.per_epoch == N // 16
    # Lengths identify the drawn examples well enough with an index column: use the labels
    # of a split whose "labels" are the example indices.
    indexed = Split(split.inputs, np.arange(N, dtype=np.int32), split.lengths)
    sampler = T.BatchSampler(indexed, 16, seed=3)
    epoch0 = np.concatenate([np.asarray(sampler(s).labels) for s in range(3)])
    epoch1 = np.concatenate([np.asarray(sampler(s).labels) for s in range(3, 6)])
    assert sorted(epoch0) == list(range(N)) and sorted(epoch1) == list(range(N))
    assert list(epoch0) != list(epoch1)
    fresh = T.BatchSampler(indexed, 16, seed=3)  # a resumed run starts mid-way
    np.testing.assert_array_equal(fresh(4).labels, sampler(4).labels)
    with pytest.raises(ValueError, match="fewer than batch_size=64"):
        T.BatchSampler(indexed, 64, seed=0)


# --------------------------------------------------------------------------------------------
# The optimiser: two groups by the layers' recurrent masks, never by names


def test_recurrent_group_gets_its_own_rate_and_no_weight_decay(getkey):
    task = ToyTask()
    net, _ = T.build_network(NET, task.info, key=getkey())
    labels = T.parameter_groups(net)
    mask = eqx.filter(recurrent_mask(net), jax.tree.map(eqx.is_inexact_array, net))
    assert jax.tree.leaves(labels) == [
        "recurrent" if m else "regular" for m in jax.tree.leaves(mask)
    ]
    assert {"recurrent", "regular"} == set(jax.tree.leaves(labels))

    config = T.TrainConfig(steps=10, warmup_fraction=0.0, lr=0.1, recurrent_lr=0.01,
                           weight_decay=0.5)
    optimiser = T.make_optimiser(net)
    # Only the parameter groups make the optimiser: another network of the same structure
    # gives the same object, so the compiled step is reused; the recipe is in the state.
    other, _ = T.build_network(NET, task.info, key=getkey())
    assert T.make_optimiser(other) is optimiser
    params = eqx.filter(net, eqx.is_inexact_array)
    rng = np.random.default_rng(0)  # numpy: eager jax.random draws compile per shape
    grads = jax.tree.map(lambda p: jnp.asarray(rng.standard_normal(p.shape), p.dtype), params)
    state = T.init_optimiser(optimiser, params, config)
    assert set(state.hyperparams) == {"lr", "recurrent_lr", "weight_decay", "warmup_steps",
                                      "steps"}  # no clip_norm: this recipe does not clip
    update = jax.jit(functools.partial(T.optimiser_update, optimiser))
    updates, _ = update(grads, state, params)
    # Adam's first step is g / (|g| + eps); AdamW adds wd * p on the regular group only.
    for u, g, p, label in zip(*(jax.tree.leaves(t) for t in (updates, grads, params, labels))):
        adam = g / (jnp.abs(g) + 1e-8)
        if label == "recurrent":
            expected = -0.01 * adam
        else:
            expected = -0.1 * (adam + 0.5 * p)
        np.testing.assert_allclose(u, expected, rtol=1e-5, atol=2e-6)


def test_clipping_scales_the_global_gradient_norm_before_both_groups(getkey):
    task = ToyTask()
    net, _ = T.build_network(NET, task.info, key=getkey())
    params = eqx.filter(net, eqx.is_inexact_array)
    recipe = T.TrainConfig(warmup_fraction=0.0, weight_decay=0.0, lr=1.0, recurrent_lr=0.5)
    clipped = dataclasses.replace(recipe, clip_norm=1.0)
    optimiser = T.make_optimiser(net)
    rng = np.random.default_rng(1)  # numpy: eager jax.random draws compile per shape
    big = jax.tree.map(lambda p: jnp.asarray(100.0 * rng.standard_normal(p.shape), p.dtype),
                       params)
    small = jax.tree.map(lambda p: jnp.asarray(1e-3 * rng.standard_normal(p.shape), p.dtype),
                         params)
    norm = jnp.sqrt(sum(jnp.sum(jnp.abs(g) ** 2) for g in jax.tree.leaves(big)))
    by_hand = jax.tree.map(lambda g: g / norm, big)

    # Compiled (the recipe is static here: one program per recipe), which costs less than the
    # dozens of small eager operations of the same two updates.
    @eqx.filter_jit
    def two_steps(config, first):
        state = T.init_optimiser(optimiser, params, config)
        _, state = T.optimiser_update(optimiser, first, state, params)
        return T.optimiser_update(optimiser, small, state, params)[0]

    # Clipping equals dividing the first gradient by its global norm by hand; the second
    # (small) gradient is under the threshold. Adam alone would be scale-invariant, so the
    # two-step comparison is what makes the clipping visible.
    expected, got = two_steps(recipe, by_hand), two_steps(clipped, big)
    unclipped = two_steps(recipe, big)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(expected)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-7)
    assert not all(np.allclose(a, b) for a, b in zip(jax.tree.leaves(got),
                                                     jax.tree.leaves(unclipped)))


def adamw_from_the_equations(params, grads, labels, config):
    """The recipe of `harness.train`'s docstring in numpy float64, one update per gradient:
    clip the global norm to c, then Adam (b1 = 0.9, b2 = 0.999, eps = 1e-8) with bias
    correction; regular: p -= lr s(t) (adam + wd p); recurrent: p -= recurrent_lr s(t) adam;
    s(t) = t / T_w for t < T_w, else (1 + cos(pi (t - T_w) / (T - T_w))) / 2."""
    b1, b2, eps = 0.9, 0.999, 1e-8
    warm, total = config.warmup_steps, config.steps
    p = [np.array(x, np.float64) for x in params]
    m = [np.zeros_like(x) for x in p]
    v = [np.zeros_like(x) for x in p]
    for t, g in enumerate(grads):
        g = [np.array(x, np.float64) for x in g]
        if config.clip_norm is not None:
            norm = np.sqrt(sum(np.sum(x * x) for x in g))
            if norm >= config.clip_norm:
                g = [x * config.clip_norm / norm for x in g]
        s = t / warm if t < warm else (1 + np.cos(np.pi * (t - warm) / (total - warm))) / 2
        for i, label in enumerate(labels):
            m[i] = b1 * m[i] + (1 - b1) * g[i]
            v[i] = b2 * v[i] + (1 - b2) * g[i] ** 2
            adam = (m[i] / (1 - b1 ** (t + 1))) / (np.sqrt(v[i] / (1 - b2 ** (t + 1))) + eps)
            if label == "recurrent":
                p[i] = p[i] - config.recurrent_lr * s * adam
            else:
                p[i] = p[i] - config.lr * s * (adam + config.weight_decay * p[i])
    return p


@pytest.mark.parametrize("clip_norm", [None, 2.0])
def test_optax_optimiser_equals_adamw_written_from_the_equations(getkey, clip_norm):
    net, _ = T.build_network(NET, ToyTask().info, key=getkey())
    labels = jax.tree.leaves(T.parameter_groups(net))
    optimiser = T.make_optimiser(net)
    # Six updates: two of warm-up, four of cosine decay (warmup_steps = int(0.34 * 6) = 2).
    config = T.TrainConfig(steps=6, warmup_fraction=0.34, lr=0.05, recurrent_lr=0.02,
                           weight_decay=0.3, clip_norm=clip_norm)
    rng = np.random.default_rng(2)
    params = eqx.filter(net, eqx.is_inexact_array)
    leaves, treedef = jax.tree.flatten(params)
    grads = [[rng.standard_normal(x.shape) for x in leaves] for _ in range(config.steps)]
    expected = adamw_from_the_equations(leaves, grads, labels, config)
    with jax.enable_x64(True):
        params = jax.tree.unflatten(treedef, [jnp.asarray(x, jnp.float64) for x in leaves])
        state = T.init_optimiser(optimiser, params, config)
        assert state.hyperparams["lr"].dtype == jnp.float64

        def update(carry, g):
            params, state = carry
            updates, state = T.optimiser_update(optimiser, g, state, params)
            return (optax.apply_updates(params, updates), state), None

        stacked = jax.tree.unflatten(treedef, [np.stack(g) for g in zip(*grads)])
        (params, _), _ = jax.jit(lambda *a: jax.lax.scan(update, *a))((params, state), stacked)
        got = jax.tree.leaves(params)
    assert {"recurrent", "regular"} == set(labels)
    for a, b in zip(got, expected):
        assert a.dtype == np.float64
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


# --------------------------------------------------------------------------------------------
# Losses and evaluation


def test_per_step_loss_scores_only_labelled_steps_of_real_examples(getkey):
    task = ToyTask(target="per_step")
    net, state = T.build_network(NET, task.info, key=getkey())
    split = task.split("val")
    batch = T.to_batch(split, np.arange(4))
    weights = jnp.array([1.0, 1.0, 1.0, 0.0])
    net = eqx.nn.inference_mode(net)
    loss, correct, count, _ = eqx.filter_jit(T.batch_sums)(net, state, batch, weights)
    forward = eqx.filter_jit(lambda net, x, n: jax.vmap(lambda x, n: net(x, n, state)[0],
                                                        axis_name="batch")(x, n))
    logits = forward(net, batch.inputs, batch.lengths)
    scored = (np.asarray(batch.labels) >= 0) & (np.asarray(weights)[:, None] > 0)
    logp = jax.nn.log_softmax(logits)
    labels = np.where(scored, np.asarray(batch.labels), 0)
    picked = np.take_along_axis(np.asarray(logp), labels[..., None], -1)[..., 0]
    assert count == scored.sum()
    np.testing.assert_allclose(loss, -picked[scored].sum(), rtol=1e-5)
    hits = (np.asarray(logits).argmax(-1) == labels) & scored
    assert correct == hits.sum()


def test_evaluate_counts_every_example_once_whatever_the_batch(getkey):
    task = ToyTask()
    net, state = T.build_network(NET, task.info, key=getkey())
    split = task.split("val")
    whole = T.evaluate(net, state, split, batch_size=len(split))
    padded = T.evaluate(net, state, split, batch_size=8)  # 20 = 8 + 8 + 4 real + 4 padding
    np.testing.assert_allclose(padded["loss"], whole["loss"], **tol(np.float32))
    assert padded["accuracy"] == whole["accuracy"]
    assert whole["accuracy"] in {k / 20 for k in range(21)}


# --------------------------------------------------------------------------------------------
# Whole runs: bit-identical repeats, resume after an interruption, divergence


def probe(step, network, state):
    # A callback row that depends on every parameter: equal rows mean equal networks.
    norm = sum(float(jnp.sum(jnp.abs(p) ** 2)) for p in
               jax.tree.leaves(eqx.filter(network, eqx.is_inexact_array)))
    return [{"kind": "probe", "param_norm2": norm}]


def test_same_seed_gives_bit_identical_rows_and_resume_changes_nothing(tmp_path, capsys):
    task = ToyTask()
    first = T.train(NET, task, RECIPE, seed=1, on_eval=probe)
    kinds = [r["kind"] for r in first.rows]
    assert kinds == ["probe", "eval", "probe", "eval", "probe", "eval", "probe", "final"]
    final = first.final
    assert final["steps"] == 6 and final["best_step"] in (2, 4, 6)
    assert 0.0 <= final["test_accuracy"] <= 1.0 and final["selection"] == "accuracy"
    assert final["params"] > final["recurrent_params"] > 0
    assert [r["step"] for r in first.rows if r["kind"] == "eval"] == [2, 4, 6]

    again = T.train(NET, task, RECIPE, seed=1, on_eval=probe)
    assert without_time(again.rows) == without_time(first.rows)
    other = T.train(NET, task, RECIPE, seed=2, on_eval=probe)
    assert without_time(other.rows) != without_time(first.rows)

    # Interrupt after the step-2 checkpoint (the callback at step 4 raises), then resume.
    path = tmp_path / "run.eqx"

    def interrupt(step, network, state):
        if step == 4:
            raise KeyboardInterrupt
        return probe(step, network, state)

    with pytest.raises(KeyboardInterrupt):
        T.train(NET, task, RECIPE, seed=1, on_eval=interrupt, checkpoint=path)
    assert path.exists()
    assert json.loads(path.read_bytes().split(b"\n", 1)[0])["step"] == 2
    resumed = T.train(NET, task, RECIPE, seed=1, on_eval=probe, checkpoint=path)
    assert "Resuming run.eqx from step 2 of 6." in capsys.readouterr().out
    assert without_time(resumed.rows) == without_time(first.rows)
    assert not path.exists()  # a finished run leaves no checkpoint


def test_a_checkpoint_of_another_run_is_not_resumed(tmp_path, capsys):
    task = ToyTask()
    path = tmp_path / "run.eqx"

    def interrupt(step, network, state):
        if step == 4:
            raise KeyboardInterrupt
        return []

    with pytest.raises(KeyboardInterrupt):
        T.train(NET, task, RECIPE, seed=5, on_eval=interrupt, checkpoint=path)
    result = T.train(NET, task, RECIPE, seed=1, checkpoint=path)
    assert "belongs to another run" in capsys.readouterr().out
    reference = T.train(NET, task, RECIPE, seed=1)
    assert without_time(result.rows) == without_time(reference.rows)


def test_a_checkpoint_of_an_older_format_is_not_misread(tmp_path, capsys):
    # Format 2 held the hand-built optimiser's state, whose leaves are not optax's.
    task = ToyTask()
    path = tmp_path / "run.eqx"
    identity = T._identity(NET, task, RECIPE, 1)
    path.write_bytes(json.dumps({"format": 2, "identity": identity, "step": 2, "rows": [],
                                 "best": None, "seconds": 0.0}).encode() + b"\n" + b"\0" * 64)
    result = T.train(NET, task, RECIPE, seed=1, checkpoint=path)
    out = capsys.readouterr().out
    assert "has format 2" in out and "reads format 3" in out and "starting afresh" in out
    assert [r["step"] for r in result.rows if r["kind"] == "eval"] == [2, 4, 6]
    assert not path.exists()


class RotRNNBeforeRename(eqx.Module):
    """`models.rotrnn.RotRNN`'s fields as they were when its log(-log gamma) was ``gamma_log``
    (now ``gamma_loglog``), in the same order."""

    M: jax.Array
    angles: jax.Array
    gamma_log: jax.Array
    B: jax.Array
    C: jax.Array
    D: jax.Array
    C_reverse: jax.Array | None
    normalise: bool = eqx.field(static=True)
    algorithm: str = eqx.field(static=True)


def test_a_checkpoint_written_before_a_field_rename_loads(tmp_path):
    # Leaves are stored by position, not by field name: a checkpoint whose RotRNN layers (in
    # the networks and the optimiser's state) had the field gamma_log resumes into today's tree.
    from linrnn_bench.models.rotrnn import RotRNN

    net, task = dataclasses.replace(NET, layer="rotrnn"), ToyTask()

    def checkpointed():  # the tree `train` checkpoints, its shapes only (nothing compiles)
        network, state = T.build_network(net, task.info, key=jax.random.PRNGKey(0))
        opt_state = T.init_optimiser(T.make_optimiser(network),
                                     eqx.filter(network, eqx.is_inexact_array), RECIPE)
        return network, state, opt_state, network, state

    # Distinct values in every array leaf, so that a leaf read into another place is seen.
    rng = np.random.default_rng(0)
    leaves, treedef = jax.tree.flatten(eqx.filter_eval_shape(checkpointed))
    tree = jax.tree.unflatten(treedef, [
        np.asarray(rng.standard_normal(x.shape) * 8, x.dtype)
        if isinstance(x, jax.ShapeDtypeStruct) else x for x in leaves])

    def before_rename(layer):
        if not isinstance(layer, RotRNN):
            return layer
        return RotRNNBeforeRename(layer.M, layer.angles, layer.gamma_loglog, layer.B, layer.C,
                                  layer.D, layer.C_reverse, layer.normalise, layer.algorithm)

    old = jax.tree.map(before_rename, tree, is_leaf=lambda x: isinstance(x, RotRNN))
    is_old = lambda x: isinstance(x, RotRNNBeforeRename)  # noqa: E731
    old_layers = [x for x in jax.tree.leaves(old, is_leaf=is_old) if is_old(x)]
    assert len(old_layers) >= 3  # the network's, the best network's, the optimiser's moments
    path = tmp_path / "run.eqx"
    identity = T._identity(net, task, RECIPE, 1)
    T.save_checkpoint(path, {"format": T._CHECKPOINT_FORMAT, "identity": identity, "step": 2,
                             "rows": [], "best": None, "seconds": 0.0}, old)

    header, loaded = T._resume(path, identity, tree)
    assert header["step"] == 2
    assert jax.tree.structure(loaded) == jax.tree.structure(tree)
    assert all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(loaded), jax.tree.leaves(tree)))
    layer = loaded[0].blocks[0].layer
    assert isinstance(layer, RotRNN)
    np.testing.assert_array_equal(layer.gamma_loglog, old_layers[0].gamma_log)


def test_non_finite_loss_stops_the_run_at_once_with_its_step(tmp_path):
    net = dataclasses.replace(NET, norm="layer")
    recipe = dataclasses.replace(RECIPE, steps=12)
    # Find the first step whose batch holds example 5, whose inputs are NaN.
    probe_split = Split(np.zeros((N, L, 1), np.float32), np.arange(N, dtype=np.int32),
                        np.full(N, L, np.int32))
    sampler = T.BatchSampler(probe_split, recipe.batch_size, seed=0)
    bad_step = next(s + 1 for s in range(12) if 5 in np.asarray(sampler(s).labels))
    assert bad_step > 2, "pick another example: the test wants an evaluation before it"

    task = ToyTask(ToyConfig(nan_example=5), kind="real")
    path = tmp_path / "run.eqx"
    with pytest.raises(Diverged, match=f"non-finite loss or gradient at step {bad_step}") as e:
        T.train(net, task, recipe, seed=0, checkpoint=path)
    rows = e.value.rows
    assert rows[-1] == {"kind": "diverged", "step": bad_step}
    assert [r["step"] for r in rows if r["kind"] == "eval"] == list(range(2, bad_step, 2))
    assert not path.exists()

    # Through the runner the run is recorded as diverged with those rows; nothing raises.
    study = Study(
        name="toy", description="toy", presets={"smoke": None, "cpu": None, "gpu": None},
        grid=lambda c: [0], run=lambda spec: T.train(net, task, recipe, seed=spec).rows,
    )
    outcome = execute(study, 0)
    assert outcome.status == "diverged" and outcome.rows == rows
    assert f"step {bad_step}" in outcome.error
