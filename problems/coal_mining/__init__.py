"""Coal-mining disasters change points (Green 1995, sec. 4): problem "coal-mining"."""

from problems.coal_mining.problem import CoalMining

__all__ = ["CoalMining"]
