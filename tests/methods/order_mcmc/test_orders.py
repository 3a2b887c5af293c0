"""Order MCMC's kernel: order scores by brute force, and invariance of the exact order posterior."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from methods.order_mcmc.orders import (
    all_orders,
    metropolis_step,
    order_log_score,
    order_rank,
    predecessor_masks,
    propose_transposition,
    subset_logsumexp,
)


def random_scores(d: int, seed: int) -> torch.Tensor:
    """Local scores ``[d, 2^d]`` with -inf where the set holds the node, spread over a few nats."""
    gen = torch.Generator().manual_seed(seed)
    scores = 3.0 * torch.randn(d, 2**d, generator=gen, dtype=torch.float64)
    masks = torch.arange(2**d)
    for j in range(d):
        scores[j, (masks >> j) & 1 == 1] = -math.inf
    return scores


def test_subset_logsumexp_against_brute_force():
    scores = random_scores(4, 0)
    table = subset_logsumexp(scores)
    for j in range(4):
        for u in range(16):
            subsets = [s for s in range(16) if s & ~u == 0]
            assert torch.isclose(table[j, u], torch.logsumexp(scores[j, subsets], 0), rtol=0, atol=1e-12)


def test_order_score_sums_every_consistent_dag():
    """w(order) = sum over the parent-set choices within each node's predecessors (the DAGs the order allows)."""
    d, scores = 3, random_scores(3, 1)
    log_z = subset_logsumexp(scores)
    for order in itertools.permutations(range(d)):
        before = {node: order[: order.index(node)] for node in range(d)}
        allowed = {j: sum(1 << i for i in before[j]) for j in range(d)}
        choices = [[s for s in range(2**d) if s & ~allowed[j] == 0] for j in range(d)]
        total = torch.logsumexp(
            torch.stack([sum(scores[j, s] for j, s in enumerate(pick)) for pick in itertools.product(*choices)]), 0
        )
        assert torch.isclose(order_log_score(log_z, torch.tensor([order])), total, rtol=0, atol=1e-12).all()


def test_predecessor_masks_and_rank():
    orders = torch.tensor([[2, 0, 1], [0, 1, 2]])
    assert predecessor_masks(orders).tolist() == [[0b100, 0b101, 0b000], [0b000, 0b001, 0b011]]
    assert torch.equal(order_rank(all_orders(4)), torch.arange(24))


def test_transposition_is_a_uniform_swap():
    gen = torch.Generator().manual_seed(0)
    orders = torch.arange(4).expand(60_000, 4)
    proposed = propose_transposition(orders, gen)
    assert torch.equal(proposed.sort(-1).values, orders)  # still permutations
    moved = (proposed != orders).sum(-1)
    assert bool((moved == 2).all())
    # 6 unordered position pairs, each with probability 1/6: counts within 5 binomial standard deviations.
    pairs = torch.unique((proposed != orders).long() @ (1 << torch.arange(4)), return_counts=True)[1]
    expected, sd = 10_000, math.sqrt(60_000 * (1 / 6) * (5 / 6))
    assert len(pairs) == 6 and bool(((pairs - expected).abs() < 5 * sd).all())


@pytest.mark.parametrize("seed", [0, 1])
def test_exact_order_posterior_is_invariant(seed):
    """Draws from pi(order) ∝ w(order), pushed through one step, keep pi (chi-square over the 24 orders)."""
    d, num = 4, 200_000
    log_z = subset_logsumexp(random_scores(d, seed) / 3.0)  # milder scores: every order has mass
    orders = all_orders(d)
    pi = torch.softmax(order_log_score(log_z, orders), 0)
    gen = torch.Generator().manual_seed(10 + seed)
    start = orders[torch.multinomial(pi, num, replacement=True, generator=gen)]
    moved, _, accept = metropolis_step(start, order_log_score(log_z, start), log_z, gen)
    assert 0.05 < float(accept.double().mean()) < 0.99  # the step really moves chains
    counts = torch.bincount(order_rank(moved), minlength=len(orders)).double()
    expected = num * pi
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    # 23 degrees of freedom: P(chi2 > 60) < 1e-4 under invariance.
    assert chi2 < 60.0, chi2


def test_exact_transition_matrix_keeps_pi():
    """Sum over the 12 ordered position pairs: pi P = pi to rounding, P built from the kernel's own proposal."""
    d = 4
    log_z = subset_logsumexp(random_scores(d, 3))
    orders = all_orders(d)
    log_w = order_log_score(log_z, orders)
    pi = torch.softmax(log_w, 0)
    transition = torch.zeros(len(orders), len(orders), dtype=torch.float64)
    pairs = [(i, j) for i in range(d) for j in range(d) if i != j]
    for i, j in pairs:
        swapped = orders.clone()
        swapped[:, [i, j]] = orders[:, [j, i]]
        target = order_rank(swapped)
        accept = torch.exp((log_w[target] - log_w).clamp_max(0.0)) / len(pairs)
        transition[torch.arange(len(orders)), target] += accept
        transition[torch.arange(len(orders)), torch.arange(len(orders))] += 1 / len(pairs) - accept
    assert torch.allclose(pi @ transition, pi, rtol=0, atol=1e-14)
