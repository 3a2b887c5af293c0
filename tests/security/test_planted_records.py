"""Records decide too little (issue 51, round two): a metric's direction comes from the code, a record nested
thousands deep is passed over, and an ``--option`` value nested thousands deep is refused with exit 2 in a short
message.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pandas as pd
import pytest

from suite import cli
from suite.report.leaderboard import higher_is_better, long_table, summary_table
from suite.results import records as rec
from suite.run import spec
from tests.security.test_records import _record, _write


def _board(out: Path) -> list[str]:
    """The methods of ``toy``'s leaderboard in ranked order (warnings recorded, not raised)."""
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        records = rec.load_records(out)
    table = summary_table(long_table(records), "toy", records)
    return list(table["method"])


def test_a_planted_record_cannot_turn_a_leaderboard_upside_down(tmp_path: Path) -> None:
    """H1: ``higher_is_better: [model_prob_tv]`` in one record (sorted first) made the worst method the best."""
    for seed in (0, 1):
        _write(tmp_path, _record(seed=seed, tv=0.1 + 0.01 * seed, method="mf"))
        _write(tmp_path, _record(seed=seed, tv=0.4 + 0.01 * seed, method="iaf"))
    planted = _record(seed=0, tv=0.9, method="aaa-planted")
    planted["problem_facts"]["higher_is_better"] = ["model_prob_tv"]
    path = _write(tmp_path, planted)
    assert _board(tmp_path)[0] == "mf"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rec.load_records(tmp_path)
    assert any(str(path) in str(w.message) and "lower is better" in str(w.message) for w in caught)


def test_the_suite_s_metrics_keep_their_direction_whatever_the_records_state() -> None:
    """Records that leave ``edge_f1`` out of ``higher_is_better`` still rank it higher-is-better."""
    record = _record()
    record["problem_facts"]["higher_is_better"] = []
    higher = higher_is_better("toy", [record])
    assert "edge_f1" in higher and "auroc" in higher and "model_prob_tv" not in higher
    record["problem_facts"]["higher_is_better"] = ["my_plugin_score"]  # a plug-in problem's own metric
    assert "my_plugin_score" in higher_is_better("toy", [record])


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize("depth", [100, 5000])
def test_a_record_nested_thousands_deep_is_passed_over_by_every_reader(tmp_path: Path, depth: int) -> None:
    """H6: a record nested about 5,000 deep crashed every ``tdbench run`` into its folder (RecursionError)."""
    _write(tmp_path, _record(seed=0))
    bad = rec.records_dir(tmp_path) / "toy__mf__seed1__0123456789.json"
    bad.write_text(json.dumps(_record(seed=1))[:-1] + f', "diagnostics": {{"x": {_nested(depth)}}}}}')
    assert spec.profiles_in(tmp_path) == {"quick"}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loaded = rec.load_records(tmp_path)
    assert [r["seed"] for r in loaded] == [0]
    assert any(str(bad) in str(w.message) and "deep" in str(w.message) for w in caught)


def test_an_option_value_nested_60000_deep_is_refused_with_exit_2_in_a_short_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """H7: a traceback and exit 1, and a refusal that repeated the whole 120 KB value twice."""
    argv = ["run", "--problems", "sas", "--methods", "rjmcmc-baseline", "--dry-run", "--out", str(tmp_path / "o")]
    code = cli.main([*argv, "--option", f"rjmcmc-baseline.num_chains={_nested(60000)}"])
    err = capsys.readouterr().err
    assert code == 2
    # a refusal quotes at most 120 characters of the flag and 240 of the option's message; before, 240,000
    assert "deep" in err and "more characters" in err and len(err) < 2000, err[:500]
    code = cli.main([*argv, "--option", f"rjmcmc-baseline.num_chains={'7' * 100000}x"])
    err = capsys.readouterr().err
    assert code == 2 and "num_chains" in err and len(err) < 2000, err[:500]


def test_records_of_two_configurations_are_two_rows_never_one_average(tmp_path: Path) -> None:
    """H16: ``--seeds 2`` and ``--seeds 3 --option ...num_chains=32`` into one folder gave one row saying 3 runs,
    whose TV was the mean of all 5 records."""
    for seed in (0, 1):
        record = _record(seed=seed, tv=0.1)
        record["run_config"] = {"num_draws": 4096, "method_options": {"num_chains": None}}
        _write(tmp_path, record)
    for seed in (0, 1, 2):
        record = _record(seed=seed, tv=0.3)
        record["config_hash"] = "fedcba9876"
        record["run_config"] = {"num_draws": 500, "method_options": {"num_chains": 32}}
        _write(tmp_path, record)
    assert cli.main(["report", str(tmp_path)]) == 0
    board = pd.read_csv(tmp_path / "leaderboard_toy.csv").set_index("method")
    assert board.loc["mf@01234567", ["runs", "model_prob_tv", "config_hash"]].tolist() == [2, 0.1, "0123456789"]
    assert board.loc["mf@fedcba98", ["runs", "model_prob_tv", "config_hash"]].tolist() == [3, 0.3, "fedcba9876"]
    text = (tmp_path / "leaderboard_toy.md").read_text()
    assert "mf@fedcba98: method_options.num_chains=32, num_draws=500" in text
