"""Non-linear DAGs with MLP conditionals over (permutation, edge bits) models: simulated and Sachs data."""

from problems.dag_mlp.problem import DAGMLP, SachsDAGMLP, SimulatedDAGMLP
from problems.dag_mlp.space import PermutationDAGSpace

__all__ = ["DAGMLP", "PermutationDAGSpace", "SachsDAGMLP", "SimulatedDAGMLP"]
