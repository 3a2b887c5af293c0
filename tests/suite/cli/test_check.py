"""``tdbench check``'s arguments: a bad time budget is refused by the one budget rule, before any check runs."""

from __future__ import annotations

import pytest

from suite.cli import check


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("0", "must be a positive number of seconds"),
        ("nan", "must be a positive number of seconds"),
        ("1e9", "more than this suite allows"),
        ("ten", "expected a number of seconds, got 'ten'"),
    ],
)
def test_a_bad_time_budget_is_refused_with_status_2(
    value: str, message: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(check, "check_method", lambda *args: pytest.fail("a check ran"))
    with pytest.raises(SystemExit) as stop:
        check.main(["sas", "--time-budget", value])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "argument --time-budget" in err and message in err
