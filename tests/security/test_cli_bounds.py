"""Bounds of the command line (issue 36): ``--out`` never names the file system's root, a system folder or a folder
of the repository outside ``results/``; ``--time-budget`` has an upper bound. Refused with exit status 2 and the
reason while the arguments are parsed, by ``tdbench run``, ``run_all.py`` and ``tdbench report`` alike.

These tests only parse arguments (never run a grid): on code without the checks they fail without writing anything.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from suite.cli import build_tdbench_parser
from suite.cli.arguments import build_parser

REPO = Path(__file__).resolve().parents[2]
MAX_TIME_BUDGET_S = 7 * 24 * 3600.0  # suite.core.budget.MAX_TIME_BUDGET_S, as documented


def _parse(form: str, argv: list[str]) -> argparse.Namespace:
    """``argv`` parsed as ``form`` (``run_all.py``, ``tdbench run`` or ``tdbench report``) would parse it."""
    if form == "run_all.py":
        return build_parser().parse_args(argv)
    return build_tdbench_parser().parse_args([form.split()[1], *argv])


def _refused(form: str, argv: list[str], capsys: pytest.CaptureFixture) -> str:
    """The error of arguments that must be refused with exit status 2 (argparse's usage error), before any work."""
    with pytest.raises(SystemExit) as stop:
        _parse(form, argv)
    assert stop.value.code == 2
    return capsys.readouterr().err


@pytest.mark.parametrize("out", ["/", "/etc", "/usr/local/results", "/proc/self", "/var"])
@pytest.mark.parametrize("form", ["run_all.py", "tdbench run", "tdbench report"])
def test_out_is_refused_for_the_root_and_system_folders(out: str, form: str, capsys: pytest.CaptureFixture) -> None:
    err = _refused(form, [out] if form == "tdbench report" else ["--out", out], capsys)
    assert repr(out) in err and ("root of the file system" in err or "system folder" in err), err


@pytest.mark.parametrize("inside", ["suite", "tests/security", "methods/../problems"])
def test_out_inside_the_repository_but_outside_results_is_refused(inside: str, capsys: pytest.CaptureFixture) -> None:
    err = _refused("run_all.py", ["--out", str(REPO / inside)], capsys)
    assert "inside the repository" in err and "results/" in err, err


@pytest.mark.parametrize("out", ["results/quick", "/var/tmp/tdbench-results", "/tmp/tdbench-ci-smoke"])
def test_ordinary_results_folders_are_accepted(out: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    assert build_parser().parse_args(["--out", out]).out == Path(out)


def test_a_time_budget_beyond_seven_days_is_refused(capsys: pytest.CaptureFixture) -> None:
    err = _refused("run_all.py", ["--time-budget", "1e308"], capsys)
    assert "--time-budget" in err and "604800" in err, err
    assert build_parser().parse_args(["--time-budget", str(MAX_TIME_BUDGET_S)]).time_budget == MAX_TIME_BUDGET_S
    assert f"at most {MAX_TIME_BUDGET_S:.0f}" in " ".join(build_parser().format_help().split())


@pytest.mark.parametrize("value", ["inf", "nan", "-5", "0"])
def test_non_finite_and_non_positive_time_budgets_stay_refused(value: str, capsys: pytest.CaptureFixture) -> None:
    assert "--time-budget" in _refused("tdbench run", ["--time-budget", value], capsys)
