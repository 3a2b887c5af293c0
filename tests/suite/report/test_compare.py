"""``tdbench compare``: run-for-run comparison of two results folders, walltimes aside."""

import json
from pathlib import Path

import pytest

from suite.report.compare import differences, main
from suite.results.records import RunKey, load_replay_counts, write_record


def _record(method: str, tv: float, walltime: float, budget: float | None = None, counts: object = None) -> dict:
    return {
        "problem": "sas",
        "problem_config": {},
        "method": method,
        "seed": 0,
        "status": "ok",
        "metrics": {"model_prob_tv": {"value": tv, "se": None}, "walltime_s": {"value": walltime, "se": None}},
        "budget": {"profile": "quick", "time_budget_s": budget},
        "counts": {"snapshots": [1, 2], "stop": 9} if counts is None else counts,
    }


def _write(out: Path, record: dict) -> None:
    write_record(out, RunKey(record["problem"], record["method"], record["seed"], {"x": 1}), record)


def test_equal_metrics_with_other_walltimes_are_no_difference(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    _write(tmp_path / "a", _record("mf", 0.25, 1.0))
    _write(tmp_path / "b", _record("mf", 0.25, 7.0))
    assert main([str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    assert "1 runs, 1 metric values compared: 0 difference(s)" in capsys.readouterr().out


def test_a_changed_metric_or_a_missing_run_is_reported() -> None:
    before = [_record("mf", 0.25, 1.0), _record("fr", 0.5, 1.0)]
    after = [_record("mf", 0.25 + 1e-16, 1.0)]
    lines = differences(before, after)
    assert any("sas / mf / seed 0: model_prob_tv" in line for line in lines)
    assert "sas / fr / seed 0: missing" in lines


def test_replay_counts_are_read_from_timed_records_only(tmp_path: Path) -> None:
    _write(tmp_path, _record("mf", 0.25, 1.0, budget=3.0))
    _write(tmp_path, _record("fr", 0.25, 1.0, budget=None))
    found = load_replay_counts(tmp_path)
    ((key, entry),) = found.items()
    assert key == ("sas", "mf", 0, json.dumps({})) and entry["counts"]["stop"] == 9 and entry["time_budget_s"] == 3.0


@pytest.mark.parametrize("counts", [{"stop": -1}, {"stop": "9"}, {"snapshots": [1, 2.5]}, ["stop"]])
def test_malformed_counts_are_refused_naming_the_file(tmp_path: Path, counts: object) -> None:
    _write(tmp_path, _record("mf", 0.25, 1.0, budget=3.0, counts=counts))
    with pytest.raises(ValueError, match=r"invalid record .*sas__mf__seed0__.*counts"):
        load_replay_counts(tmp_path)


def test_a_folder_without_timed_records_is_refused(tmp_path: Path) -> None:
    _write(tmp_path, _record("fr", 0.25, 1.0, budget=None))
    with pytest.raises(ValueError, match="no record of a timed run"):
        load_replay_counts(tmp_path)
