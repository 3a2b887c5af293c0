"""Reversible-jump MCMC baselines."""

from methods.rjmcmc.baseline import RJMCMCBaseline, RJMCMCNaive

__all__ = ["RJMCMCBaseline", "RJMCMCNaive"]
