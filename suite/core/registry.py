"""Name -> factory registries for problems and methods, extended through entry points.

Built-in problems and methods register themselves when the ``problems`` and
``methods`` packages are imported. Other installed distributions add theirs
through the entry-point groups ``tdbench.problems`` and ``tdbench.methods``:
each entry point names a ``Problem`` or ``Method`` subclass (or a module that
registers its classes on import). A plug-in that cannot be registered (broken,
or its name clashes) is kept as a :class:`suite.core.plugins.PluginLoadFailure`,
reported once on stderr, and named when it is asked for (:func:`refusal`). Every name must match
:data:`suite.core.names.NAME_PATTERN` (``[a-z0-9][a-z0-9._-]*``): a bad one is refused with
:class:`suite.core.names.InvalidNameError`, or, for an entry point, reported like any broken plug-in.
"""

from __future__ import annotations

import importlib
import inspect
import sys
import typing
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any, TypeVar

from suite.core.method import Method, check_run_signature
from suite.core.names import check_name
from suite.core.plugins import NameClash, PluginLoadFailure, describe_origin, load_group
from suite.core.problem import Problem
from suite.origin import check_own_packages, module_origin

T = TypeVar("T")

_PROBLEMS: dict[str, type[Problem]] = {}
_METHODS: dict[str, type[Method]] = {}
#: Distribution of each class registered through an entry point (others are found from their module).
_ORIGINS: dict[type, dict[str, str]] = {}
#: Plug-ins that were not registered, and why.
_LOAD_FAILURES: list[PluginLoadFailure] = []
_loaded = False


class UnknownNameError(KeyError):
    """A problem or method name that is not registered."""

    def __str__(self) -> str:
        return str(self.args[0])


def _describe(cls: type) -> str:
    doc = inspect.getdoc(cls) or ""
    return doc.strip().splitlines()[0] if doc.strip() else ""


def _register(table: dict[str, type], base: type, name: str) -> Callable[[type[T]], type[T]]:
    check_name(base.__name__.lower(), name)  # InvalidNameError: a name must be safe in file names and labels

    def decorator(cls: type[T]) -> type[T]:
        if not (isinstance(cls, type) and issubclass(cls, base)):
            raise TypeError(f"{cls!r} is not a subclass of {base.__name__}")
        if base is Method:
            check_run_signature(cls)
        if name in table and table[name] is not cls:
            owner = table[name]
            raise NameClash(
                f"{base.__name__.lower()} name {name!r} is already registered by {owner.__module__}."
                f"{owner.__qualname__} (distribution {describe_origin(code_origin(owner))})"
            )
        cls.name = name  # type: ignore[attr-defined]
        table[name] = cls
        return cls

    return decorator


def register_problem(name: str) -> Callable[[type[T]], type[T]]:
    """Class decorator that registers a ``Problem`` subclass under ``name`` (matching :data:`NAME_PATTERN`)."""
    return _register(_PROBLEMS, Problem, name)


def register_problem_variant(
    name: str, base: type[Problem], fixed: dict[str, Any], doc: str, **class_attributes: Any
) -> type[Problem]:
    """Register a subclass of ``base`` under ``name`` whose constructor pins the arguments ``fixed``.

    The subclass's constructor takes the other arguments of ``base`` (same names, defaults and type hints, so
    ``--problem-option`` checks them as usual); ``class_attributes`` (e.g. ``planned_in``, ``sweep``) are set on it.
    """
    signature = inspect.signature(base.__init__)
    kept = [p for p in signature.parameters.values() if p.name not in fixed]
    hints = {k: v for k, v in typing.get_type_hints(base.__init__).items() if k not in fixed}
    variant_signature = signature.replace(parameters=kept)

    def __init__(self: Problem, *args: Any, **kwargs: Any) -> None:
        bound = variant_signature.bind(self, *args, **kwargs)
        arguments = {k: v for k, v in bound.arguments.items() if k != "self"}
        base.__init__(self, **fixed, **arguments)

    __init__.__signature__ = variant_signature  # type: ignore[attr-defined]
    __init__.__annotations__ = hints
    class_name = "".join(part.capitalize() for part in name.replace("_", "-").split("-"))
    namespace = {**class_attributes, "__init__": __init__, "__doc__": doc, "__module__": base.__module__}
    return register_problem(name)(type(class_name, (base,), namespace))


def register_method(name: str) -> Callable[[type[T]], type[T]]:
    """Class decorator that registers a ``Method`` subclass under ``name`` (matching :data:`NAME_PATTERN`)."""
    return _register(_METHODS, Method, name)


def code_origin(cls: type) -> dict[str, str] | None:
    """``{"distribution": name, "version": version}`` of the distribution providing a registered class, else None.

    Built-ins are ``tdbench`` (its installed version, or the checkout's ``pyproject.toml`` version followed by
    `` (checkout)``); a class from an entry point, the distribution declaring it; any other class, the
    distribution that installs its module's top-level package (None for ``__main__`` or a bare folder).

    >>> code_origin(problem_class("sas"))["distribution"]
    'tdbench'
    """
    return _ORIGINS.get(cls) or module_origin(cls.__module__)


def from_entry_point(cls: type) -> bool:
    """Whether ``cls`` was registered from a plug-in's entry point (or by a module an entry point names)."""
    return cls in _ORIGINS


def _load_entry_points(group: str, table: dict[str, type], base: type) -> list[PluginLoadFailure]:
    """Register the entry points of ``group``; those refused or broken (:mod:`suite.core.plugins`)."""
    kind = base.__name__.lower()

    def register(name: str, cls: type) -> None:
        _register(table, base, name)(cls)

    return load_group(list(entry_points(group=group)), kind, table, base, register, _ORIGINS, code_origin)


def load_all(report: bool = True) -> None:
    """Import built-in problems and methods and load entry-point plug-ins (once).

    Refuses (:class:`suite.origin.ForeignPackageError`) when ``methods`` or ``problems`` is not tdbench's own
    package. With ``report``, each plug-in that was not registered is said once on stderr, in one line (worker
    processes, whose parent said it, pass False).
    """
    global _loaded
    if _loaded:
        return
    check_own_packages()  # before importing them: a foreign `methods` folder is never run
    _loaded = True
    importlib.import_module("problems")
    importlib.import_module("methods")
    found = _load_entry_points("tdbench.problems", _PROBLEMS, Problem)
    found += _load_entry_points("tdbench.methods", _METHODS, Method)
    _LOAD_FAILURES.extend(found)
    if report:
        for problem in found:
            print(f"tdbench: {problem}", file=sys.stderr)


def plugin_load_failures() -> list[PluginLoadFailure]:
    """The plug-ins that were not registered (failed to load, or refused for a clash), with the reasons."""
    load_all()
    return list(_LOAD_FAILURES)


def refusal(kind: str, name: str) -> str | None:
    """Why the plug-in ``kind`` (``problem`` or ``method``) named ``name`` is not registered, or None."""
    reasons = [str(problem) for problem in plugin_load_failures() if problem.kind == kind and problem.name == name]
    return "; ".join(reasons) or None


def unknown_name(name: str) -> str:
    """Why ``name`` is neither a registered problem nor method: refused plug-ins' reasons, else the valid names."""
    refused = [reason for kind in ("problem", "method") if (reason := refusal(kind, name))]
    return "; ".join(refused) or (
        f"unknown problem or method {name!r}; problems: {', '.join(available_problems())}; "
        f"methods: {', '.join(available_methods())}"
    )


def available_problems() -> dict[str, str]:
    """Registered problem names with their one-line descriptions, sorted by name."""
    load_all()
    return {name: _describe(cls) for name, cls in sorted(_PROBLEMS.items())}


def available_methods() -> dict[str, str]:
    """Registered method names with their one-line descriptions, sorted by name."""
    load_all()
    return {name: _describe(cls) for name, cls in sorted(_METHODS.items())}


def _lookup(table: dict[str, type], kind: str, name: str) -> type:
    load_all()
    if name not in table:
        raise UnknownNameError(
            refusal(kind, name) or f"unknown {kind} {name!r}; valid {kind}s: {', '.join(sorted(table))}"
        )
    return table[name]


def problem_class(name: str) -> type[Problem]:
    """The class registered under problem ``name``."""
    return _lookup(_PROBLEMS, "problem", name)


def method_class(name: str) -> type[Method]:
    """The class registered under method ``name``."""
    return _lookup(_METHODS, "method", name)


def make_problem(name: str, **config: Any) -> Problem:
    """Instantiate the problem registered under ``name``."""
    return problem_class(name)(**config)


def make_method(name: str, **options: Any) -> Method:
    """Instantiate the method registered under ``name``."""
    return method_class(name)(**options)
