"""Check option values against their declared types, in one place for method options and problem arguments.

A method's options are its dataclass fields and a problem's are its constructor's arguments; their type hints
say what a value may be. Values from the command line are JSON, so the checks are strict where JSON is loose:
an integer option takes a JSON integer (not ``true``, not ``1.5``, within int64), a float option a finite
number (not ``NaN`` or ``Infinity``), a flag ``true`` or ``false``. ``X | None`` also takes ``null``,
``Literal[...]`` only its listed values, and an option named ``dtype`` only the suite's floating-point types.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import inspect
import json
import math
import types
import typing
from collections.abc import Mapping
from typing import Any

from suite.core.method import DTYPES

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
#: Options whose valid values are a fixed set, whatever their annotation says.
NAMED_CHOICES: dict[str, tuple[str, ...]] = {"dtype": tuple(DTYPES)}


class OptionError(ValueError):
    """An option value that its declared type or choices do not allow."""


def _describe(annotation: Any) -> str:
    """A reader's name of an annotation: ``an integer``, ``a finite number``, ``true or false``..."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation is type(None):
        return "null"
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(arg) for arg in args)
    if origin is typing.Literal:
        return "one of " + ", ".join(map(repr, args))
    if origin in (tuple, list, collections.abc.Sequence):
        return f"a list, each item {_describe(args[0])}" if args else "a list"
    names = {bool: "true or false", int: "an integer", float: "a finite number", str: "a string"}
    return names.get(annotation, getattr(annotation, "__name__", str(annotation)))


def _fits(value: Any, annotation: Any) -> bool:
    """Whether ``value`` (as read from JSON) is allowed by ``annotation``; unknown annotations allow anything."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation is Any or annotation is inspect.Parameter.empty:
        return True
    if annotation is type(None):
        return value is None
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, arg) for arg in args)
    if origin is typing.Literal:
        return any(value == arg and type(value) is type(arg) for arg in args)
    if origin in (tuple, list, collections.abc.Sequence):
        if not isinstance(value, (list, tuple)):
            return False
        if origin is tuple and args and args[-1] is not Ellipsis:
            return len(value) == len(args) and all(_fits(v, a) for v, a in zip(value, args, strict=True))
        return not args or all(_fits(v, args[0]) for v in value)
    if annotation is bool:
        return isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool) and INT64_MIN <= value <= INT64_MAX
    if annotation is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        return INT64_MIN <= value <= INT64_MAX if isinstance(value, int) else math.isfinite(value)
    if annotation is str:
        return isinstance(value, str)
    return True  # a type this module does not know: left to the method or problem to check


def _accepts_text(annotation: Any) -> bool:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        return any(_accepts_text(arg) for arg in args)
    return annotation is str


def check_option(owner: str, name: str, value: Any, annotation: Any, text: str | None = None) -> Any:
    """The value of option ``name`` of ``owner`` if its annotation allows it, else an ``OptionError`` saying why.

    ``text`` is the value as typed: a string option given something that parses as JSON (``flow=1``) keeps
    the text. Options in ``NAMED_CHOICES`` (``dtype``) take only their listed values.
    """
    if text is not None and not _fits(value, annotation) and _accepts_text(annotation):
        value = text
    if not _fits(value, annotation):
        shown = text if text is not None else json.dumps(value, default=str)
        raise OptionError(f"{owner}.{name} must be {_describe(annotation)}, got {shown}")
    choices = NAMED_CHOICES.get(name)
    if choices is not None and value is not None and value not in choices:
        raise OptionError(f"{owner}.{name}: unknown {name} {value!r}; valid: {', '.join(choices)}")
    return value


def method_annotations(cls: type) -> dict[str, Any]:
    """Option name -> type hint of a method class (its dataclass fields)."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints.get(f.name, Any) for f in dataclasses.fields(cls)}


def problem_annotations(cls: type) -> dict[str, Any]:
    """Argument name -> type hint of a problem class's constructor (keyword-passable arguments only)."""
    try:
        hints = typing.get_type_hints(cls.__init__)
    except (NameError, TypeError):  # an annotation that cannot be resolved here: such arguments go unchecked
        hints = {}
    keyword = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    parameters = inspect.signature(cls.__init__).parameters.values()
    return {p.name: hints.get(p.name, Any) for p in parameters if p.name != "self" and p.kind in keyword}


def check_options(owner: str, values: Mapping[str, Any], annotations: Mapping[str, Any]) -> dict[str, Any]:
    """Every value of ``values`` checked by :func:`check_option` against ``annotations`` (unknown names refused)."""
    checked = {}
    for name, value in values.items():
        if name not in annotations:
            raise OptionError(f"{owner} has no option {name!r}; valid: {', '.join(annotations) or 'none'}")
        checked[name] = check_option(owner, name, value, annotations[name])
    return checked
