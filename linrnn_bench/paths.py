"""Where the project keeps what it makes for itself: generated task data, compiled programs and
the native kernel (`cache_dir`), and the git checkout it runs from, if any (`checkout`).

A clone keeps its caches in ``<clone>/.cache`` (ignored by git), as before; an installed wheel,
which must never write into site-packages, keeps them in the user's cache folder
(``$XDG_CACHE_HOME/linrnn-bench``, else ``~/.cache/linrnn-bench``). Each cache's own variable
(``LINRNN_CACHE``, ``LINRNN_NATIVE_CACHE``, ``LINRNN_JAX_CACHE``) still overrides its place.
Standard library only: models, tasks and harness all import it.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


@functools.cache
def checkout() -> Path | None:
    """The root of the git checkout this package runs from (a clone, or an editable install of
    one), or None for an installed wheel. A wheel inside someone else's repository (a virtual
    environment in their clone) is not a checkout of this project: the root must hold both
    ``.git`` and this project's ``pyproject.toml`` beside the package."""
    root = _PACKAGE.parent
    project = root / "pyproject.toml"
    if (root / ".git").exists() and project.is_file() and \
            'name = "linrnn-bench"' in project.read_text(encoding="utf-8"):
        return root
    return None


def cache_dir(kind: str) -> Path:
    """The default folder of one cache (``"tasks"``, ``"native"``, ``"jax"``)."""
    root = checkout()
    if root is not None:
        return root / ".cache" / kind
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "linrnn-bench" / kind
