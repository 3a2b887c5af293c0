"""Worker processes of ``run_all.py`` never outlive it, whenever it is killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from suite.run import parallel as par
from tests.run_specs import smoke_spec

ROOT = Path(__file__).resolve().parents[3]
#: Generous: a worker killed in its first seconds ends only once it has imported the suite and armed its watchdog
#: (suite/run/parallel.py), which took over 20 s on a 2-core machine running two other jobs. Waited only on survivors.
GONE_WITHIN_S = 90.0


def _marked(marker: str) -> list[int]:
    """Live (non-zombie) processes whose environment holds ``marker``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes()
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker.encode() in environ and state not in ("Z", "X"):
            found.append(int(entry))
    return found


def _workers_of(parent: int, marker: str) -> list[int]:
    """Pool workers of ``parent`` (not its resource tracker): spawned by it, or forked by its fork server."""
    parents, commands = {}, {}
    for pid in _marked(marker):
        try:
            parents[pid] = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
            commands[pid] = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
    servers = {pid for pid, ppid in parents.items() if ppid == parent and b"forkserver" in commands[pid]}
    spawned = [pid for pid, ppid in parents.items() if ppid == parent and b"spawn_main" in commands[pid]]
    return spawned + [pid for pid, ppid in parents.items() if ppid in servers]


def _kill_survivors(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs /proc (Linux)")
@pytest.mark.parametrize("kill_at", ["0.3", "1", "2", "3", "first-worker"])
def test_killing_run_all_ends_its_workers(tmp_path: Path, kill_at: str) -> None:
    """``kill -9`` of the parent at any early moment leaves no worker running and no record written afterwards."""
    marker = f"TDBENCH_TEST_{uuid.uuid4().hex}"
    cmd = [sys.executable, "run_all.py", "--profile", "smoke", "--problems", "sas", "--methods", "rjmcmc-baseline"]
    cmd += ["--seeds", "12", "--eval-draws", "300", "--out", str(tmp_path), "--no-progress", "--jobs", "2"]
    env = {**os.environ, "TDBENCH_TEST_MARKER": marker}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        if kill_at == "first-worker":
            deadline = time.monotonic() + 120
            while not _workers_of(proc.pid, marker) and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.02)
            assert _workers_of(proc.pid, marker), "no worker process appeared"
        else:
            time.sleep(float(kill_at))
        assert proc.poll() is None, "run_all.py finished before the kill: make the plan longer"
        proc.kill()  # the parent alone, as `kill -9 <pid>` does: its workers must notice by themselves
        proc.wait()
        records = tmp_path / "records"
        at_kill = {p.name for p in records.glob("*.json")}
        deadline = time.monotonic() + GONE_WITHIN_S
        survivors = _marked(marker)
        while survivors and time.monotonic() < deadline:
            time.sleep(0.1)
            survivors = _marked(marker)
        assert not survivors, f"processes outlived the killed run_all.py: {survivors}"
        # A worker may have been renaming a finished record in the instant of the kill; nothing starts afterwards.
        after = {p.name for p in records.glob("*.json")}
        assert len(after - at_kill) <= 2, f"records written after the kill: {sorted(after - at_kill)}"
        time.sleep(1.0)
        assert {p.name for p in records.glob("*.json")} == after
        assert len(after) < 12, "every run finished: the kill came too late to test anything"
    finally:
        if proc.poll() is None:
            proc.kill()
        _kill_survivors(_marked(marker))


@pytest.mark.slow
def test_a_worker_without_its_parent_ends_itself() -> None:
    """The check every worker runs before a run and before writing its record: a changed parent ends the process."""
    assert par.parent_alive(os.getppid())
    assert not par.parent_alive(os.getppid() + 1_000_000)
    assert par.parent_alive()  # this process is no worker: serial runs never stop themselves
    code = (
        "import os; from suite.run import parallel as par; "
        "par._exit_if_orphaned(os.getppid() + 1_000_000); print('still alive')"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == par.ORPHAN_EXIT_CODE and "still alive" not in done.stdout


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc (Linux)")
def test_dead_workers_cost_no_run(tmp_path: Path) -> None:
    """Killing the workers breaks the pool: the runs they had run again, each alone, and the others in a new pool.

    Every run is reported once and recorded, and nothing is raised (before issue 51 the runs in flight and those
    not yet handed out were failed without a record).
    """
    from suite.cli import grid_from_argv
    from suite.run import plan_grid

    argv = ["--problems", "sas", "--methods", "rjmcmc-baseline", "--profile", "smoke", "--seeds", "6"]
    plan = plan_grid(*grid_from_argv([*argv, "--no-progress", "--eval-draws", "300", "--out", str(tmp_path)])).runs
    specs = [smoke_spec(run.key, tmp_path, method_settings=run.method.options(), jobs=2) for run in plan]
    outcomes = []
    for outcome in par.run_in_workers(specs, jobs=2, threads=1):
        if not outcomes:
            _kill_survivors(_workers_of(os.getpid(), ""))
        outcomes.append(outcome)
    assert sorted(spec.key.seed for spec, _, _ in outcomes) == list(range(6))
    assert [reason for _, status, reason in outcomes if status != "ok"] == []
    assert len(list(tmp_path.glob("records/*.json"))) == 6
