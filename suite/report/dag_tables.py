"""Structure-learning results in the format of VTI Table 1: F1, SHD, Brier and AUROC per method, with reported rows.

Problems whose records carry the DAG metrics (``suite.scoring.graphs.graph_task_metrics``) get a table each; the source
paper's numbers come from the records' ``problem_facts["reported_dag_table"]`` (label -> metric -> value), shown
beside. A metric computed as NaN prints ``nan``; one not computed (or not reported) prints ``-``.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from suite.report.leaderboard import format_mean_se, is_computed_nan, long_table, mean_and_se, problem_facts

#: (record metric, column title) in the order of VTI Table 1, then BayesDAG's expected SHD.
COLUMNS = (("edge_f1", "F1"), ("shd", "SHD"), ("brier", "Brier"), ("auroc", "AUROC"), ("expected_shd", "E-SHD"))


def reported_rows(records: list[dict[str, Any]], problem: str) -> dict[str, dict[str, float]]:
    """The source paper's numbers for ``problem``, from its records' facts (empty when none are listed)."""
    facts = problem_facts(records, problem) or {}
    return dict(facts.get("reported_dag_table") or {})


def dag_tables(records: list[dict[str, Any]]) -> dict[str, pd.DataFrame]:
    """Per problem with DAG metrics: one row per method (mean and standard error over seeds) plus reported rows.

    ``table.attrs["nan_cells"]``: the (method, column title) cells whose NaN was computed.
    """
    long = long_table(records)
    long = long[long["status"] == "ok"]
    tables: dict[str, pd.DataFrame] = {}
    for problem in sorted(long["problem"].unique()):
        sub = long[long["problem"] == problem]
        if "edge_f1" not in set(sub["metric"]):
            continue
        rows = []
        nan_cells = []
        for method, group in sub.groupby("method"):
            if "edge_f1" not in set(group["metric"]):  # records made before the DAG metrics existed
                continue
            row: dict[str, Any] = {"method": method, "source": "this run", "runs": int(group["seed"].nunique())}
            for metric, title in COLUMNS:
                values = group.loc[group["metric"] == metric, "value"]
                row[title], row[f"{title}_se"] = mean_and_se(values)
                if len(values) and values.isna().any():
                    nan_cells.append((str(method), title))
            rows.append(row)
        for label, values in reported_rows(records, problem).items():
            row = {"method": label, "source": "paper", "runs": None}
            for _, title in COLUMNS:
                row[title], row[f"{title}_se"] = values.get(title, float("nan")), float("nan")
            rows.append(row)
        tables[problem] = pd.DataFrame(rows)
        tables[problem].attrs["nan_cells"] = nan_cells
    return tables


def format_dag_table(problem: str, table: pd.DataFrame) -> str:
    """Plain text: ``mean ± se`` per metric (F1 and AUROC higher is better, SHD, Brier and E-SHD lower)."""
    shown = table[["method", "source", "runs"]].copy()
    shown["runs"] = [("" if r is None or r != r else int(r)) for r in table["runs"]]
    for _, title in COLUMNS:
        shown[title] = [
            format_mean_se(m, s, computed=is_computed_nan(table, method, title) and source == "this run")
            for method, source, m, s in zip(
                table["method"], table["source"], table[title], table[f"{title}_se"], strict=True
            )
        ]
    header = f"== {problem}: DAG metrics in the format of VTI Table 1 (F1, AUROC higher is better; SHD, Brier lower)"
    return header + "\n" + shown.to_string(index=False)
