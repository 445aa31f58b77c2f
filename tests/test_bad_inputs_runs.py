"""Bad input around runs (issue 33), one row per case, in the style of `test_bad_inputs.py`:
overrides that were dropped without a word, options that only apply with ``--run``, seeds the
store or JAX cannot hold, another program's SQLite file, a full disk, a store removed mid-study,
a checkpoint folder that is a file, and the exit status of a command in which a run failed.

Command-line rows run `harness.cli.main` in this process and need no training (each is refused
before a run starts); the rows below the table need a run or a fault and each says what it
simulates.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import sqlite3
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import linrnn_bench.harness.runner
from linrnn_bench import harness
from linrnn_bench.harness import config as _config
from linrnn_bench.harness import store as store_module
from linrnn_bench.harness.cli import main
from linrnn_bench.harness.errors import ConfigError, Diverged, StoreError
from linrnn_bench.harness.store import APPLICATION_ID, Store
from linrnn_bench.harness.studies import accuracy
from linrnn_bench.harness.train import save_checkpoint

from helpers import isolated_registry, small_store

# --------------------------------------------------------------------------------------------
# Files the rows point at, made fresh in each test's folder.


def _sqlite(path: Path, *statements: str) -> Path:
    """An SQLite file made by running ``statements`` (a rollback journal, as most programs')."""
    db = sqlite3.connect(path)
    for statement in statements:
        db.execute(statement)
    db.commit()
    db.close()
    return path


def _contacts(root: Path) -> Path:
    """Another program's SQLite file (one table of its own)."""
    return _sqlite(root / "contacts.sqlite", "CREATE TABLE contacts (name TEXT, phone TEXT)",
                   "INSERT INTO contacts VALUES ('Ann', '0123')")


def _lookalike(root: Path) -> Path:
    """Another program's file with tables named runs and rows, but not ours."""
    return _sqlite(root / "lookalike.sqlite",
                   "CREATE TABLE runs (id INTEGER PRIMARY KEY, name TEXT)",
                   "CREATE TABLE rows (id INTEGER, value REAL)")


def _checkpoints_file(root: Path) -> Path:
    """A file named ``checkpoints`` beside the stores the rows make in ``root``."""
    path = root / "checkpoints"
    path.write_text("not a folder\n")
    return path


FILES: dict[str, Callable[[Path], Path]] = {
    "store": small_store, "contacts": _contacts, "lookalike": _lookalike,
    "checkpoints": _checkpoints_file,
}
SMOKE = ["--preset", "smoke", "train.steps=1"]
BIG = "9223372036854775808"  # 2^63: beyond SQLite's INTEGER

CLI_CASES: list[tuple[str, list[str], int, tuple[str, ...]]] = [
    # Two spellings of one setting that disagree.
    ("train-network-layer-disagrees", ["train", "model=lru", "network.layer=rotrnn", *SMOKE], 2,
     ("network.layer=rotrnn", "model=lru", "two different layers", "give the layer once")),
    # Report options that apply only with --run.
    ("report-unknown-preset-without-run", ["report", "--preset", "nope", "--store", "{store}",
                                           "--out", "{tmp}/r"], 2,
     ("'nope'", "accepted: smoke, cpu, cpu-full, gpu")),
    ("report-preset-without-run", ["report", "--preset", "smoke", "--store", "{store}",
                                   "--out", "{tmp}/r"], 2,
     ("--preset only applies with --run", "Add --run", "leave them out")),
    ("report-executor-without-run", ["report", "--executor", "ray", "--ray-address",
                                     "1.2.3.4:1", "--store", "{store}", "--out", "{tmp}/r"], 2,
     ("--executor, --ray-address only apply with --run", "Add --run")),
    # Seeds beyond what the store and jax.random.PRNGKey hold.
    ("study-seed-beyond-int64", ["study", "accuracy", "--preset", "smoke", "models=lru",
                                 f"seeds={BIG}", "--store", "{tmp}/s.sqlite"], 2,
     (f"seeds={BIG}", "[0, 4294967295]", "jax.random.PRNGKey", "smaller seed")),
    ("study-seed-2-to-the-32", ["study", "accuracy", "--preset", "smoke", "models=lru",
                                "seeds=0,4294967296", "--store", "{tmp}/s.sqlite"], 2,
     ("seeds=4294967296", "[0, 4294967295]", "repeat a smaller one's")),
    ("train-seed-beyond-int64", ["train", "model=lru", *SMOKE, f"seed={BIG}",
                                 "--store", "{tmp}/s.sqlite"], 2,
     (f"train.seed={BIG}", "[0, 4294967295]")),
    # Another program's SQLite file as the store.
    ("store-foreign-sqlite", ["train", "model=lru", *SMOKE, "--store", "{contacts}"], 2,
     ("contacts.sqlite", "another program's SQLite file", "tables: contacts", "unchanged",
      "--store")),
    ("store-foreign-lookalike", ["study", "accuracy", "--preset", "smoke", "models=lru",
                                 "--store", "{lookalike}"], 2,
     ("lookalike.sqlite", "another program's SQLite file", "rows, runs", "--store")),
    ("report-store-foreign-sqlite", ["report", "--store", "{contacts}", "--out", "{tmp}/r"], 2,
     ("contacts.sqlite", "another program's SQLite file", "--store")),
    # `checkpoints` beside the store is a file.
    ("checkpoints-beside-store-is-file", ["train", "model=lru", *SMOKE, "--store",
                                          "{tmp}/s.sqlite", "{checkpoints}"], 2,
     ("checkpoints", "is a file", "Move the file aside", "LINRNN_CHECKPOINTS")),
]


def _argv(template: list[str], tmp: Path) -> list[str]:
    made: dict[str, str] = {"tmp": str(tmp)}
    for name, make in FILES.items():
        if any(f"{{{name}}}" in arg for arg in template):
            made[name] = str(make(tmp))
    # {checkpoints} only makes its file; it is not an argument.
    return [arg.format(**made) for arg in template if arg != "{checkpoints}"]


@pytest.fixture(autouse=True)
def quiet_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("LINRNN_JAX_CACHE", "")
    # Checkpoints beside the store, as a user's command puts them (set, then removed, so that
    # the value the command line sets is undone after the test).
    monkeypatch.setenv("LINRNN_CHECKPOINTS", "unset")
    monkeypatch.delenv("LINRNN_CHECKPOINTS")
    monkeypatch.chdir(tmp_path)


def _snapshot(root: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize("argv, status, words", [c[1:] for c in CLI_CASES],
                         ids=[c[0] for c in CLI_CASES])
def test_command_line_mistake(argv, status, words, capsys, tmp_path):
    argv = _argv(argv, tmp_path)
    before = _snapshot(tmp_path)
    assert main(argv) == status
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), captured.err
    for word in words:
        assert word in lines[0], (word, lines[0])
    assert "Traceback" not in captured.err + captured.out
    # Nothing was created or changed: no store, no WAL beside a foreign file, no report, and
    # the files the row made are byte for byte as they were.
    assert _snapshot(tmp_path) == before


# --------------------------------------------------------------------------------------------
# Overrides that reach the run: what `train` resolves, without training.


class _Resolved(Exception):
    """Raised by the stand-in for `run_study` with the specs `train` would run."""

    def __init__(self, specs: list[Any]):
        super().__init__("resolved")
        self.specs = specs


@pytest.fixture
def resolved(monkeypatch, tmp_path) -> Callable[..., Any]:
    """``resolved(*argv)``: the one spec ``linrnn-bench train *argv`` would run."""

    def stand_in(study, config, **kwargs):
        raise _Resolved(study.grid(config))

    monkeypatch.setattr(harness.runner, "run_study", stand_in)

    def resolve(*argv: str) -> Any:
        with pytest.raises(_Resolved) as info:
            main(["train", *argv, "--store", str(tmp_path / "s.sqlite")])
        (spec,) = info.value.specs
        return spec

    return resolve


def test_an_explicit_override_wins_over_the_presets_task_recipe(resolved, capsys):
    # The cpu preset trains ListOps for 400 steps (a per-task recipe); the user's train.steps
    # wins, and the command says which preset setting it replaced.
    spec = resolved("model=lru", "task=listops", "--preset", "cpu", "train.steps=50")
    assert spec.train.steps == 50
    assert spec.train.eval_every == 50  # the recipe's other setting stays
    out = capsys.readouterr().out
    assert "train.steps=50 from the command line replace(s) the cpu preset's setting for " \
           "listops" in out
    # Without the override, the recipe's 400; on digits (no recipe), the override as before.
    assert resolved("model=lru", "task=listops", "--preset", "cpu").train.steps == 400
    spec = resolved("model=lru", "task=digits", "--preset", "cpu", "train.steps=50")
    assert spec.train.steps == 50
    assert "replace(s)" not in capsys.readouterr().out


def test_the_layer_spellings_are_one_setting(resolved):
    # network.layer alone names the layer; with a model= that agrees it is accepted.
    assert resolved("network.layer=s4d", "--preset", "smoke").network.layer == "s4d"
    assert resolved("model=lru", "network.layer=lru", "--preset", "smoke").network.layer == "lru"
    # layer.<option> is parsed by the run's layer (here S4D, although the preset's network
    # names the LRU).
    spec = resolved("model=s4d", "--preset", "smoke", "layer.dt_min=0.002", "layer.dt_max=0.05",
                    "layer.init=inv")
    assert dict(spec.network.layer_options) == {"dt_min": 0.002, "dt_max": 0.05, "init": "inv"}


def test_a_recipe_cannot_set_the_layer_through_network():
    with pytest.raises(ValueError, match="network.layer.*grid's model.*layer.<option>"):
        accuracy.Recipe(overrides=(("network.layer", "rotrnn"),))
    with pytest.raises(ValueError, match="network.layer_options"):
        accuracy.Recipe(overrides=(("network.layer_options", "r_min=0.5"),))


def test_seeds_are_checked_before_anything_runs(tmp_path):
    # Every study: a spec's seed out of range is a ConfigError before a run or a store.
    @dataclasses.dataclass(frozen=True)
    class Spec:
        seed: int

    with pytest.raises(ConfigError, match=r"seed=4294967296.*\[0, 4294967295\]"):
        harness.runner.check_seeds([Spec(0), Spec(2**32)])
    harness.runner.check_seeds([Spec(0), Spec(2**32 - 1)])
    assert _config.check_seed(2**32 - 1, "seed") == 2**32 - 1
    for bad in (-1, True, 1.0, 2**63):
        with pytest.raises(ConfigError, match="accepted: an integer in"):
            _config.check_seed(bad, "seed")
    assert not list(tmp_path.iterdir())


# --------------------------------------------------------------------------------------------
# Another program's SQLite file, and stores made before the application id.


def test_a_foreign_sqlite_file_is_never_modified(tmp_path):
    for make in (_contacts, _lookalike):
        path = make(tmp_path)
        before = path.read_bytes()
        for open_store in (lambda: Store(path), lambda: Store(path, readonly=True)):
            with pytest.raises(StoreError, match="another program's SQLite file.*unchanged"):
                open_store()
        assert path.read_bytes() == before
        assert not path.with_name(path.name + "-wal").exists()
        assert not path.with_name(path.name + "-shm").exists()


def test_stores_are_marked_and_old_unmarked_stores_are_recognised(tmp_path):
    new = small_store(tmp_path)
    db = sqlite3.connect(new)
    assert db.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    db.close()
    # A store made before the mark: exactly our tables, application id 0. It opens, records,
    # and is marked on its first writable open.
    old = tmp_path / "old.sqlite"
    db = sqlite3.connect(old)
    db.executescript(store_module._SCHEMA)  # the tables alone, as before the mark
    db.close()
    db = sqlite3.connect(old)
    assert db.execute("PRAGMA application_id").fetchone()[0] == 0
    db.close()
    Store(old, readonly=True).check()  # reading does not mark it
    db = sqlite3.connect(old)
    assert db.execute("PRAGMA application_id").fetchone()[0] == 0
    db.close()
    Store(old).record(run_id="r", study="s", status="done", config={}, config_hash="h", seed=0,
                      provenance={}, rows=[{"x": 1.0}])
    assert Store(old).recorded() == {"r": "done"}
    db = sqlite3.connect(old)
    assert db.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    db.close()
    # An empty file is an empty database: it becomes a store.
    empty = tmp_path / "empty.sqlite"
    empty.touch()
    Store(empty).record(run_id="r", study="s", status="done", config={}, config_hash="h",
                        seed=0, provenance={}, rows=[])
    assert Store(empty).recorded() == {"r": "done"}


# --------------------------------------------------------------------------------------------
# A full disk (simulated: SQLite's error and an ENOSPC write), a store removed mid-study.


def _record(store: Store, run_id: str) -> None:
    store.record(run_id=run_id, study="s", status="done", config={}, config_hash="h", seed=0,
                 provenance={}, rows=[{"x": 1.0}])


def _io_error(*args: Any, **kwargs: Any) -> None:
    # What SQLite raises when a write's fsync or the WAL index's growth fails for want of
    # space: a plain I/O error (SQLITE_IOERR_WRITE), not SQLITE_FULL.
    error = sqlite3.OperationalError("disk I/O error")
    error.sqlite_errorcode = 778
    error.sqlite_errorname = "SQLITE_IOERR_WRITE"
    raise error


def test_an_io_error_on_a_full_disk_says_the_disk_is_full_and_the_store_is_intact(
    tmp_path, monkeypatch
):
    path = tmp_path / "store.sqlite"
    store = Store(path)
    _record(store, "kept")
    monkeypatch.setattr(store_module, "_free_bytes", lambda folder: 4096)
    monkeypatch.setattr(Store, "_write", _io_error)
    with pytest.raises(StoreError) as info:
        _record(store, "lost")
    message = str(info.value)
    for words in ("store.sqlite could not be written", "the disk holding it is full",
                  "4 KiB free", "The store is intact", "Free space and rerun"):
        assert words in message, (words, message)
    assert "corrupt" not in message and "Move it aside" not in message
    # Opening on the full disk says the same, not "not a usable results store".
    monkeypatch.setattr(Store, "_connect", lambda self: _io_error())
    with pytest.raises(StoreError, match="could not be opened: the disk holding it is full.*"
                                         "intact.*Free space and rerun"):
        Store(path)
    monkeypatch.undo()
    # Space freed: intact, and the rerun records.
    _record(Store(path), "rerun")
    assert Store(path).recorded() == {"kept": "done", "rerun": "done"}
    Store(path, readonly=True).check()


def test_an_io_error_with_space_left_is_not_called_corruption(tmp_path, monkeypatch):
    store = Store(tmp_path / "store.sqlite")
    monkeypatch.setattr(store_module, "_free_bytes", lambda folder: 10 * 2**30)
    monkeypatch.setattr(Store, "_write", _io_error)
    with pytest.raises(StoreError, match="the disk reported an error.*not damaged.*Check the "
                                         "disk, then rerun"):
        _record(store, "r")


def test_a_store_removed_during_a_study_says_so_and_is_not_recreated(tmp_path):
    path = tmp_path / "store.sqlite"
    store = Store(path)
    _record(store, "r0")
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    with pytest.raises(StoreError, match="store.sqlite could not be written: the file was "
                                         "removed or moved.*Put it back.*rerun"):
        _record(store, "r1")
    with pytest.raises(StoreError, match="removed or moved.*nothing was written"):
        store.recorded()
    assert not path.exists()  # no empty store made under its name


def test_a_checkpoint_that_meets_a_full_disk_leaves_no_temporary_file(tmp_path, monkeypatch):
    def full(f, tree):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    previous = tmp_path / "ckpt" / "run.eqx"
    save_checkpoint(previous, {"step": 1}, {"w": 1.0})
    kept = previous.read_bytes()
    monkeypatch.setattr("linrnn_bench.harness.train.checkpoints.eqx.tree_serialise_leaves", full)
    with pytest.raises(OSError, match="disk holding .*ckpt is full.*previous one.*kept.*Free "
                                      "space and rerun") as info:
        save_checkpoint(previous, {"step": 2}, {"w": 2.0})
    assert info.value.errno == errno.ENOSPC
    assert sorted(p.name for p in previous.parent.iterdir()) == ["run.eqx"]
    assert previous.read_bytes() == kept


def test_a_checkpoint_folder_that_is_a_file_says_so(tmp_path):
    (tmp_path / "checkpoints").write_text("a file\n")
    with pytest.raises(NotADirectoryError, match="checkpoints.*is a file.*LINRNN_CHECKPOINTS"):
        save_checkpoint(tmp_path / "checkpoints" / "run.eqx", {}, {"w": 1.0})


def test_a_full_disk_outside_the_store_is_one_line(tmp_path, monkeypatch, capsys):
    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "results/x")

    monkeypatch.setattr(harness.runner, "run_study", full)
    assert main(["study", "accuracy", "--preset", "smoke", "models=lru",
                 "--store", str(tmp_path / "s.sqlite")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: the disk is full (writing results/x). Finished runs are in the "
                   "store; free space and rerun the command to resume."]


# --------------------------------------------------------------------------------------------
# Exit status: 1 when a run failed (raised), after recording it; 0 when a run diverged.

BOOM = textwrap.dedent('''
    """An outside layer whose factory raises."""
    import dataclasses

    import jax

    from linrnn_bench import models


    @dataclasses.dataclass(frozen=True)
    class BoomConfig:
        d_model: int
        d_state: int


    @models.register("boom", BoomConfig, label="Boom")
    class Boom(models.AbstractRecurrentLayer):
        def __init__(self, config, *, key):
            raise RuntimeError("this factory always fails")

        def discrete_system(self):
            raise NotImplementedError

        def recurrent_mask(self):
            return jax.tree.map(lambda _: False, self)
''')


def test_a_study_whose_outside_layer_fails_exits_1_after_recording_it(
    tmp_path, monkeypatch, capsys
):
    (tmp_path / "boom_layer.py").write_text(BOOM)
    monkeypatch.syspath_prepend(str(tmp_path))
    store = tmp_path / "s.sqlite"
    with isolated_registry("boom_layer"):
        code = main(["study", "accuracy", "--preset", "smoke", "models=boom_layer:Boom",
                     "--store", str(store)])
    assert code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: 1 run(s) failed; each is recorded with its error in ")
    assert "retried" in err[-1]
    runs = Store(store).runs("accuracy")
    assert list(runs["status"]) == ["failed"]
    assert "this factory always fails" in runs["error"].iloc[0]


def _raising(error: BaseException) -> Callable[..., Any]:
    def train(*args: Any, **kwargs: Any) -> Any:
        raise error

    return train


@pytest.mark.parametrize("command", ["study", "train"])
def test_a_diverged_run_is_a_result_and_exits_0(command, tmp_path, monkeypatch, capsys):
    rows = [{"kind": "eval", "step": 2}, {"kind": "diverged", "step": 3}]
    monkeypatch.setattr(accuracy, "train", _raising(Diverged("loss is nan", rows)))
    argv = (["study", "accuracy", "--preset", "smoke", "models=lru"] if command == "study"
            else ["train", "model=lru", "--preset", "smoke"])
    store = tmp_path / "s.sqlite"
    assert main([*argv, "--store", str(store)]) == 0
    assert "error" not in capsys.readouterr().err
    assert set(Store(store).recorded().values()) == {"diverged"}


@pytest.mark.parametrize("command", ["study", "train"])
def test_a_run_that_raises_exits_1(command, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(accuracy, "train", _raising(RuntimeError("out of luck")))
    argv = (["study", "accuracy", "--preset", "smoke", "models=lru,s4d"] if command == "study"
            else ["train", "model=lru", "--preset", "smoke"])
    store = tmp_path / "s.sqlite"
    assert main([*argv, "--store", str(store)]) == 1
    runs = 2 if command == "study" else 1
    assert f"error: {runs} run(s) failed" in capsys.readouterr().err
    assert set(Store(store).recorded().values()) == {"failed"}


def test_report_run_renders_then_exits_1_when_a_run_failed(tmp_path, monkeypatch, capsys):
    # One study (the accuracy one) so that the test stays short; its one run raises.
    from linrnn_bench.harness import studies

    monkeypatch.setattr(studies, "names", lambda: ["accuracy"])
    monkeypatch.setattr(accuracy, "train", _raising(RuntimeError("out of luck")))
    out = tmp_path / "r"
    code = main(["report", "--run", "--preset", "smoke", "--store", str(tmp_path / "s.sqlite"),
                 "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 1
    assert f"report written to {out}" in captured.out
    assert "error: 4 run(s) failed" in captured.err  # the smoke preset's four models
