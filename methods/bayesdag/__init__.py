"""BayesDAG (Annadani et al. 2023): SG-MCMC over node potentials and SCM parameters with VI over edge beliefs."""

from methods.bayesdag.method import BayesDAG

__all__ = ["BayesDAG"]
