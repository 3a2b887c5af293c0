"""The README grid is computed from records: means over seeds, failed and missing runs marked."""

from __future__ import annotations

from pathlib import Path

from suite.cli.overview_command import main
from suite.report.overview import overview
from suite.results import records as rec


def _record(problem: str, method: str, seed: int, tv: float | None, ce: float, seconds: float) -> dict:
    status = "ok" if tv is not None else "failed"
    metrics = {} if tv is None else {"model_prob_tv": {"value": tv}, "cross_entropy": {"value": ce, "se": 0.01}}
    if tv is not None:
        metrics["walltime_s"] = {"value": seconds}
    facts = {"main_metric": "model_prob_tv", "higher_is_better": [], "reported_neg_elbo": {}, "reported_dag_table": {}}
    return {
        "problem": problem,
        "problem_facts": facts,
        "method": method,
        "seed": seed,
        "status": status,
        "reason": None,
        "metrics": metrics,
    }


def test_cells_are_means_over_seeds_with_failed_and_missing_runs_marked() -> None:
    records = [
        _record("sas", "rjmcmc-baseline", 0, 0.01, 3.0, 2.0),
        _record("sas", "rjmcmc-baseline", 1, 0.03, 5.0, 4.0),
        _record("sas", "trj", 0, None, 0.0, 0.0),
        _record("robust-vs", "trj", 0, 0.5, float("inf"), 0.2),
    ]
    grid = overview(records, ["sas", "robust-vs"])
    assert list(grid.columns) == ["problem", "rjmcmc-baseline", "trj"]  # the README's column order
    sas, robust = grid.iloc[0], grid.iloc[1]
    assert sas["rjmcmc-baseline"] == "0.02 / 4 / 3 s"
    assert sas["trj"] == "failed"
    assert robust["rjmcmc-baseline"] == "-"
    assert robust["trj"] == "0.5 / inf / 0.2 s"
    chosen = overview(records, ["sas"], ["trj", "rjmcmc-naive"])
    assert list(chosen.columns) == ["problem", "trj", "rjmcmc-naive"] and chosen.iloc[0]["rjmcmc-naive"] == "-"


def test_command_line_prints_markdown_and_refuses_an_empty_folder(tmp_path: Path, capsys) -> None:
    assert main([str(tmp_path)]) == 2
    assert "no records" in capsys.readouterr().err
    key = rec.RunKey("sas", "trj", 0, {"profile": "quick"})
    rec.write_record(tmp_path, key, _record("sas", "trj", 0, 0.1, 2.0, 1.5))
    assert main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "| problem | trj |"
    assert "0.1 / 2 / 2 s" in out


def test_records_without_facts_are_refused_with_the_fix(tmp_path: Path, capsys) -> None:
    key = rec.RunKey("sas", "trj", 0, {"profile": "quick"})
    old = _record("sas", "trj", 0, 0.1, 2.0, 1.5)
    del old["problem_facts"]
    rec.write_record(tmp_path, key, {**old, "config_hash": key.config_hash})
    assert main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert key.filename in err and "tdbench facts" in err
