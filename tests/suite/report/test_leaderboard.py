"""Leaderboards from synthetic records with known means and standard errors."""

import math

import pandas as pd
import pytest

from suite.report.leaderboard import display_table, long_table, summary_table, write_leaderboards
from suite.report.plots import plot_model_probs

#: What the report reads about the problem (records carry it; no problem class is imported).
FACTS = {
    "version": 1,
    "description": "",
    "main_metric": "model_prob_tv",
    "higher_is_better": [],
    "sweep": None,
    "num_models": 2,
    "reported_neg_elbo": {},
    "reported_source": "",
    "reported_dag_table": {},
}


def record(method: str, seed: int, tv: float, status: str = "ok") -> dict:
    return {
        "problem": "sas",
        "problem_facts": FACTS,
        "method": method,
        "seed": seed,
        "status": status,
        "reason": None if status == "ok" else "ValueError: bad",
        "config_hash": "x",
        "metrics": {"model_prob_tv": {"value": tv, "se": None}, "cross_entropy": {"value": 4.0 + tv, "se": 0.01}},
        "model_probs": {"id": ["k=2", "k=1"], "truth": [0.75, 0.25], "estimate": [0.75 - tv, 0.25 + tv]},
    }


RECORDS = [
    record("a", 0, 0.1),
    record("a", 1, 0.3),
    record("b", 0, 0.01),
    record("b", 1, 0.03),
    record("b", 2, math.nan, status="failed"),
]


def test_summary_mean_se_sort_and_failures() -> None:
    table = summary_table(long_table(RECORDS), "sas", RECORDS)
    assert table["method"].tolist() == ["b", "a"]  # sorted by TV, best first
    a = table.set_index("method").loc["a"]
    assert a["model_prob_tv"] == pytest.approx(0.2)
    assert a["model_prob_tv_se"] == pytest.approx(0.1)  # sd 0.1414 / sqrt(2)
    assert a["cross_entropy_mc_se"] == pytest.approx(0.01)
    b = table.set_index("method").loc["b"]
    assert (b["runs"], b["failed"]) == (3, 1) and "ValueError: bad" in b["failure_reasons"]


def test_files_are_written(tmp_path) -> None:
    write_leaderboards(RECORDS, tmp_path)
    assert "| b |" in (tmp_path / "leaderboard_sas.md").read_text()
    assert len(pd.read_csv(tmp_path / "leaderboard_sas.csv")) == 2
    assert len(pd.read_csv(tmp_path / "records_long.csv")) == 9  # 4 ok runs x 2 metrics + 1 failure row
    assert plot_model_probs("sas", RECORDS, tmp_path / "p.png").stat().st_size > 1000


def test_exact_reference_is_labelled_and_kl_metrics_follow_cross_entropy(tmp_path) -> None:
    from suite.report.leaderboard import format_for_terminal, reference_kind

    exact = [
        {**record(m, s, tv), "reference": {"kind": "exact"}}
        for m, s, tv in (("a", 0, 0.1), ("a", 1, 0.3), ("b", 0, 0.01))
    ]
    for rec in exact:
        rec["metrics"] = {
            **rec["metrics"],
            "kl_reverse": {"value": 0.5, "se": 0.01},
            "kl_joint": {"value": 0.2, "se": 0.01},
        }
    assert reference_kind(exact, "sas") == "exact"
    assert reference_kind(RECORDS, "sas") is None  # records without a reference entry get no label
    quadrature = [{**rec, "reference": {"kind": "estimated", "evidence_used": "quadrature"}} for rec in exact]
    assert reference_kind(quadrature, "sas") == "exact model probabilities (quadrature), estimated draws"
    table = write_leaderboards(exact, tmp_path)["sas"]
    columns = [c for c in table.columns if c in ("cross_entropy", "kl_joint", "kl_reverse")]
    assert columns == ["cross_entropy", "kl_joint", "kl_reverse"]
    assert "Reference: exact." in (tmp_path / "leaderboard_sas.md").read_text()
    assert "reference: exact" in format_for_terminal("sas", table, reference_kind(exact, "sas"))
    write_leaderboards(RECORDS, tmp_path)
    assert "Reference:" not in (tmp_path / "leaderboard_sas.md").read_text()


# ----------------------------------------------------------------- running estimates (traces) on the leaderboard


def traced(method: str, seed: int, seconds: list, tv: list, budget: float | None = 30.0, final: float | None = None):
    """A record with a trace of ``model_prob_tv`` (None: no estimate yet) and a time budget."""
    final = tv[-1] if final is None else final
    rec = record(method, seed, final)
    rec["budget"] = {"profile": "quick", "num_draws": 100, "time_budget_s": budget, "replayed": False}
    rec["trace"] = {
        "seconds": seconds,
        "iterations": list(range(1, len(seconds) + 1)),
        "elbo": [None] * len(seconds),
        "metrics": {"model_prob_tv": tv, "model_prob_kl": [None] * len(seconds)},
    }
    rec["metrics"]["walltime_s"] = {"value": seconds[-1], "se": None}
    return rec


def test_value_at_never_extrapolates_and_time_to_reach_needs_staying_within() -> None:
    from suite.report.leaderboard import time_to_reach, value_at

    seconds, values = [2.0, 4.0, 8.0], [None, 0.3, 0.1]
    assert value_at(seconds, values, 1.0) is None  # before the first snapshot
    assert value_at(seconds, values, 3.0) is None  # a snapshot without an estimate yet
    assert value_at(seconds, values, 5.0) == 0.3  # the last snapshot at or before the time
    assert value_at(seconds, values, 8.0) == 0.1
    assert value_at(seconds, values, 100.0) == 0.1  # the run had finished: its final value
    dip = [1.0, 2.0, 4.0, 8.0, 16.0], [0.5, 0.04, 0.2, 0.04, 0.03]
    assert time_to_reach(*dip, ("<=", 0.05)) == 8.0  # the dip at 2 s is left again: it does not count
    assert time_to_reach([1.0, 2.0], [0.01, 0.2], ("<=", 0.05)) == math.inf  # left at the end: not reached
    assert time_to_reach([1.0, 2.0], [0.5, 0.9], (">=", 0.8)) == 2.0  # higher is better (an F1)
    assert time_to_reach([1.0, 2.0], [0.01, None], ("<=", 0.05)) == math.inf


def test_trace_columns_at_fractions_of_the_common_budget(tmp_path) -> None:
    from suite.report.leaderboard import format_for_terminal

    records = [
        # "a": first snapshot after 3 s (10% of the budget); its TV falls below 0.05 at 9 s and stays there.
        traced("a", 0, [5.0, 9.0, 20.0, 30.0], [0.4, 0.04, 0.03, 0.02]),
        traced("a", 1, [5.0, 9.0, 20.0, 30.0], [0.2, 0.06, 0.04, 0.04]),
        # "b": estimates from 1 s on; it dips below 0.05 at 2 s, rises again, and ends above: never reached.
        traced("b", 0, [1.0, 2.0, 4.0, 10.0, 30.5], [0.5, 0.04, 0.3, 0.2, 0.1]),
    ]
    table = write_leaderboards(records, tmp_path)["sas"].set_index("method")
    assert table.loc["a", "TV@3s"] != table.loc["a", "TV@3s"]  # NaN: no run of "a" had an estimate at 3 s
    assert table.loc["a", "TV@9s"] == pytest.approx(0.05)  # median of 0.04 and 0.06
    assert table.loc["a", "TV@30s"] == pytest.approx(0.03)  # the final values
    assert table.loc["b", "TV@3s"] == pytest.approx(0.04)
    assert table.loc["b", "TV@30s"] == pytest.approx(0.1)  # stopped a little past the budget: its final value
    assert table.loc["a", "t(TV<=0.05)"] == pytest.approx(14.5)  # median of 9 s and 20 s
    assert table.loc["a", "t(TV<=0.05) seeds"] == "2/2"
    assert math.isinf(table.loc["b", "t(TV<=0.05)"]) and table.loc["b", "t(TV<=0.05) seeds"] == "0/1"
    text = format_for_terminal("sas", write_leaderboards(records, tmp_path)["sas"])
    header, verdict, note, columns, row_a, row_b = text.splitlines()[:6]
    assert "Verdict: tied for best: `a`, `b` (seeds: 2, 1)" in verdict
    assert "at the common budget of 30 s (TV@30s)" in header and "TV@3s, TV@9s, TV@30s" in note
    assert "stays <= 0.05" in note
    head = ["method", "runs", "failed", "best", "rank", "(95%)", "mean", "(95%", "CI)"]
    assert columns.split()[:13] == [*head, "TV@3s", "TV@9s", "TV@30s", "t(TV<=0.05)"]
    # one seed of "b" (0.1) cannot be separated from "a"'s two (0.02, 0.04): both tied, ranks 1-2
    assert row_a.split()[:11] == ["a", "2", "0", "tied", "1-2", "0.03", "[-0.0971,", "0.157]", "-", "0.05", "0.03"]
    assert "not reached" in row_b and "(0/1)" not in row_b  # (k/n) only when some, not all, seeds reached it
    board = (tmp_path / "leaderboard_sas.md").read_text()
    assert "| a | 2 | 0 | tied | 1-2 | 0.03 [-0.0971, 0.157] | - | 0.05 | 0.03 | 14.5s |" in board
    assert "not reached" in board
    assert "TV@30s" in pd.read_csv(tmp_path / "leaderboard_sas.csv").columns


def test_some_seeds_reached_and_median_not_reached(tmp_path) -> None:
    seconds = [1.0, 10.0, 30.0]
    records = [
        traced("a", 0, seconds, [0.1, 0.01, 0.01]),
        traced("a", 1, seconds, [0.1, 0.03, 0.01]),
        traced("a", 2, seconds, [0.1, 0.1, 0.1]),
        traced("b", 0, seconds, [0.1, 0.01, 0.01]),
        traced("b", 1, seconds, [0.1, 0.1, 0.1]),
    ]
    shown = display_table(write_leaderboards(records, tmp_path)["sas"]).set_index("method")
    assert shown.loc["a", "t(TV<=0.05)"] == "10s (2/3)"  # the median seed reached it at 10 s
    assert shown.loc["b", "t(TV<=0.05)"] == "not reached (1/2)"  # half the seeds never did
    assert display_table(write_leaderboards(records[3:4] + records[1:2], tmp_path)["sas"])["t(TV<=0.05)"].tolist() == [
        "10s",
        "10s",
    ]


def test_sorted_by_the_main_metric_at_the_common_budget(tmp_path) -> None:
    seconds = [1.0, 10.0, 30.0]
    # "a": mean final TV 0.173 but median 0.01; "b": 0.1 for every seed.
    runs = [("a", 0, 0.01), ("a", 1, 0.01), ("a", 2, 0.5), ("b", 0, 0.1), ("b", 1, 0.1), ("b", 2, 0.1)]
    records = [traced(m, s, seconds, [0.6, 0.4, tv]) for m, s, tv in runs]
    table = write_leaderboards(records, tmp_path)["sas"].set_index("method")
    # sorted by the verdict's mean at the budget (the column TV@30s shows the median)
    assert table.index.tolist() == ["b", "a"] and table.loc["a", "TV@30s"] == pytest.approx(0.01)
    assert table.loc["a", "ranked_mean"] == pytest.approx(0.52 / 3)
    assert (
        "Sorted by `model_prob_tv` at the common budget of 30 s (`TV@30s`)"
        in (tmp_path / "leaderboard_sas.md").read_text()
    )
    # An over-budget run is ranked by what it had estimated by the budget, not by its final value.
    over = traced("a", 2, [1.0, 10.0, 25.0, 60.0], [0.6, 0.4, 0.3, 0.005])
    table = write_leaderboards([*records[:2], over, *records[3:]], tmp_path)["sas"].set_index("method")
    assert table.loc["a", "ranked_mean"] == pytest.approx(0.32 / 3)
    # Different budgets: fixed times, sorted by the mean of the final values.
    records[0]["budget"]["time_budget_s"] = 60.0
    table = write_leaderboards(records, tmp_path)["sas"]
    assert table["method"].tolist() == ["b", "a"]
    assert [c for c in table.columns if "@" in c] == ["TV@1s", "TV@10s", "TV@100s"]


def test_records_without_traces_still_make_leaderboards(tmp_path) -> None:
    from suite.report.leaderboard import format_for_terminal

    table = write_leaderboards(RECORDS, tmp_path)["sas"]  # written before traces and budgets were recorded
    assert not [c for c in table.columns if "@" in c or c.startswith("t(")]
    assert "TV@" not in format_for_terminal("sas", table)
    mixed = [*RECORDS, traced("c", 0, [1.0, 2.0], [0.2, 0.01])]
    shown = display_table(write_leaderboards(mixed, tmp_path)["sas"]).set_index("method")
    assert shown.loc["a", "TV@1s"] == "-" and shown.loc["a", "t(TV<=0.05)"] == "-"  # no common budget: 1, 10, 100 s
    assert shown.loc["c", "TV@100s"] == "0.01" and shown.loc["c", "t(TV<=0.05)"] == "2s"
    assert "TV@100s" in (tmp_path / "leaderboard_sas.md").read_text()
