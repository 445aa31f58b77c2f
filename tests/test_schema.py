"""Each study declares its rows (`harness.studies._schema.Schema`), and the check finds what is off.

That a smoke run's stored rows match their study's declaration is checked where each study's
smoke run is (tests/test_stability.py, test_theory.py, test_perf_studies.py and, for the
accuracy study, test_outside_layer.py), with `helpers.assert_rows_declared`.
"""

from __future__ import annotations

import importlib
import math

import pytest

from linrnn_bench.harness import studies
from linrnn_bench.harness.studies._schema import Column, Schema

SCHEMA = Schema(
    columns={
        "kind": Column(str, "the row kind"),
        "step": Column(int, "a step"),
        "loss": Column(float, "a loss"),
        "accuracy": Column(float, "None on regression", nullable=True),
        "flag": Column(bool, "a flag"),
        "extra": Column(float, "on some rows"),
    },
    kinds={"eval": ("kind", "step", "loss", "accuracy"), "done": ("kind", "flag")},
    optional={"eval": ("extra",)},
)


@pytest.mark.parametrize("name", studies.names())
def test_every_study_declares_its_rows(name):
    module = importlib.import_module(studies.get(name).run.__module__)
    schema = module.COLUMNS
    assert isinstance(schema, Schema) and schema.kinds
    assert all(c.meaning for c in schema.columns.values())
    first = next(iter(schema.columns))
    assert getattr(schema.names, first) == first
    with pytest.raises(AttributeError, match="'no_such_column' is not a declared column"):
        schema.names.no_such_column  # noqa: B018 (the attribute access is the check)


def test_a_declared_row_passes():
    assert SCHEMA.problems({"kind": "eval", "step": 3, "loss": 0.5, "accuracy": None}) == []
    # An int where a float is declared, NaN, and an optional column.
    assert SCHEMA.problems({"kind": "eval", "step": 3, "loss": 1, "accuracy": math.nan,
                            "extra": 2.0}) == []
    assert SCHEMA.problems({"kind": "done", "flag": False}) == []
    assert SCHEMA.of("eval") == ("kind", "step", "loss", "accuracy", "extra")


@pytest.mark.parametrize(
    "row, problem",
    [
        ({"kind": "test"}, "kind='test' is not a declared row kind (['eval', 'done'])"),
        ({"step": 1}, "kind=None is not a declared row kind"),
        ({"kind": "eval", "step": 3, "accuracy": 0.5}, "kind='eval' row lacks ['loss']"),
        ({"kind": "done", "flag": True, "step": 1}, "kind='done' row has undeclared ['step']"),
        ({"kind": "eval", "step": 3.0, "loss": 0.5, "accuracy": 0.5},
         "step=3.0 is not of type int"),
        ({"kind": "eval", "step": True, "loss": 0.5, "accuracy": 0.5},
         "step=True is not of type int"),
        ({"kind": "eval", "step": 3, "loss": None, "accuracy": 0.5},
         "loss=None is not of type float"),
        ({"kind": "eval", "step": 3, "loss": "0.5", "accuracy": 0.5},
         "loss='0.5' is not of type float"),
        ({"kind": "done", "flag": 1}, "flag=1 is not of type bool"),
    ],
)
def test_each_fault_of_a_row_is_named(row, problem):
    found = SCHEMA.problems(row)
    assert any(p.startswith(problem) for p in found), found


def test_a_schema_must_be_consistent():
    column = Column(int, "a step")
    with pytest.raises(ValueError, match=r"Row kind 'eval' names undeclared columns \['loss'\]"):
        Schema({"kind": Column(str, "k")}, {"eval": ("kind", "loss")})
    with pytest.raises(ValueError, match="Row kind 'eval' lacks its kind column 'kind'"):
        Schema({"step": column}, {"eval": ("step",)})
    with pytest.raises(ValueError, match=r"Columns \['step'\] are in no row kind"):
        Schema({"kind": Column(str, "k"), "step": column}, {"eval": ("kind",)})
