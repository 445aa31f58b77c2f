"""pytest-benchmark of the network's training step at the accuracy study's shapes
(`benchmarks.bench_network`): one training step per round, on the run's own batches.

``extra_info`` records the real (unpadded) tokens per step, the in-run ratio over the baseline
network (reference-style layers, calls alternating in this process), the roofline fraction of
the whole step, the compile seconds and the engine's algorithm. The baseline must compute the
same loss as ours for its time to mean anything; that is checked first.
"""

from __future__ import annotations

import jax
import pytest

from benchmarks import bench_network, common

ROUNDS = 10
CASES = [(m, t) for m in common.MODELS for t in bench_network.TASKS]


@pytest.fixture(scope="module", params=CASES, ids=lambda c: f"{c[0]}-{c[1]}")
def case(request):
    return request.param


def test_network_step(benchmark, case):
    model, task = case
    error = bench_network.baseline_loss_error(model, task)
    assert error < 1e-4, f"baseline network and {model} disagree: relative error {error:.2e}"
    step = bench_network.training_step(model, task)
    benchmark.extra_info.update(common.environment(model))
    benchmark.extra_info["baseline_rel_error"] = error
    benchmark.extra_info["real_tokens_per_step"] = step.real_tokens
    benchmark.extra_info["padded_tokens_per_step"] = step.padded_tokens
    benchmark.extra_info["compile_s"] = bench_network.step_compile_seconds(model, task)
    benchmark.extra_info.update(bench_network.step_speedup(model, task))
    fraction = bench_network.step_roofline(model, task)
    for key in ("roofline_fraction", "bound_s", "bound_limiter", "count_source"):
        benchmark.extra_info[key] = fraction[key]
    benchmark.pedantic(lambda: jax.block_until_ready(step.call("step")), rounds=ROUNDS,
                       iterations=1, warmup_rounds=1)
