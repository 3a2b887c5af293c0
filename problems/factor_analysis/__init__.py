"""Bayesian factor analysis (TRJ sec. 4.2): 1-3 factors on six exchange rates, plus a simulated variant."""

from problems.factor_analysis.problem import FactorAnalysis, FactorAnalysisK23, SimulatedFactorAnalysis

__all__ = ["FactorAnalysis", "FactorAnalysisK23", "SimulatedFactorAnalysis"]
