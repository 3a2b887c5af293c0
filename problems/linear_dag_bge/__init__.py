"""BayesDAG's d = 5 linear-Gaussian benchmark: exact BGe posterior over all DAGs (registers its problems)."""

from problems.linear_dag_bge import problem  # noqa: F401  (registers "linear-dag-bge-er", "linear-dag-bge-sf")
