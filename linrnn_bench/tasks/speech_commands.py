"""Loader: Speech Commands v0.02 (Warden 2018), 35 words, raw 16 kHz waveforms (length 16000).

``path`` is the extracted ``speech_commands_v0.02`` directory: one folder per word holding
16-bit mono 16 kHz ``.wav`` clips of at most one second, the ``_background_noise_`` folder
(not used), and the official ``validation_list.txt`` and ``testing_list.txt`` (one
``<word>/<file>.wav`` per line). A clip in neither list is a training clip. All 35 words are
classes, indexed in sorted order (S4's 35-class setting, which the S4, S5, LRU and RotRNN
papers report).

As in S4's loader: samples are ``int16 / 2**15``; clips shorter than one second are
zero-padded to 16000 samples (so every example has length 16000: the padding is silence, as in
the published setting, not masked); inputs are then standardised with the mean and standard
deviation of the training waveforms.

``speech_commands_8khz`` is the zero-shot variant: every split holds the same clips subsampled
by 2 (every other sample, length 8000, standardised with the 16 kHz training statistics), and
``info.timescale = 2.0`` tells the harness to multiply every layer's timescale by 2 when it
evaluates on it a model trained on ``speech_commands`` (S4/S5's 8 kHz test). It is meant for
evaluation, not for training.
"""

from __future__ import annotations

import dataclasses
import wave
from pathlib import Path

import numpy as np

from . import _loader, _util
from ._base import SPLITS, Split, TaskInfo
from ._registry import TaskSpec

CLASSES: tuple[str, ...] = tuple(sorted((
    "backward", "bed", "bird", "cat", "dog", "down", "eight", "five", "follow", "forward",
    "four", "go", "happy", "house", "learn", "left", "marvin", "nine", "no", "off", "on",
    "one", "right", "seven", "sheila", "six", "stop", "three", "tree", "two", "up", "visual",
    "wow", "yes", "zero",
)))
SAMPLE_RATE = 16000
LENGTH = 16000
LISTS = {"val": "validation_list.txt", "test": "testing_list.txt"}


@dataclasses.dataclass(frozen=True)
class SpeechCommandsConfig(_loader.LoaderConfig):
    """Options of the Speech Commands loader (`tasks._loader.LoaderConfig`; no others)."""

    expected = (
        "speech_commands_v0.02: the 35 word folders of .wav clips, validation_list.txt and "
        "testing_list.txt"
    )


def clip_lists(cfg: SpeechCommandsConfig) -> dict[str, list[str]]:
    """``{"train": [...], "val": [...], "test": [...]}`` of ``<word>/<file>.wav`` names."""
    root = _util.require_dir(Path(cfg.path), f"Speech Commands ({cfg.expected})")
    listed: dict[str, list[str]] = {}
    for split, name in LISTS.items():
        text = _util.require_file(root / name, f"the official {split} list").read_text()
        listed[split] = sorted({line.strip() for line in text.splitlines() if line.strip()})
    held = set(listed["val"]) | set(listed["test"])
    train = []
    for word in CLASSES:
        folder = _util.require_dir(root / word, f"the folder of the word {word!r}")
        train += [f"{word}/{p.name}" for p in sorted(folder.glob("*.wav"))
                  if f"{word}/{p.name}" not in held]
    for split, names in listed.items():
        bad = [n for n in names if n.split("/")[0] not in CLASSES]
        if bad:
            raise ValueError(
                f"{root / LISTS[split]}: {bad[0]!r} is not <one of the 35 words>/<file>.wav."
            )
    return {"train": train, "val": listed["val"], "test": listed["test"]}


def read_wav(path: Path) -> np.ndarray:
    """One clip: int16 samples, at most 16000, zero-padded to exactly 16000."""
    if not path.is_file():
        raise FileNotFoundError(f"Expected the clip {path} (listed or in its word folder).")
    try:
        with wave.open(str(path), "rb") as w:
            channels, width, rate = w.getnchannels(), w.getsampwidth(), w.getframerate()
            frames = w.readframes(w.getnframes())
    except (wave.Error, EOFError) as e:
        raise ValueError(f"{path}: not a readable WAV file ({e}).") from None
    if (channels, width, rate) != (1, 2, SAMPLE_RATE):
        raise ValueError(
            f"{path}: expected 16-bit mono {SAMPLE_RATE} Hz, got {channels} channel(s), "
            f"{8 * width}-bit, {rate} Hz."
        )
    samples = np.frombuffer(frames, dtype="<i2")
    if samples.size > LENGTH:
        raise ValueError(f"{path}: {samples.size} samples, more than one second ({LENGTH}).")
    out = np.zeros(LENGTH, dtype=np.int16)
    out[: samples.size] = samples
    return out


def make_at(cfg: SpeechCommandsConfig, step: int) -> dict[str, np.ndarray]:
    """The clips of every split, kept as int16 and subsampled by ``step``, and the training
    statistics (of the 16 kHz waveforms, ``int16 / 2**15``) that `decode` standardises with."""
    root = Path(cfg.path)
    names = clip_lists(cfg)
    arrays: dict[str, np.ndarray] = {}
    total, total_sq, count = 0.0, 0.0, 0
    for split in SPLITS:
        chosen = [names[split][i] for i in _loader.cap(cfg, split, len(names[split]))]
        clips = np.zeros((len(chosen), LENGTH // step), dtype=np.int16)
        for i, name in enumerate(chosen):
            clip = read_wav(root / name)
            if split == "train":
                x = clip.astype(np.float64) / 2**15
                total, total_sq, count = total + x.sum(), total_sq + (x * x).sum(), count + x.size
            clips[i] = clip[::step]
        arrays[f"{split}/inputs"] = clips
        arrays[f"{split}/labels"] = np.array(
            [CLASSES.index(n.split("/")[0]) for n in chosen], dtype=np.int32
        )
        arrays[f"{split}/lengths"] = np.full(len(chosen), LENGTH // step, dtype=np.int32)
    if count == 0:
        raise ValueError(f"{root}: no training clips found.")
    mean = total / count
    std = np.sqrt(max(total_sq / count - mean * mean, 0.0))
    arrays["train_mean_std"] = np.array([mean, std], dtype=np.float64)
    return arrays


def decode(cfg: SpeechCommandsConfig, arrays, split: str) -> Split:
    mean, std = arrays["train_mean_std"]
    x = arrays[f"{split}/inputs"].astype(np.float32) / np.float32(2**15)
    inputs = ((x - np.float32(mean)) / np.float32(std + 1e-5))[..., None]
    return Split(inputs=inputs, labels=arrays[f"{split}/labels"],
                 lengths=arrays[f"{split}/lengths"])


def fingerprint(cfg: SpeechCommandsConfig) -> list:
    root = Path(cfg.path)
    return _util.fingerprint(
        [_util.require_file(root / f, "an official list") for f in LISTS.values()]
        + [_util.require_dir(root / w, f"the folder of {w!r}") for w in CLASSES]
    )


def _info(name: str, step: int):
    def info(cfg: SpeechCommandsConfig, arrays=None) -> TaskInfo:
        return TaskInfo(
            name=name,
            description=DESCRIPTIONS[name],
            seq_len=LENGTH // step,
            variable_length=False,
            input_kind="real",
            input_dim=1,
            num_classes=len(CLASSES),
            timescale=float(step),
        )

    return info


DESCRIPTIONS = {
    "speech_commands": "Speech Commands v0.02, 35 words, raw 16 kHz audio (length 16000; "
    "path=speech_commands_v0.02/).",
    "speech_commands_8khz": "Speech Commands v0.02 zero-shot 8 kHz evaluation variant "
    "(length 8000, timescale x2; path=...).",
}

# As the S4 and S5 papers name the task and its zero-shot half-rate test.
LABELS = {"speech_commands": "Speech Commands", "speech_commands_8khz": "Speech Commands (8 kHz)"}

TASKS = {
    name: TaskSpec(
        name=name,
        description=DESCRIPTIONS[name],
        config_cls=SpeechCommandsConfig,
        label=LABELS[name],
        make=lambda cfg, step=step: make_at(cfg, step),
        info=_info(name, step),
        decode=decode,
        fingerprint=fingerprint,
        presets=_loader.PRESETS,
    )
    for name, step in (("speech_commands", 1), ("speech_commands_8khz", 2))
}
