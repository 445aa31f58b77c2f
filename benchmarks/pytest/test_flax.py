"""pytest-benchmark suite of the Flax adapters, at the layer benchmarks' shapes (`bench_flax`).

Each case times one batched call through the linen or NNX module holding the Equinox layer's
parameters and records, in ``extra_info``, the Flax and Equinox median times timed alternately
in this process and their ratio ``flax_over_layer`` (goal 1.00 within noise), and whether XLA
compiled the two to the same optimised instructions (``same_hlo``; names and argument order
aside).
"""

from __future__ import annotations

import re

import pytest

from benchmarks import bench_flax, common

ROUNDS = 5
CASES = [
    (m, L, mode, f)
    for m in common.MODELS
    for L in common.LENGTHS
    for mode in common.MODES
    for f in bench_flax.FRONTENDS
]


def _ids(case) -> str:
    model, length, mode, frontend = case
    return f"{model}-L{length}-{mode}-{frontend}"


def _program_lines(program: common.Program) -> list[str]:
    """The optimised HLO's instructions, sorted, without what differs between two tracings of
    the same computation: names, metadata, the source-location tables, the module signature
    and the parameter numbers (a Flax params dict is sorted by name, the Equinox layer's
    fields are in declaration order)."""
    lines = program.compiled.as_text().splitlines()
    # The computations follow the header and the source-location tables.
    start = next(i for i, line in enumerate(lines) if line.startswith(("%", "ENTRY")))
    text = "\n".join(lines[start:])
    text = re.sub(r",? ?metadata=\{[^}]*\}", "", text)
    text = re.sub(r"parameter\(\d+\)", "parameter()", text)
    text = re.sub(r"%[\w.\-]+|\b[\w.\-]+(?=:)", "_", text)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    # Computation signatures and tuples list operands in argument order: keep their shapes.
    return sorted(
        " ".join(sorted(re.findall(r"[a-z]+\d+\[[\d,]*\]", line)))
        if line.endswith("{") or line.startswith("ROOT _ = (") else line
        for line in lines
    )


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_flax(benchmark, case):
    model, length, mode, frontend = case
    program = bench_flax.flax_program(model, length, mode, frontend)
    program.run()
    benchmark.extra_info.update(common.environment(model))
    benchmark.extra_info["frontend"] = frontend
    benchmark.extra_info["compile_s"] = program.compile_s
    benchmark.extra_info["same_hlo"] = _program_lines(program) == _program_lines(
        common.layer_program(model, length, mode)
    )
    benchmark.extra_info.update(bench_flax.flax_overhead(model, length, mode, frontend))
    benchmark.pedantic(program.run, rounds=ROUNDS, iterations=1, warmup_rounds=1)
