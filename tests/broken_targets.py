"""Targets with a broken log density, shared by the tests of the methods' and the runner's checks."""

import torch
from torch import Tensor

from problems.conjugate_vs.problem import ConjugateVS
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


def nan_in_model(log_joint: Tensor, model_index: Tensor, bad_model: int) -> Tensor:
    """``log_joint`` with NaN wherever the model is ``bad_model`` (and unchanged elsewhere)."""
    bad = (model_index == bad_model).reshape(log_joint.shape)
    return torch.where(bad, torch.full_like(log_joint, torch.nan), log_joint)


class NaNModelSas(SinhArcsinh):
    """sas whose log density is NaN in model "k=1" only (exact and finite in "k=2"); exact draws and q(m) unchanged.

    With two models no chain can move between them: a jump into "k=1" has a NaN ratio, a chain started there
    never leaves.
    """

    name = "sas-nan-model"
    bad_model = 0

    def log_joint(self, model_index: Tensor, theta: Tensor) -> Tensor:
        """sas's log density, NaN in model ``bad_model``."""
        return nan_in_model(super().log_joint(model_index, theta), model_index, self.bad_model)


class NaNModelVS(ConjugateVS):
    """A small variable selection (3 covariates: 8 models, exact answers and draws) whose log density is NaN in one
    model only, ``bad_model`` (by default the second most probable: the chains still move between the others)."""

    name = "conjugate-vs-nan-model"

    def __init__(self, bad_model: int | None = None) -> None:
        super().__init__(num_covariates=3, num_observations=40, data_seed=3)
        if bad_model is None:
            bad_model = int(torch.argsort(self.reference_model_probs().prob, descending=True)[1])
        self.bad_model = bad_model

    def log_joint(self, model_index: Tensor, theta: Tensor) -> Tensor:
        """The conjugate model's log density, NaN in model ``bad_model``."""
        return nan_in_model(super().log_joint(model_index, theta), model_index, self.bad_model)


class PartlyNaNModelVS(NaNModelVS):
    """:class:`NaNModelVS` whose log density is NaN on only about 5% of its bad model's parameter space: thin
    stripes of the sum of its coefficients (issue 51: a check of 8 points per model missed it; four methods were
    scored ok)."""

    name = "conjugate-vs-partly-nan-model"

    def log_joint(self, model_index: Tensor, theta: Tensor) -> Tensor:
        """The conjugate model's log density, NaN in model ``bad_model`` where sum(theta) lies in one stripe of 20."""
        log_joint = ConjugateVS.log_joint(self, model_index, theta)
        stripe = in_stripe(theta)
        bad = (model_index == self.bad_model).reshape(log_joint.shape) & stripe.reshape(log_joint.shape)
        return torch.where(bad, torch.full_like(log_joint, torch.nan), log_joint)


def in_stripe(theta: Tensor) -> Tensor:
    """Whether sum(theta) lies in one of every 20 stripes of width 0.001: about 5% of any smooth distribution."""
    return torch.remainder(torch.floor(theta.sum(-1) * 1000.0), 20) == 0
