"""The README's results table: best methods per problem from records, and the marked block it replaces."""

from __future__ import annotations

import pytest

from suite.leaderboard import NOT_APPLICABLE
from suite.readme_table import END, START, replace_block, results_table


def _record(problem: str, method: str, seed: int, tv: float, higher: list[str] | None = None) -> dict:
    return {
        "problem": problem,
        "method": method,
        "seed": seed,
        "status": "ok",
        "reason": None,
        "metrics": {"model_prob_tv": {"value": tv, "se": None}, "walltime_s": {"value": 1.0, "se": None}},
        "budget": {"profile": "quick", "time_budget_s": 4.0},
        "problem_facts": {
            "version": 1,
            "description": "",
            "main_metric": "model_prob_tv",
            "higher_is_better": higher or [],
            "sweep": None,
            "num_models": 4,
            "reported_neg_elbo": {},
            "reported_source": "",
            "reported_dag_table": {},
        },
    }


def test_the_table_ranks_methods_by_the_main_metric_and_states_the_budget() -> None:
    records = [
        _record("sas", "a", 0, 0.3),
        _record("sas", "a", 1, 0.1),
        _record("sas", "b", 0, 0.05),
        _record("sas", "c", 0, 0.5),
        _record("sas", "d", 0, 0.9),
        {"problem": "sas", "method": "e", "seed": None, "status": NOT_APPLICABLE, "reason": "x", "metrics": {}},
    ]
    lines = results_table(records).splitlines()
    assert lines[2] == "| `sas` | model_prob_tv (lower is better) | 4 s | `b` 0.05 | `a` 0.2 | `c` 0.5 | 4 |"


def test_the_block_between_the_markers_is_replaced_and_missing_markers_are_refused() -> None:
    text = f"intro\n{START}\nold\n{END}\nrest\n"
    new = replace_block(text, "| t |\n", "results/quick")
    assert new.startswith("intro\n" + START) and new.endswith(END + "\nrest\n")
    assert "old" not in new and "| t |" in new and "suite.readme_table results/quick" in new
    with pytest.raises(ValueError, match="markers"):
        replace_block("no markers", "| t |\n", "results/quick")
