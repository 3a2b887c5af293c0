"""Where code comes from: the distribution behind a module, and a check that tdbench's own packages are its own.

tdbench installs four top-level packages side by side: ``suite``, ``methods``, ``problems`` and ``tdbench``. The
first three have generic names that another distribution, or a folder on ``sys.path`` (the current directory,
``PYTHONPATH``), may also use. :func:`check_own_packages` turns both collisions into an ImportError naming the
other package's path and distribution, where they used to replace tdbench's built-ins silently
(docs/plugins.md, "Installed names").
"""

from __future__ import annotations

import functools
import importlib.util
import json
import re
import sys
import tomllib
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path

TDBENCH = "tdbench"
#: The top-level packages the tdbench distribution installs.
OWN_PACKAGES = ("suite", "methods", "problems", "tdbench")
#: The folder holding this copy's own packages: site-packages for an installed wheel, else the checkout.
ROOT = Path(__file__).resolve().parents[1]
#: A RECORD line's top-level package (``name/...``) or module (``name.py,...``).
_RECORD_TOP = re.compile(r"^([A-Za-z_]\w*)(?:/|\.py,)", re.MULTILINE)


class ForeignPackageError(ImportError):
    """A package name tdbench installs resolves to another package, or another distribution installs it too."""


def normalise(name: str) -> str:
    """A distribution name as packaging compares them (PEP 503): lower case, runs of ``-_.`` as one ``-``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def top_level_names(dist: metadata.Distribution) -> set[str]:
    """The top-level import names a distribution installs: its ``top_level.txt``, else its RECORD's first parts."""
    text = dist.read_text("top_level.txt")
    if text is not None:
        return set(text.split())
    return set(_RECORD_TOP.findall(dist.read_text("RECORD") or ""))


@functools.cache
def _providers(paths: tuple[str, ...] | None) -> dict[str, list[metadata.Distribution]]:
    """Top-level name -> the distributions installed on ``paths`` (None: ``sys.path``) that provide it."""
    found: dict[str, list[metadata.Distribution]] = {}
    dists = metadata.distributions() if paths is None else metadata.distributions(path=list(paths))
    for dist in dists:
        for name in top_level_names(dist):
            found.setdefault(name, []).append(dist)
    return found


def distributions_providing(top_level: str, paths: Iterable[str] | None = None) -> list[tuple[str, str]]:
    """(name, version) of each distribution on ``paths`` (None: ``sys.path``) that installs ``top_level``.

    Reads each distribution's ``top_level.txt`` (or RECORD): about 40 ms for a hundred distributions, where
    ``importlib.metadata.packages_distributions()`` parses every RECORD into paths (about 0.3 s). Cached.
    """
    dists = _providers(None if paths is None else tuple(paths)).get(top_level, [])
    unique: dict[str, tuple[str, str]] = {}
    for dist in dists:  # the same distribution can be seen twice (an egg-info in the current folder)
        unique.setdefault(normalise(dist.metadata["Name"]), (dist.metadata["Name"], dist.version))
    return list(unique.values())


def _is_this_copy(dist: metadata.Distribution) -> bool:
    """Whether the installed ``dist`` is this copy of the code: a wheel here, or an editable install of ``ROOT``."""
    if Path(str(dist.locate_file("suite/__init__.py"))).resolve() == ROOT / "suite" / "__init__.py":
        return True
    try:
        url = json.loads(dist.read_text("direct_url.json") or "{}")
    except json.JSONDecodeError:
        return False
    return bool(url.get("dir_info", {}).get("editable")) and url.get("url", "").rstrip("/") == ROOT.as_uri()


@functools.cache
def tdbench_version() -> str:
    """This copy's version: the installed distribution's, else the checkout's (pyproject.toml) + " (checkout)"."""
    try:
        dist: metadata.Distribution | None = metadata.distribution(TDBENCH)
    except metadata.PackageNotFoundError:
        dist = None
    if dist is not None and _is_this_copy(dist):
        return dist.version
    try:
        version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        version = "unknown"
    return f"{version} (checkout)"


def _module_file(module_name: str) -> Path | None:
    """Where an imported module's code lives (None when it has no file)."""
    module = sys.modules.get(module_name)
    path = getattr(module, "__file__", None)
    return None if path is None else Path(path).resolve()


def is_own_module(module_name: str) -> bool:
    """Whether ``module_name`` is tdbench's own code: one of its packages, in this copy's folder."""
    top = module_name.partition(".")[0]
    path = _module_file(module_name)
    return top in OWN_PACKAGES and path is not None and path.is_relative_to(ROOT / top)


def module_origin(module_name: str) -> dict[str, str] | None:
    """``{"distribution", "version"}`` of the distribution that provides ``module_name``, or None when none does."""
    if is_own_module(module_name):
        return {"distribution": TDBENCH, "version": tdbench_version()}
    top = module_name.partition(".")[0]
    providers = distributions_providing(top)
    if not providers:
        return None
    name, version = providers[0]
    return {"distribution": name, "version": version}


def _found_at(name: str) -> Path | None:
    """Where ``import name`` finds its code (without running it), or None where nothing is found."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if spec.origin not in (None, "namespace"):
        return Path(spec.origin).resolve()
    locations = list(spec.submodule_search_locations or [])
    return Path(locations[0]).resolve() if locations else None


def _provided_by(path: Path, name: str) -> str:
    """Which distribution installed the package ``name`` found at ``path``, in words."""
    folder = path.parent.parent if path.name == "__init__.py" else path.parent
    providers = distributions_providing(name, [str(folder)])
    if providers:
        return "distribution " + ", ".join(f"{n} {v}" for n, v in providers)
    return "no installed distribution: a folder on sys.path (the current directory or PYTHONPATH?)"


def check_own_packages(names: Iterable[str] = ("methods", "problems"), root: Path = ROOT) -> None:
    """ForeignPackageError when ``methods``/``problems`` are not tdbench's own, or another distribution shares them.

    Each of ``names`` must be found (by ``import NAME``) in its folder under ``root``, and no other distribution
    may install one of tdbench's package names into ``root`` (pip would merge the two, file over file). Nothing
    foreign is imported: the check reads where the import system would look.
    """
    for name in names:
        found = _found_at(name)
        if found is None or not found.is_relative_to(root / name):
            where = "nothing" if found is None else f"{found} ({_provided_by(found, name)})"
            raise ForeignPackageError(
                f"tdbench's package {name!r} is shadowed: 'import {name}' finds {where}, not {root / name}; "
                "rename or remove that package, or run from another folder (docs/plugins.md, 'Installed names')"
            )
    for name in OWN_PACKAGES:
        others = [(n, v) for n, v in distributions_providing(name, [str(root)]) if normalise(n) != TDBENCH]
        if others:
            listed = ", ".join(f"{n} {v}" for n, v in others)
            raise ForeignPackageError(
                f"distribution {listed} also installs a top-level {name!r} package into {root}, beside tdbench's: "
                "pip merges the two folders and overwrites files without a word; install one of them in another "
                "environment (docs/plugins.md, 'Installed names')"
            )
