"""``order-mcmc``: Metropolis over topological orders (Friedman & Koller 2003) with the DAG-prior correction.

A DAG baseline that mixes where edge-move MCMC does not: the space of orders (d! of them) is small and smooth,
and every order stands for all the DAGs consistent with it, summed in closed form. It needs a problem whose
log p(G) + log p(D | G) decomposes into per-node terms (:class:`suite.graphs.dag.DecomposableScore`: ``linear-dag*``,
``linear-dag-bge*``) over an enumerated DAG space.

q(G) is not the chains' empirical DAG frequencies but the Rao-Blackwellised, prior-corrected estimate of
:mod:`methods.order_mcmc.estimator`: order MCMC by itself targets p(G | D) n(G) (n(G): G's number of linear
extensions), which is biased under a uniform or edge-penalised DAG prior; dividing by n(G) removes the bias.
It is a collapsed sampler: the SCM's parameters are integrated out, so it returns no parameter draws and no
density (no cross-entropy); it is scored on q(G). Runs take seconds, so there is no checkpointing.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from methods.order_mcmc.estimator import DAGPosteriorFromOrders
from methods.order_mcmc.orders import metropolis_step, order_log_score, order_rank, subset_logsumexp
from suite.core.context import RunContext
from suite.core.method import Method, Result
from suite.core.problem import Problem
from suite.core.registry import register_method
from suite.core.types import ModelProbs
from suite.graphs.dag import NOT_DAG_REASON, DAGProblem, DecomposableScore

#: The correction tabulates p(G | order) for all d! orders and every DAG: enumerated spaces of at most this many.
MAX_NODES = 5


@register_method("order-mcmc")
@dataclass(frozen=True)
class OrderMCMC(Method):
    """Order MCMC: random-transposition Metropolis over node orders, chains vectorised, q(G) corrected to p(G).

    Every chain starts from a uniformly random order. The first ``burn_in_fraction`` of the iterations (of the
    time budget, when the run has one) is burn-in; every order visited after it counts once per chain and
    iteration towards q(G) (:class:`methods.order_mcmc.estimator.DAGPosteriorFromOrders`).
    """

    num_chains: int | None = None
    #: Iterations (burn-in included) when the run has no time budget.
    num_iterations: int | None = None
    burn_in_fraction: float = 0.1

    profiles: ClassVar[dict[str, dict[str, Any]]] = {
        "smoke": {"num_chains": 16, "num_iterations": 500},
        "quick": {"num_chains": 64, "num_iterations": 5_000},
        "paper": {"num_chains": 64, "num_iterations": 100_000},
    }

    def finalise(self, problem: Problem) -> Method:
        """Positive integer chain and iteration counts, a burn-in fraction in [0, 1)."""
        counts = {}
        for key in ("num_chains", "num_iterations"):
            value = getattr(self, key)
            if value is None or int(value) != value or int(value) <= 0:
                raise ValueError(f"{self.name}: {key} must be a positive integer, got {value}")
            counts[key] = int(value)
        if not 0 <= self.burn_in_fraction < 1:
            raise ValueError(f"{self.name}: burn_in_fraction must lie in [0, 1), got {self.burn_in_fraction}")
        return dataclasses.replace(self, **counts, burn_in_fraction=float(self.burn_in_fraction))

    def supports(self, problem: Problem) -> str | None:
        """DAG problems with closed-form local scores over an enumerated space of at most 5 nodes."""
        if not isinstance(problem, DAGProblem):
            return NOT_DAG_REASON
        if not isinstance(problem, DecomposableScore):
            return "the problem has no closed-form per-node scores (suite.graphs.dag.DecomposableScore)"
        if problem.num_models is None or problem.num_nodes > MAX_NODES:
            return f"the DAG-prior correction enumerates all DAGs: at most {MAX_NODES} nodes"
        return None

    def run(self, problem: Problem, context: RunContext) -> Result:
        """Run the chains, count the orders visited after burn-in and return the corrected q(G)."""
        self.require_support(problem)
        assert isinstance(problem, DAGProblem) and isinstance(problem, DecomposableScore)
        device, dtype = context.device, context.dtype
        with context.timer.phase("setup"):
            scores = problem.local_log_scores().to(device, dtype)
            if not bool(torch.isfinite(scores).any(-1).all()) or bool(torch.isnan(scores).any()):
                return Result.failed("a node's local scores are NaN or -inf for every parent set")
            log_z = subset_logsumexp(scores)
            all_models = problem.model_space.all_indices(device)
            adjacency = problem.adjacency(all_models).to(device)
            parent_sets = (adjacency.to(torch.int64) << torch.arange(problem.num_nodes, device=device)[:, None]).sum(1)
            posterior = DAGPosteriorFromOrders(scores, parent_sets)
            generator = torch.Generator(device=device).manual_seed(context.seed)
            chains = int(self.num_chains)
            orders = torch.rand(chains, problem.num_nodes, generator=generator, device=device).argsort(-1)
            log_score = order_log_score(log_z, orders)
            counts = torch.zeros(len(posterior.orders), dtype=torch.int64, device=device)
            accepted = torch.zeros((), dtype=torch.int64, device=device)

        def estimate() -> ModelProbs:
            seen = counts if bool((counts > 0).any()) else torch.bincount(order_rank(orders), minlength=len(counts))
            return ModelProbs(all_models.cpu(), posterior.probs(seen).to("cpu", torch.float64))

        total = int(self.num_iterations)
        burn_in = int(self.burn_in_fraction * total)
        with context.loop(f"order-mcmc {problem.name}", planned=total) as loop, context.timer.phase("sample"):
            sampling = self.burn_in_fraction == 0 if loop.budgeted else burn_in == 0
            while not loop.finished(ready=sampling and bool((counts > 0).any())):
                orders, log_score, accept = metropolis_step(orders, log_score, log_z, generator)
                if sampling:
                    counts += torch.bincount(order_rank(orders), minlength=len(counts))
                    accepted += accept.sum()
                loop.advance(estimate=estimate)
                if not sampling:
                    sampling = loop.reached("burn_in_end", burn_in, self.burn_in_fraction)
        iteration = loop.iteration
        sampled = int(counts.sum()) // chains
        rate = float(accepted) / max(sampled * chains, 1)
        model_probs = estimate()
        context.snapshot(iteration, lambda: model_probs)
        diagnostics = {
            "iterations": iteration,
            "sampled_iterations": sampled,
            "chains": chains,
            "acceptance_rate": rate,
            "orders_visited": int((counts > 0).sum()),
            "orders": len(counts),
        }
        if sampled > 0 and accepted == 0:
            return Result.failed("no proposed order was accepted after burn-in", diagnostics=diagnostics)
        return Result(model_probs=model_probs, diagnostics=diagnostics)
