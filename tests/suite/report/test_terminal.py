"""Terminal output: at most 120 columns unless --wide, not-applicable pairs summed up, ``nan`` apart from ``-``."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pandas as pd
import pytest

from suite.report.build import write_report_texts
from suite.report.leaderboard import display_table, long_table, summary_table, write_leaderboards
from suite.report.terminal import WIDTH, fit_columns, format_problem, summarise_not_applicable
from suite.results.facts import add_missing_facts
from suite.results.records import load_records
from tests.quick_records import quick_records_dir

REPO = Path(__file__).resolve().parents[3]
FACTS = {
    "version": 1,
    "main_metric": "model_prob_tv",
    "higher_is_better": [],
    "sweep": None,
    "reported_neg_elbo": {},
    "reported_source": "",
    "reported_dag_table": {},
}


def record(method: str, seed: int, **metrics: float) -> dict:
    return {
        "problem": "sas",
        "problem_facts": FACTS,
        "method": method,
        "seed": seed,
        "status": "ok",
        "reason": None,
        "config_hash": "h",
        "metrics": {name: {"value": value, "se": None} for name, value in metrics.items()},
    }


def test_a_computed_nan_prints_nan_and_a_metric_not_computed_prints_a_dash(tmp_path: Path) -> None:
    # "vi" computed a negative ELBO that came out NaN; "mcmc" has no density, so no negative ELBO at all.
    records = [
        record("vi", 0, model_prob_tv=0.1, neg_elbo=math.nan, walltime_s=1.0),
        record("vi", 1, model_prob_tv=0.2, neg_elbo=3.0, walltime_s=1.0),
        record("mcmc", 0, model_prob_tv=0.05, walltime_s=2.0),
    ]
    table = write_leaderboards(records, tmp_path)["sas"]
    shown = display_table(table).set_index("method")
    assert shown.loc["vi", "neg_elbo"] == "nan" and shown.loc["mcmc", "neg_elbo"] == "-"
    board = (tmp_path / "leaderboard_sas.md").read_text()
    # best, rank (95%) and mean (95% CI): one seed of "mcmc" cannot be separated from "vi"'s two, nor ranked
    assert "| mcmc | 1 | 0 | tied | 1-2 | 0.05 | - | 0.05 | 2 |" in board
    assert "| vi | 2 | 0 | tied | 1-2 | 0.15 [-0.485, 0.785] | nan | 0.15 ± 0.05 |" in board
    csv = (tmp_path / "leaderboard_sas.csv").read_text().splitlines()
    columns = csv[0].split(",")
    cells = {line.split(",")[0]: line.split(",") for line in csv[1:]}
    assert cells["vi"][columns.index("neg_elbo")] == "nan" and cells["mcmc"][columns.index("neg_elbo")] == ""
    assert math.isnan(pd.read_csv(tmp_path / "leaderboard_sas.csv").set_index("method").loc["vi", "neg_elbo"])
    compact = format_problem("sas", table)
    mcmc = next(line for line in compact if line.startswith("mcmc"))
    vi = next(line for line in compact if line.startswith("vi"))
    assert mcmc.split()[-1] == "-" and vi.split()[-1] == "nan"


def test_summaries_are_the_same_whatever_the_records_order() -> None:
    records = [record("b", 0, model_prob_tv=0.3), record("a", 1, model_prob_tv=0.1), record("a", 0, model_prob_tv=0.2)]
    tables = [summary_table(long_table(rs), "sas", rs) for rs in (records, records[::-1])]
    pd.testing.assert_frame_equal(tables[0], tables[1])
    assert tables[0]["method"].tolist() == ["a", "b"]


def test_not_applicable_pairs_make_one_line_per_method() -> None:
    rows = [{"problem": f"problem-with-a-long-name-{i}", "method": "dagma", "reason": "not a DAG"} for i in range(9)]
    rows += [{"problem": "sas", "method": "mf", "reason": "too many models"}, {"problem": "x", "method": None}]
    rows += [{"problem": "sas", "method": "mf", "reason": "too many models"}]  # the same pair twice counts once
    lines = summarise_not_applicable(rows)
    assert len(lines) == 2 and all(len(line) <= WIDTH for line in lines)
    assert lines[0].startswith("dagma: does not apply to 9 problems (problem-with-a-long-name-0, ")
    assert lines[0].endswith(" more)")
    assert lines[1] == "mf: does not apply to 1 problem (sas)"


def test_columns_are_left_out_from_the_right_to_fit() -> None:
    header = ["method", "runs", *(f"metric-{i}" for i in range(8))]
    rows = [["m", "1", *("0.123456789 ± 0.0123456789" for _ in range(8))]]
    lines, left_out = fit_columns(header, rows, keep=2)
    assert left_out == 5 and all(len(line) <= WIDTH for line in lines)
    assert lines[0].split() == ["method", "runs", "metric-0", "metric-1", "metric-2"]


@pytest.mark.slow
def test_the_default_runs_records_print_within_120_columns_unless_wide(tmp_path: Path) -> None:
    out = tmp_path / "quick"
    shutil.copytree(quick_records_dir(), out / "records")
    add_missing_facts(out)
    records = load_records(out)
    assert len(records) == 198
    compact, wide = write_report_texts(records, out, "quick")  # what write_report prints without and with wide
    shown = compact.replace(str(out), "results/quick")  # the folder as a user names it, not pytest's temporary path
    assert max(len(line) for line in shown.splitlines()) <= WIDTH
    problems = sorted({r["problem"] for r in records})
    assert all(f"== {problem}:" in compact for problem in problems)
    assert max(len(line) for line in wide.splitlines()) > WIDTH  # the full tables
    assert "model_prob_max_abs" in wide and "TV@" in wide
