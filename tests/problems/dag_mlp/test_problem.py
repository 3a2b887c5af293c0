"""dag-mlp: parameter layout and mask rules (App. F), the log joint against a per-model loop, the simulator."""

import math

import pytest
import torch

from problems.dag_mlp import problem as dag_problem
from problems.dag_mlp.problem import DAGMLP, ParameterLayout, SachsDAGMLP, SimulatedDAGMLP

ACTIVATION_CHECKPOINT = dag_problem.checkpoint


def test_parameter_counts_match_the_authors_code() -> None:
    """549 for d = 10, H = 10 without b1; 385 for the Sachs d = 11, H = 5 with biases (spec section f)."""
    assert ParameterLayout(10, 10, bias=False).dim == 549
    assert ParameterLayout(11, 5, bias=True).dim == 385


def _small(bias: bool, rows: int = 40, seed: int = 0) -> SimulatedDAGMLP:
    return SimulatedDAGMLP(num_nodes=4, hidden=3, bias=bias, num_samples=rows, gamma=0.5, data_seed=seed)


@pytest.mark.parametrize("bias", [False, True])
def test_mask_rules(bias: bool) -> None:
    """W1 column i of position j iff U[i, j]; the rest of position j iff it has a parent."""
    problem = _small(bias)
    models = problem.model_space.sample_uniform(64, torch.Generator().manual_seed(0))
    mask = problem.mask(models)
    upper = problem.model_space.upper(models)
    h, per_parentless = problem.hidden, problem.hidden * (2 if bias else 1) + 1
    expected = upper.sum((1, 2)) * h + upper.any(1).sum(-1) * per_parentless
    assert torch.equal(mask.sum(-1), expected)
    lay = problem.layout
    for b in range(8):
        for j in range(1, 4):
            for i in range(j):
                assert bool(mask[b, lay.w1[j, 0, i]]) == bool(upper[b, i, j])
            assert bool(mask[b, lay.b2[j]]) == bool(upper[b, :, j].any())


def _log_joint_by_loop(problem: DAGMLP, model: torch.Tensor, theta: torch.Tensor) -> float:
    """One model at a time, straight from App. F: sort the data, then node by node in topological order."""
    space, lay = problem.model_space, problem.layout
    sigma = space.positions(model[None])[0]
    upper = space.upper(model[None])[0]
    order = torch.argsort(sigma)
    x = problem.data[:, order]  # column p = the node at position p
    d, h = problem.num_nodes, problem.hidden
    total = -0.5 * x.numel() * math.log(2 * math.pi)
    for j in range(d):
        f = torch.zeros(x.shape[0], dtype=torch.float64)
        if j > 0 and bool(upper[:, j].any()):
            w1 = torch.stack([torch.stack([theta[lay.w1[j, hh, i]] for i in range(j)]) for hh in range(h)])
            w1 = w1 * upper[:j, j].to(torch.float64)
            b1 = theta[lay.b1[j]] if problem.bias else torch.zeros(h, dtype=torch.float64)
            f = torch.relu(x[:, :j] @ w1.T + b1) @ theta[lay.w2[j]] + theta[lay.b2[j]]
        total += float(-0.5 * ((x[:, j] - f) ** 2).sum())
    mask = problem.mask(model[None])[0]
    total += float((-0.5 * theta[mask] ** 2 - 0.5 * math.log(2 * math.pi)).sum())
    edges = int(upper.sum())
    return total - math.lgamma(d + 1) - space.num_edge_bits * math.log(2) - problem.gamma * edges


@pytest.mark.parametrize("bias", [False, True])
def test_log_joint_matches_a_per_model_loop(bias: bool) -> None:
    problem = _small(bias)
    gen = torch.Generator().manual_seed(1)
    models = problem.model_space.sample_uniform(12, gen)
    theta = torch.randn(12, problem.dim_max, generator=gen, dtype=torch.float64)
    got = problem.log_joint(models, theta)
    expected = torch.tensor(
        [_log_joint_by_loop(problem, m, t) for m, t in zip(models, theta, strict=True)], dtype=torch.float64
    )
    torch.testing.assert_close(got, expected.to(got.dtype), rtol=1e-10, atol=1e-8)


@pytest.mark.parametrize("checkpoint_bytes", [0, 2**40])
def test_chunked_likelihood_and_its_gradient_match_one_chunk(
    monkeypatch: pytest.MonkeyPatch, checkpoint_bytes: int
) -> None:
    """Chunks of rows, with activations recomputed in the backward pass (bytes limit 0) or kept, change nothing."""
    problem = _small(True, rows=50)
    gen = torch.Generator().manual_seed(2)
    models = problem.model_space.sample_uniform(6, gen)
    theta = torch.randn(6, problem.dim_max, generator=gen, dtype=torch.float64, requires_grad=True)
    whole = problem.log_joint(models, theta)
    (grad_whole,) = torch.autograd.grad(whole.sum(), theta)
    monkeypatch.setattr(dag_problem, "CHUNK_ROWS", 7)
    monkeypatch.setattr(dag_problem, "CHECKPOINT_BYTES", checkpoint_bytes)
    calls = []
    monkeypatch.setattr(dag_problem, "checkpoint", lambda *a, **k: calls.append(1) or ACTIVATION_CHECKPOINT(*a, **k))
    chunked = problem.log_joint(models, theta)
    (grad_chunked,) = torch.autograd.grad(chunked.sum(), theta)
    assert len(calls) == (8 if checkpoint_bytes == 0 else 0)  # 50 rows in chunks of 7
    torch.testing.assert_close(chunked, whole)
    torch.testing.assert_close(grad_chunked, grad_whole)


def test_model_prior_is_normalised_without_penalty() -> None:
    """gamma = 0: p(P, U) sums to 1 over all 3! x 2^3 pairs on 3 nodes."""
    problem = SimulatedDAGMLP(num_nodes=3, hidden=2, num_samples=8)
    models = torch.tensor([[r, b] for r in range(6) for b in range(8)])
    assert float(problem.log_model_prior(models).exp().sum()) == pytest.approx(1.0, abs=1e-12)


def test_simulated_data_follow_the_model_at_the_true_parameters() -> None:
    """Residuals under the true (P, U, theta) are N(0, sigma^2): mean square within 5 SEs of 1 (10,240 values)."""
    problem = SimulatedDAGMLP()
    d, h = problem.num_nodes, problem.hidden
    model, theta = problem.true_model_index[None], problem.true_theta[None]
    ll = problem.log_likelihood(model, theta)
    n = problem.data.shape[0]
    mean_square = float(-2 * (ll + 0.5 * n * d * math.log(2 * math.pi)) / (n * d))
    assert abs(mean_square - 1.0) < 5 * math.sqrt(2 / (n * d))
    assert problem.dim_max == (h * sum(j + 1 for j in range(1, d)) + d - 1)
    assert torch.equal(problem.true_adjacency, problem.adjacency(model)[0])


def test_smaller_data_sets_are_the_first_rows() -> None:
    small, large = SimulatedDAGMLP(num_samples=16), SimulatedDAGMLP(num_samples=1024)
    assert torch.equal(small.observations(), large.observations()[:16])


def test_true_graph_scores_perfectly() -> None:
    problem = _small(False)
    from suite.core.types import Draws

    draws = Draws(problem.true_model_index[None].repeat(5, 1), torch.zeros(5, problem.dim_max))
    metrics = problem.task_metrics(None, draws)
    assert metrics["edge_f1"].value == pytest.approx(1.0, abs=1e-6) and metrics["shd"].value == 0


def test_sachs_data_are_standardised_with_one_global_scale() -> None:
    problem = SachsDAGMLP()
    if problem.unavailable_reason():
        pytest.skip(problem.unavailable_reason())
    x = problem.observations()
    assert x.shape == (7466, 11) and int(problem.true_adjacency.sum()) == 18
    assert float(x.mean(0).abs().max()) < 1e-10 and float(x.std(unbiased=False)) == pytest.approx(1.0)
    assert problem.dim_max == 385 and problem.gamma == 200.0


def test_positions_context_tells_apart_encodings_of_one_graph() -> None:
    """Two topological orders of one DAG share the adjacency context but not the ``positions`` one."""
    problem = SimulatedDAGMLP(num_nodes=3, hidden=2, flow_context="positions")
    space = problem.model_space
    # The single edge node 0 -> node 1 with node 2 placed last (order 0, 1, 2) or in between (order 0, 2, 1).
    sigma = torch.tensor([[0, 1, 2], [0, 2, 1]])  # position of each node
    upper = torch.zeros(2, 3, 3, dtype=torch.bool)
    upper[0, 0, 1] = upper[1, 0, 2] = True
    models = space.encode(sigma, upper)
    assert torch.equal(problem.adjacency(models)[0], problem.adjacency(models)[1])
    adjacency_context = SimulatedDAGMLP(num_nodes=3, hidden=2).context(models)
    assert torch.equal(adjacency_context[0], adjacency_context[1])
    context = problem.context(models)
    assert context.shape == (2, problem.context_dim) == (2, 18)
    assert not torch.equal(context[0], context[1])
    assert torch.equal(context[:, :9].reshape(2, 3, 3).bool(), upper)
    assert torch.equal(context[:, 9:].reshape(2, 3, 3).argmax(-1), sigma)
    with pytest.raises(ValueError, match="valid: adjacency, positions"):
        SimulatedDAGMLP(num_nodes=3, hidden=2, flow_context="graph")
