"""Run a planned grid on a Dask cluster: every run is one task, and the client writes every record.

A worker runs its task in a private scratch folder and sends back the record with the files that go beside it
(the run's draws and picture), so workers need no shared file system; the client writes them atomically into
``--out``, the record last. A task whose worker dies (killed, out of memory) is rescheduled by Dask on another
worker, up to the scheduler's ``allowed-failures``; a run that still does not finish gets a failed record with
the reason, and the grid goes on. Each attempt announces itself on the ``tdbench-start`` topic, so a record
says how many attempts its run took (``record["executor"]["attempts"]``).

``distributed`` is an optional dependency (``pip install 'tdbench[dask]'``); nothing here imports it before a
Dask run is asked for.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import socket
import tempfile
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from suite.core.device import tune_allocator
from suite.core.files import write_bytes_atomically
from suite.core.registry import load_all
from suite.results import draws_file
from suite.results import records as rec
from suite.run import parallel as par
from suite.run.cluster_config import load_cluster_config, local_gpu_index, make_slurm_cluster

#: Seconds the client waits to reach a scheduler given with ``--scheduler`` before refusing the address.
CONNECT_TIMEOUT_S = 10.0
#: Event topic on which each attempt of a task announces itself (counted into the record).
START_TOPIC = "tdbench-start"
INSTALL_HINT = "pip install 'tdbench[dask]'"


@dataclass(frozen=True)
class DaskSettings:
    """Where the grid runs: a scheduler's address, or a cluster this process starts (local or Slurm)."""

    scheduler: str | None = None
    #: ``local`` (a LocalCluster of processes on this machine) or ``slurm`` (dask-jobqueue).
    cluster: str = "local"
    cluster_config: Path | None = None
    #: Worker processes of a LocalCluster (one task each at a time).
    workers: int = 1
    #: Retries of a task that raised (Dask's ``retries``) and, on a cluster this process starts, deaths of the
    #: workers running it that are tolerated (``allowed-failures``).
    retries: int = 1
    #: Declare and ask for one ``GPU`` resource per task (CUDA runs).
    gpu: bool = False

    def describe(self) -> str:
        """Where the runs go, in words."""
        if self.scheduler:
            return f"the Dask scheduler at {self.scheduler}"
        if self.cluster == "slurm":
            return f"a Slurm cluster (dask-jobqueue) from {self.cluster_config}"
        return f"a local Dask cluster of {self.workers} worker process(es)"


def require_distributed() -> None:
    """ValueError with the install command when Dask's distributed scheduler is not installed."""
    try:
        import distributed  # noqa: F401
    except ImportError:
        raise ValueError(f"--executor dask needs Dask's distributed scheduler: {INSTALL_HINT}") from None


class DaskSession:
    """A connected client and, when this process started it, its cluster; closes both on exit."""

    def __init__(self, settings: DaskSettings) -> None:
        require_distributed()
        import dask
        from distributed import Client

        self.settings = settings
        self.cluster: Any = None
        #: The Slurm cluster file's settings, when this session started such a cluster.
        self.slurm_config: Any = None
        if settings.scheduler:
            try:
                self.client = Client(settings.scheduler, timeout=CONNECT_TIMEOUT_S)
            except (OSError, TimeoutError, ValueError) as exc:
                raise ValueError(
                    f"cannot reach the Dask scheduler at {settings.scheduler} within {CONNECT_TIMEOUT_S:g} s "
                    f"({type(exc).__name__}: {exc}); give tcp://HOST:PORT of a running 'dask scheduler'"
                ) from None
            return
        with dask.config.set({"distributed.scheduler.allowed-failures": settings.retries}):
            if settings.cluster == "slurm":
                assert settings.cluster_config is not None
                config = self.slurm_config = load_cluster_config(settings.cluster_config)
                self.cluster = make_slurm_cluster(config)
                self.cluster.scale(jobs=config.jobs)
            else:
                from distributed import LocalCluster

                self.cluster = LocalCluster(
                    n_workers=settings.workers,
                    threads_per_worker=1,
                    processes=True,
                    dashboard_address=None,
                    resources={"GPU": 1} if settings.gpu else None,
                    silence_logs=logging.ERROR,
                )
        self.client = Client(self.cluster)

    @property
    def address(self) -> str:
        """The scheduler's address."""
        return str(self.client.scheduler.address)

    def task_slots(self) -> int:
        """Tasks the cluster's workers run at once now (their threads)."""
        return sum(int(threads) for threads in self.client.nthreads().values())

    def close(self) -> None:
        """Disconnect, and stop the cluster this process started."""
        try:
            self.client.close()
        finally:
            if self.cluster is not None:
                self.cluster.close()


# --------------------------------------------------------------------------- worker side
_WORKER_READY = False


def _prepare_worker() -> None:
    """Once per worker process: the registry (plug-ins too) and torch's allocator settings."""
    global _WORKER_READY
    if not _WORKER_READY:
        tune_allocator()
        load_all(report=False)  # the client has said which plug-ins did not load
        _WORKER_READY = True


def run_task(spec: par.RunSpec, gpu_processes: int = 1) -> dict[str, Any]:
    """Worker side: run ``spec`` in a scratch folder; return its record and the files beside it (as bytes).

    ``gpu_processes`` > 1: the worker is one of that many processes of a Slurm job holding as many GPUs, and
    runs on the GPU its name's index picks (every process of the job sees all of them).
    """
    from distributed import get_worker

    _prepare_worker()
    worker = get_worker()
    torch.set_num_threads(spec.threads)
    if gpu_processes > 1 and spec.device.startswith("cuda"):
        torch.cuda.set_device(local_gpu_index(worker.name, gpu_processes))
    stem = Path(spec.key.filename).stem
    worker.log_event(START_TOPIC, {"run": stem, "worker": worker.address, "pid": os.getpid()})
    scratch = Path(tempfile.mkdtemp(prefix=f"tdbench-{os.getpid()}-"))
    try:
        local = dataclasses.replace(spec, out=scratch, exclusive=False, progress=False)
        par.run_spec(local)
        record = json.loads(rec.record_path(scratch, spec.key).read_text())
        files = {}
        for relative in (f"{draws_file.DRAWS_DIR}/{stem}.npz", f"plots/{stem}.png"):
            path = scratch / relative
            if path.is_file():
                files[relative] = path.read_bytes()
        return {"record": record, "files": files, "worker": worker.address, "host": socket.gethostname()}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


# --------------------------------------------------------------------------- client side
def save_outcome(spec: par.RunSpec, outcome: dict[str, Any], executor: dict[str, Any]) -> dict[str, Any]:
    """Write a finished task's files and then its record into ``spec.out``; returns the record as written."""
    record = dict(outcome["record"])
    for relative, payload in outcome["files"].items():
        write_bytes_atomically(Path(spec.out) / relative, payload)
    if record.get("plot"):
        record["plot"] = str(Path(spec.out) / "plots" / Path(record["plot"]).name)
    record["executor"] = {**executor, "worker": outcome["worker"], "host": outcome["host"]}
    record.pop("schema", None)
    try:
        rec.write_record(spec.out, spec.key, record, exclusive=spec.exclusive)
    except rec.RecordExists:
        pass  # published by another process first (no working locks on this file system): that record stands
    return record


def failed_record(run: Any, spec: par.RunSpec, reason: str, executor: dict[str, Any]) -> dict[str, Any]:
    """The record of a run that never finished on the cluster (its workers kept dying): failed, with the reason."""
    return par.failed_record(run.problem, spec, reason, executor=executor)


def run_grid(
    session: DaskSession, specs: list[par.RunSpec], runs: dict[str, Any]
) -> Iterator[tuple[par.RunSpec, str, str | None]]:
    """Run every spec as one task and yield (spec, status, reason) as records are written, in finishing order.

    At most as many tasks are in flight as the cluster's workers have threads (re-read as workers come and go),
    so no run waits in a worker's queue: a worker that dies takes only its running runs with it, and each of
    their deaths counts as an attempt. ``runs`` maps record file names to the planned runs (for the record of a
    run that never finished). On an interrupt the tasks in flight are cancelled; every record written stays.
    """
    from distributed import wait

    attempts: Counter[str] = Counter()
    session.client.subscribe_topic(START_TOPIC, lambda event: attempts.update([event[1]["run"]]))
    queue = list(reversed(specs))
    in_flight: dict[Any, par.RunSpec] = {}
    try:
        while queue or in_flight:
            room = max(1, session.task_slots()) - len(in_flight)
            while queue and room > 0:
                spec = queue.pop()
                in_flight[_submit(session, spec)] = spec
                room -= 1
            try:
                done, _ = wait(list(in_flight), timeout=WAIT_S, return_when="FIRST_COMPLETED")
            except TimeoutError:
                continue  # none finished: look again for new workers
            for future in done:
                spec = in_flight.pop(future)
                yield _collect(session, future, spec, runs, attempts)
    except BaseException:
        session.client.cancel(list(in_flight), force=True)
        raise


#: Seconds between two looks at the cluster's size while no run finishes.
WAIT_S = 2.0


def _submit(session: DaskSession, spec: par.RunSpec) -> Any:
    """Send one run to the cluster as a task; its future."""
    config = session.slurm_config
    gpu_processes = config.processes if config is not None and config.gpus > 0 else 1
    return session.client.submit(
        run_task,
        spec,
        gpu_processes,
        key=f"tdbench-{Path(spec.key.filename).stem}",
        pure=False,
        retries=session.settings.retries,
        resources={"GPU": 1} if session.settings.gpu else None,
    )


def _collect(
    session: DaskSession, future: Any, spec: par.RunSpec, runs: dict[str, Any], attempts: Counter[str]
) -> tuple[par.RunSpec, str, str | None]:
    """Write a finished task's record (a failed one when the task never finished); (spec, status, reason)."""
    stem = Path(spec.key.filename).stem
    executor: dict[str, Any] = {"name": "dask", "scheduler": session.address}
    try:
        outcome = future.result()
    except Exception as exc:  # the task kept failing: its workers died, or it raised on every retry
        executor["attempts"] = attempts[stem]
        reason = f"did not finish on the Dask cluster after {attempts[stem]} attempt(s): {_describe(exc)}"
        record = failed_record(runs[spec.key.filename], spec, reason, executor)
        try:
            rec.write_record(spec.out, spec.key, record, exclusive=spec.exclusive)
        except rec.RecordExists:
            pass
        return spec, "failed", reason
    finally:
        future.release()
    executor["attempts"] = max(attempts[stem], 1)
    record = save_outcome(spec, outcome, executor)
    return spec, record["status"], record["reason"]


def _describe(exc: BaseException) -> str:
    """An exception in one line."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")
