"""Linear-Gaussian structural equation model on d <= 5 nodes with a conjugate prior: exact ground truth.

Each node j of a DAG G is regressed on its parents Pa_j:

    x_j = sum_{i in Pa_j} w_ij x_i + e_j,   e_j ~ N(0, s_j),
    s_j ~ InverseGamma(noise_shape, noise_rate),   w_ij | s_j ~ N(0, s_j coef_scale^2),

so every node's evidence (normal-inverse-gamma regression) and every
parameter posterior are available in closed form, and all DAGs are
enumerated (543 for d = 4, 29,281 for d = 5). The model is the DAG itself
(no permutation encoding), with a prior uniform over DAGs or penalised by
edge count, p(G) ∝ exp(-edge_penalty |E|).

Parameters on the saturated space: one weight slot per ordered pair (i, j),
i != j (active when the edge i -> j is in G), then log s_j for every node
(always active; the log transform's Jacobian is in the density). Data are
simulated with ``data_seed`` in the style of BayesDAG App. D.3: a random
order, each forward pair an edge with probability 2 / (d - 1) (d edges
expected), weights uniform in ±[0.5, 1.5], noise variances from
InverseGamma(1.5, 1).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
from torch import Tensor

from suite.core.problem import Problem
from suite.core.registry import register_problem
from suite.core.tensor_ops import DeviceCache
from suite.core.types import Draws, Estimate, ModelProbs
from suite.graphs.dag_space import DAGSpace
from suite.graphs.metrics import HIGHER_IS_BETTER
from suite.scoring.graphs import graph_task_metrics

LOG_2PI = math.log(2 * math.pi)


def simulate_data(num_nodes: int, num_samples: int, seed: int) -> tuple[Tensor, Tensor]:
    """Data ``[N, d]`` (float64) and the true adjacency ``[d, d]`` from a random linear-Gaussian DAG."""
    gen = torch.Generator().manual_seed(seed)
    order = torch.randperm(num_nodes, generator=gen)
    edge_prob = min(1.0, 2.0 / max(num_nodes - 1, 1))
    weights = torch.zeros(num_nodes, num_nodes, dtype=torch.float64)
    for a in range(num_nodes):
        for b in range(a + 1, num_nodes):
            if torch.rand((), generator=gen) < edge_prob:
                magnitude = 0.5 + torch.rand((), generator=gen, dtype=torch.float64)
                sign = 1.0 if torch.rand((), generator=gen) < 0.5 else -1.0
                weights[order[a], order[b]] = sign * magnitude
    # InverseGamma(1.5, 1) variances: 1 / Gamma(1.5, rate 1); Gamma by sum of squared normals (shape 1.5 = 3/2).
    chi2_3 = (torch.randn(num_nodes, 3, generator=gen, dtype=torch.float64) ** 2).sum(-1)
    noise_var = 1.0 / (chi2_3 / 2.0)
    x = torch.zeros(num_samples, num_nodes, dtype=torch.float64)
    noise = torch.randn(num_samples, num_nodes, generator=gen, dtype=torch.float64) * noise_var.sqrt()
    for node in order.tolist():  # ancestral sampling: one pass over nodes, vectorised over samples
        x[:, node] = x @ weights[:, node] + noise[:, node]
    return x, weights != 0


@register_problem("linear-dag")
class LinearDAG(Problem):
    """Linear-Gaussian DAG (d <= 5) with a conjugate prior per node: exact evidence and posterior for every DAG."""

    #: Compute seconds each method gets in the quick profile (equal-time leaderboard).
    time_budgets: ClassVar[dict[str, float]] = {"quick": 25.0}
    #: Not in the default (quick) run, which keeps one problem of each family at 3 seeds within 15 minutes.
    planned_in: ClassVar[tuple[str, ...]] = ("smoke", "paper")

    main_metric: ClassVar[str] = "model_prob_tv"
    higher_is_better: ClassVar[frozenset[str]] = HIGHER_IS_BETTER

    def __init__(
        self,
        num_nodes: int = 5,
        num_samples: int = 100,
        edge_penalty: float = 0.0,
        coef_scale: float = 1.0,
        noise_shape: float = 1.5,
        noise_rate: float = 1.0,
        data_seed: int = 0,
    ) -> None:
        if num_samples < 1 or coef_scale <= 0 or noise_shape <= 0 or noise_rate <= 0:
            raise ValueError("num_samples >= 1 and positive coef_scale, noise_shape, noise_rate are required")
        self._config = {
            "num_nodes": num_nodes,
            "num_samples": num_samples,
            "edge_penalty": edge_penalty,
            "coef_scale": coef_scale,
            "noise_shape": noise_shape,
            "noise_rate": noise_rate,
            "data_seed": data_seed,
        }
        self.model_space = DAGSpace(num_nodes)
        d = self.num_nodes = num_nodes
        self.num_slots = d * (d - 1)
        self.dim_max = self.num_slots + d
        self.data, self.true_adjacency = simulate_data(d, num_samples, data_seed)
        self.gram = self.data.T @ self.data
        slot_parent = torch.tensor([p for p, _ in self.model_space.slots], dtype=torch.int64)
        slot_child = torch.tensor([c for _, c in self.model_space.slots], dtype=torch.int64)
        self._slot_flat = slot_parent * d + slot_child  # position of each slot in a flattened d x d matrix

        adjacency = self.model_space.adjacency(self.model_space.all_indices())
        self._slot_masks = adjacency.flatten(1)[:, self._slot_flat]  # [K, num_slots]
        num_edges = self._slot_masks.sum(-1).to(torch.float64)
        log_prior = -edge_penalty * num_edges
        self._log_model_prior = log_prior - torch.logsumexp(log_prior, 0)
        # parent_set[K, d]: bitmask of the parents of each node in each DAG.
        powers = 2 ** torch.arange(d, dtype=torch.int64)
        self._parent_sets = (adjacency.to(torch.int64) * powers[None, :, None]).sum(1)
        self._posterior_tables()
        log_evidence = self._local_log_evidence.gather(1, self._parent_sets.T).sum(0)  # [K]
        self._log_joint_evidence = self._log_model_prior + log_evidence
        self._model_probs = torch.softmax(self._log_joint_evidence, 0)
        self._device = DeviceCache(
            gram=self.gram, slot_masks=self._slot_masks, log_prior=self._log_model_prior, slot_flat=self._slot_flat
        )

    # ------------------------------------------------------------ closed forms
    def _posterior_tables(self) -> None:
        """Normal-inverse-gamma posterior and evidence of every (node, parent set), from the Gram matrix."""
        d, n = self.num_nodes, self._config["num_samples"]
        a0, b0, c2 = self._config["noise_shape"], self._config["noise_rate"], self._config["coef_scale"] ** 2
        sets = 2**d
        self._local_log_evidence = torch.full((d, sets), math.nan, dtype=torch.float64)
        self._post_mean = torch.zeros(d, sets, d, dtype=torch.float64)
        self._post_chol = torch.eye(d, dtype=torch.float64).repeat(d, sets, 1, 1)
        self._post_rate = torch.zeros(d, sets, dtype=torch.float64)
        self.post_shape = a0 + n / 2
        s = self.gram
        for j in range(d):  # d * 2^(d-1) <= 80 small regressions, once per problem
            for pset in range(sets):
                if (pset >> j) & 1:
                    continue
                parents = [i for i in range(d) if (pset >> i) & 1]
                precision = s[parents][:, parents] + torch.eye(len(parents), dtype=torch.float64) / c2
                chol_precision = torch.linalg.cholesky(precision)
                mean = torch.cholesky_solve(s[parents, j][:, None], chol_precision).squeeze(-1)
                rate = b0 + 0.5 * (s[j, j] - mean @ s[parents, j])
                half_log_det_precision = torch.log(torch.diagonal(chol_precision)).sum()
                self._local_log_evidence[j, pset] = (
                    -0.5 * n * LOG_2PI
                    - half_log_det_precision
                    - 0.5 * len(parents) * math.log(c2)
                    + a0 * math.log(b0)
                    - self.post_shape * torch.log(rate)
                    + math.lgamma(self.post_shape)
                    - math.lgamma(a0)
                )
                self._post_mean[j, pset, parents] = mean
                # Posterior covariance of the weights is s_j * precision^{-1}; store its Cholesky factor for s_j = 1.
                cov = torch.cholesky_inverse(chol_precision)
                block = torch.eye(d, dtype=torch.float64)
                block[torch.tensor(parents, dtype=torch.int64)[:, None], torch.tensor(parents, dtype=torch.int64)] = cov
                self._post_chol[j, pset] = torch.linalg.cholesky(block)
                self._post_rate[j, pset] = rate

    def log_evidence(self) -> Tensor:
        """Exact log p(D | G) for every DAG, ``[K]``."""
        return self._log_joint_evidence - self._log_model_prior

    # ------------------------------------------------------ suite.graphs.dag.DAGProblem
    def adjacency(self, model_index: Tensor) -> Tensor:
        """Bool adjacency matrices ``[B, d, d]`` of the models (``A[i, j]``: edge i -> j)."""
        return self.model_space.adjacency(model_index)

    def model_index_of(self, adjacency: Tensor) -> Tensor:
        """int64 ``[B]``: the index of each DAG ``[B, d, d]``; ValueError naming the rows that are not DAGs."""
        return self.model_space.index_of_adjacency(adjacency)

    def observations(self) -> Tensor:
        """The simulated data, float64 ``[n, d]`` in node order (a copy)."""
        return self.data.clone()

    def local_log_scores(self) -> Tensor:
        """``[d, 2^d]``: log evidence of every (node, parent-set bitmask) plus the edge penalty's share of log p(G).

        -inf where the set holds the node itself; ``log p(G) + log p(D | G)`` is the sum of the DAG's entries up to
        a constant.
        """
        sizes = ((torch.arange(2**self.num_nodes)[:, None] >> torch.arange(self.num_nodes)) & 1).sum(-1)
        scores = self._local_log_evidence - self._config["edge_penalty"] * sizes.to(torch.float64)
        return torch.nan_to_num(scores, nan=-math.inf)

    # ------------------------------------------------------------------ contract
    def edge_weight_positions(self) -> Tensor | None:
        """Flat positions ``i * d + j`` of theta's weights (one per ordered pair, ``model_space.slots``), then the d
        log noise variances; None in a subclass whose theta has another layout (``suite.graphs.dag.LinearEdgeWeights``).
        """
        d, slots = self.num_nodes, self.model_space.slots
        if self.dim_max != len(slots) + d:
            return None
        return torch.tensor([parent * d + child for parent, child in slots], dtype=torch.int64)

    def config(self) -> dict[str, Any]:
        """Constructor arguments."""
        return dict(self._config)

    def mask(self, model_index: Tensor) -> Tensor:
        """Edge slots of the DAG's edges, then every node's log noise variance."""
        slots = self._device.get("slot_masks", model_index.device).index_select(0, model_index)
        noise = torch.ones(len(model_index), self.num_nodes, dtype=torch.bool, device=model_index.device)
        return torch.cat([slots, noise], dim=-1)

    def log_model_prior(self, model_index: Tensor) -> Tensor:
        """Uniform over DAGs, or penalised by edge count."""
        return self._device.get("log_prior", model_index.device).index_select(0, model_index)

    def _weights(self, xp: Any, model_index: Any, theta: Any) -> tuple[Any, Any, Any, Any]:
        """Weight matrix W[i, j] ``[B, d, d]``, parents per node, log s and 1 / s from saturated vectors."""
        d, slots = self.num_nodes, self.num_slots
        slot_active = xp.take(xp.constant(self._device, "slot_masks", theta, exact_dtype=False), model_index)
        slot_flat = xp.constant(self._device, "slot_flat", theta, exact_dtype=False)
        weights = xp.scatter_columns(d * d, slot_flat, xp.where(slot_active, theta[:, :slots], 0.0)).reshape(-1, d, d)
        num_parents = xp.sum(xp.scatter_columns(d * d, slot_flat, xp.cast(slot_active, theta)).reshape(-1, d, d), 1)
        log_s = theta[:, slots:]
        return weights, num_parents, log_s, xp.exp(-log_s)

    def _log_prior_terms(self, weights: Any, num_parents: Any, log_s: Any, inv_s: Any, xp: Any) -> Any:
        """Per-node log p(w_j | s_j) + log p(log s_j), ``[B, d]``."""
        a0, b0, c2 = self._config["noise_shape"], self._config["noise_rate"], self._config["coef_scale"] ** 2
        squares = xp.sum(weights * weights, 1)
        log_prior_w = -0.5 * num_parents * (LOG_2PI + math.log(c2) + log_s) - 0.5 * squares * inv_s / c2
        # InverseGamma(a0, b0) on s_j with the Jacobian of s = exp(log s): a0 log b0 - lgamma(a0) - a0 log s - b0 / s.
        log_prior_s = a0 * math.log(b0) - math.lgamma(a0) - a0 * log_s - b0 * inv_s
        return log_prior_w + log_prior_s

    def log_joint_with(self, xp: Any, model_index: Any, theta: Any) -> Any:
        """log p(G) + sum_j [log p(s_j) + log s_j + log p(w_j | s_j) + log p(x_j | x_Pa, w_j, s_j)]."""
        n = self._config["num_samples"]
        weights, num_parents, log_s, inv_s = self._weights(xp, model_index, theta)
        gram = xp.constant(self._device, "gram", theta)
        # Residual sum of squares per node from the Gram matrix: S_jj - 2 sum_i W_ij S_ij + (W^T S W)_jj.
        sse = xp.diagonal(gram) - 2.0 * xp.sum(weights * gram, 1) + xp.sum(weights * (gram @ weights), 1)
        log_lik = -0.5 * n * (LOG_2PI + log_s) - 0.5 * sse * inv_s
        log_prior = self._log_prior_terms(weights, num_parents, log_s, inv_s, xp)
        log_prior_g = xp.take(xp.constant(self._device, "log_prior", theta), model_index)
        return xp.nan_to_neg_inf(xp.row_sum(log_lik + log_prior) + log_prior_g)

    def log_prior_with(self, xp: Any, model_index: Any, theta: Any) -> Any:
        """log p(w, log s | G): the weight and noise-variance priors of every node (log-transform Jacobian included)."""
        terms = self._log_prior_terms(*self._weights(xp, model_index, theta), xp)
        return xp.nan_to_neg_inf(xp.row_sum(terms))

    def sample_prior(self, model_index: Tensor, generator: torch.Generator) -> Tensor:
        """s_j ~ InverseGamma(a0, b0), w_ij | s_j ~ N(0, s_j c^2) on the DAG's edges; returns (weights, log s)."""
        n, d = len(model_index), self.num_nodes
        seed = int(torch.randint(0, 2**62, (1,), generator=generator))
        with torch.random.fork_rng(devices=[]):  # torch's Gamma sampler takes no generator
            torch.manual_seed(seed)
            gamma = torch._standard_gamma(torch.full((n, d), self._config["noise_shape"], dtype=torch.float64))
        noise_var = self._config["noise_rate"] / gamma
        slot_child = torch.tensor([c for _, c in self.model_space.slots], dtype=torch.int64)
        scale = noise_var[:, slot_child].sqrt() * self._config["coef_scale"]
        weights = torch.randn(n, self.num_slots, generator=generator, dtype=torch.float64) * scale
        weights = torch.where(self._slot_masks.index_select(0, model_index), weights, 0.0)
        return torch.cat([weights, noise_var.log()], dim=-1)

    # --------------------------------------------------------------- ground truth
    def task_metrics(self, model_probs: ModelProbs | None, draws: Draws | None) -> dict[str, Estimate]:
        """Edge F1, SHD, E-SHD, Brier and AUROC against the true graph, and the Hamming MMD to the exact posterior."""
        return graph_task_metrics(self, model_probs, draws, exact=self.reference_model_probs())

    def reference_model_probs(self) -> ModelProbs:
        """Exact posterior over all DAGs."""
        return ModelProbs.from_dense(self._model_probs)

    def reference_draws(self, num_draws: int, generator: torch.Generator) -> Draws:
        """Exact draws: G from its posterior, then per node s_j ~ IG(a_n, b_n), w_j | s_j ~ N(m_n, s_j V_n)."""
        model_index = torch.multinomial(self._model_probs, num_draws, replacement=True, generator=generator)
        d = self.num_nodes
        psets = self._parent_sets.index_select(0, model_index)  # [N, d]
        node = torch.arange(d).expand(num_draws, d)
        rate = self._post_rate[node, psets]  # [N, d]
        # Gamma(a_n) draws from torch's sampler under a seed taken from ``generator`` (it accepts no generator).
        seed = int(torch.randint(0, 2**62, (1,), generator=generator))
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            gamma = torch._standard_gamma(torch.full((num_draws, d), self.post_shape, dtype=torch.float64))
        noise_var = rate / gamma
        eps = torch.randn(num_draws, d, d, generator=generator, dtype=torch.float64)
        chol = self._post_chol[node, psets]  # [N, d, d]
        w = self._post_mean[node, psets] + noise_var.sqrt()[..., None] * (chol @ eps[..., None]).squeeze(-1)
        # w[n, j, i] is the weight of parent i on node j; slots hold W[i, j] = w[n, j, i].
        weights = w.transpose(1, 2).reshape(num_draws, d * d)
        slots = torch.where(self._slot_masks.index_select(0, model_index), weights[:, self._slot_flat], 0.0)
        return Draws(model_index, torch.cat([slots, noise_var.log()], dim=-1))


@register_problem("linear-dag-d4")
class LinearDAG4(LinearDAG):
    """linear-dag on 4 nodes (543 DAGs): the same model, small enough for RJMCMC baselines to mix."""

    #: Compute seconds each method gets in the quick profile (equal-time leaderboard).
    time_budgets: ClassVar[dict[str, float]] = {"quick": 9.0}
    #: The default run's DAG problem.
    planned_in: ClassVar[tuple[str, ...]] = ("smoke", "quick", "paper")

    def __init__(self, num_nodes: int = 4, **config: Any) -> None:
        super().__init__(num_nodes=num_nodes, **config)
