"""Order MCMC over topological orders (Friedman & Koller 2003), with the DAG-prior correction; registers its method."""

from methods.order_mcmc.method import OrderMCMC

__all__ = ["OrderMCMC"]
