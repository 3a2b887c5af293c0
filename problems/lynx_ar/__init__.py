"""Autoregressive order selection for the Canadian lynx series, with exact answers."""

from problems.lynx_ar.problem import LynxAR

__all__ = ["LynxAR"]
