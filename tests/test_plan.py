"""The plan and the rehearsal (`harness.plan`) on tiny variants of the presets."""

from __future__ import annotations

import dataclasses

import pytest

from linrnn_bench.harness import plan, studies
from linrnn_bench.harness.cli import main
from linrnn_bench.models.network import NetworkConfig

H100 = plan.device_target("h100")


def _tiny_gpu_accuracy():
    """The accuracy study's gpu preset with its shapes overridden down (one model, one task)."""
    config = studies.get("accuracy").config("gpu")
    return dataclasses.replace(
        config, models=("lru",), tasks=("listops",), seeds=(0, 1), task_preset="smoke",
        recipes=(), network=NetworkConfig(depth=1, d_model=8, d_state=8),
        train=dataclasses.replace(config.train, steps=4, batch_size=4, eval_every=2,
                                  eval_batch_size=16))


def _tiny_configs():
    """A tiny config of each study: the smoke preset with one or two models, and for the
    accuracy study the gpu preset at tiny shapes."""
    get = lambda name, **kw: studies.get(name).config("smoke", kw)  # noqa: E731
    return {
        "accuracy": _tiny_gpu_accuracy(),
        "stability": get("stability", variants="lru"),
        "theory": get("theory", variants="lru,s4d", equivalence_variants=""),
        "throughput": get("throughput", models="lru,s4d"),
        "memory": get("memory", models="s4d", modes="train"),
    }


@pytest.fixture(scope="module")
def plans():
    return plan.catalogue("smoke", configs=_tiny_configs())


def test_the_plan_lists_every_run_of_every_grid(plans):
    configs = _tiny_configs()
    assert [p.name for p in plans] == studies.names()
    for p in plans:
        study = studies.get(p.name)
        assert p.error is None, p.error
        assert [r.run_id for r in p.runs] == [study.run_id(s) for s in study.grid(configs[p.name])]
        keys = [program.key for program in p.programs()]
        assert len(keys) == len(set(keys)) > 0
        assert all(n > 0 for r in p.runs for _, n in r.uses)


def test_programs_match_the_grids(plans):
    by = {p.name: p for p in plans}
    # Two seeds of one (model, task): one training step and one evaluation program, shared.
    accuracy = by["accuracy"]
    assert len(accuracy.runs) == 2
    assert sorted(program.key[0] for program in accuracy.programs()) == ["eval", "train_step"]
    step = next(pr for pr, _ in accuracy.runs[0].uses if pr.key[0] == "train_step")
    assert dict(accuracy.runs[0].uses)[step] == 4  # train.steps
    # Throughput: one layer program per (model, mode) of the smoke preset; memory one per L.
    assert len(by["throughput"].programs()) == 2 * 2
    memory = by["memory"]
    assert [len(r.uses) for r in memory.runs] == [2]
    # Stability: a trained depth has a step, an evaluation and two probes.
    assert sorted(program.key[0] for program in by["stability"].programs()) == [
        "eval", "probe_grads", "probe_norms", "train_step"]


def test_the_plan_prices_with_counts_and_says_it_is_a_lower_bound(plans):
    text = plan.plan_text(plans, H100, preset="smoke", compile=False)
    assert "LOWER BOUNDS" in text and "report total (lower bound)" in text
    for name in studies.names():
        assert f"== {name}" in text
    layer = plans[-1].programs()[0]
    priced = plan.price(layer, H100, compile=False)
    assert priced.counts is not None and priced.bound_s == pytest.approx(
        max(priced.counts.flops / H100.peaks.flops_per_s,
            priced.counts.bytes / H100.peaks.bytes_per_s))


def test_compiled_memory_flags_a_program_that_does_not_fit(plans):
    layer = next(p for p in plans if p.name == "memory").programs()[-1]  # train, L = 1024
    roomy = plan.price(layer, H100)
    assert roomy.fits and roomy.memory["total_bytes"] > 0 and roomy.xla.get("xla_flops")
    assert roomy.algorithm == "convolution"  # S4D's accelerator path, not the CPU kernel
    small = plan.device_target(None, 1e12, 1e11, memory=roomy.memory["total_bytes"] * 0.75)
    tight = plan.price(layer, small)
    assert tight.fits is False and 0 <= tight.largest_batch < layer.batch


def test_the_rehearsal_runs_the_accelerator_path_and_collects_failures(plans):
    chosen = next(p for p in plans if p.name == "throughput").programs()[:2]  # LRU layer
    broken = dataclasses.replace(chosen[1], label="broken", build=_raises)
    results, tasks_, _ = plan.rehearse("smoke", configs=_tiny_configs(),
                                       programs=[broken, *chosen], names=["accuracy"])
    assert [r.ok for r in results] == [False, True, True]  # not first-fail
    assert "injected" in results[0].error
    assert all(r.step_s > 0 and r.compile_s > 0 and r.memory_bytes > 0 for r in results[1:])
    assert {r.algorithm for r in results[1:]} == {"parallel"}  # LRU's accelerator scan
    assert [t.ok for t in tasks_] == [True] and tasks_[0].compile_s > 0
    text = plan.rehearsal_text(results, tasks_, preset="smoke", seconds=1.0)
    assert "1 failure(s)" in text and "broken: RuntimeError: injected" in text


def _raises(batch, abstract):
    raise RuntimeError("injected")


def test_a_reduced_batch_is_said():
    layer = plan.layer_program("lru", 8, 8, (), "forward", 64, 8)
    one = plan.rehearse_program(layer, budget=1.0)  # nothing fits: down to batch 1, then fails
    assert not one.ok and one.batch == 1 and "exceeds" in one.error


def test_task_generation_is_timed_and_capped():
    r = plan.rehearse_task("listops", tuple(sorted(
        plan.reduced_options("listops", {"num_train": 500}, None).items())), examples=20)
    assert r.ok and r.batch == 60 and r.planned_batch > r.batch and "extrapolated" in r.detail


def test_cli_plan_and_bad_device(tmp_path, capsys):
    store = tmp_path / "none.sqlite"
    assert main(["plan", "--preset", "smoke", "--device", "h100", "--no-compile",
                 "--study", "throughput", "--store", str(store)]) == 0
    out = capsys.readouterr().out
    assert "NVIDIA H100 SXM" in out and "== throughput" in out and not store.exists()
    assert main(["plan", "--device", "tpu-v9"]) == 2
    assert "invalid choice" in capsys.readouterr().err
    assert main(["plan", "--preset", "smoke", "--bandwidth", "1e12"]) == 2
