"""Name -> factory registries for problems and methods, extended through entry points.

Built-in problems and methods register themselves when the ``problems`` and
``methods`` packages are imported. Other installed distributions add theirs
through the entry-point groups ``tdbench.problems`` and ``tdbench.methods``:
each entry point names a ``Problem`` or ``Method`` subclass (or a module that
registers its classes on import).
"""

from __future__ import annotations

import importlib
import inspect
import typing
import warnings
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any, TypeVar

from suite.core.method import Method, check_run_signature
from suite.core.problem import Problem

T = TypeVar("T")

_PROBLEMS: dict[str, type[Problem]] = {}
_METHODS: dict[str, type[Method]] = {}
_loaded = False


class UnknownNameError(KeyError):
    """A problem or method name that is not registered."""

    def __str__(self) -> str:
        return str(self.args[0])


def _describe(cls: type) -> str:
    doc = inspect.getdoc(cls) or ""
    return doc.strip().splitlines()[0] if doc.strip() else ""


def _register(table: dict[str, type], base: type, name: str) -> Callable[[type[T]], type[T]]:
    def decorator(cls: type[T]) -> type[T]:
        if not (isinstance(cls, type) and issubclass(cls, base)):
            raise TypeError(f"{cls!r} is not a subclass of {base.__name__}")
        if base is Method:
            check_run_signature(cls)
        if name in table and table[name] is not cls:
            raise ValueError(f"{base.__name__.lower()} name {name!r} is already registered by {table[name]!r}")
        cls.name = name  # type: ignore[attr-defined]
        table[name] = cls
        return cls

    return decorator


def register_problem(name: str) -> Callable[[type[T]], type[T]]:
    """Class decorator that registers a ``Problem`` subclass under ``name``."""
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
    """Class decorator that registers a ``Method`` subclass under ``name``."""
    return _register(_METHODS, Method, name)


def _load_entry_points(group: str, table: dict[str, type], base: type) -> None:
    for ep in entry_points(group=group):
        try:
            obj = ep.load()
        except Exception as exc:  # a broken plug-in must not break the suite
            warnings.warn(f"could not load entry point {ep.name!r} of {group}: {exc}", stacklevel=2)
            continue
        if isinstance(obj, type) and issubclass(obj, base) and ep.name not in table:
            try:
                _register(table, base, ep.name)(obj)
            except TypeError as exc:  # e.g. a method written against the old run() signature: refused, said why
                warnings.warn(f"entry point {ep.name!r} of {group} refused: {exc}", stacklevel=2)


def load_all() -> None:
    """Import built-in problems and methods and load entry-point plug-ins (once)."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    importlib.import_module("problems")
    importlib.import_module("methods")
    _load_entry_points("tdbench.problems", _PROBLEMS, Problem)
    _load_entry_points("tdbench.methods", _METHODS, Method)


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
        raise UnknownNameError(f"unknown {kind} {name!r}; valid {kind}s: {', '.join(sorted(table))}")
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
