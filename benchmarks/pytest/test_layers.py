"""pytest-benchmark suite of the layers, at the asv benchmarks' shapes (`benchmarks.common`).

Run by ``make bench`` (``--benchmark-only --benchmark-autosave``: results are saved under
``.benchmarks/`` and two runs compare with ``pytest-benchmark compare``); ``make test`` never
collects this folder. Compilation happens in the fixtures, outside the timed region; each timed
round is one call ending in ``jax.block_until_ready``. Every layer benchmark also records, in
``extra_info``: the engine's algorithm, the allocator, the in-run reference's median time and
the speedup over it (timed alternately in the same process), the published reference time, the
roofline fraction, the in-run ratio at the roofline (the reference's time over the bound), and
XLA's compiled memory of forward+backward.
"""

from __future__ import annotations

import pytest

from benchmarks import common
from linrnn_bench.models import _native

ROUNDS = 5
CASES = [(m, L, mode) for m in common.MODELS for L in common.LENGTHS for mode in common.MODES]


def _ids(case) -> str:
    model, length, mode = case
    return f"{model}-L{length}-{mode}"


@pytest.fixture(scope="module", params=CASES, ids=_ids)
def case(request):
    return request.param


def test_layer(benchmark, case):
    model, length, mode = case
    # The baseline must compute the same function, or its time means nothing.
    if mode == "forward":
        error = common.reference_error(model, length)
        assert error < 1e-4, f"reference and {model} disagree: relative error {error:.2e}"
        benchmark.extra_info["reference_rel_error"] = error
    program = common.layer_program(model, length, mode)
    program.run()
    benchmark.extra_info.update(common.environment(model))
    benchmark.extra_info["compile_s"] = program.compile_s
    benchmark.extra_info.update(common.speedup_over_reference(model, length, mode))
    fraction = common.roofline_fraction(model, length, mode)
    benchmark.extra_info["roofline_fraction"] = fraction["roofline_fraction"]
    benchmark.extra_info["bound_s"] = fraction["bound_s"]
    benchmark.extra_info["bound_limiter"] = fraction["bound_limiter"]
    # The in-run ratio an implementation at the roofline would reach (the reference's median
    # time, timed above, over the bound).
    benchmark.extra_info["speedup_at_roofline"] = (
        benchmark.extra_info["reference_median_s"] / fraction["bound_s"]
    )
    if mode == "forward_backward":
        benchmark.extra_info.update(common.working_memory(model, length))
        benchmark.extra_info.update(common.activation_memory(model))
        if model in common.CHUNKED_MODELS:
            chunked = common.working_memory(model, length, algorithm="chunked")
            benchmark.extra_info["chunked_temp_over_state"] = chunked["temp_over_state"]
            if _native.available():
                unfused = common.working_memory(model, length, algorithm="native")
                benchmark.extra_info["unfused_temp_over_state"] = unfused["temp_over_state"]
    benchmark.pedantic(program.run, rounds=ROUNDS, iterations=1, warmup_rounds=1)


def test_reference(benchmark, case):
    model, length, mode = case
    program = common.reference_program(model, length, mode)
    program.run()
    benchmark.extra_info.update(common.environment())
    benchmark.extra_info["reference_style"] = common.BENCHMARKS[model].structure
    benchmark.pedantic(program.run, rounds=ROUNDS, iterations=1, warmup_rounds=1)


@pytest.mark.parametrize("variant", common.SCAN_VARIANTS)
def test_scan_bandwidth(benchmark, variant):
    from linrnn_bench.models import _native

    if variant == "in_place" and not _native.available():
        pytest.skip(f"the in-place variant is the native kernel: {_native.status().reason}")
    program, states = common.scan_program(variant=variant)
    program.run()
    benchmark.extra_info.update(common.environment())
    benchmark.extra_info.update(common.scan_bandwidth_fraction(variant=variant))
    benchmark.pedantic(program.run, rounds=ROUNDS, iterations=1, warmup_rounds=1)
