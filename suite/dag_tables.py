"""Structure-learning results in the format of VTI Table 1: F1, SHD, Brier and AUROC per method, with reported rows.

Problems whose records carry the DAG metrics (``suite.dag.graph_task_metrics``) get one table each; a problem
class may list the source paper's numbers in ``reported_dag_table`` (label -> metric -> value), shown beside.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from suite.leaderboard import format_mean_se, long_table, mean_and_se
from suite.registry import problem_class

#: (record metric, column title) in the order of VTI Table 1, then BayesDAG's expected SHD.
COLUMNS = (("edge_f1", "F1"), ("shd", "SHD"), ("brier", "Brier"), ("auroc", "AUROC"), ("expected_shd", "E-SHD"))


def reported_rows(problem: str) -> dict[str, dict[str, float]]:
    """The source paper's numbers for a registered problem (empty when none are listed)."""
    try:
        return dict(getattr(problem_class(problem), "reported_dag_table", {}) or {})
    except KeyError:
        return {}


def dag_tables(records: list[dict[str, Any]]) -> dict[str, pd.DataFrame]:
    """Per problem with DAG metrics: one row per method (mean and standard error over seeds) plus reported rows."""
    long = long_table(records)
    long = long[long["status"] == "ok"]
    tables: dict[str, pd.DataFrame] = {}
    for problem in sorted(long["problem"].unique()):
        sub = long[long["problem"] == problem]
        if "edge_f1" not in set(sub["metric"]):
            continue
        rows = []
        for method, group in sub.groupby("method"):
            if "edge_f1" not in set(group["metric"]):  # records made before the DAG metrics existed
                continue
            row: dict[str, Any] = {"method": method, "source": "this run", "runs": int(group["seed"].nunique())}
            for metric, title in COLUMNS:
                row[title], row[f"{title}_se"] = mean_and_se(group.loc[group["metric"] == metric, "value"])
            rows.append(row)
        for label, values in reported_rows(problem).items():
            row = {"method": label, "source": "paper", "runs": None}
            for _, title in COLUMNS:
                row[title], row[f"{title}_se"] = values.get(title, float("nan")), float("nan")
            rows.append(row)
        tables[problem] = pd.DataFrame(rows)
    return tables


def format_dag_table(problem: str, table: pd.DataFrame) -> str:
    """Plain text: ``mean ± se`` per metric (F1 and AUROC higher is better, SHD, Brier and E-SHD lower)."""
    shown = table[["method", "source", "runs"]].copy()
    shown["runs"] = [("" if r is None or r != r else int(r)) for r in table["runs"]]
    for _, title in COLUMNS:
        shown[title] = [format_mean_se(m, s) for m, s in zip(table[title], table[f"{title}_se"], strict=True)]
    header = f"== {problem}: DAG metrics in the format of VTI Table 1 (F1, AUROC higher is better; SHD, Brier lower)"
    return header + "\n" + shown.to_string(index=False)
