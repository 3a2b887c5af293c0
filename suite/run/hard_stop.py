"""A hard limit on a timed run: a method that ignores ``context.stop_due()`` is ended and recorded as failed.

Methods stop themselves at their time budget (``RunContext.stop_due``); one that does not (a plug-in's loop that
never asks) would hold its worker, or the whole command under ``--jobs 1``, for ever. :func:`hard_stop` arms a
wall-clock timer of :func:`hard_limit_s` (three times the budget, and at least a minute more than it) around the
method's ``run``; when it fires, :class:`Overtime` is raised in the running method, and the runner records the run
as ``failed`` for overtime (issue 51). ``Overtime`` is a ``BaseException``, so a method's ``except Exception`` does
not swallow it.

The timer is ``SIGALRM`` (``signal.setitimer``): POSIX only, and only in a process's main thread, where local
worker processes and ``--jobs 1`` run their runs. Elsewhere (Windows, a Dask worker's task thread) no hard limit is
set, and the Dask executor's own retries and timeouts apply. The exception arrives when the interpreter next runs
Python code: a method blocked inside one long native call is ended when that call returns.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

#: The hard limit is this many times the time budget ...
HARD_LIMIT_FACTOR = 3.0
#: ... and at least this many seconds more than the budget (a short budget's run still has its set-up and slack).
HARD_LIMIT_MIN_EXTRA_S = 60.0


class Overtime(BaseException):
    """Raised inside a method that is still running at its hard limit."""


def hard_limit_s(time_budget_s: float) -> float:
    """Wall-clock seconds after which a run of ``time_budget_s`` compute seconds is ended.

    Example:
        >>> hard_limit_s(4.0), hard_limit_s(600.0)
        (64.0, 1800.0)
    """
    return max(HARD_LIMIT_FACTOR * time_budget_s, time_budget_s + HARD_LIMIT_MIN_EXTRA_S)


def can_stop_here() -> bool:
    """Whether :func:`hard_stop` can arm its timer here (POSIX, the main thread)."""
    return hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()


def overtime_reason(time_budget_s: float, limit_s: float) -> str:
    """The failed record's reason for a run ended at its hard limit."""
    return (
        f"overtime: still running after {limit_s:g} s, its hard limit ({HARD_LIMIT_FACTOR:g} x its time budget of "
        f"{time_budget_s:g} s, at least {HARD_LIMIT_MIN_EXTRA_S:g} s more): the method does not stop at its budget "
        "(RunContext.stop_due)"
    )


@contextlib.contextmanager
def hard_stop(limit_s: float | None) -> Iterator[None]:
    """Within the block, :class:`Overtime` is raised after ``limit_s`` wall-clock seconds (None: no limit)."""
    if limit_s is None or not can_stop_here():
        yield
        return

    def fire(signum: int, frame: FrameType | None) -> None:
        raise Overtime(limit_s)

    previous = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, limit_s)
    try:
        yield
    finally:
        try:
            signal.setitimer(signal.ITIMER_REAL, 0)
        finally:  # restored even when the timer fires just as the block ends
            signal.signal(signal.SIGALRM, previous)
