"""The summary across problems: mean ranks with intervals, best groups, and the performance profile."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from suite.report.leaderboard import long_table
from suite.report.leaderboard import summary_table as leaderboard
from suite.report.summary import performance_ratios, profile_curve, summary_table, write_summary

FACTS = {"main_metric": "model_prob_tv", "higher_is_better": [], "reported_neg_elbo": {}, "reported_dag_table": {}}


def _record(problem: str, method: str, seed: int, tv: float) -> dict:
    return {
        "problem": problem,
        "method": method,
        "seed": seed,
        "status": "ok",
        "reason": None,
        "metrics": {"model_prob_tv": {"value": tv, "se": None}},
        "budget": {"profile": "quick", "time_budget_s": None},
        "problem_facts": FACTS,
    }


def _records(levels: dict[str, dict[str, float]], seeds: int = 3) -> list[dict]:
    return [
        _record(problem, method, seed, level + 0.001 * seed)
        for problem, methods in levels.items()
        for method, level in methods.items()
        for seed in range(seeds)
    ]


def _tables(records: list[dict]) -> dict[str, pd.DataFrame]:
    long = long_table(records)
    return {p: leaderboard(long, p, records) for p in sorted({r["problem"] for r in records})}


def test_well_separated_methods_get_exact_mean_ranks_and_best_groups() -> None:
    levels = {"p1": {"a": 0.1, "b": 0.2, "c": 0.3}, "p2": {"a": 0.3, "b": 0.1, "c": 0.2}, "p3": {"a": 0.1, "b": 0.2}}
    records = _records(levels)
    table = summary_table(records, _tables(records)).set_index("method")
    assert table["problems"].to_dict() == {"a": 3, "b": 3, "c": 2}  # c does not run p3: left out, not last
    assert table["mean_rank"].to_dict() == pytest.approx({"a": 5 / 3, "b": 5 / 3, "c": 2.5})
    assert (table["mean_rank_low"] == table["mean_rank"]).all() and (
        table["mean_rank_high"] == table["mean_rank"]
    ).all()
    assert table["best_groups"].to_dict() == {"a": 2, "b": 1, "c": 0}


def test_the_mean_rank_interval_covers_what_the_seeds_cannot_order() -> None:
    rng = np.random.default_rng(0)
    records = [
        _record(problem, method, seed, float(rng.normal(0.2, 0.05)))
        for problem in ("p1", "p2", "p3", "p4")
        for method in ("a", "b")
        for seed in range(3)
    ]
    table = summary_table(records, _tables(records))
    assert (table["mean_rank_low"] < table["mean_rank_high"]).all()
    assert (table["mean_rank_low"] <= table["mean_rank"]).all() and (
        table["mean_rank"] <= table["mean_rank_high"]
    ).all()
    assert table["mean_rank"].sum() == pytest.approx(3.0)  # two methods on every problem: ranks 1 and 2


def test_performance_ratios_and_the_profile() -> None:
    attrs = {"trace": {"reach": "t(TV<=0.05)"}}
    one = pd.DataFrame({"method": ["a", "b", "c"], "ranked_mean": [0.1, 0.2, 0.3], "t(TV<=0.05)": [2.0, 4.0, math.inf]})
    unsolved = pd.DataFrame({"method": ["a", "b"], "ranked_mean": [0.1, 0.2], "t(TV<=0.05)": [math.inf, math.inf]})
    untimed = pd.DataFrame({"method": ["a"], "ranked_mean": [0.1]})
    for frame in (one, unsolved):
        frame.attrs.update(attrs)
    ratios = performance_ratios({"one": one, "unsolved": unsolved, "untimed": untimed})
    assert ratios.set_index("method")["ratio"].to_dict() == {"a": 1.0, "b": 2.0, "c": math.inf}
    taus = np.array([1.0, 1.9, 2.0, 100.0])
    assert profile_curve(pd.Series([1.0, 2.0, math.inf]), taus).tolist() == pytest.approx([1 / 3, 1 / 3, 2 / 3, 2 / 3])


def test_the_report_files(tmp_path: Path) -> None:
    records = _records({"p1": {"a": 0.1, "b": 0.2}, "p2": {"a": 0.2, "b": 0.1}})
    write_summary(records, _tables(records), tmp_path)
    assert pd.read_csv(tmp_path / "summary.csv")["method"].tolist() == ["a", "b"]
    text = (tmp_path / "summary.md").read_text()
    assert "| `a` | 2 | 1.50 [1.50, 1.50] | 1/2 |" in text and "left out, not counted as last" in text.replace(
        "\n", " "
    )
    assert (tmp_path / "summary.png").stat().st_size > 0
