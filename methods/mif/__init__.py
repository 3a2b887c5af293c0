"""Per-model variational inference: model-informed flows (MIF) and the MF, FR, FR-VIP and IAF baselines."""

from methods.mif.method import FRVIP, IAF, MIF, FullRank, MeanField

__all__ = ["FRVIP", "IAF", "MIF", "FullRank", "MeanField"]
