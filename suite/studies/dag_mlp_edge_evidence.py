"""Laplace evidence of the true dag-mlp graph and of the graphs one true edge short of it (docs/limitations.md).

Asks whether the exact posterior of a simulated ``dag-mlp`` data set is sparser than the truth: for the true graph,
the empty graph and each graph with one true edge removed, the parameters are optimised to the MAP (L-BFGS from
the true parameters, and from random starts) and the log evidence approximated by Laplace's method,

    log p(D, G) ~ log p(D, theta*, G) + (D/2) log 2 pi - (1/2) log det H,

with H the generalised Gauss-Newton curvature of -log p(D, theta, G) at theta* (J^T J / sigma^2 + I / tau^2, J the
Jacobian of the residuals). It is an approximation, not a bound; differences of hundreds of nats are what it can tell.

    python -m suite.cli.dag_mlp_diagnostics edge-evidence --data-seed 0      # about 8 minutes on one core
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from problems.dag_mlp.problem import SimulatedDAGMLP, mlp_residual_values

LOG_2PI = math.log(2 * math.pi)


def _maximise(log_joint: Callable[[Tensor], Tensor], start: Tensor) -> Tensor:
    """A local maximum of ``log_joint`` by L-BFGS from ``start``."""
    values = start.clone().requires_grad_(True)
    optimiser = torch.optim.LBFGS(
        [values],
        max_iter=500,
        tolerance_grad=1e-7,
        tolerance_change=1e-10,
        history_size=50,
        line_search_fn="strong_wolfe",
    )

    def closure() -> Tensor:
        optimiser.zero_grad()
        loss = -log_joint(values)
        loss.backward()
        return loss

    for _ in range(4):
        optimiser.step(closure)
    return values.detach()


def _theta(problem: SimulatedDAGMLP, active: Tensor, values: Tensor) -> Tensor:
    """A saturated parameter vector ``[1, dim_max]`` with ``values`` at the ``active`` coordinates, 0 elsewhere."""
    return torch.zeros(1, problem.dim_max, dtype=torch.float64).index_put((torch.zeros_like(active), active), values)


def _residuals(problem: SimulatedDAGMLP, model: Tensor, active: Tensor, values: Tensor) -> Tensor:
    """Residuals x - f(parents) of every node and row (``[d * n]``), by the likelihood's own function."""
    weights = problem._weights(_theta(problem, active, values))
    order = torch.argsort(problem.model_space.positions(model), -1)  # node at each position
    x_sorted = problem.observations().T[order]  # [1, d, n]
    return mlp_residual_values(x_sorted, *weights).flatten()


def laplace_log_evidence(problem: SimulatedDAGMLP, adjacency: Tensor, starts: list[Tensor]) -> tuple[float, float, int]:
    """(Laplace log evidence, log joint at the MAP, number of active parameters) of one graph."""
    model = problem.model_index_of(adjacency[None])
    active = problem.mask(model)[0].nonzero()[:, 0]

    def log_joint(values: Tensor) -> Tensor:
        return problem.log_joint(model, _theta(problem, active, values))[0]

    if len(active) == 0:
        value = float(log_joint(torch.zeros(0, dtype=torch.float64)))
        return value, value, 0
    best_value, best = -math.inf, None
    for start in starts:
        values = _maximise(log_joint, start[active])
        value = float(log_joint(values))
        if value > best_value:
            best_value, best = value, values
    # Generalised Gauss-Newton curvature J^T J / sigma^2 + I / tau^2 (J: the residuals' Jacobian): positive
    # definite, unlike the exact Hessian, whose ReLU terms left tens of eigenvalues negative at L-BFGS's optimum.
    jacobian = torch.func.jacfwd(lambda v: _residuals(problem, model, active, v))(best)
    curvature = (
        jacobian.T @ jacobian / problem.noise_sd**2 + torch.eye(len(active), dtype=torch.float64) / problem.prior_sd**2
    )
    evidence = best_value + 0.5 * len(active) * LOG_2PI - 0.5 * float(torch.linalg.slogdet(curvature)[1])
    return evidence, best_value, len(active)


def run_edge_evidence(data_seed: int = 0, random_starts: int = 3) -> None:
    """Print the evidence of the true graph, the empty graph and every graph one true edge short."""
    torch.set_num_threads(1)
    problem = SimulatedDAGMLP(data_seed=data_seed)
    generator = torch.Generator().manual_seed(1)
    truth = problem.true_adjacency

    def starts(num_random: int) -> list[Tensor]:
        noise = [
            0.5 * torch.randn(problem.dim_max, dtype=torch.float64, generator=generator) for _ in range(num_random)
        ]
        return [problem.true_theta, *noise]

    full, joint, dim = laplace_log_evidence(problem, truth, starts(random_starts))
    print(
        f"data seed {data_seed}: true graph ({int(truth.sum())} edges, {dim} parameters): "
        f"Laplace {full:.1f}, log joint at the MAP {joint:.1f}"
    )
    empty, _, _ = laplace_log_evidence(problem, torch.zeros_like(truth), [problem.true_theta])
    print(f"empty graph: {empty:.1f}")
    for parent, child in truth.nonzero().tolist():
        graph = truth.clone()
        graph[parent, child] = False
        evidence, _, _ = laplace_log_evidence(problem, graph, starts(1))
        print(f"without {parent} -> {child}: {evidence:.1f} ({evidence - full:+.1f})", flush=True)
