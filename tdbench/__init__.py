"""tdbench's Python API for results: ``tdbench.results.load(DIR)``, ``tdbench.results.draws(run)``.

The benchmark itself (problems, methods, the runner) lives in the ``suite``, ``problems`` and ``methods``
packages; reading results needs none of them. Importing ``tdbench`` checks that ``import suite`` finds the
``suite`` installed beside it, not another package of that generic name (docs/plugins.md, "Installed names";
``suite.origin`` checks ``methods`` and ``problems``, but cannot run when ``suite`` itself is another one).
"""

from __future__ import annotations

import importlib.util
from importlib import metadata
from pathlib import Path


def _provider(folder: Path, name: str) -> str:
    """Which distribution installed the top-level package ``name`` into ``folder``, in words."""
    for dist in metadata.distributions(path=[str(folder)]):
        names = (dist.read_text("top_level.txt") or "").split()
        names += [line.split("/")[0] for line in (dist.read_text("RECORD") or "").splitlines()]
        if name in names:
            return f"distribution {dist.metadata['Name']} {dist.version}"
    return "no installed distribution: a folder on sys.path (the current directory or PYTHONPATH?)"


def _check_suite() -> None:
    """ImportError naming the other package when ``import suite`` would not find tdbench's own ``suite``."""
    expected = Path(__file__).resolve().parent.parent / "suite"
    try:
        spec = importlib.util.find_spec("suite")
    except (ImportError, ValueError):
        spec = None
    origin = None if spec is None else spec.origin or next(iter(spec.submodule_search_locations or []), None)
    found = None if origin in (None, "namespace") else Path(origin).resolve()
    if found is None or not found.is_relative_to(expected):
        folder = None if found is None else (found.parent.parent if found.name == "__init__.py" else found.parent)
        where = "nothing" if folder is None else f"{found} ({_provider(folder, 'suite')})"
        raise ImportError(
            f"tdbench's package 'suite' is shadowed: 'import suite' finds {where}, not {expected}; rename or remove "
            "that package, or run from another folder (docs/plugins.md, 'Installed names')"
        )


_check_suite()
