"""Richardson & Green (1997): univariate normal mixtures with an unknown number of components (galaxy data)."""

from problems.galaxy.problem import Galaxy

__all__ = ["Galaxy"]
