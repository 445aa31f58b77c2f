"""Where a section's numbers came from, summarised from the store's runs for the index page.

Every run records its provenance (`harness.provenance.provenance`): commit and dirty flag,
library versions, backend, device kind and CPU count. A report states these per section and
per artifact, together with the preset the runs belong to and the seeds they used. Where runs
disagree (two commits, two machines), every distinct value is listed: a mixed store is shown
as mixed, never summarised as the first value found.

The preset is not stored with a run; it is recovered from the code: a run belongs to preset
``p`` when its id is among the run ids of the study's grid at ``p``'s config. What defines a
preset here is its grid of tasks, seeds and recipes, not its list of models: a run of a model
the preset does not list (a user's layer, ``"models=(mine:Layer,lru)"``) belongs to ``p`` when
it is in the grid of ``p``'s config with that model as its only one. A run made with other
``key=value`` overrides belongs to no preset and is labelled ``custom``. A study whose grid
reads the store (`harness.studies.Study.from_store`: the stability study's selected learning
rates) has its grids built from the store being reported (`reading`, which `render` enters).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import pandas as pd

from .. import config as _config
from ..provenance import LIBRARIES, SETTINGS, thread_counts
from ..store import STATUSES, Store
from ..studies import PRESET_NAMES

log = logging.getLogger(__name__)

CUSTOM = "custom"  # a run in no preset's grid (made with key=value overrides)
UNKNOWN = "unknown"  # the study's grids could not be built, so the preset cannot be told


# The store a grid that reads one is built from (`reading`), and its configs bound to it.
_STORE: dict[str, Any] = {"store": None}
_BOUND: dict[tuple[str, str], Any] = {}
_GRIDS: dict[tuple[str, tuple[str, ...]], dict[str, frozenset[str]]] = {}


@contextlib.contextmanager
def reading(store: Any) -> Iterator[None]:
    """Within it, the grids of a study that reads the store (`Study.from_store`) are built from
    ``store``, the one being reported, as its runs were built from the store they ran with."""
    previous = _STORE["store"]
    _STORE["store"] = store
    _BOUND.clear()
    try:
        yield
    finally:
        _STORE["store"] = previous
        _BOUND.clear()


def _config_at(study: Any, preset: str) -> Any:
    """The study's config at ``preset``, bound to the store in use (`reading`)."""
    if study.from_store is None or _STORE["store"] is None:
        return study.config(preset)
    key = (study.name, preset)
    if key not in _BOUND:
        _BOUND[key] = study.bind(study.config(preset), _STORE["store"])
    return _BOUND[key]


def _grid_ids(study_name: str) -> dict[str, frozenset[str]] | None:
    """``{preset: run ids of the study's grid at that preset}``; None if grids can't be built."""
    from .. import studies

    try:
        study = studies.get(study_name)
        configs = {preset: _config_at(study, preset) for preset in PRESET_NAMES}
        # A grid that reads the store changes with it: cached per bound config.
        key = (study_name, tuple(_config.config_hash(c) for c in configs.values())
               if study.from_store is not None else ())
        if key not in _GRIDS:
            _GRIDS[key] = {
                preset: frozenset(study.run_id(spec) for spec in study.grid(config))
                for preset, config in configs.items()
            }
        return _GRIDS[key]
    except Exception as e:  # the report still renders; the preset is then stated as unknown
        log.warning("the grids of study %r cannot be built (%s: %s): its runs' preset is "
                    "labelled %r", study_name, type(e).__name__, e, UNKNOWN)
        return None


# The config field that lists a study's models, and the store column naming a run's model.
MODEL_FIELDS: tuple[tuple[str, str], ...] = (
    ("variants", "cfg.variant"), ("models", "cfg.model"), ("models", "cfg.network.layer"))


def with_model(config: Any, model: str) -> Any:
    """``config`` (a study's, at a preset) with ``model`` as its only model: the grid a run of
    a model the preset does not list belongs to (its tasks, seeds and recipes are the
    preset's). A config with no field listing models is a `ValueError`."""
    field = next((f for f, _ in MODEL_FIELDS if hasattr(config, f)), None)
    if field is None:
        raise ValueError(f"{type(config).__name__} has no field listing its models "
                         f"(one of {sorted({f for f, _ in MODEL_FIELDS})}).")
    return dataclasses.replace(config, **{field: (model,)})


def _model_grid_ids(study_name: str, model: str) -> dict[str, frozenset[str]]:
    """`_model_grids` of the study's configs bound to the store in use (`reading`)."""
    from .. import studies

    study = studies.get(study_name)
    key = "" if study.from_store is None else ",".join(
        _config.config_hash(_config_at(study, p)) for p in PRESET_NAMES)
    return _model_grids(study_name, model, key)


@functools.cache
def _model_grids(study_name: str, model: str, bound: str) -> dict[str, frozenset[str]]:
    """``{preset: run ids of the study's grid at that preset with ``model`` as its only
    model}``; a preset whose grid cannot take the model (it cannot enter, or its import path
    no longer resolves) holds no run of it."""
    from .. import studies

    study = studies.get(study_name)
    out = {}
    for preset in PRESET_NAMES:
        try:
            config = with_model(study.config(preset), model)
            # Bound with the model in it: what a grid reads from the store (the accuracy
            # study's grown pairs and selected rates) is read per model.
            if study.from_store is not None and _STORE["store"] is not None:
                config = study.bind(config, _STORE["store"])
            out[preset] = frozenset(study.run_id(spec) for spec in study.grid(config))
        except Exception as e:  # its runs stay custom; the report still renders
            log.info("study %r at preset %r cannot take model %r (%s: %s)", study_name,
                     preset, model, type(e).__name__, e)
            out[preset] = frozenset()
    return out


def run_models(frame: pd.DataFrame) -> dict[str, str]:
    """``{run_id: model}`` of ``frame``'s runs (from `Store.read` or `Store.runs`), as the
    run's config names it (registry name, variant key or import path)."""
    if frame.empty:
        return {}
    column = next((c for _, c in MODEL_FIELDS if c in frame.columns), None)
    if column is None:
        return {}
    pairs = frame[["run_id", column]].drop_duplicates("run_id")
    return {r: m for r, m in zip(pairs["run_id"], pairs[column]) if isinstance(m, str)}


def register_outside_models(store: Store) -> list[str]:
    """Register every outside layer that a run in ``store`` names by import path (its module
    is imported, as on the command line), so that every section of a report process knows it
    (order, colour, label, the studies it cannot enter). A path that no longer resolves is
    logged and left: its rows are shown under the path. Returns the registry names."""
    from linrnn_bench import models

    from .. import studies

    # The studies first: their presets list the models registered when they are imported
    # (ours and entry points'), and a layer named by path must not join a preset's list.
    for name in studies.names():
        try:
            studies.get(name)
        except Exception as e:  # its section states the problem
            log.warning("study %r cannot be imported (%s: %s)", name, type(e).__name__, e)
    found = []
    for name in studies.names():
        for model in dict.fromkeys(run_models(store.runs(name)).values()):
            if ":" not in model:
                continue
            try:
                found.append(models.resolve(model))
            except ValueError as e:
                log.warning("the store's runs name the layer %r, which does not resolve "
                            "here: %s", model, e)
    return list(dict.fromkeys(found))


def run_presets(study_name: str, run_ids: Iterable[str],
                models: Mapping[str, str] | None = None) -> dict[str, str]:
    """``{run_id: preset}``: the presets whose grid holds the run, joined by ``+``; ``custom``
    for a run in no preset's grid; ``unknown`` for every run if the study's grids can't be built.

    ``models`` (``{run_id: model}``, `run_models`) lets a run of a model the presets do not
    list be found in a preset's grid with that model added.
    """
    grids = _grid_ids(study_name)
    out = {}
    for run_id in run_ids:
        if grids is None:
            out[run_id] = UNKNOWN
            continue
        found = [p for p in PRESET_NAMES if run_id in grids[p]]
        model = (models or {}).get(run_id)
        if not found and model is not None:
            extra = _model_grid_ids(study_name, model)
            found = [p for p in PRESET_NAMES if run_id in extra[p]]
        out[run_id] = "+".join(found) if found else CUSTOM
    return out


def with_presets(frame: pd.DataFrame, study_name: str) -> pd.DataFrame:
    """``frame`` (from `Store.read` or `Store.runs`) with a ``preset`` column added."""
    if frame.empty:
        return frame.assign(preset=pd.Series(dtype=object))
    labels = run_presets(study_name, frame["run_id"].unique(), run_models(frame))
    return frame.assign(preset=frame["run_id"].map(labels))


def pick_preset(
    presets: Iterable[str], study_name: str | None = None, run_ids: Iterable[str] = ()
) -> str | None:
    """The preset a report shows among ``presets`` (labels; ``smoke+cpu`` counts for both).

    Given the study and the run ids present, the preset whose grid the store holds the largest
    share of, then the larger grid, then the smaller-scale preset: a complete cpu grid beside
    the few cpu-full runs that share its specs is shown as cpu; a complete cpu-full grid beside
    a complete cpu grid as cpu-full; a study whose cpu-full is its cpu (`PRESET_FALLBACK`) as
    cpu. Without them, or when the grids cannot be built, the largest-scale preset (gpu over
    cpu-full over cpu over smoke). ``custom`` (then ``unknown``) runs are chosen only when no
    preset's runs exist.
    """
    present = {part for label in presets for part in str(label).split("+")}
    candidates = [p for p in PRESET_NAMES if p in present]
    grids = _grid_ids(study_name) if study_name is not None and candidates else None
    if grids is not None:
        held = set(run_ids)

        def share(preset: str) -> tuple[float, int, int]:
            grid = grids[preset]
            return (len(grid & held) / max(len(grid), 1), len(grid),
                    -PRESET_NAMES.index(preset))

        return max(candidates, key=share)
    for preset in (*reversed(PRESET_NAMES), CUSTOM, UNKNOWN):
        if preset in present:
            return preset
    return None


def in_preset(labels: pd.Series, preset: str) -> pd.Series:
    """Boolean mask: the rows whose ``preset`` label includes ``preset``."""
    return labels.astype(str).str.split("+").map(lambda parts: preset in parts)


def largest_preset(frame: pd.DataFrame, study_name: str) -> tuple[pd.DataFrame, str | None]:
    """The rows of ``frame`` in the preset `pick_preset` shows, with a ``preset``
    column, and that preset (None for an empty frame). A report never mixes presets: smoke, cpu
    and gpu rows measure different configurations."""
    if frame.empty:
        return frame, None
    frame = with_presets(frame, study_name)
    preset = pick_preset(frame["preset"].unique(), study_name, frame["run_id"].unique())
    return frame[in_preset(frame["preset"], preset)], preset


def _distinct(values: Iterable[Any]) -> list[Any]:
    seen = []
    for v in values:
        if _isnull(v):
            continue
        v = v.item() if hasattr(v, "item") else v
        if v not in seen:
            seen.append(v)
    return sorted(seen, key=lambda x: (str(type(x)), x))


def _isnull(value: Any) -> bool:
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


def summarise(store: Store, study_name: str, run_ids: Sequence[str] = ()) -> dict[str, Any]:
    """A JSON-ready summary of the provenance of ``study_name``'s runs (or of ``run_ids``).

    Keys: ``study``, ``runs`` (count per status), ``presets``, ``seeds`` (of finished runs),
    ``hardware`` (distinct
    backend / device kind / device count / CPU count / machine), ``commits`` (distinct commit and
    dirty flag), ``versions`` (distinct library versions), ``settings`` (distinct process
    settings, `harness.provenance.SETTINGS`), ``python``, ``study_version``,
    ``run_seconds`` (total wall time of the runs as recorded); and ``xla_cpu_threads`` only
    where the runs were made at more than one XLA CPU thread count
    (`harness.provenance.thread_counts`), which changes their numbers at float round-off.
    """
    runs = store.runs(study_name)
    if not runs.empty and run_ids:
        runs = runs[runs["run_id"].isin(set(run_ids))].reset_index(drop=True)
    summary: dict[str, Any] = {"study": study_name}
    if runs.empty:
        summary["runs"] = {s: 0 for s in STATUSES}
        return summary
    summary["runs"] = {s: int((runs["status"] == s).sum()) for s in STATUSES}
    presets = run_presets(study_name, runs["run_id"], run_models(runs))
    summary["presets"] = _distinct(presets.values())
    # The seeds behind the numbers: those of finished runs (the others are counted above).
    done = runs[runs["status"] == "done"]
    summary["seeds"] = [int(s) for s in _distinct(done["seed"])] if "seed" in done else []

    def column(name: str) -> pd.Series:
        return runs[name] if name in runs.columns else pd.Series(None, index=runs.index)

    hardware = pd.DataFrame(
        {
            "backend": column("prov.backend"),
            "device_kind": column("prov.device_kind"),
            "device_count": column("prov.device_count"),
            "cpu_count": column("prov.cpu_count"),
            "machine": column("prov.machine"),
        }
    )
    summary["hardware"] = _distinct_records(hardware)
    commits = pd.DataFrame({"commit": column("prov.git_commit"), "dirty": column("prov.git_dirty")})
    summary["commits"] = _distinct_records(commits)
    versions = pd.DataFrame({lib: column(f"prov.versions.{lib}") for lib in LIBRARIES})
    summary["versions"] = _distinct_records(versions)
    settings = pd.DataFrame({name: column(f"prov.settings.{name}") for name in SETTINGS})
    summary["settings"] = _distinct_records(settings)
    summary["python"] = _distinct(column("prov.python"))
    summary["study_version"] = [int(v) for v in _distinct(column("prov.study_version"))]
    seconds = pd.to_numeric(column("prov.seconds"), errors="coerce")
    summary["run_seconds"] = round(float(seconds.sum()), 1) if seconds.notna().any() else None
    # Listed only where they differ: a store made at one count summarises as before the
    # count was recorded.
    threads = thread_counts(runs)
    if len(threads) > 1:
        summary["xla_cpu_threads"] = threads
    return summary


def _distinct_records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """The distinct rows of ``frame`` as dicts of plain values, in a stable order."""
    records = []
    for record in frame.to_dict(orient="records"):
        clean = {k: (None if _isnull(v) else (v.item() if hasattr(v, "item") else v))
                 for k, v in record.items()}
        if clean not in records:
            records.append(clean)
    return sorted(records, key=lambda r: json.dumps(r, sort_keys=True, default=str))


def _join(items: Sequence[str]) -> str:
    return "; ".join(items) if items else "not recorded"


def describe(summary: Mapping[str, Any]) -> str:
    """One paragraph (Markdown) stating the runs, preset, seeds, hardware, commit and versions."""
    counts = summary.get("runs", {})
    total = sum(counts.values())
    if total == 0:
        return "No runs of this study are in the store."
    status = ", ".join(f"{n} {s}" for s, n in counts.items() if n) or "none"
    presets = summary.get("presets", [])
    seeds = summary.get("seeds", [])
    seed_text = (
        f"{len(seeds)} seed{'s' if len(seeds) != 1 else ''} ({', '.join(map(str, seeds))}) "
        "among finished runs"
        if seeds
        else "no seed recorded among finished runs"
    )
    hardware = [
        f"{h.get('backend') or '?'} backend, device {h.get('device_kind') or '?'}"
        f" x{h.get('device_count') or '?'}, {h.get('cpu_count') or '?'} CPU cores"
        f" ({h.get('machine') or '?'})"
        for h in summary.get("hardware", [])
    ]
    commits = [
        f"`{(c.get('commit') or 'unknown')[:12]}`"
        + (" (uncommitted changes)" if c.get("dirty") else "")
        for c in summary.get("commits", [])
    ]
    versions = [
        ", ".join(f"{lib} {v}" for lib, v in record.items() if v is not None)
        for record in summary.get("versions", [])
    ]
    settings = [
        ", ".join(f"{name}={value or '(unset)'}" for name, value in record.items())
        for record in summary.get("settings", [])
        if any(value is not None for value in record.values())
    ]
    python = summary.get("python", [])
    seconds = summary.get("run_seconds")
    parts = [
        f"**Provenance.** {total} run{'s' if total != 1 else ''} ({status})",
        f"preset {', '.join(f'`{p}`' for p in presets) or 'unknown'}",
        seed_text,
        f"hardware: {_join(hardware)}",
        f"commit {_join(commits)}",
        f"libraries: {_join(versions)}" + (f", Python {', '.join(python)}" if python else ""),
        f"process settings: {_join(settings)}",
    ]
    if seconds is not None:
        parts.append(f"{seconds:.0f} s of run time in total")
    text = "; ".join(parts) + "."
    if len(summary.get("commits", [])) > 1 or len(summary.get("hardware", [])) > 1:
        text += " The runs were made on more than one commit or machine (listed above)."
    return text + _mixed_threads(summary) + _older_version(summary)


def _mixed_threads(summary: Mapping[str, Any]) -> str:
    """A sentence when the summary's runs were made at more than one XLA CPU thread count (on
    one machine, the local executor's runs and the processes executor's, whose workers have
    their share of the cores: docs/presets.md): their numbers differ at float round-off, so a
    comparison between them is one of settings too. Empty otherwise."""
    counts = [str(c) for c in summary.get("xla_cpu_threads", [])]
    if len(counts) < 2:
        return ""
    return (f" The runs were made at XLA CPU thread counts of {', '.join(counts[:-1])} and "
            f"{counts[-1]}, which changes their numbers at float round-off.")


def _older_version(summary: Mapping[str, Any]) -> str:
    """A sentence when some of the summary's runs were made by an older version of their study
    than the code's `Study.version` (a shipped reference made before a study changed): the
    code's grids name other runs, so the numbers are not what this code would measure. Empty
    otherwise, or when the study cannot be loaded here."""
    from .. import studies

    name = summary.get("study")
    recorded = summary.get("study_version") or []
    try:
        current = studies.get(name).version
    except Exception:  # not registered, or it cannot be imported: its section says so
        return ""
    older = [v for v in recorded if v < current]
    if not older:
        return ""
    which = "These runs were" if len(older) == len(recorded) else "Some of these runs were"
    return (f" {which} made by version {', '.join(map(str, older))} of the {name} study, older "
            f"than this code's version {current}: its grids name other runs, and it would "
            "make these anew.")
