"""BayesDAG's d = 5 linear-Gaussian benchmark: the exact posterior over all 29,281 DAGs under the BGe score.

The setting of BayesDAG (Annadani et al. 2023) Sec. 6.1.1 and App. D.2-D.3, built as the authors' code builds it
(each choice an option: ``er_edges``, ``sf_orientation``, ``graph_prior``, ``random_sign``): a random ER or SF graph
with ``d`` edges in expectation, edge weights uniform in [0.5, 1.5], unequal noise variances from InverseGamma(1.5, 1),
N = 500 training rows and 100 held-out rows, all from ``data_seed``. The posterior over DAGs is

    p(G | D) ∝ p(G) p(D | G),   p(D | G) = BGe marginal likelihood,

computed exactly by enumerating the DAGs (BGe: alpha_mu = 1, alpha_w = d + 2, nu = 0, the authors' values, options).
``graph_prior="authors"`` is the prior of their exact posterior, QUIRK included (on ER at p = 1/2 it is proportional
to 3^-E instead of uniform), kept as coded because their Fig. 2 was scored against it. Both priors are sums of
per-node terms in the parent-set size, so ``local_log_scores`` carries them and order MCMC sees the same posterior;
the prior is normalised over the enumerated DAGs (``log_model_prior``).

BGe integrates the SCM's parameters out; ``theta`` is one auxiliary coordinate, standard normal under every model and
independent of the graph, so ``log_joint(G, theta) = log p(G) + log BGe(D | G) + log N(theta; 0, 1)`` has exactly the
BGe posterior as its graph marginal (exact entropy and evidence stay known); it tells nothing about the SCM.
Details: docs/problems.md, "linear-dag-bge in detail (`problems/linear_dag_bge/problem.py`)".
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
from torch import Tensor

from problems.linear_dag_bge.bge import BGe
from problems.linear_dag_bge.data import ER_EDGES, GRAPH_KINDS, SF_ORIENTATIONS, random_scm
from suite.core.problem import Problem
from suite.core.registry import register_problem
from suite.core.tensor_ops import DeviceCache
from suite.core.types import Draws, Estimate, ModelProbs
from suite.graphs.dag_space import MAX_NODES, DAGSpace
from suite.graphs.metrics import HIGHER_IS_BETTER
from suite.scoring.graphs import graph_task_metrics

LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)
#: Entropy of N(0, 1): the auxiliary coordinate's share of the joint entropy.
STD_NORMAL_ENTROPY = 0.5 * math.log(2 * math.pi * math.e)
#: Graph priors of the exact posterior (see the module docstring).
GRAPH_PRIORS = ("authors", "uniform")


def parent_count_log_prior(graph_prior: str, graph_type: str, num_nodes: int, expected_edges: float) -> Tensor:
    """float64 ``[d + 1]``: the unnormalised log prior term of a node with l = 0..d parent bits (p(G) is their sum;
    l = d only indexes the local-score table's impossible sets, which hold the node itself)."""
    if graph_prior not in GRAPH_PRIORS:
        raise ValueError(f"unknown graph_prior {graph_prior!r}; valid: {', '.join(GRAPH_PRIORS)}")
    parents = torch.arange(num_nodes + 1, dtype=torch.float64)
    if graph_prior == "uniform":
        return torch.zeros(num_nodes + 1, dtype=torch.float64)
    if graph_type == "sf":
        return -3.0 * torch.log1p(parents)
    # ER as the authors' code computes it: E log p + (N - E) log1p(p) = E (log p - log1p(p)) + const.
    p = expected_edges / (num_nodes * (num_nodes - 1) / 2)
    if p == 0:  # only the empty graph has prior mass
        return torch.where(parents == 0, 0.0, -math.inf).to(torch.float64)
    return parents * (math.log(p) - math.log1p(p))


def sampled_mmd(graphs_q: Tensor, graphs_p: Tensor) -> float:
    """The BayesDAG code's MMD estimate between two equal-sized graph samples ``[S, d, d]`` (``mmd_true_posterior``).

    Kernel 1 - H / d^2 (H over all d^2 entries); the means of k(q, q'), k(p, p') and k(q, p) leave out the S pairs
    (i, i) of each S x S matrix, as their code does (unbiased for MMD^2); the square root is returned. Where the
    estimate of MMD^2 is negative their code returns NaN; here it is 0.
    """
    if graphs_q.shape != graphs_p.shape or graphs_q.ndim != 3 or graphs_q.shape[0] < 2:
        raise ValueError(
            f"need two [S, d, d] samples of one shape, S >= 2; got {tuple(graphs_q.shape)}, {tuple(graphs_p.shape)}"
        )
    s, d = graphs_q.shape[0], graphs_q.shape[-1]
    q, p = graphs_q.reshape(s, -1).to(torch.float64), graphs_p.reshape(s, -1).to(torch.float64)

    def off_diagonal_mean(a: Tensor, b: Tensor) -> Tensor:
        # k(a, b) = 1 - H / d^2 = (a.b + (1 - a).(1 - b)) / d^2 for 0/1 vectors
        kernel = (a @ b.T + (1 - a) @ (1 - b).T) / d**2
        return (kernel.sum() - kernel.diagonal().sum()) / (s * (s - 1))

    mmd2 = off_diagonal_mean(q, q) + off_diagonal_mean(p, p) - 2 * off_diagonal_mean(q, p)
    return math.sqrt(max(float(mmd2), 0.0))


class _LinearDAGBGe(Problem):
    """Exact BGe posterior over all DAGs on d <= 5 nodes, data from a random linear SCM (BayesDAG Sec. 6.1.1)."""

    #: Compute seconds each method gets in the quick profile (equal-time comparison).
    time_budgets: ClassVar[dict[str, float]] = {"quick": 25.0}
    #: ``--problems all`` plans the 30-data-set study only in ``paper``; named, it runs in any profile.
    planned_in: ClassVar[tuple[str, ...]] = ("paper",)
    #: Data sets (``data_seed`` 0..n-1) planned per profile: BayesDAG Fig. 2 averages over 30.
    data_sets: ClassVar[dict[str, int]] = {"smoke": 1, "quick": 3, "paper": 30}
    main_metric: ClassVar[str] = "mmd"
    higher_is_better: ClassVar[frozenset[str]] = HIGHER_IS_BETTER
    #: Graph family of the registered variant.
    default_graph_type: ClassVar[str] = "er"

    def __init__(
        self,
        graph_type: str | None = None,
        num_nodes: int = 5,
        expected_edges: float | None = None,
        num_samples: int = 500,
        num_heldout: int = 100,
        random_sign: bool = False,
        alpha_mu: float = 1.0,
        alpha_w: float | None = None,
        er_edges: str = "exact",
        sf_orientation: str = "new_to_old",
        graph_prior: str = "authors",
        mmd_samples: int = 0,
        data_seed: int = 0,
    ) -> None:
        graph_type = self.default_graph_type if graph_type is None else graph_type
        if graph_type not in GRAPH_KINDS:
            raise ValueError(f"unknown graph_type {graph_type!r}; valid: {', '.join(GRAPH_KINDS)}")
        if graph_type != self.default_graph_type:
            raise ValueError(
                f"graph_type is {self.default_graph_type!r} in this variant, got {graph_type!r}; "
                f"the {graph_type.upper()} graphs are problem linear-dag-bge-{graph_type}"
            )
        if not 2 <= num_nodes <= MAX_NODES:
            raise ValueError(f"num_nodes must lie in [2, {MAX_NODES}] (all DAGs are enumerated), got {num_nodes}")
        if num_samples < 2 or num_heldout < 0:
            raise ValueError(f"num_samples >= 2 and num_heldout >= 0 required, got {num_samples}, {num_heldout}")
        if er_edges not in ER_EDGES:
            raise ValueError(f"unknown er_edges {er_edges!r}; valid: {', '.join(ER_EDGES)}")
        if sf_orientation not in SF_ORIENTATIONS:
            raise ValueError(f"unknown sf_orientation {sf_orientation!r}; valid: {', '.join(SF_ORIENTATIONS)}")
        if graph_prior not in GRAPH_PRIORS:
            raise ValueError(f"unknown graph_prior {graph_prior!r}; valid: {', '.join(GRAPH_PRIORS)}")
        if isinstance(mmd_samples, bool) or int(mmd_samples) != mmd_samples or mmd_samples < 0 or mmd_samples == 1:
            raise ValueError(f"mmd_samples must be 0 (exact MMD only) or an integer >= 2, got {mmd_samples}")
        expected_edges = float(num_nodes if expected_edges is None else expected_edges)
        if not 0 <= expected_edges <= num_nodes * (num_nodes - 1) / 2:
            raise ValueError(f"expected_edges must lie in [0, d(d-1)/2], got {expected_edges}")
        self._config = {
            "graph_type": graph_type,
            "num_nodes": num_nodes,
            "expected_edges": expected_edges,
            "num_samples": num_samples,
            "num_heldout": num_heldout,
            "random_sign": bool(random_sign),
            "alpha_mu": float(alpha_mu),
            "alpha_w": None if alpha_w is None else float(alpha_w),
            "er_edges": er_edges,
            "sf_orientation": sf_orientation,
            "graph_prior": graph_prior,
            "mmd_samples": int(mmd_samples),
            "data_seed": int(data_seed),
        }
        d = self.num_nodes = num_nodes
        generator = torch.Generator().manual_seed(int(data_seed))
        self.scm = random_scm(
            graph_type,
            d,
            expected_edges,
            generator,
            bool(random_sign),
            er_edges=er_edges,
            sf_orientation=sf_orientation,
        )
        rows = self.scm.sample(num_samples + num_heldout, generator)
        self.data, self.heldout = rows[:num_samples], rows[num_samples:]
        self.true_adjacency = self.scm.adjacency.clone()
        self.score = BGe(self.data, alpha_mu=alpha_mu, alpha_w=alpha_w)  # ValueError names a bad alpha
        self.model_space = DAGSpace(d)
        self.dim_max = 1
        adjacency = self.model_space.adjacency(self.model_space.all_indices())
        powers = 2 ** torch.arange(d, dtype=torch.int64)
        #: parent_sets[K, d]: bitmask of each node's parents in each DAG.
        self._parent_sets = (adjacency.to(torch.int64) * powers[None, :, None]).sum(1)
        table = self.score.local_score_table()
        self._log_likelihood = table.gather(1, self._parent_sets.T).sum(0)  # log BGe(D | G), [K]
        #: Prior term of each (node, parent-set bitmask), by the set's size.
        sizes = torch.tensor([bin(mask).count("1") for mask in range(2**d)])
        self._local_prior = parent_count_log_prior(graph_prior, graph_type, d, expected_edges)[sizes].expand(d, -1)
        unnormalised = self._local_prior.gather(1, self._parent_sets.T).sum(0)
        self._log_prior = unnormalised - torch.logsumexp(unnormalised, 0)
        log_joint = self._log_prior + self._log_likelihood
        self._log_evidence = float(torch.logsumexp(log_joint, 0))
        self._model_probs = torch.softmax(log_joint, 0)
        self._device = DeviceCache(log_graph_joint=log_joint, log_prior=self._log_prior)

    # ------------------------------------------------------ suite.graphs.dag.DAGProblem
    def adjacency(self, model_index: Tensor) -> Tensor:
        """Bool adjacency matrices ``[B, d, d]`` of the models (``A[i, j]``: edge i -> j)."""
        return self.model_space.adjacency(model_index)

    def model_index_of(self, adjacency: Tensor) -> Tensor:
        """int64 ``[B]``: the index of each DAG ``[B, d, d]``; ValueError naming the rows that are not DAGs."""
        return self.model_space.index_of_adjacency(adjacency)

    def observations(self) -> Tensor:
        """The N training rows, float64 ``[N, d]`` (a copy; the held-out rows are ``heldout``)."""
        return self.data.clone()

    def local_log_scores(self) -> Tensor:
        """``[d, 2^d]``: BGe local score plus the graph prior's term of every (node, parent-set bitmask)."""
        return self.score.local_score_table() + self._local_prior

    # ------------------------------------------------------------------ contract
    def config(self) -> dict[str, Any]:
        """Constructor arguments."""
        return dict(self._config)

    def mask(self, model_index: Tensor) -> Tensor:
        """The one auxiliary coordinate, active in every model."""
        return torch.ones(len(model_index), 1, dtype=torch.bool, device=model_index.device)

    def log_model_prior(self, model_index: Tensor) -> Tensor:
        """log p(G): ``graph_prior`` normalised over the DAGs."""
        return self._device.get("log_prior", model_index.device).index_select(0, model_index)

    def log_joint_with(self, xp: Any, model_index: Any, theta: Any) -> Any:
        """log p(G) + log BGe(D | G) + log N(theta_0; 0, 1)."""
        graph = xp.take(xp.constant(self._device, "log_graph_joint", theta), model_index)
        return xp.nan_to_neg_inf(graph + xp.row_sum(-0.5 * theta * theta - LOG_SQRT_2PI))

    def log_prior_with(self, xp: Any, model_index: Any, theta: Any) -> Any:
        """log N(theta_0; 0, 1): the auxiliary coordinate's prior (the BGe term is all likelihood)."""
        return xp.nan_to_neg_inf(xp.row_sum(-0.5 * theta * theta - LOG_SQRT_2PI))

    def sample_prior(self, model_index: Tensor, generator: torch.Generator) -> Tensor:
        """theta_0 ~ N(0, 1)."""
        return torch.randn(len(model_index), 1, generator=generator, dtype=torch.float64)

    # --------------------------------------------------------------- ground truth
    def log_likelihood(self) -> Tensor:
        """log BGe(D | G) of every DAG, ``[K]``."""
        return self._log_likelihood.clone()

    def reference_model_probs(self) -> ModelProbs:
        """The exact posterior over all DAGs."""
        return ModelProbs.from_dense(self._model_probs)

    def reference_draws(self, num_draws: int, generator: torch.Generator) -> Draws:
        """Exact draws: G from its posterior, theta_0 ~ N(0, 1)."""
        model_index = torch.multinomial(self._model_probs, num_draws, replacement=True, generator=generator)
        return Draws(model_index, torch.randn(num_draws, 1, generator=generator, dtype=torch.float64))

    def exact_log_evidence(self) -> float:
        """log sum_G p(G) BGe(D | G) (the auxiliary coordinate integrates to one)."""
        return self._log_evidence

    def exact_entropy(self) -> float:
        """H(G) + H(N(0, 1))."""
        probs = self._model_probs
        return float(-(probs * torch.log(probs.clamp_min(1e-300))).sum()) + STD_NORMAL_ENTROPY

    def task_metrics(self, model_probs: ModelProbs | None, draws: Draws | None) -> dict[str, Estimate]:
        """MMD to the exact posterior, E-CPDAG-SHD, edge F1, SHD, E-SHD, Brier and AUROC against the true graph.

        With ``mmd_samples`` S > 0 also ``mmd_sampled`` (the authors' estimator): S graphs of the method (drawn from
        its q when it lists one, else its first S draws) against S exact draws, from a generator seeded by data_seed.
        """
        metrics = graph_task_metrics(self, model_probs, draws, exact=self.reference_model_probs())
        samples = self._config["mmd_samples"]
        if samples and (model_probs is not None or (draws is not None and len(draws.model_index) >= samples)):
            generator = torch.Generator().manual_seed(self._config["data_seed"])
            if model_probs is not None:
                pick = torch.multinomial(model_probs.prob.to(torch.float64), samples, True, generator=generator)
                mine = model_probs.index[pick]
            else:
                mine = draws.model_index[:samples].cpu()
            truth = torch.multinomial(self._model_probs, samples, replacement=True, generator=generator)
            metrics["mmd_sampled"] = Estimate(sampled_mmd(self.adjacency(mine), self.adjacency(truth)))
        return metrics


@register_problem("linear-dag-bge-er")
class LinearDAGBGeER(_LinearDAGBGe):
    """BayesDAG Fig. 2, ER graphs: exact BGe posterior over the 29,281 DAGs on 5 nodes."""

    default_graph_type: ClassVar[str] = "er"


@register_problem("linear-dag-bge-sf")
class LinearDAGBGeSF(_LinearDAGBGe):
    """BayesDAG Fig. 2, scale-free graphs: exact BGe posterior over the 29,281 DAGs on 5 nodes."""

    default_graph_type: ClassVar[str] = "sf"
