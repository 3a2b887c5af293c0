"""A grid of named problems that all cannot run here exits 2, naming each and why; some available: they run.

Threat: a script or array job that names its problems (``--problems block-vs``) on a machine without their data
sets. Before, it exited 0 with zero runs and an empty report, so a batch system counted it as done.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from suite.cli import run_all
from suite.data import locate

SMOKE = ["--methods", "rjmcmc-baseline", "--profile", "smoke", "--seeds", "1", "--eval-draws", "300", "--no-progress"]


@pytest.fixture
def no_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No data file anywhere: an empty TDBENCH_DATA and cache, no ../shared/data, no downloads."""
    monkeypatch.setenv(locate.ENV_VAR, str(tmp_path / "data"))
    monkeypatch.setenv(locate.CACHE_VAR, str(tmp_path / "cache"))
    monkeypatch.setenv(locate.OFFLINE_VAR, "1")
    monkeypatch.setattr(locate, "REPO_ROOT", tmp_path / "nowhere" / "repo")


def test_every_named_problem_unavailable_exits_2(tmp_path: Path, no_data: None, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "out"
    assert run_all(["--problems", "block-vs", *SMOKE, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "block-vs cannot run here" in err and "block_vs.csv" in err
    assert not list(out.glob("records/*.json")) and not (out / "index.html").exists()

    assert run_all(["--problems", "block-vs,factor-analysis", *SMOKE, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "none of the problems named can run here" in err
    assert "block-vs:" in err and "factor-analysis:" in err


def test_some_named_problems_available_run_and_the_others_are_named(
    tmp_path: Path, no_data: None, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "out"
    assert run_all(["--problems", "sas,block-vs", *SMOKE, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "problem block-vs is unavailable" in printed
    assert [path.name.split("__")[0] for path in out.glob("records/*.json")] == ["sas"]
