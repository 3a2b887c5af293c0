"""Neal's funnel in 10 dimensions (MIF paper App. D.1)."""

from problems.funnel.problem import Funnel

__all__ = ["Funnel"]
