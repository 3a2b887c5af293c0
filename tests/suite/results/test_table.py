"""The tidy results table: one row per (run, metric), integer seeds, failures kept, written as Parquet."""

import math
from pathlib import Path

import pandas as pd
import pytest

from suite.results.table import COLUMN_DTYPES, RESULT_COLUMNS, RESULTS_FILE, results_frame, write_results_table


def _record(method: str, seed: int, status: str = "ok", **metrics: tuple[float, float | None]) -> dict:
    return {
        "problem": "sas",
        "method": method,
        "seed": seed,
        "config_hash": "abc",
        "status": status,
        "reason": None if status == "ok" else "ValueError: boom",
        "metrics": {name: {"value": v, "se": se} for name, (v, se) in metrics.items()},
        "budget": {"profile": "smoke", "num_draws": 4096, "time_budget_s": None, "replayed": False},
        "environment": {"device": "cpu"},
        "started_at": "2026-01-01T00:00:00+00:00",
        "draws": {"path": f"draws/sas__{method}__seed{seed}__abc.npz", "num": 4096, "sha256": "0" * 64},
    }


RECORDS = [
    _record("mf", 0, model_prob_tv=(0.1, 0.01), walltime_s=(2.0, None), neg_elbo=(math.nan, 0.5)),
    _record("mf", 1, model_prob_tv=(0.2, 0.02), walltime_s=(3.0, None)),
    _record("vti-mcg", 0, status="failed"),
    {"problem": "sas", "method": "dagma", "seed": None, "status": "not_applicable", "reason": "no DAG", "metrics": {}},
]


def test_one_row_per_run_and_metric_with_fixed_dtypes() -> None:
    table = results_frame(RECORDS)
    assert list(table.columns) == RESULT_COLUMNS
    assert table.dtypes.astype(str).to_dict() == {k: str(pd.Series(dtype=v).dtype) for k, v in COLUMN_DTYPES.items()}
    assert table["seed"].dtype == "int64"
    assert len(table) == 3 + 2 + 1  # not-applicable rows are not runs
    first = table[(table.method == "mf") & (table.seed == 0)].set_index("metric")
    assert first.loc["model_prob_tv", "value"] == 0.1 and first.loc["model_prob_tv", "se"] == 0.01
    assert math.isnan(first.loc["neg_elbo", "value"]) and first.loc["neg_elbo", "se"] == 0.5
    assert math.isnan(first.loc["walltime_s", "se"])
    assert (first["walltime_s"] == 2.0).all() and (first["profile"] == "smoke").all()
    assert first.loc["model_prob_tv", "record"] == "records/sas__mf__seed0__abc.json"
    assert first.loc["model_prob_tv", "draws"] == "draws/sas__mf__seed0__abc.npz"
    failed = table[table.method == "vti-mcg"]
    assert failed["metric"].tolist() == ["status"] and failed["reason"].tolist() == ["ValueError: boom"]
    assert math.isnan(failed["value"].iloc[0])


def test_no_records_give_an_empty_table_with_the_same_columns() -> None:
    table = results_frame([])
    assert list(table.columns) == RESULT_COLUMNS and len(table) == 0 and table["seed"].dtype == "int64"


def test_the_parquet_file_reads_back_as_the_same_table(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    path = write_results_table(RECORDS, tmp_path)
    assert path == tmp_path / RESULTS_FILE
    assert [p.name for p in tmp_path.iterdir()] == [RESULTS_FILE]  # no temporary left behind
    pd.testing.assert_frame_equal(pd.read_parquet(path), results_frame(RECORDS))
