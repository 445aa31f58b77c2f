"""The model registry: ``models.build(name, d_model=..., d_state=..., key=..., **options)``.

Each layer file registers itself with its frozen config class:

    @register("lru", LRUConfig)
    class LRU(AbstractRecurrentLayer): ...   # constructed as LRU(config, *, key=key)

A config class is a frozen dataclass whose first fields are ``d_model`` and ``d_state`` and whose
``__post_init__`` validates every value (see `models._validate`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from ._base import AbstractRecurrentLayer

_REGISTRY: dict[str, tuple[type, type[AbstractRecurrentLayer]]] = {}


def register(name: str, config_cls: type) -> Callable[[type], type]:
    def decorate(layer_cls: type[AbstractRecurrentLayer]) -> type[AbstractRecurrentLayer]:
        if name in _REGISTRY:
            raise ValueError(f"Model {name!r} is registered twice.")
        _REGISTRY[name] = (config_cls, layer_cls)
        return layer_cls

    return decorate


def names() -> list[str]:
    """Registered model names, sorted."""
    _load_all()
    return sorted(_REGISTRY)


def config_class(name: str) -> type:
    _load_all()
    if name not in _REGISTRY:
        raise ValueError(f"Unknown model {name!r}; accepted models: {', '.join(sorted(_REGISTRY))}.")
    return _REGISTRY[name][0]


def make_config(name: str, **options: Any) -> Any:
    """The validated config of model ``name``; unknown options are an error listing the valid ones."""
    cls = config_class(name)
    accepted = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise ValueError(
            f"Unknown option(s) {unknown} for model {name!r}; accepted options: {', '.join(accepted)}."
        )
    return cls(**options)


def build(name: str, *, d_model: int, d_state: int, key: Any, **options: Any) -> AbstractRecurrentLayer:
    """Build layer ``name`` mapping ``(L, d_model) -> (L, d_model)`` with ``d_state`` states."""
    config = make_config(name, d_model=d_model, d_state=d_state, **options)
    return from_config(name, config, key=key)


def from_config(name: str, config: Any, *, key: Any) -> AbstractRecurrentLayer:
    cls, layer_cls = config_class(name), _REGISTRY[name][1]
    if not isinstance(config, cls):
        raise TypeError(f"Model {name!r} needs a {cls.__name__}, got {type(config).__name__}.")
    return layer_cls(config, key=key)


def _load_all() -> None:
    # Importing the layer modules runs their @register lines.
    from . import lru, rotrnn, s4d, s5  # noqa: F401
