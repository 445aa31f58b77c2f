"""Helpers shared by the task files: seed streams, config checks, release files, padding and
split bookkeeping.

The checks are `linrnn_bench.validation`'s (shared with the layers' configs) plus the two only
tasks need; each raises a `ValueError` that names the bad value and what is accepted (STYLE.md
section 9), from a config's ``__post_init__``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

# Shared with the layers' configs (`linrnn_bench.validation`), re-exported for the task files.
from ..validation import boolean as boolean
from ..validation import choice as choice
from ..validation import integer as integer
from ..validation import number as number


# One seed stream per purpose. A split drawn from its own stream does not change when another
# split's size changes, and no two splits share random numbers (zoology's data/utils.py idea).
STREAMS: dict[str, int] = {"train": 0, "val": 1, "test": 2, "holdout": 3, "permutation": 4}


def rng(seed: int, stream: str, *chunk: int) -> np.random.Generator:
    """The local generator for ``stream`` of ``seed``: disjoint from every other stream.

    ``chunk`` (an index) gives independent sub-streams of one stream: the chunks of a large
    split do not depend on each other, so they could be drawn in any order or in parallel.
    """
    key = (STREAMS[stream], *chunk)
    return np.random.default_rng(np.random.SeedSequence(entropy=seed, spawn_key=key))


def uniforms(generator: np.random.Generator, block: int = 1 << 14) -> Iterator[float]:
    """An endless stream of U[0, 1) floats from ``generator``, drawn ``block`` at a time.

    For generators that walk a tree or a path one random choice at a time, where a numpy call
    per number would cost more than the arithmetic: ``u = uniforms(g).__next__`` then ``u()``.
    """
    while True:
        yield from generator.random(block).tolist()


# -------------------------------------------------------------------------------------------
# Validation (raised from a config's __post_init__)


def optional_integer(where: str, value: Any, *, low: int = 1) -> None:
    if value is not None:
        integer(where, value, low=low)


def data_path(where: str, value: Any, expected: str) -> None:
    """A loader's ``path``: a non-empty string (existence is checked when the data is read)."""
    if not isinstance(value, (str, os.PathLike)) or not os.fspath(value):
        raise ValueError(f"{where} must name the directory holding {expected}; got {value!r}.")


# -------------------------------------------------------------------------------------------
# Files of a real-data release


def require_dir(path: Path, what: str) -> Path:
    if not path.is_dir():
        raise FileNotFoundError(f"Expected {what} at {path}, but there is no such directory.")
    return path


def require_file(path: Path, what: str) -> Path:
    if not path.is_file():
        raise FileNotFoundError(f"Expected {what} at {path}, but there is no such file.")
    return path


def fingerprint(paths: Sequence[Path]) -> list[list[Any]]:
    """Name, size and modification time of each file: a cheap identity of the data on disk.

    It enters a loader's cache key, so replacing a release file invalidates the cached arrays.
    """
    out = []
    for p in paths:
        st = p.stat()
        out.append([str(p.resolve()), st.st_size, st.st_mtime_ns])
    return out


# -------------------------------------------------------------------------------------------
# Arrays


def pad(sequences: Sequence[np.ndarray], length: int, dtype: Any) -> tuple[np.ndarray, np.ndarray]:
    """Stack sequences ``(l_i, ...)`` into ``(n, length, ...)`` zero-padded, and their lengths.

    Sequences longer than ``length`` are an error here: truncation is the caller's decision.
    """
    trailing = sequences[0].shape[1:] if sequences else ()
    out = np.zeros((len(sequences), length, *trailing), dtype=dtype)
    lengths = np.zeros(len(sequences), dtype=np.int32)
    for i, s in enumerate(sequences):
        if s.shape[0] > length:
            raise ValueError(f"Sequence {i} has length {s.shape[0]} > {length}.")
        out[i, : s.shape[0]] = s
        lengths[i] = s.shape[0]
    return out, lengths


def holdout(n: int, size: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices ``(keep, held)`` splitting ``range(n)`` at random, ``size`` of them held out.

    Both index arrays are sorted, so the kept examples stay in their file order.
    """
    if not 0 <= size < n:
        raise ValueError(f"Cannot hold out {size} of {n} examples.")
    perm = rng(seed, "holdout").permutation(n)
    return np.sort(perm[size:]), np.sort(perm[:size])


def subsample(n: int, limit: int | None, seed: int, stream: str) -> np.ndarray:
    """Sorted indices of at most ``limit`` of ``n`` examples, drawn at random (all if None)."""
    if limit is None or limit >= n:
        return np.arange(n)
    return np.sort(rng(seed, stream).choice(n, size=limit, replace=False))
