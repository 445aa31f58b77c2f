"""The layer variants the stability and theory studies compare, built from the model registry.

Each registered model contributes its base variant, under its own name, and its ablations (a
registration's `models.Ablation`, e.g. a normaliser switched off), under their keys. Nothing
here names a model: a model registered from outside brings its variants with it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from linrnn_bench import models


@dataclasses.dataclass(frozen=True)
class Variant:
    """One layer configuration.

    Attributes:
        model: registry name of the layer (`models.build`).
        options: layer options fixed by the variant, as ``(name, value)`` pairs.
        label: how tables and legends name it.
        note: what the variant is or switches, for captions.
    """

    model: str
    options: tuple[tuple[str, Any], ...]
    label: str
    note: str


def variants() -> dict[str, Variant]:
    """Every variant of every registered model: ``{key: Variant}``, in the registry's order,
    each model's base variant (its name) before its ablations."""
    out: dict[str, Variant] = {}
    for model in models.infos():
        out[model.name] = Variant(model.name, (), model.label, model.note)
        for ablation in model.ablations:
            if ablation.key in out:
                raise ValueError(
                    f"Ablation key {ablation.key!r} of model {model.name!r} is already a variant "
                    f"({out[ablation.key].model!r}); ablation keys must be unique."
                )
            out[ablation.key] = Variant(model.name, ablation.options, ablation.label, ablation.note)
    return out


def variant(key: str) -> Variant:
    """The variant ``key`` (a model's import path gives its base variant)."""
    known = variants()
    if key in known:
        return known[key]
    if ":" in key:
        return known[models.resolve(key)]
    raise ValueError(f"Unknown variant {key!r}; accepted: {list(known)}.")


def check_variants(where: str, names: tuple[str, ...]) -> None:
    """Raise if ``names`` is empty, repeats a name, or names no variant."""
    known = variants()
    if not names:
        raise ValueError(f"{where} must name at least one variant; accepted: {list(known)}.")
    unknown = [n for n in names if n not in known and ":" not in n]
    if unknown:
        raise ValueError(f"{where} has unknown variant(s) {unknown}; accepted: {list(known)}.")
    for name in names:
        if ":" in name:
            models.resolve(name)  # an import path must name a registered layer
    if len(set(names)) != len(names):
        raise ValueError(f"{where}={names!r} repeats a variant.")


def build_options(
    variant: Variant, d_model: int, d_state: int, explicit: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The options passed to `models.build` for ``variant`` at this width and state size.

    In increasing precedence: the registration's ``width_options(d_model, d_state)``, the
    ``explicit`` options that the model's config accepts (a study's setting such as a head count
    applies to the models that have one and is ignored by the others), and the variant's own.
    """
    model = models.info(variant.model)
    out: dict[str, Any] = {}
    if model.width_options is not None:
        out.update(model.width_options(d_model, d_state))
    accepted = set(model.option_names())
    out.update({k: v for k, v in (explicit or {}).items() if k in accepted})
    out.update(variant.options)
    return out
