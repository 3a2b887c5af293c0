"""Leaderboards from synthetic records with known means and standard errors."""

import math

import pandas as pd
import pytest

from suite.leaderboard import long_table, summary_table, write_leaderboards
from suite.plots import plot_model_probs


def record(method: str, seed: int, tv: float, status: str = "ok") -> dict:
    return {
        "problem": "sas",
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
    table = summary_table(long_table(RECORDS), "sas")
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
    from suite.leaderboard import format_for_terminal, reference_kind

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
    table = write_leaderboards(exact, tmp_path)["sas"]
    columns = [c for c in table.columns if c in ("cross_entropy", "kl_joint", "kl_reverse")]
    assert columns == ["cross_entropy", "kl_joint", "kl_reverse"]
    assert "Reference: exact." in (tmp_path / "leaderboard_sas.md").read_text()
    assert "reference: exact" in format_for_terminal("sas", table, reference_kind(exact, "sas"))
    write_leaderboards(RECORDS, tmp_path)
    assert "Reference:" not in (tmp_path / "leaderboard_sas.md").read_text()
