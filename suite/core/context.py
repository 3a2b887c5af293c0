"""The run context: everything about one run that is not a method option, and the run's clock, budget and trace.

:meth:`suite.core.method.Method.run` receives the problem and a :class:`RunContext`: the seed, device, dtype,
profile, number of draws to return, whether to show progress bars, the phase timer (``context.timer.phase``), the
checkpoint slot, the time budget and the trace of running estimates. A method runs its steps in
``context.loop(...)`` (:mod:`suite.core.loop`), which makes the clock's calls for it: ``stop_due`` (the budget is
spent), ``milestone`` (a fraction of it is), ``projected_iterations`` (the iterations the budget allows at the pace
so far) and ``maybe_snapshot`` / ``snapshot`` (a running estimate, made with the clock paused). They stay public
for a loop a package runs itself.

**Iterations and replays.** ``iteration`` is the method's count of work over the whole run. Every clock decision
(a snapshot, a milestone, a projected length, the stop) is recorded in :attr:`RunContext.counts` as the iteration
at which it was made; a run given those counts (``replay``) makes the same decisions without reading the clock,
so a timed run is reproduced bitwise on any machine.

**The compute clock** (:class:`ComputeClock`) starts with the run and leaves out the seconds spent in snapshots,
up to a free share of the method's compute; a resumed run adds its earlier attempts' seconds. The budget rules
(free snapshot share, work after the stop, the over-budget mark) and their numbers: :mod:`suite.core.budget` and
docs/equal-compute.md, "The budget rules".
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

from suite.core.budget import FREE_SNAPSHOT_SHARE, check_time_budget
from suite.core.checkpoint import CheckpointSlot
from suite.core.device import synchronize
from suite.core.loop import RunLoop
from suite.core.types import Draws, ModelProbs

#: Points of a run's trace: geometrically spaced from ``FIRST_POINT`` of the run to its end.
SNAPSHOT_POINTS = 25
FIRST_POINT = 0.01
#: Models kept per snapshot (the most probable): enough for the errors to be exact to ~1e-6 on large spaces.
MAX_SNAPSHOT_MODELS = 65_536
#: Count names the context itself uses.
STOP, SNAPSHOTS = "stop", "snapshots"


class BudgetTooSmall(RuntimeError):
    """The time budget ran out before the method had any estimate to return (the run is recorded as failed)."""


def snapshot_fractions(points: int = SNAPSHOT_POINTS, first: float = FIRST_POINT) -> list[float]:
    """Fractions of a run at which snapshots fall: ``first`` to 1, geometrically spaced (the last is the end)."""
    return [first ** (1 - k / (points - 1)) for k in range(points)]


class ComputeClock:
    """Seconds of the method's own compute: wall time since :meth:`start`, minus paused blocks, plus earlier attempts.

    Paused seconds beyond ``free_share`` of the compute outside pauses are charged back (:attr:`charged_s`, which
    never decreases, so the clock never runs backwards). On CUDA a pause synchronises the device first, so queued
    kernels count as the method's time.
    """

    def __init__(self, device: torch.device, free_share: float = FREE_SNAPSHOT_SHARE) -> None:
        self.device = device
        self.free_share = free_share
        self._start: float | None = None
        self.paused_s = 0.0
        self.charged_s = 0.0
        self.earlier_s = 0.0

    def start(self) -> None:
        """Start counting (once)."""
        if self._start is None:
            self._start = time.perf_counter()

    def elapsed(self) -> float:
        """Compute seconds so far."""
        if self._start is None:
            return self.earlier_s
        return time.perf_counter() - self._start - self.paused_s + self.charged_s + self.earlier_s

    def add_earlier(self, seconds: float) -> None:
        """Count ``seconds`` spent by earlier, interrupted attempts of this run (resumed from a checkpoint)."""
        if not (seconds >= 0 and math.isfinite(seconds)):
            raise ValueError(f"earlier seconds must be finite and >= 0, got {seconds}")
        self.earlier_s += seconds

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Leave the enclosed block out of the compute time."""
        synchronize(self.device)
        start = time.perf_counter()
        try:
            yield
        finally:
            synchronize(self.device)
            now = time.perf_counter()
            self.paused_s += now - start
            if self._start is not None:  # beyond the free share, a pause is compute
                own = now - self._start - self.paused_s
                self.charged_s = max(self.charged_s, self.paused_s - self.free_share * own)


class RunTimer:
    """Seconds per named phase, leaving out the clock's free paused seconds (snapshots) that fall inside a phase."""

    def __init__(self, clock: ComputeClock) -> None:
        self.clock = clock
        self.timings: dict[str, float] = {}

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time the enclosed block under ``name`` (times add up over repeated phases)."""
        synchronize(self.clock.device)
        start, free = time.perf_counter(), self.clock.paused_s - self.clock.charged_s
        try:
            yield
        finally:
            synchronize(self.clock.device)
            spent = time.perf_counter() - start - (self.clock.paused_s - self.clock.charged_s - free)
            self.timings[name] = self.timings.get(name, 0.0) + spent


@dataclass
class RunningEstimate:
    """What a method would return if stopped now: q(m) and, where cheap, its ELBO estimate (and draws)."""

    model_probs: ModelProbs | None
    elbo: float | None = None
    draws: Draws | None = None


@dataclass
class Snapshot:
    """One point of a run's trace: compute seconds, the method's iteration, and its running estimate."""

    seconds: float
    iteration: int
    estimate: RunningEstimate


@dataclass
class RunContext:
    """Everything about one run that is not a method option (see the module docstring).

    ``time_budget_s`` (None: the profile's iteration counts decide the length) is the compute time the run may
    use. ``replay`` holds the counts of an earlier timed run (:attr:`counts` of its record): the run then makes
    every clock decision at the recorded iteration instead of reading the clock.
    """

    seed: int
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    dtype: torch.dtype = torch.float64
    profile: str = "smoke"
    num_draws: int = 4096
    progress: bool = False
    checkpoint: CheckpointSlot | None = None
    time_budget_s: float | None = None
    replay: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.time_budget_s is not None:  # a TimeBudget passes as it is; a plain number is checked
            try:
                self.time_budget_s = check_time_budget(self.time_budget_s)
            except ValueError as error:
                raise ValueError(f"time budget {error}") from None
        self.clock = ComputeClock(self.device)
        self.timer = RunTimer(self.clock)
        self.counts: dict[str, Any] = {SNAPSHOTS: []}
        self.snapshots: list[Snapshot] = []
        self._next_point = 0
        #: (compute seconds, iteration) at the first clock decision: where the method's loop started.
        self._loop_start: tuple[float, int] | None = None
        if self.replay is not None:
            self._replay_snapshots = [int(i) for i in self.replay.get(SNAPSHOTS, [])]

    def loop(self, label: str, planned: int | None = None, start: int = 0) -> RunLoop:
        """The run's loop (:mod:`suite.core.loop`): ``planned`` iterations without a budget, from ``start``."""
        return RunLoop(self, label, planned, start)

    # ----------------------------------------------------------------- budget
    @property
    def budgeted(self) -> bool:
        """Whether the run's length is set by a time budget (or by the counts of a timed run it replays)."""
        return self.time_budget_s is not None or self.replay is not None

    @property
    def dtype_name(self) -> str:
        """The dtype as the suite names it (``float64``, ``float32``)."""
        return str(self.dtype).removeprefix("torch.")

    def stop_due(self, iteration: int) -> bool:
        """Whether the run must stop now, at ``iteration``: its time budget is spent (never without a budget)."""
        if self.replay is not None:
            due = STOP in self.replay and iteration >= int(self.replay[STOP])
            if due:
                self.counts[STOP] = int(self.replay[STOP])  # a replayed run's record can itself be replayed
            return due
        if self.time_budget_s is None:
            return False
        self._mark_loop_start(iteration)
        if STOP in self.counts:
            return iteration >= self.counts[STOP]
        if self.clock.elapsed() >= self.time_budget_s:
            self.counts[STOP] = iteration
            return True
        return False

    def milestone(self, name: str, iteration: int, fraction: float) -> bool:
        """Whether ``fraction`` of the time budget is spent at ``iteration`` (recorded as ``counts[name]``).

        Once reached it stays reached. Only budgeted runs have milestones; others use their iteration counts.
        """
        if not 0 < fraction <= 1:
            raise ValueError(f"milestone fraction must lie in (0, 1], got {fraction}")
        if self.replay is not None:
            reached = name in self.replay and iteration >= int(self.replay[name])
            if reached:
                self.counts[name] = int(self.replay[name])
            return reached
        if self.time_budget_s is None:
            raise ValueError(f"milestone {name!r} asked for in a run without a time budget")
        self._mark_loop_start(iteration)
        if name in self.counts:
            return iteration >= self.counts[name]
        if self.clock.elapsed() >= fraction * self.time_budget_s:
            self.counts[name] = iteration
            return True
        return False

    def projected_iterations(self, name: str, iteration: int, at_least: int = 1) -> int:
        """Iterations the whole time budget allows at the pace of the first ``iteration`` ones (recorded as ``name``).

        Methods whose schedules depend on the run length (a cosine learning rate, say) stretch them over this.
        """
        if self.replay is not None:
            if name not in self.replay:
                raise ValueError(f"replayed counts have no {name!r}")
            self.counts[name] = int(self.replay[name])
            return self.counts[name]
        if self.time_budget_s is None:
            raise ValueError(f"projected_iterations({name!r}) asked for in a run without a time budget")
        if name not in self.counts:
            # The pace is measured from the first clock decision (the start of the method's loop), so that setup
            # before it (building flows, loading draws) does not make the projection short.
            start_s, start_iteration = self._loop_start or (0.0, 0)
            spent = max(self.clock.elapsed() - start_s, 1e-9)
            left = max(self.time_budget_s - start_s, 0.0)
            projected = start_iteration + int((iteration - start_iteration) * left / spent)
            self.counts[name] = max(at_least, iteration, projected)
        return int(self.counts[name])

    def _mark_loop_start(self, iteration: int) -> None:
        if self._loop_start is None:
            self._loop_start = (self.clock.elapsed(), int(iteration))

    def remaining_s(self) -> float:
        """Compute seconds left in the budget (infinite without one; not meaningful when replaying)."""
        if self.time_budget_s is None:
            return math.inf
        return self.time_budget_s - self.clock.elapsed()

    # -------------------------------------------------------------- snapshots
    def snapshot_due(self, iteration: int, total_iterations: int | None = None) -> bool:
        """Whether a snapshot falls at ``iteration`` (recorded): geometrically spaced points of compute time.

        With a budget the points are fractions of it (:func:`snapshot_fractions`); without, fractions of
        ``total_iterations``, which the method must then give. The last point is the end of the run, where the
        method takes its final snapshot itself.
        """
        if self.replay is not None:
            due = (
                self._next_point < len(self._replay_snapshots) and iteration >= self._replay_snapshots[self._next_point]
            )
            if due:
                self._next_point += 1
                self.counts[SNAPSHOTS].append(iteration)
            return due
        fractions = snapshot_fractions()[:-1]
        if self.time_budget_s is not None:
            self._mark_loop_start(iteration)
            position = self.clock.elapsed() / self.time_budget_s
        elif total_iterations is not None and total_iterations > 0:
            position = iteration / total_iterations
        else:
            raise ValueError("snapshot_due needs total_iterations in a run without a time budget")
        if self._next_point >= len(fractions) or position < fractions[self._next_point]:
            return False
        while self._next_point < len(fractions) and position >= fractions[self._next_point]:
            self._next_point += 1
        self.counts[SNAPSHOTS].append(iteration)
        return True

    def snapshot(self, iteration: int, estimate_fn: Callable[[], RunningEstimate | ModelProbs | None]) -> None:
        """Record the running estimate ``estimate_fn()`` at ``iteration``, with the clock paused while it is made.

        Call it at the end of the run with the estimate the method returns, so that the trace ends at the result.
        """
        seconds = self.clock.elapsed()
        with self.clock.paused():
            estimate = estimate_fn()
            if estimate is None:
                return
            if isinstance(estimate, ModelProbs):
                estimate = RunningEstimate(estimate)
            probs = estimate.model_probs
            if probs is not None:
                if probs.prob.numel() > MAX_SNAPSHOT_MODELS:
                    probs = probs.top(MAX_SNAPSHOT_MODELS)
                probs = ModelProbs(probs.index.detach().cpu(), probs.prob.detach().to("cpu", torch.float64))
            elbo = None if estimate.elbo is None else float(estimate.elbo)
            estimate = RunningEstimate(probs, elbo, estimate.draws)
        if self.snapshots and self.snapshots[-1].iteration == iteration:
            self.snapshots[-1] = Snapshot(seconds, int(iteration), estimate)  # the final call replaces a due one
        else:
            self.snapshots.append(Snapshot(seconds, int(iteration), estimate))

    def maybe_snapshot(
        self,
        iteration: int,
        estimate_fn: Callable[[], RunningEstimate | ModelProbs | None],
        total_iterations: int | None = None,
    ) -> bool:
        """Take a snapshot if one is due at ``iteration`` (:meth:`snapshot_due`); returns whether it did."""
        if not self.snapshot_due(iteration, total_iterations):
            return False
        self.snapshot(iteration, estimate_fn)
        return True

    # ------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        """The clock, counts and trace so far, as a weights-only checkpoint value (see :mod:`suite.core.checkpoint`)."""
        points = []
        for snap in self.snapshots:
            probs = snap.estimate.model_probs
            points.append(
                {
                    "seconds": snap.seconds,
                    "iteration": snap.iteration,
                    "elbo": snap.estimate.elbo,
                    "index": None if probs is None else probs.index,
                    "prob": None if probs is None else probs.prob,
                }
            )
        counts = {k: (list(v) if isinstance(v, list) else v) for k, v in self.counts.items()}
        return {"elapsed_s": self.clock.elapsed(), "counts": counts, "points": points, "next_point": self._next_point}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from :meth:`state_dict` of an interrupted attempt: its seconds, counts and trace."""
        self.clock.add_earlier(float(state["elapsed_s"]))
        self.counts = {k: (list(v) if isinstance(v, list) else v) for k, v in state["counts"].items()}
        self._next_point = int(state["next_point"])
        self.snapshots = []
        for point in state["points"]:
            probs = None if point["index"] is None else ModelProbs(point["index"], point["prob"])
            self.snapshots.append(
                Snapshot(float(point["seconds"]), int(point["iteration"]), RunningEstimate(probs, point["elbo"]))
            )
