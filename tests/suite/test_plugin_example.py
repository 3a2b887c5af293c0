"""The example plug-in of docs/plugins.md, installed as a user would, passes ``tdbench check``; misbehaving plug-ins
fail it, and clashing or broken ones are said once and named when asked for (issue 35)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "docs" / "plugin-example"

#: Plug-ins that misbehave: q(m) summing to 0.5, a NaN log density, reassigning the problem's log density, and
#: running three times the time budget it is given.
BAD_PLUGIN = '''
import dataclasses

from suite import ModelProbs
from tdbench_example.method import ExampleImportanceSampler


class HalfMass(ExampleImportanceSampler):
    """The example sampler, returning a q(m) that sums to 0.5."""

    def run(self, problem, context):
        result = super().run(problem, context)
        probs = result.model_probs
        return dataclasses.replace(result, model_probs=ModelProbs(probs.index, probs.prob / 2))


class NaNDensity(ExampleImportanceSampler):
    """The example sampler, whose log density is NaN everywhere."""

    def run(self, problem, context):
        result = super().run(problem, context)
        return dataclasses.replace(result, log_density=lambda m, theta: theta.sum(-1) * float("nan"))


class ChangesProblem(ExampleImportanceSampler):
    """The example sampler, reassigning the problem's log density before it runs."""

    def run(self, problem, context):
        problem.log_joint = type(problem).log_joint.__get__(problem)
        return super().run(problem, context)


class OverBudget(ExampleImportanceSampler):
    """The example sampler, running three times the time budget it is given."""

    def run(self, problem, context):
        budget = context.time_budget_s
        if budget is not None:
            context.time_budget_s = 3 * budget
        try:
            return super().run(problem, context)
        finally:
            context.time_budget_s = budget
'''

BAD_PYPROJECT = """
[build-system]
requires = ["setuptools"]
build-backend = "setuptools.build_meta"

[project]
name = "bad-example"
version = "0.1"

[project.entry-points."tdbench.methods"]
half-mass = "bad_example:HalfMass"
over-budget = "bad_example:OverBudget"
nan-density = "bad_example:NaNDensity"
changes-problem = "bad_example:ChangesProblem"
"""

CLASHING_PYPROJECT = """
[build-system]
requires = ["setuptools"]
build-backend = "setuptools.build_meta"

[project]
name = "clashing-example"
version = "0.2"

[project.entry-points."tdbench.methods"]
trj = "clashing_example:Anything"
broken-method = "clashing_example.missing:Nothing"

[project.entry-points."tdbench.problems"]
example-gaussians = "clashing_example:Anything"
"""


def _source(folder: Path, package: str, code: str, pyproject: str) -> Path:
    (folder / package).mkdir(parents=True)
    (folder / package / "__init__.py").write_text(textwrap.dedent(code))
    (folder / "pyproject.toml").write_text(pyproject)
    return folder


def _install(sources: list[Path], site: Path) -> Path:
    command = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index"]
    subprocess.run([*command, "--target", str(site), *map(str, sources)], check=True, timeout=600, capture_output=True)
    return site


@pytest.fixture(scope="module")
def sites(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The example (installed from a copy, so the checkout gets no build/), and the bad and clashing plug-ins."""
    tmp = tmp_path_factory.mktemp("plugins")
    example = shutil.copytree(EXAMPLE, tmp / "example-source", ignore=shutil.ignore_patterns("__pycache__"))
    bad = _source(tmp / "bad-source", "bad_example", BAD_PLUGIN, BAD_PYPROJECT)
    clashing = _source(tmp / "clashing-source", "clashing_example", "Anything = None\n", CLASHING_PYPROJECT)
    return {
        "example": _install([example], tmp / "example-site"),
        "bad": _install([bad, clashing], tmp / "bad-site"),
        "tmp": tmp,
    }


def _tdbench(arguments: list[str], path: list[Path], cwd: Path) -> subprocess.CompletedProcess:
    """``tdbench ARGUMENTS`` in a fresh interpreter whose path holds ``path`` and then the checkout."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, [*path, ROOT])), "OMP_NUM_THREADS": "1"}
    code = "import sys; from suite.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run(
        [sys.executable, "-c", code, *arguments], cwd=cwd, env=env, capture_output=True, text=True, timeout=900
    )


def _said(done: subprocess.CompletedProcess) -> str:
    return f"exit {done.returncode}\nstdout:\n{done.stdout[-4000:]}\nstderr:\n{done.stderr[-4000:]}"


#: ``tdbench check`` once per argument list, in one fresh interpreter: each command's exit status and output.
CHECKS = """
import contextlib, io, json, sys
from suite.cli.check import main
said = []
for arguments in json.loads(sys.argv[1]):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(arguments)
    said.append([code, out.getvalue(), err.getvalue()])
print(json.dumps(said))
"""


def _checks(commands: list[list[str]], path: list[Path], cwd: Path) -> list[subprocess.CompletedProcess]:
    """``tdbench check`` with each argument list, all in one fresh interpreter whose path holds ``path``.

    The plug-ins load as in a user's process (entry points of the installed distributions); one interpreter for
    several checks saves its start-up (torch and the suite, seconds each), which the checks do not depend on.
    """
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, [*path, ROOT])), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-c", CHECKS, json.dumps(commands)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, _said(done)
    said = json.loads(done.stdout.splitlines()[-1])
    return [
        subprocess.CompletedProcess(["check", *c], code, out, err)
        for c, (code, out, err) in zip(commands, said, strict=True)
    ]


#: The misbehaving methods, each checked on sas.
BAD_METHODS = ("half-mass", "nan-density", "changes-problem", "over-budget")


@pytest.fixture(scope="module")
def bad_checks(sites: dict[str, Path]) -> dict[str, subprocess.CompletedProcess]:
    """``tdbench check NAME --problems sas`` of each misbehaving method, by name."""
    commands = [[name, "--problems", "sas"] for name in BAD_METHODS]
    return dict(zip(BAD_METHODS, _checks(commands, [sites["example"], sites["bad"]], sites["tmp"]), strict=True))


@pytest.mark.slow
def test_the_example_plugin_passes_tdbench_check(sites: dict[str, Path]) -> None:
    assert (sites["example"] / "tdbench_example-0.1.0.dist-info" / "entry_points.txt").is_file()
    named = (("example-is", "method"), ("example-gaussians", "problem"))
    checked = _checks([[name] for name, _ in named], [sites["example"]], sites["tmp"])
    for (name, kind), done in zip(named, checked, strict=True):
        assert done.returncode == 0, _said(done)
        lines = done.stdout.splitlines()
        assert lines[0] == f"{kind} {name} (distribution tdbench-example 0.1.0)"
        assert not [line for line in lines if line.startswith("FAIL")] and "0 failed" in lines[-1]
        assert "tdbench: " not in done.stderr  # no plug-in failed to load
        if kind == "method":
            assert any(line.startswith("PASS  keeps a 2 s time budget (on sas)") for line in lines)
            assert sum(line.startswith("PASS  valid result on ") for line in lines) >= 5  # the smoke problems


@pytest.mark.slow
def test_a_method_whose_q_sums_to_one_half_fails_tdbench_check(bad_checks: dict) -> None:
    done = bad_checks["half-mass"]
    assert done.returncode == 1, _said(done)
    assert "FAIL  valid result on sas: q(m) sums to 0.5, not 1" in done.stdout
    assert "FAIL  traces its running estimate (on sas): the last snapshot is not the result's q(m)" in done.stdout


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "fault"),
    [
        ("nan-density", "FAIL  valid result on sas: log q is not finite at every returned draw"),
        ("changes-problem", "FAIL  leaves its problem unchanged (on sas): the run changed the problem it was given: "),
    ],
)
def test_a_nan_density_or_a_changed_problem_fails_tdbench_check(bad_checks: dict, name: str, fault: str) -> None:
    done = bad_checks[name]
    assert done.returncode == 1, _said(done)
    assert fault in done.stdout, _said(done)


@pytest.mark.slow
def test_a_method_that_runs_three_times_its_budget_fails_tdbench_check(bad_checks: dict) -> None:
    done = bad_checks["over-budget"]
    assert done.returncode == 1, _said(done)
    failed = [line for line in done.stdout.splitlines() if line.startswith("FAIL")]
    assert len(failed) == 1 and failed[0].startswith("FAIL  keeps a 2 s time budget (on sas): "), _said(done)
    assert float(failed[0].split(": ")[1].split(" s of compute")[0]) >= 5.5  # three times the budget, at least


@pytest.mark.slow
def test_clashing_and_broken_plugins_are_said_once_and_named_when_asked_for(sites: dict[str, Path]) -> None:
    path = [sites["example"], sites["bad"]]
    listed = _tdbench(["list"], path, sites["tmp"])
    assert listed.returncode == 0, _said(listed)
    said = sorted(line for line in listed.stderr.splitlines() if line.startswith("tdbench: "))
    assert len(said) == 4, _said(listed)
    assert said[0].startswith(
        "tdbench: method 'broken-method' from distribution clashing-example 0.2 failed to load: ModuleNotFoundError"
    )
    assert said[1].startswith("tdbench: method 'trj' from distribution clashing-example 0.2 refused: the name is")
    assert said[2] == (
        "tdbench: problem 'example-gaussians' from distribution clashing-example 0.2 refused: distribution "
        "tdbench-example 0.1.0 also has a problem entry point named 'example-gaussians'; neither is used until one "
        "is uninstalled or renames its entry point"
    )
    assert said[3].startswith("tdbench: problem 'example-gaussians' from distribution tdbench-example 0.1.0 refused")
    assert "Plug-ins not registered:" in listed.stdout and "  example-is  " in listed.stdout

    asked = _tdbench(["run", "--methods", "broken-method", "--profile", "smoke", "--dry-run"], path, sites["tmp"])
    assert asked.returncode == 2
    assert "tdbench run: error: method 'broken-method' from distribution clashing-example 0.2 failed to load: " in (
        asked.stderr
    )
    checked = _tdbench(["check", "example-gaussians"], path, sites["tmp"])
    assert checked.returncode == 2 and "tdbench check: error: problem 'example-gaussians' from distribution" in (
        checked.stderr
    )

    # Worker processes load the plug-ins again but leave saying so to the parent: each line once per command.
    out = sites["tmp"] / "results"
    arguments = ["run", "--problems", "sas", "--methods", "example-is", "--profile", "smoke", "--seeds", "2"]
    ran = _tdbench([*arguments, "--jobs", "2", "--no-progress", "--out", str(out)], path, sites["tmp"])
    assert ran.returncode == 0, _said(ran)
    assert sorted(line for line in ran.stderr.splitlines() if line.startswith("tdbench: ")) == said
