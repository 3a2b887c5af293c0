"""kl_joint and kl_reverse: the runner's exact divergences where a problem knows H(m, theta) and log Z."""

import torch

from problems.conjugate_vs.problem import ConjugateVS
from suite.core.method import Result
from suite.core.registry import make_problem
from suite.core.types import Estimate
from suite.run.runner import evaluate, exact_divergences, gold_draws


def test_the_exact_posterior_as_q_has_zero_divergences() -> None:
    # q = pi exactly: log q - log pi~ = -log Z at every draw, so -ELBO = -log Z with no Monte Carlo error and
    # kl_reverse = 0 to rounding; the cross-entropy is a Monte Carlo estimate of H, so kl_joint is 0 within 4 SE.
    problem = ConjugateVS(6)
    log_z = problem.exact_log_evidence()
    result = Result(
        model_probs=problem.reference_model_probs(),
        log_density=lambda m, theta: problem.log_joint(m, theta) - log_z,
        sample_q=problem.training_draws,
    )
    scores = evaluate(problem, result, gold_draws(problem, 20_000), torch.device("cpu"), torch.float64)
    assert abs(scores["kl_reverse"].value) < 1e-9
    assert abs(scores["kl_joint"].value) < 4 * scores["kl_joint"].se
    assert scores["kl_joint"].se == scores["cross_entropy"].se


def test_divergences_shift_the_estimates_by_the_exact_constants() -> None:
    problem = ConjugateVS(3)
    scores = {"cross_entropy": Estimate(10.0, 0.1), "neg_elbo": Estimate(-5.0, 0.2)}
    out = exact_divergences(problem, scores)
    assert out["kl_joint"] == Estimate(10.0 - problem.exact_entropy(), 0.1)
    assert out["kl_reverse"] == Estimate(-5.0 + problem.exact_log_evidence(), 0.2)
    assert exact_divergences(problem, {}) == {}
    assert exact_divergences(make_problem("sas"), scores) == {}  # no exact entropy or log Z: nothing added
