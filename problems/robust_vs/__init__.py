"""Misspecified robust variable selection (VTI sec. 5.1, App. E)."""

from problems.robust_vs.problem import RobustVS

__all__ = ["RobustVS"]
