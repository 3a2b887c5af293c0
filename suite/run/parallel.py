"""Execute planned runs in worker processes; each worker writes its record the moment a run finishes.

On a CPU most of the suite's work is many small tensor operations, which one
thread runs about as fast as two: two single-threaded runs side by side on a
2-core machine finish in close to half the time of the same runs one after
the other with two threads each. Each worker rebuilds its problem and method
from their registry names and options (nothing heavier crosses processes) and
keeps the gold-standard draws of the problems it has seen. Records carry the
number of jobs and threads, so a walltime measured beside another run is
never mistaken for one measured alone (``--jobs 1`` for clean timings).

On a CPU, workers are forked from a fork server (:func:`worker_context`) that has imported what they need once
(:mod:`suite.run.worker_preload`), so a worker starts in milliseconds instead of importing torch and the suite
for seconds; the server never computes, so no worker inherits a thread pool. With CUDA they are spawned. Either
way a worker takes the grid process's environment, and ends itself when the grid process dies. A worker process
that dies (``os._exit`` in a method, a crash, the out-of-memory killer) costs no other run (:func:`run_in_workers`).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import json
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Generator, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch

from suite.core import checkpoint as ckpt
from suite.core.context import RunContext
from suite.core.device import tune_allocator
from suite.core.method import DTYPES, Method
from suite.core.problem import Problem
from suite.core.registry import load_all, make_method, make_problem
from suite.core.types import Draws
from suite.results import draws_file
from suite.results import records as rec
from suite.results.facts import problem_facts
from suite.run.guards import exit_reason
from suite.run.interrupts import DeferredInterrupts, Interrupted, end_processes, ignore_interrupts
from suite.run.runner import execute, gold_draws, jsonable
from suite.store import references


@dataclass(frozen=True, kw_only=True)
class RunSpec:
    """Everything a worker needs to redo one planned run: names, resolved options, the run's context, where to write.

    ``method_settings`` are the options the planner resolved (:meth:`Method.resolve`): the worker builds the method
    from them and runs it as it is, without resolving again.
    """

    key: rec.RunKey
    method_settings: dict[str, Any]
    profile: str
    num_draws: int
    device: str
    eval_draws: int
    out: Path
    jobs: int
    threads: int
    problem_options: dict[str, Any] = field(default_factory=dict)
    #: Seconds between two saves of a resumable run's state (see :mod:`suite.core.checkpoint`); 0: never save.
    checkpoint_every_s: float = ckpt.DEFAULT_EVERY_S
    dtype: str = "float64"
    progress: bool = False
    #: Compute seconds the run may use (None: the profile's iteration counts decide).
    time_budget_s: float | None = None
    #: Counts of an earlier timed run to replay (:class:`suite.core.context.RunContext`), or None.
    replay: dict[str, Any] | None = None
    #: Folder of the run's checkpoints (``--checkpoint-dir``); None: ``out/checkpoints``.
    checkpoint_dir: Path | None = None
    #: Create the record only if none is there (False with ``--force``, which replaces it).
    exclusive: bool = True

    def checkpoint_file(self) -> Path:
        """Where this run saves and finds its checkpoint."""
        return checkpoint_file(self.out, self.key.filename, self.checkpoint_dir)


def checkpoint_file(out: Path, record_filename: str, checkpoint_dir: Path | None) -> Path:
    """A run's checkpoint: under ``checkpoint_dir`` when given (a path all workers see), else ``out/checkpoints``."""
    if checkpoint_dir is None:
        return ckpt.checkpoint_path(out, record_filename)
    return Path(checkpoint_dir) / (Path(record_filename).stem + ".pt")


def usable_cores() -> int:
    """CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def default_jobs(device: torch.device) -> int:
    """One job per usable core (at most 8) on a CPU; one on a GPU, whose runs would only queue."""
    return 1 if device.type == "cuda" else max(1, min(8, usable_cores()))


#: Gold-standard draws by (problem, its options, number of draws), kept for the runs a process executes.
_GOLD: dict[tuple[str, str, int], Draws | None] = {}
PR_SET_PDEATHSIG = 1


#: Seconds between two checks of a worker's watchdog that its parent is still alive.
WATCHDOG_INTERVAL_S = 0.5
#: Exit status of a worker that ends itself because ``run_all.py`` is gone.
ORPHAN_EXIT_CODE = 3
#: The process that started this worker: the grid process, or the fork server (None outside a worker).
_PARENT_PID: int | None = None
#: The grid process this worker runs for (None outside a worker: serial runs never check).
_GRID_PID: int | None = None
#: Modules the fork server imports before it forks any worker (``__main__``: the command's own script, which a
#: worker would otherwise import again).
WORKER_PRELOAD = ("__main__", "suite.run.worker_preload")


def parent_alive(parent_pid: int | None = None) -> bool:
    """Whether this worker's parent (``parent_pid``, default the one recorded at start) is still its parent.

    Without ``parent_pid``, a worker also checks that its grid process still exists: a forked worker's parent is
    the fork server, which ends only when it sees that the grid process has gone.
    """
    if parent_pid is not None:
        return os.getppid() == parent_pid
    return _PARENT_PID is None or (os.getppid() == _PARENT_PID and _process_exists(_GRID_PID))


def _process_exists(pid: int | None) -> bool:
    if pid is None:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, under another user
        return True
    return True


def _exit_if_orphaned(parent_pid: int | None = None) -> None:
    """End this worker at once (no cleanup, no record) when its parent has died."""
    if not parent_alive(parent_pid):
        os._exit(ORPHAN_EXIT_CODE)


def _watch_parent(interval_s: float) -> None:
    while True:
        _exit_if_orphaned()
        time.sleep(interval_s)


def _die_with_parent() -> None:
    """End this worker whenever its parent or its grid process dies: kernel signal (Linux), a re-check, a watchdog.

    A spawned worker gets here only after importing the suite (seconds), and the parent may already be gone:
    the death signal then never comes, so the parent is checked right after asking for it. The kernel signal
    is also tied to the parent's creating thread and is Linux-only; a daemon thread polling the parent covers
    both (an orphan is reparented, so its ``getppid()`` changes). A forked worker's parent is the fork server,
    which exits when the grid process has gone; the watchdog also checks the grid process itself.
    """
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass  # other systems: the watchdog below ends an orphan within WATCHDOG_INTERVAL_S
    _exit_if_orphaned()
    watchdog = threading.Thread(target=_watch_parent, args=(WATCHDOG_INTERVAL_S,), name="parent-watchdog", daemon=True)
    watchdog.start()


def _init_worker(threads: int, grid_pid: int, forked: bool, environment: dict[str, str]) -> None:
    global _PARENT_PID, _GRID_PID
    ignore_interrupts()  # a Ctrl-C reaches the whole group: the parent ends its workers (suite.run.interrupts)
    _GRID_PID = grid_pid
    _PARENT_PID = os.getppid() if forked else grid_pid  # a spawned worker whose grid has gone exits just below
    _die_with_parent()
    if forked:  # the fork server's environment is the grid process's at the server's start; take today's
        os.environ.clear()
        os.environ.update(environment)
    torch.set_num_threads(threads)
    tune_allocator()
    load_all(report=False)  # the parent process has said which plug-ins did not load


def run_spec(spec: RunSpec, problem: Problem | None = None, method: Method | None = None) -> tuple[str, str | None]:
    """Execute one run and write its record; returns (status, reason). Rebuilds problem/method when not given."""
    _exit_if_orphaned()  # a queued run handed to a worker whose parent has died is never started
    problem = make_problem(spec.key.problem, **spec.problem_options) if problem is None else problem
    problem.use_reference_profile(spec.profile)  # a paper run is scored against a paper-size reference if there is one
    method = make_method(spec.key.method, **spec.method_settings) if method is None else method
    gold_key = (spec.key.problem, json.dumps(spec.problem_options, sort_keys=True), spec.eval_draws, spec.profile)
    if gold_key not in _GOLD:
        _GOLD[gold_key] = gold_draws(problem, spec.eval_draws)
    plot_path = Path(spec.out) / "plots" / f"{Path(spec.key.filename).stem}.png"
    path = spec.checkpoint_file()
    context = RunContext(
        seed=spec.key.seed,
        device=torch.device(spec.device),
        dtype=DTYPES[spec.dtype],
        profile=spec.profile,
        num_draws=spec.num_draws,
        progress=spec.progress,
        checkpoint=ckpt.CheckpointSlot(path, spec.checkpoint_every_s) if spec.checkpoint_every_s > 0 else None,
        time_budget_s=spec.time_budget_s,
        replay=spec.replay,
    )
    run_info = {
        "method_options": spec.key.config.get("method_options", {}),
        "config_hash": spec.key.config_hash,
        "run_config": spec.key.config,
        "parallel": {"jobs": spec.jobs, "threads_per_job": spec.threads},
    }
    draws_path = draws_file.draws_path(spec.out, spec.key.filename)
    record = execute(problem, method, context, _GOLD[gold_key], plot_path, run_info, draws_path)
    _exit_if_orphaned()  # nobody would read the record: leave the folder as the parent's death left it
    try:
        rec.write_record(spec.out, spec.key, record, exclusive=spec.exclusive)
    except rec.RecordExists:
        pass  # another process recorded this run first (a file system without working locks): its record stands
    except OSError as exc:
        if exc.errno == errno.ENOSPC and not exc.filename:  # name the record the full disk refused
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(rec.record_path(spec.out, spec.key))) from exc
        raise
    path.unlink(missing_ok=True)  # the record now holds the result; a failed run starts afresh when asked again
    return record["status"], record["reason"]


def run_in_workers(specs: list[RunSpec], jobs: int, threads: int) -> Iterator[tuple[RunSpec, str, str | None]]:
    """Yield (spec, status, reason) as runs finish in ``jobs`` worker processes.

    Runs are handed out one at a time, so a worker that finishes early takes the next. A worker process that dies
    (a method that calls ``os._exit``, a crash in native code, the out-of-memory killer) breaks the pool: the runs
    it had in flight are run again one at a time, each alone in a worker process, and the others go on in a new
    pool. A run that ends its worker process when it runs alone is a failed run, recorded with how the process
    ended (:func:`died_reason`); the others get their records. A full disk (``OSError`` ENOSPC) is raised, not
    turned into failed runs. On an interrupt (or when the caller closes this generator early) the workers are
    ended at once (SIGTERM, then SIGKILL after :data:`suite.run.interrupts.GRACE_S`): runs still going write no
    record, and finished ones already have theirs.
    """
    queue = list(specs)
    while queue:
        broken = yield from _run_in_pool(queue, jobs, threads)
        if broken is None:
            return
        if broken.in_flight and jobs == 1:  # it ran alone: this run ended its worker process
            (spec,) = broken.in_flight
            yield spec, *record_death(spec, broken.exit_code)
        elif broken.in_flight:  # which of them ended the worker is not known: each again, alone
            yield from run_in_workers(broken.in_flight, 1, threads)
        elif broken.unsent == queue:  # a new pool broke before it ran anything: its workers die as they start
            for spec in broken.unsent:
                yield spec, "failed", f"not run: a worker process died before any run started ({broken.cause})"
            return
        queue = broken.unsent


@dataclass(frozen=True)
class BrokenPool:
    """A worker pool that broke because a worker process died: the runs it had in flight and those not handed out."""

    in_flight: list[RunSpec]
    unsent: list[RunSpec]
    #: Exit status of the pool's one worker process (a pool of one; None otherwise, or unknown).
    exit_code: int | None
    cause: str


def _run_in_pool(
    specs: list[RunSpec], jobs: int, threads: int
) -> Generator[tuple[RunSpec, str, str | None], None, BrokenPool | None]:
    """Yield (spec, status, reason) of ``specs`` run in a pool of ``jobs`` workers; what is left if it breaks."""
    context = worker_context(cuda=any(spec.device.startswith("cuda") for spec in specs))
    forked = context.get_start_method() == "forkserver"
    initargs = (threads, os.getpid(), forked, dict(os.environ))
    pool = ProcessPoolExecutor(jobs, mp_context=context, initializer=_init_worker, initargs=initargs)
    processes = getattr(pool, "_processes", None)  # shutting the pool down forgets its table; exit codes come after
    pending: dict[Future, RunSpec] = {}
    queue = list(reversed(specs))
    in_flight: list[RunSpec] = []
    cause: str | None = None
    try:
        while pending or (queue and cause is None):
            while queue and len(pending) < jobs and cause is None:
                try:
                    # A worker starts whole (a signal is acted on once it has): one cut short half-way, forked but
                    # not yet known to the pool, would be left running. It ignores SIGINT from its first instruction.
                    with DeferredInterrupts() as deferred:
                        pending[pool.submit(run_spec, queue[-1])] = queue[-1]
                    queue.pop()
                    if deferred.signum is not None:
                        raise Interrupted(deferred.signum)
                except BrokenProcessPool as exc:
                    cause = str(exc)
            if not pending:
                break
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                spec = pending.pop(future)
                try:
                    status, reason = future.result()
                except BrokenProcessPool as exc:  # a worker died: this run was in flight in the pool
                    in_flight.append(spec)
                    cause = str(exc)
                    continue
                except SystemExit as exc:  # outside the method (which the runner guards): no record
                    status, reason = "failed", f"worker process failed: {exit_reason(exc)}"
                except Exception as exc:  # an error outside the method (writing the record, say)
                    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
                        raise
                    status, reason = "failed", f"worker process failed: {type(exc).__name__}: {exc}"
                yield spec, status, reason
    except BaseException:  # an interrupt, a full disk, or the caller closing the generator: stop, do not wait
        stop_pool(pool)
        raise
    pool.shutdown(wait=True)  # a broken pool has ended and reaped its workers by then
    if cause is None:
        return None
    codes = [process.exitcode for process in (processes or {}).values()]
    return BrokenPool(in_flight, list(reversed(queue)), codes[0] if len(codes) == 1 else None, cause)


def died_reason(exit_code: int | None) -> str:
    """Why a run failed whose worker process ended during it: its exit status, or the signal that killed it."""
    if exit_code is None:
        return "the worker process died during the run"
    if exit_code >= 0:
        return f"the worker process exited with status {exit_code} during the run"
    try:
        name = signal.Signals(-exit_code).name
    except ValueError:
        name = f"signal {-exit_code}"
    out_of_memory = " (out of memory?)" if -exit_code == signal.SIGKILL else ""
    return f"the worker process was killed by {name} during the run{out_of_memory}"


def record_death(spec: RunSpec, exit_code: int | None) -> tuple[str, str]:
    """Write the failed record of a run that ended its worker process, alone in it; (status, reason)."""
    reason = died_reason(exit_code)
    try:
        problem = make_problem(spec.key.problem, **spec.problem_options)
        record = failed_record(problem, spec, reason)
    except Exception as exc:  # without its problem, the run is shown without a record (a rerun retries it)
        return "failed", f"{reason}; its record could not be made: {type(exc).__name__}: {exc}"
    try:
        rec.write_record(spec.out, spec.key, record, exclusive=spec.exclusive)
    except rec.RecordExists:
        pass  # another process recorded this run first: its record stands
    spec.checkpoint_file().unlink(missing_ok=True)  # as after any failed run: asked again, it starts afresh
    return "failed", reason


def failed_record(problem: Problem, spec: RunSpec, reason: str, **fields: Any) -> dict[str, Any]:
    """The record of a run that never finished in a worker (its worker kept dying): failed, with the reason.

    ``fields`` are added as they are (the Dask executor's ``executor``).
    """
    now = datetime.now(UTC).isoformat()
    return rec.make_record(
        spec.key.problem,
        spec.key.method,
        spec.key.seed,
        rec.FAILED,
        reason,
        problem_config=jsonable(problem.config()),
        problem_facts=problem_facts(problem),
        method_options=jsonable(spec.key.config.get("method_options", {})),
        method_settings=jsonable(spec.method_settings),
        budget={
            "profile": spec.profile,
            "num_draws": spec.num_draws,
            "time_budget_s": spec.time_budget_s,
            "replayed": spec.replay is not None,
        },
        reference=references.describe(problem),
        traceback=None,
        metrics={},
        counts={},
        model_probs=None,
        draws=None,
        plot=None,
        timings_s={},
        diagnostics={},
        environment=None,
        started_at=now,
        finished_at=now,
        config_hash=spec.key.config_hash,
        run_config=spec.key.config,
        parallel={"jobs": spec.jobs, "threads_per_job": spec.threads},
        **fields,
    )


def worker_context(cuda: bool) -> multiprocessing.context.BaseContext:
    """How workers start: forked from a fork server where it exists and no run uses CUDA, else spawned.

    Never forked from the grid process itself, which may hold a locked OpenMP pool or a CUDA context; the fork
    server has only imported modules (:data:`WORKER_PRELOAD`). It starts at this process's first pool and serves
    every later one, so a study or a test that runs many grids pays the imports once. CUDA is initialised in no
    process a worker is forked from, but a spawned worker is the safe choice where a run may use it.
    """
    if cuda or "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(WORKER_PRELOAD))  # only read when the server starts
    return context


def stop_pool(pool: ProcessPoolExecutor) -> None:
    """End a pool's worker processes now and cancel its queued runs (runs in progress write no record).

    The workers end first: a worker forked a moment ago is still reading the pool's queues, which shutting the
    pool down removes (it would die with a traceback on the terminal).
    """
    processes = list((getattr(pool, "_processes", None) or {}).values())
    end_processes(processes)
    pool.shutdown(wait=False, cancel_futures=True)
