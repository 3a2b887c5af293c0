"""Behaviours issue 51 asked to decide, each with its decision checked (docs/running.md, "What a run guarantees").

- Permissions: every file the suite writes (records, draws, the parquet table, the report) has the mode of an
  ordinary new file, 0666 less the umask; records and ``results.parquet`` were 0600, the report files 0644.
- A ``KeyboardInterrupt`` raised inside a method stops the grid with status 130, as Ctrl-C does: Python delivers
  Ctrl-C as that exception wherever the program is, so the suite cannot tell one raised by a method from the
  user's, and stopping is the reading that never ignores the user. Finished runs keep their records, the
  interrupted run gets none, and the same command resumes.
- A hard limit: a timed run still running at 3 x its budget (at least 60 s more) is ended and recorded as failed
  for overtime (:mod:`suite.run.hard_stop`).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from suite.cli import main
from suite.core import registry
from suite.core.method import Method
from suite.results import records as rec
from suite.run import hard_stop

SMOKE = ["--profile", "smoke", "--problems", "sas", "--seeds", "1", "--eval-draws", "300", "--no-progress"]


class RaisesKeyboardInterrupt(Method):
    """A method whose run raises KeyboardInterrupt (as if Ctrl-C arrived during it)."""

    def run(self, problem, context):
        raise KeyboardInterrupt


@pytest.fixture
def interrupting_method(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The method registered in copies of the registry's tables."""
    registry.load_all()
    for table in ("_METHODS", "_PROBLEMS", "_ORIGINS"):
        monkeypatch.setattr(registry, table, dict(getattr(registry, table)))
    registry.register_method("raises-keyboard-interrupt")(RaisesKeyboardInterrupt)
    yield


@pytest.fixture
def umask_022() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def test_every_file_a_run_writes_has_an_ordinary_file_s_mode(tmp_path: Path, umask_022: None) -> None:
    out = tmp_path / "out"
    assert main([*SMOKE, "--methods", "rjmcmc-naive", "--jobs", "1", "--out", str(out)]) == 0
    written = [p for p in out.rglob("*") if p.is_file() and "locks" not in p.parts]
    kinds = {p.suffix for p in written}
    assert {".json", ".parquet", ".html", ".md", ".csv", ".npz"} <= kinds, kinds
    modes = {p.relative_to(out).as_posix(): stat.S_IMODE(p.stat().st_mode) for p in written}
    assert set(modes.values()) == {0o644}, modes


def test_a_keyboard_interrupt_inside_a_method_stops_the_grid_with_130_and_keeps_finished_runs(
    tmp_path: Path, interrupting_method: None, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    argv = [*SMOKE, "--methods", "rjmcmc-naive,raises-keyboard-interrupt", "--jobs", "1", "--out", str(out)]
    assert main(argv) == 130
    assert "run the same command again to resume" in capsys.readouterr().err
    records = sorted(p.name for p in (out / "records").glob("*.json"))
    assert [name.split("__")[1] for name in records] == ["rjmcmc-naive"]


class IgnoresItsBudget(Method):
    """A method whose loop never asks ``context.stop_due()``."""

    def run(self, problem, context):
        while True:
            sum(range(1000))


def test_a_method_that_ignores_its_budget_is_ended_at_the_hard_limit_and_recorded_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No hard stop: under ``--time-budget 2`` such a method was still running when killed at 90 s."""
    registry.load_all()
    for table in ("_METHODS", "_PROBLEMS", "_ORIGINS"):
        monkeypatch.setattr(registry, table, dict(getattr(registry, table)))
    registry.register_method("ignores-its-budget")(IgnoresItsBudget)
    monkeypatch.setattr(hard_stop, "HARD_LIMIT_MIN_EXTRA_S", 1.0)  # 3 x 0.5 s or 1.5 s: 1.5 s
    out = tmp_path / "out"
    argv = [*SMOKE, "--methods", "ignores-its-budget", "--time-budget", "0.5", "--jobs", "1", "--out", str(out)]
    assert main(argv) == 0
    (record,) = rec.load_records(out)
    assert record["status"] == "failed" and record["reason"].startswith("overtime: still running after 1.5 s")
    # ended at its 1.5 s limit, where the run still went at 90 s; 30 s leaves room for a loaded machine
    assert record["budget"]["clock_s"] < 30
