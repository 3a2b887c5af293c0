"""Deterministic log evidence of a low-dimensional model by tensor-product quadrature.

log p(D | m) = log ∫ exp(log_joint(m, theta) - log p(m)) dtheta_m over the active coordinates (1 to about 4 of
them), evaluated through ``problem.log_joint`` in float64 on a tensor-product Gauss-Legendre or trapezoid grid. It
is an independent check of the reference engine's SMC evidence for block-vs, whose models have dimension 1 to 4.

Both rules converge exponentially here because the integrand is negligible on the box faces (the trapezoid rule is
then spectrally accurate, as for periodic functions). The trapezoid rule is the default: the block-vs posteriors
are multimodal with bumps ~0.5 wide across the whole box, and Gauss-Legendre spends its nodes crowding at the faces.

The integration box is chosen automatically: a batched multi-start gradient ascent finds the (possibly several)
modes and a curvature scale; a coarse uniform grid that includes the box faces then widens any side where the
integrand is not negligible (above ``edge_tol`` times its peak) and trims sides where it is, until the faces pass.
Modes that no start reaches and that are separated from the others by a region below ``edge_tol`` are missed.

Details: docs/problems.md, "block-vs quadrature (`problems/block_vs/quadrature.py`)".
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import torch
from torch import Tensor

from suite.core.problem import Problem
from suite.core.types import ModelProbs

LogDensity = Callable[[Tensor], Tensor]


def _log_integrand(problem: Problem, model_index: int, device: torch.device) -> tuple[LogDensity, Tensor]:
    """z [N, d] on the active coordinates -> log_joint - log p(m), float64 [N]; and the active coordinates."""
    model = torch.tensor([model_index], dtype=torch.int64, device=device)
    active = problem.mask(model)[0].nonzero().squeeze(-1)
    log_model_prior = float(problem.log_model_prior(model)[0])

    def log_f(z: Tensor) -> Tensor:
        """Integrand on the active coordinates."""
        theta = z.new_zeros(z.shape[0], problem.dim_max).index_copy(1, active, z)
        return problem.log_joint(model.expand(z.shape[0]), theta) - log_model_prior

    return log_f, active


def _modes(log_f: LogDensity, starts: Tensor, edge_tol: float, steps: int = 150) -> tuple[Tensor, Tensor]:
    """Batched Adam ascent from every start: the endpoints within a factor ``edge_tol`` of the best, and scales."""
    # Adam with a cosine learning-rate decay, written out (torch.optim imports torch._dynamo: seconds).
    z, mean, var = starts.clone(), torch.zeros_like(starts), torch.zeros_like(starts)
    beta1, beta2 = 0.9, 0.999
    for t in range(1, steps + 1):
        z.requires_grad_(True)
        (grad,) = torch.autograd.grad(log_f(z).clamp_min(-1e300).sum(), z)
        grad = grad.nan_to_num(0.0, 0.0, 0.0)
        mean, var = beta1 * mean + (1 - beta1) * grad, beta2 * var + (1 - beta2) * grad * grad
        lr = 1e-2 + 0.5 * (1.0 - 1e-2) * (1 + math.cos(math.pi * (t - 1) / steps))
        step = lr * (mean / (1 - beta1**t)) / ((var / (1 - beta2**t)).sqrt() + 1e-8)
        z = (z + step).detach()
    with torch.no_grad():
        values = log_f(z)
    best = int(values.argmax())
    kept = z[values > values[best] + math.log(edge_tol)]
    hessian = torch.autograd.functional.hessian(lambda x: log_f(x[None])[0], z[best])
    # Marginal posterior sds from the curvature; the diagonal if the Hessian is not negative definite.
    chol, info = torch.linalg.cholesky_ex(-hessian)
    if info == 0:
        scale = torch.cholesky_inverse(chol).diagonal().sqrt()
    else:
        scale = hessian.diagonal().abs().clamp_min(1e-12).rsqrt()
    return kept, torch.where(torch.isfinite(scale) & (scale > 0), scale, 1.0)


def _coarse_values(log_f: LogDensity, lo: Tensor, hi: Tensor, points: int, chunk_size: int) -> Tensor:
    """Integrand on a uniform grid with ``points`` per axis, faces included: shape [points] * d."""
    axes = [
        torch.linspace(float(a), float(b), points, dtype=torch.float64, device=lo.device)
        for a, b in zip(lo.tolist(), hi.tolist(), strict=True)
    ]
    grid = torch.cartesian_prod(*axes).reshape(-1, len(axes))
    with torch.no_grad():
        values = torch.cat([log_f(part) for part in grid.split(chunk_size)])
    return values.reshape([points] * len(axes))


def find_box(
    problem: Problem,
    model_index: int,
    *,
    edge_tol: float = 1e-12,
    num_starts: int = 16,
    coarse_points: int | None = None,
    max_rounds: int = 12,
    chunk_size: int = 1 << 14,
    seed: int = 0,
    device: torch.device | str = "cpu",
) -> tuple[Tensor, Tensor]:
    """Bounds (lo, hi) of the active coordinates outside which the integrand is below ``edge_tol`` x its peak.

    Every face of the returned box has been checked on a uniform grid; raises
    RuntimeError if no such box is found within ``max_rounds`` adjustments.
    """
    device = torch.device(device)
    log_f, active = _log_integrand(problem, model_index, device)
    d = len(active)
    gen = torch.Generator().manual_seed(seed)
    model = torch.full((num_starts,), model_index, dtype=torch.int64)
    if problem.has_prior:
        starts = problem.sample_prior(model, gen)[:, active.cpu()]
    else:
        starts = 10.0 * torch.randn(num_starts, d, generator=gen, dtype=torch.float64)
    starts[0] = 0.0  # and one start at the origin
    starts = starts.to(device)
    modes, scale = _modes(log_f, starts, edge_tol)
    lo, hi = modes.min(0).values - 10.0 * scale, modes.max(0).values + 10.0 * scale
    points = coarse_points or min(2001, max(9, int(1e5 ** (1.0 / d)) | 1))
    threshold = math.log(edge_tol)
    verified = None
    for _ in range(max_rounds):
        values = _coarse_values(log_f, lo, hi, points, chunk_size)
        # profile[j][k]: max of the integrand over the grid slice where coordinate j sits at its k-th point,
        # relative to the grid's peak (below the true peak, so the face test is conservative).
        profile = [values.movedim(j, 0).reshape(points, -1).max(1).values - values.max() for j in range(d)]
        width = hi - lo
        grow_lo = torch.tensor([float(p[0]) > threshold for p in profile], device=device)
        grow_hi = torch.tensor([float(p[-1]) > threshold for p in profile], device=device)
        if grow_lo.any() or grow_hi.any():
            lo, hi = lo - 0.5 * width * grow_lo, hi + 0.5 * width * grow_hi
            continue
        verified = lo, hi
        # Trim each side to one grid step beyond the outermost point above the threshold, then check again.
        above = [(p > threshold).nonzero().squeeze(-1) for p in profile]
        first = torch.tensor([max(int(a[0]) - 1, 0) for a in above], device=device)
        last = torch.tensor([min(int(a[-1]) + 1, points - 1) for a in above], device=device)
        if (first == 0).all() and (last == points - 1).all():
            break
        step = width / (points - 1)
        lo, hi = lo + step * first, lo + step * last
    if verified is None:
        raise RuntimeError(f"no box with negligible faces found for model {model_index} in {max_rounds} rounds")
    return verified


def _rule(name: str, num_nodes: int) -> tuple[Tensor, Tensor]:
    """Nodes on [-1, 1] and log weights of a ``num_nodes``-point rule."""
    if name == "gauss-legendre":
        x, w = np.polynomial.legendre.leggauss(num_nodes)
        return torch.from_numpy(x), torch.from_numpy(np.log(w))
    if name == "trapezoid":
        x = torch.linspace(-1.0, 1.0, num_nodes, dtype=torch.float64)
        log_w = torch.full((num_nodes,), math.log(2.0 / (num_nodes - 1)), dtype=torch.float64)
        log_w[[0, -1]] -= math.log(2.0)
        return x, log_w
    raise ValueError(f"unknown rule {name!r}; use 'gauss-legendre' or 'trapezoid'")


def log_evidence_by_quadrature(
    problem: Problem,
    model_index: int,
    num_nodes: int,
    *,
    rule: str = "trapezoid",
    box: Sequence[tuple[float, float]] | None = None,
    edge_tol: float = 1e-12,
    chunk_size: int = 1 << 14,
    seed: int = 0,
    device: torch.device | str = "cpu",
) -> float:
    """log p(D | m) by a ``num_nodes``-point rule per active coordinate on ``box`` (found by :func:`find_box` if None).

    ``rule`` is "trapezoid" or "gauss-legendre" (see the module docstring).
    The integrand is evaluated ``chunk_size`` points at a time on ``device``.
    """
    if num_nodes < 2:
        raise ValueError("num_nodes must be at least 2")
    device = torch.device(device)
    log_f, active = _log_integrand(problem, model_index, device)
    d = len(active)
    if box is None:
        lo, hi = find_box(problem, model_index, edge_tol=edge_tol, chunk_size=chunk_size, seed=seed, device=device)
    else:
        lo, hi = (torch.tensor(v, dtype=torch.float64, device=device) for v in zip(*box, strict=True))
    x, log_w = (t.to(device) for t in _rule(rule, num_nodes))
    half, mid = (hi - lo) / 2, (hi + lo) / 2
    nodes = mid[:, None] + half[:, None] * x[None]  # [d, n]
    # Enumerate the n^d grid in flat-index chunks; digit j of the index (base n) picks coordinate j's node.
    total = num_nodes**d
    powers = num_nodes ** torch.arange(d - 1, -1, -1, dtype=torch.int64, device=device)
    parts = []
    with torch.no_grad():
        for start in range(0, total, chunk_size):
            flat = torch.arange(start, min(start + chunk_size, total), device=device)
            digits = (flat[:, None] // powers) % num_nodes
            z = torch.stack([nodes[j, digits[:, j]] for j in range(d)], dim=1)
            parts.append(torch.logsumexp(log_f(z) + log_w[digits].sum(1), 0))
    return float(torch.logsumexp(torch.stack(parts), 0) + half.log().sum())


#: Trapezoid nodes per coordinate of the two grids whose difference bounds the discretisation error.
GRIDS = (48, 56)


def _log_evidences_on_grids(problem: Problem, num_nodes: tuple[int, int]) -> list[Tensor]:
    """log p(D | m) of every model on each grid, each model's box found once (:func:`find_box`)."""
    boxes = []
    for m in range(int(problem.num_models)):
        lo, hi = find_box(problem, m)
        boxes.append(list(zip(lo.tolist(), hi.tolist(), strict=True)))
    return [
        torch.tensor(
            [log_evidence_by_quadrature(problem, m, nodes, box=box) for m, box in enumerate(boxes)], dtype=torch.float64
        )
        for nodes in num_nodes
    ]


def log_evidences_by_quadrature(problem: Problem, num_nodes: tuple[int, int] = GRIDS) -> tuple[Tensor, Tensor]:
    """log p(D | m) of every model on the finer grid, and its absolute change from the coarser one (an error bound)."""
    coarse, fine = _log_evidences_on_grids(problem, num_nodes)
    return fine, (fine - coarse).abs()


def model_probs_by_quadrature(problem: Problem, num_nodes: tuple[int, int] = GRIDS) -> ModelProbs:
    """p(m | D) from quadrature evidences; se: the change from the coarser grid (bounds the discretisation error)."""
    models = torch.arange(int(problem.num_models), dtype=torch.int64)
    log_prior = problem.log_model_prior(models).to(torch.float64)
    coarse, fine = (torch.softmax(log_z + log_prior, 0) for log_z in _log_evidences_on_grids(problem, num_nodes))
    return ModelProbs(index=models, prob=fine, se=(fine - coarse).abs())
