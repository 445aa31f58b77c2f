"""Bad input, one row per case: each gets a clear error, never a traceback.

Every row states what must happen (an exit status, or an exception class) and the words the
message must hold: the bad thing (a key, a value, a path) and what is accepted or what to do.
Command-line rows run `harness.cli.main` in this process (what ``linrnn-bench`` runs; one
row at the end runs the real interpreter to check the process's own output), and no row may
print "Traceback". A new bad input is one new row.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax.numpy as jnp
import jax.random as jr
import jaxtyping
import pytest

from linrnn_bench import models
from linrnn_bench import tasks
from linrnn_bench.harness import config as _config
from linrnn_bench.harness.cli import main
from linrnn_bench.harness.errors import ConfigError, StoreError
from linrnn_bench.harness.report import MARKER, writers
from linrnn_bench.harness.store import Store

from helpers import isolated_registry, small_store

# --------------------------------------------------------------------------------------------
# Files the rows point at, made fresh in each test's folder.


def _corrupt_store(root: Path) -> Path:
    """A store whose first page (the header SQLite checks on opening) is intact and whose
    table pages are overwritten: it opens, and fails only when its rows are read."""
    path = root / "corrupt.sqlite"
    store = Store(path)
    for i in range(40):  # enough rows for several pages
        store.record(run_id=f"r{i}", study="accuracy", status="done", config={"i": i},
                     config_hash="h", seed=i, provenance={}, rows=[{"x": "y" * 200}] * 5)
    db = sqlite3.connect(path)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    page = db.execute("PRAGMA page_size").fetchone()[0]
    db.close()
    data = bytearray(path.read_bytes())
    data[page:] = bytes([0xA5]) * (len(data) - page)
    path.write_bytes(bytes(data))
    return path


def _table(*, stderr: bool = False, caption: str = "c", **fields: Any):
    """A one-cell report table (`harness.report.artifacts.Table`) with ``fields``."""
    import pandas as pd

    from linrnn_bench.harness.report.artifacts import Table

    frame = pd.DataFrame({"acc (%)": [90.0]}, index=pd.Index(["LRU"], name="Model"))
    return Table("t", "T", caption, frame, stderr=frame if stderr else None, **fields)


def _file(root: Path) -> Path:
    path = root / "a_file"
    path.write_text("not a folder\n")
    return path


def _folder_with_files(root: Path) -> Path:
    path = root / "papers"
    path.mkdir()
    (path / "draft.tex").write_text("my own file\n")
    return path


def _report_folder(root: Path, files: list[str]) -> Path:
    """A folder as an earlier render left it, whose manifest also names ``files``."""
    path = root / "rep"
    path.mkdir()
    (path / "index.md").write_text("# an earlier report\n")
    (path / MARKER).write_text(json.dumps({"written_by": "harness.report.render",
                                           "files": ["index.md", *files]}))
    return path


def _manifest_names_notes(root: Path) -> Path:
    path = _report_folder(root, ["notes.txt"])
    (path / "notes.txt").write_text("the user's notes\n")
    return path


def _manifest_through_link(root: Path) -> Path:
    outside = root / "outside"
    outside.mkdir()
    (outside / "data.txt").write_text("not the report's\n")
    path = _report_folder(root, ["link/data.txt"])
    (path / "link").symlink_to(outside, target_is_directory=True)
    return path


def _tables_is_file(root: Path) -> Path:
    path = _report_folder(root, [])
    (path / "tables").write_text("a file where the report puts its tables/ folder\n")
    return path


def _dangling(root: Path) -> Path:
    path = root / "gone"
    path.symlink_to(root / "nowhere", target_is_directory=True)
    return path


def _not_sqlite(root: Path) -> Path:
    path = root / "notes.sqlite"
    path.write_bytes(b"this is not sqlite" * 100)
    return path


def _fifo(root: Path) -> Path:
    """A named pipe where the store should be: opening it for reading waits for a writer."""
    path = root / "pipe.sqlite"
    os.mkfifo(path)
    return path


def _wal_fifo(root: Path) -> Path:
    """A store whose write-ahead log (``<store>-wal``, which SQLite opens beside it) is a
    named pipe."""
    path = small_store(root)
    os.mkfifo(path.with_name(path.name + "-wal"))
    return path


def _altered_store(name: str, *statements: str) -> Callable[[Path], Path]:
    """A maker of a store with one run, changed by ``statements`` as another version of
    linrnn-bench (or a hand) would have changed it."""

    def make(root: Path) -> Path:
        path = small_store(root).rename(root / f"{name}.sqlite")
        db = sqlite3.connect(path)
        for statement in statements:
            db.execute(statement)
        db.commit()
        db.close()
        return path

    return make


def _reference(name: str, store: bytes | None, provenance: str | None) -> Callable[[Path], Path]:
    """A maker of a reference folder (`harness.reference`) holding ``store`` as its
    store.sqlite.xz and ``provenance`` as its provenance.json (None: the file is absent)."""

    def make(root: Path) -> Path:
        path = root / name
        path.mkdir()
        (path / "index.md").write_text("# a reference\n")
        if store is not None:
            (path / "store.sqlite.xz").write_bytes(store)
        if provenance is not None:
            (path / "provenance.json").write_text(provenance)
        return path

    return make


_SMOKE_PROVENANCE = json.dumps({"artifacts": {"accuracy_test": {"provenance": {
    "presets": ["smoke"]}}}})


# Outside layer modules, as a user writes them, each with one mistake. Written into the test's
# folder (on sys.path, `quiet_environment`); a row names one as ``{<key>}``, which becomes its
# import path ``<module>:<attribute>``.
_CONFIG = """
import dataclasses
import equinox as eqx
import jax
import jax.numpy as jnp
from linrnn_bench import models

@dataclasses.dataclass(frozen=True)
class Cfg:
    d_model: int
    d_state: int
"""
OUTSIDE: dict[str, tuple[str, str]] = {
    # key: (module source after _CONFIG, attribute)
    "nameerror": ("""
@models.register("bad_name", Cfg, capabilities=frozenset())
def make(config, *, key):
    return eqx.nn.Identity()

undefined_name + 1
""", "make"),
    "syntaxerror": ("def make(config, *, key:\n    pass\n", "make"),
    "raises": ("raise RuntimeError('the lab server is down')\n", "make"),
    "configfields": ("""
@dataclasses.dataclass(frozen=True)
class WidthFirst:
    width: int
    d_state: int

@models.register("width_first", WidthFirst, capabilities=frozenset())
def make(config, *, key):
    return eqx.nn.Identity()
""", "make"),
    "configrequired": ("""
@dataclasses.dataclass(frozen=True)
class NeedsMode:
    d_model: int
    d_state: int
    mode: str

@models.register("needs_mode", NeedsMode, capabilities=frozenset())
def make(config, *, key):
    return eqx.nn.Identity()
""", "make"),
    "plain": ("""
@models.register("plain", Cfg, capabilities=frozenset())
class Plain:  # not an equinox.Module: its arrays would be invisible to jit, grad, the optimiser
    def __init__(self, config, *, key):
        self.scale = jnp.ones(config.d_model)

    def __call__(self, u):
        return self.scale * u
""", "Plain"),
    "array": ("""
@models.register("array_factory", Cfg, capabilities=frozenset())
def make(config, *, key):
    return jnp.zeros((config.d_model, config.d_model))
""", "make"),
    "wide": ("""
class Wide(eqx.Module):
    linear: eqx.nn.Linear

    def __call__(self, u):
        return jax.vmap(self.linear)(u)

@models.register("wide", Cfg, capabilities=frozenset())
def make(config, *, key):
    return Wide(eqx.nn.Linear(config.d_model, config.d_model + 1, key=key))
""", "make"),
    "factoryraises": ("""
@models.register("raising_factory", Cfg, capabilities=frozenset())
def make(config, *, key):
    raise RuntimeError("boom: no GPU kernel for this width")
""", "make"),
    "nokey": ("""
@models.register("no_key", Cfg, capabilities=frozenset())
def make(config):
    return eqx.nn.Identity()
""", "make"),
}


def _outside(key: str) -> Callable[[Path], str]:
    """A maker writing outside module ``key`` into the folder; its import path."""

    def make(root: Path) -> str:
        source, attribute = OUTSIDE[key]
        module = f"outside_{key}"
        (root / f"{module}.py").write_text(_CONFIG + source)
        return f"{module}:{attribute}"

    return make


# --------------------------------------------------------------------------------------------
# Command-line rows: (id, argv with {tmp} and the files above, exit status, words).

FILES: dict[str, Callable[[Path], Path | str]] = {
    "store": small_store, "corrupt": _corrupt_store, "file": _file, "papers": _folder_with_files,
    "notsqlite": _not_sqlite, "notesmanifest": _manifest_names_notes,
    "linkmanifest": _manifest_through_link, "tablesfile": _tables_is_file, "dangling": _dangling,
    "fifo": _fifo, "walfifo": _wal_fifo,
    "extracolumn": _altered_store("extra", "ALTER TABLE runs ADD COLUMN priority INTEGER"),
    "missingcolumn": _altered_store("missing", "ALTER TABLE runs DROP COLUMN error"),
    "newer": _altered_store("newer", "PRAGMA user_version = 99"),
    **{key: _outside(key) for key in OUTSIDE},
    "refnotxz": _reference("refnotxz", b"not xz at all", _SMOKE_PROVENANCE),
    "refnostore": _reference("refnostore", None, _SMOKE_PROVENANCE),
    "refnoprov": _reference("refnoprov", b"x", None),
    "refbadprov": _reference("refbadprov", b"x", "{not json"),
    "refnopreset": _reference("refnopreset", b"x", json.dumps({"artifacts": {}})),
}
TRAIN_ONE = ["train", "model=lru", "--preset", "smoke", "train.steps=1"]

CLI_CASES: list[tuple[str, list[str], int, tuple[str, ...]]] = [
    ("unknown-command", ["frobnicate"], 2, ("'frobnicate'", "choose from")),
    ("unknown-study", ["study", "nope"], 2, ("'nope'", "accepted: accuracy")),
    ("unknown-preset", ["study", "accuracy", "--preset", "huge"], 2,
     ("'huge'", "smoke, cpu, cpu-full, gpu")),
    ("unknown-key", ["study", "accuracy", "--preset", "smoke", "colour=red"], 2,
     ("'colour'", "accepted keys")),
    ("not-key-value", ["study", "accuracy", "--preset", "smoke", "oops"], 2,
     ("'oops'", "key=value")),
    ("empty-key", ["study", "accuracy", "--preset", "smoke", "=3"], 2, ("'=3'", "key=value")),
    ("steps-text", ["study", "accuracy", "--preset", "smoke", "train.steps=abc"], 2,
     ("'abc'", "an integer")),
    ("steps-inf", ["study", "accuracy", "--preset", "smoke", "train.steps=inf"], 2,
     ("'inf'", "an integer")),
    ("steps-1e400", ["study", "accuracy", "--preset", "smoke", "train.steps=1e400"], 2,
     ("'1e400'", "an integer")),
    ("steps-fraction", ["study", "accuracy", "--preset", "smoke", "train.steps=2.5"], 2,
     ("'2.5'", "an integer")),
    ("steps-zero", ["study", "accuracy", "--preset", "smoke", "train.steps=0"], 2,
     ("steps", "positive integer")),
    ("duplicate-key", ["study", "accuracy", "--preset", "smoke", "train.steps=3",
                       "train.steps=2"], 2, ("'train.steps'", "twice", "give each key once")),
    ("unknown-model", ["study", "accuracy", "--preset", "smoke", "models=gru"], 2,
     ("'gru'", "lru")),
    ("bool-not-bool", ["study", "accuracy", "--preset", "smoke", "network.prenorm=maybe"], 2,
     ("'maybe'", "true or false")),
    ("lr-text", ["study", "accuracy", "--preset", "smoke", "train.lr=fast"], 2,
     ("'fast'", "a number")),
    ("unknown-executor", ["study", "accuracy", "--executor", "spark"], 2,
     ("'spark'", "local")),
    ("ray-address-without-ray", ["study", "accuracy", "--ray-address", "x"], 2,
     ("--ray-address", "--executor ray")),
    ("workers-zero", ["study", "accuracy", "--executor", "processes", "--workers", "0"], 2,
     ("workers", "positive integer", "got 0")),
    ("workers-text", ["study", "accuracy", "--workers", "two"], 2, ("'two'", "int")),
    ("unknown-option", ["study", "accuracy", "--colour", "red"], 2, ("--colour", "--help")),
    ("store-parent-is-file", ["study", "accuracy", "--preset", "smoke", "models=lru",
                              "train.steps=1", "--store", "{file}/s.sqlite"], 2,
     ("a_file is a file", "--store")),
    ("store-is-folder", ["study", "accuracy", "--preset", "smoke", "models=lru",
                         "--store", "{tmp}"], 2, ("is a folder", "--store")),
    ("store-not-sqlite", ["study", "accuracy", "--preset", "smoke", "models=lru",
                          "--store", "{notsqlite}"], 2, ("notes.sqlite", "--store")),
    ("store-is-device", [*TRAIN_ONE, "--store", "/dev/null"], 2,
     ("/dev/null", "character device", "--store")),
    # Stores of another version of linrnn-bench (or changed by hand): refused when opened,
    # before anything is trained, and left as they were (`test_command_line_mistake`).
    ("store-extra-column", [*TRAIN_ONE, "--store", "{extracolumn}"], 2,
     ("extra.sqlite", "runs", "'priority'", "--store")),
    ("store-missing-column", [*TRAIN_ONE, "--store", "{missingcolumn}"], 2,
     ("missing.sqlite", "runs", "lacks", "'error'", "--store")),
    ("store-newer-version", [*TRAIN_ONE, "--store", "{newer}"], 2,
     ("newer.sqlite", "version 99", "newer linrnn-bench", "--store")),
    ("study-store-extra-column", ["study", "accuracy", "--preset", "smoke", "models=lru",
                                  "train.steps=1", "--store", "{extracolumn}"], 2,
     ("extra.sqlite", "'priority'")),
    ("report-store-missing-column", ["report", "--store", "{missingcolumn}", "--out",
                                     "{tmp}/r"], 2, ("missing.sqlite", "'error'")),
    ("report-store-newer-version", ["report", "--store", "{newer}", "--out", "{tmp}/r"], 2,
     ("newer.sqlite", "version 99")),
    ("train-unknown-key", ["train", "model=lru", "colour=red"], 2,
     ("'colour'", "network.<field>")),
    ("train-unknown-model", ["train", "model=gru"], 2, ("'gru'", "lru")),
    ("train-seed-text", ["train", "seed=x"], 2, ("'x'", "an integer")),
    ("train-seed-inf", ["train", "seed=inf"], 2, ("'inf'", "an integer")),
    ("train-unknown-layer-option", ["train", "layer.nope=1"], 2,
     ("'nope'", "accepted keys: algorithm")),
    ("train-unknown-task", ["train", "task=imagenet"], 2, ("'imagenet'", "digits")),
    ("train-unknown-preset", ["train", "--preset", "huge"], 2,
     ("'huge'", "smoke, cpu, cpu-full, gpu")),
    ("train-duplicate-key", ["train", "seed=1", "seed=2"], 2, ("'seed'", "twice")),
    ("train-r-max-float32", ["train", "model=lru", "--preset", "smoke",
                             "layer.r_max=0.99999999"], 2,
     ("r_max=0.99999999", "0.999999")),
    ("train-dt-max-inf", ["train", "model=s4d", "--preset", "smoke", "layer.dt_max=1e400"], 2,
     ("dt_max=inf", "finite")),
    ("report-store-missing", ["report", "--store", "{tmp}/nope.sqlite", "--out", "{tmp}/r"], 2,
     ("nope.sqlite does not exist", "--store")),
    ("report-store-corrupt", ["report", "--store", "{corrupt}", "--out", "{tmp}/r"], 2,
     ("corrupt.sqlite", "corrupt", "--store")),
    ("report-store-not-sqlite", ["report", "--store", "{notsqlite}", "--out", "{tmp}/r"], 2,
     ("notes.sqlite", "--store")),
    ("report-out-is-file", ["report", "--store", "{store}", "--out", "{file}"], 2,
     ("a_file is a file", "--out")),
    ("report-out-under-file", ["report", "--store", "{store}", "--out", "{file}/r"], 2,
     ("a_file is a file", "folder")),
    ("report-out-foreign-folder", ["report", "--store", "{store}", "--out", "{papers}"], 2,
     ("papers", "draft.tex", "--out")),
    ("report-run-bad-out", ["report", "--run", "--preset", "smoke", "--store", "{store}",
                            "--out", "{file}"], 2, ("a_file is a file", "--out")),
    ("report-unknown-preset", ["report", "--run", "--preset", "huge", "--store", "{store}",
                               "--out", "{tmp}/r"], 2, ("'huge'", "smoke, cpu, cpu-full, gpu")),
    ("report-workers", ["report", "--run", "--workers", "-1", "--executor", "processes",
                        "--store", "{store}", "--out", "{tmp}/r"], 2,
     ("workers", "positive integer")),
    # The report folder: every refusal comes before any study runs and before anything is
    # written; a manifest never makes the render delete a file it did not write.
    ("report-manifest-names-users-file", ["report", "--store", "{store}", "--out",
                                          "{notesmanifest}"], 2,
     ("notes.txt", MARKER, "not a file the report writes", "--out")),
    ("report-manifest-through-symlink", ["report", "--store", "{store}", "--out",
                                         "{linkmanifest}"], 2,
     ("link/data.txt", "symbolic link", "--out")),
    ("report-run-tables-is-file", ["report", "--run", "--preset", "smoke", "--store", "{store}",
                                   "--out", "{tablesfile}"], 2, ("tables is a file", "--out")),
    ("report-run-out-dangling", ["report", "--run", "--preset", "smoke", "--store", "{store}",
                                 "--out", "{dangling}"], 2,
     ("gone is a symbolic link", "nowhere", "does not exist", "--out")),
    ("report-run-only-unknown", ["report", "--run", "--preset", "smoke", "--store", "{store}",
                                 "--out", "{tmp}/r", "--only", "nosuch"], 2,
     ("'nosuch'", "accuracy_", "published_")),
    ("report-run-only-not-a-name", ["report", "--run", "--preset", "smoke", "--store",
                                    "{store}", "--out", "{tmp}/r", "--only", "../x"], 2,
     ("'../x'", "file stem")),
    ("list-unknown", ["list", "gizmos"], 2, ("'gizmos'", "models")),
    # One spelling per setting (issue 44): a preset is named with --preset P, a layer's option
    # is set as layer.<option>=value; any other spelling is refused, naming the one to use.
    ("spelling-study-preset", ["study", "accuracy", "preset=smoke", "models=lru",
                               "train.steps=1"], 2,
     ("preset=smoke: name the preset with --preset smoke",)),
    ("spelling-train-preset", ["train", "model=lru", "preset=smoke", "train.steps=1"], 2,
     ("preset=smoke: name the preset with --preset smoke",)),
    ("spelling-train-preset-agrees", [*TRAIN_ONE, "preset=smoke"], 2,
     ("preset=smoke: name the preset with --preset smoke",)),
    ("spelling-report-preset", ["report", "preset=cpu", "--store", "{store}", "--out",
                                "{tmp}/r"], 2, ("preset=cpu: name the preset with --preset cpu",)),
    ("spelling-plan-preset", ["plan", "preset=gpu", "--no-compile"], 2,
     ("preset=gpu: name the preset with --preset gpu",)),
    ("spelling-rehearse-preset", ["rehearse", "preset=smoke", "--no-tasks"], 2,
     ("preset=smoke: name the preset with --preset smoke",)),
    ("spelling-train-network-layer-option", [*TRAIN_ONE, "network.layer.r_min=0.5"], 2,
     ("network.layer.r_min=0.5: set the layer's option as layer.r_min=0.5",)),
    ("spelling-study-network-layer-option", ["study", "stability", "--preset", "smoke",
                                             "network.layer.max_phase=1.0"], 2,
     ("network.layer.max_phase=1.0: set the layer's option as layer.max_phase=1.0",)),
    ("spelling-train-layer-options-text", [*TRAIN_ONE, "network.layer_options=r_min=0.5,"
                                                       "r_max=0.9"], 2,
     ("network.layer_options=r_min=0.5,r_max=0.9: set each of the layer's options as "
      "layer.<option>=value: layer.r_min=0.5 layer.r_max=0.9",)),
    ("spelling-study-layer-options-text", ["study", "accuracy", "--preset", "smoke",
                                           "models=lru", "network.layer_options=r_min"], 2,
     ("network.layer_options=r_min: set each of the layer's options as layer.<option>=value",)),
    ("spelling-study-layer-options-field", ["study", "stability", "--preset", "smoke",
                                            "layer_options=max_phase=1.0"], 2,
     ("layer_options=max_phase=1.0: set each of the layer's options as "
      "layer.<option>=value: layer.max_phase=1.0",)),
    # compare's reference folder: each refusal names what a reference holds, before anything
    # is decompressed, trained or written.
    ("compare-reference-missing", ["compare", "lru", "--reference", "{tmp}/nowhere"], 2,
     ("nowhere does not exist", "--reference", "store.sqlite.xz", "provenance.json")),
    ("compare-reference-is-file", ["compare", "lru", "--reference", "{file}"], 2,
     ("a_file is not a folder", "store.sqlite.xz")),
    ("compare-reference-no-store", ["compare", "lru", "--reference", "{refnostore}"], 2,
     ("refnostore holds no store.sqlite.xz", "make reference")),
    ("compare-reference-no-provenance", ["compare", "lru", "--reference", "{refnoprov}"], 2,
     ("refnoprov holds no provenance.json", "store.sqlite.xz")),
    ("compare-reference-provenance-not-json", ["compare", "lru", "--reference",
                                               "{refbadprov}"], 2,
     ("provenance.json cannot be read", "JSONDecodeError")),
    ("compare-reference-names-no-preset", ["compare", "lru", "--reference",
                                           "{refnopreset}"], 2,
     ("names no one preset", "make reference-report")),
    ("compare-reference-store-not-xz", ["compare", "lru", "--reference", "{refnotxz}",
                                        "--store", "{tmp}/mine.sqlite"], 2,
     ("refnotxz/store.sqlite.xz cannot be decompressed", "store.sqlite.xz")),
    ("compare-out-in-reference", ["compare", "lru", "--reference", "{refnotxz}", "--out",
                                  "{refnotxz}/mine"], 2,
     ("--out", "lies in the reference folder", "never writes")),
    ("compare-unknown-model", ["compare", "gru", "--reference", "{refnotxz}",
                               "--store", "{tmp}/mine.sqlite"], 2,
     ("'gru'", "accepted models")),
    # Settings that cannot mean anything (issue 46): refused before anything runs.
    ("tuning-seeds-beyond-seeds", ["study", "accuracy", "--preset", "smoke", "seeds=0,1",
                                   "tune_tasks=digits", "lr_grid=0.001,0.01",
                                   "recurrent_lr_grid=0.001,0.01", "tuning_seeds=3"], 2,
     ("tuning_seeds=3", "more than the 2 seeds", "accepted: 0 to 2")),
    ("tuning-seeds-without-tuned-task", ["study", "accuracy", "--preset", "smoke",
                                         "tuning_seeds=1"], 2,
     ("tuning_seeds=1", "tune_tasks is empty", "accepted: tuning_seeds=0")),
    ("rehearse-match-nothing", ["rehearse", "--preset", "smoke", "--study", "throughput",
                                "--match", "no-such-program", "--no-tasks"], 2,
     ("--match 'no-such-program'", "none of the 8 programs", "'layer lru forward")),
    ("check-layer-beyond-memory", ["check-layer", "lru", "--d-model", "100000", "--d-state",
                                   "100000"], 2,
     ("d_model=100000", "d_state=100000", "GiB", "memory")),
    ("stability-probe-beyond-memory", ["study", "stability", "--preset", "smoke",
                                       "probe_length=1000000000"], 2,
     ("stability.probe_length=1000000000", "GiB", "memory")),
    ("stability-probe-beyond-generator", ["study", "stability", "--preset", "smoke",
                                          "long_probe=generator", "probe_length=2000000000"], 2,
     ("stability.probe_length=2000000000", "'listops'", "no tree is longer than")),
    # Outside layers whose module fails at import, or whose config class cannot be made.
    ("check-layer-module-nameerror", ["check-layer", "{nameerror}"], 2,
     ("'outside_nameerror'", "NameError", "undefined_name", "fix the module")),
    ("train-module-nameerror", ["train", "model={nameerror}", "--preset", "smoke"], 2,
     ("'outside_nameerror'", "NameError", "undefined_name")),
    ("study-module-nameerror", ["study", "accuracy", "--preset", "smoke",
                                "models=({nameerror},)"], 2,
     ("'outside_nameerror'", "NameError", "undefined_name")),
    ("check-layer-module-syntaxerror", ["check-layer", "{syntaxerror}"], 2,
     ("'outside_syntaxerror'", "SyntaxError", "line 12")),
    ("train-module-syntaxerror", ["train", "model={syntaxerror}", "--preset", "smoke"], 2,
     ("'outside_syntaxerror'", "SyntaxError", "line 12")),
    ("study-module-raises", ["study", "accuracy", "--preset", "smoke", "models=({raises},)"], 2,
     ("'outside_raises'", "RuntimeError: the lab server is down", "fix the module")),
    ("train-config-class-fields", ["train", "model={configfields}", "--preset", "smoke"], 2,
     ("'outside_configfields'", "first fields must be d_model and d_state", "'width'")),
    ("train-config-class-required", ["train", "model={configrequired}", "--preset", "smoke"], 2,
     ("'needs_mode'", "NeedsMode cannot be made", "'mode'", "defaults")),
]


def _argv(template: list[str], tmp: Path) -> list[str]:
    made: dict[str, str] = {"tmp": str(tmp)}
    for name, make in FILES.items():
        if any(f"{{{name}}}" in arg for arg in template):
            made[name] = str(make(tmp))
    return [arg.format(**made) for arg in template]


@pytest.fixture(autouse=True)
def quiet_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("LINRNN_JAX_CACHE", "")
    monkeypatch.setenv("LINRNN_CHECKPOINTS", str(tmp_path / "checkpoints"))
    monkeypatch.chdir(tmp_path)  # a default path (results/, reports/) lands in the test folder
    monkeypatch.syspath_prepend(str(tmp_path))  # the outside layer modules written there
    # A row's outside registrations end with the row (a failed import registers nothing).
    with isolated_registry(*(f"outside_{key}" for key in OUTSIDE)):
        yield


@pytest.mark.parametrize("argv, status, words", [c[1:] for c in CLI_CASES],
                         ids=[c[0] for c in CLI_CASES])
def test_command_line_mistake(argv, status, words, capsys, tmp_path):
    argv = _argv(argv, tmp_path)
    before = {p for p in tmp_path.rglob("*")}
    stores = {p: p.read_bytes() for p in before if p.suffix == ".sqlite" and p.is_file()}
    assert main(argv) == status
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), captured.err
    for word in words:
        assert word in lines[0], (word, lines[0])
    assert "Traceback" not in captured.err + captured.out
    # Nothing was created: no store, no report folder (the input files were made above).
    made = {p for p in tmp_path.rglob("*")} - before
    assert not [p for p in made if p.suffix == ".sqlite" or p.name in ("r", "results")], made
    # The stores the row made are as they were: nothing was trained into them, or stamped.
    assert {p: p.read_bytes() for p in stores} == stores


# --------------------------------------------------------------------------------------------
# In-process rows: (id, a call that must raise, the exception class, words).

def _build(name: str, **options: Any) -> Callable[[Path], Any]:
    return lambda tmp: models.build(name, key=jr.PRNGKey(0), **options)


def _layer_call(u: Any) -> Callable[[Path], Any]:
    return lambda tmp: models.build("lru", d_model=4, d_state=4, key=jr.PRNGKey(0))(u)


def _task(name: str, **options: Any) -> Callable[[Path], Any]:
    return lambda tmp: tasks.build(name, **options)


def _parse(value: Any, annotation: Any) -> Callable[[Path], Any]:
    return lambda tmp: _config.parse_value(value, annotation, "train.steps")


def _build_outside(key: str) -> Callable[[Path], Any]:
    return lambda tmp: models.build(_outside(key)(tmp), d_model=4, d_state=4, key=jr.PRNGKey(0))


def _register_twice(name: str) -> Callable[[Path], Any]:
    # A notebook cell run again: the same name, a new class object.
    def call(tmp: Path) -> Any:
        config_cls = models.info("lru").config_cls
        for _ in range(2):
            models.register(name, config_cls)(type("Mine", (), {}))

    return call


def _flax(call: Callable[[Any], Any]) -> Callable[[Path], Any]:
    """``call(models.flax)``; the Flax adapters are imported only by the rows that use them."""

    def run(tmp: Path) -> Any:
        import linrnn_bench.models.flax
        from linrnn_bench import models

        return call(models.flax)

    return run


def _lru_params(dtype: Any) -> dict[str, Any]:
    from linrnn_bench.models.flax import to_flax_params

    layer = models.build("lru", d_model=4, d_state=4, key=jr.PRNGKey(0))
    return {k: v.astype(dtype) for k, v in to_flax_params(layer).items()}


_LRU_CONFIG = models.make_config("lru", d_model=4, d_state=4)


def _s5_bidirectional() -> Any:
    return models.build("s5", d_model=4, d_state=4, key=jr.PRNGKey(0), bidirectional=True,
                        C_init="complex_normal")


def _one_class_ucr(tmp: Path) -> Any:
    (tmp / "Coffee_TRAIN.txt").write_text("1 0.1 0.2 0.3\n1 1.0 2.0 3.0\n1 5 5 5\n")
    (tmp / "Coffee_TEST.txt").write_text("1 9 9 9\n")
    return tasks.build("ucr", dataset="Coffee", path=str(tmp), cache_dir=tmp / "cache")


CALL_CASES: list[tuple[str, Callable[[Path], Any], type[Exception], tuple[str, ...]]] = [
    # Model configs: key, type, range, choice, and float32 limits.
    ("model-unknown", _build("gru", d_model=4, d_state=4), ValueError, ("'gru'", "lru, rotrnn")),
    ("model-unknown-option", _build("lru", d_model=4, d_state=4, colour=1), ValueError,
     ("'colour'", "r_max")),
    ("lru-d-model-zero", _build("lru", d_model=0, d_state=4), ValueError,
     ("d_model", "positive integer", "got 0")),
    ("lru-d-state-bool", _build("lru", d_model=4, d_state=True), ValueError,
     ("d_state", "positive integer", "got True")),
    ("lru-d-model-float", _build("lru", d_model=4.0, d_state=4), ValueError,
     ("d_model", "positive integer", "got 4.0")),
    ("lru-r-max-float32", _build("lru", d_model=4, d_state=4, r_max=1 - 1e-8), ValueError,
     ("r_max=0.99999999", "float32", "(0, 0.999999]")),
    ("lru-r-max-nan", _build("lru", d_model=4, d_state=4, r_max=math.nan), ValueError,
     ("r_max", "number", "nan")),
    ("lru-r-min-negative", _build("lru", d_model=4, d_state=4, r_min=-0.1), ValueError,
     ("r_min=-0.1", "[0.0, 1.0]")),
    ("lru-max-phase-zero", _build("lru", d_model=4, d_state=4, max_phase=0.0), ValueError,
     ("max_phase=0.0", "Accepted values")),
    ("lru-normaliser", _build("lru", d_model=4, d_state=4, normaliser="batch"), ValueError,
     ("'batch'", "['learned', 'none']")),
    ("lru-convolution", _build("lru", d_model=4, d_state=4, algorithm="convolution"), ValueError,
     ("'convolution'", "'sequential'")),
    ("lru-bidirectional-text", _build("lru", d_model=4, d_state=4, bidirectional="yes"),
     ValueError, ("'yes'", "[False, True]")),
    ("rotrnn-odd-state", _build("rotrnn", d_model=4, d_state=5), ValueError,
     ("d_state=5", "even")),
    ("rotrnn-heads", _build("rotrnn", d_model=4, d_state=8, heads=3), ValueError,
     ("heads=3", "[1, 2, 4]")),
    ("rotrnn-gamma-max-float32", _build("rotrnn", d_model=4, d_state=8, gamma_max=1 - 1e-8),
     ValueError, ("gamma_max=0.99999999", "(0, 0.999999]")),
    ("rotrnn-gamma-init", _build("rotrnn", d_model=4, d_state=8, gamma_init="normal"),
     ValueError, ("'normal'", "'loglog_uniform'")),
    ("rotrnn-max-phase", _build("rotrnn", d_model=4, d_state=8, max_phase=7.0), ValueError,
     ("max_phase=7.0", "6.28")),
    ("s4d-odd-state", _build("s4d", d_model=4, d_state=5), ValueError, ("d_state=5", "even")),
    ("s4d-dt-max-inf", _build("s4d", d_model=4, d_state=4, dt_max=math.inf), ValueError,
     ("dt_max=inf", "finite")),
    ("s4d-dt-min-tiny", _build("s4d", d_model=4, d_state=4, dt_min=1e-300), ValueError,
     ("dt_min=1e-300", "skip connection", "[2e-06, dt_max]")),
    ("s4d-bilinear-float32", _build("s4d", d_model=4, d_state=256, init="inv",
                                    discretisation="bilinear", dt_max=1.0), ValueError,
     ("bilinear", "dt in [0.001, 1.0]", "dt_max <= 0.00463", "'zoh'")),
    ("s4d-init", _build("s4d", d_model=4, d_state=4, init="legs"), ValueError,
     ("'legs'", "['lin', 'inv']")),
    ("s4d-fused", _build("s4d", d_model=4, d_state=4, algorithm="fused"), ValueError,
     ("'fused'", "'convolution'")),
    ("s5-blocks", _build("s5", d_model=4, d_state=6, blocks=4), ValueError,
     ("blocks=4", "divides")),
    ("s5-dt-max-inf", _build("s5", d_model=4, d_state=4, dt_max=math.inf), ValueError,
     ("dt_max=inf", "finite")),
    ("s5-dt-min-tiny", _build("s5", d_model=4, d_state=4, dt_min=1e-300), ValueError,
     ("dt_min=1e-300", "[2e-06, dt_max]")),
    ("s5-dt-order", _build("s5", d_model=4, d_state=4, dt_min=0.1, dt_max=0.01), ValueError,
     ("dt_min=0.1", "dt_max=0.01")),
    ("s5-bilinear-float32", _build("s5", d_model=4, d_state=256, discretisation="bilinear",
                                   dt_max=10.0), ValueError,
     ("bilinear", "dt in [0.001, 10.0]", "dt_max <=", "'zoh'")),
    ("s5-c-init", _build("s5", d_model=4, d_state=4, C_init="zeros"), ValueError,
     ("'zeros'", "'lecun_normal'")),
    ("network-dropout", lambda tmp: models.NetworkConfig(dropout=1.5), ValueError,
     ("dropout=1.5", "[0.0, 1.0]")),
    # Layer inputs.
    ("layer-list-input", _layer_call([[0.0] * 4] * 3), TypeError, ("list", "jnp.asarray")),
    ("layer-batched-input", _layer_call(jnp.zeros((2, 3, 4))), ValueError,
     ("(2, 3, 4)", "(L, H)", "jax.vmap")),
    ("layer-wrong-width", _layer_call(jnp.zeros((3, 5))), ValueError, ("(3, 5)", "H = 4")),
    ("layer-integer-input", _layer_call(jnp.zeros((3, 4), jnp.int32)), ValueError,
     ("int32", "astype")),
    ("layer-kernel-length", lambda tmp: models.build(
        "s4d", d_model=4, d_state=4, key=jr.PRNGKey(0)).kernel(-1), ValueError,
     ("kernel length", "non-negative integer")),
    # Tasks: options and data folders.
    ("task-unknown", _task("imagenet"), ValueError, ("'imagenet'", "listops")),
    ("task-unknown-option", _task("listops", seq_len=0), ValueError,
     ("'seq_len'", "max_length")),
    ("task-negative-seed", _task("digits", seed=-1), ValueError, ("seed=-1", ">= 0")),
    ("task-fraction", _task("adding", seq_len=1.5), ValueError, ("seq_len", "integer >=")),
    ("task-ucr-dataset", _task("ucr", dataset="nope"), ValueError, ("'nope'", "'Coffee'")),
    ("lra-listops-missing-folder", _task("lra_listops", path="/nonexistent/listops"),
     FileNotFoundError, ("/nonexistent/listops", "basic_train.tsv")),
    ("lra-text-wrong-folder", lambda tmp: tasks.build("lra_text", path=str(tmp)),
     FileNotFoundError, ("train/neg", "no such directory")),
    ("speech-commands-wrong-folder", lambda tmp: tasks.build("speech_commands", path=str(tmp)),
     FileNotFoundError, ("validation_list.txt", "no such file")),
    # Overrides parsed in-process.
    ("int-huge-float", _parse("1e300", int), ConfigError, ("'1e300'", "below 2^53")),
    ("int-nan", _parse("nan", int), ConfigError, ("'nan'", "an integer")),
    ("int-bool", _parse(True, int), ConfigError, ("True", "an integer")),
    ("float-bool", lambda tmp: _config.parse_value(True, float, "train.lr"), ConfigError,
     ("True", "a number")),
    ("int-exponent-fraction", _parse("1.5e0", int), ConfigError, ("'1.5e0'", "an integer")),
    # Stores opened in-process.
    ("store-missing-for-reading", lambda tmp: Store(tmp / "none.sqlite", create=False),
     StoreError, ("none.sqlite does not exist", "--store")),
    ("store-corrupt-check", lambda tmp: Store(_corrupt_store(tmp), readonly=True).check(),
     StoreError, ("corrupt.sqlite", "corrupt", "--store")),
    ("store-corrupt-read", lambda tmp: Store(_corrupt_store(tmp)).read("accuracy"),
     StoreError, ("corrupt.sqlite", "--store")),
    ("store-readonly-write", lambda tmp: Store(small_store(tmp), readonly=True).record(
        run_id="x", study="s", status="done", config={}, config_hash="h", seed=0,
        provenance={}), StoreError, ("read-only", "--store")),
    ("out-dir-file", lambda tmp: writers.check_out_dir(_file(tmp)), ValueError,
     ("a_file is a file", "--out")),
    # Tables a report section makes: a spread without its n, a caption too long for LaTeX.
    ("table-stderr-without-n", lambda tmp: writers.table_markdown(_table(stderr=True)),
     ValueError, ("'t' has standard errors or intervals but no n", "n >= 3")),
    ("table-n-unknown-column", lambda tmp: writers.table_markdown(_table(n="seeds")),
     ValueError, ("n must be an integer >= 0, a column of the frame", "'seeds'")),
    ("table-intervals-unknown", lambda tmp: writers.table_markdown(
        _table(n=3, intervals=("low",))), ValueError, ("intervals names unknown", "'low'")),
    ("table-latex-caption-long", lambda tmp: writers.table_latex(_table(caption="w " * 61)),
     ValueError, ("'t'", "62 words, more than 60", "short_caption")),
    # Outside layers: what the class or factory gives must be an equinox.Module (L, H) -> (L, H).
    ("outside-not-a-module", _build_outside("plain"), ValueError,
     ("'plain'", "outside_plain:Plain", "built a Plain, not an equinox.Module",
      "(L, H) -> (L, H)")),
    ("outside-returns-array", _build_outside("array"), ValueError,
     ("'array_factory'", "an array of shape (4, 4), not an equinox.Module")),
    ("outside-wrong-width", _build_outside("wide"), ValueError,
     ("'wide'", "(16, 4) to shape (16, 5)", "H = d_model = 4")),
    ("outside-factory-raises", _build_outside("factoryraises"), ValueError,
     ("'raising_factory'", "RuntimeError: boom: no GPU kernel for this width",
      "layer_cls(config, *, key=key)")),
    ("outside-factory-no-key", _build_outside("nokey"), ValueError,
     ("'no_key'", "unexpected keyword argument 'key'", "layer_cls(config, *, key=key)")),
    ("outside-config-required", lambda tmp: models.make_config(
        _outside("configrequired")(tmp), d_model=4, d_state=4), ValueError,
     ("'needs_mode'", "NeedsMode cannot be made", "'mode'", "layer.<field>=")),
    ("register-twice", _register_twice("mine"), ValueError,
     ("'mine'", "already registered", "replace=True", "another name")),
    ("register-over-builtin", _register_twice("lru"), ValueError,
     ("'lru'", "one of this package's layers", "choose another name")),
    # Flax converters and modules.
    ("to-flax-params-dict", _flax(lambda f: f.to_flax_params({"a": jnp.zeros(3)})), TypeError,
     ("Equinox layer", "models.build", "got a dict")),
    ("to-flax-params-none", _flax(lambda f: f.to_flax_params(None)), TypeError,
     ("Equinox layer", "got None")),
    ("to-flax-params-linen", _flax(lambda f: f.to_flax_params(f.linen.Layer(
        model="lru", d_model=4, d_state=4))), TypeError,
     ("Equinox layer", "got a Layer", "already Flax parameters")),
    ("to-flax-params-s5-bidirectional-no-config", _flax(lambda f: f.to_flax_params(
        _s5_bidirectional(), layout="published")), ValueError,
     ("bidirectional S5", "C_init", "pass config=")),
    ("to-flax-params-s5-wrong-config", _flax(lambda f: f.to_flax_params(
        _s5_bidirectional(), layout="published",
        config=models.make_config("s5", d_model=4, d_state=4))), ValueError,
     ("config= does not describe this S5 layer", "C_reverse_re")),
    ("from-flax-params-float16", _flax(lambda f: f.from_flax_params(
        "lru", _lru_params(jnp.float16), _LRU_CONFIG)), ValueError,
     ("'nu_log'", "dtype float16", "float32 or float64", "astype(jnp.float32)")),
    ("from-flax-params-bfloat16", _flax(lambda f: f.from_flax_params(
        "lru", _lru_params(jnp.bfloat16), _LRU_CONFIG)), ValueError,
     ("'nu_log'", "dtype bfloat16", "float32 or float64")),
    ("from-flax-params-variables", _flax(lambda f: f.from_flax_params(
        "lru", {"params": _lru_params(jnp.float32)}, _LRU_CONFIG)), TypeError,
     ("'params'", "is a dict, not an array", "variables['params']")),
    ("nnx-rngs-none", _flax(lambda f: f.nnx.LRU(4, 8, rngs=None)), TypeError,
     ("rngs must be an nnx.Rngs", "NoneType", "rngs=nnx.Rngs(0)")),
    # A classification set with one class (every prediction right: accuracy 1.0).
    ("ucr-one-class", _one_class_ucr, ValueError,
     ("Coffee_TRAIN.txt", "label '1'", "at least 2 classes")),
]


@pytest.fixture
def as_users_run_it():
    """The run-time jaxtyping checks off, as outside pytest (pyproject.toml switches them on
    for the tests): a value of the wrong type must meet the project's own message, which is
    what a user sees."""
    jaxtyping.config.update("jaxtyping_disable", True)
    yield
    jaxtyping.config.update("jaxtyping_disable", False)


@pytest.mark.parametrize("call, error, words", [c[1:] for c in CALL_CASES],
                         ids=[c[0] for c in CALL_CASES])
def test_bad_value(call, error, words, tmp_path, as_users_run_it):
    with pytest.raises(error) as info:
        call(tmp_path)
    message = str(info.value)
    for word in words:
        assert word in message, (word, message)


def test_the_table_has_enough_rows():
    # The issue asks for at least 60 cases; each row above is one.
    assert len(CLI_CASES) + len(CALL_CASES) + len(PROCESS_CASES) >= 60


# --------------------------------------------------------------------------------------------
# Through the real interpreter: exit status and the process's own stderr.

PROCESS_CASES: list[tuple[str, list[str], int, tuple[str, ...]]] = [
    ("process-report-missing-store",
     ["report", "--store", "{tmp}/missing.sqlite", "--out", "{tmp}/r"], 2,
     ("missing.sqlite does not exist",)),
    # A named pipe would block SQLite's open() for good, deaf to SIGTERM: refused first.
    ("process-train-store-fifo", [*TRAIN_ONE, "--store", "{fifo}"], 2,
     ("pipe.sqlite", "named pipe (FIFO)", "--store")),
    ("process-report-store-fifo", ["report", "--store", "{fifo}", "--out", "{tmp}/r"], 2,
     ("pipe.sqlite", "named pipe (FIFO)", "--store")),
    ("process-report-store-wal-fifo", ["report", "--store", "{walfifo}", "--out", "{tmp}/r"],
     2, ("good.sqlite-wal", "named pipe (FIFO)")),
]


@pytest.mark.parametrize("argv, status, words", [c[1:] for c in PROCESS_CASES],
                         ids=[c[0] for c in PROCESS_CASES])
def test_command_line_process(argv, status, words, tmp_path):
    done = subprocess.run([sys.executable, "-m", "linrnn_bench", *_argv(argv, tmp_path)],
                          capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parent.parent)
    assert done.returncode == status, done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    assert len(done.stderr.strip().splitlines()) == 1
    for word in words:
        assert word in done.stderr
    assert not (tmp_path / "missing.sqlite").exists() and not (tmp_path / "r").exists()


@dataclasses.dataclass(frozen=True)
class _Ints:
    seed: int


def test_integers_are_parsed_exactly():
    # Beside the rows: a seed above 2^53 keeps every digit (float parsing would round it).
    big = 2**53 + 1
    assert _config.replace(_Ints(0), {"seed": str(big)}).seed == big
    assert _config.parse_value("1e3", int, "w") == 1000
    assert _config.parse_value("-7", int, "w") == -7
