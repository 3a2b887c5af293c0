"""linear-dag-bge-er/-sf: the exact posterior is the BGe posterior, the data follow the paper, options are checked."""

from __future__ import annotations

import math

import pytest
import torch

from problems.linear_dag_bge.bge import BGe
from problems.linear_dag_bge.problem import STD_NORMAL_ENTROPY, sampled_mmd
from suite.core.registry import make_problem
from suite.core.types import ModelProbs


@pytest.fixture(scope="module")
def er():
    return make_problem("linear-dag-bge-er", data_seed=1, graph_prior="uniform")


def test_posterior_is_bge_with_a_uniform_prior(er):
    """p(G | D) from an independent BGe object, by brute force over a few DAGs, matches the problem's."""
    score = BGe(er.observations())
    pick = torch.tensor([0, 5, 1000, 29280])
    log_ml = score.log_marginal_likelihood(er.adjacency(pick))
    log_z = torch.logsumexp(score.log_marginal_likelihood(er.adjacency(er.model_space.all_indices())), 0)
    exact = er.reference_model_probs().prob[pick]
    assert torch.allclose(torch.exp(log_ml - log_z), exact, rtol=1e-9, atol=0)
    assert math.isclose(er.exact_log_evidence(), float(log_z) - math.log(29281), rel_tol=1e-12)


def test_log_joint_has_the_graph_marginal_and_a_standard_normal_coordinate(er):
    m = torch.tensor([3, 3, 77])
    theta = torch.tensor([[0.0], [1.5], [-2.0]], dtype=torch.float64)
    log_joint = er.log_joint(m, theta)
    graph_part = er.log_likelihood()[m] - math.log(29281)
    assert torch.allclose(log_joint - graph_part, -0.5 * theta[:, 0] ** 2 - 0.5 * math.log(2 * math.pi))
    assert er.dim_max == 1 and bool(er.mask(m).all())


def test_exact_entropy_and_draws(er):
    probs = er.reference_model_probs().prob
    h_graph = float(-(probs * probs.clamp_min(1e-300).log()).sum())
    assert math.isclose(er.exact_entropy(), h_graph + STD_NORMAL_ENTROPY, rel_tol=1e-12)
    draws = er.reference_draws(50_000, torch.Generator().manual_seed(0))
    top = int(probs.argmax())
    share = float((draws.model_index == top).double().mean())
    sd = math.sqrt(float(probs[top]) * (1 - float(probs[top])) / 50_000)
    assert abs(share - float(probs[top])) < 5 * sd
    assert abs(float(draws.theta.std()) - 1.0) < 0.02  # sd of a 50,000-draw sample sd: ~0.003


def test_data_follow_the_paper():
    problem = make_problem("linear-dag-bge-sf", data_seed=4)
    assert problem.observations().shape == (500, 5) and problem.heldout.shape == (100, 5)
    weights = problem.scm.weights[problem.true_adjacency]
    assert bool(((weights >= 0.5) & (weights <= 1.5)).all())  # positive: the paper states no sign
    assert problem.config()["graph_type"] == "sf"
    again = make_problem("linear-dag-bge-sf", data_seed=4)
    assert torch.equal(problem.observations(), again.observations())
    assert not torch.equal(problem.observations(), make_problem("linear-dag-bge-sf", data_seed=5).observations())


@pytest.mark.parametrize("name", ["linear-dag-bge-er", "linear-dag-bge-sf"])
@pytest.mark.parametrize("graph_prior", ["uniform", "authors"])
def test_local_scores_sum_to_the_graph_scores(name, graph_prior):
    """Per-node scores (BGe plus the prior's term) add up to log p(G) + log BGe(D | G) up to one constant."""
    problem = make_problem(name, data_seed=2, graph_prior=graph_prior)
    scores = problem.local_log_scores()
    pick = torch.arange(0, 29281, 997)
    adjacency = problem.adjacency(pick)
    parents = (adjacency.long() << torch.arange(5)[:, None]).sum(1)
    total = scores[torch.arange(5)[None, :], parents].sum(-1)
    joint = problem.log_likelihood()[pick] + problem.log_model_prior(pick)
    assert torch.allclose(total - joint, (total - joint)[0].expand(len(pick)), rtol=0, atol=1e-9)


def test_authors_graph_priors_as_their_code_computes_them():
    """ER: E log p + (N - E) log1p(p), p = 1/2 (3^-E, their log1p kept); SF: -3 sum_j log(1 + in-degree); normalised."""
    er, sf = make_problem("linear-dag-bge-er", data_seed=3), make_problem("linear-dag-bge-sf", data_seed=3)
    graphs = er.adjacency(er.model_space.all_indices()).double()
    edges = graphs.sum((-1, -2))
    er_prior = edges * math.log(0.5) + (10 - edges) * math.log1p(0.5)
    sf_prior = (-3 * torch.log1p(graphs.sum(-2))).sum(-1)
    for problem, prior in ((er, er_prior), (sf, sf_prior)):
        expected = prior - torch.logsumexp(prior, 0)
        assert torch.allclose(problem.log_model_prior(er.model_space.all_indices()), expected, rtol=0, atol=1e-12)
        posterior = torch.softmax(expected + problem.log_likelihood(), 0)
        assert torch.allclose(problem.reference_model_probs().prob, posterior, rtol=1e-9, atol=1e-300)
    # the empty graph is 3^10 times as likely a priori as the complete order (10 edges) under ER
    empty, full = int(edges.argmin()), int(edges.argmax())
    gap = er.log_model_prior(torch.tensor([empty])) - er.log_model_prior(torch.tensor([full]))
    assert float(gap) == pytest.approx(10 * math.log(3), rel=1e-12)


def test_authors_benchmark_graphs():
    """ER data sets have exactly d edges; SF ones are trees whose edges point from new nodes to old (sinks as hubs)."""
    for seed in range(10):
        er = make_problem("linear-dag-bge-er", data_seed=seed)
        assert int(er.true_adjacency.sum()) == 5
        sf = make_problem("linear-dag-bge-sf", data_seed=seed)
        assert int(sf.true_adjacency.sum()) == 4
        # new -> old: every node has at most one child (its one attachment); old -> new: at most one parent
        assert int(sf.true_adjacency.sum(1).max()) <= 1
    old = make_problem(
        "linear-dag-bge-er", data_seed=4, er_edges="expected", sf_orientation="old_to_new", graph_prior="uniform"
    )
    assert old.config()["er_edges"] == "expected" and old.config()["graph_prior"] == "uniform"


def test_sampled_mmd_estimates_the_exact_mmd():
    """The authors' 100-sample estimator scatters around the exact MMD (mean over data-set-fixed repeats)."""
    problem = make_problem("linear-dag-bge-er", data_seed=1, mmd_samples=100)
    model_probs = ModelProbs(torch.arange(0, 29281, 50), torch.full((586,), 1 / 586, dtype=torch.float64))
    metrics = problem.task_metrics(model_probs, None)
    assert metrics["mmd"].value == pytest.approx(metrics["mmd_hamming"].value ** 0.5, rel=1e-12)
    again = problem.task_metrics(model_probs, None)["mmd_sampled"].value
    assert again == metrics["mmd_sampled"].value  # seeded by data_seed
    # the estimator's mean over many sample pairs is the exact MMD^2 (unbiased U-statistic), within Monte Carlo error
    generator = torch.Generator().manual_seed(0)
    truth = problem.reference_model_probs()
    estimates = []
    for _ in range(200):
        q = model_probs.index[torch.multinomial(model_probs.prob, 100, True, generator=generator)]
        p = truth.index[torch.multinomial(truth.prob, 100, True, generator=generator)]
        estimates.append(sampled_mmd(problem.adjacency(q), problem.adjacency(p)) ** 2)
    values = torch.tensor(estimates, dtype=torch.float64)
    se = float(values.std()) / math.sqrt(len(values))
    assert abs(float(values.mean()) - metrics["mmd_hamming"].value) < 4 * se
    # the record's one estimate is one draw of that estimator: within 4 of its standard deviations of the exact MMD
    spread = float(values.sqrt().std())
    assert abs(metrics["mmd_sampled"].value - metrics["mmd"].value) < 4 * spread


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"graph_type": "sf"}, "linear-dag-bge-sf"),
        ({"graph_type": "tree"}, "valid: er, sf"),
        ({"num_nodes": 6}, r"\[2, 5\]"),
        ({"alpha_w": 3.0}, "alpha_w must be > d \\+ 1"),
        ({"num_samples": 1}, "num_samples >= 2"),
        ({"er_edges": "some"}, "valid: exact, expected"),
        ({"sf_orientation": "up"}, "valid: new_to_old, old_to_new"),
        ({"graph_prior": "flat"}, "valid: authors, uniform"),
        ({"mmd_samples": 1}, "mmd_samples must be 0"),
    ],
)
def test_bad_options_are_refused(options, message):
    with pytest.raises(ValueError, match=message):
        make_problem("linear-dag-bge-er", **options)
