"""Built-in benchmark problems; importing this package registers them."""

import suite.store.references  # noqa: F401  (installs the reader of Problem.stored_reference)
from problems import (  # noqa: F401  (each registers its problems)
    block_vs,
    coal_mining,
    conjugate_vs,
    dag_mlp,
    eight_schools,
    factor_analysis,
    funnel,
    galaxy,
    gmm_2d,
    linear_dag,
    linear_dag_bge,
    lynx_ar,
    pines,
    robust_vs,
    sas,
    seeds,
    us_crime,
)
