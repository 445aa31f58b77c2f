"""`harness._malloc`: the process-wide malloc settings that `harness` applies at import."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import subprocess
import sys

import pytest

from linrnn_bench.harness import _malloc


def test_keep_freed_memory_stands_down_when_switched_off_or_tunables_are_set(monkeypatch):
    monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    monkeypatch.setenv(_malloc.ENV, "0")
    assert _malloc.keep_freed_memory() is False
    monkeypatch.delenv(_malloc.ENV)
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.mmap_max=0")
    assert _malloc.keep_freed_memory() is False


def _glibc() -> bool:
    name = ctypes.util.find_library("c")
    return sys.platform.startswith("linux") and name is not None and hasattr(
        ctypes.CDLL(name), "gnu_get_libc_version")


@pytest.mark.skipif(not _glibc(), reason="glibc's mallopt only")
def test_importing_harness_applies_the_settings_in_a_fresh_process():
    # A fresh process without GLIBC_TUNABLES (as outside `make`): importing harness works with
    # the settings applied, and glibc accepts every value (a refused mallopt returns False).
    code = ("import linrnn_bench.harness, linrnn_bench.harness._malloc as m, "
            "linrnn_bench.harness.provenance as p; "
            "print(m.keep_freed_memory()); print(p.provenance()['malloc'])")
    env = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
    env.pop(_malloc.ENV, None)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True)
    applied, recorded = out.stdout.strip().splitlines()
    assert applied == "True"
    assert recorded.startswith("mallopt arena_max=1")  # every run's provenance says so
