"""Conformance checks of problems and methods as library code: what ``tdbench check NAME`` runs and the tests use.

A check is a function that returns (optionally a note), raises :class:`CheckFailed` saying what is wrong, or
raises :class:`CheckSkipped` saying why it cannot be made here (data not present, no reference draws). The
checks themselves are in :mod:`suite.run.problem_checks` and :mod:`suite.run.method_checks`; :func:`run_check`
turns one into a :class:`CheckResult` line, any other exception counting as a failure.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch

PASS, FAIL, SKIP = "PASS", "FAIL", "SKIP"


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
    except Exception as exc:  # a check that crashes is a failure of what it checks
        return CheckResult(check, FAIL, f"{type(exc).__name__}: {exc}")
    return CheckResult(check, PASS, note or "")
