"""The ``tdbench`` command line: subcommands, usage lines, the ``run_all.py`` alias, ``describe`` and ``report``."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from suite import cli
from suite.cli.describe import describe, method_option_rows
from suite.core.method import PROFILES
from suite.core.registry import available_methods, available_problems, method_class
from suite.report.build import NOT_APPLICABLE_FILE
from suite.run import Skipped, plan_grid
from suite.run.grid import save_not_applicable

ROOT = Path(__file__).resolve().parents[3]
SMALL = ["--profile", "smoke", "--seeds", "1", "--eval-draws", "300", "--jobs", "1", "--no-progress"]
#: sas and a DAG problem with a method that applies to one of them only: both kinds of leaderboard rows.
PLAN = ["--problems", "sas,linear-dag-d4", "--methods", "rjmcmc-baseline,dagma"]


def _run_quietly(argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = cli.run_all(argv)
    return status, out.getvalue()


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A finished smoke run (results folder, printed output), shared by the tests that only read it."""
    out = tmp_path_factory.mktemp("smoke")
    status, printed = _run_quietly([*SMALL, *PLAN, "--out", str(out)])
    assert status == 0, printed
    return out, printed


def _lines_of(text: str, option: str) -> list[str]:
    return [line for line in text.splitlines() if line.split()[:1] == [option]]


def test_describe_vti_mcg_lists_every_option_with_its_preset_values(capsys: pytest.CaptureFixture) -> None:
    assert cli.main(["describe", "vti-mcg"]) == 0
    text = capsys.readouterr().out
    cls = method_class("vti-mcg")
    assert text.startswith("method vti-mcg\n") and cls.__doc__.split("\n")[0] in text
    header = next(line for line in text.splitlines() if line.split()[:3] == ["option", "type", "default"])
    assert header.split()[3:] == list(PROFILES)
    options = [field.name for field in dataclasses.fields(cls) if field.name != "progress"]
    assert len(options) > 5
    for option in options:
        (line,) = _lines_of(text, option)
        cells = line.split()
        for column, profile in enumerate(PROFILES):
            preset = cls.profiles.get(profile, {})
            default = getattr(cls, option, None)
            expected = preset[option] if default is None and option in preset else default
            assert cells[-len(PROFILES) + column] == json.dumps(expected), (option, profile)
    (iterations,) = _lines_of(text, "num_iterations")
    assert iterations.split()[1:] == ["int", "|", "None", "null", "150", "3000", "30000"]
    assert "Seeds when --seeds is not given: smoke 2, quick 3, paper 10" in text


def test_every_method_describes_every_option() -> None:
    """Every registered method's options, with a type and a value per profile (a preset naming no field fails)."""
    for name in available_methods():
        cls = method_class(name)
        rows = method_option_rows(cls)
        assert [row[0] for row in rows] == [f.name for f in dataclasses.fields(cls) if f.name != "progress"]
        assert all(len(row) == 3 + len(PROFILES) and row[1] for row in rows)
        for profile, preset in cls.profiles.items():
            assert set(preset) <= {row[0] for row in rows}, (name, profile)


def test_every_description_fits_120_columns() -> None:
    """Long docstring lines are wrapped; an options table too wide is printed one option per block."""
    for name in [*available_problems(), *available_methods()]:
        text = describe(name)
        assert max(map(len, text.splitlines())) <= 120, name
    fr = describe("fr")
    assert "  learning_rates: tuple[float, ...] | None, default null" in fr and "paper [0.1, 0.01" in fr


def test_describe_a_problem(capsys: pytest.CaptureFixture) -> None:
    assert cli.main(["describe", "dag-mlp"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("problem dag-mlp\n")
    assert _lines_of(text, "num_samples")[0].split() == ["num_samples", "int", "1024"]
    assert "main metric: shd (lower is better)" in text and "higher is better: auroc" in text
    assert "In --problems all for the profiles: paper" in text
    assert "vti-surrogate: needs an enumerable model space" in text  # methods that do not apply, with the reason


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["describe", "nope"], "tdbench: error: unknown problem or method 'nope'; problems: block-vs,"),
        (
            ["run", "--methods", "nope"],
            "tdbench run: error: unknown method(s) 'nope'; valid methods: bayesdag, bges, ctrj,",
        ),
        (["run", "--problems", "nope"], "tdbench run: error: unknown problem(s) 'nope'; valid problems: block-vs,"),
        (
            ["reprot", "x"],
            "invalid choice: 'reprot' (choose from "
            + ", ".join(map(repr, ["run", "list", "describe", "report", "study", *cli.TOOLS]))
            + ")",
        ),
        (["report"], "the following arguments are required: RESULTS_DIR"),
        (["run", "--profile", "huge"], "tdbench run: error: argument --profile: invalid choice: 'huge'"),
    ],
)
def test_bad_input_exits_2_naming_the_valid_choices(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    if argv[0] == "run":
        argv = [*argv, "--out", str(tmp_path)]
    assert _status(argv) == 2
    assert message in capsys.readouterr().err
    assert not list(tmp_path.glob("records/*.json"))


def _status(argv: list[str]) -> int:
    """The exit status of ``tdbench ARGV``, whether argparse exits or a check returns it."""
    try:
        return cli.main(argv)
    except SystemExit as stop:
        return int(stop.code)


def test_the_usage_line_names_the_command_typed(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    for argv, usage in [(["run", "-h"], "usage: tdbench run "), (["-h"], "usage: tdbench [-h] COMMAND")]:
        with pytest.raises(SystemExit) as stop:
            cli.main(argv)
        assert stop.value.code == 0 and capsys.readouterr().out.startswith(usage)
    with pytest.raises(SystemExit):
        cli.run_all(["--help"])
    assert capsys.readouterr().out.startswith("usage: run_all.py ")
    # Called as a program, the name comes from argv[0], whatever its folder.
    monkeypatch.setattr(sys, "argv", ["/some/bin/tdbench", "run", "--seeds", "0", "--out", str(tmp_path)])
    assert cli.main() == 2
    assert capsys.readouterr().err.startswith("tdbench run: error: --seeds must be a positive integer")
    monkeypatch.setattr(sys, "argv", ["/some/bin/tdbench", "--seeds", "0", "--out", str(tmp_path)])
    assert cli.main() == 2  # no subcommand: run's arguments, under the name typed
    assert capsys.readouterr().err.startswith("tdbench: error: --seeds must be a positive integer")
    monkeypatch.setattr(sys, "argv", ["/some/bin/tdbench"])
    assert cli.main() == 2  # a bare `tdbench` shows what it can do and runs nothing
    assert "describe" in capsys.readouterr().out and not list(tmp_path.glob("records/*"))


@pytest.mark.slow
def test_run_all_py_and_the_tdbench_script_name_themselves() -> None:
    proc = subprocess.run([sys.executable, "run_all.py", "--help"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.startswith("usage: run_all.py ") and "--report-only" in proc.stdout
    script = Path(sys.executable).with_name("tdbench")
    if not script.exists():
        pytest.skip(f"no tdbench console script beside {sys.executable} (not installed with pip install -e .)")
    proc = subprocess.run([str(script), "run", "--methods", "nope"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.startswith("tdbench run: error: unknown method(s) 'nope'")


def test_run_all_takes_exactly_the_arguments_of_tdbench_run(tmp_path: Path) -> None:
    """The alias and the subcommand share one argument list: same flags, same defaults, same plan."""
    alias = cli.build_parser("run_all.py")
    (sub,) = [
        action.choices["run"]
        for action in cli.build_tdbench_parser()._actions
        if isinstance(action.choices, dict) and "run" in action.choices
    ]

    def flags(parser: object) -> list[tuple[tuple[str, ...], object]]:
        return [(tuple(a.option_strings), a.default) for a in parser._actions]  # type: ignore[attr-defined]

    assert flags(alias) == flags(sub) and "--report-only" in alias.format_help() and "--wide" in sub.format_help()
    argv = [*SMALL, *PLAN, "--out", str(tmp_path), "--option", "rjmcmc-baseline.num_chains=64"]
    from_alias, from_sub = alias.parse_args(argv), sub.parse_args(argv)
    assert vars(from_alias) == vars(from_sub)
    plans = [plan_grid(*cli.grid_from_args(args)).runs for args in (from_alias, from_sub)]
    assert [run.key.filename for run in plans[0]] == [run.key.filename for run in plans[1]] != []


@pytest.mark.slow
def test_a_run_sums_up_what_does_not_apply_and_ends_with_the_report_path(smoke: tuple[Path, str]) -> None:
    out, printed = smoke
    lines = printed.splitlines()
    before_runs = lines[: next(i for i, line in enumerate(lines) if line.startswith("Profile smoke: "))]
    assert before_runs == ["dagma: does not apply to 1 problem (sas)"]  # one line per method, no "note:" lines
    assert "note:" not in printed
    expected = f"Report: {out / 'index.html'}" if (out / "index.html").is_file() else f"Results: {out}/"
    assert lines[-1] == expected
    stored = json.loads((out / NOT_APPLICABLE_FILE).read_text())
    assert [(row["problem"], row["method"]) for row in stored] == [("sas", "dagma")]


def _copy_results(out: Path, tmp_path: Path) -> tuple[Path, dict[str, bytes]]:
    """A copy of the smoke folder without its report files, and those files' bytes as the run wrote them."""
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    written = {}
    for path in [*copy.glob("leaderboard_*.md"), *copy.glob("leaderboard_*.csv"), *copy.glob("dag_table_*.csv")]:
        written[path.name] = path.read_bytes()
        path.unlink()
    for path in copy.glob("*.png"):
        path.unlink()
    (copy / "index.html").unlink(missing_ok=True)
    assert {"leaderboard_sas.md", "leaderboard_linear-dag-d4.csv", "dag_table_linear-dag-d4.csv"} <= set(written)
    return copy, written


@pytest.mark.parametrize("form", ["tdbench report", "run_all.py --report-only"])
@pytest.mark.slow
def test_report_rewrites_the_run_time_files_from_records(
    form: str, smoke: tuple[Path, str], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """Leaderboards byte-identical to the run's, not-applicable rows included; the page's path printed last."""
    copy, written = _copy_results(smoke[0], tmp_path)
    argv = ["report", str(copy)] if form == "tdbench report" else ["--report-only", "--out", str(copy)]
    assert (cli.main(argv) if form == "tdbench report" else cli.run_all(argv)) == 0
    for name, data in written.items():
        assert (copy / name).read_bytes() == data, name
    assert "the models are not DAGs" in (copy / "leaderboard_sas.md").read_text()  # the stored not-applicable row
    assert (copy / "leaderboard_sas.png").is_file()
    last = capsys.readouterr().out.splitlines()[-1]
    assert last == (f"Report: {copy / 'index.html'}" if (copy / "index.html").is_file() else f"Results: {copy}/")


def test_report_refuses_a_folder_it_cannot_report(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert cli.main(["report", str(tmp_path / "missing")]) == 2
    assert "holds no records" in capsys.readouterr().err
    assert cli.run_all(["--report-only", "--out", str(tmp_path / "missing")]) == 2
    assert "run_all.py: error:" in capsys.readouterr().err
    records = tmp_path / "mixed" / "records"
    records.mkdir(parents=True)
    for profile in ("smoke", "quick"):
        record = {"problem": "sas", "method": "mf", "seed": 0, "status": "ok", "metrics": {}}
        record["budget"] = {"profile": profile}
        (records / f"sas__mf__seed0__{profile:0<10}.json").write_text(json.dumps(record))
    assert cli.main(["report", str(tmp_path / "mixed")]) == 2
    assert "holds records of the profiles quick, smoke" in capsys.readouterr().err


@pytest.mark.slow
def test_report_names_a_corrupt_not_applicable_file(
    smoke: tuple[Path, str], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    copy, _ = _copy_results(smoke[0], tmp_path)
    (copy / NOT_APPLICABLE_FILE).write_text('{"half": ')
    assert cli.main(["report", str(copy)]) == 2
    err = capsys.readouterr().err
    assert str(copy / NOT_APPLICABLE_FILE) in err and "delete it" in err


BLOCKER = textwrap.dedent(
    """
    import sys
    from importlib.abc import MetaPathFinder

    class Refuse(MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("problems", "methods"):
                raise ImportError(f"{name} must not be imported by the report")
            return None

    sys.meta_path.insert(0, Refuse())
    from suite.cli import main
    sys.exit(main(["report", sys.argv[1]]))
    """
)


@pytest.mark.slow
def test_report_runs_where_problems_and_methods_cannot_be_imported(smoke: tuple[Path, str], tmp_path: Path) -> None:
    copy, written = _copy_results(smoke[0], tmp_path)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-c", BLOCKER, str(copy)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    assert all((copy / name).read_bytes() == data for name, data in written.items())


def test_not_applicable_pairs_accumulate_across_runs_into_one_folder(tmp_path: Path) -> None:
    """Each run adds its pairs (a newer reason replaces an older one), so `report` shows those of every run."""
    save_not_applicable(tmp_path, [Skipped("sas", "dagma", "old"), Skipped("funnel", None, "gone")])
    save_not_applicable(tmp_path, [Skipped("sas", "dagma", "new"), Skipped("block-vs", "dagma", "no")])
    rows = json.loads((tmp_path / NOT_APPLICABLE_FILE).read_text())
    assert rows == [
        {"problem": "block-vs", "method": "dagma", "reason": "no"},
        {"problem": "sas", "method": "dagma", "reason": "new"},
    ]
    assert not list(tmp_path.glob(".*.tmp"))


@pytest.mark.slow
def test_list_subcommand_and_the_run_flag_print_the_same(capsys: pytest.CaptureFixture) -> None:
    assert cli.main(["list"]) == 0
    listed = capsys.readouterr().out
    assert "Problems (" in listed and "Methods:" in listed and "  vti-mcg " in listed
    assert max(map(len, listed.splitlines())) <= 120
    assert cli.run_all(["--list"]) == 0
    assert capsys.readouterr().out == listed


def _plan(argv: list[str], tmp_path: Path) -> list:
    return plan_grid(*cli.grid_from_argv([*argv, "--out", str(tmp_path)])).runs


def test_problems_with_several_data_sets_are_planned_once_per_data_seed(tmp_path: Path) -> None:
    """linear-dag-bge-er lists 3 data sets for quick: 3 instances x 1 seed; a pinned data_seed plans one."""
    plan = _plan(
        ["--problems", "linear-dag-bge-er", "--methods", "order-mcmc", "--profile", "quick", "--seeds", "1"], tmp_path
    )
    assert [run.problem_options for run in plan] == [{"data_seed": 0}, {"data_seed": 1}, {"data_seed": 2}]
    assert [run.problem.config()["data_seed"] for run in plan] == [0, 1, 2]
    assert len({run.key.filename for run in plan}) == 3  # distinct records
    pinned = _plan(
        [
            "--problems",
            "linear-dag-bge-er",
            "--methods",
            "order-mcmc",
            "--profile",
            "quick",
            "--seeds",
            "1",
            "--problem-option",
            "linear-dag-bge-er.data_seed=7",
        ],
        tmp_path,
    )
    assert [run.problem_options for run in pinned] == [{"data_seed": 7}]


def test_data_sets_plans_the_first_n_data_sets_and_refuses_a_non_positive_count(tmp_path: Path) -> None:
    """--data-sets 5 in quick (3 by default) plans data seeds 0..4; 0 is a usage error naming the flag."""
    argv = ["--problems", "linear-dag-bge-er", "--methods", "order-mcmc", "--profile", "quick", "--seeds", "1"]
    plan = _plan([*argv, "--data-sets", "5"], tmp_path)
    assert [run.problem_options for run in plan] == [{"data_seed": seed} for seed in range(5)]
    with pytest.raises(cli.UsageError, match="--data-sets must be a positive integer"):
        _plan([*argv, "--data-sets", "0"], tmp_path)


def test_methods_all_leaves_out_methods_planned_only_in_other_profiles(tmp_path: Path) -> None:
    """dibs and bges are planned by --methods all only in paper; named, they are planned in quick too."""
    assert method_class("dibs").planned_profiles == ("paper",) and method_class("bges").planned_profiles == ("paper",)
    argv = ["--problems", "linear-dag-bge-er", "--profile", "quick", "--seeds", "1", "--data-sets", "1"]
    everything = {run.method.name for run in _plan(argv, tmp_path)}
    assert "order-mcmc" in everything and not everything & {"dibs", "bges"}
    grid = plan_grid(*cli.grid_from_argv([*argv, "--methods", "bges", "--out", str(tmp_path)]))
    planned, skipped = grid.runs, grid.skipped
    assert [run.method.name for run in planned] == ["bges"] or [s.method for s in skipped] == ["bges"]


def test_python_m_tdbench_is_the_command(tmp_path: Path) -> None:
    """``python -m tdbench`` works where the environment's scripts folder is not on PATH (issue 54)."""
    listed = subprocess.run([sys.executable, "-m", "tdbench", "list"], capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0 and "Problems" in listed.stdout and "rjmcmc-baseline" in listed.stdout
    refused = subprocess.run(
        [sys.executable, "-m", "tdbench", "run", "--profile", "bogus"], capture_output=True, text=True, timeout=120
    )
    assert refused.returncode == 2 and "python -m tdbench run: error" in refused.stderr
