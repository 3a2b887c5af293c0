"""The classics study: its problems are the ``classics`` group, and its details give the scored answers."""

from __future__ import annotations

from pathlib import Path

import pytest

from suite.core.registry import make_problem
from suite.run.spec import problem_groups
from suite.studies import STUDIES
from suite.studies.classics import CLASSICS, METHODS, answers_details


def test_the_study_runs_every_member_of_the_group_with_every_transdimensional_method() -> None:
    assert STUDIES["classics"] is CLASSICS
    assert sorted(CLASSICS.problems) == sorted(problem_groups()["classics"])
    assert [variant.method for variant in CLASSICS.variants] == list(METHODS)
    assert CLASSICS.grid == {"profile": "quick", "seeds": 3} and CLASSICS.metric == "model_prob_tv"


def test_the_details_list_the_exact_answers_and_the_papers_figures(tmp_path: Path) -> None:
    for name in ("lynx-ar", "pines"):
        if make_problem(name).unavailable_reason():
            pytest.skip(make_problem(name).unavailable_reason())
    text = answers_details(CLASSICS, tmp_path)
    exact = make_problem("lynx-ar").reference_model_probs().top(1)
    assert f"- lynx-ar: p=2: {float(exact.prob[0]):.4f}, " in text  # AR(2) carries 0.82 of the mass
    assert "adjusted-density: 0.9998" in text and "log p(y | M1) = -310.128" in text
    assert all(f"- {name}: " in text for name in CLASSICS.problems)
    if not make_problem("galaxy").unavailable_reason():  # RG's Table 1 beside the SMC reference
        assert "Table 1" in text.split("- galaxy: ")[1].split("\n- ")[0]
