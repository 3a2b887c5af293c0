"""Shared fixtures: device choice, seeding, and small problems with known answers."""

from __future__ import annotations

import math
import os

import pytest
import torch
from torch import Tensor

from suite.core.model_space import BinarySpace
from suite.core.problem import LOG_SQRT_2PI, Problem
from suite.core.tensor_ops import rows
from suite.core.types import Draws, ModelProbs
from tests.fake_time import fake_time  # noqa: F401 (the fake clock fixture, for every test)

# The tests never download a data set (docs/data.md): a problem whose file is nowhere is unavailable and its tests
# skip. Subprocesses inherit this; tests/suite/core/test_data.py turns downloads on against a local server.
os.environ.setdefault("TDBENCH_OFFLINE", "1")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--device", default="cpu", help="device for tests that take one (cpu or cuda)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/benchmarks" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.benchmark)


@pytest.fixture
def device(request: pytest.FixtureRequest) -> torch.device:
    name = request.config.getoption("--device")
    if name == "cuda" and not torch.cuda.is_available():
        pytest.skip("CUDA not available")
    return torch.device(name)


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


class GaussianModels(Problem):
    """Test problem: model bits select active coordinates; pi(m, theta) = w_m N(theta_A; mu_m, diag(sd_m^2)).

    The four models (bits 00, 10, 01, 11) have exactly known probabilities
    ``WEIGHTS``; model 00 has no parameters. A shared coordinate has a
    different mean and scale in each model, as in real nested models.
    """

    name = "test-gaussians"
    WEIGHTS = (0.1, 0.2, 0.3, 0.4)

    def __init__(self) -> None:
        self.model_space = BinarySpace(2)
        self.dim_max = 2
        self.mu = torch.tensor([[0.0, 0.0], [2.0, 0.0], [0.0, -1.0], [-1.5, 3.0]], dtype=torch.float64)
        self.sd = torch.tensor([[1.0, 1.0], [0.5, 1.0], [1.0, 2.0], [0.3, 0.7]], dtype=torch.float64)
        self.log_w = torch.tensor(self.WEIGHTS, dtype=torch.float64).log()

    def mask(self, model_index: Tensor) -> Tensor:
        return self.model_space.bits(model_index)

    def log_model_prior(self, model_index: Tensor) -> Tensor:
        return torch.full(model_index.shape, -math.log(4.0), dtype=torch.float64, device=model_index.device)

    def log_joint(self, model_index: Tensor, theta: Tensor) -> Tensor:
        mu = rows(self.mu.to(theta), model_index)
        sd = rows(self.sd.to(theta), model_index)
        active = self.mask(model_index)
        x = torch.where(active, theta, mu)
        per = -0.5 * ((x - mu) / sd) ** 2 - sd.log() - LOG_SQRT_2PI
        return rows(self.log_w.to(theta), model_index) + torch.where(active, per, 0.0).sum(-1)

    def reference_model_probs(self) -> ModelProbs:
        return ModelProbs.from_dense(torch.tensor(self.WEIGHTS, dtype=torch.float64))

    def reference_draws(self, num_draws: int, generator: torch.Generator) -> Draws:
        m = torch.multinomial(
            torch.tensor(self.WEIGHTS, dtype=torch.float64), num_draws, replacement=True, generator=generator
        )
        eps = torch.randn(num_draws, 2, generator=generator, dtype=torch.float64)
        theta = torch.where(self.mask(m), self.mu[m] + self.sd[m] * eps, 0.0)
        return Draws(m, theta)


@pytest.fixture
def gaussian_models() -> GaussianModels:
    return GaussianModels()
