"""TRJ bridge-estimate studies: their registration, a tiny study end to end, and the ordering verdicts."""

from pathlib import Path

import pandas as pd

from suite.cli import main
from suite.studies import STUDIES
from suite.studies.bbe import BBEStudy

TINY = BBEStudy(
    name="tiny-bbe",
    description="exact and affine transports on sas, two small N",
    problem="sas",
    proposals=("exact", "affine"),
    draws=(200, 400),
    replicates=2,
    repeats=2,
    flow_iterations=10,
    model=None,
    paper_source="none",
    paper_claim="the exact transport is exact",
    paper_order=(("exact", "affine"),),
)


def test_trj_studies_are_registered_with_the_papers_proposals() -> None:
    assert set(STUDIES["trj-fa"].proposals) == {"standard", "lopes-west", "affine", "rq", "ctrj"}
    assert STUDIES["trj-fa"].problem == "factor-analysis-k23" and STUDIES["trj-fa"].model == 0
    assert {"rq", "ctrj", "standard"} <= set(STUDIES["trj-blockvs"].proposals)


def test_a_tiny_bbe_study_runs_resumes_and_judges_the_ordering(tmp_path: Path, capsys) -> None:
    assert TINY.run(tmp_path) == 0
    table = pd.read_csv(tmp_path / "tiny-bbe.csv")
    assert list(table["draws"]) == [200, 200, 400, 400]
    exact = table[table["proposal"] == "exact"]
    # sas: P(k=2) = 0.75 exactly; with exact transports every alpha is min(1, pi(k')/pi(k)), so the BBE is exact.
    assert (exact["mean"] - 0.75).abs().max() < 1e-9 and (exact["rmse"] < 1e-9).all()
    assert (table["estimates"] == 4).all() and (table["fits"] == 2).all()
    assert TINY.ordering(table) == [
        f"exact better than affine: holds (RMSE {table['rmse'].iloc[2]:.4f} against {table['rmse'].iloc[3]:.4f})"
    ]
    assert (tmp_path / "tiny-bbe.png").stat().st_size > 0 and "holds" in (tmp_path / "index.html").read_text()
    capsys.readouterr()
    assert TINY.run(tmp_path) == 0  # both N kept: nothing is rerun
    assert "N = 200: kept" in capsys.readouterr().out


def test_study_command_refuses_an_unknown_study(capsys) -> None:
    try:
        code = main(["study", "trj-nothing"])
    except SystemExit as exc:
        code = exc.code
    assert code == 2
    assert "trj-fa" in capsys.readouterr().err


def test_an_n_can_have_a_budget_of_its_own(tmp_path: Path) -> None:
    import dataclasses

    study = dataclasses.replace(TINY, budgets=((400, 1, 3),))
    assert study.budget(200) == (2, 2) and study.budget(400) == (1, 3)
    settings = study.study_settings(400, None)
    assert settings.replicates == 1 and settings.repeats == 3 and settings.draws == 400
    assert study.study_settings(400, 5).replicates == 5  # --seeds still wins
    fa = STUDIES["trj-fa"]
    assert fa.study_settings(fa.draws[0], None).draws_per_model
    assert STUDIES["trj-blockvs"].study_settings(1000, None).fresh_draws


def test_one_estimate_each_judges_no_ordering() -> None:
    """An RMSE from a single estimate has no spread: the paper's ordering is not judged from it (issue 54)."""
    table = pd.DataFrame(
        {"draws": [200, 200], "proposal": ["exact", "affine"], "rmse": [0.01, 0.05], "estimates": [1, 1]}
    )
    (line,) = TINY.ordering(table)
    assert line.startswith("exact better than affine: not judged, one estimate each") and "holds" not in line
    assert "holds" in TINY.ordering(table.assign(estimates=[2, 2]))[0]


def test_every_study_says_how_long_it_takes() -> None:
    assert all(study.expected_runtime for study in STUDIES.values())
