"""The task interface: registry, validation, presets, the array contract, determinism, caching."""

from __future__ import annotations

import dataclasses
import logging

import numpy as np
import pytest

from linrnn_bench import tasks
from linrnn_bench.tasks import _cache

# Tasks that build with no data on disk (generated, or data shipped in installed packages).
SELF_CONTAINED = ["listops", "pathfinder", "pathx", "mqar", "selective_copy", "adding", "digits",
                  "ucr"]
LOADERS = [n for n in tasks.names() if n not in SELF_CONTAINED]


def smoke(name: str, **overrides):
    return {**tasks.preset_options(name, "smoke"), **overrides}


def arrays_of(task) -> dict[str, np.ndarray]:
    out = {}
    for s in tasks.SPLITS:
        split = task.split(s)
        out.update({f"{s}/inputs": split.inputs, f"{s}/labels": split.labels,
                    f"{s}/lengths": split.lengths})
    return out


def assert_same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


# -------------------------------------------------------------------------------------------
# Registry and validation


def test_registry_lists_every_task_with_one_line_and_three_presets():
    assert set(SELF_CONTAINED) | set(LOADERS) == set(tasks.names())
    assert len(tasks.names()) == 16
    for name in tasks.names():
        line = tasks.describe(name)
        assert line and "\n" not in line and len(line) < 140, name
        cls = tasks.config_class(name)
        assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen, name
        assert "seed" in {f.name for f in dataclasses.fields(cls)}, name
        for preset in tasks.PRESETS:
            options = tasks.preset_options(name, preset)
            if name in LOADERS:
                options["path"] = "/data/release"  # existence is checked when building
            assert isinstance(tasks.make_config(name, **options), cls)


def test_every_task_has_a_label_as_papers_write_it():
    labels = {name: tasks.label(name) for name in tasks.names()}
    assert labels["listops"] == "ListOps" and labels["pathx"] == "Path-X"
    assert all(label and "_" not in label for label in labels.values()), labels
    assert len(set(labels.values())) == len(labels)  # no two tasks read the same
    # A name that depends on the options: the UCR/UEA set, digits permuted or not.
    assert tasks.label("ucr", {"dataset": "JapaneseVowels"}) == "JapaneseVowels"
    assert tasks.label("ucr") == "UCR/UEA"
    assert tasks.label("digits", {"permute": True}) == "Permuted digits"
    # A task no registration knows (an outside one, an old store's) is named after its key.
    assert tasks.label("my_new_task") == "My new task" == tasks.default_label("my_new_task")
    with pytest.raises(ValueError, match="label must be one line"):
        dataclasses.replace(tasks._registry.spec("adding"), label="two\nlines")


def test_unknown_task_lists_the_accepted_ones():
    with pytest.raises(ValueError, match="Unknown task 'list_ops'.*accepted tasks: listops"):
        tasks.build("list_ops")


def test_unknown_option_lists_the_accepted_ones():
    with pytest.raises(ValueError, match=r"Unknown option\(s\) \['max_len'\].*max_length"):
        tasks.build("listops", max_len=10)


@pytest.mark.parametrize(
    "name, options, message",
    [
        ("listops", dict(max_depth=1), r"listops.max_depth=1 .*integer >= 2"),
        ("listops", dict(min_length=10, max_length=11), "no length lies strictly between"),
        ("listops", dict(num_train=2.5), "listops.num_train must be an integer"),
        ("listops", dict(append_eos="yes"), "listops.append_eos must be true or false"),
        ("pathfinder", dict(encoding="rgb"), r"accepted values: \['real', 'tokens'\]"),
        ("mqar", dict(seq_len=16, num_kv_pairs=8), "at least 4 \\* num_kv_pairs = 32"),
        ("ucr", dict(dataset="Pig"), r"ucr.dataset='Pig' is not accepted; accepted values: \["),
        ("digits", dict(val_size=1000, test_size=900), "leaves no training example"),
        ("adding", dict(seq_len=True), "adding.seq_len must be an integer"),
        ("adding", dict(seed=-1), r"adding.seed=-1 is not accepted; .*integer >= 0"),
        ("pathx", dict(num_val=0), r"pathfinder.num_val=0 .*integer >= 1"),
        ("mqar", dict(power_a="x"), r"mqar.power_a must be a number in \(0.0, 1.0\), got 'x'"),
    ],
)
def test_bad_values_say_what_is_accepted(name, options, message):
    with pytest.raises(ValueError, match=message):
        tasks.build(name, **options)


def test_loader_without_path_says_path_is_needed():
    with pytest.raises(ValueError, match=r"needs option\(s\) \['path'\]"):
        tasks.build("lra_text")


def test_unknown_preset_and_split_are_errors(tmp_path):
    with pytest.raises(ValueError, match="accepted presets: smoke, cpu, gpu"):
        tasks.preset_options("listops", "tpu")
    task = tasks.build("adding", cache_dir=tmp_path, **smoke("adding"))
    with pytest.raises(ValueError, match="accepted splits: train, val, test"):
        task.split("validation")


# -------------------------------------------------------------------------------------------
# The array contract, over every self-contained task


@pytest.mark.parametrize("name", SELF_CONTAINED)
def test_smoke_task_follows_the_array_contract(name, tmp_path):
    task = tasks.build(name, cache_dir=tmp_path, **smoke(name))
    info = task.info
    assert info.name == name and info.description == tasks.describe(name)
    assert (info.vocab_size is None) == (info.input_kind == "real")
    assert (info.input_dim is None) == (info.input_kind == "tokens")
    for s in tasks.SPLITS:
        split = task.split(s)  # checked against the conventions (tasks.check_split)
        assert len(split) > 0
        steps = np.arange(info.seq_len)
        padded = steps >= split.lengths[..., None]
        assert not np.any(split.inputs[padded]), f"{name}/{s}: padding is not zero"
        if info.target == "per_step":
            assert np.all(split.labels[padded] == -1)
            assert np.any(split.labels >= 0, axis=1).all(), "a sequence with nothing scored"
    if info.target == "class":
        seen = np.unique(task.split("train").labels)
        assert seen.size >= min(info.num_classes, 2)


def test_contract_check_rejects_broken_splits():
    info = tasks.TaskInfo(name="t", description="d", seq_len=4, variable_length=True,
                          input_kind="tokens", vocab_size=5, num_classes=3)
    good = tasks.Split(np.ones((2, 4), np.int32), np.array([0, 2], np.int32),
                       np.array([4, 1], np.int32))
    tasks.check_split(info, good, where="t")
    bad = [
        dataclasses.replace(good, labels=np.array([0, 3], np.int32)),
        dataclasses.replace(good, inputs=np.ones((2, 4), np.int64)),
        dataclasses.replace(good, inputs=np.full((2, 4), 5, np.int32)),
        dataclasses.replace(good, lengths=np.array([5, 1], np.int32)),
    ]
    for split in bad:
        with pytest.raises(tasks.ContractError):
            tasks.check_split(info, split, where="t")


# -------------------------------------------------------------------------------------------
# Determinism


@pytest.mark.parametrize("name", SELF_CONTAINED)
def test_same_seed_same_arrays_different_seed_different_arrays(name):
    a = arrays_of(tasks.build(name, use_cache=False, **smoke(name, seed=3)))
    b = arrays_of(tasks.build(name, use_cache=False, **smoke(name, seed=3)))
    c = arrays_of(tasks.build(name, use_cache=False, **smoke(name, seed=4)))
    assert_same(a, b)
    differs = [k for k in a if a[k].shape != c[k].shape or not np.array_equal(a[k], c[k])]
    assert differs, f"{name}: seeds 3 and 4 gave identical arrays"


@pytest.mark.parametrize("name", ["listops", "mqar", "adding"])
def test_evaluation_splits_do_not_move_when_the_training_size_changes(name):
    small = tasks.build(name, use_cache=False, **smoke(name, num_train=50))
    large = tasks.build(name, use_cache=False, **smoke(name, num_train=90))
    for s in ("val", "test"):
        np.testing.assert_array_equal(small.split(s).inputs, large.split(s).inputs)
        np.testing.assert_array_equal(small.split(s).labels, large.split(s).labels)
    assert len(small.split("train")) == 50 and len(large.split("train")) == 90


# -------------------------------------------------------------------------------------------
# Caching


def test_second_build_is_a_cache_hit_with_the_same_arrays(tmp_path):
    first = tasks.build("listops", cache_dir=tmp_path, **smoke("listops"))
    second = tasks.build("listops", cache_dir=tmp_path, **smoke("listops"))
    assert not first.cache_hit and second.cache_hit
    assert first.cache_path == second.cache_path and first.cache_path.parent == tmp_path
    assert_same(arrays_of(first), arrays_of(second))
    other = tasks.build("listops", cache_dir=tmp_path, **smoke("listops", seed=1))
    assert not other.cache_hit and other.cache_path != first.cache_path
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp left


def test_cache_key_ignores_the_cache_directory(tmp_path):
    a = tasks.build("adding", cache_dir=tmp_path / "a", **smoke("adding"))
    b = tasks.build("adding", cache_dir=tmp_path / "b", **smoke("adding"))
    assert a.cache_path.name == b.cache_path.name and a.cache_path != b.cache_path


def test_cache_location_follows_linrnn_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LINRNN_CACHE", str(tmp_path))
    task = tasks.build("adding", **smoke("adding"))
    assert task.cache_path.parent == tmp_path / "tasks"
    monkeypatch.delenv("LINRNN_CACHE")
    assert _cache.default_dir().name == "tasks" and _cache.default_dir().parent.name == ".cache"


def _truncate(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _flip_array_byte(path):
    # A byte inside the stored arrays (npz is an uncompressed zip): the file still opens, only
    # the checksum can tell.
    data = bytearray(path.read_bytes())
    offset = data.index(b"\x93NUMPY") + 200
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


def _garbage(path):
    path.write_bytes(b"not a zip file at all")


@pytest.mark.parametrize("corrupt", [_truncate, _flip_array_byte, _garbage])
def test_corrupt_cache_file_is_detected_and_regenerated(tmp_path, caplog, corrupt):
    first = tasks.build("mqar", cache_dir=tmp_path, **smoke("mqar"))
    corrupt(first.cache_path)
    with pytest.raises(_cache.CacheCorrupt):
        _cache.load(first.cache_path, cache_key=first.cache_path.stem.split("-")[-1])
    with caplog.at_level(logging.WARNING, logger="linrnn_bench.tasks"):
        again = tasks.build("mqar", cache_dir=tmp_path, **smoke("mqar"))
    assert not again.cache_hit
    assert any("corrupt" in r.getMessage() for r in caplog.records)
    assert_same(arrays_of(first), arrays_of(again))
    third = tasks.build("mqar", cache_dir=tmp_path, **smoke("mqar"))
    assert third.cache_hit  # the regenerated file is whole again


def test_cache_file_under_another_key_is_not_used(tmp_path):
    task = tasks.build("adding", cache_dir=tmp_path, **smoke("adding"))
    with pytest.raises(_cache.CacheCorrupt, match="expected key"):
        _cache.load(task.cache_path, cache_key="0" * 16)
