"""The project as a researcher installs it: a wheel (not editable) in an environment of its own,
used from a folder of their own research code that has its own ``models/``, ``tasks/`` and
``harness.py`` (most ML repositories have a ``models`` package).

The throwaway environment reuses this environment's pinned dependencies (a ``.pth`` line puts
their folder after its own, so that only their packages come through: this environment's
editable install of the project is a ``.pth`` hook there, which a plain path line does not
run); the project itself comes from the wheel alone.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pandas as pd
import pytest

from helpers import TOY_SOURCE

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow

# The researcher's own packages, named as ours were before the one import name.
USER_FILES = {
    "models/__init__.py": "OURS = 'the researcher'\n",
    "tasks/__init__.py": "OURS = 'the researcher'\n",
    "harness.py": "OURS = 'the researcher'\n",
    # Their layer uses their own `models` package beside ours.
    "my_layers.py": "import models as my_models\n\nassert my_models.OURS == 'the researcher'\n"
                    + TOY_SOURCE,
}


def _copy_of_the_clone(to: Path) -> Path:
    """The files a clone has (no environment, caches, build outputs or results): the wheel is
    built from these alone, as `pip install <clone>` does."""
    skip = shutil.ignore_patterns(".git", ".venv", ".cache", "build", "*.egg-info", "__pycache__",
                                  "results", "reports", ".benchmarks", ".asv", ".pytest_cache")
    return Path(shutil.copytree(ROOT, to, ignore=skip))


def _this_environments_install() -> list[str]:
    """The files of this environment's install of the project (its dist-info and hooks)."""
    site = Path(sysconfig.get_paths()["purelib"])
    return sorted(p.name for p in site.iterdir() if "linrnn_bench" in p.name)


@pytest.fixture(scope="module")
def environment(tmp_path_factory) -> Path:
    """A fresh virtual environment holding the wheel; its folder."""
    tmp = tmp_path_factory.mktemp("wheel")
    source = _copy_of_the_clone(tmp / "clone")
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
         "--quiet", "--wheel-dir", str(tmp / "dist"), str(source)],
        capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = (tmp / "dist").glob("linrnn_bench-*.whl")
    env = tmp / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True,
                   timeout=120)
    site = Path(subprocess.run(
        [str(env / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True).stdout.strip())
    (site / "pinned_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    # --ignore-installed: pip would otherwise uninstall this environment's own (editable)
    # install of the project before installing the wheel under the other prefix.
    before = _this_environments_install()
    installed = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--quiet",
         "--ignore-installed", "--prefix", str(env), str(wheel)],
        capture_output=True, text=True, timeout=300)
    assert installed.returncode == 0, installed.stderr[-3000:]
    assert _this_environments_install() == before, "the wheel's install touched this environment"
    shutil.rmtree(source)  # nothing may read the clone's files from here on
    return env


def _folder(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path


def _command(env: Path, cwd: Path, *argv: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """``linrnn-bench *argv`` as installed (its console script, run by the environment's
    Python), in ``cwd``, with a cache folder of its own (the native kernel builds on first use)."""
    environ = {k: v for k, v in os.environ.items()
               if k not in ("PYTHONPATH", "LINRNN_CACHE", "LINRNN_NATIVE_CACHE",
                            "LINRNN_JAX_CACHE", "VIRTUAL_ENV")}
    environ["XDG_CACHE_HOME"] = str(env.parent / "user-cache")
    return subprocess.run([str(env / "bin" / "python"), str(env / "bin" / "linrnn-bench"), *argv],
                          cwd=cwd, env=environ, capture_output=True, text=True, timeout=timeout)


def _ok(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 0, (done.args, done.stdout[-3000:], done.stderr[-3000:])
    return done.stdout


def test_nothing_generic_is_installed_at_top_level(environment, tmp_path):
    python = str(environment / "bin" / "python")
    done = subprocess.run([python, "-c", "import models"], cwd=tmp_path, capture_output=True,
                          text=True)
    assert done.returncode != 0 and "No module named 'models'" in done.stderr
    where = subprocess.run(
        [python, "-c", "import linrnn_bench, linrnn_bench.paths as p; "
                       "print(linrnn_bench.__file__); print(p.checkout())"],
        cwd=tmp_path, capture_output=True, text=True, check=True).stdout.split()
    assert Path(where[0]).is_relative_to(environment) and where[1] == "None"
    top_level = {p.name for p in (environment / "lib").glob("python3*/site-packages/*")}
    assert "linrnn_bench" in top_level
    assert not top_level & {"models", "tasks", "harness", "benchmarks", "tests"}


def test_a_researchers_repository_lists_trains_and_reports_with_its_own_layer(
        environment, tmp_path):
    repo = _folder(tmp_path, USER_FILES)
    listed = _ok(_command(environment, repo, "list", "models"))
    assert "lru" in listed and "rotrnn" in listed
    _ok(_command(environment, repo, "train", "model=lru", "task=digits", "seed=0",
                 "--preset", "smoke"))
    _ok(_command(environment, repo, "study", "accuracy", "--preset", "smoke",
                 "models=(my_layers:Toy,lru)"))
    _ok(_command(environment, repo, "report", "--only", "accuracy_detail"))
    # The store and the report are in the researcher's folder; their packages are untouched.
    assert (repo / "results" / "store.sqlite").is_file()
    detail = pd.read_csv(repo / "reports" / "tables" / "accuracy_detail.csv")
    assert {"Toy", "LRU"} <= set(detail["Model"])
    assert {name: (repo / name).read_text() for name in USER_FILES} == USER_FILES
    # The native kernel's sources came with the wheel and built into the user's cache (or the
    # engine ran the XLA loop; either way the runs say which).
    native = environment.parent / "user-cache" / "linrnn-bench" / "native"
    assert native.is_dir() or shutil.which(os.environ.get("CXX", "g++")) is None


def test_the_old_command_in_a_clone_says_what_to_type(tmp_path):
    done = subprocess.run([sys.executable, "-m", "harness", "list"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.strip() == ("the harness is now `linrnn-bench` (or `python -m "
                                   "linrnn_bench`): e.g. linrnn-bench list")
