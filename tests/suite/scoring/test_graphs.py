"""``graph_task_metrics``: the DAG metrics every DAG problem's runs are scored with (here: E-CPDAG-SHD)."""

import pytest
import torch

from suite.core.registry import make_problem
from suite.core.types import ModelProbs
from suite.graphs.cpdag import cpdag, cpdag_shd
from suite.scoring.graphs import graph_task_metrics


def _q(problem, weights: dict[str, float]) -> ModelProbs:  # type: ignore[no-untyped-def]
    index = torch.tensor([problem.model_space.index(name) for name in weights])
    return ModelProbs(index, torch.tensor(list(weights.values()), dtype=torch.float64))


def test_a_markov_equivalent_graph_costs_nothing_in_e_cpdag_shd_but_counts_in_e_shd() -> None:
    problem = make_problem("linear-dag-d4")  # true graph 0->1, 0->2, 1->3: no v-structure
    assert problem.true_adjacency.nonzero().tolist() == [[0, 1], [0, 2], [1, 3]]
    equivalent = "1->0,0->2,1->3"  # the reversal makes no collider either: the same class
    metrics = graph_task_metrics(problem, _q(problem, {equivalent: 1.0}), None)
    assert metrics["expected_cpdag_shd"].value == 0.0
    assert metrics["expected_shd"].value == 1.0


def test_e_cpdag_shd_is_the_weighted_mean_over_q_s_graphs() -> None:
    problem = make_problem("linear-dag-d4")
    weights = {"0->1,0->2,1->3": 0.5, "0->1,2->1,1->3": 0.3, "empty": 0.2}  # truth, a collider at 1, nothing
    metrics = graph_task_metrics(problem, _q(problem, weights), None)
    reference = cpdag(problem.true_adjacency)
    by_hand = sum(
        w * cpdag_shd(cpdag(problem.model_space.adjacency(torch.tensor([problem.model_space.index(g)]))[0]), reference)
        for g, w in weights.items()
    )
    # The collider 0->1<-2 compels 1->3 (Meek R1): 0-1, 1-3 directed, 1-2 added, 0-2 gone: 4; empty: 3.
    assert by_hand == pytest.approx(0.3 * 4 + 0.2 * 3)
    assert metrics["expected_cpdag_shd"].value == pytest.approx(by_hand, abs=1e-12)


def test_a_cyclic_true_graph_gets_the_other_metrics_but_no_e_cpdag_shd() -> None:
    """Sachs's consensus network has a cycle: it has no CPDAG, so E-CPDAG-SHD is left out, the rest is scored."""
    problem = make_problem("linear-dag-d4")
    cyclic = problem.true_adjacency.clone()
    cyclic[3, 0] = True  # 0 -> 1 -> 3 -> 0
    problem.true_adjacency = cyclic
    metrics = graph_task_metrics(problem, _q(problem, {"0->1,0->2,1->3": 1.0}), None)
    assert "expected_cpdag_shd" not in metrics
    assert metrics["expected_shd"].value == 1.0
