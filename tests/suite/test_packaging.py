"""Packaging: the shipped references are package data, and a wheel installed elsewhere scores as the checkout does."""

from __future__ import annotations

import fnmatch
import json
import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
import torch

from suite.cli import grid_from_argv
from suite.core.registry import make_problem
from suite.data import locate
from suite.run import plan_grid
from suite.store import references as store

ROOT = Path(__file__).resolve().parents[2]
#: Everything a wheel is built from (the packages, and the files pyproject names).
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "suite", "methods", "problems", "tdbench")
SMOKE = ["--profile", "smoke", "--problems", "robust-vs,block-vs", "--methods", "rjmcmc-baseline", "--seeds", "1"]


def _shipped_files() -> list[str]:
    """Every shipped reference file, relative to the ``suite.reference`` package folder."""
    package = store.SHIPPED_DIR.parent
    return sorted(str(p.relative_to(package)) for p in store.SHIPPED_DIR.rglob("*") if p.is_file())


def test_shipped_references_live_in_the_package_and_match_its_package_data_globs() -> None:
    assert store.SHIPPED_DIR == ROOT / "suite" / "reference" / "shipped"
    assert store.search_path()[-1] == store.SHIPPED_DIR
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    globs = setuptools["package-data"]["suite.reference"]
    files = _shipped_files()
    assert sum(name.endswith(".npz") for name in files) >= 10
    unmatched = [name for name in files if not any(fnmatch.fnmatch(name, glob) for glob in globs)]
    assert not unmatched, f"shipped files no package-data glob covers: {unmatched}"


def test_the_search_path_puts_the_environment_folders_before_the_shipped_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(store.ENV_VAR, os.pathsep.join([str(tmp_path / "a"), str(tmp_path / "b")]))
    assert store.search_path() == [tmp_path / "a", tmp_path / "b", store.SHIPPED_DIR]


def test_a_missing_required_reference_makes_the_problem_unavailable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """robust-vs without its reference is planned as unavailable, with the reason; exact problems are unaffected."""
    monkeypatch.delenv(store.ENV_VAR, raising=False)
    monkeypatch.setattr(store, "SHIPPED_DIR", tmp_path / "empty")
    problem = make_problem("robust-vs")
    assert store.needs_stored_reference(problem) and store.find(problem) is None
    reason = store.reference_problem(problem)
    assert reason == store.missing_message(problem)
    assert "python -m suite.reference robust-vs" in reason and store.ENV_VAR in reason
    assert str(tmp_path / "empty") in reason and store.reference_key(problem) in reason
    assert store.reference_problem(make_problem("sas")) is None  # exact ground truth
    assert store.reference_problem(make_problem("gmm-2d")) is None  # declared impossible: runs, scored without one

    grid = plan_grid(*grid_from_argv(["--problems", "robust-vs,sas", "--methods", "rjmcmc-baseline", *SMOKE[:2]]))
    plan, notes = grid.runs, grid.skipped
    assert {run.key.problem for run in plan} == {"sas"}
    assert [(note.problem, note.method, note.reason) for note in notes] == [("robust-vs", None, reason)]


def test_a_present_reference_keeps_the_problem_available(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(store.ENV_VAR, raising=False)
    problem = make_problem("robust-vs")
    assert store.find(problem).parent.parent == store.SHIPPED_DIR and store.reference_problem(problem) is None


# ------------------------------------------------------------------ the wheel, installed elsewhere
def _build_wheel(tmp_path: Path) -> Path:
    """Build the wheel from a copy of the sources (so the checkout gets no build/ or egg-info); its path."""
    source = tmp_path / "source"
    for name in SOURCES:
        origin = ROOT / name
        if origin.is_dir():
            shutil.copytree(origin, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        elif origin.exists():
            source.mkdir(exist_ok=True)
            shutil.copy2(origin, source / name)
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index"]
    subprocess.run([*command, "-q", "-w", str(tmp_path / "wheel"), str(source)], check=True, timeout=600)
    (wheel,) = (tmp_path / "wheel").glob("tdbench-*.whl")
    return wheel


def _dependencies_without_tdbench(tmp_path: Path) -> Path:
    """A folder of links to this environment's installed packages, leaving out tdbench itself and every .pth file.

    Leaving out the .pth files keeps the editable install's import finder out, and leaving out tdbench's
    dist-info keeps pip from seeing (or touching) the editable install.
    """
    site = Path(torch.__file__).resolve().parent.parent
    folder = tmp_path / "dependencies"
    folder.mkdir()
    for entry in site.iterdir():
        name = entry.name
        if name.endswith(".pth") or name.startswith(("__editable__", "tdbench", "_tdbench")) or name == "__pycache__":
            continue
        (folder / name).symlink_to(entry)
    return folder


def _venv(tmp_path: Path, wheel: Path) -> Path:
    """A fresh venv seeing this environment's dependencies (not tdbench) with the wheel installed; its python."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    (site / "dependencies.pth").write_text(f"{_dependencies_without_tdbench(tmp_path)}\n")
    install = [str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)]
    subprocess.run(install, check=True, timeout=600, env=_clean_env(), cwd=tmp_path)
    return python


def _clean_env() -> dict[str, str]:
    """This process's environment without anything that points Python at the checkout or other references."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", store.ENV_VAR, locate.ENV_VAR)}
    env["OMP_NUM_THREADS"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    # Data files are never shipped: the installed package finds them through the documented search path.
    folder = _data_folder()
    if folder is not None:
        env[locate.ENV_VAR] = str(folder)
    return env


def _data_folder() -> Path | None:
    """The folder the checkout reads block-vs's data from, or None where it has none."""
    try:
        return locate.locate("block_vs.csv").parent
    except locate.DataUnavailable:
        return None


def _records(out: Path) -> dict[tuple[str, str, int], dict]:
    """The run records of a results folder by (problem, method, seed)."""
    records = [json.loads(p.read_text()) for p in sorted((out / "records").glob("*.json"))]
    return {(r["problem"], r["method"], r["seed"]): r for r in records}


def _scores(record: dict) -> dict:
    """What must not depend on where the code is installed: the reference used and every metric but time."""
    metrics = {name: value for name, value in record["metrics"].items() if name != "walltime_s"}
    return {
        "status": record["status"],
        "reference": record["reference"],
        "metrics": metrics,
        "draws_sha256": (record.get("draws") or {}).get("sha256"),
    }


@pytest.mark.slow
def test_an_installed_wheel_scores_against_the_shipped_references_as_the_checkout_does(tmp_path: Path) -> None:
    wheel = _build_wheel(tmp_path)
    with zipfile.ZipFile(wheel) as archive:
        packed = set(archive.namelist())
    missing = [name for name in _shipped_files() if f"suite/reference/{name}" not in packed]
    assert not missing, f"the wheel lacks shipped references: {missing}"

    python = _venv(tmp_path, wheel)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    probe = "import sys, suite; from suite.store import references as store; "
    probe += "print(suite.__file__); print(store.SHIPPED_DIR); "
    probe += "print(any('editable' in type(f).__name__.lower() or 'editable' in repr(f) for f in sys.meta_path))"
    shown = subprocess.run(
        [str(python), "-c", probe], check=True, capture_output=True, text=True, env=_clean_env(), cwd=elsewhere
    ).stdout.split("\n")
    installed = python.parent.parent.resolve()
    assert Path(shown[0]).resolve().is_relative_to(installed), f"suite imported from {shown[0]}, not the wheel"
    assert Path(shown[1]).resolve().is_relative_to(installed) and shown[2] == "False"

    tdbench = python.parent / "tdbench"
    run = subprocess.run(
        [str(tdbench), "run", *SMOKE, "--no-progress", "--out", str(tmp_path / "wheel-out")],
        capture_output=True,
        text=True,
        env=_clean_env(),
        cwd=elsewhere,
        timeout=900,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    checkout = subprocess.run(
        [sys.executable, str(ROOT / "run_all.py"), *SMOKE, "--no-progress", "--out", str(tmp_path / "checkout-out")],
        capture_output=True,
        text=True,
        env=_clean_env(),
        cwd=ROOT,
        timeout=900,
    )
    assert checkout.returncode == 0, checkout.stdout + checkout.stderr

    from_wheel, from_checkout = _records(tmp_path / "wheel-out"), _records(tmp_path / "checkout-out")
    expected = {("robust-vs", "rjmcmc-baseline", 0)}
    if _data_folder() is not None:
        expected.add(("block-vs", "rjmcmc-baseline", 0))
    assert set(from_checkout) == expected and set(from_wheel) == expected
    for key in sorted(expected):
        wheel_scores, checkout_scores = _scores(from_wheel[key]), _scores(from_checkout[key])
        assert wheel_scores["reference"]["kind"] == "estimated" and wheel_scores["status"] == "ok"
        assert {"model_prob_tv", "cross_entropy"} <= set(wheel_scores["metrics"]), key
        assert wheel_scores == checkout_scores, key
