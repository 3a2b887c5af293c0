"""Bootstrap GES through causal-learn: BayesDAG's quasi-Bayesian baseline."""
