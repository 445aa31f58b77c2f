"""Every process the harness starts, started here: one protocol for each kind.

- `command_output`: a command run to its end, its output read (``git`` for provenance).
- `call_in_fresh_process`: one function called in a fresh Python interpreter, its argument and
  result passed as JSON (the memory study's probes: a process of its own gives a device peak of
  its own and its own ``XLA_FLAGS``, which XLA reads once, at start-up). The child is tied to
  its parent (`lifetime.tie_to_driver`), so a killed driver leaves no probe behind.
- `worker_pool` and `end_pool`: spawned worker processes that end with the driver
  (`harness.measure.lifetime`, the place that guarantees it), for the ``processes`` executor
  and the report's figure writers.

A new kind of process is added here, beside these, never written again in a study.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from .. import process_settings
from . import lifetime
from .lifetime import end_pool as end_pool
from .lifetime import worker_pool as worker_pool

WorkerPool = ProcessPoolExecutor  # what `worker_pool` returns
BrokenWorkerPool = BrokenProcessPool  # raised by a pool's futures when a worker died

# The line a fresh process's result is printed on starts with this (a library may print too).
_RESULT = "linrnn-result: "


def command_output(args: Sequence[str], *, cwd: str | os.PathLike[str] | None = None,
                   timeout_s: float = 10.0) -> str | None:
    """The standard output of the command ``args``, stripped, or None if it could not run, ran
    past ``timeout_s`` seconds or failed (a missing ``git`` is no error of the caller's)."""
    try:
        done = subprocess.run(list(args), cwd=cwd, capture_output=True, text=True,
                              timeout=timeout_s, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip()


def call_in_fresh_process(
    function: str, argument: Any, *, env: Mapping[str, str] | None = None,
    timeout_s: float = 1800.0, what: str = "",
) -> Any:
    """``module:name(argument)`` called in a fresh Python process; its JSON result.

    Arguments:
        function: ``"package.module:function"``, a function of one JSON-able argument that
            returns a JSON-able result.
        argument: its argument (JSON-able).
        env: variables set in the child's environment over this process's.
        timeout_s: seconds the child may run before it is killed and this raises.
        what: what the call is, for the error message.

    A child that fails, runs too long or prints no result is a `RuntimeError` naming ``what``
    and ending with the child's last error output.
    """
    environ = {**os.environ, **(env or {})}
    command = [sys.executable, "-m", __name__, function, str(os.getpid())]
    label = what or function
    try:
        done = subprocess.run(command, input=json.dumps(argument), capture_output=True,
                              text=True, env=environ, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise RuntimeError(
            f"The process for {label} ran past its {timeout_s:g} s and was killed.") from None
    if done.returncode != 0:
        raise RuntimeError(
            f"The process for {label} failed (exit {done.returncode}):\n{done.stderr[-4000:]}")
    results = [line for line in done.stdout.splitlines() if line.startswith(_RESULT)]
    if not results:
        raise RuntimeError(f"The process for {label} printed no result:\n{done.stdout[-4000:]}")
    return json.loads(results[-1][len(_RESULT):])


def _main(argv: list[str]) -> int:
    """A fresh process's entry (`call_in_fresh_process`): ``module:function driver_pid``, the
    argument as JSON on standard input, the result printed as one marked JSON line."""
    function, driver = argv[0], int(argv[1])
    lifetime.tie_to_driver(driver)
    process_settings.apply()  # a program of the project's: before the function loads jax
    module, _, name = function.partition(":")
    result = getattr(importlib.import_module(module), name)(json.loads(sys.stdin.read()))
    print(_RESULT + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
