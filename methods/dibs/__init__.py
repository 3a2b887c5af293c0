"""DiBS (Lorch et al. 2021) through its authors' library dibs-lib: BayesDAG's main comparator."""

from methods.dibs.method import DiBS

__all__ = ["DiBS"]
