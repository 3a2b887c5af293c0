"""2-D Gaussian mixture with an unknown number of components ([GMM-ref], the VTI ``gmm_2d_k100.py`` example)."""

from problems.gmm_2d.problem import GaussianMixture2D, GaussianMixture2DK100

__all__ = ["GaussianMixture2D", "GaussianMixture2DK100"]
