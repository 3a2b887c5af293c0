"""TRJ bridge-estimate studies: their registration, a tiny study end to end, and the ordering verdicts."""

from pathlib import Path

import pandas as pd
import torch

from suite.cli import main
from suite.core.types import ModelProbs
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


def test_trj_blockvs_scores_on_the_exact_value_and_says_so() -> None:
    """trj-blockvs scores on block-vs's exact model probabilities (quadrature), not the stored SMC draw (issue 54)."""
    from suite.studies.bbe import format_bbe_table
    from suite.studies.bbe_output import format_summary, truth_of

    study = STUDIES["trj-blockvs"]
    assert study.truth_name == "exact" and study.study_settings(1000, None).exact_truth is study.exact_truth
    assert TINY.truth_name == "reference"
    table = pd.DataFrame(
        [
            {"draws": 1000, "proposal": "rq", "estimates": 1, "fits": 1, "mean": 0.62, "sd": 0.0, "rmse": 0.01}
            | {"reference": 0.61995, "reference_se": 1e-5, "acceptance": 0.3, "fit_seconds": 2.0}
        ]
    )
    assert "| exact |" in format_bbe_table(table, study.truth_name).splitlines()[0]
    assert format_summary([], "P(m)", 0.619953, "exact").startswith("BBE of P(m) (exact 0.61995)")

    class Fixed:
        """A problem whose stored reference would give another answer than the study's exact one."""

        num_models = 2

        def reference_model_probs(self) -> ModelProbs:
            return ModelProbs(index=torch.arange(2), prob=torch.tensor([0.3, 0.7], dtype=torch.float64))

    exact = ModelProbs(index=torch.arange(2), prob=torch.tensor([0.25, 0.75], dtype=torch.float64))
    assert truth_of(Fixed(), lambda problem: exact)[0].tolist() == [0.25, 0.75]
    assert truth_of(Fixed())[0].tolist() == [0.3, 0.7]
