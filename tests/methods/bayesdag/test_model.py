"""BayesDAG pieces: the sorting map, Sinkhorn, the edge sampler, the SCM likelihoods and the SG-MCMC step."""

import itertools
import math

import torch

from methods.bayesdag import model as bd
from suite.graphs.dag import is_acyclic

D64 = torch.float64


def _relaxed(p: torch.Tensor) -> torch.Tensor:
    return bd.relaxed_order_mask(p, temperature=0.2, max_iterations=3000, tolerance=1e-3)[0]


def test_sorting_map_gives_dags_whose_edges_follow_descending_potentials() -> None:
    gen = torch.Generator().manual_seed(0)
    p = torch.randn(256, 6, generator=gen, dtype=D64)
    edges = (torch.rand(256, 6, 6, generator=gen, dtype=D64) < 0.7).to(D64)
    graph = edges * _relaxed(p)
    assert bool(is_acyclic(graph > 0).all())
    higher = p[:, :, None] > p[:, None, :]
    assert not bool(((graph > 0) & ~higher).any())  # an edge i -> j only where p_i > p_j
    # With W all ones the graph is the complete DAG of the order: every pair (i, j) with p_i > p_j, nothing else.
    complete = _relaxed(p)
    assert torch.equal(complete > 0, higher) and torch.equal(complete, bd.order_mask(p))
    assert bool((complete.sum((-1, -2)) == 15).all())


def test_permutation_is_the_argmax_of_the_assignment_problem() -> None:
    gen = torch.Generator().manual_seed(1)
    p = torch.randn(20, 4, generator=gen, dtype=D64)
    o = torch.arange(1, 5, dtype=D64)
    candidates = torch.stack([torch.eye(4, dtype=D64)[list(perm)] for perm in itertools.permutations(range(4))])
    scores = torch.einsum("kij,bij->bk", candidates, p[:, :, None] * o)  # <P, p o^T> for every permutation P
    best = candidates[scores.argmax(1)]
    assert torch.equal(bd.permutation(p), best)


def test_sinkhorn_is_doubly_stochastic_and_gives_order_gradients() -> None:
    gen = torch.Generator().manual_seed(2)
    p = (torch.randn(8, 5, generator=gen, dtype=D64) * 0.5).requires_grad_()
    o = torch.arange(1, 6, dtype=D64)
    soft, iterations = bd.sinkhorn(p[:, :, None] * o / 0.2, 3000, 1e-3)
    assert iterations <= 3000
    assert torch.allclose(soft.sum(-1), torch.ones(8, 5, dtype=D64), atol=1e-3)
    assert torch.allclose(soft.sum(-2), torch.ones(8, 5, dtype=D64), atol=1e-3)
    # The straight-through mask passes gradients to p (the hard forward has none).
    target = torch.randn(8, 5, 5, generator=gen, dtype=D64)
    (grad,) = torch.autograd.grad((_relaxed(p) * target).sum(), p)
    assert torch.isfinite(grad).all() and grad.abs().sum() > 0


def test_o_scale_keeps_the_hard_mask_and_sharpens_the_relaxation() -> None:
    """o = o_scale * [1..d] (the authors' code: 10): same forward mask; Sinkhorn input scaled, so gradients differ."""
    gen = torch.Generator().manual_seed(3)
    p = (torch.randn(8, 5, generator=gen, dtype=D64) * 0.05).requires_grad_()
    target = torch.randn(8, 5, 5, generator=gen, dtype=D64)
    grads = []
    for o_scale in (1.0, 10.0):
        mask, _ = bd.relaxed_order_mask(p, 0.2, 3000, 1e-3, o_scale=o_scale)
        assert torch.equal(mask, bd.order_mask(p))
        grads.append(torch.autograd.grad((mask * target).sum(), p)[0])
    assert torch.isfinite(grads[1]).all() and not torch.allclose(grads[0], grads[1])


def test_sampled_edges_are_hard_with_the_bernoulli_frequencies_and_a_gradient() -> None:
    gen = torch.Generator().manual_seed(3)
    logits = torch.tensor([-2.0, 0.0, 1.5], dtype=D64).repeat(20_000, 1).requires_grad_()
    edges = bd.sample_edges(logits, temperature=0.2, generator=gen)
    assert set(edges.detach().unique().tolist()) <= {0.0, 1.0}
    prob = torch.sigmoid(logits[0].detach())
    se = (prob * (1 - prob) / 20_000).sqrt()
    assert ((edges.detach().mean(0) - prob).abs() <= 4.5 * se).all()  # 4.5 standard errors: no flaky failures
    (grad,) = torch.autograd.grad(edges.sum(), logits)
    assert (grad > 0).any()


def test_entropy_of_fair_coins_is_log_2_per_off_diagonal_entry() -> None:
    entropy = bd.bernoulli_entropy(torch.zeros(3, 4, 4, dtype=D64))
    assert torch.allclose(entropy, torch.full((3,), 12 * math.log(2), dtype=D64))


def test_linear_likelihood_is_the_gaussian_of_the_parent_regression() -> None:
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(7, 3, generator=gen, dtype=D64)
    theta = bd.init_theta("linear", 2, 3, 1, gen, D64)
    theta = {k: torch.randn(v.shape, generator=gen, dtype=D64) for k, v in theta.items()}
    graph = torch.tensor([[[0, 1, 1], [0, 0, 1], [0, 0, 0]], [[0, 0, 0], [1, 0, 0], [1, 1, 0]]], dtype=D64)
    expected = torch.zeros(2, dtype=D64)
    for c in range(2):
        for j in range(3):
            mean = sum(graph[c, i, j] * theta["weights"][c, i, j] * x[:, i] for i in range(3))
            var = theta["log_noise"][c, j].exp()
            expected[c] += (-0.5 * (math.log(2 * math.pi) + var.log() + (x[:, j] - mean) ** 2 / var)).sum()
    assert torch.allclose(bd.log_likelihood("linear", theta, graph, x), expected)


def test_mlp_prediction_depends_only_on_the_parents() -> None:
    gen = torch.Generator().manual_seed(5)
    theta = bd.init_theta("mlp", 3, 4, 16, gen, D64)
    graph = (torch.rand(3, 4, 4, generator=gen, dtype=D64) < 0.5).to(D64) * bd.order_mask(
        torch.randn(3, 4, generator=gen)
    )
    x = torch.randn(6, 4, generator=gen, dtype=D64).requires_grad_()
    prediction = bd.predict("mlp", theta, graph, x)
    assert prediction.shape == (3, 6, 4)
    for c, j in itertools.product(range(3), range(4)):
        (grad,) = torch.autograd.grad(prediction[c, :, j].sum(), x, retain_graph=True)
        moved = grad.abs().sum(0) > 0
        assert not bool((moved & (graph[c, :, j] == 0)).any())  # no non-parent moves node j's mean


def test_sgmcmc_without_noise_descends_and_with_noise_spreads() -> None:
    def run(scale: float) -> torch.Tensor:
        gen = torch.Generator().manual_seed(6)
        x = torch.full((500,), 3.0, dtype=D64)
        sampler = bd.AdamSGMCMC(lr=1e-2, scale=scale)
        for _ in range(3000):
            sampler.step(x, x.clone(), gen)  # U = x^2 / 2
        return x

    quiet = run(0.0)
    assert quiet.abs().max() < 0.05
    noisy = run(1.0)
    assert noisy.std() > 10 * quiet.std() + 0.05
