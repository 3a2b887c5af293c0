"""Linear-Gaussian DAGs with a conjugate prior: exact posterior over all DAGs on d <= 5 nodes."""

from problems.linear_dag.problem import LinearDAG, LinearDAG4

__all__ = ["LinearDAG", "LinearDAG4"]
