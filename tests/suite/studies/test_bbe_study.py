"""The BBE variability study (tdbench bbe-study) on sas: exact transports give the exact bridge; affine come close."""

import csv
import json
from pathlib import Path

import pytest

from suite.cli import bbe_command
from suite.studies import bbe_output, bbe_replicates

REPLICATES, DRAWS = 3, 2000


@pytest.fixture(scope="module")
def sas_study(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, str]]]:
    """One CLI run (exact and affine proposals, two short trj runs each for the running plot)."""
    out = tmp_path_factory.mktemp("study")
    argv = [
        "sas",
        "--proposals",
        "exact,affine",
        "--replicates",
        str(REPLICATES),
        "--draws",
        str(DRAWS),
        "--out",
        str(out),
        "--running",
        "--running-seeds",
        "2",
    ]
    assert bbe_command.main(argv) == 0
    with (out / "bbe_sas.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    return out, rows


@pytest.mark.slow
def test_csv_has_one_row_per_proposal_replicate_and_model(sas_study) -> None:
    _, rows = sas_study
    assert len(rows) == 2 * REPLICATES * 2
    assert {(r["proposal"], r["replicate"], r["model"]) for r in rows} == {
        (p, str(i), m) for p in ("exact", "affine") for i in range(REPLICATES) for m in ("k=1", "k=2")
    }
    assert all(r["num_train"] == r["num_eval"] == str(DRAWS) and r["repeat"] == "0" for r in rows)
    assert {float(r["truth"]) for r in rows} == {0.25, 0.75}


def test_exact_transports_give_the_exact_bridge_and_affine_ones_come_close(sas_study) -> None:
    _, rows = sas_study
    second = [r for r in rows if r["model_index"] == "1"]
    exact = [float(r["estimate"]) for r in second if r["proposal"] == "exact"]
    affine = [float(r["estimate"]) for r in second if r["proposal"] == "affine"]
    assert len(exact) == len(affine) == REPLICATES
    assert all(abs(e - 0.75) < 1e-9 for e in exact), exact
    assert all(abs(a - 0.75) < 0.05 for a in affine), affine
    # Exact transports with uniform jumps: alpha(1 -> 2) = 1 and alpha(2 -> 1) = 1/3.
    from_models = {r["model_index"]: float(r["acceptance_from_model"]) for r in rows if r["proposal"] == "exact"}
    assert from_models["0"] == pytest.approx(1.0) and from_models["1"] == pytest.approx(1 / 3)
    assert len(set(affine)) == REPLICATES  # replicates use different training and evaluation sets


def test_plots_are_written(sas_study) -> None:
    out, _ = sas_study
    for name in ("bbe_sas.png", "running_sas.png"):
        assert (out / name).stat().st_size > 5000


def test_unknown_proposals_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        bbe_command.main(["sas", "--proposals", "exact,flowy"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "flowy" in err and "valid: rq, affine, standard, lopes-west, ctrj, exact" in err


def test_inapplicable_proposals_are_skipped_with_a_reason() -> None:
    from suite.core.registry import make_problem

    messages: list[str] = []
    problem = make_problem("sas")
    assert bbe_replicates.usable_proposals(problem, ("lopes-west", "exact"), messages.append) == ["exact"]
    assert len(messages) == 1 and "lopes-west" in messages[0]


def test_running_plot_takes_records_diagnostics_and_files(tmp_path: Path) -> None:
    running = {"iteration": [1, 2, 3], "prob": [[0.3, 0.7], None, [0.26, 0.74]]}
    record = {"method": "trj", "method_settings": {"transport": "affine"}, "diagnostics": {"running_estimate": running}}
    (tmp_path / "record.json").write_text(json.dumps(record))
    path = bbe_output.plot_running_estimates(
        [record, {"running_estimate": running}, running, tmp_path / "record.json"], 1, 0.75, tmp_path / "run.png"
    )
    assert path.stat().st_size > 5000
    with pytest.raises(ValueError, match="running_estimate"):
        bbe_output.plot_running_estimates([{"nothing": 1}], 1, 0.75, tmp_path / "bad.png")


def test_repeats_reuse_each_fitted_proposal() -> None:
    from suite.core.registry import make_problem

    settings = bbe_replicates.StudySettings(proposals=("affine",), replicates=1, draws=500, repeats=3)
    results = bbe_replicates.run_study(make_problem("sas"), settings, log=lambda _: None)
    assert [r.repeat for r in results] == [0, 1, 2]
    assert len({float(r.probs[1]) for r in results}) == 3  # fresh proposals each time
    assert len({r.fit_seconds for r in results}) == 1  # one fit
