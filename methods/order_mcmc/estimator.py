"""q(G) from visited orders: Rao-Blackwellised over the DAGs each order allows, corrected to the DAG prior.

Order MCMC samples orders with weight w(order) = sum of exp(score(G)) over the DAGs G consistent with it. The
joint (order, G) ∝ exp(score(G)) 1[G consistent with order] has the DAG marginal exp(score(G)) n(G), where n(G)
is G's number of linear extensions (the orders it is consistent with): order MCMC alone over-weights DAGs with
many orders (sparse ones) relative to the intended prior. Averaging p(G | order) over the visited orders and
dividing by n(G) gives back exp(score(G)) up to normalisation (Ellis & Wong 2008's importance correction, taken
in expectation over each order's DAGs instead of one sampled DAG):

    q(G) ∝ (1 / n(G)) sum_orders count(order) p(G | order),   p(G | order) = exp(score(G)) / w(order).

The tables cover every order and every DAG, so this needs an enumerable model space (d <= 5 here).
"""

from __future__ import annotations

import torch
from torch import Tensor

from methods.order_mcmc.orders import all_orders, predecessor_masks, subset_logsumexp


class DAGPosteriorFromOrders:
    """Tables p(G | order) ``[d!, K]`` and n(G) for the DAGs of an enumerated space, given their parent sets."""

    def __init__(self, scores: Tensor, parent_sets: Tensor) -> None:
        d = scores.shape[0]
        self.orders = all_orders(d, scores.device)
        nodes = torch.arange(d, device=scores.device)
        graph_score = scores[nodes[None, :], parent_sets].sum(-1)  # [K]
        pred = predecessor_masks(self.orders)  # [d!, d]
        log_z = subset_logsumexp(scores)
        order_score = log_z[nodes[None, :], pred].sum(-1)  # [d!]
        parent_sets = parent_sets.to(torch.int32)
        # G is consistent with an order iff every parent set lies within the node's predecessors (in blocks of
        # orders: the [orders, K, d] intermediate is the memory peak).
        consistent = torch.cat(
            [((parent_sets[None] & ~block[:, None].to(torch.int32)) == 0).all(-1) for block in pred.split(24)]
        )  # [d!, K]
        #: log n(G): every DAG has at least one topological order.
        self.log_num_orders = consistent.sum(0).to(scores.dtype).log()
        self.log_given_order = torch.where(consistent, graph_score[None, :] - order_score[:, None], -torch.inf)
        self.order_log_score = order_score

    def probs(self, order_counts: Tensor) -> Tensor:
        """q(G) ``[K]`` from visit counts of every order ``[d!]`` (in :func:`all_orders`' order)."""
        if not bool((order_counts > 0).any()):
            raise ValueError("no order has been visited")
        log_counts = torch.log(order_counts.to(self.log_given_order.dtype))
        log_mix = torch.logsumexp(log_counts[:, None] + self.log_given_order, 0)
        return torch.softmax(log_mix - self.log_num_orders, 0)
