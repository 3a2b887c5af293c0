"""Deprecated path of :mod:`suite.data.locate` (kept for one release; warns with the new path)."""

from suite.core.moved import forward

__getattr__ = forward(__name__, "suite.data.locate")
