"""The generated tasks' labels, checked by means independent of the generators."""

from __future__ import annotations

import statistics
from collections import deque

import numpy as np
import pytest

from linrnn_bench import tasks
from linrnn_bench.tasks import digits, listops, lra_listops, pathfinder, selective_copy


def build(name, tmp_path, **overrides):
    return tasks.build(name, cache_dir=tmp_path, **{**tasks.preset_options(name, "smoke"),
                                                    **overrides})


# -------------------------------------------------------------------------------------------
# ListOps


def reference_value(source: str) -> int:
    """Evaluate an LRA ListOps string (with its parentheses) by recursive descent on the bare
    symbols: a second implementation, written from the task definition, not from the code."""
    symbols = source.replace("(", " ").replace(")", " ").split()
    pos = 0

    def node() -> int:
        nonlocal pos
        s = symbols[pos]
        pos += 1
        if s.isdigit():
            return int(s)
        args = []
        while symbols[pos] != "]":
            args.append(node())
        pos += 1
        return {
            "[MIN": min,
            "[MAX": max,
            "[MED": lambda a: int(statistics.median(a)),
            "[SM": lambda a: sum(a) % 10,
        }[s](args)

    value = node()
    assert pos == len(symbols)
    return value


def depth_and_widest(tokens) -> tuple[int, int]:
    depth = deepest = widest = 0
    counts = []
    for t in tokens:
        s = listops.SYMBOLS[int(t)]
        if s in listops.OPERATORS:
            if counts:
                counts[-1] += 1
            depth += 1
            deepest = max(deepest, depth)
            counts.append(0)
        elif s == "]":
            widest = max(widest, counts.pop())
            depth -= 1
        else:
            if counts:
                counts[-1] += 1
            deepest = max(deepest, depth + 1)
    return deepest, widest


def test_worked_examples():
    assert reference_value("( ( ( [MAX 2 ) 9 ) ] )") == 9
    assert listops.apply("[MED", [1, 2, 3, 4]) == 2  # mean 2.5 of the middle pair, truncated
    assert listops.apply("[MED", [3, 1, 8]) == 3
    assert listops.apply("[SM", [7, 5, 9]) == 1
    tokens = [listops.VOCAB[s] for s in "[SM [MED 3 1 8 ] 5 ]".split()]
    assert listops.evaluate(tokens) == 8
    assert listops.to_source(tokens) == "( ( ( [SM ( ( ( ( [MED 3 ) 1 ) 8 ) ] ) ) 5 ) ] )"
    assert reference_value(listops.to_source(tokens)) == 8


def test_listops_labels_lengths_and_tree_limits(tmp_path):
    task = build("listops", tmp_path, max_depth=4, max_args=5, min_length=12, max_length=80)
    cfg = task.config
    seen = set()
    for s in tasks.SPLITS:
        split = task.split(s)
        for tokens, label, length in zip(split.inputs, split.labels, split.lengths):
            assert tokens[length - 1] == listops.VOCAB["<eos>"]
            tree = tokens[: length - 1]
            assert cfg.min_length < tree.size < cfg.max_length
            source = listops.to_source(tree)
            assert reference_value(source) == label
            deepest, widest = depth_and_widest(tree)
            assert deepest <= cfg.max_depth and 2 <= widest <= cfg.max_args
            # The S4 tokenisation of LRA's text form gives the same ids back.
            assert lra_listops.tokenise(source, where="test") == tree.tolist()
            seen.add(tree.tobytes())
    assert len(seen) == sum(len(task.split(s)) for s in tasks.SPLITS), "duplicate trees"
    labels = np.concatenate([task.split(s).labels for s in tasks.SPLITS])
    assert np.unique(labels).size >= 8  # every class turns up at this size, bar a rare one


def arities(tokens) -> list[int]:
    """The number of arguments of every operator in a tree."""
    out, open_counts = [], []
    for t in tokens:
        s = listops.SYMBOLS[int(t)]
        if s == "]":
            out.append(open_counts.pop())
            continue
        if open_counts:
            open_counts[-1] += 1
        if s in listops.OPERATORS:
            open_counts.append(0)
    return out


def test_listops_operator_and_argument_frequencies_are_uniform():
    # Generator rules, before the length filter and deduplication reshape the sample: an
    # operator at the root with probability 0.25, operators uniform over the four, argument
    # counts uniform on 2..max_args.
    u = np.random.default_rng(0).random(10**6).tolist()
    draw = iter(u).__next__
    trees = []
    for _ in range(4000):
        out = []
        assert listops._draw_tree(draw, 3, 4, 10**6, out)
        trees.append(out)
    assert abs(np.mean([len(t) > 1 for t in trees]) - 0.25) < 0.03
    ops = [t for tree in trees for t in tree if 1 <= t <= 4]
    shares = np.bincount(ops, minlength=5)[1:] / len(ops)
    assert np.all(np.abs(shares - 0.25) < 0.03)
    counts = np.bincount([a for tree in trees for a in arities(tree)], minlength=5)[2:]
    assert np.all(np.abs(counts / counts.sum() - 1 / 3) < 0.03)
    assert max(depth_and_widest(t)[0] for t in trees) == 3  # digits only at max_depth


def test_listops_drops_duplicates():
    cfg = listops.ListOpsConfig(min_length=0, max_length=400, max_depth=3, max_args=4)
    trees, _ = listops.sample_trees(cfg, 2000, np.random.default_rng(0), set())
    assert len({tuple(t) for t in trees}) == len(trees)
    # A one-token tree is a digit; deduplicated, each of the ten occurs exactly once.
    assert sorted(tree[0] for tree in trees if len(tree) == 1) == list(range(5, 15))


# -------------------------------------------------------------------------------------------
# Pathfinder: labels against a flood fill


def find_markers(image: np.ndarray, radius: int) -> list[tuple[int, int]]:
    """Centres of the full (2r+1)-squares of drawn pixels, by brute force."""
    S, side = image.shape[0], 2 * radius + 1
    out = []
    for y in range(S - side + 1):
        for x in range(S - side + 1):
            if image[y : y + side, x : x + side].all():
                out.append((y + radius, x + radius))
    return out


def flood_reaches(image: np.ndarray, start, goal, reach: int) -> bool:
    """Breadth-first search over drawn pixels, joining pixels at Chebyshev distance <= reach."""
    S = image.shape[0]
    seen = np.zeros_like(image, dtype=bool)
    queue = deque([start])
    seen[start] = True
    while queue:
        y, x = queue.popleft()
        if (y, x) == goal:
            return True
        for ny in range(max(0, y - reach), min(S, y + reach + 1)):
            for nx in range(max(0, x - reach), min(S, x + reach + 1)):
                if image[ny, nx] and not seen[ny, nx]:
                    seen[ny, nx] = True
                    queue.append((ny, nx))
    return False


@pytest.mark.parametrize("name", ["pathfinder", "pathx"])
def test_pathfinder_labels_match_a_flood_fill(name, tmp_path):
    task = build(name, tmp_path, num_train=24, num_val=4, num_test=4)
    cfg = task.config
    side = cfg.image_size
    split = task.split("train")
    assert sorted(np.bincount(split.labels)) == [12, 12]
    for inputs, label in zip(split.inputs, split.labels):
        image = inputs[:, 0].reshape(side, side) > 0
        markers = find_markers(image, cfg.marker_radius)
        assert len(markers) == 2
        # Reach = the blank gap between paddles + 1: joins the paddles of one contour.
        assert flood_reaches(image, markers[0], markers[1], cfg.paddle_margin + 1) == bool(label)


def test_pathfinder_draw_returns_its_markers_and_distractors():
    cfg = pathfinder.PathfinderConfig(num_distractors=5)
    image, centres = pathfinder.draw(np.random.default_rng(1), cfg, connected=True)
    assert image.dtype == np.uint8 and set(np.unique(image)) == {0, 255}
    assert sorted(map(tuple, centres)) == sorted(find_markers(image > 0, cfg.marker_radius))
    # Two long contours and five short ones: more drawn pixels than the two long ones alone.
    assert (image > 0).sum() > 2 * cfg.contour_length * cfg.paddle_length


def test_pathfinder_token_encoding_is_the_pixel_plus_one(tmp_path):
    real = build("pathfinder", tmp_path, encoding="real").split("val")
    tokens = build("pathfinder", tmp_path, encoding="tokens")
    assert tokens.info.input_kind == "tokens" and tokens.info.vocab_size == 257
    ids = tokens.split("val").inputs
    assert set(np.unique(ids)) <= {1, 256}
    np.testing.assert_array_equal(ids == 256, real.inputs[..., 0] == 1.0)


# -------------------------------------------------------------------------------------------
# MQAR, selective copying, adding


def test_mqar_queries_ask_for_the_value_of_their_key(tmp_path):
    task = build("mqar", tmp_path)
    cfg = task.config
    first_value = 1 + cfg.num_keys
    split = task.split("train")
    for inputs, labels in zip(split.inputs, split.labels):
        pairs = inputs[: 2 * cfg.num_kv_pairs].reshape(-1, 2)
        assert np.all((pairs[:, 0] >= 1) & (pairs[:, 0] < first_value))
        assert np.all(pairs[:, 1] >= first_value)
        assert len(set(pairs[:, 0])) == cfg.num_kv_pairs  # distinct keys
        value_of = dict(zip(pairs[:, 0].tolist(), (pairs[:, 1] - first_value).tolist()))
        scored = np.flatnonzero(labels >= 0)
        assert scored.size == cfg.num_kv_pairs and scored.min() >= 2 * cfg.num_kv_pairs
        assert sorted(inputs[scored].tolist()) == sorted(value_of)  # each key asked once
        for p in scored:
            assert labels[p] == value_of[int(inputs[p])]


def test_mqar_power_law_favours_early_queries():
    cfg = tasks.make_config("mqar", seq_len=256, num_kv_pairs=4, vocab_size=64, power_a=0.01)
    from linrnn_bench.tasks import mqar

    _, labels = mqar.sample(cfg, 2000, np.random.default_rng(0))
    positions = np.nonzero(labels >= 0)[1] - 2 * cfg.num_kv_pairs
    # With p(gap) ~ gap**-0.99, half of the mass sits in the first few slots.
    assert np.median(positions) < 0.2 * (cfg.seq_len - 2 * cfg.num_kv_pairs)


def test_selective_copy_labels_are_the_data_tokens_in_order(tmp_path):
    task = build("selective_copy", tmp_path)
    cfg = task.config
    context = cfg.gap_length + cfg.num_tokens
    split = task.split("train")
    for inputs, labels in zip(split.inputs, split.labels):
        data = inputs[:context][inputs[:context] != selective_copy.BLANK]
        assert data.size == cfg.num_tokens
        np.testing.assert_array_equal(labels[context:], data - selective_copy.FIRST_DATA)
        assert np.all(inputs[context:] == selective_copy.MARKER)
        assert np.all(labels[:context] == -1)


def test_adding_target_is_the_sum_of_the_two_marked_values(tmp_path):
    task = build("adding", tmp_path)
    T = task.config.seq_len
    for s in tasks.SPLITS:
        split = task.split(s)
        values, markers = split.inputs[..., 0], split.inputs[..., 1]
        assert np.all(markers.sum(axis=1) == 2)
        assert np.all(markers[:, : T // 2].sum(axis=1) == 1)
        np.testing.assert_allclose((values * markers).sum(axis=1), split.labels, rtol=1e-6)
        assert np.all((values >= 0) & (values < 1))


# -------------------------------------------------------------------------------------------
# Digits


def test_digits_are_scikit_learns_images(tmp_path):
    plain = tasks.build("digits", cache_dir=tmp_path)
    assert sum(len(plain.split(s)) for s in tasks.SPLITS) == digits.NUM_EXAMPLES
    data, labels = digits.read_digits()
    rows = {tuple(((r / 16.0 - 0.5) / 0.5).astype(np.float32)): y for r, y in zip(data, labels)}
    split = plain.split("test")
    for x, y in zip(split.inputs[..., 0], split.labels):
        assert rows[tuple(x)] == y
    permuted = tasks.build("digits", cache_dir=tmp_path, permute=True)
    order = digits.permutation(0)
    np.testing.assert_array_equal(permuted.split("val").inputs, plain.split("val").inputs[:, order])
    other_seed = tasks.build("digits", cache_dir=tmp_path, permute=True, seed=5)
    np.testing.assert_array_equal(digits.permutation(other_seed.config.permutation_seed), order)
