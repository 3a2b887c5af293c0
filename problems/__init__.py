"""Built-in benchmark problems; importing this package registers them."""

from problems import (  # noqa: F401  (each registers its problems)
    block_vs,
    conjugate_vs,
    dag_mlp,
    eight_schools,
    factor_analysis,
    funnel,
    gmm_2d,
    linear_dag,
    linear_dag_bge,
    robust_vs,
    sas,
    seeds,
)
