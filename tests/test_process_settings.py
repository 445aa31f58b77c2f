"""`harness.process_settings`: the process-wide settings (one OpenBLAS thread, malloc keeping
freed blocks) that the project's programs apply, and that importing the library never does."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import json
import os
import sqlite3
import subprocess
import sys

import pytest

from linrnn_bench.harness import process_settings


def test_keep_freed_memory_stands_down_when_switched_off_or_tunables_are_set(monkeypatch):
    monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    monkeypatch.setenv(process_settings.ENV, "0")
    assert process_settings.keep_freed_memory() is False
    monkeypatch.delenv(process_settings.ENV)
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.mmap_max=0")
    assert process_settings.keep_freed_memory() is False


def _glibc() -> bool:
    name = ctypes.util.find_library("c")
    return sys.platform.startswith("linux") and name is not None and hasattr(
        ctypes.CDLL(name), "gnu_get_libc_version")


def _fresh(code: str) -> str:
    """``code`` run in a fresh process as outside `make` (no GLIBC_TUNABLES, no
    OPENBLAS_NUM_THREADS, no switch); its standard output."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("GLIBC_TUNABLES", "OPENBLAS_NUM_THREADS", process_settings.ENV)}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, check=True, timeout=300).stdout


def test_importing_the_library_changes_nothing_in_the_process():
    # A researcher's notebook or training script imports it: its environment and allocator
    # stay as they were, whichever of the library's modules it imports.
    code = ("import json, os; before = dict(os.environ); "
            "import linrnn_bench, linrnn_bench.models, linrnn_bench.tasks, "
            "linrnn_bench.harness, linrnn_bench.harness.cli, linrnn_bench.harness.report, "
            "linrnn_bench.harness.runner, linrnn_bench.harness.executors; "
            "from linrnn_bench.harness import process_settings as s; "
            "changed = {k: v for k, v in os.environ.items() if before.get(k) != v}; "
            "gone = sorted(set(before) - set(os.environ)); "
            "print(json.dumps([changed, gone, s.applied]))")
    changed, gone, applied = json.loads(_fresh(code).strip().splitlines()[-1])
    assert changed == {} and gone == [] and applied == ""


@pytest.mark.skipif(not _glibc(), reason="glibc's mallopt only")
def test_a_program_applies_the_settings_and_its_runs_record_them():
    # What the command line, its workers and the tests call first: glibc accepts every value
    # (a refused mallopt would leave `applied` empty), and every run's provenance says so.
    code = ("import os; from linrnn_bench.harness import process_settings as s; s.apply(); "
            "import linrnn_bench.harness.provenance as p; "
            "print(os.environ['OPENBLAS_NUM_THREADS']); print(p.provenance()['malloc'])")
    threads, recorded = _fresh(code).strip().splitlines()[-2:]
    assert threads == "1"
    assert recorded.startswith("mallopt arena_max=1")


@pytest.mark.skipif(not _glibc(), reason="glibc's mallopt only")
def test_the_command_line_applies_them_before_it_runs(tmp_path):
    env = {k: v for k, v in os.environ.items()
           if k not in ("GLIBC_TUNABLES", "OPENBLAS_NUM_THREADS", process_settings.ENV)}
    store = tmp_path / "store.sqlite"
    done = subprocess.run(
        [sys.executable, "-m", "linrnn_bench", "train", "model=lru", "--preset", "smoke",
         "train.steps=1", "--store", str(store)],
        env={**env, "LINRNN_JAX_CACHE": ""}, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    with contextlib.closing(sqlite3.connect(store)) as db:
        (row,) = db.execute("SELECT provenance FROM runs").fetchall()
    recorded = json.loads(row[0])
    assert recorded["malloc"].startswith("mallopt arena_max=1")
    assert recorded["settings"]["OPENBLAS_NUM_THREADS"] == "1"
