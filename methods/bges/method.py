"""``bges``: bootstrap GES (Friedman et al. 1999; Chickering 2002), BayesDAG's quasi-Bayesian baseline (App. D).

Each of ``num_bootstraps`` (50, the paper's number) resamples the data's rows with replacement and runs Greedy
Equivalence Search on the resample; q(G) is the empirical distribution of the results. GES is causal-learn's
(``causallearn.search.ScoreBased.GES.ges``, py-why, pinned at 0.1.4.8) with its linear-Gaussian BIC score
(``local_score_BIC``, penalty lambda = 1/2: log-likelihood - (|Pa| + 1) / 2 log n per node).

Why this implementation and score: causal-learn is the maintained Python GES (its search is the reference
algorithm of Chickering 2002, forward then backward phases over equivalence classes), and it has no BGe score;
of its scores only BIC fits a linear-Gaussian model, and BIC is the BGe marginal likelihood's large-sample
(Laplace) approximation. The BayesDAG paper does not say which score its BGES used.

**From CPDAGs to DAGs** (the paper does not say how it did this): GES returns an equivalence class (a CPDAG).
Each bootstrap's result counts once, split evenly over the DAGs of its class (``expansion="class"``, the
default): the class is read exactly off the enumerated space, as the DAGs whose CPDAG equals the result. A
result that is not the CPDAG of any DAG (causal-learn can return a partially directed graph that its own
completion left unfinished) is split over its consistent extensions instead: the DAGs with its skeleton, its
directed edges and its v-structures. Results with neither are counted (``diagnostics["unmatched"]``) and left
out; a run where every bootstrap is unmatched fails. ``expansion="one"`` gives each bootstrap's weight to one
member, chosen uniformly at random, as a sampler of DAGs would.

The method needs an enumerated DAG space (the classes are looked up in it). causal-learn is an optional
dependency (``pip install -e ".[bges]"``); without it the method reports itself unsupported.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import time
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor

from suite.core.context import RunContext
from suite.core.method import Method, Result
from suite.core.problem import Problem
from suite.core.registry import register_method
from suite.core.types import ModelProbs
from suite.graphs.cpdag import cpdags
from suite.graphs.dag import NOT_DAG_REASON, DAGProblem

INSTALL_HINT = 'causal-learn is not installed: pip install -e ".[bges]"'
EXPANSIONS = ("class", "one")
#: The class lookup compares every bootstrap's result with every DAG's CPDAG: enumerated spaces up to this size.
MAX_MODELS = 100_000


def library_version() -> str | None:
    """The installed causal-learn version, or None when it cannot be imported."""
    try:
        import causallearn.search.ScoreBased.GES  # noqa: F401
    except ImportError:
        return None
    return importlib.metadata.version("causal-learn")


def cpdag_of_ges(graph: np.ndarray) -> Tensor:
    """causal-learn's ``GeneralGraph.graph`` ``[d, d]`` as a CPDAG in ``suite.graphs.cpdag``'s form (int64 ``[d, d]``).

    causal-learn marks i -> j by ``graph[j, i] = 1, graph[i, j] = -1`` and i - j by -1 at both ends, so ``c[i, j]
    = 1`` exactly where ``graph[i, j] = -1``.
    """
    return torch.as_tensor(np.asarray(graph) == -1).to(torch.int64)


def class_members(result: Tensor, all_cpdags: Tensor, all_dags: Tensor) -> Tensor:
    """Indices (into the enumerated space) of the DAGs ``result`` ``[d, d]`` stands for; empty if none."""
    exact = (all_cpdags == result).flatten(1).all(-1)
    if bool(exact.any()):
        return torch.nonzero(exact).flatten()
    skeleton = (result | result.T).bool()
    directed = (result & (1 - result.T)).bool()
    same_skeleton = ((all_dags | all_dags.transpose(1, 2)) == skeleton).flatten(1).all(-1)
    keeps_directed = (all_dags | ~directed).flatten(1).all(-1)
    candidates = torch.nonzero(same_skeleton & keeps_directed).flatten()
    if len(candidates) == 0:
        return candidates
    # The candidates' v-structures must be the result's: its directed edges into a common child from two
    # non-adjacent parents, the ones its CPDAG keeps (a DAG's compelled edges include them).
    wanted = _v_structures(directed[None], skeleton)[0]
    found = _v_structures(all_dags[candidates], skeleton)
    return candidates[(found == wanted).flatten(1).all(-1)]


def _v_structures(directed: Tensor, skeleton: Tensor) -> Tensor:
    """Bool ``[B, d, d, d]``: a -> c <- b with a, b non-adjacent, a != b, in each graph's directed edges."""
    d = skeleton.shape[-1]
    non_adjacent = ~skeleton & ~torch.eye(d, dtype=torch.bool)
    return directed[:, :, None, :] & directed[:, None, :, :] & non_adjacent[None, :, :, None]


@register_method("bges")
@dataclass(frozen=True)
class BootstrapGES(Method):
    """GES (causal-learn, Gaussian BIC) on bootstrap resamples; q(G) is the results' empirical distribution."""

    num_bootstraps: int | None = None
    expansion: str = "class"
    #: BIC's penalty per parameter in units of log n (causal-learn's lambda_value; 1/2 is the BIC).
    penalty: float = 0.5

    profiles: ClassVar[dict[str, dict[str, Any]]] = {
        "smoke": {"num_bootstraps": 5},
        "quick": {"num_bootstraps": 50},
        "paper": {"num_bootstraps": 50},
    }
    #: A comparator of BayesDAG's study: ``--methods all`` plans it only in the paper profile.
    planned_profiles: ClassVar[tuple[str, ...] | None] = ("paper",)

    def finalise(self, problem: Problem) -> Method:
        """A positive bootstrap count, a known expansion, a positive penalty."""
        value = self.num_bootstraps
        if value is None or isinstance(value, bool) or int(value) != value or int(value) <= 0:
            raise ValueError(f"{self.name}: num_bootstraps must be a positive integer, got {value}")
        if self.expansion not in EXPANSIONS:
            raise ValueError(f"{self.name}: unknown expansion {self.expansion!r}; valid: {', '.join(EXPANSIONS)}")
        if not (isinstance(self.penalty, int | float) and self.penalty > 0):
            raise ValueError(f"{self.name}: penalty must be a positive number, got {self.penalty}")
        return dataclasses.replace(self, num_bootstraps=int(value), penalty=float(self.penalty))

    def supports(self, problem: Problem) -> str | None:
        """DAG problems over an enumerated space (the classes are looked up in it), when causal-learn is installed."""
        if not isinstance(problem, DAGProblem):
            return NOT_DAG_REASON
        if problem.num_models is None or problem.num_models > MAX_MODELS:
            return f"the CPDAGs are expanded over an enumerated DAG space of at most {MAX_MODELS:,} models"
        if library_version() is None:
            return INSTALL_HINT
        return None

    def run(self, problem: Problem, context: RunContext) -> Result:
        """GES on each bootstrap resample until ``num_bootstraps`` (or the time budget); q(G) over their classes."""
        self.require_support(problem)
        assert isinstance(problem, DAGProblem)
        from causallearn.search.ScoreBased.GES import ges

        with context.timer.phase("setup"):
            data = problem.observations().to("cpu", torch.float64).numpy()
            all_models = problem.model_space.all_indices(torch.device("cpu"))
            all_dags = problem.adjacency(all_models).cpu().bool()
            all_cpdags = cpdags(all_dags)
            rng = np.random.default_rng(context.seed)
            generator = torch.Generator().manual_seed(context.seed)
        weights = torch.zeros(len(all_models), dtype=torch.float64)
        unmatched = 0
        classes: set[tuple[int, ...]] = set()
        started = time.perf_counter()

        def estimate() -> ModelProbs:
            kept = torch.nonzero(weights).flatten()
            return ModelProbs(all_models[kept], weights[kept] / weights.sum())

        loop = context.loop(f"bges {problem.name}", planned=int(self.num_bootstraps))
        with loop, context.timer.phase("sample"):
            while not loop.finished(ready=bool(weights.sum() > 0)):
                rows = rng.integers(0, data.shape[0], size=data.shape[0])
                record = ges(data[rows], score_func="local_score_BIC", parameters={"lambda_value": self.penalty})
                members = class_members(cpdag_of_ges(record["G"].graph), all_cpdags, all_dags)
                if len(members) == 0:
                    unmatched += 1
                    loop.advance()  # nothing new to score
                    continue
                classes.add(tuple(members.tolist()))
                if self.expansion == "class":
                    weights[members] += 1.0 / len(members)
                else:
                    weights[members[torch.randint(len(members), (1,), generator=generator)]] += 1.0
                loop.advance(estimate=estimate)
        done = loop.iteration
        diagnostics = {
            "bootstraps": done,
            "unmatched": unmatched,
            "distinct_classes": len(classes),
            "seconds": time.perf_counter() - started,
            "causal_learn_version": library_version(),
        }
        if weights.sum() == 0:
            return Result.failed(f"none of the {done} GES results is the CPDAG of a DAG", diagnostics=diagnostics)
        model_probs = estimate()
        context.snapshot(done, lambda: model_probs)
        return Result(model_probs=model_probs, diagnostics=diagnostics)
