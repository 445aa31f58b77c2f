"""A study is one registration: a toy sixth study (`tests/_toy_study.py`), added to the study
registry and nowhere else, is listed by the command line, planned by ``plan``, run by ``study``
and reported (its section in the rendered index)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from linrnn_bench.harness import studies
from linrnn_bench.harness.cli import main
from linrnn_bench.harness.store import Store

TESTS = Path(__file__).resolve().parent


@pytest.fixture
def toy(monkeypatch, tmp_path):
    """The toy study registered as ``toy`` (its module importable by name), for this test."""
    monkeypatch.syspath_prepend(str(TESTS))
    monkeypatch.setitem(studies._REGISTRY, "toy", "_toy_study")
    monkeypatch.setenv("LINRNN_JAX_CACHE", "")
    monkeypatch.setenv("LINRNN_CHECKPOINTS", str(tmp_path / "checkpoints"))
    yield studies.get("toy")
    sys.modules.pop("_toy_study", None)


def test_a_registered_study_is_listed_planned_run_and_reported(toy, tmp_path, capsys):
    store_path, out = tmp_path / "results.sqlite", tmp_path / "reports"
    assert main(["list", "studies"]) == 0
    assert "  toy " in capsys.readouterr().out

    assert main(["study", "toy", "--preset", "smoke", "--store", str(store_path)]) == 0
    assert sorted(Store(store_path).recorded("toy").values()) == ["done", "done"]
    capsys.readouterr()

    assert main(["plan", "--preset", "smoke", "--study", "toy", "--no-compile",
                 "--store", str(store_path)]) == 0
    planned = capsys.readouterr().out
    assert "== toy" in planned and "not planned" not in planned
    assert "2 runs; the store holds 2 done" in planned

    assert main(["report", "--store", str(store_path), "--out", str(out)]) == 0
    index = (out / "index.md").read_text()
    assert "## Toy study" in index and "### Toy squares" in index
    assert (out / "tables" / "toy_squares.csv").exists()
