"""The documentation: every Python block of the README and of docs/ runs, every link between
them resolves, and CITATION.cff is valid CFF 1.2.0 carrying the project's version.

A Python block right after ``<!-- docs-test: skip (reason) -->`` is compiled but not run: it
needs something the reader supplies (data on disk, a class of their own) or a long run, and the
reason says which (tests/test_outside_layer.py, for one, runs a complete Flax linen layer).
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
import yaml  # PyYAML: a dependency of flax, so always installed

from helpers import isolated_registry

ROOT = Path(__file__).resolve().parent.parent
PAGES = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]

_FENCE = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
_SKIP = re.compile(r"<!-- docs-test: skip \((.+)\)\s*-->", re.S)
_ANY_FENCE = re.compile(r"^```.*?^```", re.S | re.M)
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def python_blocks(page: Path) -> list[tuple[int, str, str | None]]:
    """``(line, code, skip reason or None)`` for each fenced Python block of ``page``."""
    text = page.read_text()
    blocks = []
    for match in _FENCE.finditer(text):
        before = text[: match.start()].rstrip()
        reason = None
        if before.endswith("-->"):
            comment = _SKIP.fullmatch(before[before.rfind("<!--"):])
            reason = " ".join(comment.group(1).split()) if comment else None
        blocks.append((text.count("\n", 0, match.start(1)) + 1, match.group(1), reason))
    return blocks


BLOCKS = [(page, *block) for page in PAGES for block in python_blocks(page)]


def _name(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


def test_the_flax_page_keeps_its_runnable_examples():
    # Guards the extraction: a changed fence or heading would otherwise test nothing.
    runnable = [b for b in python_blocks(ROOT / "docs" / "flax.md") if b[2] is None]
    assert len(runnable) >= 3


@pytest.mark.parametrize(("page", "line", "code", "reason"), BLOCKS,
                         ids=[f"{_name(p)}:{line}" for p, line, _, _ in BLOCKS])
def test_python_block_runs(page, line, code, reason):
    # Blank lines in front, so that a traceback names the page's own line numbers.
    program = compile("\n" * (line - 1) + code, _name(page), "exec")
    if reason is not None:
        pytest.skip(f"compiled, not run: {reason}")
    namespace: dict = {"__name__": "__docs__"}
    with isolated_registry():  # a block may register a layer; the registry forgets it after
        exec(program, namespace)  # noqa: S102
    if "y" in namespace and "H" in namespace:  # the examples' output: (..., H) channels
        assert namespace["y"].shape[-1] == namespace["H"]


def test_links_resolve_to_files():
    broken = []
    for page in PAGES:
        text = _ANY_FENCE.sub("", page.read_text())
        for target in _LINK.findall(text):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue  # a web address or an anchor on the same page
            path = (page.parent / target.split("#")[0]).resolve()
            if not path.exists():
                broken.append(f"{_name(page)}: {target}")
    assert not broken, broken


def test_every_docs_page_is_linked_from_the_readme():
    readme = (ROOT / "README.md").read_text()
    linked = {(ROOT / t.split("#")[0]).resolve() for t in _LINK.findall(readme)}
    assert {p.resolve() for p in PAGES[1:]} <= linked, sorted(
        _name(p) for p in PAGES[1:] if p.resolve() not in linked)


# A command of the docs, the examples or the Makefile: the program and its subcommand, then
# the arguments (up to a shell comment or a line break).
_COMMAND = re.compile(r"(?:linrnn-bench|-m linrnn_bench|^\s*harness)\s+(?:list|train|study|report|"
                      r"figure|check-layer|compare|plan|rehearse)\b(.*)$", re.M)
_COMMAND_FILES = (*PAGES, ROOT / "benchmarks" / "README.md", ROOT / "Makefile",
                  *sorted((ROOT / "examples").glob("*.py")))


def test_commands_use_the_one_spelling_of_each_setting():
    """Every command the docs, the examples and the Makefile show names its preset with
    ``--preset P`` and a layer's option as ``layer.<option>=value``: the spellings the command
    line accepts (it refuses the others, `harness.cli.check_spelling`)."""
    from linrnn_bench.harness.cli import UsageError, check_spelling

    commands, refused = 0, []
    for path in _COMMAND_FILES:
        for match in _COMMAND.finditer(path.read_text()):
            # The arguments: up to a shell comment, or the end of an inline code span.
            arguments = match.group(1).split("#")[0].split("`")[0].replace('"', " ").split()
            commands += 1
            try:
                check_spelling(arguments)
            except UsageError as e:
                refused.append(f"{path.relative_to(ROOT)}: {match.group(0).strip()}: {e}")
    assert commands >= 20  # guards the extraction: a changed pattern would otherwise check nothing
    assert not refused, refused


# The keys of CFF 1.2.0 (https://github.com/citation-file-format/citation-file-format, schema).
_CFF_KEYS = {
    "abstract", "authors", "cff-version", "commit", "contact", "date-released", "doi",
    "identifiers", "keywords", "license", "license-url", "message", "preferred-citation",
    "references", "repository", "repository-artifact", "repository-code", "title", "type",
    "url", "version",
}
_REFERENCE_TYPES = {"article", "book", "conference-paper", "data", "generic", "report",
                    "software", "thesis", "unpublished"}


def _check_authors(where: str, authors) -> None:
    assert isinstance(authors, list) and authors, f"{where}: authors must be a non-empty list"
    for author in authors:
        # A person has family-names; an entity (a team, a project) has a name.
        assert isinstance(author, dict) and ("family-names" in author or "name" in author), (
            where, author)


def test_citation_cff_is_valid_and_matches_pyproject():
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert cff["cff-version"] == "1.2.0"
    assert set(cff) <= _CFF_KEYS, set(cff) - _CFF_KEYS
    assert cff["message"].strip() and cff["title"].strip()
    assert cff.get("type", "software") in ("software", "dataset")
    _check_authors("authors", cff["authors"])
    assert {"name": "linrnn-bench contributors"} in cff["authors"]
    assert cff["version"] == PROJECT["version"]  # a string, as pyproject's
    assert cff.get("license") == PROJECT.get("license")
    for reference in cff.get("references", []):
        assert reference["type"] in _REFERENCE_TYPES, reference["type"]
        assert reference["title"].strip()
        _check_authors(reference["title"], reference["authors"])
    # docs/citing.md's BibTeX entry for the harness names the same version.
    citing = (ROOT / "docs" / "citing.md").read_text()
    assert re.findall(r"^\s*version\s*=\s*\{(.+?)\}", citing, re.M) == [PROJECT["version"]]
