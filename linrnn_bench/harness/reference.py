"""A reference result shipped with the repository, and a layer compared against it.

A reference is one preset's whole run, kept as the report rendered from it with its results
store compressed beside it::

    reports/<preset>/                  the report (`harness.report.render`): index.md, tables/,
                                       figures/, provenance.json
    reports/<preset>/store.sqlite.xz   the results store, xz-compressed (`compress`)

``linrnn-bench compare MODEL`` places a layer beside the reference's models without training
them again. The reference's store is decompressed outside its folder (`unpacked`); `check`
makes sure that this code makes exactly the runs it holds (for each study, the grid at the
reference's preset for the reference's models, grown from the stored results as the runner
grows it: same specs and study versions, so the same run ids); only then is the store copied
into the user's (`install`) and the layer trained at the same preset with itself as each
study's only model (`model_configs`: the preset's tasks, seeds and recipes, so its runs pair
by seed with the reference's). A reference that this code does not reproduce is refused with
what changed (`Mismatch`), never paired.

``python -m linrnn_bench.harness.reference pack STORE FOLDER`` and ``unpack FOLDER STORE``
are what ``make reference`` and ``make reference-report`` call.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import lzma
import os
import shutil
import sqlite3
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from . import config as _config
from .errors import ReferenceResultError, StoreError
from .report.origins import MODEL_FIELDS, run_models, with_model
from .store import Store
from .studies import PRESET_NAMES, Study

STORE_FILE = "store.sqlite.xz"
DEFAULT_FOLDER = Path("reports") / "cpu-full"
# Fixed, so that the same store compresses to the same bytes (xz writes no timestamp).
XZ_PRESET = 9
# What a reference folder holds, for the errors that say what is missing.
_NEEDS = (f"a rendered report (index.md, provenance.json) and its results store as {STORE_FILE}, "
          f"as {DEFAULT_FOLDER} of the repository holds")
# How many differing fields a mismatch names (the rest are counted).
_SHOWN_FIELDS = 6


# --------------------------------------------------------------------------------------------
# The compressed store


def compress(store_path: Path, xz_path: Path) -> None:
    """Write the store at ``store_path`` xz-compressed to ``xz_path`` (replaced atomically):
    its write-ahead log folded in first, so the one file holds every run, and the same store
    gives the same bytes."""
    # mode=rw: a missing store is an error here, not an empty one made and compressed.
    with contextlib.closing(sqlite3.connect(
            f"{Path(store_path).resolve().as_uri()}?mode=rw", uri=True)) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    data = lzma.compress(Path(store_path).read_bytes(), format=lzma.FORMAT_XZ,
                         check=lzma.CHECK_CRC64, preset=XZ_PRESET)
    _write_atomically(Path(xz_path), lambda out: out.write(data))


def decompress(xz_path: Path, store_path: Path) -> None:
    """Write the store compressed in ``xz_path`` to ``store_path`` (replaced atomically); a
    file that is not xz, or is cut short, is a `ReferenceResultError` naming it."""
    def copy(out: Any) -> None:
        with lzma.open(xz_path, "rb") as source:
            shutil.copyfileobj(source, out)

    try:
        _write_atomically(Path(store_path), copy)
    except (lzma.LZMAError, EOFError) as e:
        raise ReferenceResultError(
            f"The reference store {xz_path} cannot be decompressed ({e}); a reference holds "
            f"{_NEEDS}.") from None


def _write_atomically(path: Path, write: Any) -> None:
    """Call ``write`` on a temporary file beside ``path`` (made with the user's umask, as the
    file it replaces would be), then move it into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(temporary, "xb") as out:
            write(out)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


# --------------------------------------------------------------------------------------------
# The reference folder


@dataclasses.dataclass(frozen=True)
class Reference:
    """A reference folder that holds what `open_reference` checks, and its preset."""

    folder: Path
    preset: str

    @property
    def store_file(self) -> Path:
        return self.folder / STORE_FILE


def open_reference(folder: Path) -> Reference:
    """The reference in ``folder``; a `ReferenceResultError` of one line naming what is missing."""
    folder = Path(folder)
    if not folder.is_dir():
        what = "is not a folder" if folder.exists() else "does not exist"
        raise ReferenceResultError(
            f"The reference {folder} {what}; pass --reference DIR, a folder holding {_NEEDS}.")
    for name in (STORE_FILE, "provenance.json"):
        if not (folder / name).is_file():
            raise ReferenceResultError(
                f"The reference {folder} holds no {name}; a reference holds {_NEEDS} (make "
                "reference writes one).")
    return Reference(folder, reference_preset(folder))


def reference_preset(folder: Path) -> str:
    """The preset a reference's report shows: the one its every table and figure of a study
    names in provenance.json (a machine study's cpu-full runs are its cpu runs, so their label
    names both); the folder's name where that leaves several, else the largest."""
    path = Path(folder) / "provenance.json"
    try:
        artifacts = json.loads(path.read_text(encoding="utf-8"))["artifacts"].values()
        labels = [set(a["provenance"]["presets"]) for a in artifacts
                  if (a.get("provenance") or {}).get("presets")]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise ReferenceResultError(f"The reference's {path} cannot be read ({type(e).__name__}: "
                                   f"{e}); a reference holds {_NEEDS}.") from None
    common = set(PRESET_NAMES)
    for label in labels:
        common &= {part for preset in label for part in preset.split("+")}
    if not labels or not common:
        raise ReferenceResultError(
            f"The reference's {path} names no one preset for all its runs (a reference is one "
            "preset's report); render it again from its store with make reference-report.")
    if Path(folder).resolve().name in common:
        return Path(folder).resolve().name
    return max(common, key=PRESET_NAMES.index)


@contextlib.contextmanager
def unpacked(reference: Reference) -> Iterator[Store]:
    """The reference's store, decompressed into a temporary folder and opened read-only (its
    folder is never written); removed at the end."""
    with tempfile.TemporaryDirectory(prefix="linrnn-reference-") as tmp:
        path = Path(tmp) / "store.sqlite"
        decompress(reference.store_file, path)
        store = Store(path, create=False, readonly=True)
        store.check()
        yield store


def install(reference: Store, store_path: Path) -> bool:
    """Copy the reference's store to ``store_path`` unless a store is there already (a compare
    resumed: its runs are kept), which must then hold every run of the reference. Returns
    whether it copied."""
    store_path = Path(store_path)
    if not store_path.exists():
        _write_atomically(store_path, lambda out: out.write(reference.path.read_bytes()))
        return True
    lacking = set(reference.recorded()) - set(Store(store_path, create=False).recorded())
    if lacking:
        raise ReferenceResultError(
            f"The store {store_path} lacks {len(lacking)} of the reference's runs (it was made "
            "from another reference, or by hand); pass another --store, or move it aside.")
    return False


# --------------------------------------------------------------------------------------------
# Does this code make the reference's runs?


@dataclasses.dataclass(frozen=True)
class Mismatch:
    """How a study's reference runs differ from the runs this code makes at the preset.

    Attributes:
        study: the study's name.
        expected: how many runs this code makes for the reference's models.
        missing: how many of them the reference's store lacks (their ids differ).
        altered: how many stored runs carry an id whose spec is not the one recorded with it.
        versions: the study versions the stored runs were made by.
        version: this code's `Study.version`.
        fields: ``(field, stored, now)``: where the nearest stored run's spec and the one this
            code makes differ (dotted names; empty where only the version differs).
    """

    study: str
    expected: int
    missing: int
    altered: int
    versions: tuple[int, ...]
    version: int
    fields: tuple[tuple[str, Any, Any], ...]

    def text(self, preset: str) -> str:
        """One line naming the study and what changed."""
        parts = [f"study {self.study}: of the {self.expected} runs this code makes for the "
                 f"reference's models at preset {preset}, {self.missing} are not in its store"]
        if self.altered:
            parts.append(f"{self.altered} stored runs were recorded with a spec other than "
                         "their id's (the store was edited or damaged)")
        older = [v for v in self.versions if v != self.version]
        if older:
            parts.append(f"its runs were made by study version {', '.join(map(str, older))}, "
                         f"and this code's Study.version is {self.version}")
        if self.fields:
            shown = ", ".join(f"{name} (stored {_show(old)}, now {_show(new)})"
                              for name, old, new in self.fields[:_SHOWN_FIELDS])
            more = len(self.fields) - _SHOWN_FIELDS
            parts.append("a stored run and the one this code makes differ in " + shown
                         + (f" and {more} more field(s)" if more > 0 else ""))
        elif older:
            parts.append("their specs are unchanged")
        return "; ".join(parts) + "."


_ABSENT = "(absent)"


def _show(value: Any) -> str:
    """A field's value as a message shows it (lists are already JSON text, `config.flatten`)."""
    return value if isinstance(value, str) else json.dumps(value)


def check(store: Store, preset: str) -> list[Mismatch]:
    """Each study of ``store`` whose runs this code would not make again at ``preset`` (an
    empty list: every run it makes for the store's models is there, with its recorded spec)."""
    from . import studies

    out = []
    for name in studies.names():
        if not store.recorded(name):
            continue
        study = studies.get(name)
        mismatch = _study_mismatch(study, store, expected(study, preset, store))
        if mismatch is not None:
            out.append(mismatch)
    return out


def expected(study: Study, preset: str, store: Store) -> list[Any]:
    """The runs this code makes at ``preset`` for the models ``store`` holds runs of: the
    study's grid with its model list narrowed to them (a grid sized over its models, as the
    accuracy study's parameter budget, is sized over the same ones), bound to ``store`` (a grid
    grown from stored results is grown as the runner grows it, `Study.bind`), and of its runs
    those of these models."""
    held = set(run_models(store.runs(study.name)).values())
    config = study.config(preset)
    field = next((f for f, _ in MODEL_FIELDS if hasattr(config, f)), None)
    if field is None:  # a study of no models: its whole grid
        return study.grid(study.bind(config, store))
    if getattr(config, field):  # () lists every model that can enter: filtered below
        narrowed = tuple(m for m in getattr(config, field) if m in held)
        if not narrowed:
            return []
        config = dataclasses.replace(config, **{field: narrowed})
    return [s for s in study.grid(study.bind(config, store)) if model_of(s) in held]


def model_of(spec: Any) -> str | None:
    """The model a run's spec (or its recorded config) names, as the store's column does
    (`report.origins.run_models`)."""
    flat = _config.flatten(spec)
    return next((flat[c[len("cfg."):]] for _, c in MODEL_FIELDS if c[len("cfg."):] in flat),
                None)


def _study_mismatch(study: Study, store: Store, specs: list[Any]) -> Mismatch | None:
    """What keeps ``store`` from holding ``specs`` as this code makes them; None when it does."""
    configs = store.configs(study.name)
    made = {study.run_id(s): s for s in specs}
    missing = [s for i, s in made.items() if i not in configs]
    altered = [s for i, s in made.items() if i in configs and configs[i] != _config.to_dict(s)]
    if not missing and not altered:
        return None
    runs = store.runs(study.name)
    column = runs["prov.study_version"] if "prov.study_version" in runs else []
    versions = tuple(sorted({int(v) for v in column if v == v and v is not None}))
    # A missing run beside the nearest stored one; an altered run beside its own record.
    fields = (differences(missing[0], configs) if missing else
              differences(altered[0], {"": configs[study.run_id(altered[0])]}))
    return Mismatch(study.name, len(made), len(missing), len(altered), versions, study.version,
                    fields)


def differences(spec: Any, configs: dict[str, dict[str, Any]]
                ) -> tuple[tuple[str, Any, Any], ...]:
    """``(field, stored, now)`` for each field where ``spec`` differs from the nearest of the
    stored ``configs`` (fewest differing fields, among those of its model and seed where there
    are any): what changed in the code since the store's runs were made."""
    now = _config.flatten(spec)
    same = [c for c in configs.values()
            if _config.flatten(c).get("seed") == now.get("seed") and model_of(c) == model_of(spec)]
    best: tuple[tuple[str, Any, Any], ...] | None = None
    for stored in same or configs.values():
        flat = _config.flatten(stored)
        diff = tuple((k, flat.get(k, _ABSENT), now.get(k, _ABSENT))
                     for k in sorted({*flat, *now}) if flat.get(k, _ABSENT) != now.get(k, _ABSENT))
        if best is None or len(diff) < len(best):
            best = diff
    return best or ()


# --------------------------------------------------------------------------------------------
# The compared layer's runs


def reference_studies(store: Store) -> list[str]:
    """The studies ``store`` holds runs of, in the report's order."""
    from . import studies

    return [name for name in studies.names() if store.recorded(name)]


def model_configs(model: str, preset: str, names: Sequence[str]
                  ) -> list[tuple[str, Any | None, str | None]]:
    """``(study, config, reason)`` per study of ``names``: the study's config at ``preset`` with
    ``model`` as its only model (the grid `report.origins` places its runs in, so the
    report shows them at that preset), or None and why the model cannot enter it."""
    from linrnn_bench import models

    from . import studies

    info = models.info(model)
    out = []
    for name in names:
        study = studies.get(name)
        reason = study.skip_reason(info)
        out.append((name, None, reason) if reason else
                   (name, with_model(study.config(preset), model), None))
    return out


# --------------------------------------------------------------------------------------------
# pack / unpack, for the Makefile


def main(argv: Sequence[str] | None = None) -> int:
    """``pack STORE FOLDER``: compress STORE to FOLDER/store.sqlite.xz; ``unpack FOLDER
    STORE``: decompress FOLDER's store to STORE, unless STORE exists and holds every run of it
    (a regeneration resumed). Exit status 0, or 2 with one line."""
    args = list(sys.argv[1:] if argv is None else argv)
    usage = ("usage: python -m linrnn_bench.harness.reference pack STORE FOLDER | "
             "unpack FOLDER STORE")
    if len(args) != 3 or args[0] not in ("pack", "unpack"):
        print(f"error: {usage}", file=sys.stderr)
        return 2
    try:
        if args[0] == "pack":
            if not Path(args[1]).is_file():
                raise ReferenceResultError(f"No store at {args[1]} to pack (make reference "
                                           "runs the preset into it first).")
            Store(args[1], create=False).check()
            compress(Path(args[1]), Path(args[2]) / STORE_FILE)
        else:
            with unpacked(open_reference(Path(args[1]))) as store:
                install(store, Path(args[2]))
    except (ReferenceResultError, StoreError, OSError) as e:  # one line: the Makefile's steps
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
