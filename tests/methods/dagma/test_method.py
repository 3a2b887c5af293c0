"""dagma: one acyclic graph from a lambda sweep, oracle and honest selections, option checks."""

import sys

import pytest
import torch

from methods.dagma import method as dagma_method
from problems.linear_dag.problem import LinearDAG
from suite.dag import is_acyclic
from suite.method import Budget, Result
from suite.registry import make_method, make_problem

pytest.importorskip("dagma")

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def problem() -> LinearDAG:
    return make_problem("linear-dag-d4")


@pytest.fixture(scope="module")
def smoke(problem: LinearDAG) -> tuple[Result, bool, bool]:
    rng_before = torch.get_rng_state()
    dtype_before = torch.get_default_dtype()
    result = make_method("dagma", progress=False).run(problem, Budget("smoke"), 0, CPU)
    return result, torch.equal(torch.get_rng_state(), rng_before), torch.get_default_dtype() == dtype_before


def test_smoke_returns_one_acyclic_graph(problem: LinearDAG, smoke: tuple) -> None:
    result = smoke[0]
    assert result.status == "ok", result.reason
    assert result.metrics_scope == "task"
    assert result.model_probs.index.shape == (1,) and result.model_probs.prob.tolist() == [1.0]
    assert torch.equal(result.draws.model_index, result.model_probs.index)
    assert result.draws.theta.shape == (1, problem.dim_max) and not result.draws.theta.any()
    adjacency = problem.adjacency(result.model_probs.index)
    assert bool(is_acyclic(adjacency)[0])
    graph = torch.tensor(result.diagnostics["graph"], dtype=torch.bool)
    assert torch.equal(adjacency[0], graph)
    position = result.diagnostics["chosen_position"]
    assert result.diagnostics["graphs"][position] == result.diagnostics["graph"]
    assert len(result.diagnostics["lambdas"]) == len(result.diagnostics["edge_counts"]) == 4


def test_run_leaves_global_state_alone(smoke: tuple) -> None:
    # The package seeds and draws from torch's global RNG and calls torch.set_default_dtype.
    _, same_rng_state, same_default_dtype = smoke
    assert same_rng_state and same_default_dtype


def test_oracle_selection_picks_the_best_f1_against_the_truth(problem: LinearDAG, smoke: tuple) -> None:
    diagnostics = smoke[0].diagnostics
    truth = problem.true_adjacency
    scores = []
    for graph in diagnostics["graphs"]:
        g = torch.tensor(graph, dtype=torch.bool)
        tp, fp, fn = int((g & truth).sum()), int((g & ~truth).sum()), int((~g & truth).sum())
        precision, recall = tp / (tp + fp + 1e-8), tp / (tp + fn + 1e-8)
        scores.append(2 * precision * recall / (precision + recall + 1e-8))
    assert diagnostics["f1"] == pytest.approx(scores)
    best = max(range(len(scores)), key=lambda k: (scores[k], -k))  # ties: the smallest lambda
    assert diagnostics["chosen_position"] == best
    assert diagnostics["chosen_lambda"] == diagnostics["lambdas"][best]


def test_bic_selection_runs_without_the_true_graph() -> None:
    problem = LinearDAG(num_nodes=3, num_samples=50, data_seed=1)
    problem.true_adjacency = None
    assert "true graph" in make_method("dagma").supports(problem)
    method = make_method("dagma", selection="bic", num_lambdas=3, progress=False)
    assert method.supports(problem) is None
    result = method.run(problem, Budget("smoke"), 1, CPU)
    assert result.status == "ok", result.reason
    bic = result.diagnostics["bic"]
    assert result.diagnostics["chosen_position"] == bic.index(min(bic))
    assert "f1" not in result.diagnostics


def test_cycles_are_broken_at_their_weakest_edge() -> None:
    weights = torch.zeros(4, 4, dtype=torch.float64)
    weights[0, 1], weights[1, 2], weights[2, 0] = 0.5, 0.2, 0.9  # 0 -> 1 -> 2 -> 0
    weights[2, 3], weights[3, 3] = 0.05, 0.3  # an edge off the cycle (weaker than all) and a self-loop
    graph, removed = dagma_method.break_cycles(weights)
    assert removed == [[1, 2], [3, 3]]
    assert bool(is_acyclic(graph[None])[0]) and graph[2, 3] and graph[0, 1] and graph[2, 0]


def test_non_dag_problems_are_refused() -> None:
    reason = make_method("dagma").supports(make_problem("sas"))
    assert reason is not None and "DAG" in reason


def test_missing_package_gives_the_install_hint(problem: LinearDAG, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "dagma.nonlinear", None)  # makes ``import dagma.nonlinear`` fail
    assert "pip install dagma" in make_method("dagma").supports(problem)


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"selection": "magic"}, "valid: oracle-f1, bic"),
        ({"num_lambdas": 0}, "num_lambdas"),
        ({"lambda_min": 0.0}, "lambda_min"),
        ({"lambda_min": 2.0, "lambda_max": 1.0}, "lambda_min"),
        ({"lr": -1.0}, "lr"),
        ({"mu_factor": 2.0}, "mu_factor"),
        ({"dtype": "float16"}, "dtype"),
    ],
)
def test_bad_options_fail_before_any_work(
    problem: LinearDAG, bad: dict, message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_fit(*args: object, **kwargs: object) -> None:
        raise AssertionError("a fit started despite invalid options")

    monkeypatch.setattr(dagma_method, "_fit", no_fit)
    method = make_method("dagma", progress=False, **bad)
    with pytest.raises(ValueError, match=message):
        method.settings(problem, Budget("smoke"))
    with pytest.raises(ValueError, match=message):
        method.run(problem, Budget("smoke"), 0, CPU)


def test_same_seed_same_fit(problem: LinearDAG) -> None:
    method = make_method("dagma", num_lambdas=1, lambda_min=0.01, lambda_max=0.01, progress=False)
    runs = [method.run(problem, Budget("smoke"), 3, CPU).diagnostics["weights"] for _ in range(2)]
    assert runs[0] == runs[1]


def test_graph_on_a_two_word_dag_space_is_a_model_of_that_graph() -> None:
    """On dag-mlp (models are (P, U) rows of two int64 words) the returned model's adjacency is DAGMA's graph."""
    from problems.dag_mlp import SimulatedDAGMLP

    problem = SimulatedDAGMLP(num_nodes=4, hidden=2, num_samples=64)
    result = make_method("dagma", progress=False).run(problem, Budget("smoke"), 0, torch.device("cpu"))
    assert result.status == "ok", result.reason
    assert result.model_probs.index.shape == (1, 2)
    graph = torch.tensor(result.diagnostics["graph"], dtype=torch.bool)
    assert torch.equal(problem.adjacency(result.model_probs.index)[0], graph)
    assert set(problem.task_metrics(result.model_probs, result.draws)) >= {"edge_f1", "shd"}
