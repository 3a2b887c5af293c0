"""The names problems and methods may be registered under: safe as parts of file names, and plain text anywhere.

A name is a part of every record's file name (``<problem>__<method>__seed<N>__<hash>.json``), of leaderboard and
plot file names, and a label on the page and in plots; so it may hold no path separator, no ``..`` of its own, no
markup and no mathtext (docs/plugins.md, "Names").
"""

from __future__ import annotations

import re

#: Every problem and method name matches this: lower-case letters, digits, ``.``, ``_`` and ``-``, starting with a
#: letter or digit (so never ``.`` or ``..``, and never a hidden file's name).
NAME_PATTERN = r"[a-z0-9][a-z0-9._-]*"
#: The longest name (record file names hold two of them and stay well under the usual 255 bytes).
MAX_NAME_LENGTH = 80

_NAME = re.compile(NAME_PATTERN)


class InvalidNameError(ValueError):
    """A problem or method name that does not match :data:`NAME_PATTERN` (or is too long)."""


def name_problem(name: object) -> str | None:
    """Why ``name`` cannot be a problem or method name, or None when it can."""
    if not isinstance(name, str):
        return f"a name must be a string, got {type(name).__name__}"
    if not _NAME.fullmatch(name):
        return (
            f"{name!r} is not a valid name: names match {NAME_PATTERN} (lower-case letters, digits, '.', '_' and '-', "
            "starting with a letter or digit)"
        )
    if len(name) > MAX_NAME_LENGTH:
        return f"{name[:20]!r}... is not a valid name: names have at most {MAX_NAME_LENGTH} characters, not {len(name)}"
    return None


def check_name(kind: str, name: object) -> str:
    """``name`` if it is a valid ``kind`` (problem or method) name, else :class:`InvalidNameError` saying why."""
    reason = name_problem(name)
    if reason is not None:
        raise InvalidNameError(f"{kind} {reason}")
    return str(name)


__all__ = ["MAX_NAME_LENGTH", "NAME_PATTERN", "InvalidNameError", "check_name", "name_problem"]
