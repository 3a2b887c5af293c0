"""Method families' public faces: each family's ``__init__`` says what it offers (``__all__``), families share code
only through ``methods.common`` and ``methods.flows`` (import-linter, ``tests/suite/test_architecture.py``), and an
import inside a function of ``methods/`` has its reason written down here."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

import methods
from tests.import_scan import function_level_imports as scan
from tests.import_scan import is_allowed

METHODS = Path(methods.__file__).parent
#: Shared building blocks, imported module by module; every other folder of methods/ is a family.
SHARED = {"common", "flows"}
FAMILIES = sorted(p.name for p in METHODS.iterdir() if (p / "__init__.py").is_file() and p.name not in SHARED)

#: Modules a method may import inside a function, with the reason; anything else is imported at the top.
ALLOWED = {
    "dagma": "a missing or broken dagma install makes `dagma` not applicable with the install line, not `import "
    "methods` fail",
    "causallearn": "optional: the bges extra (pip install -e '.[bges]')",
    "dibs": "optional: the dibs extra (pip install --no-deps dibs-lib==1.3.3)",
    "jax": "DiBS's JAX (about 1 s to import): only when a DiBS run starts",
}


def function_level_imports() -> list[tuple[str, str, str]]:
    """(module file, function, imported module) of every import inside a function of the package."""
    return scan(METHODS)


def _allowed(name: str) -> bool:
    return is_allowed(name, ALLOWED)


def test_the_families_are_the_method_folders():
    assert {"rjmcmc", "trj", "vti", "mif"} <= set(FAMILIES)
    assert not SHARED & set(FAMILIES)


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_names_its_public_face(family: str):
    package = importlib.import_module(f"methods.{family}")
    public = getattr(package, "__all__", None)
    assert public, f"methods/{family}/__init__.py has no __all__"
    missing = [name for name in public if not hasattr(package, name)]
    assert missing == [], f"methods.{family}.__all__ names what it does not define: {missing}"


def test_function_level_imports_have_a_reason():
    found = function_level_imports()
    assert found, "the scan found no imports inside functions: it is not looking at methods/"
    unexplained = [f"{where}:{function} imports {name}" for where, function, name in found if not _allowed(name)]
    assert not unexplained, "imports inside functions without a reason in ALLOWED:\n" + "\n".join(unexplained)


def test_every_reason_is_still_needed():
    names = {name for _, _, name in function_level_imports()}
    stale = [key for key in ALLOWED if not any(n == key or n.startswith(key + ".") for n in names)]
    assert stale == []


def test_no_method_imports_its_own_package_inside_a_function():
    """Such imports dodged cycles or start-up costs that are not there: the family's modules import at the top."""
    inner = [(w, f, n) for w, f, n in function_level_imports() if n.split(".")[0] in {"methods", "suite", "problems"}]
    assert inner == []
