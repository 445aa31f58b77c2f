"""`harness.measure`'s process protocol and stopwatch (the timing and roofline helpers are tested
with the studies that use them, in test_perf_studies.py)."""

from __future__ import annotations

import sys

import pytest

from linrnn_bench.harness.measure import processes, timing


def test_a_function_in_a_fresh_process_returns_its_json_result():
    assert processes.call_in_fresh_process("math:factorial", 5) == 120
    assert processes.call_in_fresh_process("os.path:basename", "a/b.txt") == "b.txt"


def test_a_failing_fresh_process_names_what_failed_and_why():
    with pytest.raises(RuntimeError, match=r"(?s)the square root.*failed \(exit 1\).*math domain"):
        processes.call_in_fresh_process("math:sqrt", -1.0, what="the square root")
    with pytest.raises(RuntimeError, match=r"(?s)printed no result|failed"):
        processes.call_in_fresh_process("math:no_such_function", 1)


def test_a_command_gives_its_output_or_none():
    assert processes.command_output([sys.executable, "-c", "print(' out ')"]) == "out"
    assert processes.command_output([sys.executable, "-c", "import sys; sys.exit(2)"]) is None
    assert processes.command_output(["/no/such/command"]) is None


def test_stopwatch_laps_add_up_to_its_elapsed_time():
    clock = timing.Stopwatch()
    first, second = clock.lap(), clock.lap()
    assert 0.0 <= first and 0.0 <= second
    assert first + second <= clock.elapsed()
