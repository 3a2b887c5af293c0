"""Non-linear DAGMA (Bello et al. 2022) through the ``dagma`` package: a frequentist DAG structure-learning baseline."""

from methods.dagma.method import DAGMA

__all__ = ["DAGMA"]
