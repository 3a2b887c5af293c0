"""Conjugate Gaussian linear-regression variable selection with exact answers."""

from problems.conjugate_vs.problem import ConjugateVS

__all__ = ["ConjugateVS"]
