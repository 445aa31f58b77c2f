"""Test configuration: strict JAX and a `getkey` fixture (tolerances per dtype: tests/helpers.py).

Rank promotion raises (a silent broadcast is a bug); warnings are errors (pyproject.toml); the
jaxtyping annotations of `models` are checked at run time under pytest (pyproject.toml's
``--jaxtyping-packages``).
"""

from __future__ import annotations

import itertools
import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")
# The process settings every program of the project applies (one OpenBLAS thread, malloc keeping
# freed blocks), before jax loads: the same under `make test` and a bare pytest.
from linrnn_bench.harness import process_settings  # noqa: E402

process_settings.apply()

import jax  # noqa: E402
import jax.random as jr  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_numpy_rank_promotion", "raise")


@pytest.fixture
def getkey():
    """Fresh PRNG keys from a fixed seed: ``getkey()`` returns a new key each call."""
    counter = itertools.count()
    base = jr.PRNGKey(0)
    return lambda: jr.fold_in(base, next(counter))


def pytest_collection_modifyitems(config, items):
    """Tests parametrised with ``algorithm="native"`` or ``"fused"`` skip, saying why, where the
    native kernels cannot be built (no C++ compiler, or ``LINRNN_NATIVE=0``); CI builds and runs
    them."""
    from linrnn_bench.models import _native

    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if params.get("algorithm") in ("native", "fused") and not _native.available():
            item.add_marker(pytest.mark.skip(reason=f"native kernel: {_native.status().reason}"))
