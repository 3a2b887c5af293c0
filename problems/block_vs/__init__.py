"""Robust block variable selection (TRJ sec. 5.1): problems "block-vs" and "block-vs-simulated"."""

from problems.block_vs.problem import BlockVS, BlockVSSimulated

__all__ = ["BlockVS", "BlockVSSimulated"]
