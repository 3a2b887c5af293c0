"""The report from records alone: the same files as at run time, no problem or method code, old records refused."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from suite.report.build import NOT_APPLICABLE_FILE, report_from_folder, write_report
from suite.results.facts import add_missing_facts
from suite.results.records import load_records
from tests.quick_records import quick_records_dir

REPO = Path(__file__).resolve().parents[3]
QUICK = quick_records_dir()
#: Bars (sas), a sweep (robust-vs), DAG tables (linear-dag-d4), the papers' numbers (funnel).
PROBLEMS = ("funnel", "linear-dag-d4", "robust-vs", "sas")
#: The files a report writes that must not change when only the report is made again.
TABLES = ("leaderboard_*.md", "leaderboard_*.csv", "dag_table_*.csv", "sweep_*.csv", "reported_comparison.md")


def quick_copy(out: Path, problems: tuple[str, ...] = PROBLEMS) -> Path:
    """A results folder holding the committed quick records of ``problems``, with their facts added."""
    (out / "records").mkdir(parents=True)
    for path in sorted(QUICK.glob("*.json")):
        if path.name.split("__")[0] in problems:
            shutil.copy(path, out / "records" / path.name)
    add_missing_facts(out)
    return out


def tables_of(out: Path) -> dict[str, bytes]:
    """The bytes of every table file in ``out``."""
    return {path.name: path.read_bytes() for pattern in TABLES for path in sorted(out.glob(pattern))}


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A smoke run (dagma does not apply to sas, mf not to linear-dag-d4): its folder and what it printed."""
    out = tmp_path_factory.mktemp("smoke")
    command = [sys.executable, "run_all.py", "--profile", "smoke", "--no-progress", "--out", str(out)]
    command += ["--problems", "sas,linear-dag-d4", "--methods", "rjmcmc-baseline,mf,dagma"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return out, done.stdout


@pytest.mark.slow
def test_report_only_gives_byte_identical_tables(smoke_run: tuple[Path, str], tmp_path: Path) -> None:
    out, _ = smoke_run
    written = tables_of(out)
    assert {"leaderboard_sas.md", "leaderboard_sas.csv", "dag_table_linear-dag-d4.csv"} <= set(written)
    assert "not_applicable" in written["leaderboard_sas.csv"].decode()  # dagma's row, kept for the report
    again = tmp_path / "again"
    shutil.copytree(out / "records", again / "records")
    shutil.copy(out / NOT_APPLICABLE_FILE, again / NOT_APPLICABLE_FILE)
    text = report_from_folder(again)
    assert tables_of(again) == written
    # The folder's path is printed as given: measured as a user's results/smoke, not pytest's temporary path.
    shown = text.replace(str(again), "results/smoke")
    assert "== sas" in text and max(len(line) for line in shown.splitlines()) <= 120


@pytest.mark.slow
def test_run_prints_at_most_120_columns(smoke_run: tuple[Path, str]) -> None:
    out, printed = smoke_run
    assert "== linear-dag-d4" in printed
    shown = printed.replace(str(out), "results/smoke")  # the user's folder name, not pytest's temporary path
    long = [line for line in shown.splitlines() if len(line) > 120]
    assert not long, long


BLOCKER = """
import importlib.abc, sys

class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("problems", "methods") or name.startswith("suite.core.registry"):
            raise ImportError(f"blocked: {name}")
        return None

sys.meta_path.insert(0, Refuse())
from pathlib import Path
from suite.report.build import report_from_folder
text = report_from_folder(Path(sys.argv[1]))
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("problems", "methods") or m == "suite.core.registry")
assert not loaded, loaded
print(text)
"""


@pytest.mark.slow
def test_report_in_a_process_that_cannot_import_problems_or_methods(tmp_path: Path) -> None:
    out = quick_copy(tmp_path / "quick")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(BLOCKER), str(out)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    for problem in PROBLEMS:
        assert f"== {problem}" in done.stdout
        assert (out / f"leaderboard_{problem}.md").stat().st_size > 0
        if problem != "funnel":  # one model: no model probabilities to draw
            assert (out / f"leaderboard_{problem}.png").stat().st_size > 1000
    assert (out / "dag_table_linear-dag-d4.csv").is_file() and (out / "reported_comparison.md").is_file()
    assert list(out.glob("sweep_*.png"))
    sorted_by = (out / "leaderboard_linear-dag-d4.md").read_text().splitlines()[2]
    assert "model_prob_tv" in sorted_by  # the main metric, read from the records' facts


def test_records_without_facts_are_refused_before_anything_is_written(tmp_path: Path) -> None:
    (tmp_path / "records").mkdir()
    name = next(path.name for path in sorted(QUICK.glob("sas__*.json")))
    record = json.loads((QUICK / name).read_text())
    del record["problem_facts"]  # as records were written before they kept facts
    (tmp_path / "records" / name).write_text(json.dumps(record))
    with pytest.raises(ValueError) as error:
        report_from_folder(tmp_path)
    message = str(error.value)
    assert str(tmp_path / "records" / name) in message and f"tdbench facts {tmp_path}" in message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["records"]
    with pytest.raises(ValueError, match="has no problem_facts"):
        write_report(load_records(tmp_path), tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["records"]


def test_a_bad_not_applicable_file_is_named(tmp_path: Path) -> None:
    out = quick_copy(tmp_path, ("funnel",))
    (out / NOT_APPLICABLE_FILE).write_text('{"problem": "funnel"}')
    with pytest.raises(ValueError, match=f"{out / NOT_APPLICABLE_FILE} is unreadable"):
        report_from_folder(out)
    (out / NOT_APPLICABLE_FILE).write_text(json.dumps([{"problem": "funnel", "method": "trj", "reason": "one model"}]))
    text = report_from_folder(out)
    assert "does not apply: trj" in text
    assert "one model" in (out / "leaderboard_funnel.md").read_text()


def test_no_records_and_mixed_profiles_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="holds no records"):
        report_from_folder(tmp_path)
    out = quick_copy(tmp_path / "mixed", ("funnel",))
    path = sorted((out / "records").glob("*.json"))[0]
    record = json.loads(path.read_text())
    record["budget"]["profile"] = "paper"
    path.write_text(json.dumps(record))
    with pytest.raises(ValueError, match="profiles paper, quick"):
        report_from_folder(out)
