"""Targets with a broken log density, shared by the tests of the methods' and the runner's checks."""

import torch
from torch import Tensor

from problems.sas.problem import SinhArcsinh


def nan_log_joint(model_index: Tensor, theta: Tensor) -> Tensor:
    """NaN for every point of the batch."""
    return torch.full(model_index.shape[:1], torch.nan, dtype=theta.dtype, device=theta.device)


class NaNSas(SinhArcsinh):
    """sas with log pi = NaN everywhere (its exact draws and model probabilities unchanged)."""

    name = "sas-nan"

    def log_joint(self, model_index: Tensor, theta: Tensor) -> Tensor:
        """NaN for every point."""
        return nan_log_joint(model_index, theta)


class FrozenSas(SinhArcsinh):
    """sas whose log density is exact at the first batch evaluated (the chains' starting points), NaN afterwards:
    every proposal is rejected, so the chains never move."""

    name = "sas-frozen"

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def log_joint(self, model_index: Tensor, theta: Tensor) -> Tensor:
        """Exact on the first call, NaN on every later one."""
        self.calls += 1
        if self.calls == 1:
            return super().log_joint(model_index, theta)
        return nan_log_joint(model_index, theta)
