"""Imports inside functions, found by parsing the source (no import of the scanned modules)."""

from __future__ import annotations

import ast
from pathlib import Path


def function_level_imports(package: Path) -> list[tuple[str, str, str]]:
    """(module file relative to the package's parent, function, imported module) of every import inside a function
    of ``package``'s modules; relative imports are left out."""
    found = []
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for function in ast.walk(tree):
            if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(function):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0:
                    names = [node.module or ""]
                else:
                    continue
                found += [(str(path.relative_to(package.parent)), function.name, name) for name in names]
    return found


def is_allowed(name: str, allowed: dict[str, str]) -> bool:
    """Whether ``name`` is one of ``allowed``'s modules or inside one."""
    return any(name == key or name.startswith(key + ".") for key in allowed)
