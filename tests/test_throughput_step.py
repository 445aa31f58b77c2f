"""The throughput study's "step" scope: the network's training step at a study's shapes."""

from __future__ import annotations

import pandas as pd
import pytest

from linrnn_bench.harness.report import Table
from linrnn_bench.harness.studies.throughput import report as throughput_section
from linrnn_bench.harness.studies import throughput as TP


def test_step_rows_time_the_study_step_in_parts():
    config = TP.ThroughputConfig(
        scopes=("step",), step_preset="smoke", models=("lru",), warmup=0, repeats=1,
        peak_matmul_size=64, peak_stream_mib=1, peak_repeats=1,
    )
    runs = TP.grid(config)
    # The accuracy study's smoke preset trains lru on digits only, at one seed.
    assert [(r.model, r.task) for r in runs] == [("lru", "digits")]
    assert runs[0].network.d_model == 8 and runs[0].train.batch_size == 8
    row = TP.run(runs[0])[0]
    assert TP.COLUMNS.problems(row) == []  # exactly the step scope's declared columns
    assert row["scope"] == "step" and row["task"] == "digits"
    assert row["tokens_per_s"] == pytest.approx(row["real_tokens_per_step"]
                                                / row["time_median_s"])
    assert row["real_tokens_per_step"] <= row["padded_tokens_per_step"]
    for part in ("layers", "optimiser", "host", "evaluation"):
        assert row[f"{part}_median_s"] > 0.0
    assert row["rest_median_s"] == pytest.approx(max(
        row["time_median_s"] - row["layers_median_s"] - row["optimiser_median_s"], 0.0))
    assert 0.0 < row["compile_share"] < 1.0 and row["compile_s"] > 0.0
    assert 0.0 < row["roofline_fraction"] and "whole step" in row["count_source"]
    assert row["xla_flops"] is None or row["xla_flops"] > 0

    table = throughput_section._training_step(pd.DataFrame([{**row, "run_id": "r"}]), "smoke")
    assert isinstance(table, Table) and list(table.frame.index) == [("Sequential digits", "LRU")]


def test_step_scope_validates_its_preset_and_tasks():
    with pytest.raises(ValueError, match=r"step_preset='huge' is not accepted.*'smoke'"):
        TP.ThroughputConfig(scopes=("step",), step_preset="huge")
    with pytest.raises(ValueError, match=r"step_tasks has \['listops'\], not accepted"):
        TP.ThroughputConfig(scopes=("step",), step_preset="smoke", step_tasks=("listops",))
