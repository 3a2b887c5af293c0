"""tdbench suite: contracts, registry, harness, metrics, results and leaderboards.

The names below are imported on first use (PEP 562), so that importing a submodule such as
``suite.leaderboard`` does not import the registry: the report layer reads records without loading any
problem or method code.
"""

from __future__ import annotations

import importlib
from typing import Any

#: Public name -> module that defines it.
_EXPORTS = {
    "RunContext": "suite.context",
    "RunningEstimate": "suite.context",
    "Method": "suite.method",
    "Result": "suite.method",
    "BinarySpace": "suite.model_space",
    "CategoricalSpace": "suite.model_space",
    "ModelSpace": "suite.model_space",
    "ExactTransport": "suite.problem",
    "Problem": "suite.problem",
    "available_methods": "suite.registry",
    "available_problems": "suite.registry",
    "make_method": "suite.registry",
    "make_problem": "suite.registry",
    "register_method": "suite.registry",
    "register_problem": "suite.registry",
    "Draws": "suite.types",
    "ModelProbs": "suite.types",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    """Import a public name from its module on first use."""
    if name not in _EXPORTS:
        raise AttributeError(f"module 'suite' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
