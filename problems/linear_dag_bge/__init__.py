"""BGe marginal likelihood of linear-Gaussian DAGs, for an exact posterior over small DAG spaces."""
