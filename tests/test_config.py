"""Typed configs from the command line: parsing, validation messages, flattening, hashes."""

from __future__ import annotations

import dataclasses
import importlib
import tomllib
from typing import Any, Literal

import pytest

from linrnn_bench.harness import config as C


@dataclasses.dataclass(frozen=True)
class Inner:
    size: int = 4
    rate: float = 0.5


@dataclasses.dataclass(frozen=True)
class Outer:
    name: str = "a"
    mode: Literal["fast", "slow"] = "fast"
    flag: bool = False
    limit: float | None = None
    sizes: tuple[int, ...] = (1, 2)
    options: tuple[tuple[str, Any], ...] = ()
    inner: Inner = Inner()

    def __post_init__(self):
        if self.inner.size > 100:
            raise ValueError(f"inner.size={self.inner.size} is too big; at most 100.")


def test_parse_overrides_splits_on_the_first_equals_sign():
    assert C.parse_overrides(["a=1", " b.c = x=y "]) == {"a": "1", "b.c": "x=y"}
    with pytest.raises(C.ConfigError, match="'oops' is not of the form key=value"):
        C.parse_overrides(["oops"])
    with pytest.raises(C.ConfigError, match="not of the form key=value"):
        C.parse_overrides(["=3"])


def test_replace_parses_strings_by_annotation():
    out = C.replace(Outer(), {"name": "b", "mode": "slow", "flag": "true", "limit": "2.5",
                              "sizes": "3,4,5", "inner.size": "8", "inner.rate": "1e-3"})
    assert out == Outer(name="b", mode="slow", flag=True, limit=2.5, sizes=(3, 4, 5),
                        inner=Inner(size=8, rate=1e-3))
    assert C.replace(out, {"limit": "none", "sizes": "()"}).limit is None
    assert C.replace(out, {"sizes": "[7]"}).sizes == (7,)


def test_option_pairs_take_json_literals():
    out = C.replace(Outer(), {"options": "bidirectional=true,r_min=0.5,init=ring,n=3"})
    assert out.options == (("bidirectional", True), ("r_min", 0.5), ("init", "ring"), ("n", 3))
    assert C.parse_literal("null") is None and C.parse_literal("[1, 2]") == (1, 2)
    assert C.parse_literal("TRUE") is True and C.parse_literal("x y") == "x y"


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"nmae": "b"}, r"Unknown key 'nmae' for Outer; accepted keys: flag, inner, limit, mode"),
        ({"mode": "medium"}, r"Outer.mode='medium' is not accepted; accepted values: \['fast', "),
        ({"flag": "maybe"}, r"Outer.flag='maybe' is not a boolean; use true or false"),
        ({"inner.size": "2.5"}, r"Outer.inner.size='2.5' is not an integer"),
        ({"inner.rate": "fast"}, r"Outer.inner.rate='fast' is not a number"),
        ({"inner.nope": "1"}, r"Unknown key 'nope' for Outer.inner; accepted keys: rate, size"),
        ({"name.x": "1"}, r"Outer.name is not a nested config"),
        ({"inner.size": "101"}, r"Invalid Outer: inner.size=101 is too big; at most 100"),
    ],
)
def test_bad_keys_and_values_say_what_is_accepted(overrides, message):
    with pytest.raises(C.ConfigError, match=message):
        C.replace(Outer(), overrides)


def test_flatten_and_hash_are_stable_identities():
    flat = C.flatten(Outer(options=(("k", 1),)))
    assert flat["inner.size"] == 4 and flat["sizes"] == "[1, 2]" and flat["mode"] == "fast"
    assert C.config_hash(Outer()) == C.config_hash(Outer())
    assert C.config_hash(Outer()) != C.config_hash(Outer(inner=Inner(size=5)))
    assert C.config_hash(Outer(), "study", 1) != C.config_hash(Outer(), "study", 2)
    assert len(C.config_hash(Outer())) == 16
    # A golden value: the hash is a run's identity in stores that outlive this code, so a change
    # of hashing would silently orphan every stored result. It is sha256 of the compact JSON
    # '[{"a":1}]', first 16 hex digits (hashlib.sha256(b'[{"a":1}]').hexdigest()[:16]).
    assert C.config_hash({"a": 1}) == "b713f6d2a989e907"


def test_layer_options_are_parsed_by_the_layer_config_class():
    """``network.layer.<field>`` and ``network.layer_options=`` go through the layer's class."""
    from linrnn_bench.models.network import NetworkConfig

    base = NetworkConfig(layer="lru")
    out = C.replace(base, {"layer.r_min": "0.5", "layer.bidirectional": "yes"})
    assert out.layer_options == (("bidirectional", True), ("r_min", 0.5))
    assert C.replace(out, {"layer.max_phase": "3"}).layer_options == (
        ("bidirectional", True), ("max_phase", 3.0), ("r_min", 0.5))  # merged; 3 -> 3.0
    assert C.replace(base, {"layer_options": "r_min=0.5,bidirectional=on"}) == out
    # The class is the layer named in the same overrides, not the one replaced.
    rot = C.replace(base, {"layer": "rotrnn", "layer.heads": "4"})
    assert rot.layer == "rotrnn" and rot.layer_options == (("heads", 4),)
    # The same typed values hash the same, however they were written.
    typed = NetworkConfig(layer="lru", layer_options=(("r_min", 0.5), ("bidirectional", True)))
    assert C.config_hash(out) == C.config_hash(typed)


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"layer.r_min": "low"}, r"NetworkConfig.layer.r_min='low' is not a number"),
        ({"layer.bidirectional": "maybe"}, r"layer.bidirectional='maybe' is not a boolean"),
        ({"layer.nope": "1"}, r"Unknown key 'nope' for NetworkConfig.layer \(LRUConfig\); "
                              r"accepted keys: algorithm, bidirectional, max_phase"),
        ({"layer.d_state": "8"}, r"NetworkConfig.layer.d_state is set by the enclosing config"),
        ({"layer_options": "r_min"}, r"'r_min' is not of the form name=value"),
        ({"layer": "gru", "layer.r_min": "0.5"}, r"NetworkConfig.layer='gru': Unknown model"),
        ({"layer.r_min": "0.99", "layer.r_max": "0.5"}, r"Invalid NetworkConfig: .*r_min"),
    ],
)
def test_bad_layer_options_say_what_is_accepted(overrides, message):
    from linrnn_bench.models.network import NetworkConfig

    with pytest.raises(C.ConfigError, match=message):
        C.replace(NetworkConfig(layer="lru"), overrides)


@dataclasses.dataclass(frozen=True)
class Many:
    """A config with a tuple of dataclasses, as a study's recipes are."""

    inner: Inner = Inner()
    parts: tuple[Inner, ...] = ()
    pairs: tuple[tuple[str, str], ...] = ()


def test_a_preset_table_builds_the_config_its_overrides_would():
    table = tomllib.loads('inner = { size = 8 }\npairs = [["a", "b"]]\n'
                          '[[parts]]\nsize = 2\n[[parts]]\nrate = 1e-3\n')
    assert C.from_table(Many, table, what="t") == Many(
        inner=Inner(size=8), parts=(Inner(size=2), Inner(rate=1e-3)), pairs=(("a", "b"),))
    with pytest.raises(C.ConfigError, match=r"Unknown key 'sise' for t.parts \(Inner\); "
                                            r"accepted keys: rate, size"):
        C.from_table(Many, {"parts": [{"sise": 2}]}, what="t")


_STUDY = '''\
import dataclasses
import importlib
import tomllib
from linrnn_bench.harness.studies._study import read_presets

@dataclasses.dataclass(frozen=True)
class Config:
    steps: int = 1
    tasks: tuple[str, ...] = ("digits",)

PRESETS = read_presets(__name__, Config)
'''


@pytest.mark.parametrize(
    "text, message",
    [
        ("[smoke]\nsteps = 2\n[cpu]\nstep = 3\n",
         r"Unknown key 'step' for mystudy/presets.toml \[cpu\]; accepted keys: steps, tasks"),
        ("[smoke]\nsteps = 'many'\n", r"mystudy/presets.toml \[smoke\].steps='many' is not an int"),
        ("[cpu_full]\nsteps = 2\n",
         r"mystudy/presets.toml: unknown preset\(s\) cpu_full; accepted: smoke, cpu, cpu-full, gpu"),
        ("[smoke\nsteps = 2\n", r"mystudy/presets.toml: Expected ']'"),
        (None, r"mystudy/presets.toml: .*No such file"),
    ],
)
def test_a_bad_presets_file_names_itself_the_preset_and_what_is_accepted(
        tmp_path, monkeypatch, text, message):
    package = tmp_path / "mystudy"
    package.mkdir()
    (package / "__init__.py").write_text(_STUDY)
    if text is not None:
        (package / "presets.toml").write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(C.ConfigError, match=message):
        importlib.import_module("mystudy")
