"""``tdbench describe NAME``: a method's or problem's documentation, options with types, defaults and presets."""

from __future__ import annotations

import dataclasses
import inspect
import json
import textwrap
import types
import typing
from typing import Any

from suite.core.method import PROFILES, Method
from suite.core.options import method_annotations, problem_annotations
from suite.core.problem import Problem
from suite.core.registry import (
    available_methods,
    available_problems,
    make_method,
    method_class,
    problem_class,
    unknown_name,
)
from suite.results.facts import problem_facts
from suite.run.guards import support_reason
from suite.run.spec import DEFAULT_SEEDS
from suite.store import references

#: A method's run settings that are command-line flags, not options (``--no-progress``).
NOT_OPTIONS = frozenset({"progress"})
#: Widest line printed (tables too wide for it are printed one option per block).
WIDTH = 120


class UnknownName(ValueError):
    """A name that is neither a registered problem nor a registered method."""


def type_name(annotation: Any) -> str:
    """A type hint as a reader writes it: ``int | None``, ``list[float]``, ``Literal['a', 'b']``."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation is type(None):
        return "None"
    if annotation is Any or annotation is inspect.Parameter.empty:
        return "any"
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_name(arg) for arg in args)
    if origin is typing.Literal:
        return "Literal[" + ", ".join(map(repr, args)) + "]"
    if origin is not None:
        name = getattr(origin, "__name__", str(origin))
        inner = ", ".join("..." if arg is Ellipsis else type_name(arg) for arg in args)
        return f"{name}[{inner}]" if args else name
    return getattr(annotation, "__name__", str(annotation).replace("typing.", ""))


def show_value(value: Any) -> str:
    """A value as ``--option`` takes it (JSON where it can be written as JSON)."""
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return str(value)


def format_table(header: list[str], rows: list[list[str]], indent: str = "  ") -> list[str]:
    """Rows as left-aligned columns under ``header``."""
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = []
    for row in [header, *rows]:
        lines.append(indent + "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    return lines


def _doc(cls: type) -> list[str]:
    doc = inspect.getdoc(cls) or "(no documentation)"
    return [part for line in doc.splitlines() for part in (textwrap.wrap(line, WIDTH) if len(line) > WIDTH else [line])]


def option_lines(header: list[str], rows: list[list[str]]) -> list[str]:
    """Options as a table under ``header`` (option, type, default, ...), or one block each if wider than WIDTH."""
    table = format_table(header, rows)
    if max(map(len, table)) <= WIDTH:
        return table
    lines = []
    for row in rows:
        lines.append(f"  {row[0]}: {row[1]}, default {row[2]}")
        more = [f"{name} {value}" for name, value in zip(header[3:], row[3:], strict=True)]
        if more:
            lines.append("      " + "   ".join(more))
    return lines


def method_option_rows(cls: type[Method]) -> list[list[str]]:
    """One row per option: name, type, default, then the value each profile runs with.

    A profile's preset fills the options left at None (:meth:`Method.resolve`), so an option whose default is not
    None runs with its default in every profile.
    """
    hints = method_annotations(cls)
    rows = []
    for field in dataclasses.fields(cls):
        if field.name in NOT_OPTIONS:
            continue
        if field.default is not dataclasses.MISSING:
            default = field.default
        elif field.default_factory is not dataclasses.MISSING:
            default = field.default_factory()
        else:
            default = None
        values = []
        for profile in PROFILES:
            preset = cls.profiles.get(profile, {})
            values.append(show_value(preset[field.name] if default is None and field.name in preset else default))
        rows.append([field.name, type_name(hints[field.name]), show_value(default), *values])
    return rows


def describe_method(name: str) -> str:
    """The documentation of method ``name``, its options with types, defaults and values per profile."""
    cls = method_class(name)
    lines = [f"method {name}", "", *_doc(cls), ""]
    lines.append(f"Options (set with --option {name}.OPTION=VALUE; values are JSON):")
    rows = method_option_rows(cls)
    if rows:
        lines += option_lines(["option", "type", "default", *PROFILES], rows)
        lines.append("  (a profile's value is what its runs use: its preset fills the options left at null)")
    else:
        lines.append("  none")
    seeds = [f"{profile} {cls.default_seeds.get(profile, DEFAULT_SEEDS[profile])}" for profile in PROFILES]
    lines += ["", f"Seeds when --seeds is not given: {', '.join(seeds)}"]
    return "\n".join(lines)


def problem_option_rows(cls: type[Problem]) -> list[list[str]]:
    """One row per constructor argument: name, type, default."""
    parameters = inspect.signature(cls.__init__).parameters
    rows = []
    for option, hint in problem_annotations(cls).items():
        default = parameters[option].default
        shown = "(required)" if default is inspect.Parameter.empty else show_value(default)
        rows.append([option, type_name(hint), shown])
    return rows


def _facts_lines(facts: dict[str, Any]) -> list[str]:
    higher = facts["higher_is_better"]
    main = facts["main_metric"]
    lines = [f"  main metric: {main} ({'higher' if main in higher else 'lower'} is better)"]
    if higher:
        lines.append(f"  higher is better: {', '.join(higher)} (every other metric: lower)")
    if facts["num_models"] is not None:
        lines.append(f"  models: {facts['num_models']:,}")
    if facts["sweep"]:
        lines.append(f"  sweep: {facts['sweep'][0]} = {facts['sweep'][1]}")
    if facts["reported_neg_elbo"]:
        numbers = ", ".join(f"{method} {value:g}" for method, value in facts["reported_neg_elbo"].items())
        lines.append(f"  papers' negative ELBO: {numbers}")
    for method, row in facts["reported_dag_table"].items():
        numbers = ", ".join(f"{metric} {value:g}" for metric, value in row.items())
        lines.append(f"  papers' DAG table, {method}: {numbers}")
    if facts["reported_source"]:
        lines.append(f"  source of the papers' numbers: {facts['reported_source']}")
    return lines


def describe_problem(name: str) -> str:
    """The documentation of problem ``name``, its constructor options, facts, profiles and methods that skip it."""
    cls = problem_class(name)
    lines = [f"problem {name}", "", *_doc(cls), ""]
    lines.append(f"Options (set with --problem-option {name}.OPTION=VALUE; values are JSON):")
    rows = problem_option_rows(cls)
    lines += option_lines(["option", "type", "default"], rows) if rows else ["  none"]
    try:
        problem: Problem | type[Problem] = cls()
    except Exception as exc:  # a problem that cannot be built here still has its documentation described
        problem = cls
        lines += ["", f"Could not build it with its defaults: {exc}"]
    lines += ["", "Facts (written into every record of it):", *_facts_lines(problem_facts(problem))]
    lines += ["", f"In --problems all for the profiles: {', '.join(cls.planned_in) or 'none'} (named, it runs in any)"]
    if cls.time_budgets:
        budgets = ", ".join(f"{profile} {seconds:g} s" for profile, seconds in cls.time_budgets.items())
        lines.append(f"Compute seconds per run: {budgets} (--time-budget overrides)")
    if isinstance(problem, Problem):
        reason = problem.unavailable_reason() or references.reference_problem(problem)
        if reason:
            lines += textwrap.wrap(f"Unavailable here: {reason}", 120, break_long_words=False, break_on_hyphens=False)
        skipped = [(method, support_reason(make_method(method), problem)) for method in available_methods()]
        skipped = [(method, why) for method, why in skipped if why]
        if skipped:
            lines += ["", "Methods that do not apply:", *(f"  {method}: {why}" for method, why in skipped)]
    return "\n".join(lines)


def describe(name: str) -> str:
    """The description of the problem or method ``name`` (both when a name is registered as both)."""
    parts = []
    if name in available_problems():
        parts.append(describe_problem(name))
    if name in available_methods():
        parts.append(describe_method(name))
    if not parts:
        raise UnknownName(unknown_name(name))
    return "\n\n".join(parts)
