"""Claims on runs (``flock`` on OUT/locks/<stem>.lock) and exclusive record writes: no run runs or is recorded twice."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from suite import cli
from suite.results import records as rec
from suite.run.claims import LOCKS_DIR, RunClaim, lock_path, remove_empty_locks_dir

ROOT = Path(__file__).resolve().parents[3]
NAME = "sas__rjmcmc-baseline__seed0__0123456789.json"
GRID = ["--profile", "smoke", "--problems", "sas", "--methods", "rjmcmc-baseline,trj", "--seeds", "3"]
GRID_SIZE = 6
QUIET = ["--eval-draws", "300", "--jobs", "1", "--no-progress"]
#: Takes the claim of argv[2] in folder argv[1], says so, and holds it until killed.
HOLDER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from suite.run.claims import RunClaim

    claim = RunClaim(Path(sys.argv[1]), sys.argv[2])
    print("held" if claim.acquire() else "refused", flush=True)
    time.sleep(300)
    """
)


def key(seed: int = 0) -> rec.RunKey:
    return rec.RunKey("sas", "rjmcmc-baseline", seed, {"profile": "smoke"})


def record(seed: int = 0, **extra: object) -> dict[str, object]:
    """A minimal valid record of ``key(seed)``."""
    return {"problem": "sas", "method": "rjmcmc-baseline", "seed": seed, "status": "ok", "metrics": {}, **extra}


def _temporaries(out: Path) -> list[Path]:
    return [path for path in out.rglob("*") if path.name.startswith(".") and path.name.endswith(".tmp")]


def test_lock_path_is_the_record_stem_under_locks(tmp_path: Path) -> None:
    assert lock_path(tmp_path, NAME) == tmp_path / LOCKS_DIR / "sas__rjmcmc-baseline__seed0__0123456789.lock"
    assert RunClaim(tmp_path, NAME).path == lock_path(tmp_path, NAME)


def test_a_claim_is_acquired_and_released_in_one_process(tmp_path: Path) -> None:
    claim = RunClaim(tmp_path, NAME)
    assert not claim.held
    assert claim.acquire() and claim.held
    assert claim.acquire()  # taking a held claim again is a no-op
    assert claim.path.is_file()
    assert not RunClaim(tmp_path, NAME).acquire()  # another claim object (another open file) is refused
    claim.release()
    assert not claim.held
    assert claim.path.is_file()  # not finished: the lock file stays, unlocked
    other = RunClaim(tmp_path, NAME)
    assert other.acquire()
    other.release()
    claim.release()  # releasing an unheld claim does nothing


@pytest.mark.slow
def test_a_claim_held_by_another_process_is_refused_until_that_process_dies(tmp_path: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(tmp_path), NAME], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "held"
        claim = RunClaim(tmp_path, NAME)
        assert not claim.acquire() and not claim.held
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
        assert claim.path.is_file()  # the killed holder left its lock file, but not its lock
        assert claim.acquire() and claim.held
        claim.release(finished=True)
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait(timeout=30)
        if holder.stdout is not None:
            holder.stdout.close()


def test_a_finished_claim_removes_its_lock_file_and_then_the_empty_locks_folder(tmp_path: Path) -> None:
    first, second = RunClaim(tmp_path, NAME), RunClaim(tmp_path, NAME.replace("seed0", "seed1"))
    assert first.acquire() and second.acquire()
    first.release(finished=True)
    assert not first.path.exists() and second.path.is_file()
    remove_empty_locks_dir(tmp_path)  # another lock file is there: the folder stays
    assert (tmp_path / LOCKS_DIR).is_dir() and second.path.is_file()
    second.release(finished=True)
    remove_empty_locks_dir(tmp_path)
    assert not (tmp_path / LOCKS_DIR).exists()
    remove_empty_locks_dir(tmp_path)  # no folder: nothing to do


def test_an_exclusive_write_never_replaces_a_record(tmp_path: Path) -> None:
    path = rec.write_record(tmp_path, key(), record(note="first"), exclusive=True)
    assert path == rec.record_path(tmp_path, key())
    first = path.read_bytes()
    with pytest.raises(rec.RecordExists) as caught:
        rec.write_record(tmp_path, key(), record(note="second"), exclusive=True)
    assert isinstance(caught.value, FileExistsError) and caught.value.filename == str(path)
    assert path.read_bytes() == first
    assert json.loads(first)["note"] == "first"
    assert _temporaries(tmp_path) == []
    assert sorted(p.name for p in rec.records_dir(tmp_path).iterdir()) == [path.name]


def test_a_plain_write_replaces_a_record(tmp_path: Path) -> None:
    path = rec.write_record(tmp_path, key(), record(note="first"), exclusive=True)
    assert rec.write_record(tmp_path, key(), record(note="second"), exclusive=False) == path
    assert json.loads(path.read_text())["note"] == "second"
    assert _temporaries(tmp_path) == []


def _count(pattern: str, text: str) -> int:
    """The number a count line starts with, or 0 when the line is absent."""
    match = re.search(pattern, text)
    return int(match.group(1)) if match else 0


@pytest.mark.slow
def test_two_runs_started_together_on_one_folder_split_the_grid(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "out"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "run_all.py", *GRID, *QUIET, "--out", str(out)]
    procs = [
        subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    results = [proc.communicate(timeout=300) for proc in procs]
    executed = []
    for proc, (stdout, stderr) in zip(procs, results, strict=True):
        assert proc.returncode == 0, stdout + stderr
        planned = _count(r"Profile smoke: (\d+) runs", stdout)
        assert planned == GRID_SIZE
        done_before = _count(rf"(\d+) of {GRID_SIZE} runs already have records in", stdout)
        left = _count(rf"(\d+) of {GRID_SIZE} runs are being run by another process into .*; left to it", stdout)
        executed.append(planned - done_before - left)
    assert sum(executed) == GRID_SIZE, (executed, [stdout for stdout, _ in results])

    capsys.readouterr()
    assert cli.main([*GRID, *QUIET, "--out", str(out), "--dry-run"]) == 0
    keys = [json.loads(line)["key"] for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert sorted(path.stem for path in rec.records_dir(out).glob("*.json")) == sorted(keys)
    records = [json.loads(path.read_text()) for path in rec.records_dir(out).glob("*.json")]
    assert len({(r["problem"], r["method"], r["seed"]) for r in records}) == GRID_SIZE
    assert _temporaries(out) == []
    assert not list(out.glob(f"{LOCKS_DIR}/*.lock"))  # every claim ended with its record
