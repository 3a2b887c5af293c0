"""Old import paths of the contracts, kept for one release: each warns once and forwards to the new module."""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable
from typing import Any


def forward(old: str, new: str) -> Callable[[str], Any]:
    """Warn that ``old`` moved to ``new`` (DeprecationWarning) and return a module ``__getattr__`` forwarding there."""
    warnings.warn(
        f"{old} is deprecated: import from {new} (the old path goes in the next release)",
        DeprecationWarning,
        stacklevel=3,
    )
    module = importlib.import_module(new)

    def __getattr__(name: str) -> Any:
        return getattr(module, name)

    return __getattr__
