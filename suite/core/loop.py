"""The loop a method runs in: iteration count, stop rule, phase ends, snapshots, checkpoint cadence, progress bar.

A method makes its own steps; :class:`RunLoop` (from :meth:`suite.core.context.RunContext.loop`) decides when
they stop, so that the stopping rules live in one place instead of in every method:

    with context.loop(f"my-method {problem.name}", planned=num_iterations) as loop:
        while not loop.finished():
            ...one step...
            loop.advance(estimate=running_estimate)

Without a time budget a run makes the ``planned`` iterations of its preset and a phase ends after its preset
length; with one (or when replaying a timed run's counts) the run ends when the budget is spent and a phase at
its milestone, a fraction of the budget (the rules and their recording are :class:`RunContext`'s). ``advance``
counts the iterations done, moves the run's progress bar and takes the context's snapshot when one is due, with
``estimate`` called only then. Iterations count over the whole run, across phases and helper functions, so a
method passes its loop on rather than opening a second one.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tqdm.auto import tqdm

if TYPE_CHECKING:
    from suite.core.context import RunContext
    from suite.core.types import ModelProbs


class RunLoop:
    """One run's loop (see the module docstring); made by :meth:`RunContext.loop`."""

    def __init__(self, context: RunContext, label: str, planned: int | None = None, start: int = 0) -> None:
        self.context = context
        #: Iterations done over the whole run (a resumed run starts at the iterations it had done).
        self.iteration = int(start)
        #: Iterations the preset plans for the whole run (None in budgeted runs, where the clock decides, and until
        #: :meth:`plan` where a first phase's length is not known in advance).
        self.planned = None if context.budgeted else planned
        self._bar = tqdm(
            total=self.planned,
            initial=self.iteration,
            desc=label,
            leave=False,
            mininterval=1.0,
            disable=not context.progress or None,
        )
        self._last_checkpoint = time.monotonic()

    def __enter__(self) -> RunLoop:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def budgeted(self) -> bool:
        """Whether the clock (a time budget, or replayed counts) sets the run's length."""
        return self.context.budgeted

    def plan(self, planned: int) -> None:
        """Set the planned iterations of the whole run (runs without a budget), once a phase of unknown length is over.

        A run whose first phase stops early (a flow fit with early stopping) learns its total only then; snapshots
        need it (they fall at fractions of the planned run).
        """
        if not self.budgeted:
            self.planned = int(planned)
            self._bar.total = self.planned
            self._bar.refresh()

    def finished(self, ready: bool = True, planned: int | None = None) -> bool:
        """Whether the run stops before its next step: the planned iterations made, or the budget spent.

        ``ready`` (budgeted runs) is whether the method may stop here, e.g. after a whole thinning interval or once
        it has an estimate; the clock is read only when it is. ``planned`` overrides the loop's plan for this check
        (a phase that ends the run early).
        """
        if not self.budgeted:
            return self.iteration >= (self.planned if planned is None else planned)
        return ready and self.context.stop_due(self.iteration)

    def reached(self, name: str, length: int, fraction: float) -> bool:
        """Whether the phase ending at milestone ``name`` is over: ``length`` iterations, or ``fraction`` of the budget.

        ``length`` counts over the whole run. In a budgeted run a phase with ``fraction`` 0 is over at once.
        """
        if not self.budgeted:
            return self.iteration >= length
        return fraction <= 0 or self.context.milestone(name, self.iteration, fraction)

    def advance(self, steps: int = 1, estimate: Callable[[], Any] | None = None) -> None:
        """Count ``steps`` iterations done, move the bar, and take a snapshot if one is due (``estimate`` makes it).

        Without ``estimate`` no snapshot is considered (a step whose state cannot be scored).
        """
        self.iteration += int(steps)
        self._bar.update(int(steps))
        if estimate is not None:
            self.maybe_snapshot(estimate)

    def maybe_snapshot(self, estimate: Callable[[], Any]) -> bool:
        """Take a snapshot if one is due at the iteration reached (for a method that decides more in between)."""
        return self.context.maybe_snapshot(self.iteration, estimate, self.planned)

    def projected(self, name: str) -> int:
        """Iterations the whole budget allows at the pace so far (budgeted runs; recorded as ``name``)."""
        return self.context.projected_iterations(name, self.iteration)

    def snapshot(self, estimate: Callable[[], ModelProbs | Any]) -> None:
        """The final snapshot, at the iteration reached: the trace ends at the result the method returns."""
        self.context.snapshot(self.iteration, estimate)

    def checkpoint_due(self, every_s: float) -> bool:
        """Whether ``every_s`` seconds of wall time have passed since the last checkpoint (the clock restarts)."""
        if not math.isfinite(every_s) or time.monotonic() - self._last_checkpoint < every_s:
            return False
        self._last_checkpoint = time.monotonic()
        return True

    def show(self, **values: str) -> None:
        """Show ``values`` beside the progress bar (a loss, say), without redrawing it."""
        self._bar.set_postfix(values, refresh=False)

    def close(self) -> None:
        """Close the progress bar."""
        self._bar.close()
