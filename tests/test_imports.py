"""The import graph of linrnn_bench's harness/, models/ and tasks/: no cycles, and imports flow
one way; and nothing imports a generic top-level ``models``, ``tasks`` or ``harness``.

Every ``import`` statement counts, including those inside functions (an import moved into a
function to hide a cycle is still a cycle). Read from the source with `ast`: nothing is imported.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Modules are named below relative to the one import name (``harness.runner`` is
# ``linrnn_bench.harness.runner``).
NAMESPACE = "linrnn_bench"
PACKAGE_ROOT = ROOT / NAMESPACE
PACKAGES = ("harness", "models", "tasks")
# The standard-library leaves every package may import: `paths`, and the checks the layers' and
# the tasks' configs share (`validation`).
LEAVES = ("paths", "validation")
# Which of our packages each package may import (besides itself): harness -> models, tasks; and
# every one the leaves.
ALLOWED = {"harness": {"models", "tasks", *LEAVES}, "models": {*LEAVES}, "tasks": {*LEAVES},
           **{leaf: set() for leaf in LEAVES}}


def _modules() -> dict[str, Path]:
    out = {leaf: PACKAGE_ROOT / f"{leaf}.py" for leaf in LEAVES}
    for package in PACKAGES:
        for path in (PACKAGE_ROOT / package).rglob("*.py"):
            parts = path.relative_to(PACKAGE_ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The modules of ours that ``name`` imports: a submodule when one is named, else its
    package."""
    is_package = path.name == "__init__.py"
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            targets = [f"{module}.{alias.name}" for alias in node.names] + [module]
        else:
            continue
        for target in targets:
            target = target.removeprefix(NAMESPACE + ".")
            # The longest known module that the target names.
            parts = target.split(".")
            for end in range(len(parts), 0, -1):
                candidate = ".".join(parts[:end])
                if candidate in known:
                    found.add(candidate)
                    break
    found.discard(name)
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    # A name imported from a module (``from .x import f``) also yields the module ``x`` itself
    # through the bare-module target; `from package import submodule` yields the submodule.
    return {name: _imports(name, path, known) for name, path in modules.items()}


def _ancestor(a: str, b: str) -> bool:
    # A package's __init__ importing its own submodules, and a submodule importing its package
    # (``from .. import roofline``), are how packages are built, not cycles between modules.
    return b.startswith(a + ".") or a.startswith(b + ".")


def _reaches(graph: dict[str, set[str]], start: str, goal: str) -> bool:
    seen, stack = set(), [start]
    while stack:
        node = stack.pop()
        if node == goal:
            return True
        if node not in seen:
            seen.add(node)
            stack.extend(graph[node])
    return False


def test_the_graph_is_read():
    graph = _graph()
    assert "harness.programs" in graph["harness.studies.throughput"]
    assert "models._registry" in graph["models.lru"]
    assert "models" in graph["harness.variants"]


def test_no_module_imports_one_that_imports_it_back():
    graph = {
        a: {b for b in targets if not _ancestor(a, b)} for a, targets in _graph().items()
    }
    cycles = sorted(
        (a, b) for a, targets in graph.items() for b in targets if _reaches(graph, b, a)
    )
    assert not cycles, f"imports that come back (a imports b, which leads back to a): {cycles}"


def test_imports_flow_one_way():
    graph = _graph()
    wrong = sorted(
        (a, b) for a, targets in graph.items() for b in targets
        if b.split(".")[0] != a.split(".")[0]
        and b.split(".")[0] not in ALLOWED[a.split(".")[0]]
    )
    assert not wrong, f"imports against harness -> models, tasks: {wrong}"


# What reads a clock or starts a process (DESIGN.md: one measuring module): the standard
# library's modules and names for it, allowed in `harness.measure` alone.
_MEASURING_PACKAGE = "harness.measure"
_CLOCK_OR_PROCESS = {"time", "subprocess", "multiprocessing", "concurrent.futures.process",
                     "concurrent.futures.ProcessPoolExecutor"}


def _clock_or_process_imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        else:
            continue
        found.update(n for n in names if n in _CLOCK_OR_PROCESS
                     or n.split(".")[0] in {"subprocess", "multiprocessing"})
    return found


def test_only_the_measuring_package_reads_clocks_or_starts_processes():
    outside = {
        name: sorted(found) for name, path in _modules().items()
        if name.startswith("harness") and not (
            name == _MEASURING_PACKAGE or name.startswith(_MEASURING_PACKAGE + "."))
        and (found := _clock_or_process_imports(path))
    }
    assert not outside, f"clocks or processes outside {_MEASURING_PACKAGE}: {outside}"
    inside = _clock_or_process_imports(PACKAGE_ROOT / "harness" / "measure" / "processes.py")
    assert "subprocess" in inside  # the check reads what it is meant to read


def test_nothing_imports_a_generic_top_level_package():
    """``import models`` (or tasks, harness) would find a researcher's own package first, or
    ours under a second name in a clone: the project, its tests, benchmarks and examples import
    ``linrnn_bench.*`` only."""
    generic = set(PACKAGES)
    wrong = []
    for folder in (PACKAGE_ROOT, ROOT / "tests", ROOT / "benchmarks", ROOT / "examples"):
        for path in folder.rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                    names = [node.module]
                else:
                    continue
                wrong += [f"{path.relative_to(ROOT)}:{node.lineno} {n}" for n in names
                          if n.split(".")[0] in generic]
    assert not wrong, f"imports of a generic top-level package: {wrong}"


# A study is one folder, `harness/studies/<name>/`: what it keeps private stays inside it.
STUDIES = "harness.studies"


def _study_folders() -> list[str]:
    root = PACKAGE_ROOT / "harness" / "studies"
    return sorted(f"{STUDIES}.{p.parent.name}" for p in root.glob("*/__init__.py"))


def _imports_bound(name: str, path: Path) -> list[tuple[int, str, str]]:
    """``(line, dotted name, local name)`` of everything ``name`` imports, each imported name
    joined to its module (``from .x import _y`` gives ``<package>.x._y``), relative to the
    namespace; the local name is the one the import binds."""
    is_package = path.name == "__init__.py"
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name, a.asname or a.name.split(".")[0])
                      for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                base = name.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                module = ".".join([*base, *([node.module] if node.module else [])])
            found += [(node.lineno, f"{module}.{a.name}", a.asname or a.name)
                      for a in node.names]
    return [(line, n.removeprefix(NAMESPACE + "."), local) for line, n, local in found]


def _private_study_imports(modules: dict[str, Path]) -> list[str]:
    """``module:line name`` of each private name (a part after the study's folder beginning
    with ``_``) that a module in ``modules`` takes from a study folder it is not in: imported
    (``from ..studies.theory import _x``) or read off an imported module (``theory._x``)."""
    folders = _study_folders()

    def private(name: str, target: str) -> bool:
        return any(target.startswith(f + ".") and not (name == f or name.startswith(f + "."))
                   and any(p.startswith("_") for p in target[len(f) + 1:].split("."))
                   for f in folders)

    wrong = []
    for name, path in modules.items():
        imports = _imports_bound(name, path)
        bound = {local: target for _, target, local in imports}
        wrong += [f"{name}:{line} {target}" for line, target, _ in imports
                  if private(name, target)]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id in bound):
                target = f"{bound[node.value.id]}.{node.attr}"
                if private(name, target):
                    wrong.append(f"{name}:{node.lineno} {target}")
    return wrong


def test_the_study_folders_are_read():
    assert {f"{STUDIES}.accuracy", f"{STUDIES}.theory"} <= set(_study_folders())


def test_no_module_outside_a_study_imports_its_private_names():
    wrong = _private_study_imports(_modules())
    assert not wrong, f"private names of a study imported from outside its folder: {wrong}"


def test_a_private_study_import_is_found(tmp_path):
    path = tmp_path / "planner.py"
    path.write_text("from ..studies.theory import _STATE_BUDGET, white_noise_batch\n"
                    "from ..studies.stability.report import _data\n"
                    "from ..studies import theory\n"
                    "moments = theory._energy_moments, theory.energy_moments\n")
    inside = tmp_path / "inside.py"
    inside.write_text("from .report import _data\nfrom .. import stability\nstability._run\n")
    assert _private_study_imports({"harness.plan.planner": path,
                                   "harness.studies.stability.plan": inside}) == [
        "harness.plan.planner:1 harness.studies.theory._STATE_BUDGET",
        "harness.plan.planner:2 harness.studies.stability.report._data",
        "harness.plan.planner:4 harness.studies.theory._energy_moments"]


def _private_imports(name: str, path: Path, known: set[str]) -> list[str]:
    """The private names (a part starting with one underscore) that module ``name`` imports
    from a package other than its own or one above it: ``owner.module._name``."""
    package = name.split(".")[:-1] if path.name != "__init__.py" else name.split(".")
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level:
            base = package[: len(package) - node.level + 1]
            target = [*base, *(node.module.split(".") if node.module else [])]
        else:
            target = (node.module or "").removeprefix(NAMESPACE + ".").split(".")
        for alias in node.names:
            parts = [*target, alias.name]
            private = [k for k, p in enumerate(parts) if p.startswith("_") and not p.startswith("__")]
            if not private or parts[0] not in (*PACKAGES, *LEAVES):
                continue
            k = private[0]
            # The package that owns the name: the one holding the module named before it.
            owner = parts[:k] if ".".join(parts[:k]) in known and (
                PACKAGE_ROOT.joinpath(*parts[:k]) / "__init__.py").exists() else parts[: k - 1]
            if package[: len(owner)] != owner:
                found.append(".".join(parts[: k + 1]))
    return found


def test_no_package_imports_another_packages_private_names():
    """Each package offers what others may use under names without a leading underscore
    (re-exported where the module is private); nothing reaches past them."""
    modules = _modules()
    known = set(modules)
    wrong = sorted((name, imported) for name, path in modules.items()
                   for imported in _private_imports(name, path, known))
    assert not wrong, f"private names imported from another package: {wrong}"


def test_a_private_import_from_another_package_is_found(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text("from linrnn_bench.models import _validate\n"
                       "from ..report._writers import write\n"
                       "from .loop import _own\n")
    found = _private_imports("harness.train.planted", planted, set(_modules()))
    assert found == ["models._validate", "harness.report._writers"]
