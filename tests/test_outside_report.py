"""A user's layer beside the four in the report, by the commands of docs/your-layer.md.

The report is about the runs in the store: a run of a model a preset does not list, made at
that preset's grid, is that preset's run; a fresh report process registers an outside layer
by its import path on first sight (order, colour, label); a preset's recipe never asks an
outside config for an option it lacks; check-layer fails a row on NaN and says which studies a
failed row bars; the throughput study's compile time is a compile, not a disk-cache load.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from linrnn_bench import models
from linrnn_bench.harness import config as _config
from linrnn_bench.harness import layer_check
from linrnn_bench.harness.report import origins, style
from linrnn_bench.harness.store import Store
from linrnn_bench.harness.studies import accuracy
from linrnn_bench.models import _registry

from helpers import isolated_registry

ROOT = Path(__file__).resolve().parent.parent
S6 = "examples.s6:S6"


def _forget(*names: str) -> None:
    """Unregister ``names`` (inside `isolated_registry`) and forget their import paths."""
    for name in names:
        _registry._REGISTRY.pop(name, None)
    for path in [p for p, n in _registry._PATHS.items() if n in names]:
        _registry._PATHS.pop(path)
    for module in ("examples.s6", "examples"):
        sys.modules.pop(module, None)


def test_an_added_model_at_a_presets_grid_is_that_presets_run(tmp_path):
    # The documented route (docs/your-layer.md): the smoke preset with the user's layer added to its models.
    with isolated_registry("examples.s6", "examples"):
        config = accuracy.STUDY.config("smoke", {"models": f"(rotrnn,lru,s4d,s5,{S6})"})
        specs = accuracy.grid(config)
        ours = [s for s in specs if s.network.layer == S6]
        assert len(ours) == 1 and len(specs) == 5
        # And by other overrides: a run of another grid (more steps) is custom.
        custom = accuracy.grid(accuracy.STUDY.config("smoke", {"models": f"({S6},)",
                                                               "train.steps": "5"}))[0]
        store = Store(tmp_path / "store.sqlite")
        for spec in (*specs, custom):
            run_id = accuracy.STUDY.run_id(spec)
            store.record(run_id=run_id, study="accuracy", status="done",
                         config=_config.to_dict(spec), config_hash=run_id, seed=spec.seed,
                         provenance={})
        labelled = origins.with_presets(store.runs("accuracy"), "accuracy")
        preset = dict(zip(labelled["run_id"], labelled["preset"]))
        assert preset[accuracy.STUDY.run_id(ours[0])] == "smoke"
        assert preset[accuracy.STUDY.run_id(custom)] == origins.CUSTOM
        assert sorted(set(preset.values())) == ["custom", "smoke"]
        frame, shown = origins.largest_preset(store.runs("accuracy"), "accuracy")
        assert shown == "smoke" and S6 in set(frame["cfg.network.layer"])


def test_a_wildcard_recipe_sets_only_the_options_a_config_has():
    # The gpu grid makes every model bidirectional on Pathfinder; S6's config has no such field.
    with isolated_registry("examples.s6", "examples"):
        config = dataclasses.replace(accuracy.STUDY.config("gpu"), models=("lru", S6))
        specs = [s for s in accuracy.grid(config) if s.task == "pathfinder" and s.seed == 0]
        options = {s.network.layer: dict(s.network.layer_options) for s in specs}
        assert options["lru"]["bidirectional"] is True
        assert "bidirectional" not in options[S6]
        # An option no registered model has is still refused (a typo is not dropped).
        typo = accuracy.Recipe(overrides=(("layer.bidirectonal", True),))
        with pytest.raises(_config.ConfigError, match="bidirectonal"):
            accuracy.grid(dataclasses.replace(accuracy.STUDY.config("smoke"), models=("lru",),
                                              recipes=(typo,)))


def test_order_colour_and_label_register_an_import_path_on_first_sight():
    with isolated_registry("examples.s6", "examples"):
        _forget("s6")
        assert "s6" not in style.model_order()
        # Rows name the layer by import path; nothing registered it in this process yet.
        assert style.order_models([S6, "zeta", "lru", "rotrnn", S6]) == [
            "rotrnn", "lru", S6, "zeta"]
        assert style.model_order()[-1] == "s6" and style.model_label(S6) == "S6"
        place = style.model_order().index("s6")
        assert style.model_colour(S6) == style.PALETTE[place % len(style.PALETTE)]


LEAKY_SOURCE = textwrap.dedent('''
    """A layer whose output is finite but whose hidden states hold a NaN."""
    import dataclasses

    import equinox as eqx
    import jax
    import jax.numpy as jnp

    from linrnn_bench import models


    @dataclasses.dataclass(frozen=True)
    class LeakyConfig:
        d_model: int
        d_state: int


    @models.register("leaky", LeakyConfig, paper_size=models.PaperSize(8, 8, (), "none"),
                     capabilities={models.HIDDEN_STATES, models.RECURRENT_MASK})
    class Leaky(eqx.Module):
        weight: jnp.ndarray

        def __init__(self, config, *, key):
            self.weight = jnp.ones((config.d_model,))

        def __call__(self, u):
            return u * self.weight[None, :]

        def hidden_states(self, u):
            return jnp.full((u.shape[0], 3), jnp.nan)

        def recurrent_mask(self):
            return jax.tree.map(lambda _: True, self)
''')


def test_check_layer_fails_a_nan_row_and_bars_the_studies_that_need_it(tmp_path):
    (tmp_path / "leaky_layer.py").write_text(LEAKY_SOURCE)
    sys.path.insert(0, str(tmp_path))
    try:
        with isolated_registry("leaky_layer"):
            checks = {c.name: c for c in layer_check.check_layer("leaky_layer:Leaky",
                                                                  long_length=16)}
    finally:
        sys.path.remove(str(tmp_path))
    table = layer_check.format_table(list(checks.values()))
    assert checks["hidden states"].status == "fail", table
    assert "NaN or Inf" in checks["hidden states"].detail
    assert checks["vmap"].status == "ok" and checks["jit"].status == "ok", table
    stability = checks["study stability"]
    assert stability.status == "fail" and "cannot enter" in stability.detail, table
    assert "hidden states" in stability.detail
    # A study that does not read hidden states can still take it, and says what it needs.
    assert checks["study throughput"].status == "ok"
    assert "paper_size" in checks["study throughput"].detail
    assert checks["study theory"].status == "skip" and "cannot enter" in (
        checks["study theory"].detail)


COMPILE_SCRIPT = textwrap.dedent('''
    import sys
    import jax
    import jax.numpy as jnp
    from jax._src import monitoring
    from linrnn_bench.harness.measure import timing

    hits = []
    monitoring.register_event_listener(
        lambda name, **kw: hits.append(name) if name.endswith("cache_hits") else None)
    jax.config.update("jax_compilation_cache_dir", sys.argv[1])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)

    def f(x):
        for _ in range(4):
            x = jnp.sin(x) @ x
        return x

    x = jnp.ones((8, 8))
    jax.jit(f)(x).block_until_ready()  # the cache is now in use, and holds f's program
    before = len(hits)
    timing.compile_timed(f, x)
    loads = len(hits) - before
    jax.jit(lambda y: f(y) + 1.0)(x).block_until_ready()
    print(loads, jax.config.jax_enable_compilation_cache)
''')


def test_the_timed_compile_is_a_compile_even_when_the_disk_cache_holds_it(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for _ in range(2):  # the second process finds f's program on disk
        done = subprocess.run([sys.executable, "-c", COMPILE_SCRIPT, str(tmp_path / "cache")],
                              capture_output=True, text=True, env=env, timeout=300)
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == ["0", "True"], done.stdout
    # After the timed compile the cache is used again: the last program was written to it.
    assert any("lambda" in p.name for p in (tmp_path / "cache").iterdir())


# --------------------------------------------------------------------------------------------
# The worked example of docs/your-layer.md, end to end


def _documented_commands() -> tuple[dict[str, str], list[str]]:
    """The environment and the commands of the worked example in docs/your-layer.md."""
    text = (ROOT / "docs" / "your-layer.md").read_text()
    block = text.split("<!-- worked example: tests/test_outside_report.py -->")[1]
    lines = [line.strip() for line in block.split("\n\n")[1].splitlines()]
    env, commands = {}, []
    for line in lines:
        line = line.split("  #")[0].strip()
        if line.startswith("export "):
            for item in shlex.split(line)[1:]:
                key, _, value = item.partition("=")
                env[key] = value
        elif line:
            commands.append(line)
    return env, commands


@pytest.mark.slow
def test_the_documented_worked_example_puts_the_layer_beside_ours(tmp_path, monkeypatch):
    import matplotlib

    # The three sections' figures stay open together below, to be read.
    monkeypatch.setitem(matplotlib.rcParams, "figure.max_open_warning", 0)
    documented_env, commands = _documented_commands()
    assert documented_env["MINE"] == S6 and any("report" in c for c in commands)
    store, out = tmp_path / "store.sqlite", tmp_path / "reports"
    # As a user runs it: with the persistent compilation cache (the test's own), so that each
    # fresh process loads the small programs its predecessors compiled.
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MINE": S6,
           "LINRNN_JAX_CACHE": str(tmp_path / "jax")}

    def run(command: str) -> None:
        argv = shlex.split(command.replace("$MINE", S6).replace("$PWD", str(ROOT)))
        assert argv[0] == ".venv/bin/linrnn-bench", command
        argv = [sys.executable, "-m", "linrnn_bench", *argv[1:]]
        if argv[3] in ("study", "report"):
            argv += ["--store", str(store)]
        if argv[3] == "report":
            argv += ["--out", str(out)]
        done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=900)
        assert done.returncode == 0, (command, done.stdout[-2000:], done.stderr[-2000:])

    studies = [c for c in commands if " study " in c]
    report = [c for c in commands if " report" in c]
    assert {c.split()[2] for c in studies} == {"accuracy", "stability", "throughput", "memory"}
    # `report --run --preset smoke` would also run all four of ours at smoke: for time, the
    # test stands one of them (the LRU) in for the four, run beside the layer by each
    # documented study command (one process per study, as a user's would be).
    for command in commands:
        if command not in report:
            run(command.replace("($MINE)", "(lru,$MINE)"))
    # A fresh process renders the report: nothing registered the layer there before.
    run(report[0].replace(" --run", "").replace(" --preset smoke", ""))

    tables = out / "tables"
    for name, ours, mine in (("accuracy_test", "LRU", "S6"),
                             ("stability_summary_listops", "LRU", "S6"),
                             ("throughput_all", "LRU", "S6"), ("memory_fit", "LRU", "S6")):
        frame = pd.read_csv(tables / f"{name}.csv", index_col=0).reset_index()
        cells = set(frame.astype(str).to_numpy().ravel())
        assert {ours, mine} <= cells, (name, sorted(cells, key=str)[:20])
        numbers = frame[frame.astype(str).eq(mine).any(axis=1)].select_dtypes("number")
        assert np.isfinite(numbers.to_numpy()).any(), name  # its row holds numbers
    index = (out / "index.md").read_text()
    assert "S6 is not in this study" in index  # theory: no discrete system, and it says so

    # The figures, from the sections' Figure artifacts of the same store: S6 is in each legend
    # (or panel title) with finite data; the roofline figure names it in its caption instead.
    from linrnn_bench.harness.studies.memory import report as memory_report
    from linrnn_bench.harness.studies.stability import report as stability_report
    from linrnn_bench.harness.studies.throughput import report as throughput_report

    s = Store(store)
    figures = {a.name: a for module in (throughput_report, memory_report, stability_report)
               for a in module.section(s) if hasattr(a, "figure")}
    for name in ("throughput_tokens_per_s", "memory_working_set"):
        ax = figures[name].figure.axes[0]
        lines = {line.get_label(): line for line in ax.get_lines()}
        assert "S6" in ax.get_legend_handles_labels()[1], name
        assert len(lines["S6"].get_ydata()) and np.isfinite(lines["S6"].get_ydata()).all()
    roofline = figures["throughput_roofline_fraction"]
    assert "S6" not in roofline.figure.axes[0].get_legend_handles_labels()[1]
    assert "S6: not drawn" in roofline.caption and "discrete system" in roofline.caption
    panel = next(ax for ax in figures["stability_depth_listops"].figure.axes
                 if ax.get_title() == "S6")
    assert all(np.isfinite(line.get_ydata()).all() for line in panel.get_lines())
    assert panel.get_lines()
    assert "S6: not drawn" in figures["stability_eigenvalues_listops"].caption



def test_one_layer_stored_under_two_names_keeps_two_table_rows_apart():
    # A layer run by its import path and by its registered name (a user's study, then
    # `report --run`) is two rows of a table; labels alone would read the same and collide.
    from linrnn_bench.harness.report import style as report_style

    labels = report_style.model_labels(["lru", S6, "s6", "lru"])
    assert labels["lru"] == "LRU"
    assert labels[S6] == f"S6 ({S6})" and labels["s6"] == "S6 (s6)"
