"""A plug-in's distribution and version are part of its runs' keys (a new release runs again instead of keeping the
old code's records); tdbench's own classes' keys do not change with tdbench's version."""

from __future__ import annotations

import importlib

import pytest
import torch

from suite.run.spec import GridSpec

planning = importlib.import_module("suite.run.plan")  # the module (suite.run.plan is also a function)

SPEC = GridSpec(problems="sas", methods="rjmcmc-baseline", profile="smoke", seeds=1, eval_draws=300)


def _hashes() -> set[str]:
    runs, _ = planning.plan(SPEC, torch.device("cpu"))
    return {run.key.config_hash for run in runs}


def test_a_plugin_release_changes_its_run_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    builtin = _hashes()
    version = {"v": "1.0"}

    def origin(cls: type) -> dict[str, str]:
        if cls.__name__ == "RJMCMCBaseline":  # as if the method came from a plug-in distribution
            return {"distribution": "my-sampler", "version": version["v"]}
        return {"distribution": "tdbench", "version": "9.9 (checkout)"}

    monkeypatch.setattr(planning, "code_origin", origin)
    first = _hashes()
    version["v"] = "1.1"
    second = _hashes()
    assert first != builtin and second != first
    runs, _ = planning.plan(SPEC, torch.device("cpu"))
    assert runs[0].key.config["plugin_code"] == {"method": {"distribution": "my-sampler", "version": "1.1"}}


def test_builtin_keys_do_not_depend_on_the_tdbench_version(monkeypatch: pytest.MonkeyPatch) -> None:
    before = _hashes()
    monkeypatch.setattr(planning, "code_origin", lambda cls: {"distribution": "tdbench", "version": "2.0"})
    assert _hashes() == before
