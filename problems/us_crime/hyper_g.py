"""The hyper-g prior of Liang et al. (2008, sec. 3.2) for the us-crime regression: g ~ (a - 2)/2 (1 + g)^(-a/2).

With g unknown, theta gains w = log g (always active) and the evidence p(y | gamma) = int p(y | gamma, g) pi(g) dg is
one-dimensional. It is computed on a fixed grid of w (trapezoid rule, step ``STEP`` on [``LOW``, ``HIGH``]): the
integrand in w is smooth, so the rule converges geometrically in the step, and it decays like e^w below and at least
like e^(-w/2) above (pi(g) g ~ g^(1 - a/2) with a > 2 while p(y | gamma, g) is bounded), so the cut tails are below
e^-30 of the total. Tests compare it with Liang et al.'s closed form in the Gaussian hypergeometric function 2F1
(sec. 3.2) and with scipy.quad.

Draws of w given gamma are exact, by rejection from an envelope built on the same grid (:func:`sample_log_g`): the
log integrand f is linear between grid points up to M h^2 / 8, M a bound on |f''|.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor
from torch.nn.functional import softplus

from problems.us_crime.posterior import Design, SubsetFactors, conditional_entropy, log_evidence_given_g

LOW, HIGH, STEP = -30.0, 70.0, 0.1


def grid() -> Tensor:
    """The grid of w = log g, float64 [G]."""
    count = round((HIGH - LOW) / STEP) + 1
    return torch.linspace(LOW, HIGH, count, dtype=torch.float64)


def log_prior_of_log_g(log_g: Tensor, a: float) -> Tensor:
    """log of the hyper-g density of w = log g: log((a - 2) / 2) - a/2 log(1 + g) + w (the Jacobian g)."""
    return math.log(0.5 * (a - 2.0)) - 0.5 * a * softplus(log_g) + log_g


def log_integrand(design: Design, fac: SubsetFactors, a: float, log_g: Tensor) -> Tensor:
    """log p(y | gamma, g) + log pi(w) on the grid ``log_g`` [G] for each subset: [B, G]."""
    columns = SubsetFactors(
        fac.chol, fac.half_log_det[:, None], fac.r2[:, None], fac.ols, fac.dims[:, None]
    )  # broadcast the subsets against the grid
    return log_evidence_given_g(design, columns, log_g) + log_prior_of_log_g(log_g, a)


def log_evidence(design: Design, fac: SubsetFactors, a: float) -> Tensor:
    """log p(y | gamma) = log int p(y | gamma, g) pi(g) dg by the trapezoid rule on :func:`grid` ([B])."""
    values = log_integrand(design, fac, a, grid())
    # trapezoid: h (f_0 / 2 + f_1 + ... + f_{G-2} + f_{G-1} / 2); the end weights change nothing at e^-30.
    return torch.logsumexp(values, -1) + math.log(STEP)


def entropy(design: Design, fac: SubsetFactors, a: float, log_evidence_rows: Tensor) -> Tensor:
    """H(alpha, beta_gamma, u, w | gamma, y) = H(w | gamma, y) + E_w[H(alpha, beta, u | gamma, g, y)] on the grid."""
    w = grid()
    log_density = log_integrand(design, fac, a, w) - log_evidence_rows[:, None]  # log p(w | gamma, y)
    density = log_density.exp()
    columns = SubsetFactors(fac.chol, fac.half_log_det[:, None], fac.r2[:, None], fac.ols, fac.dims[:, None])
    given_g = conditional_entropy(design, columns, w.exp())
    return STEP * (density * (given_g - log_density)).sum(-1)


def curvature_bound(design: Design, fac: SubsetFactors, a: float) -> Tensor:
    """Per subset, a bound M >= |d^2/dw^2 log_integrand|: (|n - 1 - k - a| / 2 + (n - 1) / 2) / 4 ([B]).

    f'' = A s'(w) - B s'(w + log(1 - R^2)) with A = (n-1-k-a)/2, B = (n-1)/2 and 0 < s' = s (1 - s) <= 1/4.
    """
    return 0.25 * (0.5 * (design.n - 1 - fac.dims - a).abs() + 0.5 * (design.n - 1))


def _log_expm1_ratio(x: Tensor) -> Tensor:
    """log((e^x - 1) / x), stable near 0 (where it is x/2)."""
    small = x.abs() < 1e-8
    safe = torch.where(small, torch.ones_like(x), x)
    return torch.where(small, 0.5 * x, (torch.expm1(safe) / safe).log())


def sample_log_g(design: Design, fac: SubsetFactors, a: float, rows: Tensor, generator: torch.Generator) -> Tensor:
    """One exact draw of w = log g | gamma, y per entry of ``rows`` (indices into ``fac``'s subsets), float64.

    Rejection from the envelope exp(l(w) + M h^2 / 8), l the linear interpolation of the log integrand f between grid
    points: |f - l| <= M h^2 / 8 on each cell (M = :func:`curvature_bound`), so the envelope dominates and the
    acceptance rate is at least exp(-M h^2 / 4) (0.97 here). A cell is chosen by its envelope mass, w within it by
    the inverse CDF of the exponential density exp(l).
    """
    w = grid()
    values = log_integrand(design, fac, a, w)  # [B, G]
    slope = (values[:, 1:] - values[:, :-1]) / STEP  # [B, G - 1]
    log_mass = values[:, :-1] + math.log(STEP) + _log_expm1_ratio(slope * STEP)
    slack = curvature_bound(design, fac, a) * STEP**2 / 8.0  # [B]
    out = torch.empty(len(rows), dtype=torch.float64)
    for block in torch.arange(len(rows)).split(1024):
        pending = block
        while len(pending):
            subset = rows[pending]
            weights = (log_mass[subset] - log_mass[subset].max(-1, keepdim=True).values).exp()
            cell = torch.multinomial(weights, 1, generator=generator)[:, 0]
            s = slope[subset, cell]
            u = torch.rand(len(pending), generator=generator, dtype=torch.float64)
            flat = s.abs() < 1e-12
            safe = torch.where(flat, torch.ones_like(s), s)
            offset = torch.where(flat, u * STEP, torch.log1p(u * torch.expm1(safe * STEP)) / safe)
            proposal = w[cell] + offset
            one = SubsetFactors(
                fac.chol[subset], fac.half_log_det[subset], fac.r2[subset], fac.ols[subset], fac.dims[subset]
            )
            log_f = log_evidence_given_g(design, one, proposal) + log_prior_of_log_g(proposal, a)
            log_ratio = log_f - (values[subset, cell] + s * offset + slack[subset])
            accept = torch.rand(len(pending), generator=generator, dtype=torch.float64).log() < log_ratio
            out[pending[accept]] = proposal[accept]
            pending = pending[~accept]
    return out
