"""Conformance checks of problems and methods as library code: what ``tdbench check NAME`` runs and the tests use.

A check is a function that returns (optionally a note), raises :class:`CheckFailed` saying what is wrong, or
raises :class:`CheckSkipped` saying why it cannot be made here (data not present, no reference draws). The
checks themselves are in :mod:`suite.run.problem_checks` and :mod:`suite.run.method_checks`; :func:`run_check`
turns one into a :class:`CheckResult` line, any other exception counting as a failure (``sys.exit`` too).
:class:`CheckRunner` runs each check under a deadline (:data:`CHECK_DEADLINE_S`), in a thread that is abandoned
when it runs past it; the checks after an overtime are failed as not run.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch

from suite.run.guards import exit_reason, one_line

PASS, FAIL, SKIP = "PASS", "FAIL", "SKIP"
#: Seconds one check may run before it is failed for overtime (``tdbench check --deadline``; tests set less):
#: generous, as a check runs the smoke preset, which takes seconds, or a 2 s budget.
CHECK_DEADLINE_S = 300.0


class CheckFailed(AssertionError):
    """A conformance check that found a fault (the message says which)."""


class CheckSkipped(Exception):
    """A conformance check that cannot be made here, and why."""


@dataclass(frozen=True)
class CheckResult:
    """One check's outcome: ``PASS``, ``FAIL`` or ``SKIP``, with the reason or a note."""

    check: str
    outcome: Literal["PASS", "FAIL", "SKIP"]
    detail: str = ""

    @property
    def failed(self) -> bool:
        """Whether the check failed."""
        return self.outcome == FAIL

    def line(self) -> str:
        """The check as one line of ``tdbench check``'s output."""
        detail = " ".join(self.detail.split())
        return f"{self.outcome}  {self.check}" + (f": {detail}" if detail else "")


def require(condition: bool, message: str) -> None:
    """:class:`CheckFailed` with ``message`` unless ``condition`` holds."""
    if not condition:
        raise CheckFailed(message)


def require_close(actual: torch.Tensor, expected: torch.Tensor, what: str, rtol: float, atol: float) -> None:
    """:class:`CheckFailed` naming ``what`` unless the tensors agree (``torch.testing.assert_close``)."""
    try:
        torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol)
    except AssertionError as exc:
        summary = "; ".join(line.strip() for line in str(exc).splitlines() if line.strip())
        raise CheckFailed(f"{what}: {summary}") from None


def run_check(check: str, function: Callable[[], str | None]) -> CheckResult:
    """Run one check: PASS (with its note), FAIL (its message, or the exception it raised), or SKIP (why)."""
    try:
        note = function()
    except CheckSkipped as exc:
        return CheckResult(check, SKIP, str(exc))
    except CheckFailed as exc:
        return CheckResult(check, FAIL, str(exc))
    except SystemExit as exc:  # a method that exits must not end the checks (and their exit status) with it
        return CheckResult(check, FAIL, exit_reason(exc))
    except Exception as exc:  # a check that crashes is a failure of what it checks
        return CheckResult(check, FAIL, f"{type(exc).__name__}: {exc}")
    return CheckResult(check, PASS, note or "")


class CheckRunner:
    """Runs checks one after another, each in a thread of its own that is given ``deadline_s`` seconds (None: none,
    in this thread).

    A check still running at its deadline is failed for overtime and abandoned: a thread cannot be stopped, so it
    goes on (a daemon, it ends with the process) and every later check is failed as not run, since it would run
    the same code beside it. A thread, not a worker process: the checks run the very objects they are given
    (a method registered in this process, by a script, a notebook or a test, is unknown to a fresh process), and
    this process, whose torch has used its thread pool, is never forked (:mod:`suite.run.parallel`).
    """

    def __init__(self, deadline_s: float | None = CHECK_DEADLINE_S) -> None:
        if deadline_s is not None and not deadline_s > 0:
            raise ValueError(f"a check's deadline must be a positive number of seconds, got {deadline_s}")
        self.deadline_s = deadline_s
        #: The check that ran past its deadline, once one has.
        self.overran: str | None = None

    def run(self, check: str, function: Callable[[], str | None]) -> CheckResult:
        """:func:`run_check` under the deadline; FAIL without running it after an earlier overtime."""
        if self.overran is not None:
            why = f"not run: the check {self.overran!r} ran past its deadline and may still be running"
            return CheckResult(check, FAIL, why)
        if self.deadline_s is None:
            return run_check(check, function)
        outcome: list[CheckResult] = []

        def target() -> None:
            try:
                outcome.append(run_check(check, function))
            except BaseException as exc:  # whatever it raised, the check has an outcome (not an overtime)
                outcome.append(CheckResult(check, FAIL, one_line(exc)))

        worker = threading.Thread(target=target, name=f"check: {check}", daemon=True)
        worker.start()
        worker.join(self.deadline_s)
        if outcome:
            return outcome[0]
        self.overran = check
        return CheckResult(
            check, FAIL, f"overtime: still running after {self.deadline_s:g} s (the deadline of one check), abandoned"
        )
