"""Deprecated path of :mod:`suite.run.guards` (kept for one release; warns with the new path)."""

from suite.core.moved import forward

__getattr__ = forward(__name__, "suite.run.guards")
