"""The harness's error classes, in one module that imports nothing else of the harness.

Each class is one kind of failure, and the command line maps each to an exit status
(`harness.cli.main`):

- `ConfigError`: a configuration key or value that is not accepted (exit 2, nothing runs).
- `StoreError`: the results store is missing, unreadable, corrupt or not writable (exit 2).
- `ExecutorError`: an executor that cannot start, or whose worker died mid-grid (exit 1; the
  finished runs are recorded).
- `Diverged`: raised by a run whose loss or state went non-finite during training; the runner
  records it with status ``diverged`` (a result, not a failure).
- `ReportError`: the report cannot be written where it was asked to be (exit 2).
- `ReferenceResultError`: a shipped reference folder that is missing or incomplete, or whose
  runs this code would not make again (exit 2, nothing runs).

The old import places (`harness.config.ConfigError`, `harness.store.StoreError`,
`harness.executors.ExecutorError`, `harness.studies.Diverged`, `harness.report.ReportError`)
re-export these classes, so both spellings name the same class.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


class ConfigError(ValueError):
    """A configuration key or value that is not accepted; the message says what is."""


class StoreError(RuntimeError):
    """The store file is missing, unreadable, corrupt, not writable or not a linrnn-bench store."""


class ExecutorError(RuntimeError):
    """An executor that cannot start (unknown name, Ray missing or unreachable) or whose worker
    process died during a grid."""


class ReportError(RuntimeError):
    """The report cannot be written where it was asked to be."""


class ReferenceResultError(RuntimeError):
    """A reference folder (`harness.reference`) that is missing or incomplete, or whose store
    this code cannot reproduce; the message says what it needs or what changed."""


class ReportIncomplete(Exception):
    """The report was written, but some of it could not be produced: a table or figure whose
    file failed to write, or a section that raised. Raised after the report is in place (the
    index says what is missing and why), so that a caller exits non-zero instead of passing off
    a partial report as whole.

    ``written``: the paths of the files written; ``failures``: artifact or section name ->
    why it was not produced."""

    def __init__(self, written: list, failures: dict[str, str]) -> None:
        self.written = written
        self.failures = dict(failures)
        names = ", ".join(sorted(self.failures))
        super().__init__(f"{len(self.failures)} part(s) of the report could not be produced "
                         f"({names}); index.md says why for each.")


class Diverged(Exception):
    """Raised by a run whose loss or state went non-finite; recorded with status 'diverged'.

    ``rows`` are the metric rows measured before the divergence (kept in the store). ``step``
    is the training step at which the non-finite value appeared, when the raiser knows it: the
    runner treats a run non-finite at step 1 or before (the initial parameters' loss or
    gradient) as a configuration that cannot train, not as a divergence in training.
    """

    def __init__(
        self, message: str, rows: Sequence[Mapping[str, Any]] = (), *, step: int | None = None
    ):
        super().__init__(message)
        self.rows = list(rows)
        self.step = step if step is not None else _diverged_step(self.rows)


def _diverged_step(rows: Sequence[Mapping[str, Any]]) -> int | None:
    # `harness.train.train` ends its rows with {"kind": "diverged", "step": s}.
    if rows and rows[-1].get("kind") == "diverged":
        step = rows[-1].get("step")
        return step if isinstance(step, int) and not isinstance(step, bool) else None
    return None
