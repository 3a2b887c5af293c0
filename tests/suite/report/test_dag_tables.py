"""The Table 1 printout: means over seeds per method, methods without DAG metrics left out, reported rows beside."""

import math

from suite.report.dag_tables import dag_tables, format_dag_table

REPORTED = {
    "VTI non-linear DAG (paper)": {"F1": 0.61, "SHD": 9.0},
    "DAGMA non-linear (paper)": {"F1": 0.3, "SHD": 25.0},
}


def _facts(problem: str) -> dict:
    """The facts records carry: the paper's numbers for the DAG problem only."""
    reported = REPORTED if problem.startswith("dag-") else {}
    facts = {"main_metric": "shd", "higher_is_better": ["edge_f1"], "reported_neg_elbo": {}}
    return {**facts, "reported_dag_table": reported}


def _record(problem: str, method: str, seed: int, **metrics: float) -> dict:
    return {
        "problem": problem,
        "problem_facts": _facts(problem),
        "method": method,
        "seed": seed,
        "status": "ok",
        "metrics": {name: {"value": value, "se": None} for name, value in metrics.items()},
    }


def test_means_over_seeds_and_reported_rows() -> None:
    records = [
        _record("dag-mlp-sachs", "dagma", 0, edge_f1=0.4, shd=20.0, brier=20.0, auroc=0.6, expected_shd=20.0),
        _record("dag-mlp-sachs", "dagma", 1, edge_f1=0.6, shd=10.0, brier=10.0, auroc=0.8, expected_shd=10.0),
        _record("dag-mlp-sachs", "other", 0, cross_entropy=1.0),
        _record("sas", "dagma", 0, cross_entropy=1.0),
    ]
    tables = dag_tables(records)
    assert list(tables) == ["dag-mlp-sachs"]
    table = tables["dag-mlp-sachs"]
    ours = table[table["source"] == "this run"]
    assert list(ours["method"]) == ["dagma"] and int(ours["runs"].iloc[0]) == 2
    assert math.isclose(ours["F1"].iloc[0], 0.5) and math.isclose(ours["SHD"].iloc[0], 15.0)
    paper = table[table["source"] == "paper"].set_index("method")
    assert paper.loc["VTI non-linear DAG (paper)", "F1"] == 0.61 and paper.loc["DAGMA non-linear (paper)", "SHD"] == 25
    assert "VTI Table 1" in format_dag_table("dag-mlp-sachs", table)


def test_sachs_prints_vti_table_1_and_bayesdag_table_2_rows() -> None:
    """The problem's own facts: VTI's rows keep every column; BayesDAG's have F1 and E-SHD only (others ``-``)."""
    from problems.dag_mlp.problem import SachsDAGMLP
    from suite.report.terminal import WIDTH, format_dag_compact
    from suite.results.facts import problem_facts

    record = _record("dag-mlp-sachs", "dagma", 0, edge_f1=0.4, shd=20.0, brier=20.0, auroc=0.6, expected_shd=20.0)
    record["problem_facts"] = problem_facts(SachsDAGMLP)
    table = dag_tables([record])["dag-mlp-sachs"]
    paper = table[table["source"] == "paper"].set_index("method")
    assert paper.loc["VTI non-linear DAG (paper)", "AUROC"] == 0.79
    bayesdag = paper.loc["BayesDAG (BayesDAG Table 2)"]
    assert (bayesdag["F1"], bayesdag["E-SHD"]) == (0.26, 18.92) and math.isnan(bayesdag["SHD"])
    assert {"BGES (BayesDAG Table 2)", "BCD (BayesDAG Table 2)", "DIBS (BayesDAG Table 2)"} <= set(paper.index)
    lines = format_dag_compact("dag-mlp-sachs", table)
    assert all(len(line) <= WIDTH for line in lines)
    row = next(line for line in lines if line.startswith("BayesDAG (BayesDAG Table 2)"))
    assert row.split()[-5:] == ["0.26", "-", "-", "-", "18.9"]  # F1, SHD, Brier, AUROC, E-SHD (3 digits)
