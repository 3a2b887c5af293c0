"""Seeds random-effects logistic regression (Crowder 1978; MIF paper App. D.1)."""

from problems.seeds.problem import Seeds

__all__ = ["Seeds"]
