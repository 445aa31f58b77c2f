"""The command line: listings, one-line errors with status 2, a smoke study, the Ray executor."""

from __future__ import annotations

import importlib.util

import pytest

from harness.cli import main
from harness.store import Store

SMOKE_ONE = ["models=lru"]  # one model of the smoke preset: seconds


@pytest.fixture(autouse=True)
def quiet_environment(monkeypatch, tmp_path):
    # No persistent compilation cache from tests (it is process-global jax state), and
    # checkpoints in the test's own directory.
    monkeypatch.setenv("LINRNN_JAX_CACHE", "")
    monkeypatch.setenv("LINRNN_CHECKPOINTS", str(tmp_path / "checkpoints"))


def test_list_names_every_model_task_and_study(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for name in ("lru", "rotrnn", "s4d", "s5", "listops", "mqar", "digits", "accuracy", "smoke"):
        assert f"  {name} " in out
    assert main(["list", "tasks"]) == 0
    assert "accuracy" not in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["study", "nope"], "Unknown study 'nope'; accepted: accuracy"),
        (["study", "accuracy", "--preset", "huge"],
         "Unknown preset 'huge'; accepted: smoke, cpu, gpu"),
        (["study", "accuracy", "--preset", "smoke", "colour=red"], "Unknown key 'colour'"),
        (["study", "accuracy", "--preset", "smoke", "train.steps=abc"], "is not an integer"),
        (["study", "accuracy", "--preset", "smoke", "models=gru"], "Unknown models ['gru']"),
        (["study", "accuracy", "oops"], "'oops' is not of the form key=value"),
        (["study", "accuracy", "--executor", "spark"], "invalid choice: 'spark'"),
        (["study", "accuracy", "--ray-address", "x"], "--ray-address needs --executor ray"),
        (["train", "model=lru", "colour=red"], "Unknown key(s) ['colour'] for train"),
        (["train", "model=gru"], "Unknown models ['gru']"),
        (["train", "seed=x"], "train.seed='x' is not an integer"),
        (["train", "layer.nope=1"], "Unknown option(s) ['nope'] for model"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
    ],
)
def test_mistakes_print_one_line_and_exit_2(argv, message, capsys, tmp_path):
    assert main([*argv, "--store", str(tmp_path / "s.sqlite")] if argv[0] != "frobnicate"
                else argv) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")
    assert message in lines[0]
    assert "Traceback" not in captured.err + captured.out
    assert not (tmp_path / "s.sqlite").exists() or Store(tmp_path / "s.sqlite").recorded() == {}


def test_smoke_study_fills_the_store_and_a_rerun_skips_it(capsys, tmp_path):
    store_path = tmp_path / "results" / "store.sqlite"
    argv = ["study", "accuracy", "--preset", "smoke", *SMOKE_ONE, "--store", str(store_path)]
    assert main(argv) == 0
    assert "1 runs, 0 already recorded; this time: 1 done" in capsys.readouterr().out
    frame = Store(store_path).read("accuracy")
    final = frame[frame["kind"] == "final"].iloc[0]
    assert final["cfg.network.layer"] == "lru" and final["cfg.task"] == "digits"
    assert 0.0 <= final["test_accuracy"] <= 1.0 and final["params"] > 0
    assert final["prov.backend"] == "cpu" and final["prov.study_version"] == 1
    assert list(frame[frame["kind"] == "eval"]["step"]) == [2, 4]
    assert main(argv) == 0
    assert "1 runs, 1 already recorded; this time: nothing to run" in capsys.readouterr().out
    assert not any((tmp_path / "checkpoints").glob("*.eqx"))

    # `train` is one run of the same recipe, kept apart from the study's rows.
    assert main(["train", "model=lru", "task=digits", "preset=smoke",
                 "--store", str(store_path)]) == 0
    out = capsys.readouterr().out
    assert "final" in out and "test_accuracy" in out
    store = Store(store_path)
    assert len(store.recorded("train")) == 1 and len(store.recorded("accuracy")) == 1
    train_final = store.read("train").query("kind == 'final'").iloc[0]
    assert train_final["test_accuracy"] == final["test_accuracy"]  # same spec, same numbers


# Ray starts its processes through subprocess with a preexec_fn, which runs the interpreter's
# at-fork hooks; JAX's hook warns about forking a multithreaded process, but the child execs
# at once, so that warning does not apply here.
@pytest.mark.filterwarnings("ignore:os.fork\\(\\) was called:RuntimeWarning")
@pytest.mark.skipif(importlib.util.find_spec("ray") is None,
                    reason="ray is not installed (optional extra: pip install 'linrnn-bench[ray]')")
def test_ray_executor_runs_the_grid_and_only_the_driver_writes(capsys, tmp_path):
    import ray

    store_path = tmp_path / "store.sqlite"
    try:
        code = main(["study", "accuracy", "--preset", "smoke", *SMOKE_ONE, "--executor", "ray",
                     "--store", str(store_path)])
    finally:
        ray.shutdown()
    assert code == 0
    assert "1 runs, 0 already recorded; this time: 1 done" in capsys.readouterr().out
    store = Store(store_path)
    runs = store.runs("accuracy")
    assert list(runs["seed"]) == [0] and list(runs["status"]) == ["done"]
    # The worker's outcome reached the store through the driver, rows and provenance whole.
    final = store.read("accuracy").query("kind == 'final'")
    assert len(final) == 1 and 0.0 <= final["test_accuracy"].iloc[0] <= 1.0
    assert final["prov.backend"].iloc[0] == "cpu"
