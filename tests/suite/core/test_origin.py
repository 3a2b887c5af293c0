"""tdbench's generically named packages (``suite``, ``methods``, ``problems``) never give way silently to another
package of the same name, and the distribution behind a module is found (issue 35, installed names)."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from suite import origin

ROOT = Path(__file__).resolve().parents[3]


def _python(code: str, path: list[Path], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, path)), "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False
    )


def _package(folder: Path, name: str) -> Path:
    (folder / name).mkdir(parents=True)
    init = folder / name / "__init__.py"
    init.write_text("raise SystemExit('the foreign package ran')\n")
    return init


@pytest.mark.slow
def test_a_foreign_methods_package_first_on_the_path_is_refused_by_name(tmp_path: Path) -> None:
    init = _package(tmp_path / "elsewhere", "methods")
    done = _python("from suite.core.registry import load_all; load_all()", [tmp_path / "elsewhere", ROOT], tmp_path)
    assert done.returncode != 0 and "the foreign package ran" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("suite.origin.ForeignPackageError: tdbench's package 'methods' is shadowed: ")
    assert f"'import methods' finds {init.resolve()} (no installed distribution" in last
    assert f"not {ROOT / 'methods'}" in last


@pytest.mark.slow
def test_a_foreign_methods_package_in_the_current_folder_is_refused(tmp_path: Path) -> None:
    """``python -c`` and notebooks put the current folder first: a project's own ``methods/`` folder there."""
    _package(tmp_path, "methods")
    done = _python("from suite.core.registry import make_method; make_method('trj')", [ROOT], tmp_path)
    assert done.returncode != 0 and "tdbench's package 'methods' is shadowed" in done.stderr


def test_a_foreign_suite_package_is_refused_by_tdbench(tmp_path: Path) -> None:
    init = _package(tmp_path / "elsewhere", "suite")
    done = _python("import tdbench.results", [tmp_path / "elsewhere", ROOT], tmp_path)
    assert done.returncode != 0 and "the foreign package ran" not in done.stderr
    assert f"ImportError: tdbench's package 'suite' is shadowed: 'import suite' finds {init.resolve()}" in done.stderr


def test_the_checkout_passes_its_own_check() -> None:
    origin.check_own_packages()
    importlib.import_module("methods.trj.method")
    assert origin.is_own_module("methods.trj.method") and not origin.is_own_module("torch")


def _fake_distribution(folder: Path, name: str, version: str, top_level: str) -> None:
    info = folder / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "top_level.txt").write_text(top_level + "\n")


def test_another_distribution_installing_methods_beside_tdbench_is_refused(tmp_path: Path) -> None:
    """pip would merge its ``methods/`` into tdbench's, file over file: refused, naming both."""
    _fake_distribution(tmp_path, "tdbench", "0.1.0", "methods\nproblems\nsuite\ntdbench")
    origin.check_own_packages(names=(), root=tmp_path)  # tdbench alone: fine
    _fake_distribution(tmp_path, "research-methods", "2.0", "methods")
    origin._providers.cache_clear()
    with pytest.raises(origin.ForeignPackageError, match=r"distribution research-methods 2\.0 also installs a top-"):
        origin.check_own_packages(names=(), root=tmp_path)


def test_distributions_are_found_from_top_level_names(tmp_path: Path) -> None:
    _fake_distribution(tmp_path, "Some_Plugin", "3.1", "some_plugin")
    assert origin.distributions_providing("some_plugin", [str(tmp_path)]) == [("Some_Plugin", "3.1")]
    assert origin.distributions_providing("nflows") == [("nflows", metadata.version("nflows"))]
    assert origin.module_origin("nflows.flows") == {"distribution": "nflows", "version": metadata.version("nflows")}
    assert origin.module_origin("__main__") is None


def test_the_version_of_a_checkout_that_is_not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(name: str) -> None:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(origin.metadata, "distribution", missing)
    origin.tdbench_version.cache_clear()
    try:
        assert origin.tdbench_version() == "0.1.0 (checkout)"
    finally:
        origin.tdbench_version.cache_clear()
