"""Problem and method names (issue 36): checked at registration against a documented pattern, so that a name can
neither escape a results folder (it is part of every record's file name) nor inject markup or mathtext."""

from __future__ import annotations

import re

import pytest

from suite.core import registry
from suite.core.method import Method
from suite.core.problem import Problem

#: The documented pattern (docs/plugins.md, suite.core.names.NAME_PATTERN).
NAME_PATTERN = "[a-z0-9][a-z0-9._-]*"

BAD_NAMES = ["a/../../../x", "$x$", "..", ".", "", "Upper", "-dash-first", "a b", "a\\b", "x" * 200]


class PluginMethod(Method):
    """A plug-in method."""

    def run(self, problem, context):  # pragma: no cover - never run
        raise NotImplementedError


class PluginProblem(Problem):
    """A plug-in problem."""

    def mask(self, model_index):  # pragma: no cover - never called
        raise NotImplementedError

    def log_model_prior(self, model_index):  # pragma: no cover - never called
        raise NotImplementedError


class FakeEntryPoint:
    """An entry point of the group ``tdbench.methods`` named ``name`` that loads ``target``."""

    def __init__(self, name: str, target: type) -> None:
        self.name, self.target, self.value, self.dist = name, target, "plugin_module:Thing", None
        self.loaded = False

    def load(self) -> type:
        self.loaded = True
        return self.target


@pytest.fixture
def fresh_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Registrations in the test go to copies of the registry's tables."""
    registry.load_all()
    for table in ("_METHODS", "_PROBLEMS", "_ORIGINS"):
        monkeypatch.setattr(registry, table, dict(getattr(registry, table)))
    monkeypatch.setattr(registry, "_LOAD_FAILURES", [])


def test_every_built_in_name_matches_the_pattern() -> None:
    names = [*registry.available_problems(), *registry.available_methods()]
    assert "robust-vs-p16" in names and "linear-dag-d4" in names
    assert [name for name in names if not re.fullmatch(NAME_PATTERN, name)] == []


@pytest.mark.parametrize("name", BAD_NAMES)
def test_a_bad_method_name_is_refused_at_registration(name: str, fresh_registry: None) -> None:
    with pytest.raises(ValueError, match="not a valid name") as refused:
        registry.register_method(name)(type("Bad", (PluginMethod,), {}))
    assert NAME_PATTERN in str(refused.value) or "at most" in str(refused.value)
    assert name not in registry._METHODS


@pytest.mark.parametrize("name", ["a/../../../x", "$x$", ".."])
def test_a_bad_problem_name_is_refused_at_registration(name: str, fresh_registry: None) -> None:
    with pytest.raises(ValueError, match=r"problem .* names match \[a-z0-9\]"):
        registry.register_problem(name)(type("Bad", (PluginProblem,), {}))
    assert name not in registry._PROBLEMS


def test_a_plugin_with_a_bad_name_is_reported_in_one_line_and_never_loaded(
    fresh_registry: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    bad = FakeEntryPoint("a/../../../x", type("Escaping", (PluginMethod,), {}))
    monkeypatch.setattr(registry, "entry_points", lambda group: [bad] if group == "tdbench.methods" else [])
    monkeypatch.setattr(registry, "_loaded", False)
    assert "a/../../../x" not in registry.available_methods()
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("tdbench: ")]
    assert len(lines) == 1 and "'a/../../../x'" in lines[0] and NAME_PATTERN in lines[0], lines
    assert not bad.loaded  # refused before its code ran
    with pytest.raises(registry.UnknownNameError, match="not a valid name"):
        registry.method_class("a/../../../x")
