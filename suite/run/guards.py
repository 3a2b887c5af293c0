"""Calling the code a plug-in supplies without letting it break a command: a ``supports()`` that raises, an exit.

A method's ``supports(problem)`` runs while every grid is planned, also for methods nobody asked for (the report
lists every method's records with the same settings), so one that raises must never break ``tdbench run``: it is
read as "does not apply, because of this exception" (:func:`support_reason`), and the method is named once in a
:class:`PluginWarning`. A run whose method calls ``sys.exit`` is a failed run (:func:`exit_reason`), not the end
of the grid. docs/plugins.md, "When a plug-in raises, hangs or exits".
"""

from __future__ import annotations

import warnings

from suite.core.method import Method
from suite.core.plugins import describe_origin
from suite.core.problem import Problem
from suite.core.registry import code_origin

#: Method classes whose ``supports`` raised and that a warning has named (once per process).
_WARNED: set[type] = set()


class PluginWarning(UserWarning):
    """A problem or method (a plug-in's, usually) misbehaved, and the suite went on without it where it had to."""


def one_line(exc: BaseException) -> str:
    """An exception as ``Type: the first line of its message`` (``Type`` alone without a message)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


def exit_reason(exc: SystemExit) -> str:
    """Why a run that raised SystemExit failed: ``the method called sys.exit(0)``."""
    code = "" if exc.code is None else repr(exc.code)
    return f"the method called sys.exit({code})"


def support_reason(method: Method, problem: Problem) -> str | None:
    """``method.supports(problem)``, where an exception (or ``sys.exit``) is the answer "does not apply, because...".

    The first time a method's class raises, a :class:`PluginWarning` names it, its distribution and what to do.
    """
    try:
        return method.supports(problem)
    except (Exception, SystemExit) as exc:  # a plug-in's bug must not break the planning of every grid
        reason = f"supports() raised {one_line(exc)}"
        _warn_once(method, problem, reason)
        return reason


def _warn_once(method: Method, problem: Problem, reason: str) -> None:
    """Name a method whose ``supports`` raised, once per process."""
    cls = type(method)
    if cls in _WARNED:
        return
    _WARNED.add(cls)
    name = getattr(method, "name", cls.__qualname__)
    warnings.warn(
        f"method {name!r} (distribution {describe_origin(code_origin(cls))}): {reason} on problem {problem.name}; it "
        f"is taken as not applying wherever supports() raises. Make supports() return None or a reason (`tdbench "
        f"check {name}` runs it on every problem)",
        PluginWarning,
        stacklevel=3,
    )
