"""Order MCMC's kernel: order scores from a decomposable DAG score, and a random-transposition Metropolis step.

A topological order ``order[c]`` lists the nodes of chain c from first to last. Under a decomposable score
(``scores[j, S]``: node j's term for parent set S, a bitmask), the order's weight sums the scores of every DAG
consistent with it, which factorises over nodes (Friedman & Koller 2003):

    log w(order) = sum_j logsumexp_{S ⊆ pred(j)} scores[j, S],

``pred(j)`` the nodes before j. The inner sums are tabulated once for every predecessor set U
(:func:`subset_logsumexp`), so an order costs d table lookups.
"""

from __future__ import annotations

import itertools
import math

import torch
from torch import Tensor


def subset_logsumexp(scores: Tensor) -> Tensor:
    """``out[j, U] = logsumexp_{S ⊆ U} scores[j, S]`` for every bitmask U, ``[d, 2^d]`` (a zeta transform in logs)."""
    out = scores.clone()
    masks = torch.arange(scores.shape[-1], device=scores.device)
    for bit in range(scores.shape[-1].bit_length() - 1):
        with_bit = masks[(masks >> bit) & 1 == 1]
        out[:, with_bit] = torch.logaddexp(out[:, with_bit], out[:, with_bit ^ (1 << bit)])
    return out


def positions(orders: Tensor) -> Tensor:
    """``[C, d]``: the position of each node in each order (the inverse permutation)."""
    num, d = orders.shape
    ranks = torch.arange(d, device=orders.device).expand(num, d)
    return torch.empty_like(orders).scatter_(1, orders, ranks)


def predecessor_masks(orders: Tensor) -> Tensor:
    """``[C, d]`` int64: the bitmask of the nodes placed before node j in each order."""
    pos = positions(orders)
    before = pos[:, :, None] < pos[:, None, :]  # [C, i, j]: i comes before j
    bits = 1 << torch.arange(orders.shape[1], device=orders.device)
    return (before.to(torch.int64) * bits[None, :, None]).sum(1)


def order_log_score(log_z: Tensor, orders: Tensor) -> Tensor:
    """``[C]``: log w(order) from the table ``log_z = subset_logsumexp(scores)``."""
    pred = predecessor_masks(orders)
    nodes = torch.arange(orders.shape[1], device=orders.device)
    return log_z[nodes[None, :], pred].sum(-1)


def propose_transposition(orders: Tensor, generator: torch.Generator) -> Tensor:
    """Swap the nodes at two distinct positions, chosen uniformly (a symmetric proposal)."""
    num, d = orders.shape
    first = torch.randint(0, d, (num,), generator=generator, device=orders.device)
    second = (first + torch.randint(1, d, (num,), generator=generator, device=orders.device)) % d
    rows = torch.arange(num, device=orders.device)
    proposed = orders.clone()
    proposed[rows, first] = orders[rows, second]
    proposed[rows, second] = orders[rows, first]
    return proposed


def metropolis_step(
    orders: Tensor, log_score: Tensor, log_z: Tensor, generator: torch.Generator
) -> tuple[Tensor, Tensor, Tensor]:
    """One Metropolis step of every chain: (orders, their log weights, accepted ``[C]`` bool)."""
    proposed = propose_transposition(orders, generator)
    proposed_score = order_log_score(log_z, proposed)
    uniform = torch.rand(len(orders), generator=generator, device=orders.device, dtype=log_score.dtype)
    accept = torch.log(uniform) < proposed_score - log_score
    return torch.where(accept[:, None], proposed, orders), torch.where(accept, proposed_score, log_score), accept


def all_orders(num_nodes: int, device: torch.device | str = "cpu") -> Tensor:
    """Every permutation of ``num_nodes`` nodes, ``[d!, d]``, in lexicographic order."""
    return torch.tensor(list(itertools.permutations(range(num_nodes))), dtype=torch.int64, device=device)


def order_rank(orders: Tensor) -> Tensor:
    """``[C]``: each order's index in :func:`all_orders` (its Lehmer code read in the factorial base)."""
    d = orders.shape[1]
    smaller_later = (orders[:, None, :] < orders[:, :, None]).triu(diagonal=1).sum(-1)  # [C, position]
    weights = torch.tensor([math.factorial(d - 1 - i) for i in range(d)], dtype=torch.int64, device=orders.device)
    return (smaller_later * weights).sum(-1)
