"""Problem groups: ``--problems GROUP`` stands for the group's registered members."""

from __future__ import annotations

import pytest

from suite.run.spec import UsageError, parse_names

VALID = {"sas": "a", "coal": "b", "lynx": "c"}
GROUPS = {"classics": ["coal", "lynx"]}


def test_a_group_name_stands_for_its_members_in_order_without_duplicates() -> None:
    assert parse_names("classics", VALID, "problem", GROUPS) == ["coal", "lynx"]
    assert parse_names("lynx,classics,sas", VALID, "problem", GROUPS) == ["lynx", "coal", "sas"]


def test_a_problem_of_the_same_name_wins_over_a_group() -> None:
    assert parse_names("sas", VALID, "problem", {"sas": ["coal"]}) == ["sas"]


def test_an_unknown_name_lists_the_problems_and_the_groups() -> None:
    with pytest.raises(UsageError, match=r"unknown problem\(s\) 'classic'; valid problems: sas, coal, lynx; groups: "):
        parse_names("classic", VALID, "problem", GROUPS)
