"""Checkpoints: one file, a JSON header line then equinox's serialised leaves, written
atomically; a run's identity (what a checkpoint must match to be resumed) and resuming."""

from __future__ import annotations

import dataclasses
import errno
import json
import os
from pathlib import Path
from typing import Any

import equinox as eqx

from linrnn_bench.models.network import NetworkConfig
from linrnn_bench.tasks import Task

from .. import config as _config
from .recipe import TrainConfig

# 2: the optimiser state holds the hyperparameters; 3: the state is optax's
# (inject_hyperparams of partition), whose leaves are not those of format 2.
_CHECKPOINT_FORMAT = 3

# Where runs keep their checkpoints: ``$LINRNN_CHECKPOINTS``, else ``results/checkpoints`` (the
# command line sets it to ``checkpoints/`` beside the store).
CHECKPOINT_ENV = "LINRNN_CHECKPOINTS"
DEFAULT_CHECKPOINTS = Path("results") / "checkpoints"


def checkpoint_dir() -> Path:
    """Where runs keep their checkpoints: ``$LINRNN_CHECKPOINTS`` or ``results/checkpoints``."""
    return Path(os.environ.get(CHECKPOINT_ENV) or DEFAULT_CHECKPOINTS)


def save_checkpoint(path: Path, header: dict[str, Any], tree: Any) -> None:
    """Write the checkpoint at ``path`` whole or not at all: a temporary file beside it, then
    ``os.replace``. On failure the temporary file is removed and the previous checkpoint, if
    any, is left as it was; a full disk and a checkpoint folder that is a file say so."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise NotADirectoryError(
            f"Cannot keep checkpoints in {path.parent}: it, or a folder above it, is a file. "
            f"Move the file aside, or set {CHECKPOINT_ENV} to another folder."
        ) from None
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(json.dumps(header, allow_nan=True).encode() + b"\n")
            eqx.tree_serialise_leaves(f, tree)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        tmp.unlink(missing_ok=True)
        if isinstance(e, OSError) and e.errno == errno.ENOSPC:
            raise OSError(
                errno.ENOSPC, f"No space left on device: the disk holding {path.parent} is "
                "full, so the checkpoint was not written (the previous one, if any, is kept; "
                "the store is intact). Free space and rerun: the run resumes from its last "
                "checkpoint") from None
        raise


def load_checkpoint(path: Path, like: Any) -> tuple[dict[str, Any], Any]:
    with open(path, "rb") as f:
        header = json.loads(f.readline())
        tree = eqx.tree_deserialise_leaves(f, like)
    return header, tree


def _identity(network_config: NetworkConfig, task: Task, config: TrainConfig, seed: int) -> str:
    """What a checkpoint must match to be resumed: architecture, task, recipe and seed."""
    task_config = task.config
    if dataclasses.is_dataclass(task_config):
        task_config = _config.to_dict(task_config)
    return _config.config_hash(
        network_config, dataclasses.asdict(task.info), repr(task_config),
        _config.to_dict(config), seed,
    )


# --------------------------------------------------------------------------------------------


def _resume(path: Path, identity: str, like: Any) -> tuple[dict[str, Any], Any] | None:
    """The checkpoint at ``path`` if it belongs to this run, else None (and it is removed).

    The header is checked before the leaves are read: another format's leaves need not fit
    ``like``.
    """
    try:
        with open(path, "rb") as f:
            header = json.loads(f.readline())
        if not isinstance(header, dict):
            raise ValueError("its first line is not a header")
        if header.get("format") != _CHECKPOINT_FORMAT:
            print(f"Checkpoint {path} has format {header.get('format')!r}, written by another "
                  f"version of the harness (this one reads format {_CHECKPOINT_FORMAT}); "
                  "starting afresh.")
            path.unlink(missing_ok=True)
            return None
        if header.get("identity") != identity:
            print(f"Checkpoint {path} belongs to another run; starting afresh.")
            path.unlink(missing_ok=True)
            return None
        return load_checkpoint(path, like)
    except (OSError, ValueError, EOFError) as e:
        print(f"Checkpoint {path} is unreadable ({type(e).__name__}: {e}); starting afresh.")
        path.unlink(missing_ok=True)
        return None


# --------------------------------------------------------------------------------------------
# Seed groups: k seeds of one configuration trained as one compiled program
