"""VTI Fig. 4 study on exact truth: its problems and variants, and a tiny run with its table and figure."""

import dataclasses
from pathlib import Path

import pytest

from suite.core.registry import make_problem
from suite.results.records import load_records
from suite.studies import STUDIES
from suite.studies.study import run_study
from suite.studies.vti_cardinality import PROBLEMS, VTI_CARDINALITY

MADE = VTI_CARDINALITY.variants[0]
#: The study itself on 2^8 and 2^12 models, with a few smoke iterations.
TINY = dataclasses.replace(
    VTI_CARDINALITY,
    name="tiny-fig4",
    problems=PROBLEMS[:2],
    variants=(
        dataclasses.replace(
            MADE, options={**MADE.options, "num_iterations": 20, "warmup_iterations": 5, "batch_size": 32}
        ),
        VTI_CARDINALITY.variants[-1],
    ),
    grid={"profile": "smoke", "seeds": 1},
    execution={"progress": False, "jobs": 1},
)


def test_the_study_runs_the_made_sampler_at_two_caps_and_rjmcmc_on_four_cardinalities_of_exact_problems() -> None:
    study = STUDIES["vti-cardinality"]
    assert [v.method for v in study.variants] == ["vti-mcg", "vti-mcg", "rjmcmc-baseline"]
    made = {"model_distribution": "made", "model_probs": "sampler"}
    assert [v.options for v in study.variants[:2]] == [
        {**made, "made_ig_threshold": 0.005},
        {**made, "made_ig_threshold": 0.05},
    ]
    sizes = [make_problem(name).num_models for name in study.problems]
    assert sizes == [2**8, 2**12, 2**16, 2**20]
    problem = make_problem(study.problems[0])
    assert problem.time_budgets["quick"] == 60.0 and problem.data_sets["quick"] == 3
    assert problem.reference_model_probs() is not None  # exact


@pytest.mark.slow
def test_a_tiny_cardinality_study_writes_its_table_and_figure(tmp_path: Path) -> None:
    assert run_study(TINY, tmp_path) == 0
    made = load_records(tmp_path / MADE.slug)
    assert sorted(r["problem"] for r in made) == sorted(PROBLEMS[:2])
    assert all(r["status"] == "ok" and r["diagnostics"].get("iterations") == 20 for r in made), made
    assert all("kl_joint" in r["metrics"] and "model_prob_kl" in r["metrics"] for r in made)
    assert (tmp_path / "fig4.png").stat().st_size > 0
    text = (tmp_path / "tiny-fig4.md").read_text()
    assert MADE.label in text
    # The details table: per |M| TV / KL / joint KL / iterations; VTI's 20 iterations at 2^8 and 2^12, none above.
    row = next(line for line in text.splitlines() if line.startswith(f"| {MADE.label} |") and " / " in line)
    cells = [cell.strip() for cell in row.strip("|").split("|")][1:]
    assert [cell.split(" / ")[-1] for cell in cells] == ["20", "20", "-", "-"]
