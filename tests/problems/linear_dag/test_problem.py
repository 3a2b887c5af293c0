"""linear-dag: closed forms against independent answers."""

import math

import numpy as np
import pytest
import torch
from scipy import stats

from problems.linear_dag.problem import LinearDAG
from suite.core.backend import TORCH
from suite.core.registry import make_problem
from suite.core.types import ModelProbs
from suite.graphs.dag import DAGProblem, is_acyclic
from suite.graphs.dag_space import codes_to_adjacency, enumerate_dags


@pytest.fixture(scope="module")
def dag() -> LinearDAG:
    return LinearDAG(num_nodes=4, num_samples=40, edge_penalty=0.5, coef_scale=0.8, data_seed=3)


def test_node_evidence_matches_the_student_t_marginal(dag: LinearDAG) -> None:
    # Integrating w and s out of the normal-inverse-gamma regression gives
    # x_j ~ t_{2 a0}(0, (b0 / a0) (I + c^2 X_Pa X_Pa^T)) (an independent closed form).
    a0, b0, c2 = 1.5, 1.0, 0.8**2
    x = dag.data.numpy()
    for j, parents in ((0, []), (1, [0]), (3, [0, 2]), (2, [0, 1, 3])):
        xp = x[:, parents]
        shape = (b0 / a0) * (np.eye(len(x)) + c2 * xp @ xp.T)
        expected = stats.multivariate_t(np.zeros(len(x)), shape, df=2 * a0).logpdf(x[:, j])
        pset = sum(1 << i for i in parents)
        assert dag._local_log_evidence[j, pset].item() == pytest.approx(expected, abs=1e-8)


def test_log_joint_minus_log_posterior_is_the_log_evidence(dag: LinearDAG) -> None:
    # For any theta: log p(D, theta, G) - log p(theta | D, G) = log p(G) + log p(D | G).
    gen = torch.Generator().manual_seed(0)
    models = torch.randint(0, dag.num_models, (50,), generator=gen)
    theta = torch.randn(50, dag.dim_max, generator=gen, dtype=torch.float64)
    d, a_n = dag.num_nodes, dag.post_shape
    psets = dag._parent_sets[models]
    node = torch.arange(d).expand(50, d)
    log_s = theta[:, dag.num_slots :]
    weights = torch.zeros(50, d * d, dtype=torch.float64)
    weights[:, dag._slot_flat] = torch.where(dag.mask(models)[:, : dag.num_slots], theta[:, : dag.num_slots], 0.0)
    w = weights.view(50, d, d).transpose(1, 2)  # w[n, j, i]: weight of parent i on node j
    log_post = torch.zeros(50, dtype=torch.float64)
    for n in range(50):
        for j in range(d):
            parents = [i for i in range(d) if (int(psets[n, j]) >> i) & 1]
            rate = dag._post_rate[j, psets[n, j]].item()
            s = math.exp(log_s[n, j])
            # log s ~ log-InverseGamma(a_n, rate) density (with the Jacobian s)
            log_post[n] += stats.invgamma(a_n, scale=rate).logpdf(s) + log_s[n, j]
            if parents:
                chol = dag._post_chol[j, psets[n, j]][parents][:, parents]
                cov = s * (chol @ chol.T).numpy()
                mean = dag._post_mean[j, psets[n, j], parents].numpy()
                log_post[n] += stats.multivariate_normal(mean, cov).logpdf(w[n, j, parents].numpy())
    expected = dag._log_joint_evidence[models]
    torch.testing.assert_close(dag.log_joint(models, theta) - log_post, expected, rtol=1e-9, atol=1e-8)
    del node


def test_exact_draws_have_the_posterior_moments(dag: LinearDAG) -> None:
    draws = dag.reference_draws(200_000, torch.Generator().manual_seed(1))
    top = int(torch.argmax(dag._model_probs))
    theta = draws.theta[draws.model_index == top]
    psets = dag._parent_sets[top]
    noise = theta[:, dag.num_slots :].exp()
    for j in range(dag.num_nodes):
        rate = dag._post_rate[j, psets[j]].item()
        mean_s = rate / (dag.post_shape - 1)
        sd_s = mean_s / math.sqrt(dag.post_shape - 2)
        assert abs(noise[:, j].mean().item() - mean_s) < 5 * sd_s / math.sqrt(len(theta))
    adjacency = dag.model_space.adjacency(torch.tensor([top]))[0]
    for k, (i, j) in enumerate(dag.model_space.slots):
        if adjacency[i, j]:
            expected = dag._post_mean[j, psets[j], i].item()
            sd = theta[:, k].std().item()
            assert abs(theta[:, k].mean().item() - expected) < 5 * sd / math.sqrt(len(theta))


def test_model_probabilities_follow_evidence_and_prior(dag: LinearDAG) -> None:
    probs = dag.reference_model_probs().dense(dag.num_models)
    assert probs.sum().item() == pytest.approx(1.0, abs=1e-12)
    log_ratio = dag.log_evidence() + dag.log_model_prior(dag.model_space.all_indices())
    torch.testing.assert_close(probs.log() - probs.log()[0], log_ratio - log_ratio[0])
    edges = dag._slot_masks.sum(-1).double()
    prior = dag.log_model_prior(dag.model_space.all_indices())
    torch.testing.assert_close(prior - prior[0], -0.5 * edges)


def test_log_joint_minus_prior_is_the_gaussian_likelihood(dag: LinearDAG) -> None:
    # log p(D, theta, G) - log p(G) - log p(theta | G) = sum_j log N(x_j; X W_j, s_j), computed here with scipy.
    gen = torch.Generator().manual_seed(4)
    models = torch.randint(0, dag.num_models, (20,), generator=gen)
    theta = dag.sample_prior(models, gen)
    d = dag.num_nodes
    weights = torch.zeros(20, d * d, dtype=torch.float64)
    weights[:, dag._slot_flat] = theta[:, : dag.num_slots]
    x = dag.data.numpy()
    expected = []
    for n in range(20):
        w = weights[n].view(d, d).numpy()
        s = np.exp(theta[n, dag.num_slots :].numpy())
        expected.append(stats.norm(x @ w, np.sqrt(s)).logpdf(x).sum())
    got = dag.log_joint(models, theta) - dag.log_model_prior(models) - dag.log_prior_with(TORCH, models, theta)
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-10)


def test_prior_draws_follow_the_prior(dag: LinearDAG) -> None:
    # log s_j with s_j ~ InverseGamma(1.5, 1): E[log s] = log b0 - digamma(a0); inactive slots are zero.
    gen = torch.Generator().manual_seed(5)
    models = torch.randint(0, dag.num_models, (40_000,), generator=gen)
    theta = dag.sample_prior(models, gen)
    assert (theta[~dag.mask(models)] == 0).all()
    log_s = theta[:, dag.num_slots :]
    se = log_s.std() / math.sqrt(log_s.numel())
    assert abs(float(log_s.mean()) - (0.0 - float(torch.special.digamma(torch.tensor(1.5))))) < 4.5 * float(se)


def test_model_index_of_inverts_adjacency_for_every_dag() -> None:
    problem = LinearDAG(num_nodes=4, num_samples=20)
    models = problem.model_space.all_indices()
    adjacency = problem.adjacency(models)
    assert adjacency.shape == (543, 4, 4) and adjacency.dtype == torch.bool
    assert torch.equal(problem.model_index_of(adjacency), models)
    assert is_acyclic(adjacency).all()


def test_model_index_of_refuses_cyclic_graphs_and_names_the_rows() -> None:
    problem = LinearDAG(num_nodes=4, num_samples=20)
    graphs = problem.adjacency(torch.tensor([0, 5, 7]))
    graphs[1, 0, 1] = graphs[1, 1, 2] = graphs[1, 2, 0] = True  # 0 -> 1 -> 2 -> 0
    graphs[2, 3, 3] = True  # a self-loop
    with pytest.raises(ValueError, match=r"rows 1, 2 are not DAGs"):
        problem.model_index_of(graphs)
    with pytest.raises(ValueError, match="shape"):
        problem.model_index_of(graphs[:, :3, :3])


def test_linear_dag_is_a_dag_problem() -> None:
    problem = LinearDAG(num_nodes=3, num_samples=30)
    assert isinstance(problem, DAGProblem)
    data = problem.observations()
    assert data.shape == (30, 3) and data.dtype == torch.float64
    assert torch.equal(data, problem.data)
    assert int(problem.model_index_of(problem.true_adjacency[None])) >= 0


def test_is_acyclic_agrees_with_the_enumerated_dags() -> None:
    # Every adjacency pattern on 4 nodes without self-loops: 4,096 graphs, 543 of them DAGs.
    codes = torch.arange(2**12)
    acyclic = is_acyclic(codes_to_adjacency(codes, 4))
    assert torch.equal(acyclic, torch.isin(codes, enumerate_dags(4)))


def test_task_metrics_score_graphs_against_the_truth_and_the_exact_posterior() -> None:
    """The true graph alone: F1 1, SHD 0; the exact posterior itself: MMD 0 and positive SHD (d = 4)."""
    problem = make_problem("linear-dag-d4")
    true_model = problem.model_index_of(problem.true_adjacency[None])
    point = problem.task_metrics(ModelProbs(true_model, torch.ones(1, dtype=torch.float64)), None)
    assert point["edge_f1"].value == pytest.approx(1.0, abs=1e-7) and point["shd"].value == 0.0
    assert point["brier"].value == 0.0 and point["mmd_hamming"].value > 0
    assert point["mmd"].value == pytest.approx(point["mmd_hamming"].value ** 0.5, rel=1e-12)  # the paper's scale
    exact = problem.task_metrics(problem.reference_model_probs(), None)
    assert exact["mmd_hamming"].value == pytest.approx(0.0, abs=1e-15) and exact["shd"].value > 0
    # Draws instead of probabilities: equally weighted graphs of the draws.
    draws = problem.reference_draws(4000, torch.Generator().manual_seed(0))
    sampled = problem.task_metrics(None, draws)
    # Edge frequencies of 4,000 exact draws differ from the exact edge probabilities by about 0.008 each.
    assert sampled["mmd_hamming"].value < 2 / 16 * 12 * 0.03**2
    assert sampled["shd"].value == pytest.approx(exact["shd"].value, abs=0.15)
