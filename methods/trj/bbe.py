"""The Bartolucci bridge estimator of model probabilities (TRJ paper, eqs. 9-10; Bartolucci et al. 2006).

Detailed balance of a reversible jump between models i and j gives, from proposals made at draws of each model,

    log pi(i) / pi(j) = log mean alpha(j -> i) - log mean alpha(i -> j) + log j_j(i) - log j_i(j).

The last term is each proposal's log jump ratio. It vanishes for symmetric jumps, and the TRJ paper's eq. 9 and the
authors' code omit it. With the jump probabilities j_k(k') = pi(k') of Proposition 1 it is what makes the estimate
right, so it is included here. Eq. 10 then gives pi_hat(j) = 1 / sum_i B[i, j] for each reference model j.

Where jumps only connect neighbours (bit flips in variable selection), :meth:`PairStatistics.graph_model_probs`
combines every pair's log ratio by weighted least squares over the graph of proposed pairs (weights: the inverse
delta-method variances); with proposals only between the reference model and the others it is eq. 10 again. A pair
(i, j) is a link of that graph only when, in each direction, the expected number of acceptances (sum of alpha) is
at least ``MIN_EXPECTED_ACCEPTS`` and the delta-method variance of log mean(alpha) is at most ``MAX_SIDE_VARIANCE``:
the delta method only means something when the mean is measured to well within its own size. A model joined to the
most proposed-from model by no chain of links gets no estimate (the methods fall back to its visit frequency).

Details: docs/methods.md, "The Bartolucci bridge estimator (`methods/trj/bbe.py`)".
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from methods.trj.kernels import JumpRecord

#: Smallest variance of a pair's log ratio in the least-squares weights (a guard: links have positive variance).
MIN_PAIR_VARIANCE = 1e-12
#: A pair is a link only with at least this many expected acceptances (sum of alpha) in each direction.
MIN_EXPECTED_ACCEPTS = 1.0
#: ... and with at most this delta-method variance of log mean(alpha) in each direction.
MAX_SIDE_VARIANCE = 1.0


@dataclass
class PairStatistics:
    """Running sums of acceptance probabilities per ordered pair of models (from, to), ``[K, K]`` each."""

    count: Tensor
    alpha_sum: Tensor
    alpha_sq_sum: Tensor
    log_jump_ratio_sum: Tensor

    @classmethod
    def zeros(cls, num_models: int, device: torch.device | str = "cpu") -> PairStatistics:
        """Empty statistics over ``num_models`` models (float64)."""
        shape = (num_models, num_models)
        return cls(*(torch.zeros(shape, dtype=torch.float64, device=device) for _ in range(4)))

    @classmethod
    def of(cls, record: JumpRecord, num_models: int) -> PairStatistics:
        """The statistics of one batch of proposals."""
        stats = cls.zeros(num_models, record.log_alpha.device)
        stats.add(record)
        return stats

    @property
    def num_models(self) -> int:
        """K."""
        return self.count.shape[0]

    def add(self, record: JumpRecord) -> None:
        """Accumulate the proposals of ``record`` that change model (vectorised over the batch)."""
        k = self.count.shape[1]  # rows may be several blocks of K "from" models (see GroupedPairStatistics)
        moved = record.model_from % k != record.model_to
        pair = torch.where(moved, record.model_from * k + record.model_to, 0)
        weight = moved.to(torch.float64)
        alpha = torch.nan_to_num(record.log_alpha.to(torch.float64), nan=-math.inf).exp() * weight
        for total, values in (
            (self.count, weight),
            (self.alpha_sum, alpha),
            (self.alpha_sq_sum, alpha * alpha),
            (self.log_jump_ratio_sum, record.log_jump_ratio.to(torch.float64) * weight),
        ):
            total.view(-1).index_add_(0, pair, values)

    def merged(self, other: PairStatistics) -> PairStatistics:
        """Sum of two sets of statistics."""
        return PairStatistics(
            self.count + other.count,
            self.alpha_sum + other.alpha_sum,
            self.alpha_sq_sum + other.alpha_sq_sum,
            self.log_jump_ratio_sum + other.log_jump_ratio_sum,
        )

    def _side_variances(self) -> Tensor:
        """Delta-method variance of log mean(alpha) per ordered pair: var(alpha) / (n mean(alpha)^2) (inf if unused)."""
        n = self.count.clamp_min(1)
        mean = self.alpha_sum / n
        # var(alpha) from the sample, shrunk with one pseudo-observation of variance mean (1 - mean), the largest
        # of a [0, 1] variable with that mean, but at least mean / 4: a pair seen once, or accepted every time,
        # must not get zero variance (see the module docstring).
        sample_var = (self.alpha_sq_sum / n - mean * mean).clamp_min(0)
        prior_var = mean * (1 - mean).clamp_min(0.25)
        var_alpha = (n * sample_var + prior_var) / (n + 1)
        usable = (self.count > 0) & (mean > 0)
        return torch.where(usable, var_alpha / (n * mean * mean), math.inf)

    def log_ratios(self) -> tuple[Tensor, Tensor]:
        """log B[i, j] = log pi(i) / pi(j) for pairs proposed both ways with some acceptance (NaN otherwise),
        and the delta-method variance of each (independent proposals: var(alpha) / (n mean(alpha)^2) per side).
        """
        n = self.count.clamp_min(1)
        mean = self.alpha_sum / n
        var_log_mean = self._side_variances()
        usable = (self.count > 0) & (mean > 0)
        log_mean = torch.where(usable, mean.log(), math.nan)
        log_jump = torch.where(usable, self.log_jump_ratio_sum / n, math.nan)
        log_b = log_mean.T - log_mean + log_jump
        var_b = var_log_mean + var_log_mean.T
        log_b.fill_diagonal_(0.0)
        var_b.fill_diagonal_(0.0)
        return log_b, var_b

    def links(self) -> Tensor:
        """``[K, K]`` symmetric: the pairs informative enough to join the least-squares graph (module docstring)."""
        side = (self.alpha_sum >= MIN_EXPECTED_ACCEPTS) & (self._side_variances() <= MAX_SIDE_VARIANCE)
        both = side & side.T
        both.fill_diagonal_(False)
        return both

    def model_probs(self, reference: int | None = None) -> tuple[Tensor, Tensor]:
        """Eq. 10 with reference model j: pi_hat(i) = B[i, j] / sum_l B[l, j], and delta-method standard errors.

        By default j is the model with the most proposals. Every model must have been proposed to and from j.
        """
        log_b, var_b = self.log_ratios()
        if reference is None:
            reference = int(self.count.sum(1).argmax())
        column, column_var = log_b[:, reference], var_b[:, reference]
        missing = torch.isnan(column).nonzero().flatten().tolist()
        if missing:
            raise ValueError(f"no proposals in both directions between model {reference} and models {missing}")
        probs = torch.softmax(column, 0)
        # d p_i / d log B_l = p_i (delta_il - p_l); the log ratios of different l are independent.
        jac = torch.diag(probs) - probs[:, None] * probs[None, :]
        return probs, torch.sqrt((jac * jac) @ column_var)

    def graph_model_probs(self) -> tuple[Tensor, Tensor, Tensor]:
        """Model probabilities from the links' log ratios by weighted least squares; standard errors; reached.

        Solves min_l sum_{i<j} (l_i - l_j - log B[i, j])^2 / var[i, j] over the links (:meth:`links`) of the
        connected component of the most proposed-from model (l fixed to 0 there); ``reached`` marks that
        component, and models outside it get probability 0 (no estimate). Standard errors by the delta method
        from the solution's covariance (the inverse of the reduced weighted graph Laplacian).
        """
        log_b, var_b = self.log_ratios()
        k = self.num_models
        known = self.links() & torch.isfinite(log_b) & torch.isfinite(var_b)
        weight = torch.where(known, 1.0 / var_b.clamp_min(MIN_PAIR_VARIANCE), 0.0)
        root = int(self.count.sum(1).argmax())
        reached = _component(known, root)
        idx = reached.nonzero().flatten()
        w = weight[idx][:, idx]
        b = torch.where(known, log_b, 0.0)[idx][:, idx]
        laplacian = torch.diag(w.sum(1)) - w
        rhs = (w * b).sum(1)  # sum_j w_ij (l_i - l_j) = sum_j w_ij b_ij
        keep = torch.ones(len(idx), dtype=torch.bool, device=idx.device)
        keep[int((idx == root).nonzero())] = False
        log_p = torch.zeros(len(idx), dtype=torch.float64, device=idx.device)
        cov = torch.zeros(len(idx), len(idx), dtype=torch.float64, device=idx.device)
        if keep.any():
            reduced = laplacian[keep][:, keep]
            inverse = torch.linalg.inv(reduced)
            log_p[keep] = inverse @ rhs[keep]
            cov[keep.nonzero().flatten()[:, None], keep.nonzero().flatten()[None, :]] = inverse
        probs_r = torch.softmax(log_p, 0)
        jac = torch.diag(probs_r) - probs_r[:, None] * probs_r[None, :]
        se_r = torch.sqrt(torch.diagonal(jac @ cov @ jac.T).clamp_min(0))
        probs = torch.zeros(k, dtype=torch.float64, device=idx.device)
        se = torch.zeros(k, dtype=torch.float64, device=idx.device)
        probs[idx], se[idx] = probs_r, se_r
        return probs, se, reached


def _component(adjacent: Tensor, root: int) -> Tensor:
    """Models connected to ``root`` through pairs with known log ratios (breadth-first, as matrix products)."""
    reached = torch.zeros(adjacent.shape[0], dtype=torch.bool, device=adjacent.device)
    reached[root] = True
    step = adjacent.to(torch.float64)
    while True:
        grown = reached | ((step @ reached.to(torch.float64)) > 0)
        if bool((grown == reached).all()):
            return reached
        reached = grown


def bartolucci_model_probs(record: JumpRecord, num_models: int, reference: int | None = None) -> tuple[Tensor, Tensor]:
    """Eq. 10 from one batch of proposals (e.g. one per evaluation-set draw); see :meth:`PairStatistics.model_probs`."""
    return PairStatistics.of(record, num_models).model_probs(reference)
