"""Bootstrap GES through causal-learn: BayesDAG's quasi-Bayesian baseline."""

from methods.bges.method import BootstrapGES

__all__ = ["BootstrapGES"]
