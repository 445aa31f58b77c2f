"""The on-disk cache of task arrays: keyed by a hash, written atomically, verified on load.

One ``.npz`` file per built task, named ``<task>-<key>.npz`` where ``key`` hashes the task name,
its generator's version and its config (and, for loaders, a fingerprint of the data files). The
file holds the arrays and a ``__meta__`` record (JSON, stored as bytes) with the key and a
SHA-256 checksum of every array. A file is written to a temporary name in the same directory and
renamed over the final name, so a reader sees a whole file or none; two processes building the
same task at once each write a whole file and the last rename wins.

On load, the key and every checksum are checked. A file that cannot be read, was truncated, or
whose arrays do not match their checksums is reported in the log and regenerated: never used.

Location: the ``cache_dir`` argument if given, else ``$LINRNN_CACHE/tasks`` if that variable
is set, else `linrnn_bench.paths.cache_dir` ("tasks": ``.cache/tasks`` in a clone).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import tempfile
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from linrnn_bench import paths

logger = logging.getLogger("linrnn_bench.tasks.cache")

_META = "__meta__"
_FORMAT = 1


class CacheCorrupt(Exception):
    """A cache file that must not be used (unreadable, truncated, or failing its checksums)."""


def default_dir() -> Path:
    root = os.environ.get("LINRNN_CACHE")
    return Path(root) / "tasks" if root else paths.cache_dir("tasks")


def resolve_dir(cache_dir: str | os.PathLike | None) -> Path:
    return Path(cache_dir) if cache_dir is not None else default_dir()


def key(task: str, version: int, config: Any, extra: Any = None) -> str:
    """A 16-hex-digit identity of (task, generator version, config, extra)."""
    payload = json.dumps(
        {
            "task": task,
            "version": version,
            "config": dataclasses.asdict(config),
            "extra": extra,
            "format": _FORMAT,
        },
        sort_keys=True,
        separators=(",", ":"),
        default=str,
    )
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def path_for(directory: Path, task: str, cache_key: str) -> Path:
    return directory / f"{task}-{cache_key}.npz"


def checksum(array: np.ndarray) -> str:
    """SHA-256 of an array's dtype, shape and bytes."""
    h = hashlib.sha256()
    h.update(array.dtype.str.encode())
    h.update(repr(array.shape).encode())
    h.update(np.ascontiguousarray(array).view(np.uint8).reshape(-1).data)
    return h.hexdigest()


def save(path: Path, arrays: Mapping[str, np.ndarray], *, cache_key: str, task: str) -> None:
    """Write ``arrays`` and their checksums to ``path`` atomically (temp file, then rename)."""
    if _META in arrays:
        raise ValueError(f"Array name {_META!r} is reserved by the cache.")
    meta = {
        "format": _FORMAT,
        "task": task,
        "key": cache_key,
        "checksums": {name: checksum(a) for name, a in arrays.items()},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **arrays, **{_META: np.frombuffer(json.dumps(meta).encode(), np.uint8)})
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes it owner-only; a cache may be shared
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load(path: Path, *, cache_key: str) -> dict[str, np.ndarray]:
    """The verified arrays in ``path``; `CacheCorrupt` if anything does not check out."""
    try:
        # Opened here, not by np.load, so that the file is closed even when it is no zip.
        with open(path, "rb") as f, np.load(f, allow_pickle=False) as npz:
            names = set(npz.files)
            if _META not in names:
                raise CacheCorrupt("no metadata record")
            meta = json.loads(npz[_META].tobytes().decode())
            arrays = {name: npz[name] for name in names - {_META}}
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile, UnicodeDecodeError) as e:
        raise CacheCorrupt(f"unreadable ({type(e).__name__}: {e})") from None
    if meta.get("format") != _FORMAT or meta.get("key") != cache_key:
        raise CacheCorrupt("metadata does not match the expected key")
    expected = meta.get("checksums", {})
    if set(expected) != set(arrays):
        raise CacheCorrupt(f"arrays {sorted(arrays)} differ from those recorded {sorted(expected)}")
    for name, array in arrays.items():
        if checksum(array) != expected[name]:
            raise CacheCorrupt(f"array {name!r} fails its checksum")
    return arrays
