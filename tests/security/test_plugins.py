"""Plug-ins that raise, hang or exit (issue 51, H13-H15): a failed check or a failed run, never the end of a command.

H13: ``tdbench check`` printed a traceback when a method's ``supports()`` raised, and never finished on a method that
hangs. H14: a method calling ``sys.exit(0)`` (``--jobs 1`` or ``2``) or ``os._exit(0)`` made ``tdbench run`` exit 0
with no records and no report, and under ``--jobs 2`` one ``os._exit`` lost the healthy run beside it too. H15: an
installed plug-in whose ``supports()`` raises broke every ``tdbench run``, even one of built-in methods only.

Methods are registered in this process where the run or check happens in it; where the process boundary is what is
tested (worker processes, a method that ends its process), the misbehaving methods are a plug-in distribution on
``PYTHONPATH`` (a folder with a ``.dist-info``, no pip) and the command runs in a subprocess.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from suite.cli import check as check_command
from suite.cli import main
from suite.core import registry
from suite.core.method import Method
from suite.run import conformance, guards
from suite.run import parallel as par

ROOT = Path(__file__).resolve().parents[2]
SMOKE = ["--profile", "smoke", "--problems", "sas", "--seeds", "1", "--eval-draws", "300", "--no-progress"]

#: Set at the end of every test, so that a hanging method's abandoned thread returns.
RELEASE = threading.Event()


class RaisesInSupports(Method):
    """A method whose ``supports()`` raises on every problem."""

    def supports(self, problem):
        raise ValueError("cannot tell\nsecond line of the message")

    def run(self, problem, context):  # pragma: no cover - never runs: it applies nowhere
        raise AssertionError("a method whose supports() raised was run")


class Hangs(Method):
    """A method whose run never returns (until the test ends)."""

    def run(self, problem, context):
        RELEASE.wait()
        raise RuntimeError("released at the end of the test")


class CallsSysExit(Method):
    """A method that calls ``sys.exit(0)`` in its run."""

    def run(self, problem, context):
        with context.timer.phase("train"):
            sys.exit(0)


@pytest.fixture
def register(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str, type], None]]:
    """Registers methods for one test, in copies of the registry's tables; no method warned about yet."""
    registry.load_all()
    for table in ("_METHODS", "_PROBLEMS", "_ORIGINS"):
        monkeypatch.setattr(registry, table, dict(getattr(registry, table)))
    monkeypatch.setattr(guards, "_WARNED", set())
    RELEASE.clear()
    yield lambda name, cls: registry.register_method(name)(cls)
    RELEASE.set()


def _records(out: Path) -> dict[str, dict]:
    """The records in ``out`` by method."""
    records = [json.loads(path.read_text()) for path in sorted((out / "records").glob("*.json"))]
    return {record["method"]: record for record in records}


# --------------------------------------------------------------------------- H13: tdbench check


def test_check_fails_a_raising_supports_with_its_one_line_message(
    register: Callable[[str, type], None], capsys: pytest.CaptureFixture
) -> None:
    register("raises-in-supports", RaisesInSupports)
    assert main(["check", "raises-in-supports", "--problems", "sas"]) == 1  # no traceback: an exit status
    out = capsys.readouterr().out
    assert "FAIL  on sas: supports() raised ValueError: cannot tell\n" in out
    assert "second line" not in out
    assert "FAIL  supports() answers on every problem: " in out
    assert "FAIL  reproducible by seed: it applies to none of the problems checked (sas)" in out
    assert out.splitlines()[-1].startswith("0 of 7 checks passed or skipped, 7 failed")


def test_check_fails_a_hanging_method_for_overtime_and_ends(
    register: Callable[[str, type], None], capsys: pytest.CaptureFixture
) -> None:
    register("hangs", Hangs)
    assert check_command.build_parser("tdbench check").parse_args(["x"]).deadline == conformance.CHECK_DEADLINE_S
    started = time.monotonic()
    assert main(["check", "hangs", "--problems", "sas", "--deadline", "1"]) == 1
    assert time.monotonic() - started < 30
    lines = capsys.readouterr().out.splitlines()
    assert "PASS  on sas" not in lines  # supports() answered; the run is what hangs
    assert lines[1] == (
        "FAIL  valid result on sas: overtime: still running after 1 s (the deadline of one check), abandoned"
    )
    not_run = [line for line in lines[2:-1] if "not run: the check 'valid result on sas' ran past its deadline" in line]
    assert len(not_run) == len(lines) - 3 == 6, lines  # every later check, none of which ran the method again
    assert lines[-1].startswith("0 of 7 checks passed or skipped, 7 failed")


def test_check_fails_a_method_that_calls_sys_exit(
    register: Callable[[str, type], None], capsys: pytest.CaptureFixture
) -> None:
    register("calls-sys-exit", CallsSysExit)
    assert main(["check", "calls-sys-exit", "--problems", "sas"]) == 1
    out = capsys.readouterr().out
    assert "FAIL  valid result on sas: the method called sys.exit(0)" in out
    assert "FAIL  runs through the harness (on sas): record status 'failed': the method called sys.exit(0)" in out


# --------------------------------------------------------------------------- H14: a method that exits, in process


@pytest.mark.slow
def test_sys_exit_in_a_run_is_a_failed_run_and_the_grid_goes_on(
    register: Callable[[str, type], None], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    register("calls-sys-exit", CallsSysExit)
    argv = ["run", *SMOKE, "--methods", "calls-sys-exit,rjmcmc-baseline", "--jobs", "1", "--out", str(tmp_path)]
    assert main(argv) == 0
    records = _records(tmp_path)
    assert records["calls-sys-exit"]["status"] == "failed"
    assert records["calls-sys-exit"]["reason"] == "the method called sys.exit(0)"
    assert records["rjmcmc-baseline"]["status"] == "ok"
    assert (tmp_path / "index.html").is_file()
    assert "1 of 2 runs failed in their method" in capsys.readouterr().out


# --------------------------------------------------------------------------- H15: supports() raising while planning


@pytest.mark.slow
def test_a_plugin_whose_supports_raises_never_breaks_a_run(
    register: Callable[[str, type], None], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    register("raises-in-supports", RaisesInSupports)
    grid = ["run", *SMOKE, "--jobs", "1", "--out", str(tmp_path)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert main([*grid, "--methods", "rjmcmc-baseline"]) == 0  # the report plans every method, this one too
        assert main([*grid, "--methods", "raises-in-supports,rjmcmc-baseline"]) == 0  # named: it does not apply
    assert (tmp_path / "index.html").is_file()
    said = [str(w.message) for w in caught if issubclass(w.category, guards.PluginWarning)]
    assert len(said) == 1, said  # once per process, for both commands
    assert said[0].startswith("method 'raises-in-supports' (distribution ")
    assert "supports() raised ValueError: cannot tell on problem sas" in said[0]
    assert "tdbench check raises-in-supports" in said[0]
    assert "raises-in-supports: does not apply to 1 problem (sas)" in capsys.readouterr().out
    assert "| supports() raised ValueError: cannot tell |" in (tmp_path / "leaderboard_sas.md").read_text()
    assert set(_records(tmp_path)) == {"rjmcmc-baseline"}


def test_a_raising_supports_is_the_reason_a_method_does_not_apply(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(guards, "_WARNED", set())
    problem = registry.make_problem("sas")
    with pytest.warns(guards.PluginWarning, match="supports\\(\\) raised ValueError: cannot tell"):
        assert guards.support_reason(RaisesInSupports(), problem) == "supports() raised ValueError: cannot tell"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # named once: no second warning
        assert guards.support_reason(RaisesInSupports(), problem) == "supports() raised ValueError: cannot tell"


# --------------------------------------------------------------------------- H14: worker processes

#: A plug-in distribution whose methods end their process: ``os._exit(0)`` half a second into the run, and
#: ``sys.exit(0)``.
EXITING_PLUGIN = '''
import os
import sys
import time

from suite import Method


class ExitsProcess(Method):
    """Calls os._exit(0) half a second into its run."""

    def run(self, problem, context):
        time.sleep(0.5)
        os._exit(0)


class CallsSysExit(Method):
    """Calls sys.exit(0) in its run."""

    def run(self, problem, context):
        sys.exit(0)
'''

ENTRY_POINTS = """
[tdbench.methods]
exits-process = tdbench_exiting:ExitsProcess
calls-sys-exit = tdbench_exiting:CallsSysExit
"""


@pytest.fixture(scope="module")
def exiting_plugin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder for ``PYTHONPATH`` holding the plug-in package and its ``.dist-info`` (entry points, metadata)."""
    site = tmp_path_factory.mktemp("exiting-plugin")
    (site / "tdbench_exiting.py").write_text(textwrap.dedent(EXITING_PLUGIN))
    info = site / "tdbench_exiting-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tdbench-exiting\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(ENTRY_POINTS)
    return site


def _tdbench(arguments: list[str], site: Path, cwd: Path) -> subprocess.CompletedProcess:
    """``tdbench ARGUMENTS`` in a fresh interpreter that sees the plug-in."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)]), "OMP_NUM_THREADS": "1"}
    code = "import sys; from suite.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run(
        [sys.executable, "-c", code, *arguments], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def _said(done: subprocess.CompletedProcess) -> str:
    return f"exit {done.returncode}\nstdout:\n{done.stdout[-4000:]}\nstderr:\n{done.stderr[-4000:]}"


@pytest.mark.slow
def test_exiting_workers_lose_no_other_run_under_jobs_2(exiting_plugin: Path, tmp_path: Path) -> None:
    # calls-sys-exit returns at once, and exits-process starts in its worker beside rjmcmc-baseline's 2 s run: it
    # ends its worker 0.5 s in and breaks the pool while rjmcmc-baseline is in flight.
    methods = "calls-sys-exit,rjmcmc-baseline,exits-process"
    arguments = ["run", *SMOKE, "--methods", methods, "--time-budget", "2", "--jobs", "2", "--out", str(tmp_path)]
    done = _tdbench(arguments, exiting_plugin, tmp_path)
    assert done.returncode == 0, _said(done)
    assert "3 runs, 2 at a time in worker processes, 1 thread(s) each" in done.stdout, _said(done)
    records = _records(tmp_path)
    assert records["rjmcmc-baseline"]["status"] == "ok", records["rjmcmc-baseline"]["reason"]
    assert records["exits-process"]["status"] == "failed"
    assert records["exits-process"]["reason"] == "the worker process exited with status 0 during the run"
    assert records["calls-sys-exit"]["status"] == "failed"
    assert records["calls-sys-exit"]["reason"] == "the method called sys.exit(0)"
    assert (tmp_path / "index.html").is_file()
    assert "Traceback" not in done.stderr, _said(done)


@pytest.mark.slow
def test_a_plugin_that_ends_its_process_under_jobs_1_is_a_failed_run(exiting_plugin: Path, tmp_path: Path) -> None:
    arguments = ["run", *SMOKE, "--methods", "exits-process,rjmcmc-baseline", "--jobs", "1", "--out", str(tmp_path)]
    done = _tdbench(arguments, exiting_plugin, tmp_path)
    assert done.returncode == 0, _said(done)
    records = _records(tmp_path)
    assert records["rjmcmc-baseline"]["status"] == "ok", records["rjmcmc-baseline"]["reason"]
    assert records["exits-process"]["status"] == "failed"
    assert records["exits-process"]["reason"] == "the worker process exited with status 0 during the run"
    assert (tmp_path / "index.html").is_file()
    assert "1 of 2 runs failed in their method" in done.stdout, _said(done)


def test_the_parallel_run_line_says_how_many_at_a_time(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_workers(specs: list[par.RunSpec], jobs: int, threads: int) -> Iterator:
        for spec in specs:  # only the line said before the workers start is tested here
            yield spec, "failed", "not run in this test"

    monkeypatch.setattr(par, "run_in_workers", no_workers)
    monkeypatch.setattr(par, "usable_cores", lambda: 2)
    main(["run", *SMOKE, "--seeds", "2", "--methods", "rjmcmc-baseline", "--jobs", "2", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert "2 runs, 2 at a time in worker processes, " in out
    assert "--jobs 1: one at a time" not in out


@pytest.mark.parametrize(
    ("exit_code", "reason"),
    [
        (0, "the worker process exited with status 0 during the run"),
        (-9, "the worker process was killed by SIGKILL during the run (out of memory?)"),
        (-15, "the worker process was killed by SIGTERM during the run"),
        (None, "the worker process died during the run"),
    ],
)
def test_how_a_worker_process_ended_is_the_reason_of_its_run(exit_code: int | None, reason: str) -> None:
    assert par.died_reason(exit_code) == reason
