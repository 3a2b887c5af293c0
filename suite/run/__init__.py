"""Running grids as a library: a typed :class:`GridSpec` (what) and :class:`Execution` (where, how), :func:`plan`
and :func:`run_grid`. The command line and the studies both go through these."""

from suite.run.grid import LOST, GridOutcome, PlannedGrid, plan_grid, run_grid
from suite.run.plan import PlannedRun, Skipped, plan
from suite.run.spec import Execution, GridSpec, Placement, UsageError, place

__all__ = [
    "LOST",
    "Execution",
    "GridOutcome",
    "GridSpec",
    "Placement",
    "PlannedGrid",
    "PlannedRun",
    "Skipped",
    "UsageError",
    "place",
    "plan",
    "plan_grid",
    "run_grid",
]
