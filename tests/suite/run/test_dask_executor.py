"""``--executor dask`` on a real loopback cluster: a ``dask scheduler`` and two ``dask worker`` processes.

Every test here runs the real command line in a subprocess against real Dask processes (the local pool's
reference grid runs in process): the same records as the local pool, a worker SIGKILLed mid-grid, the client
SIGKILLed mid-grid, and a LocalCluster started by the command itself.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("distributed")
from distributed import Client

from suite.cli import main
from suite.run.dask_executor import START_TOPIC
from tests.run_specs import smoke_spec

REPO = Path(__file__).resolve().parents[3]
DASK = [sys.executable, "-m", "distributed.cli.dask_scheduler"]
WORKER = [sys.executable, "-m", "distributed.cli.dask_worker"]
#: Several problems and methods, seconds per run in the smoke profile.
SMOKE_GRID = [
    "--profile",
    "smoke",
    "--problems",
    "sas,block-vs-simulated",
    "--methods",
    "rjmcmc-baseline,trj,mif",
    "--seeds",
    "1",
]
#: Runs of a few seconds each (quick profile under a time budget), so that a kill lands mid-run.
SLOW_GRID = ["--problems", "sas", "--methods", "rjmcmc-baseline", "--seeds", "4", "--time-budget", "3"]

pytestmark = pytest.mark.slow


def _env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(REPO)}


def _wait_for(condition, timeout_s: float, what: str, interval_s: float = 0.1):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")


@pytest.fixture(scope="module")
def loopback_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A scheduler and two single-threaded workers on 127.0.0.1, started with Dask's own commands."""
    folder = tmp_path_factory.mktemp("cluster")
    scheduler_file = folder / "scheduler.json"
    processes = [
        subprocess.Popen(
            [*DASK, "--host", "127.0.0.1", "--port", "0", "--scheduler-file", str(scheduler_file), "--no-dashboard"],
            env=_env(),
            cwd=folder,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    ]
    try:
        _wait_for(scheduler_file.is_file, 60, "the scheduler file")
        address = _wait_for(lambda: json.loads(scheduler_file.read_text() or "{}").get("address"), 30, "the address")
        for name in ("w1", "w2"):
            processes.append(
                subprocess.Popen(
                    [*WORKER, address, "--nthreads", "1", "--name", name, "--no-dashboard", "--host", "127.0.0.1"],
                    env=_env(),
                    cwd=folder,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        with Client(address, timeout=30) as client:
            client.wait_for_workers(2, timeout=90)
        yield address
    finally:
        for process in reversed(processes):
            process.kill()
        for process in processes:
            process.wait(timeout=30)


def _run(args: list[str], out: Path, timeout_s: float = 300) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "run_all.py", "--no-progress", "--out", str(out), *args]
    return subprocess.run(command, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=timeout_s)


def _records(out: Path) -> dict[str, dict]:
    return {path.name: json.loads(path.read_text()) for path in sorted((out / "records").glob("*.json"))}


def _metrics(record: dict) -> dict:
    return {name: value for name, value in record["metrics"].items() if name != "walltime_s"}


def _temporaries(out: Path) -> list[Path]:
    return [path for path in out.rglob(".*") if path.name.endswith(".tmp")]


def test_a_grid_on_the_cluster_gives_the_local_pool_s_records(
    loopback_cluster: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The local pool's reference grid runs in process (its process boundary is not under test here).
    assert main([*SMOKE_GRID, "--jobs", "2", "--no-progress", "--out", str(tmp_path / "local")]) == 0
    capsys.readouterr()
    remote = _run([*SMOKE_GRID, "--executor", "dask", "--scheduler", loopback_cluster], tmp_path / "dask")
    assert remote.returncode == 0, remote.stderr
    assert "6 runs as tasks on the Dask scheduler at" in remote.stdout
    expected, found = _records(tmp_path / "local"), _records(tmp_path / "dask")
    assert sorted(found) == sorted(expected) and len(found) == 6
    for name, record in found.items():
        assert record["status"] == "ok", record["reason"]
        assert _metrics(record) == _metrics(expected[name]), name
        assert record["draws"]["sha256"] == expected[name]["draws"]["sha256"]
        assert (tmp_path / "dask" / record["draws"]["path"]).is_file()
        assert record["executor"]["attempts"] == 1
        assert record["executor"]["scheduler"] == loopback_cluster
    with Client(loopback_cluster, timeout=30) as client:
        workers = set(client.scheduler_info()["workers"])
    assert {record["executor"]["worker"] for record in found.values()} <= workers
    assert (tmp_path / "dask" / "index.html").is_file()
    assert not _temporaries(tmp_path / "dask")
    again = _run([*SMOKE_GRID, "--executor", "dask", "--scheduler", loopback_cluster], tmp_path / "dask")
    assert again.returncode == 0 and "6 of 6 runs already have records" in again.stdout
    assert "runs as tasks" not in again.stdout  # nothing was sent


def test_a_killed_worker_s_run_is_retried_and_recorded_once(loopback_cluster: str, tmp_path: Path) -> None:
    out = tmp_path / "faults"
    command = [sys.executable, "run_all.py", "--no-progress", "--out", str(out), *SLOW_GRID]
    command += ["--executor", "dask", "--scheduler", loopback_cluster]
    client_process = subprocess.Popen(command, cwd=REPO, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    with Client(loopback_cluster, timeout=30) as client:
        started: list[dict] = []
        client.subscribe_topic(START_TOPIC, lambda event: started.append(event[1]))
        _wait_for(lambda: started, 120, "a run to start", interval_s=0.05)
        victim = started[0]
        time.sleep(1.0)  # well inside the run (3 s of sampling after its start)
        os.kill(victim["pid"], signal.SIGKILL)
        stdout, stderr = client_process.communicate(timeout=300)
        assert client_process.returncode == 0, stderr.decode()
        client.wait_for_workers(2, timeout=60)  # the nanny restarts the killed process
    records = _records(out)
    assert len(records) == 4 and len(list((out / "records").iterdir())) == 4
    assert all(record["status"] == "ok" for record in records.values()), stdout.decode()
    killed = records[victim["run"] + ".json"]
    assert killed["executor"]["attempts"] == 2
    assert [r["executor"]["attempts"] for r in records.values()].count(1) == 3
    assert not _temporaries(out)


def test_a_killed_client_loses_nothing_and_the_same_command_resumes(loopback_cluster: str, tmp_path: Path) -> None:
    out = tmp_path / "resume"
    grid = [*SLOW_GRID, "--seeds", "6", "--time-budget", "2", "--executor", "dask", "--scheduler", loopback_cluster]
    command = [sys.executable, "run_all.py", "--no-progress", "--out", str(out), *grid]
    client_process = subprocess.Popen(command, cwd=REPO, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _wait_for(lambda: len(list((out / "records").glob("*.json"))) >= 2, 180, "two records")
    client_process.send_signal(signal.SIGKILL)
    client_process.wait(timeout=30)
    before = {name: (out / "records" / name).read_bytes() for name in _records(out)}
    assert 2 <= len(before) < 6
    finished = _run(grid, out)
    assert finished.returncode == 0, finished.stderr
    assert f"{len(before)} of 6 runs already have records" in finished.stdout
    after = _records(out)
    assert len(after) == 6 and len(list((out / "records").iterdir())) == 6
    for name, content in before.items():  # never rewritten
        assert (out / "records" / name).read_bytes() == content
    assert all(record["status"] == "ok" for record in after.values())
    assert not _temporaries(out)


BAD_INPUT = [
    (["--executor", "threads"], "invalid choice: 'threads' (choose from 'local', 'dask')"),
    (["--scheduler", "tcp://127.0.0.1:8786"], "--scheduler applies only with --executor dask"),
    (["--retries", "2"], "--retries applies only with --executor dask"),
    (["--executor", "dask", "--retries", "-1"], "--retries must be 0 or a positive integer"),
    (["--executor", "dask", "--cluster", "slurm"], "--cluster slurm needs --cluster-config FILE"),
    (["--executor", "dask", "--cluster", "kubernetes"], "invalid choice: 'kubernetes' (choose from 'local', 'slurm')"),
    (["--shard", "4/3"], "--shard 4/3: I/N needs 1 <= I <= N"),
    (["--shard", "0/2"], "--shard 0/2: I/N needs 1 <= I <= N"),
]


def _exit_code(argv: list[str]) -> int:
    from suite.cli import main

    try:
        return main(argv)
    except SystemExit as exc:  # argparse's own refusals
        return int(exc.code or 0)


@pytest.mark.parametrize(("flags", "message"), BAD_INPUT)
def test_bad_distribution_flags_are_refused_before_any_work(
    flags: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert _exit_code(["--profile", "smoke", "--problems", "sas", "--out", str(out), *flags]) == 2
    assert message in capsys.readouterr().err
    assert not (out / "records").exists()


def test_a_cluster_file_with_an_unknown_key_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "cluster.toml"
    config.write_text('queue = "gpu"\ncores = 4\nnodes = 2\n')
    flags = ["--executor", "dask", "--cluster", "slurm", "--cluster-config", str(config)]
    assert _exit_code(["--profile", "smoke", "--problems", "sas", "--out", str(tmp_path / "out"), *flags]) == 2
    err = capsys.readouterr().err
    assert str(config) in err and "nodes" in err and "walltime" in err  # names the file, the key, the valid keys
    assert not (tmp_path / "out" / "records").exists()


def test_an_unreachable_scheduler_is_refused_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import socket

    from suite.run import dask_executor

    monkeypatch.setattr(dask_executor, "CONNECT_TIMEOUT_S", 2.0)
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    address = f"tcp://127.0.0.1:{port}"
    flags = ["--executor", "dask", "--scheduler", address]
    assert _exit_code(["--profile", "smoke", "--problems", "sas", "--out", str(tmp_path / "out"), *flags]) == 2
    assert f"cannot reach the Dask scheduler at {address}" in capsys.readouterr().err
    assert not list((tmp_path / "out").rglob("*.json"))  # the folder was checked writable; nothing ran


def test_without_distributed_the_error_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    from suite.run.dask_executor import require_distributed

    monkeypatch.setitem(sys.modules, "distributed", None)
    with pytest.raises(ValueError, match=r"pip install 'tdbench\[dask\]'"):
        require_distributed()


def test_a_run_whose_worker_keeps_dying_is_recorded_as_failed_and_the_grid_goes_on(tmp_path: Path) -> None:
    """Also the local cluster that --executor dask starts alone (merged: the test of it ran the same command kind)."""
    out = tmp_path / "no-retries"
    command = [sys.executable, "run_all.py", "--no-progress", "--out", str(out), *SLOW_GRID, "--seeds", "3"]
    command += ["--executor", "dask", "--jobs", "2", "--retries", "0"]
    client_process = subprocess.Popen(
        command, cwd=REPO, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert client_process.stdout is not None
    lines = []
    for line in client_process.stdout:  # "... runs as tasks on a local Dask cluster of 2 ... (tcp://HOST:PORT), ..."
        lines.append(line)
        if "runs as tasks" in line:
            address = re.search(r"tcp://[^)]+", line).group(0)  # type: ignore[union-attr]
            break
    else:
        raise AssertionError("".join(lines) + client_process.stderr.read())
    with Client(address, timeout=30) as client:
        started: list[dict] = []
        client.subscribe_topic(START_TOPIC, lambda event: started.append(event[1]))
        _wait_for(lambda: started, 120, "a run to start", interval_s=0.05)
        victim = started[0]
        time.sleep(1.0)
        os.kill(victim["pid"], signal.SIGKILL)
        stdout, stderr = client_process.communicate(timeout=300)
    assert client_process.returncode == 0, stderr
    records = _records(out)
    assert len(records) == 3
    failed = records[victim["run"] + ".json"]
    assert failed["status"] == "failed"
    assert failed["reason"].startswith("did not finish on the Dask cluster after 1 attempt(s): KilledWorker")
    assert failed["problem_facts"]["main_metric"] == "model_prob_tv"  # the report can place it
    reasons = [(record["reason"], record.get("executor")) for record in records.values()]
    assert [record["status"] for record in records.values()].count("ok") == 2, reasons
    assert "1 of 3 runs failed in their method" in stdout
    # --executor dask without --scheduler starts a local cluster of --jobs worker processes, one thread each.
    assert "a local Dask cluster of 2 worker process(es)" in "".join(lines)
    assert all(record["executor"]["name"] == "dask" for record in records.values())
    ok = [record for record in records.values() if record["status"] == "ok"]
    assert all(record["parallel"] == {"jobs": 2, "threads_per_job": 1} for record in ok)


def test_the_client_writes_a_task_s_files_then_its_record(tmp_path: Path) -> None:
    from suite.results.records import RunKey, is_finished
    from suite.run import parallel as par
    from suite.run.dask_executor import save_outcome

    key = RunKey("sas", "trj", 0, {"profile": "smoke"})
    stem = Path(key.filename).stem
    spec = smoke_spec(key, tmp_path, num_draws=10, eval_draws=10)
    record = {"problem": "sas", "method": "trj", "seed": 0, "status": "ok", "reason": None, "metrics": {}}
    record["plot"] = f"/scratch/on/the/worker/plots/{stem}.png"
    outcome = {"record": record, "files": {f"draws/{stem}.npz": b"draws", f"plots/{stem}.png": b"png"}}
    written = save_outcome(spec, {**outcome, "worker": "tcp://w:1", "host": "node7"}, {"name": "dask"})
    assert (tmp_path / "draws" / f"{stem}.npz").read_bytes() == b"draws"
    assert written["plot"] == str(tmp_path / "plots" / f"{stem}.png")
    assert written["executor"] == {"name": "dask", "worker": "tcp://w:1", "host": "node7"}
    assert is_finished(tmp_path, key)
    assert par.checkpoint_file(tmp_path, key.filename, None) == tmp_path / "checkpoints" / f"{stem}.pt"
    assert par.checkpoint_file(tmp_path, key.filename, tmp_path / "shared") == tmp_path / "shared" / f"{stem}.pt"
