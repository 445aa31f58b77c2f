"""External programs the harness runs to completion (not to time them), started here, in the
one package that starts processes (DESIGN.md): e.g. pdflatex for `make tex-check`."""

from __future__ import annotations

import subprocess
from pathlib import Path


def run_tool(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run ``args`` in ``cwd`` to completion, its output captured as text (undecodable bytes
    replaced); the caller reads its status and output."""
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, errors="replace")
