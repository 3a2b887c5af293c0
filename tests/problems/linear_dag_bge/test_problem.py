"""linear-dag-bge-er/-sf: the exact posterior is the BGe posterior, the data follow the paper, options are checked."""

from __future__ import annotations

import math

import pytest
import torch

from problems.linear_dag_bge.bge import BGe
from problems.linear_dag_bge.problem import STD_NORMAL_ENTROPY
from suite.registry import make_problem


@pytest.fixture(scope="module")
def er():
    return make_problem("linear-dag-bge-er", data_seed=1)


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


def test_local_scores_sum_to_the_graph_scores(er):
    scores = er.local_log_scores()
    adjacency = er.adjacency(torch.arange(0, 29281, 997))
    parents = (adjacency.long() << torch.arange(5)[:, None]).sum(1)
    total = scores[torch.arange(5)[None, :], parents].sum(-1)
    assert torch.allclose(total, er.log_likelihood()[torch.arange(0, 29281, 997)], rtol=1e-12, atol=0)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"graph_type": "sf"}, "linear-dag-bge-sf"),
        ({"graph_type": "tree"}, "valid: er, sf"),
        ({"num_nodes": 6}, r"\[2, 5\]"),
        ({"alpha_w": 3.0}, "alpha_w must be > d \\+ 1"),
        ({"num_samples": 1}, "num_samples >= 2"),
    ],
)
def test_bad_options_are_refused(options, message):
    with pytest.raises(ValueError, match=message):
        make_problem("linear-dag-bge-er", **options)
