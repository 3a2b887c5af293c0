"""Execute planned runs in worker processes; each worker writes its record the moment a run finishes.

On a CPU most of the suite's work is many small tensor operations, which one
thread runs about as fast as two: two single-threaded runs side by side on a
2-core machine finish in close to half the time of the same runs one after
the other with two threads each. Each worker rebuilds its problem and method
from their registry names and options (nothing heavier crosses processes) and
keeps the gold-standard draws of the problems it has seen. Records carry the
number of jobs and threads, so a walltime measured beside another run is
never mistaken for one measured alone (``--jobs 1`` for clean timings).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import multiprocessing
import os
import signal
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from suite import checkpoints as ckpt
from suite import records as rec
from suite.harness import tune_allocator
from suite.method import Budget, Method
from suite.problem import Problem
from suite.registry import load_all, make_method, make_problem
from suite.runner import execute, gold_draws
from suite.types import Draws


@dataclass(frozen=True)
class RunSpec:
    """Everything a worker needs to redo one planned run: names, options, budget, where to write."""

    key: rec.RunKey
    method_options: dict[str, Any]
    budget: Budget
    device: str
    eval_draws: int
    out: Path
    jobs: int
    threads: int
    problem_options: dict[str, Any] = field(default_factory=dict)
    #: Seconds between two saves of a resumable run's state (see :mod:`suite.checkpoints`); 0: never save.
    checkpoint_every_s: float = ckpt.DEFAULT_EVERY_S


def usable_cores() -> int:
    """CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def default_jobs(device: torch.device) -> int:
    """One job per usable core (at most 8) on a CPU; one on a GPU, whose runs would only queue."""
    return 1 if device.type == "cuda" else max(1, min(8, usable_cores()))


_GOLD: dict[tuple[str, str], Draws | None] = {}
PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """Linux: have the kernel end this worker when the parent dies (else it would finish its run as an orphan)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass  # other systems: an orphan finishes its current run, whose record is still complete


def _init_worker(threads: int) -> None:
    _die_with_parent()
    torch.set_num_threads(threads)
    tune_allocator()
    load_all()


def run_spec(spec: RunSpec, problem: Problem | None = None, method: Method | None = None) -> tuple[str, str | None]:
    """Execute one run and write its record; returns (status, reason). Rebuilds problem/method when not given."""
    problem = make_problem(spec.key.problem, **spec.problem_options) if problem is None else problem
    method = make_method(spec.key.method, **spec.method_options) if method is None else method
    gold_key = (spec.key.problem, json.dumps(spec.problem_options, sort_keys=True))
    if gold_key not in _GOLD:
        _GOLD[gold_key] = gold_draws(problem, spec.eval_draws)
    device = torch.device(spec.device)
    plot_path = Path(spec.out) / "plots" / f"{Path(spec.key.filename).stem}.png"
    path = ckpt.checkpoint_path(spec.out, spec.key.filename)
    slot = ckpt.CheckpointSlot(path, spec.checkpoint_every_s) if spec.checkpoint_every_s > 0 else None
    with ckpt.checkpoint_slot(slot):
        record = execute(problem, method, spec.budget, spec.key.seed, device, _GOLD[gold_key], plot_path)
    record["config_hash"] = spec.key.config_hash
    record["run_config"] = spec.key.config
    record["parallel"] = {"jobs": spec.jobs, "threads_per_job": spec.threads}
    rec.write_record(spec.out, spec.key, record)
    path.unlink(missing_ok=True)  # the record now holds the result; a failed run starts afresh when asked again
    return record["status"], record["reason"]


def run_in_workers(specs: list[RunSpec], jobs: int, threads: int) -> Iterator[tuple[RunSpec, str, str | None]]:
    """Yield (spec, status, reason) as runs finish in ``jobs`` spawned worker processes.

    Runs are handed out one at a time, so a worker that finishes early takes
    the next. On an interrupt, runs not yet started are cancelled; finished
    ones already have their records.
    """
    context = multiprocessing.get_context("spawn")  # a forked child may inherit a locked OpenMP pool
    with ProcessPoolExecutor(jobs, mp_context=context, initializer=_init_worker, initargs=(threads,)) as pool:
        pending: dict[Future, RunSpec] = {}
        queue = list(reversed(specs))
        try:
            while queue or pending:
                while queue and len(pending) < jobs:
                    spec = queue.pop()
                    pending[pool.submit(run_spec, spec)] = spec
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    spec = pending.pop(future)
                    try:
                        status, reason = future.result()
                    except Exception as exc:  # the worker itself died (killed, out of memory)
                        status, reason = "failed", f"worker process failed: {type(exc).__name__}: {exc}"
                    yield spec, status, reason
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            raise
