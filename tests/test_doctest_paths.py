"""The modules of ``suite/`` with doctests are exactly those ``testpaths`` names, so that every doctest runs."""

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_module_with_a_doctest_is_collected() -> None:
    paths = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["testpaths"]
    with_doctests = {
        str(path.relative_to(ROOT))
        for path in sorted((ROOT / "suite").rglob("*.py"))
        if any(line.lstrip().startswith(">>> ") for line in path.read_text().splitlines())
    }
    assert with_doctests, "no doctest found: the search is broken"
    assert with_doctests == {path for path in paths if path.startswith("suite/")}
