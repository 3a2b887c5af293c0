"""Studies: the variants' run arguments, the comparison table from records, and a small study end to end."""

import math
from pathlib import Path

import pandas as pd
import pytest

from suite.cli import main
from suite.studies import STUDIES
from suite.studies.mif_ablations import MIF_ABLATIONS, PAPER
from suite.studies.study import Study, Variant, format_table, run_study, variant_line

TINY_TRAINING = {"num_iterations": 30, "learning_rates": [0.01], "batch_size": 16, "evidence_draws": 256}
TINY = Study(
    name="tiny",
    description="two variants of mif on the funnel, a few iterations",
    problems=("funnel",),
    variants=(
        Variant("MIF", "mif", {**TINY_TRAINING, "hidden": 0}, {"funnel": 0.01}),
        Variant("MIF (w/o t_i)", "mif", {**TINY_TRAINING, "hidden": 0, "translation": False}, {"funnel": 0.38}),
    ),
    metric="neg_elbo",
    grid={"profile": "smoke", "seeds": 2},
    execution={"progress": False, "jobs": 1},
    paper_source="MIF paper Table 2",
)


def test_mif_ablations_follow_table_2() -> None:
    """Seven rows as in MIF Table 2, each with the paper's two numbers; every MIF variant affine (hidden = 0)."""
    study = STUDIES["mif-ablations"]
    assert [v.label for v in study.variants] == list(PAPER)
    assert study.variants[1].paper == {"eight-schools": 31.74, "funnel": 0.01}
    assert all(v.options.get("hidden") == 0 for v in study.variants if v.method in ("mif", "iaf"))
    base = study.variants[1].options
    switched = {v.label: {(k, x) for k, x in v.options.items() if base.get(k) != x} for v in study.variants[2:6]}
    assert switched == {
        "MIF (eps-cond)": {("conditioning", "eps")},
        "MIF (w/o t_i)": {("translation", False)},
        "MIF (w/o Prior)": {("prior_inputs", False)},
        "MIF (w/o Order)": {("order", "reversed")},
    }


def test_a_variant_grid_names_the_variant_folder_and_options(tmp_path: Path) -> None:
    spec, execution = MIF_ABLATIONS.variant_grid(MIF_ABLATIONS.variants[3], tmp_path, seeds=1, force=True)
    assert execution.out == tmp_path / "mif-w-o-t-i" and execution.force and not execution.progress
    assert spec.method_options["mif"]["translation"] is False and spec.methods == ("mif",)
    assert spec.seeds == 1 and spec.no_time_budget and spec.profile == "quick"  # the caller's seeds win


@pytest.mark.slow
def test_a_small_study_runs_end_to_end_and_writes_its_table(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert run_study(TINY, tmp_path) == 0
    table = pd.read_csv(tmp_path / "tiny.csv")
    assert list(table["variant"]) == ["MIF", "MIF (w/o t_i)"]
    assert list(table["funnel_runs"]) == [2, 2] and list(table["funnel_paper"]) == [0.01, 0.38]
    assert all(math.isfinite(v) and v > -0.1 for v in table["funnel"])  # a -ELBO of a normalised target is >= 0
    assert (tmp_path / "tiny.png").stat().st_size > 0 and (tmp_path / "mif.log").exists()
    assert "mif-w-o-t-i/index.html" in (tmp_path / "index.html").read_text()
    markdown = (tmp_path / "tiny.md").read_text()
    assert "| MIF (w/o t_i) |" in markdown and "0.38" in markdown
    out = capsys.readouterr().out
    assert "(2 runs)" in out and "MIF: exit 0 in" in out and "2 of 2 runs ok (log:" in out
    # Finished runs are kept: a second call runs nothing new and gives the same table.
    assert run_study(TINY, tmp_path) == 0
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "tiny.csv"), table)


def test_format_table_marks_missing_and_failed_runs() -> None:
    columns = ["variant", "funnel", "funnel_se", "funnel_runs", "funnel_failed", "funnel_paper"]
    rows = [["A", 0.5, 0.1, 2, 1, 0.4], ["B", math.nan, math.nan, 0, 0, None]]
    table = pd.DataFrame(rows, columns=columns)
    text = format_table(TINY, table)
    assert "| A | 0.500 ± 0.100 (2 runs), 1 failed | 0.40 |" in text
    assert "| B | - | - |" in text


def test_an_unknown_study_is_refused_naming_the_valid_ones(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["study", "no-such-study"])
    assert exit_info.value.code == 2
    assert "mif-ablations" in capsys.readouterr().err
    assert main(["study", "mif-ablations", "--seeds", "0"]) == 2


def test_a_variant_line_says_how_many_runs_failed(tmp_path: Path) -> None:
    """A variant whose every run failed still exits 0 (failures are results), and its line says so (issue 54)."""
    failed = [{"status": "failed"}, {"status": "failed"}]
    assert "exit 0 in 3 s, all 2 runs failed" in variant_line("A", 0, 3.2, failed, tmp_path / "a.log")
    assert "1 of 2 runs ok, 1 failed" in variant_line("A", 0, 3.2, [{"status": "ok"}, *failed[:1]], tmp_path / "a.log")
    assert "2 of 2 runs ok (log:" in variant_line("A", 0, 3.2, [{"status": "ok"}] * 2, tmp_path / "a.log")
