"""`benchmarks.bench_network --before REV`: the revision's git worktree, made and always removed.

The measurement itself (`benchmarks._revision_arm`, a training run per arm) is too slow for the
suite; benchmarks/README.md shows a run of it.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from benchmarks import bench_network

ROOT = Path(bench_network.__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(not (ROOT / ".git").exists(), reason="not a git checkout")


def git(*args: str, cwd: Path = ROOT) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout.strip()


def test_a_revision_worktree_holds_that_commit_and_goes_even_on_interrupt():
    head = git("rev-parse", "HEAD~1")
    with pytest.raises(KeyboardInterrupt):
        with bench_network.revision_worktree("HEAD~1") as tree:
            seen = tree
            assert git("rev-parse", "HEAD", cwd=tree) == head
            assert (tree / "harness" / "__init__.py").is_file() or (tree / "linrnn_bench").is_dir()
            raise KeyboardInterrupt
    assert not seen.exists() and not seen.parent.exists()
    assert str(seen) not in git("worktree", "list", "--porcelain")


def test_an_unknown_revision_is_a_one_line_error():
    with pytest.raises(bench_network.BeforeAfterError,
                       match=r"'no-such-revision' is not a commit of this repository; accepted"):
        with bench_network.revision_worktree("no-such-revision"):
            pass
