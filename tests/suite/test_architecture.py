"""The suite's layering (docs/architecture.md): imports inside functions only where a reason is written down here."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import suite
from tests.import_scan import function_level_imports as scan
from tests.import_scan import is_allowed

SUITE = Path(suite.__file__).parent
ROOT = SUITE.parent

#: Modules a suite function may import where it is used, with the reason. Anything else is imported at the top of
#: its module, so that the import graph (checked by ``lint-imports`` in CI) is the real one.
ALLOWED = {
    "jax": "optional: the reference engine's JAX backend (tdbench[reference]); never imported by a plain run",
    "numpyro": "optional: the reference engine's NUTS (tdbench[reference])",
    "blackjax": "optional: the reference engine's SMC (tdbench[reference])",
    "dask": "optional: the Dask executor (tdbench[dask])",
    "distributed": "optional: the Dask executor (tdbench[dask])",
    "dask_jobqueue": "optional: Slurm clusters (tdbench[slurm])",
    "yaml": "optional: cluster configuration files come with dask",
    "resource": "POSIX only: raising the open-file limit is skipped where it is missing",
    "scipy.stats": "slow to import (0.8 s): only a verdict's t quantile needs it, and most commands never draw one",
    "torch._dynamo": "slow to import (seconds); only the warm-up before a timed run needs it",
    "suite.studies.bbe_study": "TRJ's flows load only when the study runs: `tdbench report` imports no method code",
}


def function_level_imports() -> list[tuple[str, str, str]]:
    """(module file, function, imported module) of every import inside a function of the package."""
    return scan(SUITE)


def _allowed(name: str) -> bool:
    return is_allowed(name, ALLOWED)


def test_function_level_imports_have_a_reason():
    found = function_level_imports()
    assert found, "the scan found no imports at all: it is not looking at the suite"
    unexplained = [f"{where}:{function} imports {name}" for where, function, name in found if not _allowed(name)]
    assert not unexplained, "imports inside functions without a reason in ALLOWED:\n" + "\n".join(unexplained)


def test_no_suite_module_imports_the_suite_inside_a_function_to_dodge_a_cycle():
    """Cycles were dodged this way; the layers make them impossible. The one inner import keeps method code out."""
    inner = [(w, f, n) for w, f, n in function_level_imports() if n.split(".")[0] == "suite"]
    assert inner == [("suite/studies/bbe.py", "run", "suite.studies.bbe_study")]


def test_every_reason_is_still_needed():
    names = {name for _, _, name in function_level_imports()}
    stale = [key for key in ALLOWED if not any(n == key or n.startswith(key + ".") for n in names)]
    assert stale == []


def test_the_import_contracts_hold():
    """``lint-imports`` with pyproject's contracts: the layers' direction, the report's inputs, no plug-in crosstalk."""
    command = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")
    if command is None:
        pytest.skip("import-linter is not installed (it comes with the test extra: pip install -e '.[test]')")
    done = subprocess.run([command], cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout
