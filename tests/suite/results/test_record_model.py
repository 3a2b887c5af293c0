"""suite.results.record_model: the record format's checks, their messages, its JSON Schema and its versions."""

import gzip
import json
import math
from pathlib import Path

import pytest

from suite.results import record_model as model
from suite.results.record_model import FORMAT_VERSION, RunRecord, format_problem, migrate

ROOT = Path(__file__).resolve().parents[3]
SHIPPED = ROOT / "tests" / "fixtures" / "quick_records.json.gz"


def good() -> dict:
    """A small valid record: one metric, a budget, counts, a two-point trace, model probabilities."""
    return {
        "problem": "sas",
        "method": "rjmcmc-baseline",
        "seed": 0,
        "status": "ok",
        "metrics": {"model_prob_tv": {"value": 0.1, "se": 0.01}, "cross_entropy": {"value": math.nan, "se": None}},
        "budget": {"profile": "quick", "time_budget_s": 3.0, "over_budget": False, "clock_s": 3.1},
        "counts": {"stop": 120, "snapshots": [1, 5]},
        "trace": {"seconds": [0.1, 3.0], "iterations": [1, 120], "metrics": {"model_prob_tv": [0.5, 0.1]}},
        "model_probs": {"id": ["k=1", "k=2"], "estimate": [0.4, 0.6], "truth": [0.5, 0.5], "se": [0.01, None]},
        "plugin_field": {"anything": [1, "x"]},  # a plug-in's run information: kept, not checked
        "schema": FORMAT_VERSION,
    }


def test_a_valid_record_passes_and_round_trips_through_json() -> None:
    record = good()
    assert format_problem(record) is None
    typed = RunRecord.model_validate(record)
    assert typed.budget is not None and typed.budget.time_budget_s == 3.0
    again = RunRecord.from_json(typed.to_json())
    assert again.to_json() == typed.to_json()  # (NaN != NaN, so the objects themselves never compare equal)
    assert json.loads(typed.to_json())["plugin_field"] == {"anything": [1, "x"]}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"seed": "0"}, "seed: Input should be a valid integer (got '0')"),
        ({"seed": True}, "seed: Input should be a valid integer (got True)"),
        ({"status": "done"}, "status: Input should be 'ok', 'failed' or 'not_applicable'"),
        ({"problem": "a/../b"}, "problem: 'a/../b' is not a valid name"),
        ({"metrics": {"model_prob_tv": {"value": 1.5}}}, "metrics: ['model_prob_tv'] value is 1.5, outside [0, 1]"),
        ({"metrics": {"cross_entropy": {"value": -math.inf}}}, "value is -inf, outside (-inf, inf]"),
        ({"metrics": {"model_prob_tv": {"value": 0.1, "se": -1}}}, "metrics.model_prob_tv.se: is -1.0, not a number"),
        ({"budget": {"time_budget_s": -1}}, "budget.time_budget_s: Input should be greater than 0 (got -1)"),
        ({"counts": {"snapshots": [1, "x"]}}, "counts.snapshots[1]: Input should be a valid integer (got 'x')"),
        ({"counts": {"stop": 10**11}}, "counts.stop: Input should be less than or equal to 10000000000"),
        ({"timings_s": {"train": math.nan}}, "timings_s.train: Input should be a finite number (got nan)"),
        ({"trace": {"seconds": [0.1], "iterations": [1, 2]}}, "trace: iterations has 2 values for 1 snapshot times"),
        ({"trace": {"seconds": [0.1], "metrics": {"model_prob_tv": [2.0]}}}, "metrics['model_prob_tv'][0] is 2.0"),
        ({"model_probs": {"estimate": [0.5, 1.7]}}, "model_probs.estimate[1]: is 1.7, outside [0, 1]"),
        ({"model_probs": {"id": ["a"], "estimate": [0.5, 0.5]}}, "lists of different lengths: id 1, estimate 2"),
        ({"draws": {"path": "../../etc/passwd"}}, "draws.path: is '../../etc/passwd', not a path inside"),
        ({"draws": {"sha256": "abc"}}, "draws.sha256: String should match pattern"),
        ({"problem_facts": {"higher_is_better": ["model_prob_tv"]}}, "names model_prob_tv, where lower is better"),
        ({"problem_facts": {"sweep": ["a"]}}, "problem_facts.sweep: is ['a'], not [name, x]"),
        ({"config_hash": "../x"}, "config_hash: String should match pattern"),
    ],
)
def test_a_broken_field_is_named_with_what_was_found(change: dict, message: str) -> None:
    problem = format_problem({**good(), **change})
    assert problem is not None and message in problem, problem


def test_records_before_the_version_field_load_and_newer_ones_are_refused() -> None:
    older = good()
    del older["schema"]
    assert migrate(older) == older and format_problem(older) is None
    newer = {**good(), "schema": FORMAT_VERSION + 1}
    with pytest.raises(ValueError, match="written by a newer tdbench"):
        migrate(newer)
    assert "newer tdbench" in format_problem(newer)


def test_every_shipped_record_keeps_to_the_format() -> None:
    shipped = json.loads(gzip.decompress(SHIPPED.read_bytes()))
    assert len(shipped) > 100
    assert {name: format_problem(r) for name, r in shipped.items() if format_problem(r)} == {}


def test_the_documented_json_schema_is_the_model_s() -> None:
    """docs/record.schema.json is written by ``python -m suite.results.record_model``; rerun it after a change."""
    documented = json.loads((ROOT / "docs" / "record.schema.json").read_text())
    assert documented == RunRecord.model_json_schema(by_alias=True)
    assert set(documented["required"]) == {"problem", "method", "seed", "status", "metrics"}
    assert model.FORMAT_VERSION == 1
