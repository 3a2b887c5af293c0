"""tdbench suite: contracts, registry, harness, metrics, results and leaderboards.

The names below are imported on first use (PEP 562), so that importing a submodule such as
``suite.report.leaderboard`` does not import the registry: the report layer reads records without loading any
problem or method code.
"""

from __future__ import annotations

import importlib
from typing import Any

#: Public name -> module that defines it.
_EXPORTS = {
    "RunContext": "suite.core.context",
    "RunningEstimate": "suite.core.context",
    "Method": "suite.core.method",
    "Result": "suite.core.method",
    "BinarySpace": "suite.core.model_space",
    "CategoricalSpace": "suite.core.model_space",
    "CountSpace": "suite.core.model_space",
    "ModelSpace": "suite.core.model_space",
    "ExactTransport": "suite.core.problem",
    "Problem": "suite.core.problem",
    "available_methods": "suite.core.registry",
    "available_problems": "suite.core.registry",
    "make_method": "suite.core.registry",
    "make_problem": "suite.core.registry",
    "register_method": "suite.core.registry",
    "register_problem": "suite.core.registry",
    "Draws": "suite.core.types",
    "ModelProbs": "suite.core.types",
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
