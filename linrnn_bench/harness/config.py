"""Frozen, typed configs: validated `key=value` overrides, dotted flattening, stable hashes.

Every config in the project (a model's, a task's, a study's, a run's) is a frozen dataclass with
type annotations. This module is the one place that turns strings from the command line into
those typed values, and that refuses unknown keys and bad values with a message listing what is
accepted.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import numbers
import re
import types
import typing
from collections.abc import Iterable, Mapping
from typing import Any, Literal, TypeVar, get_args, get_origin

from .errors import ConfigError as ConfigError  # re-exported: its old import place

T = TypeVar("T")

# The largest seed a run accepts. `jax.random.PRNGKey` keeps the low 32 bits of a seed when
# 64-bit mode is off (JAX's default, and this project's): 2^32 would draw seed 0's
# initialisation under another name. (The store's INTEGER column holds up to 2^63 - 1.)
SEED_MAX = 2**32 - 1


def check_seed(seed: Any, where: str) -> int:
    """``seed`` if it is an integer in [0, `SEED_MAX`], else a `ConfigError` saying why."""
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or not (
            0 <= seed <= SEED_MAX):
        raise ConfigError(
            f"{where}={seed!r} is not accepted; accepted: an integer in [0, {SEED_MAX}] (2^32 - 1: "
            "jax.random.PRNGKey keeps 32 bits of a seed, so a larger one would repeat a smaller "
            "one's initialisation). Pass a smaller seed."
        )
    return int(seed)


def parse_overrides(items: Iterable[str]) -> dict[str, str]:
    """``["a=1", "b.c=x"]`` -> ``{"a": "1", "b.c": "x"}``.

    A malformed item and a key given twice are errors: with two values for one key, which was
    meant cannot be known, and a silent last-wins would run a configuration nobody asked for.
    """
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(
                f"Override {item!r} is not of the form key=value (e.g. train.steps=100)."
            )
        if key in out:
            raise ConfigError(
                f"Override key {key!r} is given twice ({key}={out[key]} and "
                f"{key}={value.strip()}); give each key once."
            )
        out[key] = value.strip()
    return out


def field_names(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]


def replace(config: T, overrides: Mapping[str, Any], *, what: str | None = None) -> T:
    """A copy of the frozen dataclass ``config`` with ``overrides`` applied and validated.

    Values may be typed already or strings (from the command line), which are parsed by the
    field's annotation. Keys with a dot address a nested config field (``"model.d_state"``).

    A config class may declare option groups, ``OPTION_GROUPS = {"layer": ("layer_options",
    "layer_config_class", ("d_model", "d_state"))}``: the value of field ``layer`` names a typed
    config class (``cls.layer_config_class(layer)``) whose fields are kept as ``(name, value)``
    pairs in ``layer_options``, except those the config sets itself (``d_model``, ``d_state``).
    Both ``layer.r_min=0.5`` and ``layer_options=r_min=0.5`` are then parsed by that class's
    annotations.
    """
    cls = type(config)
    what = what or cls.__name__
    direct, nested, texts = _sort_overrides(cls, overrides, what)
    _set_options_texts(config, direct, texts, what)
    _set_nested(config, direct, nested, what)
    try:
        return dataclasses.replace(config, **direct)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"Invalid {what}: {e}") from None


def _sort_overrides(cls: type, overrides: Mapping[str, Any], what: str
                    ) -> tuple[dict[str, Any], dict[str, dict[str, Any]], dict[str, str]]:
    """``overrides`` of a ``cls`` config sorted by how they are applied: ``direct``, fields
    parsed by their annotation now; ``nested``, ``{field: {rest: value}}`` for dotted keys; and
    ``texts``, the text of an option group's options field (``layer_options=r_min=0.5``),
    parsed once the group's class is known. An unknown field is an error listing the accepted
    ones."""
    hints = typing.get_type_hints(cls)
    names = field_names(cls)
    stores = {group[0] for group in getattr(cls, "OPTION_GROUPS", {}).values()}
    direct: dict[str, Any] = {}
    nested: dict[str, dict[str, Any]] = {}
    texts: dict[str, str] = {}
    for key, value in overrides.items():
        head, dot, rest = key.partition(".")
        if head not in names:
            raise ConfigError(
                f"Unknown key {key!r} for {what}; accepted keys: {', '.join(sorted(names))}."
            )
        if dot:
            nested.setdefault(head, {})[rest] = value
        elif head in stores and isinstance(value, str):
            texts[head] = value  # parsed below, once the group's class is known
        else:
            direct[head] = parse_value(value, hints[head], f"{what}.{head}")
    return direct, nested, texts


def _group_class(config: Any, head: str, direct: Mapping[str, Any], what: str) -> type:
    """The typed config class that option group ``head``'s value names (the overridden value
    in ``direct``, else ``config``'s), or a `ConfigError` saying why there is none."""
    cls = type(config)
    current = direct.get(head, getattr(config, head))
    try:
        return getattr(cls, cls.OPTION_GROUPS[head][1])(current)
    except (KeyError, TypeError, ValueError) as e:
        raise ConfigError(f"{what}.{head}={current!r}: {e}") from None


def _set_options_texts(config: Any, direct: dict[str, Any], texts: Mapping[str, str],
                       what: str) -> None:
    """Parse each options field's text (``layer_options=r_min=0.5``) by its group's class and
    set it in ``direct`` as sorted ``(name, value)`` pairs."""
    groups = getattr(type(config), "OPTION_GROUPS", {})
    stores = {group[0]: head for head, group in groups.items()}
    for store, text in texts.items():
        pairs = parse_pairs(text, f"{what}.{store}")
        head = stores[store]
        parsed = parse_fields(_group_class(config, head, direct, what), pairs, f"{what}.{head}",
                              reserved=groups[head][2])
        direct[store] = tuple(sorted(parsed.items()))


def _set_nested(config: Any, direct: dict[str, Any], nested: Mapping[str, dict[str, Any]],
                what: str) -> None:
    """Apply the dotted keys (``nested``: ``{field: {rest: value}}``) into ``direct``: a nested
    config field is replaced recursively; an option group's (``layer.r_min=0.5``) is merged
    into the options field it belongs to. A dotted key on any other field is an error."""
    groups = getattr(type(config), "OPTION_GROUPS", {})
    for head, sub in nested.items():
        current = direct.get(head, getattr(config, head))
        if head in groups:
            # ``layer.r_min=0.5``: a field of the typed config that ``head``'s value names,
            # parsed by that field's annotation and kept in the options field it belongs to.
            store = groups[head][0]
            parsed = parse_fields(_group_class(config, head, direct, what), sub,
                                  f"{what}.{head}", reserved=groups[head][2])
            merged = dict(direct.get(store, getattr(config, store)))
            merged.update(parsed)
            direct[store] = tuple(sorted(merged.items()))
            continue
        if not dataclasses.is_dataclass(current):
            raise ConfigError(f"{what}.{head} is not a nested config; cannot set {sorted(sub)}.")
        direct[head] = replace(current, sub, what=f"{what}.{head}")


def from_table(cls: type[T], table: Mapping[str, Any], *, what: str) -> T:
    """A ``cls`` config from a table of a preset file (TOML, parsed): its keys are ``cls``'s
    fields, a nested table sets a nested config's fields (``network = {depth = 2}`` is
    ``network.depth=2``), a list of tables a tuple of dataclasses (``[[cpu.recipes]]``). Every
    value is parsed and checked as a command line's override is (`replace` on ``cls()``)."""
    return replace(cls(), _dotted(table), what=what)


def _dotted(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"network": {"depth": 2}}`` -> ``{"network.depth": 2}``; lists are kept whole."""
    out: dict[str, Any] = {}
    for key, value in table.items():
        if isinstance(value, Mapping):
            out.update(_dotted(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def parse_pairs(text: Any, where: str) -> dict[str, str]:
    """``"a=1,b=x"`` (an options field's text, e.g. ``layer_options``) -> ``{"a": "1", "b": "x"}``;
    an item not of the form name=value and a name given twice are errors."""
    pairs: dict[str, str] = {}
    for item in _split_list(text):
        name, sep, value = str(item).partition("=")
        name = name.strip()
        if not sep or not name:
            raise ConfigError(f"{where}: {item!r} is not of the form name=value.")
        if name in pairs:
            raise ConfigError(f"{where}: {name!r} is given twice; give each name once.")
        pairs[name] = value.strip()
    return pairs


def parse_fields(
    cls: type, values: Mapping[str, Any], where: str, *, reserved: Iterable[str] = ()
) -> dict[str, Any]:
    """``values`` as fields of the config class ``cls``: text parsed by each field's annotation.

    An unknown name is an error listing the accepted ones, as is a name in ``reserved`` (a
    field the enclosing config sets, such as a layer's ``d_state``). Values that are not text
    are kept as given: they are typed already, and the class validates them when built.
    """
    hints = typing.get_type_hints(cls)
    owned = set(reserved)
    accepted = [n for n in field_names(cls) if n not in owned]
    out: dict[str, Any] = {}
    for name, value in values.items():
        if name in owned:
            raise ConfigError(
                f"{where}.{name} is set by the enclosing config (its own key {name!r}), not "
                f"here; accepted keys: {', '.join(sorted(accepted))}."
            )
        if name not in accepted:
            raise ConfigError(
                f"Unknown key {name!r} for {where} ({cls.__name__}); accepted keys: "
                f"{', '.join(sorted(accepted))}."
            )
        out[name] = parse_value(value, hints[name], f"{where}.{name}") if isinstance(
            value, str) else value
    return out


def parse_value(value: Any, annotation: Any, where: str) -> Any:
    """Convert ``value`` (often a string) to ``annotation``'s type, or raise `ConfigError`."""
    origin = get_origin(annotation)
    args = get_args(annotation)
    if annotation is Any:
        return value
    if origin is Literal:
        return _parse_choice(value, args, where)
    if origin in (typing.Union, types.UnionType):
        return _parse_union(value, annotation, where)
    if origin is tuple:
        return _parse_tuple(value, args, where)
    if annotation is bool:
        return _parse_bool(value, where)
    if annotation is int:
        return _parse_int(value, where)
    if annotation is float:
        return _parse_float(value, where)
    if annotation is str:
        return str(value)
    if dataclasses.is_dataclass(annotation) and isinstance(value, annotation):
        return value
    if dataclasses.is_dataclass(annotation) and isinstance(value, Mapping):
        # A table of a preset file (`from_table`): the dataclass built from its fields.
        fields = parse_fields(annotation, value, where)
        try:
            return annotation(**fields)
        except (TypeError, ValueError) as e:
            raise ConfigError(f"{where}: {e}") from None
    if isinstance(annotation, type) and isinstance(value, annotation):
        return value
    raise ConfigError(f"{where}: cannot parse {value!r} as {annotation}.")


def _parse_choice(value: Any, choices: tuple[Any, ...], where: str) -> Any:
    """The member of a `Literal`'s ``choices`` that ``value`` is (or, as text, spells)."""
    if isinstance(value, str):
        for a in choices:
            if str(a) == value:
                return a
    elif value in choices:
        return value
    raise ConfigError(f"{where}={value!r} is not accepted; accepted values: {list(choices)}.")


def _parse_union(value: Any, annotation: Any, where: str) -> Any:
    """``value`` as the first member of the union ``annotation`` that parses it; ``None`` (or
    the text none/null) where the union holds None. The error lists every member's."""
    args = get_args(annotation)
    if value is None or (isinstance(value, str) and value.lower() in ("none", "null")):
        if type(None) in args:
            return None
    errors = []
    for a in args:
        if a is type(None):
            continue
        try:
            return parse_value(value, a, where)
        except ConfigError as e:
            errors.append(str(e))
    raise ConfigError(f"{where}={value!r} matches none of {annotation}: {'; '.join(errors)}")


def _parse_tuple(value: Any, args: tuple[Any, ...], where: str) -> tuple[Any, ...]:
    """``value`` (a comma-separated text or a sequence) as a tuple of ``args``' types: any
    length for ``tuple[X, ...]``, else exactly one item per type. A command line's option pair
    ``"name=value"`` for ``tuple[str, Any]`` keeps its value's literal type."""
    if args == (str, Any) and isinstance(value, str) and "=" in value:
        # An option pair from the command line, "name=value" (as in layer_options).
        name, _, text = value.partition("=")
        return (name.strip(), parse_literal(text.strip()))
    items = _split_list(value)
    if len(args) == 2 and args[1] is Ellipsis:
        return tuple(parse_value(v, args[0], where) for v in items)
    if len(items) != len(args):
        raise ConfigError(f"{where} needs {len(args)} values, got {len(items)}: {value!r}.")
    return tuple(parse_value(v, a, where) for v, a in zip(items, args))


def _parse_bool(value: Any, where: str) -> bool:
    """A bool, or its text (true/1/yes/on, false/0/no/off, any case)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "1", "yes", "on"):
        return True
    if isinstance(value, str) and value.lower() in ("false", "0", "no", "off"):
        return False
    raise ConfigError(f"{where}={value!r} is not a boolean; use true or false.")


def _parse_float(value: Any, where: str) -> float:
    """A float from a number or its text; a bool is refused (True is not 1.0 here)."""
    try:
        if isinstance(value, bool):
            raise TypeError
        return float(value)
    except (TypeError, ValueError, OverflowError):
        raise ConfigError(
            f"{where}={value!r} is not a number; accepted: a number, e.g. 0.001 or 1e-3."
        ) from None


# An integer written out in digits ("12", "-3", "+7", "1_000"): parsed exactly, at any size.
_INTEGER = re.compile(r"^[+-]?\d+(_\d+)*$")


def _parse_int(value: Any, where: str) -> int:
    """An integer from an int, an integral float, or text; never rounded, never a bool.

    Text in digits is parsed exactly (a seed of 2^53 + 1 stays itself). Text in a float's
    notation ("1e3", "4.0") is accepted when it names an integer exactly, i.e. below 2^53 in
    magnitude, where a float holds every integer; "inf", "nan" and "1e400" are refused.
    """
    if isinstance(value, bool):
        raise ConfigError(f"{where}={value!r} is not an integer; accepted: an integer, e.g. 3.")
    if isinstance(value, int):
        return value
    if isinstance(value, str) and _INTEGER.match(value.strip()):
        return int(value.strip())
    try:
        as_float = float(value)
    except (TypeError, ValueError):
        as_float = math.nan
    if math.isfinite(as_float) and as_float.is_integer() and abs(as_float) < 2.0**53:
        return int(as_float)
    raise ConfigError(
        f"{where}={value!r} is not an integer; accepted: an integer written in digits (e.g. 3 "
        "or 1000), or a float notation of one below 2^53 (e.g. 1e3)."
    )


def parse_literal(text: str) -> Any:
    """A command-line value of an untyped option: a JSON number, true/false/null, or text."""
    try:
        value = json.loads(text.lower() if text.lower() in ("true", "false", "null") else text)
    except json.JSONDecodeError:
        return text
    return tuple(value) if isinstance(value, list) else value


def _split_list(value: Any) -> list[Any]:
    if isinstance(value, (list, tuple)):
        return list(value)
    text = str(value).strip()
    if text.startswith(("(", "[")) and text.endswith((")", "]")):
        text = text[1:-1]
    return [v.strip() for v in text.split(",") if v.strip()]


# A dataclass field's metadata key: the field is left out of `to_dict` (and so of a run's
# identity, `config_hash`) while it holds its default. A field added to a run's spec this way
# keeps the ids of every run recorded before it existed.
OMIT_DEFAULT = "omit_default"


def to_dict(config: Any) -> dict[str, Any]:
    """A JSON-ready nested dict of a dataclass config (tuples become lists); a field marked
    `OMIT_DEFAULT` is left out while it holds its default."""
    tree = json.loads(json.dumps(dataclasses.asdict(config)))
    _omit_defaults(config, tree)
    return tree


def _omit_defaults(config: Any, tree: dict[str, Any]) -> None:
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        if field.metadata.get(OMIT_DEFAULT) and value == field.default:
            tree.pop(field.name, None)
        elif dataclasses.is_dataclass(value) and isinstance(tree.get(field.name), dict):
            _omit_defaults(value, tree[field.name])


def flatten(config: Any, prefix: str = "") -> dict[str, Any]:
    """``{"model": {"d_state": 64}}`` -> ``{"model.d_state": 64}`` (lists kept as JSON text)."""
    tree = to_dict(config) if dataclasses.is_dataclass(config) else config
    out: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, prefix=f"{name}."))
        elif isinstance(value, list):
            out[name] = json.dumps(value)
        else:
            out[name] = value
    return out


def config_hash(config: Any, *extra: Any) -> str:
    """A stable 16-hex-digit identity of a config (and any extra JSON-able values)."""
    payload = json.dumps(
        [to_dict(config) if dataclasses.is_dataclass(config) else config, *extra],
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(payload.encode()).hexdigest()[:16]
