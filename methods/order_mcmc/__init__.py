"""Order MCMC over topological orders (Friedman & Koller 2003), with the DAG-prior correction; registers its method."""
