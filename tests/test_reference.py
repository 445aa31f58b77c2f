"""The shipped reference (`harness.reference`, docs/presets.md): its report is what its store
renders, and a layer is compared against it training only its own runs.

Where the repository ships reports/cpu-full/store.sqlite.xz, its report is rendered again from
that store and must equal the shipped files byte for byte. Whether or not it does, a tiny
reference is made here from the smoke preset (two models of the accuracy study and one variant
of the stability study: the studies a layer enters that train, one of them grown from the
other's results), compressed as the Makefile does, and exercised: the same bytes again, a
compare that trains only the outside layer's runs (examples/s6.py) and reports all models, and
a reference this code would not make again refused with what changed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import shutil
import sqlite3
from pathlib import Path

import pandas as pd
import pytest

from linrnn_bench.harness import reference
from linrnn_bench.harness.cli import main
from linrnn_bench.harness.report import MARKER, origins, render
from linrnn_bench.harness.runner import run_study
from linrnn_bench.harness.store import Store
from linrnn_bench.harness.studies import accuracy, stability

from helpers import builtin_models_only, isolated_registry

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ROOT / "reports" / "cpu-full"
S6 = "examples.s6:S6"
MODELS = ("lru", "rotrnn")  # the tiny reference's accuracy models
VARIANTS = ("lru",)  # and its stability variants


def _digests(folder: Path) -> dict[str, str]:
    """sha256 of every file under ``folder`` but the compressed store, by relative path."""
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name != reference.STORE_FILE}


def _rerender_differences(folder: Path, tmp: Path) -> list[str]:
    """The files that differ between the report in ``folder`` and the one its shipped store
    renders now (present in one only, or other bytes)."""
    store = tmp / "unpacked.sqlite"
    reference.decompress(folder / reference.STORE_FILE, store)
    with builtin_models_only():  # as `make reference-report` renders it, in a fresh process
        render(store, tmp / "again")
    shipped, again = _digests(folder), _digests(tmp / "again")
    return sorted(n for n in {*shipped, *again} if shipped.get(n) != again.get(n))


@pytest.mark.slow
@pytest.mark.skipif(not (SHIPPED / reference.STORE_FILE).exists(),
                    reason="no reference is shipped yet (make reference writes reports/cpu-full)")
def test_the_shipped_reference_report_is_what_its_store_renders(tmp_path):
    differing = _rerender_differences(SHIPPED, tmp_path)
    assert not differing, (
        f"reports/cpu-full differs from what its store.sqlite.xz renders in {differing}; "
        "render it again with make reference-report (or make reference after a code change)")
    assert reference.open_reference(SHIPPED).preset == "cpu-full"


@pytest.mark.skipif(not (SHIPPED / reference.STORE_FILE).exists(),
                    reason="no reference is shipped yet (make reference writes reports/cpu-full)")
def test_the_readme_results_are_what_the_shipped_reference_says():
    from linrnn_bench.harness import reference_readme

    block = reference_readme.readme_block(ROOT / "README.md")
    assert block, "README.md has no results block (its RESULTS markers)"
    made = reference_readme.results_block(Path("reports") / "cpu-full", root=ROOT)
    assert block == made, ("README.md's results differ from the shipped reference's: paste "
                           "`python -m linrnn_bench.harness.reference_readme` there")
    assert "n = 10" in made and "The RotRNN paper's claim" in made


# --------------------------------------------------------------------------------------------
# A tiny reference, made here


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    """A reference folder of the smoke preset, as make reference leaves one: its report and
    its store compressed beside it (the store itself kept elsewhere)."""
    root = tmp_path_factory.mktemp("reference")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LINRNN_CHECKPOINTS", str(root / "checkpoints"))
        store = Store(root / "made" / "store.sqlite")
        for study, field, models in ((accuracy.STUDY, "models", MODELS),
                                     (stability.STUDY, "variants", VARIANTS)):
            config = dataclasses.replace(study.config("smoke"), **{field: models})
            summary = run_study(study, config, store=store, progress=False)
            assert summary.counts == {"done": summary.total}
        folder = root / "smoke"
        with builtin_models_only():  # as make reference renders it, in a fresh process
            render(store, folder)
        reference.compress(store.path, folder / reference.STORE_FILE)
    return folder


def _copy(folder: Path, tmp: Path, name: str = "smoke") -> Path:
    """A copy of the reference ``folder`` (named ``name``, its preset's)."""
    return Path(shutil.copytree(folder, tmp / "refs" / name))


def test_the_reference_renders_byte_identically_from_its_compressed_store(tiny, tmp_path):
    assert _rerender_differences(tiny, tmp_path) == []
    # The same store compresses to the same bytes (make reference after no new run).
    reference.compress(tmp_path / "unpacked.sqlite", tmp_path / "again.xz")
    reference.decompress(tmp_path / "again.xz", tmp_path / "twice.sqlite")
    reference.compress(tmp_path / "twice.sqlite", tmp_path / "twice.xz")
    assert (tmp_path / "again.xz").read_bytes() == (tmp_path / "twice.xz").read_bytes()
    assert reference.open_reference(tiny).preset == "smoke"
    # A folder of another name finds its preset in its provenance.json.
    assert reference.open_reference(_copy(tiny, tmp_path, "elsewhere")).preset == "smoke"


def _models(store: Store, study: str) -> dict[str, int]:
    return dict(pd.Series(origins.run_models(store.runs(study))).value_counts())


@pytest.mark.slow
def test_compare_trains_only_the_layers_runs_and_reports_every_model(tiny, tmp_path,
                                                                     monkeypatch, capsys):
    monkeypatch.setenv("LINRNN_CHECKPOINTS", str(tmp_path / "checkpoints"))
    monkeypatch.setenv("LINRNN_JAX_CACHE", "")
    before = _digests(tiny), (tiny / reference.STORE_FILE).read_bytes()
    store_path, out = tmp_path / "mine.sqlite", tmp_path / "against"
    with isolated_registry("examples.s6", "examples"):
        code = main(["compare", S6, "--reference", str(tiny), "--store", str(store_path),
                     "--out", str(out)])
        assert code == 0, capsys.readouterr().err
        printed = capsys.readouterr().out
        store = Store(store_path, create=False)
        # Every run of the reference, once, and the layer's runs at the same preset beside.
        assert _models(store, "accuracy") == {"lru": 1, "rotrnn": 1, S6: 1}
        assert _models(store, "stability") == {"lru": 1, S6: 1}
        labels = origins.with_presets(store.runs("accuracy"), "accuracy")
        assert set(labels["preset"]) == {"smoke"}
        # Resumed, the store is kept as it is (no run of the layer is lost).
        with reference.unpacked(reference.open_reference(tiny)) as shipped:
            assert reference.install(shipped, store_path) is False
    assert "reference" in printed and "so they are reused" in printed
    assert "accuracy: 1 runs, 0 already recorded" in printed
    tables = {name: pd.read_csv(out / "tables" / f"{name}.csv").astype(str).to_numpy().ravel()
              for name in ("accuracy_test", "stability_summary_listops")}
    assert {"LRU", "RotRNN", "S6"} <= set(tables["accuracy_test"])
    assert {"LRU", "S6"} <= set(tables["stability_summary_listops"])
    assert (_digests(tiny), (tiny / reference.STORE_FILE).read_bytes()) == before


def _tampered(tiny: Path, tmp: Path, statement: str) -> Path:
    """A copy of the reference whose store ``statement`` changed, compressed again."""
    folder = _copy(tiny, tmp)
    store = tmp / "tampered.sqlite"
    reference.decompress(folder / reference.STORE_FILE, store)
    with contextlib.closing(sqlite3.connect(store)) as db, db:
        assert db.execute(statement).rowcount == 1
    reference.compress(store, folder / reference.STORE_FILE)
    return folder


def _refused(argv: list[str], store_path: Path, capsys) -> str:
    """Run ``compare``; it must exit 2 having trained and written nothing. Its stderr."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and not store_path.exists()
    assert "make reference" in err.splitlines()[-1] and "nothing was trained" in err
    return err


def test_compare_refuses_a_reference_this_code_would_not_make(tiny, tmp_path, monkeypatch,
                                                              capsys):
    store_path = tmp_path / "mine.sqlite"
    argv = ["compare", "lru", "--reference", str(tiny), "--store", str(store_path), "--out",
            str(tmp_path / "against")]
    # A study's version bumped since the reference was made: every run id changes.
    version = accuracy.STUDY.version
    monkeypatch.setattr(accuracy, "STUDY", dataclasses.replace(accuracy.STUDY,
                                                               version=version + 1))
    err = _refused(argv, store_path, capsys)
    assert "study accuracy" in err and f"made by study version {version}" in err
    assert f"this code's Study.version is {version + 1}" in err
    assert "their specs are unchanged" in err and "study stability" not in err
    monkeypatch.undo()
    # A preset's setting changed since: the field is named, with both values.
    smoke = accuracy.STUDY.presets["smoke"]
    changed = dataclasses.replace(smoke, train=dataclasses.replace(smoke.train, steps=5))
    monkeypatch.setattr(accuracy, "STUDY", dataclasses.replace(
        accuracy.STUDY, presets={**accuracy.STUDY.presets, "smoke": changed}))
    err = _refused(argv, store_path, capsys)
    assert "train.steps (stored 4, now 5)" in err and "study version" not in err
    monkeypatch.undo()
    # A stored run whose recorded spec is not its id's (edited by hand).
    folder = _tampered(tiny, tmp_path, "UPDATE runs SET config = json_set(config, "
                       "'$.train.steps', 7) WHERE run_id = (SELECT MIN(run_id) FROM runs "
                       "WHERE study = 'stability')")
    err = _refused([*argv[:3], str(folder), *argv[4:]], store_path, capsys)
    assert "study stability" in err and "1 stored runs were recorded with a spec other" in err
    assert "train.steps (stored 7, now 4)" in err


def test_the_report_says_when_runs_are_older_than_their_study():
    current = accuracy.STUDY.version
    summary = {"study": "accuracy", "runs": {"done": 3}, "presets": ["cpu"], "seeds": [0]}
    old = origins.describe({**summary, "study_version": [current - 1]})
    assert (f"These runs were made by version {current - 1} of the accuracy study, older than "
            f"this code's version {current}") in old
    mixed = origins.describe({**summary, "study_version": [current - 1, current]})
    assert "Some of these runs were made by version" in mixed
    now = origins.describe({**summary, "study_version": [current]})
    assert "version" not in now and now.endswith(".")
