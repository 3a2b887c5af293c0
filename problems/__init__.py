"""Built-in benchmark problems; importing this package registers them."""

from problems import block_vs, factor_analysis, linear_dag, robust_vs, sas  # noqa: F401  (each registers its problems)
