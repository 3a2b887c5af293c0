"""Plug-ins through entry points (issue 35): clashes and broken plug-ins are load problems, said once and named
when asked for; the entry point's name is the registry name; every registered class knows its distribution."""

from __future__ import annotations

import types
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.metadata import version
from typing import Any

import pytest
from nflows.flows.base import Flow

from suite import cli
from suite.core import registry
from suite.core.method import Method
from suite.core.problem import Problem
from suite.run import GridSpec, UsageError


@dataclass
class FakeDist:
    name: str
    version: str


@dataclass
class FakeEntryPoint:
    name: str
    target: Any
    dist: FakeDist | None = None
    value: str = "plugin_module:Thing"
    group: str = "tdbench.methods"
    loads: list[str] = field(default_factory=list)

    def load(self) -> Any:
        self.loads.append(self.name)
        if isinstance(self.target, BaseException):
            raise self.target
        if callable(self.target) and not isinstance(self.target, type):
            return self.target()
        return self.target


class PluginMethod(Method):
    """A plug-in method."""

    def run(self, problem, context):  # pragma: no cover - never run
        raise NotImplementedError


class OtherPluginMethod(Method):
    """Another plug-in method."""

    def run(self, problem, context):  # pragma: no cover - never run
        raise NotImplementedError


class PluginProblem(Problem):
    """A plug-in problem."""

    def mask(self, model_index):  # pragma: no cover - never called
        raise NotImplementedError

    def log_model_prior(self, model_index):  # pragma: no cover - never called
        raise NotImplementedError


A, B = FakeDist("plugin-a", "1.0"), FakeDist("plugin-b", "2.5")


@pytest.fixture
def plugins(monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """Install fake entry points (``methods=[...]``, ``problems=[...]``) into a fresh copy of the registry."""

    def install(methods: list[FakeEntryPoint] = (), problems: list[FakeEntryPoint] = ()) -> None:
        groups = {"tdbench.methods": list(methods), "tdbench.problems": list(problems)}
        monkeypatch.setattr(registry, "entry_points", lambda group: groups[group])
        monkeypatch.setattr(registry, "_loaded", False)

    registry.load_all()
    monkeypatch.setattr(registry, "_METHODS", dict(registry._METHODS))
    monkeypatch.setattr(registry, "_PROBLEMS", dict(registry._PROBLEMS))
    monkeypatch.setattr(registry, "_ORIGINS", dict(registry._ORIGINS))
    monkeypatch.setattr(registry, "_LOAD_FAILURES", [])
    return install


def _err_lines(capsys: pytest.CaptureFixture) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.startswith("tdbench: ")]


def test_a_plugin_is_registered_under_its_entry_point_name_with_its_distribution(plugins) -> None:
    plugins(methods=[FakeEntryPoint("plugin-method", PluginMethod, A)])
    assert registry.method_class("plugin-method") is PluginMethod and PluginMethod.name == "plugin-method"
    assert registry.code_origin(PluginMethod) == {"distribution": "plugin-a", "version": "1.0"}
    assert registry.plugin_load_failures() == []


def test_a_name_clash_with_a_builtin_keeps_the_builtin_names_both_and_is_said_once(
    plugins, capsys: pytest.CaptureFixture
) -> None:
    builtin = registry.method_class("trj")
    ep = FakeEntryPoint("trj", PluginMethod, A)
    plugins(methods=[ep])
    registry.available_methods()
    registry.available_methods()
    assert registry.method_class("trj") is builtin and ep.loads == []  # refused without running its code
    (problem,) = registry.plugin_load_failures()
    text = str(problem)
    assert text.startswith("method 'trj' from distribution plugin-a 1.0 refused: the name is taken by tdbench's")
    assert "methods.trj" in text and "which is kept" in text
    assert _err_lines(capsys) == [f"tdbench: {text}"]
    assert registry.code_origin(builtin)["distribution"] == "tdbench"


def test_two_plugins_with_one_name_are_both_refused(plugins) -> None:
    plugins(methods=[FakeEntryPoint("same", PluginMethod, A), FakeEntryPoint("same", OtherPluginMethod, B)])
    assert "same" not in registry.available_methods()
    reasons = registry.refusal("method", "same")
    assert "method 'same' from distribution plugin-a 1.0 refused: distribution plugin-b 2.5 also has" in reasons
    assert "method 'same' from distribution plugin-b 2.5 refused: distribution plugin-a 1.0 also has" in reasons
    with pytest.raises(registry.UnknownNameError, match="neither is used"):
        registry.make_method("same")


def test_a_broken_plugin_is_named_when_asked_for(plugins, capsys: pytest.CaptureFixture) -> None:
    plugins(
        methods=[FakeEntryPoint("broken", ModuleNotFoundError("No module named 'missing'"), A)],
        problems=[FakeEntryPoint("broken-problem", RuntimeError("bad data\non two lines"), B)],
    )
    message = "method 'broken' from distribution plugin-a 1.0 failed to load: ModuleNotFoundError: No module named"
    with pytest.raises(registry.UnknownNameError, match=message):
        registry.method_class("broken")
    with pytest.raises(UsageError, match=message) as refused:
        GridSpec(problems="sas", methods="broken,nope", profile="smoke").method_names()
    assert "unknown method(s) 'nope'; valid methods: " in str(refused.value)
    with pytest.raises(UsageError, match="unknown method"):
        GridSpec(problems="sas", methods="nope", profile="smoke").method_names()
    lines = _err_lines(capsys)
    assert len(lines) == 2 and "failed to load: RuntimeError: bad data on two lines" in lines[0]
    assert registry.unknown_name("broken-problem").startswith("problem 'broken-problem' from distribution plugin-b")


def test_the_command_line_names_a_plugin_that_failed_to_load(plugins, capsys: pytest.CaptureFixture) -> None:
    plugins(methods=[FakeEntryPoint("broken", ImportError("cannot import name 'x'"), A)])
    assert cli.main(["run", "--methods", "broken", "--profile", "smoke", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "tdbench run: error: method 'broken' from distribution plugin-a 1.0 failed to load: ImportError" in err
    assert cli.main(["run", "--option", "broken.x=1", "--profile", "smoke", "--dry-run"]) == 2
    assert "--option 'broken.x=1': method 'broken' from distribution plugin-a" in capsys.readouterr().err
    assert cli.main(["describe", "broken"]) == 2
    assert "method 'broken' from distribution plugin-a 1.0 failed to load" in capsys.readouterr().err
    assert cli.main(["check", "broken"]) == 2
    assert "method 'broken' from distribution plugin-a 1.0 failed to load" in capsys.readouterr().err
    assert cli.main(["list"]) == 0
    out = capsys.readouterr().out
    assert "Plug-ins not registered:\n  method 'broken' from distribution plugin-a 1.0 failed to load" in out


def test_an_entry_point_and_a_decorator_must_agree_on_the_name(plugins) -> None:
    decorated = type("Decorated", (PluginMethod,), {"__doc__": "Decorated."})

    def import_module() -> type:  # the plug-in's module registers the class on import, as a decorator does
        registry.register_method("decorated")(decorated)
        return decorated

    plugins(methods=[FakeEntryPoint("other-name", import_module, A)])
    assert registry.method_class("decorated") is decorated
    assert "other-name" not in registry.available_methods()
    assert "registered as 'decorated' by its @register_method decorator" in registry.refusal("method", "other-name")
    assert registry.code_origin(decorated) == {"distribution": "plugin-a", "version": "1.0"}


def test_an_entry_point_and_a_decorator_with_the_same_name_are_one_registration(plugins) -> None:
    decorated = type("Decorated", (PluginMethod,), {"__doc__": "Decorated."})

    def import_module() -> type:
        registry.register_method("decorated")(decorated)
        return decorated

    plugins(methods=[FakeEntryPoint("decorated", import_module, A)])
    assert registry.method_class("decorated") is decorated and registry.plugin_load_failures() == []


def test_a_module_entry_point_registers_its_classes_with_its_distribution(plugins) -> None:
    cls = type("FromModule", (PluginProblem,), {"__doc__": "From a module."})

    def import_module() -> types.ModuleType:
        registry.register_problem("from-module")(cls)
        return types.ModuleType("plugin_module")

    plugins(problems=[FakeEntryPoint("anything", import_module, B, group="tdbench.problems")])
    assert registry.problem_class("from-module") is cls
    assert registry.code_origin(cls) == {"distribution": "plugin-b", "version": "2.5"}


def test_a_module_that_registers_a_builtin_name_is_a_clash(plugins) -> None:
    def import_module() -> types.ModuleType:
        registry.register_method("trj")(PluginMethod)
        return types.ModuleType("plugin_module")

    plugins(methods=[FakeEntryPoint("module", import_module, A)])
    text = registry.refusal("method", "module")
    assert "refused: method name 'trj' is already registered by methods.trj" in text and "(distribution tdbench" in text


def test_a_class_in_the_wrong_group_is_refused(plugins) -> None:
    plugins(methods=[FakeEntryPoint("problem-as-method", PluginProblem, A)])
    assert "is not a Method subclass" in registry.refusal("method", "problem-as-method")


def test_code_origin_of_classes_outside_entry_points() -> None:
    assert registry.code_origin(Flow) == {"distribution": "nflows", "version": version("nflows")}
    assert registry.code_origin(PluginMethod) is None  # the tests are no installed distribution
    sas = registry.code_origin(registry.problem_class("sas"))
    assert sas is not None and sas["distribution"] == "tdbench" and sas["version"]
