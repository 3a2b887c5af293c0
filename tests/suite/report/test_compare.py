"""``tdbench compare``: two results folders beyond noise, and ``--exact`` run for run (walltimes aside)."""

import json
from pathlib import Path

import pytest

from suite.cli.compare_command import main
from suite.report.compare import changes, differences
from suite.results.records import RunKey, load_replay_counts, write_record


def _record(
    method: str, tv: float, walltime: float, budget: float | None = None, counts: object = None, seed: int = 0
) -> dict:
    return {
        "problem": "sas",
        "problem_config": {},
        "method": method,
        "seed": seed,
        "status": "ok",
        "metrics": {"model_prob_tv": {"value": tv, "se": None}, "walltime_s": {"value": walltime, "se": None}},
        "budget": {"profile": "quick", "time_budget_s": budget},
        "counts": {"snapshots": [1, 2], "stop": 9} if counts is None else counts,
        "problem_facts": {
            "main_metric": "model_prob_tv",
            "higher_is_better": [],
            "reported_neg_elbo": {},
            "reported_dag_table": {},
        },
    }


def _write(out: Path, record: dict) -> None:
    write_record(out, RunKey(record["problem"], record["method"], record["seed"], {"x": 1}), record)


def test_equal_metrics_with_other_walltimes_are_no_difference(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    _write(tmp_path / "a", _record("mf", 0.25, 1.0))
    _write(tmp_path / "b", _record("mf", 0.25, 7.0))
    assert main([str(tmp_path / "a"), str(tmp_path / "b"), "--exact"]) == 0
    assert "1 runs, 1 metric values compared: 0 difference(s)" in capsys.readouterr().out


def test_a_changed_metric_or_a_missing_run_is_reported() -> None:
    before = [_record("mf", 0.25, 1.0), _record("fr", 0.5, 1.0)]
    after = [_record("mf", 0.25 + 1e-16, 1.0)]
    lines = differences(before, after)
    assert any("sas / mf / seed 0: model_prob_tv" in line for line in lines)
    assert "sas / fr / seed 0: missing in NEW" in lines
    assert "sas / mf / seed 0: model_prob_tv 0.25 -> 0.2500000000000001" in lines  # values, not raw dicts
    assert differences(after, before)[-1] == "sas / fr / seed 0: only in NEW"


def test_unpaired_runs_and_other_profiles_are_named(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Runs in one folder only are listed, never silently dropped; smoke against quick is warned about."""
    _write(tmp_path / "a", _record("mf", 0.25, 1.0))
    smoke = _record("mf", 0.25, 1.0)
    smoke["budget"] = {"profile": "smoke"}
    _write(tmp_path / "b", smoke)
    _write(tmp_path / "b", _record("fr", 0.5, 1.0))
    assert main([str(tmp_path / "a"), str(tmp_path / "b"), "--exact"]) == 1
    captured = capsys.readouterr()
    assert "sas / fr / seed 0: only in NEW" in captured.out
    assert "OLD ran profile quick and NEW quick, smoke" in captured.err
    assert main([str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    assert "only in NEW, not compared (1): sas / fr" in capsys.readouterr().out
    (tmp_path / "empty" / "records").mkdir(parents=True)
    assert main([str(tmp_path / "a"), str(tmp_path / "empty")]) == 2
    assert "no records in" in capsys.readouterr().err


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


def _folder(out: Path, values: dict[str, list[float]]) -> Path:
    for method, tvs in values.items():
        for seed, tv in enumerate(tvs):
            _write(out, _record(method, tv, 1.0, budget=None, seed=seed))
    return out


def test_changes_beyond_noise_are_better_or_worse_and_the_rest_within_noise(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    old = _folder(tmp_path / "old", {"a": [0.10, 0.11, 0.12], "b": [0.10, 0.11, 0.12], "c": [0.10, 0.20, 0.15]})
    new = _folder(tmp_path / "new", {"a": [0.05, 0.06, 0.07], "b": [0.20, 0.21, 0.22], "c": [0.12, 0.22, 0.17]})
    from suite.results.records import load_records

    table = changes(load_records(old), load_records(new)).set_index("method")
    assert table["verdict"].to_dict() == {"a": "better", "b": "worse", "c": "within noise"}  # lower TV is better
    assert table.loc["a", "change"] == pytest.approx(-0.05)
    low, high = table.loc["b", "change_low"], table.loc["b", "change_high"]
    assert low == pytest.approx(0.1 - 2.7764451 * 0.01 * (2 / 3) ** 0.5, rel=1e-6) and high > 0.1  # Welch, df 4
    assert main([str(old), str(new)]) == 0
    out = capsys.readouterr().out
    assert "| sas | b | model_prob_tv (lower is better) | 0.11 (3) | 0.21 (3) |" in out
    assert "3 (problem, method) pairs: 1 better, 1 worse, 1 within noise" in out
    assert main([str(old), str(new), "--fail-on-worse"]) == 1
    assert main([str(new), str(old), "--fail-on-worse"]) == 1  # a is worse that way round
    assert main([str(old), str(old), "--fail-on-worse"]) == 0


def test_one_seed_is_within_noise_and_bad_folders_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    old = _folder(tmp_path / "old", {"a": [0.1]})
    new = _folder(tmp_path / "new", {"a": [0.9]})
    assert main([str(old), str(new), "--fail-on-worse"]) == 0  # one seed each: no spread, no verdict
    assert "within noise" in capsys.readouterr().out
    assert main([str(old), str(tmp_path / "nowhere")]) == 2
    assert "no records/ folder in" in capsys.readouterr().err
    assert main([str(old), str(new), "--exact", "--fail-on-worse"]) == 2
