"""Writing without following links (issue 36): temporary files, report files and run locks never write a symlink's
target, and the plots draw any name as plain text."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from suite.core.files import temporary_prefix, write_atomically
from suite.report.curves import plot_curves
from suite.report.html import write_index
from suite.report.leaderboard import display_table, summary_table, write_leaderboards
from suite.report.plots import plot_model_probs
from suite.run import claims

needs_symlinks = pytest.mark.skipif(not hasattr(os, "symlink"), reason="no symbolic links on this platform")

SECRET = "the link's target: must stay as it is\n"


def _target(tmp_path: Path) -> Path:
    """A file outside the results folder that a planted link points to."""
    victim = tmp_path / "elsewhere" / "victim.txt"
    victim.parent.mkdir()
    victim.write_text(SECRET)
    return victim


def _record(method: str, tv: float = 0.1, seed: int = 0, problem: str = "toy") -> dict:
    """A minimal record with a model-probability table and a trace, as the report reads them."""
    return {
        "problem": problem,
        "problem_facts": {
            "main_metric": "model_prob_tv",
            "higher_is_better": [],
            "reported_neg_elbo": {},
            "reported_dag_table": {},
        },
        "method": method,
        "seed": seed,
        "status": "ok",
        "config_hash": "0123456789",
        "metrics": {"model_prob_tv": {"value": tv, "se": None}},
        "model_probs": {"id": ["a", "b"], "truth": [0.6, 0.4], "estimate": [0.5, 0.5]},
        "budget": {"profile": "quick", "num_draws": 100, "time_budget_s": 20.0, "replayed": False},
        "trace": {
            "seconds": [2.0, 6.0, 20.0],
            "iterations": [1, 2, 3],
            "elbo": [None, None, None],
            "metrics": {"model_prob_tv": [tv, tv, tv]},
        },
        "timings_s": {"total": 20.0},
    }


@needs_symlinks
def test_a_planted_link_at_the_predictable_temporary_name_is_not_written_through(tmp_path: Path) -> None:
    victim = _target(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    final = out / "leaderboard_toy.md"
    # the name the writer used to pick for its temporary file: plant a link there
    os.symlink(victim, out / f".{final.name}.{os.getpid()}.tmp")
    write_atomically(final, lambda tmp: tmp.write_text("leaderboard\n"))
    assert victim.read_text() == SECRET
    assert final.read_text() == "leaderboard\n" and not final.is_symlink()


def test_a_temporary_file_is_new_and_named_for_the_stale_clean_up(tmp_path: Path) -> None:
    seen: list[Path] = []

    def write(tmp: Path) -> None:
        seen.append(tmp)
        assert tmp.name.startswith(temporary_prefix("page.html")) and tmp.name != f".page.html.{os.getpid()}.tmp"
        tmp.write_text("page")

    write_atomically(tmp_path / "page.html", write)
    mode = stat.S_IMODE((tmp_path / "page.html").stat().st_mode)
    umask = os.umask(0o022)
    os.umask(umask)
    assert mode == 0o666 & ~umask  # readable as any new file is, not mkstemp's 0600
    assert not seen[0].exists()


def _plant(victim: Path, out: Path, name: str) -> None:
    """Links to ``victim`` at ``name`` and at the temporary name its writer used to pick (``.<name>.<pid>.tmp``)."""
    os.symlink(victim, out / name)
    os.symlink(victim, out / f".{name}.{os.getpid()}.tmp")


@needs_symlinks
def test_an_index_html_that_is_a_link_is_replaced_not_followed(tmp_path: Path) -> None:
    victim = _target(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    _plant(victim, out, "index.html")
    write_index([_record("m1"), _record("m2", 0.2)], out)
    assert victim.read_text() == SECRET
    assert not (out / "index.html").is_symlink() and "<html" in (out / "index.html").read_text().lower()


@needs_symlinks
def test_a_leaderboard_that_is_a_link_is_replaced_not_followed(tmp_path: Path) -> None:
    victim = _target(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    for name in ("leaderboard_toy.md", "leaderboard_toy.csv", "records_long.csv"):
        _plant(victim, out, name)
    write_leaderboards([_record("m1"), _record("m2", 0.2)], out)
    assert victim.read_text() == SECRET
    assert not (out / "leaderboard_toy.md").is_symlink() and "m1" in (out / "leaderboard_toy.md").read_text()


@needs_symlinks
def test_a_lock_planted_as_a_link_does_not_create_its_target(tmp_path: Path) -> None:
    out = tmp_path / "out"
    target = tmp_path / "elsewhere" / "created-by-the-suite"
    target.parent.mkdir()
    lock = claims.lock_path(out, "toy__m1__seed0__0123456789.json")
    lock.parent.mkdir(parents=True)
    os.symlink(target, lock)
    claim = claims.RunClaim(out, "toy__m1__seed0__0123456789.json")
    with pytest.raises(OSError, match="symbolic link") as refused:
        claim.acquire()
    assert str(lock) in str(refused.value)
    assert not target.exists() and not claim.held


@needs_symlinks
def test_a_locks_folder_that_is_a_link_gets_no_lock_files(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    os.symlink(foreign, out / claims.LOCKS_DIR)
    with pytest.raises(OSError, match=r"lock folder .* symbolic link"):
        claims.RunClaim(out, "toy__m1__seed0__0123456789.json").acquire()
    assert list(foreign.iterdir()) == []


def test_a_name_with_mathtext_is_drawn_as_plain_text(tmp_path: Path) -> None:
    bad = r"$\notacommand{x}^$"  # a record may carry any name: its own, or a plug-in's from before names were checked
    records = [_record(bad), _record("m2", 0.2)]
    records[0]["model_probs"]["id"] = ["$a^$", "b"]
    records[1]["model_probs"]["id"] = ["$a^$", "b"]
    path = plot_model_probs("toy", records, tmp_path / "probs.png")
    assert path is not None and path.stat().st_size > 1000
    curves = plot_curves("toy", records, tmp_path / "curves.png")  # the method's name in the legend
    assert curves is not None and curves.stat().st_size > 1000


def test_minus_infinity_prints_as_minus_inf_in_every_column(tmp_path: Path) -> None:
    records = [_record("m1", float("-inf")), _record("m2", 0.2)]
    table = summary_table(_long(records), "toy", records)
    row = display_table(table).set_index("method").loc["m1"]
    assert row["model_prob_tv"] == "-inf"
    at_budget = [column for column in table.attrs["trace"]["at"]]
    assert at_budget and all(row[column] == "-inf" for column in at_budget), row.to_dict()
    page = write_index(records, tmp_path).read_text()
    assert ">-inf<" in page and ">inf<" not in page


def _long(records: list[dict]):
    from suite.report.leaderboard import long_table

    return long_table(records)
