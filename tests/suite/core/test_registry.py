"""Registry: lookups, errors that list valid names, plug-ins through entry points."""

import importlib
import inspect
import pkgutil
import re

import pytest

import methods
import problems
from suite.core import registry
from suite.core.method import Method
from suite.core.problem import Problem


def test_builtins_are_registered() -> None:
    assert "sas" in registry.available_problems()
    assert {"rjmcmc-baseline", "rjmcmc-naive"} <= set(registry.available_methods())
    assert all(registry.available_methods().values()), "every method needs a one-line description"


def test_unknown_names_list_the_valid_ones() -> None:
    with pytest.raises(registry.UnknownNameError, match=r"valid methods: .*rjmcmc-baseline"):
        registry.make_method("nope")
    with pytest.raises(registry.UnknownNameError, match=r"valid problems: .*sas"):
        registry.make_problem("nope")


def test_every_problem_and_method_class_is_registered() -> None:
    for package, base, table in ((problems, Problem, registry._PROBLEMS), (methods, Method, registry._METHODS)):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            module = importlib.import_module(info.name)
            for _, cls in inspect.getmembers(module, inspect.isclass):
                public = not cls.__name__.startswith("_")  # private bases (e.g. _RobustVSSweep) are not registered
                if (
                    issubclass(cls, base)
                    and cls.__module__ == module.__name__
                    and public
                    and not inspect.isabstract(cls)
                ):
                    assert cls in table.values(), f"{cls.__qualname__} in {module.__name__} is not registered"


def test_entry_point_plugins_are_loaded(monkeypatch: pytest.MonkeyPatch) -> None:
    class PluginMethod(Method):
        """A plug-in method."""

        def run(self, problem, context):  # pragma: no cover - never run
            raise NotImplementedError

    class FakeEntryPoint:
        name = "plugin-method"

        def load(self) -> type:
            return PluginMethod

    def fake_entry_points(group: str) -> list:
        return [FakeEntryPoint()] if group == "tdbench.methods" else []

    monkeypatch.setattr(registry, "entry_points", fake_entry_points)
    monkeypatch.setattr(registry, "_loaded", False)
    monkeypatch.setattr(registry, "_METHODS", dict(registry._METHODS))
    assert registry.available_methods()["plugin-method"] == "A plug-in method."
    assert registry.method_class("plugin-method") is PluginMethod


class OldSignature(Method):
    """A method written against the contract before the run context."""

    def run(self, problem, budget, seed, device):  # pragma: no cover - never run
        raise NotImplementedError


def test_a_method_with_the_old_run_signature_is_refused_with_what_changed() -> None:
    with pytest.raises(TypeError, match=r"run\(self, problem, budget, seed, device\).*run\(self, problem, context\)"):
        registry.register_method("old-signature")(OldSignature)
    assert "old-signature" not in registry._METHODS


def test_an_old_signature_plugin_is_refused_and_said_once(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    class FakeEntryPoint:
        name = "old-plugin"
        value = "old_plugin:OldSignature"

        def load(self) -> type:
            return OldSignature

    monkeypatch.setattr(
        registry, "entry_points", lambda group: [FakeEntryPoint()] if group == "tdbench.methods" else []
    )
    monkeypatch.setattr(registry, "_loaded", False)
    monkeypatch.setattr(registry, "_METHODS", dict(registry._METHODS))
    monkeypatch.setattr(registry, "_LOAD_FAILURES", [])
    methods_now = registry.available_methods()
    registry.available_methods()
    assert "old-plugin" not in methods_now
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and re.match(
        r"tdbench: method 'old-plugin' from distribution unknown refused: .*RunContext", err[0]
    )


def test_duplicate_names_are_refused() -> None:
    with pytest.raises(ValueError, match="already registered"):

        @registry.register_problem("sas")
        class Other(Problem):
            """Clash."""
