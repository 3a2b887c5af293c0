"""Shards of a planned grid (``--shard I/N``) and its listing (``--dry-run``): parsing, slicing, the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from suite import cli
from suite.results.records import RunKey
from suite.run.shards import dry_run_line, parse_shard, shard_of

ROOT = Path(__file__).resolve().parents[3]
#: sas with two methods and three seeds: a grid of six runs.
GRID = ["--profile", "smoke", "--problems", "sas", "--methods", "rjmcmc-baseline,trj", "--seeds", "3"]
GRID_SIZE = 6
QUIET = ["--eval-draws", "300", "--jobs", "1", "--no-progress"]


def _dry_run(out: Path, capsys: pytest.CaptureFixture, *extra: str) -> list[dict]:
    """The rows ``--dry-run`` prints for the grid into ``out`` (with ``extra`` flags)."""
    capsys.readouterr()
    assert cli.main([*GRID, *QUIET, "--out", str(out), "--dry-run", *extra]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.strip()]
    return [json.loads(line) for line in lines]


def _record_stems(out: Path) -> list[str]:
    return sorted(path.stem for path in (out / "records").glob("*.json"))


def _temporaries(out: Path) -> list[Path]:
    return [path for path in out.rglob("*") if path.name.startswith(".") and path.name.endswith(".tmp")]


@pytest.mark.parametrize(("text", "expected"), [("1/3", (1, 3)), (" 2 / 3 ", (2, 3)), ("3/3", (3, 3)), ("1/1", (1, 1))])
def test_parse_shard_accepts_i_of_n(text: str, expected: tuple[int, int]) -> None:
    assert parse_shard(text) == expected


@pytest.mark.parametrize("text", ["4/3", "0/2", "1/0", "0/0", "a/b", "1-3", "", "1/3/5", "-1/3", "1.5/3"])
def test_parse_shard_refuses_anything_else_naming_the_form(text: str) -> None:
    with pytest.raises(ValueError, match=r"--shard") as caught:
        parse_shard(text)
    assert "I/N" in str(caught.value) or "between 1 and N" in str(caught.value)


def test_shards_are_disjoint_strided_slices_whose_union_is_the_plan() -> None:
    plan = [RunKey("sas", "m", seed, {}) for seed in range(7)]
    shards = [shard_of(plan, index, 3) for index in (1, 2, 3)]
    assert [len(shard) for shard in shards] == [3, 2, 2]
    assert shards[0] == [plan[0], plan[3], plan[6]]
    assert sorted(run.seed for shard in shards for run in shard) == list(range(7))
    assert shard_of(plan, 1, 1) == plan
    assert shard_of(plan, 5, 9) == [plan[4]] and shard_of(plan, 9, 9) == []


def test_dry_run_line_is_one_json_object_with_the_record_stem_as_key() -> None:
    config = {"method_options": {"burn_in": 5}, "problem_config": {"n": 3}, "profile": "smoke", "device": "cpu"}
    key = RunKey("sas", "trj", 2, config)
    line = dry_run_line(key, recorded=True)
    assert "\n" not in line
    row = json.loads(line)
    assert row == {
        "problem": "sas",
        "method": "trj",
        "seed": 2,
        "method_options": {"burn_in": 5},
        "problem_config": {"n": 3},
        "profile": "smoke",
        "device": "cpu",
        "time_budget_s": None,
        "key": Path(key.filename).stem,
        "recorded": True,
    }


@pytest.mark.parametrize("text", ["4/3", "0/2", "1/0", "a/b", "1-3", ""])
def test_a_malformed_shard_exits_2_before_any_work(text: str, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "out"
    assert cli.main([*GRID, *QUIET, "--out", str(out), "--shard", text]) == 2
    captured = capsys.readouterr()
    assert "run_all.py: error: --shard" in captured.err
    assert "I/N" in captured.err or "between 1 and N" in captured.err
    assert "Profile smoke" not in captured.out
    assert not [path for path in out.rglob("*") if path.is_file()]  # no record, no lock, no report


def test_the_shards_dry_runs_split_the_grid(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    whole = [row["key"] for row in _dry_run(tmp_path, capsys)]
    assert len(whole) == len(set(whole)) == GRID_SIZE
    shards = [[row["key"] for row in _dry_run(tmp_path, capsys, "--shard", f"{i}/3")] for i in (1, 2, 3)]
    assert all(shards)
    assert sum(len(shard) for shard in shards) == len({key for shard in shards for key in shard})  # disjoint
    assert {key for shard in shards for key in shard} == set(whole)
    assert shards == [whole[0::3], whole[1::3], whole[2::3]]  # every task computes the same slices


@pytest.mark.slow
def test_dry_run_lists_exactly_the_runs_a_real_run_records(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "out"
    planned = _dry_run(out, capsys)
    assert len(planned) == GRID_SIZE
    assert not any(row["recorded"] for row in planned)
    assert {(row["problem"], row["method"], row["seed"]) for row in planned} == {
        ("sas", method, seed) for method in ("rjmcmc-baseline", "trj") for seed in range(3)
    }
    assert all(row["profile"] == "smoke" and row["device"] == "cpu" for row in planned)
    assert _record_stems(out) == []  # a dry run records nothing

    assert cli.main([*GRID, *QUIET, "--out", str(out)]) == 0
    capsys.readouterr()
    assert _record_stems(out) == sorted(row["key"] for row in planned)
    after = _dry_run(out, capsys)
    assert [row["key"] for row in after] == [row["key"] for row in planned]
    assert all(row["recorded"] for row in after)


@pytest.mark.slow
def test_two_shards_run_at_the_same_time_into_one_folder(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "out"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "run_all.py", *GRID, *QUIET, "--out", str(out)]
    procs = [
        subprocess.Popen(
            [*command, "--shard", f"{index}/2"], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        for index in (1, 2)
    ]
    results = [proc.communicate(timeout=300) for proc in procs]
    for index, (proc, (stdout, stderr)) in enumerate(zip(procs, results, strict=True), start=1):
        assert proc.returncode == 0, stderr.decode()
        text = stdout.decode()
        assert f"Profile smoke: 3 runs (shard {index}/2 of a grid of {GRID_SIZE})" in text
        assert f"Shard {index}/2 done; once every shard has finished: tdbench report {out}" in text
    planned = _dry_run(out, capsys)
    assert _record_stems(out) == sorted(row["key"] for row in planned)
    assert all(row["recorded"] for row in planned)
    records = [json.loads(path.read_text()) for path in (out / "records").glob("*.json")]
    runs = [(record["problem"], record["method"], record["seed"]) for record in records]
    assert len(runs) == len(set(runs)) == GRID_SIZE
    assert _temporaries(out) == []
    assert not (out / "index.html").exists()  # shards write no report: 'tdbench report OUT' does, afterwards
