"""SIGINT and SIGTERM stop a grid within seconds, write no record for an interrupted run, and the rerun resumes.

Threat: ``timeout -s INT`` (or a scheduler's SIGTERM) sent to ``run_all.py`` alone. Before, with ``--jobs 2`` the
command printed "Interrupted" but waited for the runs in its workers (their records written after the signal),
and a run with a long budget kept it alive until the budget was spent; SIGTERM killed the command outright (exit
status -15, no message). Each test starts the real command in a subprocess with runs of a 60 s budget, signals it
once a run is under way, and asks for the exit status within seconds.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not hasattr(signal, "SIGKILL") or sys.platform == "win32", reason="POSIX signals"),
]

REPO = Path(__file__).resolve().parents[2]
#: Seconds from the signal to the command's exit that the tests allow (it takes 2-4 s: workers end within 2 s
#: of SIGTERM, and the interpreter then unloads torch).
EXIT_WITHIN_S = 15.0
#: Runs of a fast problem and method under a budget far longer than the tests wait.
GRID = ["--problems", "sas", "--methods", "rjmcmc-baseline", "--profile", "smoke", "--eval-draws", "300"]
GRID += ["--no-progress", "--seeds", "2"]


def _default_signals() -> None:
    """In the child: SIGINT and SIGTERM at their defaults, even if this test process was started ignoring them."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


class Command:
    """``run_all.py ARGS`` in a subprocess, its output collected line by line."""

    def __init__(self, args: list[str], group: bool = False) -> None:
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(REPO)}
        self.process = subprocess.Popen(
            [sys.executable, "run_all.py", *args],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            preexec_fn=_default_signals,
            start_new_session=group,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def wait_for(self, text: str, timeout_s: float = 90.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not any(text in line for line in self.lines):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.kill()
                pytest.fail(f"{text!r} never printed:\n{self.output}")
            time.sleep(0.1)

    def signal_and_wait(self, signum: int, group: bool = False) -> tuple[int, float]:
        """Send ``signum`` (to the command alone, or to its process group); (exit status, seconds to exit)."""
        sent = time.monotonic()
        if group:
            os.killpg(self.process.pid, signum)
        else:
            os.kill(self.process.pid, signum)
        try:
            status = self.process.wait(timeout=EXIT_WITHIN_S)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"still running {EXIT_WITHIN_S:g} s after {signal.Signals(signum).name}:\n{self.output}")
        self._reader.join(5)
        return status, time.monotonic() - sent

    def kill(self) -> None:
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                self.process.kill()
        self.process.wait()


def _records(out: Path) -> list[Path]:
    return sorted((out / "records").glob("*.json"))


def _no_leftover_workers(out: Path) -> None:
    """No process still holds a claim of the folder (an orphaned worker would)."""
    locks = out / "locks"
    if not locks.is_dir():
        return
    import fcntl

    for path in locks.glob("*.lock"):
        with path.open("a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises if a live process holds the run
            fcntl.flock(handle, fcntl.LOCK_UN)


def _interrupt(
    tmp_path: Path, extra: list[str], started: str, signum: int, group: bool = False, budget: str = "60"
) -> Path:
    """Start a 2-run grid, signal it once ``started`` is printed and a run is under way; check the stop."""
    out = tmp_path / "out"
    command = Command([*GRID, "--time-budget", budget, "--out", str(out), *extra], group=group)
    command.wait_for(started)
    time.sleep(3.0)  # the runs (or the workers' imports) are under way
    status, seconds = command.signal_and_wait(signum, group=group)
    where = "to the group" if group else "to the parent"
    print(f"{signal.Signals(signum).name} {where}: exit {status} after {seconds:.1f} s")
    assert status == 128 + signum, command.output
    assert "Interrupted" in command.output and "run the same command again" in command.output
    assert "Traceback" not in command.output, command.output
    time.sleep(2.0)  # a worker left running would write its record now
    assert _records(out) == [], "a run interrupted before its end was recorded"
    _no_leftover_workers(out)
    return out


def _resume(out: Path, extra: list[str], budget: str) -> None:
    """The same command again finishes both runs."""
    rerun = subprocess.run(
        [sys.executable, "run_all.py", *GRID, "--time-budget", budget, "--out", str(out), *extra],
        cwd=REPO,
        env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert len(_records(out)) == 2


def test_sigint_to_the_parent_stops_worker_processes_and_the_rerun_resumes(tmp_path: Path) -> None:
    out = _interrupt(tmp_path, ["--jobs", "2"], "worker processes", signal.SIGINT, budget="8")
    _resume(out, ["--jobs", "2"], budget="8")


def test_sigterm_with_one_job_stops_the_run_in_the_command_itself(tmp_path: Path) -> None:
    _interrupt(tmp_path, ["--jobs", "1"], "Profile smoke", signal.SIGTERM)


def test_ctrl_c_to_the_whole_group_is_handled_once_by_the_parent(tmp_path: Path) -> None:
    _interrupt(tmp_path, ["--jobs", "2"], "worker processes", signal.SIGINT, group=True)


def test_sigterm_stops_a_grid_on_a_local_dask_cluster(tmp_path: Path) -> None:
    pytest.importorskip("distributed")
    _interrupt(tmp_path, ["--jobs", "2", "--executor", "dask"], "runs as tasks on", signal.SIGTERM)
