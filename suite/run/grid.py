"""Running a grid: :func:`run_grid` plans a :class:`GridSpec`, executes its unfinished runs and writes the report.

Each run is claimed first (:mod:`suite.run.claims`), executed in this process, in worker processes or as a Dask task,
and its record written as soon as it is done; an interrupted grid (:mod:`suite.run.interrupts`) resumes where it
stopped.
"""

from __future__ import annotations

import copy
import glob
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from suite.core.files import write_atomically
from suite.core.registry import available_methods, from_entry_point
from suite.data import locate
from suite.report.build import NOT_APPLICABLE_FILE, MissingFacts, write_report
from suite.report.terminal import summarise_not_applicable
from suite.results import records as rec
from suite.results.records import LOST
from suite.run import claims
from suite.run import parallel as par
from suite.run.dask_executor import DaskSession, DaskSettings
from suite.run.dask_executor import run_grid as run_tasks
from suite.run.interrupts import DeferredInterrupts, Interrupted
from suite.run.plan import PlannedRun, Skipped, plan
from suite.run.shards import shard_of
from suite.run.spec import Execution, GridSpec, Placement, UsageError, place

#: Key marking a run whose worker ended without writing its record (a crash, not a method's failure).

Echo = Callable[[str], None]


@dataclass(frozen=True)
class PlannedGrid:
    """A grid checked against its execution and planned: its placement, runs (this shard's), notes and full size."""

    placement: Placement
    runs: list[PlannedRun]
    skipped: list[Skipped]
    grid_size: int


@dataclass(frozen=True)
class GridOutcome:
    """What a grid left: the plan's records (lost runs marked ``LOST``), the report's text, the seconds it took."""

    records: list[dict]
    report: str | None
    seconds: float

    @property
    def lost(self) -> list[dict]:
        """Runs that ended without a record (a worker crashed, an error outside the method)."""
        return [record for record in self.records if record.get(LOST)]

    @property
    def failed(self) -> list[dict]:
        """Runs whose method failed (results, with their reasons)."""
        return [record for record in self.records if record.get("status") != "ok" and not record.get(LOST)]

    @property
    def status(self) -> int:
        """The exit status: 1 when a run ended without its record, else 0."""
        return 1 if self.lost else 0


def plan_grid(spec: GridSpec, execution: Execution, dry_run: bool = False) -> PlannedGrid:
    """Place ``spec`` on ``execution`` and plan it; with a shard, only that slice's runs. UsageError when bad.

    A ``dry_run`` writes nothing (the folders are checked without a probe file).
    """
    placement = place(spec, execution, dry_run)
    runs, skipped = plan(spec, placement.device)
    _refuse_if_nothing_named_can_run(spec, runs, skipped)
    size = len(runs)
    if execution.shard_slice is not None:
        runs = shard_of(runs, *execution.shard_slice)
    return PlannedGrid(placement, runs, skipped, size)


def _refuse_if_nothing_named_can_run(spec: GridSpec, runs: list[PlannedRun], skipped: list[Skipped]) -> None:
    """UsageError (exit status 2) when problems were named and every one is unavailable here, naming each and why.

    With ``--problems all`` the grid is what this machine can run; with some named problems available, those run
    and the others are named in notes.
    """
    if spec.problems == "all" or runs:
        return
    unavailable = {note.problem: note.reason for note in skipped if note.method is None}
    if not spec.problems or any(name not in unavailable for name in spec.problems):
        return
    if any(locate.NOT_DOWNLOADED_YET in reason for reason in unavailable.values()):
        return  # a dry run (downloads deferred): the real run downloads the file first
    if len(spec.problems) == 1:
        (name,) = spec.problems
        raise UsageError(f"problem {name} cannot run here: {unavailable[name]}")
    reasons = "; ".join(f"{name}: {unavailable[name]}" for name in spec.problems)
    raise UsageError(f"none of the problems named can run here: {reasons}")


def run_grid(spec: GridSpec, execution: Execution, echo: Echo = print) -> GridOutcome:
    """Plan ``spec``, run its unfinished runs as ``execution`` says and, unless it is one shard, write the report.

    Messages (notes, progress lines, the leaderboards) go to ``echo``. Bad input raises :class:`UsageError` before
    any run, and so does a grid whose every named problem is unavailable here. A full disk and KeyboardInterrupt
    (or :class:`suite.run.interrupts.Interrupted`, the command line's SIGINT and SIGTERM) propagate with every
    finished record kept; on an interrupt the worker processes are ended and the Dask tasks cancelled first, and
    runs that had not finished get no record. The report is written from every record in ``execution.out`` with
    the grid's settings, including those another process recorded meanwhile.

    >>> import tempfile
    >>> from pathlib import Path
    >>> from suite.run import Execution, GridSpec, run_grid
    >>> spec = GridSpec(problems="sas", methods="rjmcmc-baseline", profile="smoke", seeds=1, eval_draws=300)
    >>> execution = Execution(out=Path(tempfile.mkdtemp()), jobs=1, progress=False)
    >>> outcome = run_grid(spec, execution, echo=lambda text: None)
    >>> [(record["method"], record["status"]) for record in outcome.records], outcome.status
    ([('rjmcmc-baseline', 'ok')], 0)
    """
    grid = plan_grid(spec, execution)
    for note in grid.placement.notes:
        echo(note)
    for note in grid.skipped:
        if note.method is None:
            echo(f"note: {note}")
    for line in summarise_not_applicable([note.as_record() for note in grid.skipped if note.method is not None]):
        echo(line)
    out, device = execution.out, grid.placement.device
    shard = "" if execution.shard_slice is None else f" (shard {execution.shard} of a grid of {grid.grid_size})"
    echo(f"Profile {spec.profile}: {len(grid.runs)} runs{shard} on {device} ({spec.dtype}), results in {out}")
    start = time.perf_counter()
    try:  # a cluster is reached (or started) only when some run is left to do
        unfinished = execution.force or not all(rec.is_finished(out, planned.key) for planned in grid.runs)
        session = open_session(execution, grid.placement, echo) if unfinished else None
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    try:
        done = execute(grid.runs, spec, execution, grid.placement, session, echo)
        records = list(done.values())
        report = None
        if execution.shard_slice is None:  # shards end at different times: one report of all of them comes after
            report = _report(spec, execution, grid, done, echo)
    finally:
        if session is not None:
            session.close()
    return GridOutcome(records, report, time.perf_counter() - start)


def _report(spec: GridSpec, execution: Execution, grid: PlannedGrid, done: dict[str, dict], echo: Echo) -> str:
    """Write the report of every record in the folder with this grid's settings; echo and return its text.

    The records are read back from the folder when the grid is done, not taken from this process's runs alone:
    another process running an overlapping grid into the same folder (other seeds, other methods) may have
    recorded runs meanwhile, and its records belong on the same leaderboards. ``done``: this process's records by
    file name (a run that ended without one has an in-memory stand-in). Runs of this grid that another process
    still holds are named, with the command that completes the report once they are done.
    """
    out = execution.out
    shown: dict[str, dict] = {}
    held: list[PlannedRun] = []
    for run in grid.runs:
        name = run.key.filename
        if rec.is_finished(out, run.key):  # also a run another process held when this one started, finished since
            shown[name] = rec.read_record(out, run.key)
        elif name in done:
            shown[name] = done[name]
        else:
            held.append(run)
    others = [
        rec.read_record(out, key)
        for key in _recorded_keys(out, _same_settings(spec, grid.placement.device, grid.runs))
        if key.filename not in shown
    ]
    if others:
        methods = sorted({record["method"] for record in others})
        runs = f"{len(others)} earlier run{'s' if len(others) != 1 else ''}"
        echo(f"\nThe leaderboards also show {runs} in {out} with the same settings: {', '.join(methods)}")
    if held:
        names = ", ".join(f"{run.key.problem} / {run.key.method} / seed {run.key.seed}" for run in held[:5])
        more = f" and {len(held) - 5} more" if len(held) > 5 else ""
        echo(
            f"\n{len(held)} run{'s' if len(held) != 1 else ''} of this grid {'are' if len(held) != 1 else 'is'} "
            f"still being run by another process ({names}{more}): the leaderboards lack them until that process "
            f"finishes and writes them again, or `tdbench report {out}` is run after it"
        )
    not_applicable = [note.as_record() for note in grid.skipped if note.method is not None]
    if not_applicable:
        save_not_applicable(out, grid.skipped)
    try:
        text = write_report([*shown.values(), *others, *not_applicable], out, spec.profile, execution.wide)
    except MissingFacts as exc:  # the runs' records are kept; the report needs the facts added first
        raise UsageError(f"{exc}; then `tdbench report {out}` writes the report") from None
    echo(text)
    return text


def _same_settings(spec: GridSpec, device: Any, runs: list[PlannedRun]) -> dict[tuple[str, str, str], rec.RunKey]:
    """(problem, method, configuration hash) of the planned runs and of every other method's runs on their problems
    with the same settings (as if asked for), each with one run key of it: records of any seed match."""
    keys = [run.key for run in runs]
    planned = {run.key.method for run in runs}
    others = [name for name in available_methods() if name not in planned]
    if runs and others:
        problems = tuple(dict.fromkeys(run.key.problem for run in runs))
        extra, _ = plan(spec.narrowed(problems, others), device)
        keys += [run.key for run in extra]
    return {(key.problem, key.method, key.config_hash): key for key in keys}


def _recorded_keys(out: Path, settings: dict[tuple[str, str, str], rec.RunKey]) -> list[rec.RunKey]:
    """Run keys of the finished records in ``out`` of any seed whose problem, method and configuration match."""
    folder = rec.records_dir(out)
    if not folder.is_dir():
        return []
    found = []
    for (problem, method, config_hash), key in settings.items():
        prefix, suffix = f"{problem}__{method}__seed", f"__{config_hash}.json"
        for path in sorted(folder.glob(f"{glob.escape(prefix)}*{glob.escape(suffix)}")):
            seed = path.name[len(prefix) : -len(suffix)]
            if not seed.isdigit():
                continue
            other = rec.RunKey(problem, method, int(seed), key.config)
            if other.filename == path.name and rec.is_finished(out, other):
                found.append(other)
    return found


def open_session(execution: Execution, placement: Placement, echo: Echo = print) -> Any:
    """The Dask session of the Dask executor (connected, or with the cluster it starts), else None."""
    if execution.executor != "dask":
        return None
    settings = DaskSettings(
        scheduler=execution.scheduler,
        cluster=execution.cluster,
        cluster_config=execution.cluster_config,
        workers=placement.jobs,
        retries=execution.retries,
        gpu=placement.device.type == "cuda",
    )
    echo(f"Connecting to {settings.describe()} ...")
    with DeferredInterrupts() as interrupts:  # a cluster half started cannot be closed: a signal waits for it
        session = DaskSession(settings)
    if interrupts.signum is not None:
        session.close()
        raise Interrupted(interrupts.signum)
    return session


def execute(
    runs: list[PlannedRun],
    spec: GridSpec,
    execution: Execution,
    placement: Placement,
    session: Any = None,
    echo: Echo = print,
) -> dict[str, dict]:
    """Execute unfinished runs (all with ``force``), each record written as soon as its run is done.

    Each run is claimed first (:mod:`suite.run.claims`): a run another live process is running into the same folder
    is left to it, and the records of the others are returned, by record file name, in plan order. With a Dask
    ``session`` the runs are its tasks.
    """
    out, force = execution.out, execution.force
    rec.remove_stale_temporaries(out)
    todo = [run for run in runs if force or not rec.is_finished(out, run.key)]
    held, busy = _claim(todo, out, force)
    skipped = len(runs) - len(todo) + (len(todo) - len(held) - len(busy))  # recorded before, or while planning
    if skipped:
        echo(f"{skipped} of {len(runs)} runs already have records in {out} (use --force to re-run them)")
    if busy:
        echo(f"{len(busy)} of {len(runs)} runs are being run by another process into {out}; left to it")
    todo = [run for run in todo if run.key.filename in held]
    if force:
        for run in todo:
            par.checkpoint_file(out, run.key.filename, execution.checkpoint_dir).unlink(missing_ok=True)
    jobs, threads = _layout(placement.jobs, len(todo), session)
    if session is not None and todo:
        where = session.settings.describe()
        where += "" if session.settings.scheduler else f" ({session.address})"
        echo(f"{len(todo)} runs as tasks on {where}, {threads} thread(s) a run")
    elif session is None and jobs > 1:
        echo(f"{len(todo)} runs, {jobs} at a time in worker processes, {threads} thread(s) each")

    def spec_of(run: PlannedRun) -> par.RunSpec:
        return par.RunSpec(
            key=run.key,
            method_settings=run.method.options(),
            profile=spec.profile,
            num_draws=spec.draws,
            device=str(placement.device),
            eval_draws=spec.eval_draws,
            out=out,
            jobs=jobs,
            threads=threads,
            problem_options=run.problem_options,
            checkpoint_every_s=execution.checkpoint_every_s,
            dtype=spec.dtype,
            progress=jobs == 1 and session is None and execution.progress,
            time_budget_s=run.time_budget_s,
            replay=run.replay,
            checkpoint_dir=execution.checkpoint_dir,
            exclusive=not force,
        )

    by_key = {run.key.filename: run for run in todo}
    bar = tqdm(total=len(todo), desc="runs", unit="run", disable=not execution.progress or None)
    lost: dict[str, dict] = {}
    if session is not None:
        outcomes = run_tasks(session, [spec_of(run) for run in todo], by_key)
    elif jobs > 1:
        outcomes = par.run_in_workers([spec_of(run) for run in todo], jobs, threads)
    else:
        outcomes = _run_one_at_a_time([spec_of(run) for run in todo], by_key, bar, threads)
    try:
        for done, status, reason in outcomes:
            bar.update(1)
            key = done.key
            if status != "ok":
                tqdm.write(f"FAILED {key.problem} / {key.method} / seed {key.seed}: {reason}")
            finished = rec.is_finished(out, key)
            if not finished:  # the worker died before writing: shown, not saved (a rerun retries)
                lost[key.filename] = rec.lost_record(key, status, reason)
            held.pop(key.filename).release(finished=finished)
    except KeyboardInterrupt:
        _close(outcomes)  # the workers end (or the tasks are cancelled) before their claims are given up
        bar.close()
        echo(_interrupted_line([by_key[name] for name in held if not rec.is_finished(out, by_key[name].key)]))
        raise
    finally:
        _close(outcomes)  # an error here, or an interrupt: workers still running are ended, never awaited
        bar.close()
        for name, claim in held.items():
            claim.release(finished=rec.is_finished(out, by_key[name].key))  # recorded just before an interrupt
        claims.remove_empty_locks_dir(out)
    busy_names = {run.key.filename for run in busy}
    return {
        run.key.filename: lost.get(run.key.filename) or rec.read_record(out, run.key)
        for run in runs
        if run.key.filename not in busy_names
    }


def _close(outcomes: Iterator[Any]) -> None:
    """Close a generator of outcomes: a worker pool ends its workers, a Dask run cancels its tasks."""
    close = getattr(outcomes, "close", None)
    if close is not None:
        close()


#: Unfinished runs named in the message of an interrupted grid (the rest are counted).
NAMED_UNFINISHED = 5


def _interrupted_line(unfinished: list[PlannedRun]) -> str:
    """What an interrupt left undone: the runs without a record (stopped or not started), a few of them named."""
    if not unfinished:
        return "\nInterrupted: every run this command had started has its record."
    names = [f"{run.key.problem} / {run.key.method} / seed {run.key.seed}" for run in unfinished]
    shown = ", ".join(names[:NAMED_UNFINISHED])
    more = f" and {len(names) - NAMED_UNFINISHED} more" if len(names) > NAMED_UNFINISHED else ""
    runs = f"{len(names)} run{'s' if len(names) != 1 else ''}"
    return f"\nInterrupted: {runs} stopped or not started, without a record: {shown}{more}."


def _claim(todo: list[PlannedRun], out: Path, force: bool) -> tuple[dict[str, claims.RunClaim], list[PlannedRun]]:
    """Claim every run to do: (the claims held, by record name; the runs another live process holds)."""
    claims.raise_open_file_limit()
    held: dict[str, claims.RunClaim] = {}
    busy: list[PlannedRun] = []
    for run in todo:
        claim = claims.RunClaim(out, run.key.filename)
        if not claim.acquire():
            busy.append(run)
        elif not force and rec.is_finished(out, run.key):  # finished while we were planning
            claim.release(finished=True)
        else:
            held[run.key.filename] = claim
    return held, busy


def _layout(jobs: int, num_runs: int, session: Any) -> tuple[int, int]:
    """(runs side by side, torch threads per run) for the local pool or a Dask session."""
    if session is None:
        jobs = min(jobs, num_runs) if num_runs else 1
        return jobs, max(1, torch.get_num_threads() // jobs) if jobs > 1 else torch.get_num_threads()
    if session.cluster is not None and session.settings.cluster == "local":  # workers share this machine's cores
        workers = session.settings.workers
        return workers, max(1, torch.get_num_threads() // workers)
    if session.slurm_config is not None:  # one task per worker process, each with its share of the job's cores
        return max(1, session.task_slots()), session.slurm_config.cores_per_worker
    return max(1, session.task_slots()), 1  # other machines: one thread a task, one task per core


def _run_one_at_a_time(
    specs: list[par.RunSpec], by_key: dict[str, PlannedRun], bar: Any, threads: int
) -> Iterator[Any]:
    """Yield (spec, status, reason) running one run at a time: in this process, but plug-ins' runs in a worker.

    A run whose method or problem comes from a plug-in (an entry point) runs in a worker process of its own, one at
    a time after the others, so that one that ends its process (``os._exit``) is a failed run and not the end of
    the grid (:func:`suite.run.parallel.run_in_workers`). Built-ins, and classes registered in this process (a
    script, a notebook, a test: a worker would not know them), run here, at no cost of a process.
    """
    outside = {spec.key.filename for spec in specs if _runs_plugin_code(by_key[spec.key.filename])}
    yield from _run_serially([spec for spec in specs if spec.key.filename not in outside], by_key, bar)
    if outside:
        yield from par.run_in_workers([spec for spec in specs if spec.key.filename in outside], 1, threads)


def _runs_plugin_code(run: PlannedRun) -> bool:
    """Whether a run's method or problem was registered from a plug-in's entry point."""
    return from_entry_point(type(run.method)) or from_entry_point(type(run.problem))


def _run_serially(specs: list[par.RunSpec], by_key: dict[str, PlannedRun], bar: Any) -> Iterator[Any]:
    """Yield (spec, status, reason) running each spec in this process, on copies of the planned objects.

    Each run gets its own deep copy of the planned problem and method, so that nothing a method does to the
    instances it was given (reassigning ``problem.log_joint``, say) reaches the next run, as in a worker process.
    """
    for spec in specs:
        run = by_key[spec.key.filename]
        bar.set_postfix_str(f"{spec.key.problem} / {spec.key.method} / seed {spec.key.seed}")
        status, reason = par.run_spec(spec, copy.deepcopy(run.problem), copy.deepcopy(run.method))
        yield spec, status, reason


def save_not_applicable(out: Path, skipped: list[Skipped]) -> None:
    """Add this run's not-applicable pairs to ``out/not_applicable.json``, so ``report`` shows them too."""
    path = out / NOT_APPLICABLE_FILE
    try:
        earlier = rec.read_json(path) if path.exists() or path.is_symlink() else []
    except (OSError, ValueError):
        earlier = []  # rewritten whole below
    if not isinstance(earlier, list):
        earlier = []
    pairs = {(row["problem"], row["method"]): row for row in earlier if isinstance(row, dict) and "method" in row}
    for note in skipped:
        if note.method is not None:
            pairs[(note.problem, note.method)] = {"problem": note.problem, "method": note.method, "reason": note.reason}
    rows = [pairs[key] for key in sorted(pairs, key=lambda key: (str(key[0]), str(key[1])))]
    out.mkdir(parents=True, exist_ok=True)
    write_atomically(path, lambda tmp: tmp.write_text(json.dumps(rows, indent=1) + "\n"))
