"""The command line: listings, one-line errors with status 2, a smoke study, the executors."""

from __future__ import annotations

import dataclasses
import importlib.util
import os

import pandas as pd
import pytest

from linrnn_bench.harness.cli import main
from linrnn_bench.harness.executors import ExecutorError, ProcessExecutor, _seed_major, schedule
from linrnn_bench.harness.measure.lifetime import core_shares
from linrnn_bench.harness.runner import run_study
from linrnn_bench.harness.store import Store
from linrnn_bench.harness.studies import PRESET_NAMES, Study
from linrnn_bench.harness.studies import get as get_study

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
         "Unknown preset 'huge'; accepted: smoke, cpu, cpu-full, gpu"),
        (["study", "accuracy", "--preset", "smoke", "colour=red"], "Unknown key 'colour'"),
        (["study", "accuracy", "--preset", "smoke", "train.steps=abc"], "is not an integer"),
        (["study", "accuracy", "--preset", "smoke", "models=gru"], "Unknown models ['gru']"),
        (["study", "accuracy", "oops"], "'oops' is not of the form key=value"),
        (["study", "accuracy", "--executor", "spark"], "invalid choice: 'spark'"),
        (["study", "accuracy", "--ray-address", "x"], "--ray-address needs --executor ray"),
        (["study", "accuracy", "--executor", "processes", "--workers", "0"],
         "workers must be a positive integer, got 0"),
        (["report", "--run", "--workers", "-1", "--executor", "processes"],
         "workers must be a positive integer, got -1"),
        (["train", "model=lru", "colour=red"], "Unknown key(s) ['colour'] for train"),
        (["train", "model=gru"], "Unknown models ['gru']"),
        (["train", "seed=x"], "train.seed='x' is not an integer"),
        (["train", "layer.nope=1"], "Unknown key 'nope' for accuracy run (rotrnn, digits) layer"),
        (["train", "model=rotrnn", "layer.heads=two"], "layer.heads='two' is not an integer"),
        (["study", "accuracy", "layer.r_min=x"],
         "accuracy run (lru, digits) layer.r_min='x' is not a number"),
        (["study", "accuracy", "layer.r_min=0.5", "network.layer.r_min=0.6"],
         "network.layer.r_min=0.6: set the layer's option as layer.r_min=0.6."),
        (["study", "accuracy", "--preset", "cpu", "preset=smoke"],
         "preset=smoke: name the preset with --preset smoke."),
        (["train", "--preset", "cpu", "preset=smoke"], "name the preset with --preset smoke"),
        (["report", "--preset", "cpu", "preset=smoke"], "name the preset with --preset smoke"),
        (["report", "train.steps=3"], "report takes no key=value settings (got train.steps=3)"),
        (["study", "theory", "layer.heads=2"], "Study 'theory' takes no layer options"),
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
    assert final["prov.backend"] == "cpu"
    assert final["prov.study_version"] == get_study("accuracy").version
    assert list(frame[frame["kind"] == "eval"]["step"]) == [2, 4]
    assert main(argv) == 0
    assert "1 runs, 1 already recorded; this time: nothing to run" in capsys.readouterr().out
    assert not any((tmp_path / "checkpoints").glob("*.eqx"))

    # `train` is one run of the same recipe, kept apart from the study's rows.
    assert main(["train", "model=lru", "task=digits", "--preset", "smoke",
                 "--store", str(store_path)]) == 0
    out = capsys.readouterr().out
    assert "final" in out and "test_accuracy" in out
    store = Store(store_path)
    assert len(store.recorded("train")) == 1 and len(store.recorded("accuracy")) == 1
    train_final = store.read("train").query("kind == 'final'").iloc[0]
    assert train_final["test_accuracy"] == final["test_accuracy"]  # same spec, same numbers


def without_timing(frame):
    """The rows minus what legitimately differs between two executions: times, provenance."""
    keep = [c for c in frame.columns
            if not c.startswith("prov.") and "seconds" not in c and not c.endswith("_at")]
    return frame[keep].sort_values(["run_id", "kind", "step"]).reset_index(drop=True)


def test_processes_executor_records_the_rows_of_the_local_one(capsys, tmp_path):
    # Two models at once in two spawned workers: the driver alone writes, the numbers are the
    # local executor's to the bit (at this width XLA divides no sum among its threads, so the
    # workers' fewer threads change nothing: `test_the_executors_agree_at_one_thread_count`),
    # and each run says where and beside how many it ran.
    argv = ["study", "accuracy", "--preset", "smoke", "models=(lru,s5)"]
    assert main([*argv, "--store", str(tmp_path / "local.sqlite")]) == 0
    assert main([*argv, "--executor", "processes", "--workers", "2",
                 "--store", str(tmp_path / "processes.sqlite")]) == 0
    assert "2 runs, 0 already recorded; this time: 2 done" in capsys.readouterr().out
    local = Store(tmp_path / "local.sqlite").read("accuracy")
    pooled = Store(tmp_path / "processes.sqlite").read("accuracy")
    assert without_timing(pooled).equals(without_timing(local))
    assert set(local["prov.executor"]) == {"local"} and set(local["prov.concurrent_runs"]) == {1}
    assert set(pooled["prov.executor"]) == {"processes"}
    assert set(pooled["prov.concurrent_runs"]) == {2}


@dataclasses.dataclass(frozen=True)
class Spec:
    seed: int


def _grid(config) -> list[Spec]:
    return [Spec(0), Spec(1)]


def _run(spec: Spec) -> list[dict]:
    return [{"value": float(spec.seed), "pid": os.getpid()}]


def _run_or_die(spec: Spec) -> list[dict]:
    if spec.seed == 1:
        os._exit(3)  # a worker killed mid-run (out of memory, kill -9)
    return _run(spec)


def _seeds(config: int) -> list[Spec]:
    return [Spec(seed) for seed in range(config)]


def _column_sums(spec: Spec) -> list[dict]:
    """The column sums of a (960, 48) array: the sum a width-48 layer's weight gradient makes
    over a batch of 16 sequences of 60 steps, which XLA's CPU backend divides among its
    threads, so that their number changes the order of the float additions."""
    import jax
    import numpy as np

    x = np.random.default_rng(spec.seed).standard_normal((960, 48), dtype=np.float32)
    sums = jax.jit(lambda a: a.sum(axis=0))(x)
    return [{"column": i, "sum": float(v)} for i, v in enumerate(np.asarray(sums))]


# Module level, so that spawned worker processes can import what they run.
TIMED = Study("timed", "an exclusive study", dict.fromkeys(PRESET_NAMES), _grid, _run,
              exclusive=True)
DYING = Study("dying", "a study whose worker dies", dict.fromkeys(PRESET_NAMES), _grid,
              _run_or_die)
SUMS = Study("sums", "sums at a width where XLA's thread count matters",
             dict.fromkeys(PRESET_NAMES), _seeds, _column_sums)


def test_workers_take_the_runs_seed_major():
    # Runs that differ only in the seed share their programs: the first seed's compile in
    # parallel, the later seeds find them compiled.
    specs = [Spec(1), Spec(0), Spec(1), Spec(2), Spec(0)]
    ordered = _seed_major(specs)
    assert [s.seed for s in ordered] == [0, 0, 1, 1, 2]
    assert ordered[0] is specs[1] and ordered[1] is specs[4]  # the grid's order within a seed


@dataclasses.dataclass(frozen=True)
class Tuned:
    model: str
    lr: float
    seed: int


def _tuned_grid(config) -> list[Tuned]:
    return [Tuned(m, lr, seed) for seed in (0, 1) for m in ("a", "b") for lr in (1.0, 2.0)]


def _tuned_run(spec: Tuned) -> list[dict]:
    return [{"value": spec.lr * (spec.seed + 1), "pid": os.getpid(),
             "cores": ",".join(map(str, sorted(os.sched_getaffinity(0))))}]


def _model(spec: Tuned) -> str:
    return spec.model


# A grid whose runs of one model share their programs (the learning rate and seed are data).
TUNED = Study("tuned", "a tuned grid", dict.fromkeys(PRESET_NAMES), _tuned_grid, _tuned_run,
              programs=_model)


def test_workers_take_one_run_of_every_program_group_first():
    # Two workers starting a and a (two learning rates of one model) would both compile a's
    # programs; a and b first compile different ones side by side.
    ordered = schedule(TUNED, _tuned_grid(None))
    assert [(s.model, s.lr, s.seed) for s in ordered[:2]] == [("a", 1.0, 0), ("b", 1.0, 0)]
    assert [(s.model, s.lr, s.seed) for s in ordered[2:]] == [
        ("a", 2.0, 0), ("b", 2.0, 0), ("a", 1.0, 1), ("a", 2.0, 1), ("b", 1.0, 1), ("b", 2.0, 1)]
    assert sorted(map(repr, ordered)) == sorted(map(repr, _tuned_grid(None)))  # nothing lost
    # Without a key the order is seed-major.
    plain = Study("plain", "", dict.fromkeys(PRESET_NAMES), _tuned_grid, _tuned_run)
    assert schedule(plain, _tuned_grid(None)) == _seed_major(_tuned_grid(None))


def test_the_studies_group_runs_by_their_programs():
    from linrnn_bench.harness.studies import accuracy, stability

    specs = accuracy.STUDY.grid(accuracy.STUDY.presets["cpu"])
    groups = {accuracy.programs(s) for s in specs}
    # One group per (model, task): seeds and the tuning grid's learning rates are data.
    assert len(groups) == len({(s.network.layer, s.task) for s in specs})
    # Stability: one group per run but for its seed (trained runs at the preset's seeds,
    # untrained ones at init_seeds).
    specs = stability.STUDY.grid(stability.STUDY.presets["cpu"])
    assert len({stability.programs(s) for s in specs}) == len(
        {dataclasses.replace(s, seed=0) for s in specs}) < len(specs)


def test_workers_serve_every_grid_of_a_with_block(tmp_path):
    store = Store(tmp_path / "s.sqlite")
    with ProcessExecutor(2) as executor:
        first = run_study(TUNED, None, store=store, executor=executor, progress=False)
        again = run_study(TUNED, None, store=store, executor=executor, progress=False,
                          fresh=True)
        pids = set(store.read("tuned")["pid"])
    assert first.counts == again.counts == {"done": 8}
    assert len(pids) <= 2 and os.getpid() not in pids  # the same two workers throughout
    assert executor._kept is None  # ended with the block
    # Each worker on its own share of the cores (one each on two), none shared.
    rows = store.read("tuned")
    cores = {pid: set(map(int, c.split(","))) for pid, c in zip(rows["pid"], rows["cores"])}
    shares = core_shares(2)
    if shares is None:  # fewer than two cores: the workers run unpinned
        assert set(cores.values()) == {set(os.sched_getaffinity(0))}
    else:
        assert all(tuple(sorted(c)) in shares for c in cores.values())
        if len(cores) == 2:
            a, b = cores.values()
            assert not a & b


def _sums(store: Store) -> pd.DataFrame:
    """The sums study's rows in a fixed order, with provenance, minus times."""
    frame = store.read("sums").sort_values(["run_id", "column"]).reset_index(drop=True)
    return frame.drop(columns=[c for c in frame.columns if "seconds" in c or c.endswith("_at")])


def test_the_executors_agree_at_one_thread_count(monkeypatch, capsys, tmp_path):
    # A run's numbers depend on its spec and on the threads XLA's CPU backend divides its sums
    # among (`harness.provenance.xla_cpu_threads`), which each run records; a worker pinned to
    # its share of the cores has fewer than this process. At the same count the processes
    # executor gives the local executor's rows to the bit; at another, equal to round-off,
    # and a grid resumed at another count says so.
    shares = core_shares(2)
    if shares is None:
        pytest.skip("fewer than two cores: the workers are not pinned, and use this process's")
    set_by_user = "PJRT_NPROC" in os.environ or "NPROC" in os.environ
    store = Store(tmp_path / "local.sqlite")
    run_study(SUMS, 2, store=store, progress=False)
    (threads,) = set(_sums(store)["prov.xla_cpu_threads"])
    assert threads >= 1 and "XLA CPU thread" not in capsys.readouterr().out
    # Two runs more, in two workers, each on its share of the cores.
    run_study(SUMS, 4, store=store, executor=ProcessExecutor(2), progress=False)
    mixed = _sums(store)
    shared = mixed[mixed["prov.executor"] == "processes"]
    assert set(shared["prov.cpu_affinity"]) <= {len(share) for share in shares}
    if not set_by_user:
        assert set(shared["prov.xla_cpu_threads"]) <= {len(share) for share in shares}
        note = capsys.readouterr().out
        assert (f"the store's sums runs were made at an XLA CPU thread count of {threads}, "
                "these at " in note and f"PJRT_NPROC={threads}" in note), note
    # The whole grid in workers given this process's thread count (PJRT_NPROC: XLA reads it
    # first): the local runs' rows to the bit, the other workers' to round-off (sums of about
    # 30, of 960 unit normals, in float32, whose ulp there is 2e-6).
    monkeypatch.setenv("PJRT_NPROC", str(threads))
    matched_store = Store(tmp_path / "matched.sqlite")
    run_study(SUMS, 4, store=matched_store, executor=ProcessExecutor(2), progress=False)
    matched = _sums(matched_store)
    assert set(matched["prov.xla_cpu_threads"]) == {threads}
    assert set(matched["prov.cpu_affinity"]) <= {len(share) for share in shares}  # still pinned
    columns = ["run_id", "column", "sum"]
    local = mixed["prov.executor"] == "local"
    assert matched[local][columns].equals(mixed[local][columns])
    assert matched["sum"].to_numpy() == pytest.approx(mixed["sum"].to_numpy(), rel=0, abs=1e-4)


def test_workers_share_the_cores_out_evenly(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3, 5})
    assert core_shares(2) == [(0, 1, 2), (3, 5)]  # every core used, sizes within one
    assert core_shares(5) == [(0,), (1,), (2,), (3,), (5,)]
    assert core_shares(1) is None and core_shares(6) is None  # one worker, or too few cores


def test_an_exclusive_study_runs_one_at_a_time_in_the_driver(capsys, tmp_path):
    store = Store(tmp_path / "s.sqlite")
    summary = run_study(TIMED, None, store=store, executor=ProcessExecutor(2), progress=False)
    assert summary.counts == {"done": 2}
    assert "timed measures the machine, so its runs run one at a time" in capsys.readouterr().out
    rows = store.read("timed")
    assert set(rows["pid"]) == {os.getpid()} and set(rows["prov.executor"]) == {"local"}


def test_a_dead_worker_stops_the_grid_with_a_clear_error_and_loses_no_finished_run(tmp_path):
    store = Store(tmp_path / "s.sqlite")
    with pytest.raises(ExecutorError, match="A worker process of the dying grid died"):
        run_study(DYING, None, store=store, executor=ProcessExecutor(2), progress=False)
    # Seed 0 may or may not have come back before the pool broke; whatever was recorded is
    # whole, and the run that killed its worker is not recorded as done.
    recorded = store.recorded("dying")
    assert set(recorded.values()) <= {"done"} and len(recorded) <= 1
    assert len(store.read("dying")) == len(recorded)


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


def test_train_explain_prints_each_option_and_its_source_and_trains_nothing(capsys, tmp_path):
    store = tmp_path / "s.sqlite"
    assert main(["train", "model=lru", "task=listops", "--preset", "cpu", "layer.max_phase=1",
                 "train.steps=7", "--explain", "--store", str(store)]) == 0
    out = capsys.readouterr().out
    lines = {line.split()[0]: line for line in out.splitlines() if line.strip()}
    assert "the lru registration for listops at cpu" in lines["layer.r_min"]
    assert lines["layer.max_phase"].split()[1:] == ["1.0", "the", "command", "line"]
    assert lines["train.steps"].split()[1:] == ["7", "the", "command", "line"]
    assert "recipe: ListOps at its cpu task size" in lines["train.eval_every"]
    assert "the task's cpu preset" in lines["task.max_depth"]
    assert "the study's training recipe" in lines["train.lr"]
    assert "Nothing is trained" in out
    assert not store.exists()  # nothing ran, nothing was recorded


def test_layer_options_in_a_study(capsys, tmp_path, monkeypatch):
    from linrnn_bench.harness.studies import accuracy

    seen = {}

    def fake_run_study(study, config, **kwargs):
        from linrnn_bench.harness.runner import Summary

        seen["config"] = config
        return Summary(study=study.name, total=0, skipped=0, counts={}, seconds=0.0)

    monkeypatch.setattr("linrnn_bench.harness.runner.run_study", fake_run_study)
    store = str(tmp_path / "s.sqlite")
    assert main(["study", "accuracy", "--preset", "smoke", "models=lru,rotrnn",
                 "layer.r_min=0.5", "--store", store]) == 0
    config = seen["config"]
    assert config.train == accuracy.STUDY.config("smoke").train
    specs = {s.network.layer: s for s in accuracy.grid(config)}
    # layer.<option> in a study sets it on the models whose config has it, as train does.
    assert dict(specs["lru"].network.layer_options)["r_min"] == 0.5
    assert "r_min" not in dict(specs["rotrnn"].network.layer_options)
    assert "note:" not in capsys.readouterr().out
    # The stability study takes layer.<option> into its layer_options.
    assert main(["study", "stability", "--preset", "smoke", "layer.max_phase=1.0",
                 "--store", store]) == 0
    assert seen["config"].layer_options == (("max_phase", "1.0"),)


def test_report_that_cannot_write_a_table_exits_non_zero(tmp_path, monkeypatch, capsys):
    """A table whose file fails to write leaves the rest of the report in place, named in the
    index, and the command exits 1 naming it (a partial report never passes for a whole one)."""
    from linrnn_bench.harness.report import writers
    from linrnn_bench.harness.store import Store

    Store(tmp_path / "s.sqlite")  # empty: the published numbers' tables are still written
    write_table = writers.write_table
    refused: list[str] = []

    def failing(table, folder):
        if not refused:
            refused.append(table.name)
            raise RuntimeError("the disk refused it")
        return write_table(table, folder)

    monkeypatch.setattr(writers, "write_table", failing)
    out = tmp_path / "reports"
    assert main(["report", "--store", str(tmp_path / "s.sqlite"), "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert refused and f"error: {refused[0]}: writing it failed: RuntimeError" in err
    assert "but incomplete" in err
    assert refused[0] in (out / "index.md").read_text()
    assert not list(out.glob(f"tables/{refused[0]}.*"))
