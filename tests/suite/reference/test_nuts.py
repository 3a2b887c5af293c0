"""NUTS draws against exact conjugate posteriors."""

import numpy as np
import pytest
import torch

from problems.linear_dag.problem import LinearDAG
from suite.reference.jax_target import JaxTarget
from suite.reference.nuts import NUTSSampler, NUTSSettings


@pytest.mark.slow
def test_nuts_matches_exact_posterior_moments() -> None:
    dag = LinearDAG(num_nodes=3, num_samples=50, data_seed=3)
    model = int(dag.reference_model_probs().top(1).index[0])
    sampler = NUTSSampler(JaxTarget.of(dag), NUTSSettings(num_chains=4, num_warmup=300, num_samples=500))
    out = sampler.sample(model, np.random.default_rng(0).standard_normal((4, dag.dim_max)) * 0.3, seed=0)
    assert out.max_rhat < 1.02 and out.min_ess > 400
    mask = dag.mask(torch.tensor([model]))[0].numpy()
    nuts = out.draws.reshape(-1, dag.dim_max)[:, mask]
    exact = dag.reference_draws(200_000, torch.Generator().manual_seed(1))
    exact = exact.theta[exact.model_index == model].numpy()[:, mask]
    sd = exact.std(0)
    # Means within 4.5 MC standard errors (sd / sqrt(ESS), ESS the smallest over coordinates).
    assert np.all(np.abs(nuts.mean(0) - exact.mean(0)) <= 4.5 * sd / np.sqrt(out.min_ess))
    # Variances: the sample variance's relative SE is about sqrt(2 / ESS) for near-Gaussian marginals.
    assert np.all(np.abs(nuts.var(0) / exact.var(0) - 1) <= 4.5 * np.sqrt(2 / out.min_ess))
