"""US crime (Ehrlich 1973): Bayesian variable selection over all 2^15 covariate subsets with exact answers."""

from problems.us_crime.problem import USCrime

__all__ = ["USCrime"]
