"""CTRJ's density for cross-entropy in chunks: bounded batches, the same values as in one piece."""

import math

import pytest
import torch
from torch import Tensor

from methods.trj import method as trj_method
from methods.trj.flows import ConditionalSplineTransport
from methods.trj.method import CTRJ, CTRJ_DENSITY_AUX_DRAWS, saturated_log_weights
from suite.core.registry import make_problem

F64 = torch.float64


class _StandardNormalSaturated:
    """q~(xi | k) = N(xi; 0, I) on every coordinate, so q(theta_m | m) = N(theta_m; 0, I) exactly; records batches."""

    def __init__(self) -> None:
        self.batches: list[tuple[int, int]] = []

    def log_prob_saturated(self, model_index: Tensor, xi: Tensor) -> Tensor:
        self.batches.append(tuple(xi.shape))
        return (-0.5 * xi * xi - 0.5 * math.log(2 * math.pi)).sum(-1)


@pytest.fixture(scope="module")
def sas():
    return make_problem("sas")


@pytest.fixture(scope="module")
def sas_draws(sas):
    return sas.reference_draws(300, torch.Generator().manual_seed(0))


def test_chunked_weights_equal_one_piece_with_a_spline_flow(sas, sas_draws) -> None:
    """An (untrained, standardised) conditional RQ flow: every chunking gives the one-piece weights to 1e-12."""
    flow = ConditionalSplineTransport.fit(
        sas, sas_draws.model_index, sas_draws.theta, iterations=0, generator=torch.Generator().manual_seed(1)
    )
    m, theta = sas_draws.model_index, sas_draws.theta
    n, d = theta.shape

    def weights(cap: int, rows: int = n) -> Tensor:
        generator = torch.Generator().manual_seed(3)
        return saturated_log_weights(sas, flow, m[:rows], theta[:rows], generator, max_elements=cap)

    whole = weights(CTRJ_DENSITY_AUX_DRAWS * n * d)
    assert whole.shape == (CTRJ_DENSITY_AUX_DRAWS, n) and bool(torch.isfinite(whole).all())
    # 7 draws per chunk (the last one shorter), one draw per chunk, and row blocks of 37 within a draw.
    for cap in (7 * n * d, n * d, 37 * d):
        torch.testing.assert_close(weights(cap), whole, rtol=0, atol=1e-12)
    # A cap below one row still passes whole rows, one at a time (on 12 rows: 384 flow calls).
    torch.testing.assert_close(
        weights(1, rows=12), weights(CTRJ_DENSITY_AUX_DRAWS * 12 * d, rows=12), rtol=0, atol=1e-12
    )


def test_exact_saturated_density_gives_the_exact_marginal(sas, sas_draws) -> None:
    """With q~ = N(0, I) on the saturated space every importance weight is N(theta_m; 0, I): the known answer."""
    m, theta = sas_draws.model_index, sas_draws.theta
    log_w = saturated_log_weights(sas, _StandardNormalSaturated(), m, theta, torch.Generator().manual_seed(0), 50)
    on = sas.mask(m)
    expected = torch.where(on, -0.5 * theta * theta - 0.5 * math.log(2 * math.pi), 0.0).sum(-1)
    torch.testing.assert_close(log_w, expected.expand_as(log_w), rtol=0, atol=1e-12)


def test_large_batch_is_scored_in_bounded_chunks(sas, sas_draws, monkeypatch) -> None:
    """The method's density splits a batch so that the flow never sees more than the cap, with the same values."""
    m, theta = sas_draws.model_index, sas_draws.theta
    n, d = theta.shape
    log_q_m = torch.log(torch.tensor([0.25, 0.75], dtype=F64))
    transport = _StandardNormalSaturated()
    whole = CTRJ()._log_density(sas, transport, log_q_m)(m, theta)
    assert transport.batches == [(CTRJ_DENSITY_AUX_DRAWS * n, d)]  # 19,200 values: one piece under the default cap

    monkeypatch.setattr(trj_method, "CTRJ_DENSITY_CHUNK_ELEMENTS", 100 * d)
    transport = _StandardNormalSaturated()
    chunked = CTRJ()._log_density(sas, transport, log_q_m)(m, theta)
    assert len(transport.batches) == CTRJ_DENSITY_AUX_DRAWS * 3  # row blocks 100, 100, 100 of each draw
    assert max(rows * width for rows, width in transport.batches) <= 100 * d
    torch.testing.assert_close(chunked, whole, rtol=0, atol=1e-12)
    on = sas.mask(m)
    expected = log_q_m[m] + torch.where(on, -0.5 * theta * theta - 0.5 * math.log(2 * math.pi), 0.0).sum(-1)
    torch.testing.assert_close(chunked, expected, rtol=0, atol=1e-12)
