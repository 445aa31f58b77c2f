"""A layer that is not ours joins by one registration: by import path, or by entry point.

Three outside layers: a toy on the shared engine (a fifth model of ours in miniature, written to
a temporary module), the worked example examples/s6.py, a selective SSM that is not on the
engine and declares only hidden states and a recurrent mask, and a layer written as a Flax linen
module (a temporary module too), wrapped by `models.flax.linen.FromLinen`. Each is checked
against the layer contract (`check-layer`), and the studies take it or leave it out with the
reason.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from linrnn_bench import models
from linrnn_bench.harness import cli, layer_check, programs, provenance, studies, variants
from linrnn_bench.harness.report import style
from linrnn_bench.harness.studies.theory import report as theory_report
from linrnn_bench.harness.report.artifacts import Table
from linrnn_bench.harness.runner import run_study
from linrnn_bench.harness.store import Store
from linrnn_bench.harness.studies import memory, theory, throughput
from linrnn_bench.models import _registry

from helpers import assert_rows_declared, isolated_registry, write_toy_module

ROOT = Path(__file__).resolve().parent.parent
TOY = "toy_layer:Toy"
S6 = "examples.s6:S6"


@pytest.fixture(scope="module")
def outside(tmp_path_factory):
    """The toy module on sys.path; the toy and S6 registered for the module's tests only."""
    directory = tmp_path_factory.mktemp("outside")
    toy_path = write_toy_module(directory)
    sys.path.insert(0, str(directory))
    with isolated_registry("toy_layer", "examples.s6", "examples"):
        models.resolve(TOY), models.resolve(S6)  # in this order: the toy is the fifth model
        yield toy_path
    sys.path.remove(str(directory))


def test_import_paths_register_once_and_resolve_to_the_name(outside):
    assert models.resolve(TOY) == "toy" and models.resolve(TOY) == "toy"
    assert models.resolve(S6) == "s6"
    toy = models.info(TOY)
    assert toy.origin == TOY and toy.label == "Toy"
    assert toy.source_sha256 == hashlib.sha256(outside.read_bytes()).hexdigest()
    assert models.info("lru").origin == models.BUILTIN and models.info("lru").source_sha256 is None
    # Our four first, in their order; outside models after, as registered.
    assert [m.name for m in models.infos()][:4] == ["rotrnn", "lru", "s4d", "s5"]
    # Provenance records each outside model's import path and source hash.
    recorded = provenance.provenance()["outside_models"]
    assert recorded["toy"] == {"origin": TOY, "source_sha256": toy.source_sha256}
    assert recorded["s6"]["origin"] == S6


def test_bad_paths_and_registrations_say_what_is_wrong(outside):
    with pytest.raises(ValueError, match="cannot import module 'no_such_module'"):
        models.resolve("no_such_module:Layer")
    with pytest.raises(ValueError, match="has no attribute 'Nope'"):
        models.resolve("toy_layer:Nope")
    with pytest.raises(ValueError, match="'ToyConfig' is not registered.*models.register"):
        models.resolve("toy_layer:ToyConfig")
    with pytest.raises(ValueError, match="form 'package.module:Layer'"):
        models.resolve("toy_layer:")
    with pytest.raises(ValueError, match="already registered.*pass replace=True"):
        models.register("toy", models.info("toy").config_cls)(object)
    with pytest.raises(ValueError, match="unknown capabilities.*accepted"):
        models.register("other", models.info("toy").config_cls, capabilities={"telepathy"})
    with pytest.raises(ValueError, match="ablation 'x' sets unknown option.*accepted"):
        models.register("other", models.info("toy").config_cls,
                        ablations=(models.Ablation("x", (("nope", 1),), "X", ""),))


@dataclasses.dataclass(frozen=True)
class _MineConfig:
    d_model: int
    d_state: int


def _mine(field: str) -> type:
    """A layer class with one array field ``field`` (H,), as a notebook cell defines it."""

    def __init__(self, config, *, key):
        setattr(self, field, jnp.ones(config.d_model))

    def __call__(self, u):
        return u * getattr(self, field)[None, :]

    return type("Mine", (eqx.Module,), {"__annotations__": {field: jax.Array},
                                        "__module__": __name__, "__init__": __init__,
                                        "__call__": __call__})


def test_a_users_registration_is_replaced_only_when_asked(outside):
    from linrnn_bench.models.flax import field_shapes

    with isolated_registry():
        first = _mine("a")
        models.register("mine", _MineConfig, capabilities=set())(first)
        models.register("mine", _MineConfig, capabilities=set())(first)  # the same: no change
        config = models.make_config("mine", d_model=4, d_state=2)
        assert field_shapes("mine", config) == {"a": (4,)}
        second = _mine("b")  # the cell run again: a new class under the same name
        with pytest.raises(ValueError, match="'mine' is already registered .*pass replace=True"):
            models.register("mine", _MineConfig, capabilities=set())(second)
        assert models.info("mine").layer_cls is first
        models.register("mine", _MineConfig, label="Mine", capabilities=set(), replace=True)(
            second)
        assert models.info("mine").layer_cls is second and models.info("mine").label == "Mine"
        assert field_shapes("mine", config) == {"b": (4,)}  # no stale cached structure
        layer = models.build("mine", d_model=4, d_state=2, key=jax.random.PRNGKey(0))
        assert isinstance(layer, second)
        # Ours are not replaced by accident, and an import path follows a replacement.
        with pytest.raises(ValueError, match="'lru' is one of this package's layers"):
            models.register("lru", models.info("lru").config_cls)(second)
        assert models.info("lru").origin == models.BUILTIN
        models.register("toy", models.info("toy").config_cls, replace=True)(second)
        with pytest.raises(ValueError, match="'Toy' is not registered"):
            models.resolve(TOY)


def test_a_module_that_fails_half_way_registers_nothing(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    source = textwrap.dedent("""
        import dataclasses
        import equinox as eqx
        from linrnn_bench import models

        @dataclasses.dataclass(frozen=True)
        class Cfg:
            d_model: int
            d_state: int

        @models.register("half", Cfg, capabilities=set())
        def make(config, *, key):
            return eqx.nn.Identity()
    """)
    (tmp_path / "half_layer.py").write_text(source + "print(undefined_name)\n")
    with isolated_registry("half_layer"):
        with pytest.raises(ValueError, match=r"^Model path 'half_layer:make': importing module "
                                             r"'half_layer' failed with NameError: name "
                                             r"'undefined_name' is not defined; fix the module"):
            models.resolve("half_layer:make")
        assert "half" not in models.names()
        (tmp_path / "half_layer.py").write_text(source)  # fixed: it registers once, as asked
        assert models.resolve("half_layer:make") == "half"
        layer = models.build("half", d_model=3, d_state=1, key=jax.random.PRNGKey(0))
        assert isinstance(layer, eqx.nn.Identity)


def test_train_refuses_a_layer_that_is_not_an_equinox_module(tmp_path, monkeypatch, capsys):
    # A plain class trained and was stored as done; its run is now failed, with the reason.
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("LINRNN_CHECKPOINTS", str(tmp_path / "checkpoints"))
    (tmp_path / "plain_layer.py").write_text(textwrap.dedent("""
        import dataclasses
        from linrnn_bench import models

        @dataclasses.dataclass(frozen=True)
        class Cfg:
            d_model: int
            d_state: int

        @models.register("plain", Cfg, capabilities={models.RECURRENT_MASK})
        class Plain:
            def __init__(self, config, *, key):
                pass

            def __call__(self, u):
                return u

            def recurrent_mask(self):
                return False
    """))
    store = tmp_path / "store.sqlite"
    with isolated_registry("plain_layer"):
        status = cli.main(["train", "model=plain_layer:Plain", "--preset", "smoke",
                           "train.steps=1", "--store", str(store)])
    out = capsys.readouterr().out
    assert status == 1
    assert "failed: ValueError: Model 'plain' (plain_layer:Plain) built a Plain, not an " \
           "equinox.Module" in out, out
    (error,) = Store(store).runs("train")["error"]
    assert Store(store).runs("train")["status"].tolist() == ["failed"]
    assert error.startswith("ValueError: Model 'plain' (plain_layer:Plain) built a Plain")


def test_check_layer_passes_a_good_layer_and_names_what_a_bad_one_breaks(outside, capsys):
    checks = {c.name: c for c in layer_check.check_layer(TOY, long_length=16)}
    assert all(c.status == "ok" for c in checks.values()), layer_check.format_table(
        list(checks.values()))
    models.resolve("toy_layer:_broken")
    broken = {c.name: c for c in layer_check.check_layer("broken", long_length=16)}
    assert broken["build"].status == "fail" and "not an equinox.Module" in broken["build"].detail
    assert cli.main(["check-layer", "toy_layer:Nope"]) == cli.USAGE_ERROR
    assert "has no attribute 'Nope'" in capsys.readouterr().err


def test_check_layer_on_the_selective_example(outside):
    checks = {c.name: c for c in layer_check.check_layer(S6, long_length=16)}
    failed = [c for c in checks.values() if c.status == "fail"]
    assert not failed, layer_check.format_table(list(checks.values()))
    assert checks["discrete system"].status == "skip"
    assert checks["hidden states"].detail.startswith("(L, P) = (16, 32)")
    assert checks["study theory"].status == "skip" and "discrete_system" in (
        checks["study theory"].detail)
    assert checks["study throughput"].status == "ok" and checks["study memory"].status == "ok"


def test_the_registry_gives_an_outside_model_its_variants_colour_and_label(outside):
    assert variants.variant("toy") == variants.Variant("toy", (), "Toy", "")
    assert variants.variant(TOY) == variants.variant("toy")
    # Ours first, then the outside models in the order they registered in this process (the
    # fixture registers the toy first, unless another test of the process registered S6 before).
    colours = [style.model_colour(m) for m in ("rotrnn", "lru", "s4d", "s5", "toy", "s6")]
    order = style.model_order()
    assert order[:4] == ("rotrnn", "lru", "s4d", "s5") and min(
        order.index("toy"), order.index("s6")) >= 4
    assert colours == [style.PALETTE[order.index(m) % len(style.PALETTE)]
                       for m in ("rotrnn", "lru", "s4d", "s5", "toy", "s6")]
    assert colours[:4] == list(style.PALETTE[:4]) and len(set(colours)) == len(colours)
    assert style.model_label(S6) == "S6" and style.order_models(["s6", "lru", "toy"]) == [
        "lru", *sorted(["toy", "s6"], key=order.index)]


def test_theory_takes_the_engine_toy_into_its_report_and_refuses_the_selective_layer(
    outside, tmp_path
):
    # A fifth model on the engine: the study runs it, and the report section shows it by label.
    store = Store(tmp_path / "store.sqlite")
    config = theory.STUDY.config("smoke", {"variants": "(toy,)", "equivalence_variants": "()"})
    summary = run_study(theory.STUDY, config, store=store, progress=False)
    assert summary.counts == {"done": summary.total}, store.runs("theory")["error"].tolist()
    rows = store.read("theory")
    assert (rows[rows["kind"] == "summary"]["exact_worst_rel_dev"] < 5e-5).all()
    # Each row's provenance names the outside layer's file and its hash.
    assert set(rows["prov.outside_models.toy.origin"]) == {TOY}
    assert set(rows["prov.outside_models.toy.source_sha256"]) == {
        hashlib.sha256(outside.read_bytes()).hexdigest()}
    table = next(a for a in theory_report.section(store) if a.name == "theory_white_noise_table")
    assert isinstance(table, Table) and list(table.frame.index) == ["Toy"]
    white, _ = theory.chosen_variants(theory.STUDY.config("smoke"))
    assert "toy" in white and "s6" not in white
    with pytest.raises(ValueError, match=r"\['s6'\].*lack a capability.*discrete_system"):
        theory.TheoryConfig(variants=("s6",))
    assert theory.STUDY.skip_reason(models.info("s6")) == (
        "S6 declares no discrete_system, which this study reads")


def test_throughput_and_memory_measure_the_selective_layer(outside):
    # Short sequences and small peak measurements: the columns are checked, not the speed.
    small = {"models": f"({S6},)", "modes": "(forward,)"}
    config = throughput.STUDY.config("smoke", {**small, "seq_lens": "(32,)",
                                               "peak_matmul_size": "64", "peak_stream_mib": "1"})
    (spec,) = throughput.grid(config)
    (row,) = throughput.run(spec)
    assert throughput.COLUMNS.problems(row) == []
    assert row["model"] == S6 and row["params"] == programs.parameter_count(
        S6, d_model=128, d_state=16, options=())
    assert row["states"] == 128 * 16 and row["algorithm"] is None
    assert row["roofline_fraction"] is None and "no discrete system" in row["count_source"]
    assert row["tokens_per_s"] > 0
    config = memory.STUDY.config("smoke", {**small, "seq_lens": "(32,64)"})
    (spec,) = memory.grid(config)
    rows = memory.run(spec)
    fit = rows[-1]
    assert fit["kind"] == "fit" and fit["linear"] and fit["states"] == 128 * 16
    assert all(memory.COLUMNS.problems(r) == [] for r in rows)
    for name in studies.names():
        assert studies.get(name).skip_reason(models.info("lru")) is None


def test_the_selective_layer_matches_its_recurrence_written_as_a_loop(outside):
    layer = models.build("s6", d_model=3, d_state=4, key=jax.random.PRNGKey(0))
    x = np.asarray(jax.random.normal(jax.random.PRNGKey(1), (7, 3)), dtype=np.float64)
    p = {k: np.asarray(getattr(layer, k), dtype=np.float64)
         for k in ("A_log", "D_skip", "W_down", "W_up", "b_delta", "W_B", "W_C")}
    h = np.zeros((3, 4))
    expected = []
    for x_t in x:
        delta = np.log1p(np.exp(p["W_up"] @ p["W_down"] @ x_t + p["b_delta"]))
        B, C = p["W_B"] @ x_t, p["W_C"] @ x_t
        h = np.exp(delta[:, None] * -np.exp(p["A_log"])) * h + delta[:, None] * B * x_t[:, None]
        expected.append(h @ C + p["D_skip"] * x_t)
    y = eqx.filter_jit(lambda m, x: m(x))(layer, x.astype(np.float32))
    np.testing.assert_allclose(y, np.stack(expected), rtol=2e-5, atol=2e-6)


def _installed(root: Path, distribution: str, entries: str, **modules: str) -> None:
    """Distribution ``distribution`` as `pip install` leaves it, in ``root`` (on sys.path): a
    dist-info folder whose entry_points.txt holds ``entries`` under the models' group, and
    the modules' sources (name -> text)."""
    info = root / f"{distribution.replace('-', '_')}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {distribution}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{models.ENTRY_POINT_GROUP}]\n{entries}\n")
    for module, source in modules.items():
        (root / f"{module}.py").write_text(source)


def test_an_entry_point_adds_a_model_by_name(outside, tmp_path, monkeypatch, caplog):
    monkeypatch.syspath_prepend(str(tmp_path))
    _installed(tmp_path, "toy-layer", f"toy = {TOY}")
    with caplog.at_level(logging.WARNING, logger="linrnn_bench.models"):
        _registry._load_entry_points()  # the toy is already registered: a no-op, no warning
    assert models.resolve("toy") == "toy" and not caplog.records


# A broken entry point of an installed distribution: (id, its entry_points.txt lines, its
# modules, the words of the one line that leaves it out, the name a user would ask for).
BROKEN_ENTRY_POINTS = [
    ("import-fails", "faulty = faulty_layer:Faulty",
     {"faulty_layer": "import nonexistent_dependency\n"},
     ("ModuleNotFoundError: No module named 'nonexistent_dependency'",), "faulty"),
    ("names-another-model", f"wrong = {TOY}", {}, ("registers its layer as 'toy'",), "wrong"),
    ("not-registered", "missing = toy_layer:Nope", {}, ("has no attribute 'Nope'",), "missing"),
    ("not-a-path", "plain = toy_layer", {}, ("'package.module:Layer'",), "plain"),
    ("malformed-file", "faulty faulty_layer:Faulty", {},
     ("entry_points.txt", "cannot be read", "TypeError"), None),
]


@pytest.mark.parametrize("entries, modules, words, name", [c[1:] for c in BROKEN_ENTRY_POINTS],
                         ids=[c[0] for c in BROKEN_ENTRY_POINTS])
def test_a_broken_entry_point_is_one_line_and_the_rest_of_the_harness_works(
        outside, tmp_path, monkeypatch, caplog, capsys, entries, modules, words, name):
    monkeypatch.syspath_prepend(str(tmp_path))
    _installed(tmp_path, "broken-layer", entries, **modules)
    with isolated_registry(*modules), caplog.at_level(logging.WARNING,
                                                      logger="linrnn_bench.models"):
        monkeypatch.setattr(_registry, "_loaded", False)  # a fresh process's first look-up
        assert cli.main(["list", "models"]) == 0
        assert re.search(r"^\s+lru\s", capsys.readouterr().out, flags=re.MULTILINE)
        [record] = caplog.records
        line = record.getMessage()
        assert "\n" not in line and "'broken-layer'" in line, line
        for word in words:
            assert word in line, (word, line)
        # Our models train; the broken one, checked by name, is that line as an error.
        assert cli.main(["train", "model=lru", "--preset", "smoke", "--explain"]) == 0
        capsys.readouterr()
        if name is not None:
            assert cli.main(["check-layer", name]) == 2
            err = capsys.readouterr().err
            assert err.count("\n") == 1 and "'broken-layer'" in err and words[0] in err, err


def test_a_broken_entry_point_in_a_fresh_process_is_one_line_on_stderr(tmp_path):
    _installed(tmp_path, "broken-layer", "faulty = faulty_layer:Faulty",
               faulty_layer="import nonexistent_dependency\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]),
           "LINRNN_JAX_CACHE": ""}
    done = subprocess.run([sys.executable, "-m", "linrnn_bench", "list", "models"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert re.search(r"^\s+lru\s", done.stdout, flags=re.MULTILINE)
    [line] = done.stderr.strip().splitlines()
    assert "'broken-layer'" in line and "nonexistent_dependency" in line, done.stderr


def test_the_selective_layer_in_the_accuracy_study_and_the_whole_report(outside, tmp_path):
    # Trained by the accuracy study at the smoke preset beside a layer of ours, by import path.
    from linrnn_bench.harness.report import render
    from linrnn_bench.harness.studies import accuracy

    store = Store(tmp_path / "store.sqlite")
    # Seed 1: runs outside the smoke grid, so the report shows these two models alone.
    config = accuracy.STUDY.config("smoke", {"models": f"({S6},lru)", "seeds": "(1,)"})
    summary = run_study(accuracy.STUDY, config, store=store, progress=False)
    assert summary.counts == {"done": summary.total}, store.runs("accuracy")["error"].tolist()
    assert assert_rows_declared(store, "accuracy", accuracy.COLUMNS) == {"eval", "final"}
    out = tmp_path / "reports"
    render(store, out)
    index = (out / "index.md").read_text()
    table = (out / "tables" / "accuracy_test.md").read_text()
    assert "| S6 " in table and "| LRU " in table  # its own label, in the table
    assert style.model_colour("s6") not in {style.model_colour(m) for m in
                                           ("rotrnn", "lru", "s4d", "s5")}
    # Where it cannot enter, the report says so, with the capability it lacks; stability
    # needs hidden states only, which S6 has.
    assert ("**Theory checks: S6 is not in this study**" in index
            and "S6 declares no discrete_system" in index)
    assert "**Stability of the hidden-state norm: S6 is not in this study**" not in index


# A user's layer written as a Flax linen module, in the user's own file: a real diagonal
# recurrence h_t = sigmoid(decay) * h_{t-1} + B u_t, y_t = C h_t + D u_t, registered through
# `models.register` on a factory that wraps the module in `FromLinen`.
LINEN_SOURCE = textwrap.dedent('''
    """A diagonal recurrence written as a Flax linen module, registered from outside."""
    import dataclasses

    import flax.linen as nn
    import jax
    import jax.numpy as jnp

    from linrnn_bench import models
    from linrnn_bench.models.flax.linen import FromLinen


    @dataclasses.dataclass(frozen=True)
    class DecayConfig:
        d_model: int
        d_state: int

        def __post_init__(self):
            if self.d_model <= 0 or self.d_state <= 0:
                raise ValueError(f"d_model and d_state must be positive, got {self}.")


    class Decay(nn.Module):
        d_model: int
        d_state: int

        @nn.compact
        def __call__(self, u):  # (L, H) -> (L, H)
            decay = self.param(
                "decay", lambda key, shape: jax.random.uniform(key, shape, minval=1.0, maxval=4.0),
                (self.d_state,),
            )
            b = nn.Dense(self.d_state, use_bias=False, name="B")(u)  # (L, N)

            def step(h, b_t):
                h = jax.nn.sigmoid(decay) * h + b_t
                return h, h

            _, states = jax.lax.scan(step, jnp.zeros((self.d_state,), u.dtype), b)
            skip = self.param("D", nn.initializers.ones, (self.d_model,))
            return nn.Dense(self.d_model, use_bias=False, name="C")(states) + skip[None, :] * u


    @models.register("decay", DecayConfig, label="Decay (linen)",
                     capabilities={models.RECURRENT_MASK})
    def decay(config, *, key):
        return FromLinen(Decay(config.d_model, config.d_state), config.d_model, key=key,
                         recurrent=("decay", "B"))
''')
LINEN = "linen_layer:decay"


def test_a_flax_linen_layer_passes_check_layer_and_enters_the_accuracy_table(tmp_path, capsys):
    # Written by the user outside the package, named by import path as any outside layer.
    from linrnn_bench.harness.report import render
    from linrnn_bench.harness.studies import accuracy
    from linrnn_bench.models.flax.linen import FromLinen

    (tmp_path / "linen_layer.py").write_text(LINEN_SOURCE)
    sys.path.insert(0, str(tmp_path))
    try:
        with isolated_registry("linen_layer"):
            assert cli.main(["check-layer", LINEN]) == 0  # 1 if any check failed
            table = capsys.readouterr().out
            assert re.search(r"^study accuracy +ok ", table, re.MULTILINE), table
            layer = models.build("decay", d_model=4, d_state=8, key=jax.random.PRNGKey(0))
            assert isinstance(layer, FromLinen) and models.info(LINEN).origin == LINEN
            # The recurrent group is what the factory named: decay and B, not C or D.
            mask = layer.recurrent_mask().params
            assert (mask["decay"], mask["B"]["kernel"], mask["C"]["kernel"], mask["D"]) == (
                True, True, False, False)
            with pytest.raises(ValueError, match=r"recurrent=\['A'\] names no parameter.*"
                                                 r"accepted: \['B/kernel'"):
                FromLinen(layer.module, 4, key=jax.random.PRNGKey(0), recurrent=("A",))

            store = Store(tmp_path / "store.sqlite")
            config = accuracy.STUDY.config("smoke", {"models": f"({LINEN},)"})
            summary = run_study(accuracy.STUDY, config, store=store, progress=False)
            assert summary.counts == {"done": summary.total}, (
                store.runs("accuracy")["error"].tolist())
            render(store, tmp_path / "reports")
            table = (tmp_path / "reports" / "tables" / "accuracy_test.md").read_text()
            assert "| Decay (linen) " in table, table
    finally:
        sys.path.remove(str(tmp_path))
