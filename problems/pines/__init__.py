"""Radiata pines: two non-nested regressions (density vs resin-adjusted density) with exact evidences."""

from problems.pines.problem import Pines

__all__ = ["Pines"]
