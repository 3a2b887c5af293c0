"""Two overlapping grids on one results folder: the one that finishes last reports every run of both.

Threat: two commands started on the same folder, e.g. ``--seeds 2`` and ``--seeds 3`` of one problem and method
(a resubmitted job, two shards of a study). Each claims its runs (``OUT/locks``) and leaves the runs the other
holds to it. Before, the one that finished wrote the leaderboards, ``results.parquet`` and ``index.html`` from its
own runs only (4 of 6 runs, say) and said nothing of the others; ``tdbench report`` repaired it. The other
process is played here by the test itself: it holds claims with ``flock`` and writes records, as a live process
running those runs would.
"""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import pytest

from suite.cli import run_all
from suite.run import claims
from suite.run import parallel as par

pytestmark = pytest.mark.skipif(claims.fcntl is None, reason="claims need flock (POSIX)")

GRID = ["--problems", "sas", "--methods", "rjmcmc-baseline", "--profile", "smoke", "--eval-draws", "300"]
GRID += ["--no-progress", "--jobs", "1"]


def _runs_on_leaderboard(out: Path) -> int:
    with (out / "leaderboard_sas.csv").open() as handle:
        (row,) = [row for row in csv.DictReader(handle) if row["method"] == "rjmcmc-baseline"]
    return int(row["runs"])


def _table_rows(out: Path) -> int:
    """Runs in ``results.parquet`` (a row per run and metric), or in the CSV beside it without a parquet engine."""
    pandas = pytest.importorskip("pandas")
    try:
        table = pandas.read_parquet(out / "results.parquet")
    except ImportError:
        table = pandas.read_csv(out / "records_long.csv")
    return len(table.drop_duplicates(["problem", "method", "seed"]))


@pytest.mark.slow
def test_the_grid_finishing_last_reports_the_runs_another_process_recorded_meanwhile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    # Records of seeds 0 and 1, as the other command (--seeds 2) will write them.
    theirs = tmp_path / "theirs"
    assert run_all([*GRID, "--seeds", "2", "--out", str(theirs)]) == 0
    names = sorted(path.name for path in (theirs / "records").glob("*.json"))
    assert len(names) == 2

    out = tmp_path / "out"
    held = [claims.RunClaim(out, name) for name in names]
    assert all(claim.acquire() for claim in held)  # the other command is running seeds 0 and 1

    real_run_spec = par.run_spec

    def run_spec(spec, *args, **kwargs):  # type: ignore[no-untyped-def]
        # While this command runs seed 2, the other one finishes seeds 0 and 1 and lets its claims go.
        for name in names:
            for source in (theirs / "draws" / name.replace(".json", ".npz"), theirs / "records" / name):
                if source.is_file():  # the draws first, the record last, as a run writes them
                    (out / source.parent.name).mkdir(parents=True, exist_ok=True)
                    shutil.copy(source, out / source.parent.name / source.name)
        for claim in held:
            claim.release(finished=True)
        return real_run_spec(spec, *args, **kwargs)

    monkeypatch.setattr(par, "run_spec", run_spec)
    capsys.readouterr()
    assert run_all([*GRID, "--seeds", "3", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "2 of 3 runs are being run by another process" in printed
    assert _runs_on_leaderboard(out) == 3, printed
    assert _table_rows(out) == 3
    assert (out / "index.html").is_file()


@pytest.mark.slow
def test_a_grid_of_fewer_seeds_finishing_last_keeps_the_other_grids_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """The other order: the --seeds 3 command recorded seed 2; the --seeds 2 command, finishing last, shows it."""
    out = tmp_path / "out"
    assert run_all([*GRID, "--seeds", "3", "--out", str(out)]) == 0
    assert _runs_on_leaderboard(out) == 3
    capsys.readouterr()
    assert run_all([*GRID, "--seeds", "2", "--out", str(out)]) == 0
    assert _runs_on_leaderboard(out) == 3, capsys.readouterr().out
    assert _table_rows(out) == 3


@pytest.mark.slow
def test_runs_another_process_still_holds_are_named_with_the_command_that_completes_the_report(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "out"
    assert run_all([*GRID, "--seeds", "1", "--out", str(out)]) == 0
    (name,) = [path.name for path in (out / "records").glob("*.json")]
    other = claims.RunClaim(out, name.replace("seed0", "seed1"))
    assert other.acquire()  # another live process is running seed 1
    try:
        capsys.readouterr()
        assert run_all([*GRID, "--seeds", "2", "--out", str(out)]) == 0
        printed = capsys.readouterr().out
    finally:
        other.release()
    assert "still being run by another process (sas / rjmcmc-baseline / seed 1)" in printed
    assert f"tdbench report {out}" in printed
