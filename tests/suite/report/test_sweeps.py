"""Sweeps: the cardinality sweep's table and plot from records of several robust-vs sizes."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from suite.report.sweeps import format_sweep, plot_sweep, sweep_of, sweep_tables

#: The sweep each problem belongs to, as its records' facts say (sas belongs to none).
SWEEPS = {"robust-vs": 7, "robust-vs-p9": 9, "robust-vs-p24": 24}


def _record(problem: str, method: str, seed: int, value: float) -> dict:
    sweep = ["robust-vs cardinality (VTI App. E.1, Fig. 4)", SWEEPS[problem]] if problem in SWEEPS else None
    facts = {"main_metric": "model_prob_tv", "higher_is_better": [], "reported_neg_elbo": {}, "reported_dag_table": {}}
    return {
        "problem": problem,
        "problem_facts": {**facts, "sweep": sweep},
        "method": method,
        "seed": seed,
        "status": "ok",
        "reason": None,
        "metrics": {"cross_entropy": {"value": value, "se": 0.01}, "walltime_s": {"value": 1.0, "se": None}},
    }


def test_robust_vs_sizes_form_the_cardinality_sweep(tmp_path: Path) -> None:
    records = [
        _record("robust-vs-p9", "vti-mcg", 0, 4.0),
        _record("robust-vs-p9", "vti-mcg", 1, 6.0),
        _record("robust-vs", "vti-mcg", 0, 3.0),
        _record("robust-vs-p9", "rjmcmc-baseline", 0, math.inf),
        _record("sas", "vti-mcg", 0, 2.0),
    ]
    assert sweep_of(records, "robust-vs")[1] == 7 and sweep_of(records, "robust-vs-p9")[1] == 9
    assert sweep_of(records, "sas") is None
    (name, table), *others = sweep_tables(records).items()
    assert not others and "Fig. 4" in name
    assert table["x"].tolist() == [7, 9]  # sorted by the number of covariates
    assert table["vti-mcg"].tolist() == [3.0, 5.0]
    assert table["vti-mcg_se"].iloc[1] == pytest.approx(1.0)  # sd 1.414 / sqrt(2)
    assert math.isinf(table["rjmcmc-baseline"].iloc[1]) and math.isnan(table["rjmcmc-baseline_se"].iloc[1])
    text = format_sweep(name, table)
    assert "5 ± 1" in text and "inf" in text
    assert plot_sweep(name, table, tmp_path / "sweep.png").exists()
