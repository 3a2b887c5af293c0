"""VTI Fig. 2 study: references per data set made before the runs, the table and the redrawn figure."""

import functools
import os
from pathlib import Path

import pandas as pd
import pytest

from suite.results.records import load_records
from suite.store import references as store
from suite.studies import STUDIES
from suite.studies.study import Study, Variant, run_study
from suite.studies.vti_robust_vs import FLOWS, make_references, plot_fig2

TINY = Study(
    name="tiny-fig2",
    description="vti-mcg, diagonal flow, one data set of mid misspecification, a few iterations",
    problems=("robust-vs-fig2-mid",),
    variants=(
        Variant(
            "Diagonal Gaussian",
            "vti-mcg",
            {"flow": "diag", "num_iterations": 20, "warmup_iterations": 5, "batch_size": 32},
        ),
    ),
    metric="model_prob_tv",
    grid={"profile": "smoke", "seeds": 1},
    execution={"progress": False, "jobs": 1},
    paper_source="VTI Fig. 2",
    prepare=functools.partial(
        make_references,
        problems=("robust-vs-fig2-mid",),
        profile="smoke",
        num_chains=64,
        burn_in=50,
        num_iterations=100,
        thin=2,
        num_gold_draws=400,
    ),
    figure=plot_fig2,
)


def test_the_study_has_the_papers_flows_and_levels() -> None:
    study = STUDIES["vti-robust-vs"]
    assert [v.options["flow"] for v in study.variants] == ["diag", "affine(5,5)", "spline(4,6)"] == list(FLOWS.values())
    assert study.problems == ("robust-vs-fig2-mid", "robust-vs-fig2-high")


@pytest.mark.slow
def test_a_tiny_fig2_study_makes_its_reference_runs_and_draws_the_figure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(store.ENV_VAR, "")
    assert run_study(TINY, tmp_path) == 0
    assert os.environ[store.ENV_VAR].split(os.pathsep)[0] == str(tmp_path / "references")
    assert len(list((tmp_path / "references").rglob("*.npz"))) == 1  # smoke: one data set (seed 1000)
    (record,) = load_records(tmp_path / "diagonal-gaussian")
    assert record["status"] == "ok", record["reason"]
    assert record["problem_config"]["data_seed"] == 1000 and record["reference"]["kind"] == "estimated"
    table = record["model_probs"]
    drawn = [c for c, n in zip(table["cross_entropy"], table["gold_draws"], strict=True) if n]
    assert drawn and all(c is not None for c in drawn)  # every model with gold draws has its cross-entropy
    assert pd.read_csv(tmp_path / "tiny-fig2.csv")["robust-vs-fig2-mid_runs"].tolist() == [1]
    assert (tmp_path / "fig2.png").stat().st_size > 0 and "fig2.png" in (tmp_path / "index.html").read_text()
