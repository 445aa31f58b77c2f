"""A layer installed by entry point, end to end in fresh processes (its own file, so that
pytest-xdist runs it beside the slow worked example of test_outside_report.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from linrnn_bench.models import _registry

ROOT = Path(__file__).resolve().parent.parent

@pytest.mark.slow
def test_a_layer_installed_by_entry_point_joins_a_preset_and_its_report(tmp_path):
    # The other route of docs/your-layer.md: an installed package that names its layer in the
    # `linrnn_bench.models` entry-point group (here a dist-info folder on the path, which is what
    # `pip install` leaves). The layer is then a model by its name, in every fresh process.
    from helpers import write_toy_module

    write_toy_module(tmp_path)
    info = tmp_path / "toy_layer-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-layer\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{_registry.ENTRY_POINT_GROUP}]\ntoy = toy_layer:Toy\n")
    store, out = tmp_path / "store.sqlite", tmp_path / "reports"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]),
           "LINRNN_JAX_CACHE": ""}

    def harness(*argv: str) -> str:
        done = subprocess.run([sys.executable, "-m", "linrnn_bench", *argv], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, (argv, done.stdout[-2000:], done.stderr[-2000:])
        return done.stdout

    assert re.search(r"^\s+toy\s", harness("list"), flags=re.MULTILINE)
    harness("study", "accuracy", "--preset", "smoke", "models=(lru,toy)",
            "--store", str(store))
    harness("report", "--store", str(store), "--out", str(out), "--only", "accuracy_detail")
    detail = pd.read_csv(out / "tables" / "accuracy_detail.csv")
    rows = detail[detail["Model"].isin(["LRU", "Toy"])]
    assert set(rows["Model"]) == {"LRU", "Toy"}
    assert np.isfinite(rows["test loss"].to_numpy(float)).all()
    # The toy's run is the smoke preset's, as the LRU's is: one preset, not "custom" (read
    # in a process where the entry point is installed, as the report's was).
    script = ("from linrnn_bench.harness.report import origins; "
              "from linrnn_bench.harness.store import Store; "
              f"f = origins.with_presets(Store({str(store)!r}).runs('accuracy'), 'accuracy'); "
              "print(sorted(set(zip(f['cfg.network.layer'], f['preset']))))")
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.stdout.strip() == "[('lru', 'smoke'), ('toy', 'smoke')]", done.stderr[-2000:]
