"""A study is one registration: a toy sixth study (`tests/_toy_study.py`), added to the study
registry and nowhere else, is listed by the command line, planned by ``plan``, run by ``study``
and reported (its section in the rendered index); what a study does with the command line's
``layer.<option>`` values, where the published numbers go and the one run ``train`` makes are
declared by the study, not decided by its name elsewhere."""

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


def test_a_study_declares_where_layer_options_go(toy, tmp_path):
    store_path = tmp_path / "results.sqlite"
    assert main(["study", "toy", "--preset", "smoke", "layer.width=3",
                 "--store", str(store_path)]) == 0
    assert set(Store(store_path).read("toy")["options"]) == {"(('width', '3'),)"}


def test_the_published_numbers_follow_the_section_that_declares_them(toy, tmp_path,
                                                                     monkeypatch):
    from linrnn_bench.harness.report import render

    monkeypatch.setattr(studies, "names", lambda: ["toy", "accuracy"])
    out = tmp_path / "reports"
    render(Store(tmp_path / "s.sqlite"), out)
    index = (out / "index.md").read_text()
    published = index.index("## Published numbers (not ours)")
    assert index.index("## Toy study") < published < index.index("## Accuracy")
    assert index.count("## Published numbers (not ours)") == 1


def test_the_accuracy_study_declares_the_one_run_train_makes():
    from linrnn_bench.harness.settings import COMMAND_LINE

    study = studies.get("accuracy")
    config = study.one_run(study.config("smoke"), "lru", "digits", (0, 1),
                           (("train.steps", "3"),))
    assert (config.models, config.tasks, config.seeds) == (("lru",), ("digits",), (0, 1))
    assert config.group_seeds and config.depths == () and config.tune_tasks == ()
    assert config.tuning_seeds == 0
    assert config.recipes[-1].overrides == (("train.steps", "3"),)
    assert config.recipes[-1].source == COMMAND_LINE


def test_train_finds_its_study_by_registration_and_explains_its_run(toy, capsys):
    """The study ``train`` runs is the registered one declaring `Study.one_run` (the toy study
    declares none); ``--explain`` prints the settings its `Study.resolve_run` gives."""
    assert studies.training() is studies.get("accuracy")
    assert main(["train", "model=lru", "task=digits", "train.steps=3", "--preset", "smoke",
                 "--explain"]) == 0
    out = capsys.readouterr().out
    assert "train.steps" in out and "the command line" in out
    with pytest.raises(ValueError, match="one_run and resolve_run go together"):
        studies.Study(name="x", description="", presets=toy.presets, grid=toy.grid,
                      run=toy.run, one_run=studies.get("accuracy").one_run)
