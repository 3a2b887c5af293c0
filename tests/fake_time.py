"""A fake clock for :mod:`suite.core.context`: every budget decision at exactly known seconds, on any machine."""

from __future__ import annotations

import pytest

from suite.core import context as context_module


class FakeTime:
    """Stands in for the ``time`` module of suite.core.context: ``perf_counter`` returns ``now``, moved by the test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def perf_counter(self) -> float:
        return self.now


@pytest.fixture
def fake_time(monkeypatch: pytest.MonkeyPatch) -> FakeTime:
    """The fake clock, installed in suite.core.context for one test."""
    fake = FakeTime()
    monkeypatch.setattr(context_module, "time", fake)
    return fake
