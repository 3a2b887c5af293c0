"""Loading plug-ins from the entry-point groups ``tdbench.problems`` and ``tdbench.methods``, and what went wrong.

A plug-in that cannot be registered never breaks the suite: it becomes a :class:`PluginLoadFailure`, which the
registry keeps, reports once on stderr, shows in ``tdbench list`` and gives as the answer when its name is asked
for. The rules (docs/plugins.md):

- an entry point whose name a built-in already has is refused; the built-in is kept;
- two distributions whose entry points have the same name are both refused: neither wins by install order;
- the entry point's name is the registry name; a class that also carries ``@register_method``/``@register_problem``
  must use the same name there, or the entry point is refused (the decorator's name stays, as it ran on import);
- an entry point may also name a module whose classes register themselves on import (their origin is the
  entry point's distribution);
- an entry point whose name does not match :data:`suite.core.names.NAME_PATTERN` is refused before its code is
  loaded (a name becomes part of file names and labels).
"""

from __future__ import annotations

import types
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import EntryPoint
from typing import Any

from suite.core.names import InvalidNameError, name_problem

#: The registry's answer to "which distribution provides this class": ``{"distribution", "version"}`` or None.
OriginOf = Callable[[type], dict[str, str] | None]


class NameClash(ValueError):
    """A name that is already registered, by another class."""


@dataclass(frozen=True)
class PluginLoadFailure:
    """A plug-in entry point that was not registered, and why (``failed to load: ...`` or ``refused: ...``)."""

    kind: str
    name: str
    distribution: str
    reason: str

    def __str__(self) -> str:
        reason = " ".join(self.reason.split())  # one line, whatever the exception's message looked like
        return f"{self.kind} {self.name!r} from distribution {self.distribution} {reason}"


def entry_point_origin(ep: EntryPoint) -> dict[str, str] | None:
    """``{"distribution", "version"}`` of the distribution that declares ``ep`` (None when unknown)."""
    dist = getattr(ep, "dist", None)
    if dist is None:
        return None
    return {"distribution": dist.name, "version": dist.version}


def describe_origin(origin: dict[str, str] | None) -> str:
    """An origin as ``name version`` (``unknown`` for None)."""
    return "unknown" if origin is None else f"{origin['distribution']} {origin['version']}"


def _same_distribution(a: dict[str, str] | None, b: dict[str, str] | None) -> bool:
    return a is not None and b is not None and a["distribution"] == b["distribution"]


def load_group(
    entry_points: list[EntryPoint],
    kind: str,
    table: dict[str, type],
    base: type,
    register: Callable[[str, type], Any],
    origins: dict[type, dict[str, str]],
    origin_of: OriginOf,
) -> list[PluginLoadFailure]:
    """Register the classes ``entry_points`` name into ``table``; the entry points refused or broken, and why.

    ``register(name, cls)`` registers a class (raising TypeError or :class:`NameClash` to refuse it); the origin
    of every class registered from an entry point is kept in ``origins``.
    """
    by_name: dict[str, list[EntryPoint]] = {}
    for ep in entry_points:
        by_name.setdefault(ep.name, []).append(ep)
    problems: list[PluginLoadFailure] = []
    for name, group in sorted(by_name.items()):
        labels = [describe_origin(entry_point_origin(ep)) for ep in group]
        if len(group) > 1:
            for label in labels:
                others = ", ".join(other for other in labels if other != label) or label
                reason = (
                    f"refused: distribution {others} also has a {kind} entry point named {name!r}; neither is used "
                    "until one is uninstalled or renames its entry point"
                )
                problems.append(PluginLoadFailure(kind, name, label, reason))
            continue
        problem = _load_one(group[0], kind, table, base, register, origins, origin_of)
        if problem is not None:
            problems.append(problem)
    return problems


def _load_one(
    ep: EntryPoint,
    kind: str,
    table: dict[str, type],
    base: type,
    register: Callable[[str, type], Any],
    origins: dict[type, dict[str, str]],
    origin_of: OriginOf,
) -> PluginLoadFailure | None:
    """Load and register one entry point; its :class:`PluginLoadFailure`, or None when it is registered."""
    origin = entry_point_origin(ep)
    label = describe_origin(origin)

    def refused(reason: str) -> PluginLoadFailure:
        return PluginLoadFailure(kind, ep.name, label, reason)

    bad_name = name_problem(ep.name)
    if bad_name is not None:  # refused before running its code: the name would reach file names and labels
        return refused(f"refused: the entry point's {bad_name}; rename the entry point")
    owner = table.get(ep.name)
    if owner is not None and not _same_distribution(origin_of(owner), origin):  # refused before running its code
        owner_origin = origin_of(owner)
        builtin = owner_origin is not None and owner_origin["distribution"] == "tdbench"
        what = (
            f"tdbench's built-in {kind}" if builtin else f"the {kind} of distribution {describe_origin(owner_origin)}"
        )
        return refused(f"refused: the name is taken by {what} ({owner.__module__}.{owner.__qualname__}), which is kept")
    before = dict(table)
    try:
        obj = ep.load()
    except (NameClash, InvalidNameError) as exc:  # its module registers, with a decorator, a name taken or invalid
        return refused(f"refused: {exc}")
    except Exception as exc:  # a broken plug-in must not break the suite
        return refused(f"failed to load: {type(exc).__name__}: {exc}")
    for added, cls in table.items():  # classes its module registered on import come from its distribution
        if before.get(added) is not cls and origin is not None:
            origins.setdefault(cls, origin)
    if isinstance(obj, types.ModuleType):
        return None
    if not (isinstance(obj, type) and issubclass(obj, base)):
        return refused(f"refused: {ep.value} is not a {base.__name__} subclass (is it in the right group?)")
    names = [registered for registered, cls in table.items() if cls is obj]
    if names and ep.name not in names:
        return refused(
            f"refused: {ep.value} is registered as {names[0]!r} by its @register_{kind} decorator; name the entry "
            f"point {names[0]!r} too, or drop the decorator"
        )
    try:
        register(ep.name, obj)
    except (TypeError, NameClash) as exc:  # e.g. a method written against the old run() signature
        return refused(f"refused: {exc}")
    if origin is not None:
        origins[obj] = origin
    return None
