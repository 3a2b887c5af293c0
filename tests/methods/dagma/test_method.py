"""dagma: one acyclic graph from a lambda sweep, oracle and honest selections, option checks, trace and budget."""

import itertools
import sys

import pytest
import torch

from methods.dagma import method as dagma_method
from problems.linear_dag.problem import LinearDAG
from suite.core.context import RunContext
from suite.core.method import Result
from suite.core.registry import make_method, make_problem
from suite.graphs.dag import is_acyclic
from suite.run.runner import execute, resolve_and_run
from suite.scoring.trace import score_trace

pytest.importorskip("dagma")

CPU = torch.device("cpu")
SMOKE_STEPS_PER_LAMBDA = 150 + 300  # the smoke profile's two stages (warm_iter, max_iter)


def smoke_context(seed: int = 0, **kwargs: object) -> RunContext:
    return RunContext(seed=seed, profile="smoke", **kwargs)


@pytest.fixture(scope="module")
def problem() -> LinearDAG:
    return make_problem("linear-dag-d4")


@pytest.fixture(scope="module")
def smoke(problem: LinearDAG) -> tuple[Result, bool, bool, RunContext]:
    rng_before = torch.get_rng_state()
    dtype_before = torch.get_default_dtype()
    context = smoke_context()
    result = resolve_and_run(make_method("dagma"), problem, context)
    same_rng, same_dtype = torch.equal(torch.get_rng_state(), rng_before), torch.get_default_dtype() == dtype_before
    return result, same_rng, same_dtype, context


@pytest.mark.slow
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
    _, same_rng_state, same_default_dtype, _ = smoke
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


@pytest.mark.slow
def test_bic_selection_runs_without_the_true_graph() -> None:
    problem = LinearDAG(num_nodes=3, num_samples=50, data_seed=1)
    problem.true_adjacency = None
    assert "true graph" in make_method("dagma").supports(problem)
    method = make_method("dagma", selection="bic", num_lambdas=3)
    assert method.supports(problem) is None
    result = resolve_and_run(method, problem, smoke_context(1))
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
        ({"num_stages": 0}, "num_stages"),
        ({"warm_iter": 1.5}, "warm_iter"),
    ],
)
def test_bad_options_fail_before_any_work(
    problem: LinearDAG, bad: dict, message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_fit(*args: object, **kwargs: object) -> None:
        raise AssertionError("a fit started despite invalid options")

    monkeypatch.setattr(dagma_method, "_fit", no_fit)
    method = make_method("dagma", **bad)
    with pytest.raises(ValueError, match=message):
        method.resolve(problem, "smoke")
    with pytest.raises(ValueError, match=message):
        resolve_and_run(method, problem, smoke_context())


def test_same_seed_same_fit(problem: LinearDAG) -> None:
    method = make_method("dagma", num_lambdas=1, lambda_min=0.01, lambda_max=0.01)
    runs = [resolve_and_run(method, problem, smoke_context(3)).diagnostics["weights"] for _ in range(2)]
    assert runs[0] == runs[1]


@pytest.mark.slow
def test_graph_on_a_two_word_dag_space_is_a_model_of_that_graph() -> None:
    """On dag-mlp (models are (P, U) rows of two int64 words) the returned model's adjacency is DAGMA's graph."""
    from problems.dag_mlp import SimulatedDAGMLP

    problem = SimulatedDAGMLP(num_nodes=4, hidden=2, num_samples=64)
    result = resolve_and_run(make_method("dagma"), problem, smoke_context())
    assert result.status == "ok", result.reason
    assert result.model_probs.index.shape == (1, 2)
    graph = torch.tensor(result.diagnostics["graph"], dtype=torch.bool)
    assert torch.equal(problem.adjacency(result.model_probs.index)[0], graph)
    assert set(problem.task_metrics(result.model_probs, result.draws)) >= {"edge_f1", "shd"}


def test_snapshots_follow_the_sweep(problem: LinearDAG, smoke: tuple) -> None:
    """A snapshot after every lambda holds the graph chosen among the lambdas done so far; the last is the result."""
    result, _, _, context = smoke
    snapshots = context.snapshots
    assert len(snapshots) >= 5
    seconds, iterations = [s.seconds for s in snapshots], [s.iteration for s in snapshots]
    assert all(a < b for a, b in itertools.pairwise(seconds))
    assert all(a < b for a, b in itertools.pairwise(iterations))
    final = snapshots[-1].estimate.model_probs
    assert torch.equal(final.index, result.model_probs.index) and torch.equal(final.prob, result.model_probs.prob)
    assert iterations[-1] == 4 * SMOKE_STEPS_PER_LAMBDA
    f1 = result.diagnostics["f1"]
    graphs = torch.tensor(result.diagnostics["graphs"], dtype=torch.bool)
    by_iteration = {s.iteration: s.estimate.model_probs for s in snapshots}
    for done in range(1, 5):  # the oracle choice among the first ``done`` lambdas (ties: the smallest)
        estimate = by_iteration[done * SMOKE_STEPS_PER_LAMBDA]
        chosen = max(range(done), key=lambda k: (f1[k], -k))
        assert estimate.prob.tolist() == [1.0]
        assert torch.equal(problem.adjacency(estimate.index)[0], graphs[chosen])
    # The trace scored on the problem's own task metrics: every point has a graph, the last is the result's.
    trace = score_trace(problem, snapshots, "task")
    final_metrics = problem.task_metrics(result.model_probs, result.draws)
    for name in ("edge_f1", "shd"):
        column = trace["metrics"][name]
        assert None not in column and column[-1] == final_metrics[name].value
    assert trace["metrics"]["edge_f1"][-1] == pytest.approx(max(f1))
    assert max(trace["metrics"]["edge_f1"]) == pytest.approx(max(f1))  # the oracle F1 never falls along the sweep
    assert all(a <= b for a, b in itertools.pairwise(trace["metrics"]["edge_f1"]))


@pytest.fixture(scope="module")
def budgeted(problem: LinearDAG) -> tuple[dict, RunContext]:
    # torch imports torch._dynamo at a process's first optimiser (seconds on a loaded machine): done here, outside
    # the 3 s budget, so that the first lambda's share is not spent importing.
    torch.optim.Adam([torch.zeros(1, requires_grad=True)])
    method = make_method("dagma").resolve(problem, "smoke")
    context = smoke_context(time_budget_s=3.0)
    return execute(problem, method, context), context


@pytest.mark.slow
def test_time_budget_is_shared_by_the_lambdas(budgeted: tuple) -> None:
    record, _ = budgeted
    assert record["status"] == "ok", record["reason"]
    assert record["timings_s"]["method_total"] < 3.0 + 10.0  # generous: one step, one scoring and slack past it
    counts = record["counts"]
    for position in range(4):  # equal shares: every lambda ended at its milestone, its stages before it
        assert f"lambda_{position}" in counts and f"lambda_{position}_stage_0" in counts
        assert counts[f"lambda_{position}_stage_0"] < counts[f"lambda_{position}"]
    assert [counts[f"lambda_{k}"] for k in range(4)] == sorted(counts[f"lambda_{k}"] for k in range(4))
    assert record["diagnostics"]["lambdas_finished"] == 4
    assert record["diagnostics"]["adam_steps"] == counts["lambda_3"]
    trace = record["trace"]
    assert len(trace["seconds"]) >= 4 and None not in trace["metrics"]["edge_f1"]
    assert trace["metrics"]["edge_f1"][-1] == record["metrics"]["edge_f1"]["value"]


@pytest.mark.slow
def test_budgeted_run_replays_bitwise_from_its_counts(problem: LinearDAG, budgeted: tuple) -> None:
    record, timed = budgeted
    context = smoke_context(time_budget_s=3.0, replay=record["counts"])
    replayed = resolve_and_run(make_method("dagma"), problem, context)
    assert replayed.diagnostics["weights"] == record["diagnostics"]["weights"]
    assert replayed.diagnostics["bic"] == record["diagnostics"]["bic"]
    assert replayed.diagnostics["graphs"] == record["diagnostics"]["graphs"]
    assert [s.iteration for s in context.snapshots] == [s.iteration for s in timed.snapshots]
    assert context.counts["snapshots"] == record["counts"]["snapshots"]


def test_a_budget_too_small_for_one_lambda_fails_with_that_reason(problem: LinearDAG) -> None:
    # With 1e-4 s the first stage's milestone and the whole budget are spent after one Adam step: no lambda
    # finishes, so there is no graph to return.
    method = make_method("dagma").resolve(problem, "smoke")
    record = execute(problem, method, smoke_context(time_budget_s=1e-4))
    assert record["status"] == "failed"
    assert "time budget too small" in record["reason"] and "no lambda" in record["reason"]
