"""MADE+ over (Lehmer digits, edge bits): autoregressive, normalised, sampling consistent, learns by score function."""

import math

import pytest
import torch

from methods.vti.made_plus import MADEPlusSampler, default_sfe_lr
from problems.dag_mlp.space import PermutationDAGSpace


def _sampler(num_nodes: int = 3, seed: int = 0, **options: float) -> MADEPlusSampler:
    torch.manual_seed(seed)
    space = PermutationDAGSpace(num_nodes)
    sampler = MADEPlusSampler(
        space, log_model_prior_fn=lambda m: torch.zeros(m.shape[0], dtype=torch.float64), **options
    )
    with torch.no_grad():  # leave the uniform initial state so that the tests see a non-trivial q
        sampler.made.final.weight.normal_(0, 0.5)
        sampler.made.final.bias.normal_(0, 0.5)
    return sampler


def _all_models(num_nodes: int) -> torch.Tensor:
    bits = num_nodes * (num_nodes - 1) // 2
    return torch.tensor([[r, b] for r in range(math.factorial(num_nodes)) for b in range(2**bits)])


def test_outputs_of_a_variable_ignore_it_and_later_variables() -> None:
    sampler = _sampler(4)
    values = sampler.space.to_variables(sampler.space.sample_uniform(32, torch.Generator().manual_seed(0)))
    base = sampler._log_probs(values, None)
    for v in range(values.shape[1]):
        changed = values.clone()
        changed[:, v:] = 0
        torch.testing.assert_close(sampler._log_probs(changed, None)[:, : v + 1], base[:, : v + 1])


def test_q_is_normalised_over_all_models() -> None:
    """3 nodes: 6 orders x 8 edge sets; q sums to 1 and uniform at initialisation."""
    sampler = _sampler(3)
    assert float(sampler.log_prob(_all_models(3)).exp().sum()) == pytest.approx(1.0, abs=1e-12)
    fresh = MADEPlusSampler(PermutationDAGSpace(3), log_model_prior_fn=lambda m: torch.zeros(m.shape[0]))
    torch.testing.assert_close(fresh.log_prob(_all_models(3)).exp(), torch.full((48,), 1 / 48, dtype=torch.float64))


def test_samples_follow_q_and_carry_their_log_q() -> None:
    """40,000 draws: log q matches log_prob; frequencies of the 48 models within 5 binomial SEs of q."""
    sampler = _sampler(3, seed=1)
    draws, log_q = sampler.sample(40_000, torch.Generator().manual_seed(2))
    torch.testing.assert_close(log_q, sampler.log_prob(draws))
    models = _all_models(3)
    q = sampler.log_prob(models).exp()
    counts = (draws[:, None, :] == models[None]).all(-1).sum(0).to(torch.float64)
    se = (40_000 * q * (1 - q)).sqrt()
    assert bool(((counts - 40_000 * q).abs() <= 5 * se + 1).all())


def test_score_function_updates_move_q_towards_rewarded_models() -> None:
    """With ell(m) = 2 x edges and a flat prior, the expected number of edges rises from 1.5 towards 3."""
    space = PermutationDAGSpace(3)
    sampler = MADEPlusSampler(
        space, log_model_prior_fn=lambda m: torch.zeros(m.shape[0], dtype=torch.float64), sfe_lr=0.5, ig_threshold=0.5
    )
    gen = torch.Generator().manual_seed(3)
    for _ in range(150):
        models, _ = sampler.sample(256, gen)
        sampler.update(models, 2.0 * space.edge_bits(models).sum(-1).to(torch.float64))
    q = sampler.log_prob(_all_models(3)).exp()
    edges = space.edge_bits(_all_models(3)).sum(-1).to(torch.float64)
    assert float((q * edges).sum()) > 2.5


def test_authors_learning_rates_by_node_count() -> None:
    assert default_sfe_lr(10) == 1e-4 and default_sfe_lr(11) == 1e-5 and default_sfe_lr(3) == 1e-1


def test_incremental_draws_equal_full_pass_draws() -> None:
    """5 nodes (4 digits, 10 bits): the same generator gives the same models, log q equal to rounding."""
    sampler = _sampler(5, seed=3)
    fast, log_fast = sampler.sample(2_000, torch.Generator().manual_seed(4))
    slow, log_slow = sampler.sample(2_000, torch.Generator().manual_seed(4), incremental=False)
    assert torch.equal(fast, slow)
    torch.testing.assert_close(log_fast, log_slow, rtol=1e-12, atol=1e-12)
