"""The network around the layers: config validation, shapes, masking, states, groups, counts."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

from linrnn_bench import models
from linrnn_bench.models.network import Network, NetworkConfig, count_parameters, recurrent_mask

from helpers import tol

H, P, L = 8, 8, 12


def make(config: NetworkConfig, key, **io):
    io = {"input_kind": "tokens", "input_size": 6, "num_classes": 3, **io}
    return eqx.nn.make_with_state(Network)(config, key=key, **io)


@eqx.filter_jit  # one compilation per structure costs less than one per eager primitive
def batched(network, state, x, lengths, key=None):
    def one(x, n):
        return network(x, n, state, key=key)

    return jax.vmap(one, axis_name="batch", out_axes=(0, None))(x, lengths)


# --------------------------------------------------------------------------------------------
# Config


def test_config_normalises_and_validates_layer_options():
    c = NetworkConfig(layer="lru", layer_options=(("r_max", 0.9), ("bidirectional", True)))
    assert c.layer_options == (("bidirectional", True), ("r_max", 0.9))
    assert c.layer_config().r_max == 0.9
    with pytest.raises(ValueError, match="Unknown option.*'nonsense'.*accepted options"):
        NetworkConfig(layer="lru", layer_options=(("nonsense", 1),))
    with pytest.raises(ValueError, match="more than once"):
        NetworkConfig(layer="lru", layer_options=(("r_max", 0.9), ("r_max", 0.8)))
    with pytest.raises(ValueError, match="must be a number, string"):
        NetworkConfig(layer="lru", layer_options=(("r_max", [object()]),))


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("norm", "group", r"norm='group' is not accepted; accepted values: \['batch', 'layer'\]"),
        ("activation", "relu", r"accepted values: \['gelu', 'glu', 'half_glu'\]"),
        ("pooling", "max", r"accepted values: \['mean', 'last'\]"),
        ("layer", "gru", r"layer='gru' is not accepted"),
        ("depth", 0, r"depth must be a positive integer, got 0"),
        ("dropout", 1.0, r"dropout=1.0 drops everything"),
        ("dropout", -0.1, r"must lie in \[0.0, 1.0\]"),
    ],
)
def test_config_rejects_bad_values(field, value, message):
    # Under pytest, jaxtyping's run-time checker rejects a wrong Literal before __post_init__
    # runs; outside it (the command line), __post_init__ is what speaks, so test its message.
    config = NetworkConfig()
    object.__setattr__(config, field, value)
    with pytest.raises(ValueError, match=message):
        config.__post_init__()


def test_network_rejects_bad_task_description(getkey):
    c = NetworkConfig(depth=1, d_model=H, d_state=P)
    # (TypeError: jaxtyping's checker under pytest; ValueError: the validation elsewhere.)
    with pytest.raises((TypeError, ValueError), match="input_kind"):
        make(c, getkey(), input_kind="image")
    with pytest.raises(ValueError, match="regression target has num_classes=1"):
        make(c, getkey(), target="regression", num_classes=3)
    with pytest.raises(ValueError, match="pair task .* needs target='class'"):
        make(c, getkey(), pair=True, target="per_step")


# --------------------------------------------------------------------------------------------
# Shapes for every registered layer and every head


TOKENS = np.random.default_rng(0).integers(1, 6, (2, L)).astype(np.int32)
LENGTHS = np.array([L, 5], dtype=np.int32)


@pytest.mark.parametrize("layer", models.names())
def test_every_layer_gives_finite_logits(layer, getkey):
    c = NetworkConfig(layer=layer, depth=1, d_model=H, d_state=P)
    net, state = make(c, getkey())
    out, new_state = batched(net, state, jnp.asarray(TOKENS), jnp.asarray(LENGTHS))
    assert out.shape == (2, 3) and bool(jnp.all(jnp.isfinite(out)))
    assert isinstance(new_state, eqx.nn.State)


def test_every_head_and_encoder(getkey):
    c = NetworkConfig(layer="lru", depth=1, d_model=H, d_state=P, norm="layer")
    tokens, lengths = jnp.asarray(TOKENS), jnp.asarray(LENGTHS)
    net, state = make(c, getkey(), target="per_step")
    assert batched(net, state, tokens, lengths)[0].shape == (2, L, 3)

    feats = jnp.ones((2, L, 4))
    net, state = make(c, getkey(), input_kind="real", input_size=4, target="regression",
                      num_classes=1)
    assert isinstance(net.encoder, eqx.nn.Linear)
    assert batched(net, state, feats, lengths)[0].shape == (2,)

    net, state = make(c, getkey(), pair=True)
    pair_x = jnp.stack([tokens, tokens[::-1]], 1)
    pair_n = jnp.stack([lengths, lengths[::-1]], 1)
    out, _ = batched(net, state, pair_x, pair_n)
    assert out.shape == (2, 3)
    # The two towers share weights: swapping a and b changes only the sign of a - b.
    swapped, _ = batched(net, state, pair_x[:, ::-1], pair_n[:, ::-1])
    assert not np.allclose(out, swapped)


# --------------------------------------------------------------------------------------------
# One bidirectional, two-block network serves the tests below (building one costs seconds).

BIDIRECTIONAL = NetworkConfig(layer="lru", layer_options=(("bidirectional", True),), depth=2,
                              d_model=H, d_state=P, norm="batch", dropout=0.5)


@pytest.fixture(scope="module")
def shared():
    return make(BIDIRECTIONAL, jr.PRNGKey(7))


@eqx.filter_jit
def tower(network, state, x, length):
    return network._tower(x, length, state, None)


# Masking: what lies past a sequence's length never changes its prediction


@pytest.mark.parametrize("which", ["shared", "layer-norm-last"])
def test_padding_never_changes_the_output_even_bidirectional(which, shared, getkey):
    if which == "shared":
        net, state = shared
    else:
        c = NetworkConfig(layer="lru", depth=1, d_model=H, d_state=P, norm="layer",
                          pooling="last")
        net, state = make(c, getkey())
    net = eqx.nn.inference_mode(net)
    rng = np.random.default_rng(1)
    x = rng.integers(1, 6, (1, L)).astype(np.int32)
    lengths = jnp.array([7], dtype=jnp.int32)
    other = x.copy()
    other[:, 7:] = rng.integers(1, 6, (1, L - 7))
    a, _ = batched(net, state, jnp.asarray(x), lengths)
    b, _ = batched(net, state, jnp.asarray(other), lengths)
    np.testing.assert_allclose(a, b, **tol(np.float32))
    # ... while a change inside the valid steps does change it (the test can fail).
    other[:, 3] = (x[:, 3] % 5) + 1
    c_, _ = batched(net, state, jnp.asarray(other), lengths)
    assert not np.allclose(a, c_)
    # Pooling reads valid steps only: the mean over them, or the last one.
    e, mask, _ = tower(net, state, jnp.asarray(x[0]), lengths[0])
    expected = e[6] if net.pooling == "last" else jnp.mean(e[:7], axis=0)
    np.testing.assert_allclose(net._pool(e, mask), expected, **tol(np.float32))


# Per-layer hidden states for the stability study


def test_layer_states_are_each_layers_states_on_its_input(shared):
    net, state = shared
    x = jnp.asarray(np.random.default_rng(3).integers(1, 6, (L,)), dtype=jnp.int32)
    states = eqx.filter_jit(net.layer_states)(x, jnp.array(9), state)
    assert len(states) == 2
    assert all(s.shape == (L, net.blocks[0].layer.state_size) for s in states)
    assert all(jnp.iscomplexobj(s) for s in states)
    # Block 0 by hand: the normalised (running statistics), masked embedding.
    inference = eqx.nn.inference_mode(net)
    e = jax.vmap(net.encoder)(x)
    u, _ = inference.blocks[0].norm(e.T, state)
    u = u.T * (jnp.arange(L) < 9)[:, None]
    np.testing.assert_allclose(states[0], net.blocks[0].layer.hidden_states(u), **tol(np.float32))
    # Padding steps see a zero input: the state only decays there.
    lam = net.blocks[0].layer.discrete_system().lam.reshape(-1)
    np.testing.assert_allclose(states[0][9], lam * states[0][8], **tol(np.float32))


# Dropout, parameter groups, counts, timescales


def test_dropout_drops_whole_channels_and_only_in_training(shared):
    block = shared[0].blocks[0]
    y = jnp.ones((L, H))
    dropped = block._drop(y, jr.PRNGKey(3))
    kept = np.asarray(dropped[0] != 0)
    assert 0 < kept.sum() < H
    np.testing.assert_array_equal(np.asarray(dropped != 0), np.broadcast_to(kept, (L, H)))
    np.testing.assert_allclose(dropped[:, kept], 2.0)
    np.testing.assert_array_equal(block._drop(y, None), y)


def test_recurrent_mask_marks_only_the_layers_recurrent_arrays(shared):
    net, _ = shared
    mask = recurrent_mask(net)
    for block, block_mask in zip(net.blocks, mask.blocks):
        expected = jax.tree.leaves(block.layer.recurrent_mask())
        assert jax.tree.leaves(block_mask.layer) == expected
        assert any(expected) and not all(expected)
        assert not any(jax.tree.leaves(block_mask.norm))
        assert not any(jax.tree.leaves(block_mask.out2))
    assert not any(jax.tree.leaves(mask.encoder)) and not any(jax.tree.leaves(mask.head))


def test_count_parameters_counts_complex_twice_and_skips_integers(shared):
    tree = {"a": jnp.zeros((2, 3)), "b": jnp.zeros(4, jnp.complex64), "c": jnp.zeros(3, jnp.int32)}
    assert count_parameters(tree) == 6 + 8
    net, _ = shared
    layers = sum(count_parameters(b.layer) for b in net.blocks)
    # embedding 6 x H; per block BatchNorm weight + bias and the half-GLU gate H x H + H;
    # head H x 3 + 3
    assert count_parameters(net) == layers + 6 * H + 2 * (2 * H + H * H + H) + (H * 3 + 3)


def test_rescaled_scales_timescales_or_says_why_not(shared, getkey):
    net, _ = shared
    assert net.rescaled(1.0) is net
    with pytest.raises(NotImplementedError, match="LRU .* no timescale Delta"):
        net.rescaled(2.0)
    s4d, _ = make(NetworkConfig(layer="s4d", depth=2, d_model=H, d_state=P), getkey())
    twice = s4d.rescaled(2.0)
    for block, new in zip(s4d.blocks, twice.blocks):
        assert eqx.tree_equal(new.layer, block.layer.rescaled(2.0))
        assert not eqx.tree_equal(new.layer, block.layer)
    assert eqx.tree_equal(twice.encoder, s4d.encoder) and eqx.tree_equal(twice.head, s4d.head)
